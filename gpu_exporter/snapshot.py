"""One poll's worth of samples, immutable once built.

Collectors add samples to a :class:`SnapshotBuilder`; the poller freezes it into
a :class:`Snapshot` and publishes it by swapping one reference. ``/metrics``
renders whatever snapshot is newest, so a GPU or process that is gone is simply
absent from the next one: nothing has to be removed by hand.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpu_exporter.catalog import metric


@dataclass(frozen=True, slots=True)
class Sample:
    labels: tuple[str, ...]  # values in the order of the metric's catalog labels
    value: float


@dataclass(frozen=True)
class Snapshot:
    """Samples by metric name, plus facts other parts of the exporter read."""

    timestamp: float  # unix time the poll started
    samples: Mapping[str, tuple[Sample, ...]]
    # Structured per-poll facts (GPU states, processes...) for the diagnosis
    # rules and the JSON endpoints; never rendered as metrics directly.
    facts: Mapping[str, Any] = field(default_factory=dict)

    def get(self, name: str, **labels: str) -> float | None:
        """The value of one series, or None. Convenience for tests and rules."""
        spec = metric(name)
        for s in self.samples.get(name, ()):
            if all(s.labels[spec.labels.index(k)] == v for k, v in labels.items()):
                return s.value
        return None

    def series(self, name: str) -> list[tuple[dict[str, str], float]]:
        spec = metric(name)
        return [(dict(zip(spec.labels, s.labels, strict=True)), s.value)
                for s in self.samples.get(name, ())]


class SnapshotBuilder:
    def __init__(self, timestamp: float) -> None:
        self.timestamp = timestamp
        self._samples: dict[str, list[Sample]] = {}
        self.facts: dict[str, Any] = {}

    def add(self, name: str, value: float | int | bool, /, **labels: str) -> None:
        spec = metric(name)
        if len(labels) != len(spec.labels):
            missing = set(spec.labels) - set(labels)
            extra = set(labels) - set(spec.labels)
            raise ValueError(f"{name}: labels missing {sorted(missing)}, "
                             f"unexpected {sorted(extra)}")
        try:
            values = tuple(str(labels[k]) for k in spec.labels)
        except KeyError as exc:
            raise ValueError(f"{name}: missing label {exc}") from None
        v = float(value)
        if math.isnan(v):
            # A NaN from a bad read is no value: never export it as if it were one.
            return
        self._samples.setdefault(name, []).append(Sample(values, v))

    def merge(self, other: SnapshotBuilder) -> None:
        """Take all samples of ``other`` (read into a scratch builder first)."""
        for name, samples in other._samples.items():
            self._samples.setdefault(name, []).extend(samples)

    def discard(self, predicate: Callable[[str], bool]) -> None:
        """Drop every family whose name matches ``predicate``."""
        for name in [n for n in self._samples if predicate(n)]:
            del self._samples[name]

    def build(self) -> Snapshot:
        frozen = {k: tuple(v) for k, v in self._samples.items()}
        return Snapshot(self.timestamp, MappingProxyType(frozen),
                        MappingProxyType(dict(self.facts)))
