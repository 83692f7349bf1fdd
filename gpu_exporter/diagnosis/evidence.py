"""How a finding's evidence reads to a person: each key ends in its unit
(``_ratio``, ``_bytes_per_second``, ``_celsius`` ...), shown in plain units
(``host cpu iowait 35 %``). Shared by the diagnosis, which writes the
explanation of a consequence into its cause's evidence, and by the commands and
pages that print findings."""

from __future__ import annotations

from collections.abc import Mapping

# Evidence keys end in their unit; this is how each is shown to a person.
_GIB = 1024**3


def percent(ratio: float) -> str:
    """A ratio (0-1) as a person reads it, one rule wherever a share is shown
    (evidence, the node page's table, facts and charts): rounded first to the
    0.1 % the rules keep in evidence, so a value and its evidence read the
    same; under 1 % with one decimal (a process at 0.4 % CPU is not at 0 %),
    whole percents above."""
    share = round(float(ratio), 3) * 100
    if 0 < abs(share) < 1:
        return f"{share:.1f} %"
    return f"{share:.0f} %"


def format_value(key: str, value: object) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, int | float):
        return str(value)
    v = float(value)
    if key.endswith("_seconds_per_second"):
        return f"{v:.2f} s/s"
    if key.endswith("_bytes_per_second"):
        return f"{v / 1e6:.1f} MB/s"
    if key.endswith("_ratio"):
        return percent(v)
    if key.endswith("_bytes"):
        return f"{v / _GIB:.1f} GiB"
    if key.endswith("_hertz"):
        return f"{v / 1e6:.0f} MHz"
    if key.endswith("_celsius"):
        return f"{v:.0f} °C"
    if key.endswith("_watts"):
        return f"{v:.0f} W"
    return f"{v:g}"


def _label(key: str) -> str:
    for suffix in ("_seconds_per_second", "_bytes_per_second", "_ratio", "_bytes", "_hertz",
                   "_celsius", "_watts"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
            break
    return key.replace("_", " ")


def evidence_line(evidence: Mapping[str, object]) -> str:
    return ", ".join(f"{_label(k)} {format_value(k, v)}" for k, v in evidence.items())
