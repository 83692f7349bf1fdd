"""Fast exposition of a snapshot in the Prometheus text format and in
OpenMetrics, rendered at most once per snapshot and format, then served from
memory (gzip too) until the next poll.

The reference is prometheus_client's own rendering of the same snapshot
through ``SnapshotCollector`` (``web.reference``, loaded by tests, never by
the daemon); a test parses both and requires identical samples. This path
exists because a scrape of an 8-GPU node (about 2000 series) through
prometheus_client costs ~14 ms of CPU, and an exporter on every GPU node should
cost nearly nothing.
"""

from __future__ import annotations

import gzip
import math
import threading
from dataclasses import dataclass, field

from gpu_exporter.facts.safetext import terminal_safe
from gpu_exporter.poll.catalog import CATALOG
from gpu_exporter.poll.snapshot import Family, Snapshot

TEXT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def _escape_label(value: str) -> str:
    # Label values come from the node (process names, GPU names, pod names):
    # a control character (an escape sequence, a bidirectional override) is
    # shown as its escape (\x1b) rather than sent raw to whoever reads the
    # exposition in a terminal; prometheus_client sends it raw. A newline
    # keeps the exposition's own escape, so a parser reads back the newline.
    value = "\n".join(terminal_safe(part) for part in value.split("\n"))
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(v: float) -> str:
    """A sample value as prometheus_client writes it (its floatToGoString, which
    the parity tests compare with): repr(), except that a positive value of a
    million or more with a decimal point is written with an exponent, as Go
    does (2345678.5 -> 2.3456785e+06). Written here rather than imported: the
    exposition served by the daemon does not load prometheus_client (about
    2 MiB of modules on every node)."""
    if -1e6 < v < 1e6:
        return repr(v)  # one C call: the common case
    if not math.isfinite(v):
        return "+Inf" if v > 0 else "-Inf" if v < 0 else "NaN"
    s = repr(v)
    dot = s.find(".")
    if v > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


@dataclass
class _Family:
    """Pre-built header lines of one metric in both formats."""

    text_header: str
    om_header: str
    sample_name: str
    label_names: tuple[str, ...]


def _families() -> dict[str, _Family]:
    out = {}
    for m in CATALOG:
        base = m.name[: -len("_total")] if m.kind == "counter" else m.name
        help_line = f"# HELP {base} {_escape_help(m.help)}\n"
        text = f"# HELP {m.name} {_escape_help(m.help)}\n# TYPE {m.name} {m.kind}\n"
        om = f"{help_line}# TYPE {base} {m.kind}\n"
        out[m.name] = _Family(text, om, m.name, m.labels)
    return out


_FAMILIES = _families()


class LabelCache:
    """Each series' ``name{a="x",b="y"} `` line prefix, per metric: label values
    repeat poll after poll, so a render mostly looks prefixes up."""

    def __init__(self, limit: int = 50_000) -> None:
        self._prefixes: dict[str, dict[tuple[str, ...], str]] = {}
        self._size = 0
        self._limit = limit

    def get(self, names: tuple[str, ...], values: tuple[str, ...]) -> str:
        """The formatted label set alone (``{a="x"}``, or "" without labels)."""
        pairs = ",".join(f'{n}="{_escape_label(v)}"'
                         for n, v in sorted(zip(names, values, strict=True)))
        return "{" + pairs + "}" if pairs else ""

    def prefixes(self, name: str) -> dict[tuple[str, ...], str]:
        table = self._prefixes.get(name)
        if table is None:
            table = self._prefixes[name] = {}
        return table

    def prefix(self, fam: _Family, values: tuple[str, ...]) -> str:
        text = f"{fam.sample_name}{self.get(fam.label_names, values)} "
        if self._size >= self._limit:
            # Bounded: series churn (processes come and go) must not grow memory.
            self._prefixes.clear()
            self._size = 0
        self.prefixes(fam.sample_name)[values] = text
        self._size += 1
        return text


