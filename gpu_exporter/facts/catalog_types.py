"""The shape of a catalog entry; the entries live in ``gpu_exporter.catalogs``.

An entry is the metric's one handle: readers add values through it
(``out.add(device.POWER_WATTS, ...)``), the exposition, the README and the
tests read their names, types and help from it, and the readers check each
reading against the bounds it carries before it is exported or handed on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Kind = Literal["gauge", "counter"]

GPU = ("gpu", "uuid")


@dataclass(frozen=True, slots=True)
class Bounds:
    """What a reading of a metric can be, in the exporter's base units, both
    ends inclusive. Generous on purpose: they reject what no board or host can
    report (NVML's "not available" values, garbage), never a reading that is
    merely unusual."""

    low: float
    high: float
    # How far above its ceiling (the board's own figure the reader passes: the
    # power limit, the memory total, the clock's maximum) a reading may go.
    over_ceiling: float | None = None
    # How far outside [low, high] a share computed over an interval may land
    # for reasons that are no fault; it is exported at the edge, beyond this it
    # is rejected.
    slack: float = 0.0
    # A counter whose resets are documented (the driver reloaded, an interface
    # re-created): True for every series, or the (label, value) of the series
    # that reset. Any other counter that goes backwards is not a reading.
    resets: bool | tuple[str, str] = False

    def holds(self, value: float, ceiling: float | None = None) -> bool:
        """Whether ``value`` can be a reading (``ceiling``: the board's figure)."""
        if not self.low <= value <= self.high:
            return False
        if ceiling is None:
            return True
        if self.over_ceiling is None:
            raise ValueError("this metric is not held against a ceiling")
        return value <= ceiling * self.over_ceiling


@dataclass(frozen=True, slots=True, eq=False)
class Metric:
    """One metric: compared and hashed by identity, as the one handle it is."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]
    collector: str
    # Exported only with --metrics.detail: detail a fleet rarely needs (per-link
    # NVLink counters, sample min/max, host series node_exporter already has),
    # kept out of the default series budget. The readings behind it are taken
    # either way, so the diagnosis sees the same.
    detail: bool = False
    # What a reading can be; None where a reader does not check it (a fact, a
    # 0/1 state, a count the exporter keeps itself).
    bounds: Bounds | None = None

    def __post_init__(self) -> None:
        if self.kind == "counter" and not self.name.endswith("_total"):
            raise ValueError(f"counter {self.name} must end in _total")
        if self.kind == "gauge" and self.name.endswith("_total"):
            raise ValueError(f"gauge {self.name} must not end in _total")
        resets = self.bounds.resets if self.bounds is not None else False
        if resets and self.kind != "counter":
            raise ValueError(f"gauge {self.name} cannot reset")
        if isinstance(resets, tuple) and resets[0] not in self.labels:
            raise ValueError(f"{self.name} resets by a label it does not have: {resets[0]}")


def metric_spec(name: str, kind: Kind, help: str, labels: tuple[str, ...],
                collector: str, *, detail: bool = False, bounds: Bounds | None = None) -> Metric:
    return Metric(name, kind, help, labels, collector, detail, bounds)


def declared(namespace: Mapping[str, object]) -> tuple[Metric, ...]:
    """The metrics a catalogs module declares, in the order it declares them:
    ``METRICS = declared(globals())`` at its end, so no handle can be
    declared and left out of the catalog."""
    return tuple(value for value in namespace.values() if isinstance(value, Metric))
