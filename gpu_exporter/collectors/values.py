"""What a reader does with one reading: checks it against the bounds its
metric's handle carries (``catalog_types.Bounds``), then adds it through that
handle, or leaves the series absent for the poll, counts a read error and says
so once in the log.

NVML answers "not available" with all-ones values (0xFF, 0xFFFF, 0xFFFFFFFF,
0xFFFFFFFFFFFFFFFF) that look like readings once converted, and a faulty
sensor or a driver bug can report anything; /proc can hold garbage too. A
counter that goes backwards is no reading either, unless its metric says its
resets are documented.
"""

from __future__ import annotations

import logging
from typing import Protocol

from gpu_exporter.facts.catalog_types import Metric
from gpu_exporter.poll.snapshot import SnapshotBuilder

log = logging.getLogger(__name__)


class Tally(Protocol):
    """One source of readings (a GPU, the host) as the checks keep it: its
    read errors this poll, the series already logged, and how the log names
    it. Its counters' last accepted readings are kept apart (``Counters``):
    what a reader checks is no part of the source."""

    errors: int

    @property
    def warned(self) -> set[str]: ...

    @property
    def label(self) -> str:
        """How a log line names this source: "GPU 3", "host"."""
        ...

    @property
    def kind(self) -> str:
        """What no source of its kind can report: "GPU", "host"."""
        ...


# Each counter's last accepted reading, by series_key(): a counter that goes
# backwards is no reading.
Counters = dict[str, float]


class CounterMemory:
    """Each GPU's counters' last accepted readings, by GPU index: forgotten
    for a GPU that came back (it may have been reset), and for every GPU when
    NVML is initialised anew (keep())."""

    def __init__(self) -> None:
        self._gpus: dict[int, Counters] = {}
        self._generation: int | None = None

    def keep(self, generation: int) -> None:
        """The GPUs of this NVML initialisation: those of another are forgotten."""
        if generation != self._generation:
            self._gpus.clear()
            self._generation = generation

    def of(self, index: int) -> Counters:
        return self._gpus.setdefault(index, {})

    def forget(self, index: int) -> None:
        self._gpus.pop(index, None)


def series_key(metric: Metric, series: tuple[str, ...]) -> str:
    """How a series is named in the log and in a source's counters: the
    metric, then the label values that tell its series apart (those after
    the source's own: a GPU's index and UUID)."""
    return metric.name + (":" + "/".join(series) if series else "")


def plausible(metric: Metric, value: float, ceiling: float | None = None) -> bool:
    """Whether ``value`` can be a reading of ``metric`` (``ceiling``: the
    board's own figure it is held against)."""
    if metric.bounds is None:
        raise ValueError(f"{metric.name} has no bounds")
    return metric.bounds.holds(value, ceiling)


def accept(t: Tally, metric: Metric, value: float, *series: str,
           ceiling: float | None = None) -> bool:
    """Check a gauge reading of ``t``: True to export it; False leaves it
    absent this poll, counts a read error and logs it once per source and
    series."""
    if plausible(metric, value, ceiling):
        return True
    reject(t, series_key(metric, series), value)
    return False


def accept_share(t: Tally, metric: Metric, value: float, *series: str) -> float | None:
    """Check a share of an interval (Bounds.slack): the value to export, moved
    to the range's edge where it lies just outside; None where it lies
    farther out (counted and logged as accept() does)."""
    bounds = metric.bounds
    if bounds is None:
        raise ValueError(f"{metric.name} has no bounds")
    if not bounds.low - bounds.slack <= value <= bounds.high + bounds.slack:
        reject(t, series_key(metric, series), value)
        return None
    return min(bounds.high, max(bounds.low, value))


def accept_counter(t: Tally, last: Counters, metric: Metric, value: float,
                   *series: str) -> bool:
    """Check a counter reading: in range, and not lower than the last one in
    ``last`` (unless its resets are documented)."""
    key = series_key(metric, series)
    if plausible(metric, value) and not _backwards(last, metric, series, key, value):
        return True
    reject(t, key, value)
    return False


def resettable(metric: Metric, series: tuple[str, ...]) -> bool:
    """Whether this series of ``metric`` may go back to 0 (Bounds.resets)."""
    resets = metric.bounds.resets if metric.bounds is not None else False
    if not isinstance(resets, tuple):
        return resets
    label, value = resets
    at = metric.labels.index(label) - (len(metric.labels) - len(series))
    return 0 <= at < len(series) and series[at] == value


def went_backwards(last: Counters, metric: Metric, series: tuple[str, ...],
                   value: float) -> bool:
    """Whether this counter series is lower than its last accepted reading
    in ``last`` with no documented reset; remembers ``value`` when it is not."""
    return _backwards(last, metric, series, series_key(metric, series), value)


def _backwards(counters: Counters, metric: Metric, series: tuple[str, ...], key: str,
               value: float) -> bool:
    """went_backwards() for the series named ``key``."""
    last = counters.get(key)
    if last is not None and value < last and not resettable(metric, series):
        return True
    counters[key] = value
    return False


def reject(t: Tally, series: str, value: float) -> None:
    t.errors += 1
    tag = "implausible:" + series
    if tag not in t.warned:
        t.warned.add(tag)
        log.warning("%s: %s reads %r, which no %s can report (a 'not available' value "
                    "or a faulty reading); left out while it does", t.label, series, value,
                    t.kind)


class Series:
    """One source's series this poll (a GPU's: its index and UUID first), each
    value through its metric's handle and checked against its bounds.

    A series' label values are ``base + series``: a tuple concatenation, and
    for the many series with no labels of their own the base tuple itself,
    shared rather than copied (some 350 series a poll on an 8-GPU node).
    """

    __slots__ = ("base", "counters", "out", "tally")

    def __init__(self, out: SnapshotBuilder, tally: Tally, base: tuple[str, ...],
                 counters: Counters) -> None:
        self.out = out
        self.tally = tally
        self.base = base
        self.counters = counters

    def gauge(self, metric: Metric, value: float | None, *series: str,
              ceiling: float | None = None) -> float | None:
        """Add a gauge reading; the value, or None where there is none or it
        is implausible (then absent this poll)."""
        if value is None:
            return None
        # accept(), inline: a GPU's pass checks some 30 gauges every poll.
        bounds = metric.bounds
        if bounds is not None and not bounds.holds(value, ceiling):
            reject(self.tally, series_key(metric, series), value)
            return None
        self.out.add_values(metric, self.base + series, value)
        return value

    def counter(self, metric: Metric, value: float | None, *series: str) -> float | None:
        """Add a counter reading; None where there is none, it is implausible or
        it went backwards."""
        if value is None:
            return None
        if metric.bounds is not None and not accept_counter(self.tally, self.counters, metric,
                                                            value, *series):
            return None
        self.out.add_values(metric, self.base + series, value)
        return value

    def state(self, metric: Metric, value: float | bool, *series: str) -> None:
        """Add a value that needs no check: a 0/1 state, an info series' 1."""
        self.out.add_values(metric, self.base + series, value)