# Value -> its exposition text. Most values repeat poll after poll (0 and 1
# flags, limits, maxima, totals), and formatting a float costs several times a
# lookup. Two generations of at most _FORMATTED_LIMIT values each: when the
# young one is full it becomes the old one, so values still in use survive the
# turnover (counters that move every poll would otherwise empty a single table
# every few polls) and memory stays bounded. Zero never enters (0.0 == -0.0
# would share an entry).
_FORMATTED: dict[float, str] = {}
_FORMATTED_OLD: dict[float, str] = {}
_FORMATTED_LIMIT = 4096


def _remember(v: float) -> str:
    global _FORMATTED, _FORMATTED_OLD
    text = _FORMATTED_OLD.get(v) or _value(v)
    if v:
        if len(_FORMATTED) >= _FORMATTED_LIMIT:
            _FORMATTED_OLD, _FORMATTED = _FORMATTED, {}
        _FORMATTED[v] = text
    return text


class FamilyTexts:
    """Each family's text from the last render, with the series it came from.

    Most families (identity, limits, maxima, flags, the diagnosis table) have
    the same series poll after poll: on a busy 8-GPU node about 1,700 of 2,500
    series sit in families that did not change. Comparing a family's label
    values and values with the last ones is two C-level list comparisons, a
    fraction of formatting them. At most one entry per family and format.
    (0.0 == -0.0: a family whose only change is a zero's sign keeps its text;
    both are zero to Prometheus.)
    """

    def __init__(self) -> None:
        self._texts: dict[tuple[str, bool], tuple[Family, str]] = {}

    def get(self, name: str, openmetrics: bool, family: Family) -> str | None:
        held = self._texts.get((name, openmetrics))
        if held is None:
            return None
        last = held[0]
        if last is family or (last.values == family.values and last.labels == family.labels):
            return held[1]
        return None

    def put(self, name: str, openmetrics: bool, family: Family, text: str) -> None:
        self._texts[(name, openmetrics)] = (family, text)


def render(snap: Snapshot, openmetrics: bool, labels: LabelCache,
           families: FamilyTexts | None = None) -> bytes:
    """The exposition of ``snap``: where each series is first formed into
    text (the poll keeps only label values and values)."""
    parts: list[str] = []
    append = parts.append
    formatted = _FORMATTED.get  # a render sees one generation; _remember the other
    for m in CATALOG:
        family = snap.families.get(m.name)
        if family is None or not family.values:
            continue
        if families is not None:
            text = families.get(m.name, openmetrics, family)
            if text is not None:
                append(text)
                continue
        fam = _FAMILIES[m.name]
        known = labels.prefixes(m.name).get
        # One comprehension per family, the common value format inlined: this
        # loop runs once per series of a family that changed.
        text = "".join([fam.om_header if openmetrics else fam.text_header,
                        *[(known(values) or labels.prefix(fam, values))
                          + (formatted(value) or _remember(value)) + "\n"
                          for values, value in zip(family.labels, family.values,
                                                   strict=True)]])
        if families is not None:
            families.put(m.name, openmetrics, family, text)
        append(text)
    if openmetrics:
        append("# EOF\n")
    return "".join(parts).encode()


@dataclass
class RenderCache:
    """The newest snapshot's renderings, keyed by (openmetrics, gzip)."""

    labels: LabelCache = field(default_factory=LabelCache)
    families: FamilyTexts = field(default_factory=FamilyTexts)
    _snap: Snapshot | None = None
    _bodies: dict[tuple[bool, bool], bytes] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def body(self, snap: Snapshot, openmetrics: bool, compressed: bool) -> bytes:
        with self._lock:
            if snap is not self._snap:
                self._snap, self._bodies = snap, {}
            key = (openmetrics, compressed)
            cached = self._bodies.get(key)
            if cached is None:
                plain = self._bodies.get((openmetrics, False))
                if plain is None:
                    plain = self._bodies[(openmetrics, False)] = render(
                        snap, openmetrics, self.labels, self.families)
                # Level 1: a third of level 6's CPU for a body ~25 % larger, which
                # no scrape over a LAN notices (measured in BENCHMARKS.md).
                cached = gzip.compress(plain, compresslevel=1) if compressed else plain
                self._bodies[key] = cached
            return cached
