"""The shape of a catalog entry; the entries live in ``gpu_exporter.catalogs``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["gauge", "counter"]

GPU = ("gpu", "uuid")


@dataclass(frozen=True, slots=True)
class Metric:
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

    def __post_init__(self) -> None:
        if self.kind == "counter" and not self.name.endswith("_total"):
            raise ValueError(f"counter {self.name} must end in _total")
        if self.kind == "gauge" and self.name.endswith("_total"):
            raise ValueError(f"gauge {self.name} must not end in _total")


def metric_spec(name: str, kind: Kind, help: str, labels: tuple[str, ...],
                collector: str, *, detail: bool = False) -> Metric:
    return Metric(name, kind, help, labels, collector, detail)
