"""One poll's worth of samples and readings, immutable once built.

Collectors add samples to a :class:`SnapshotBuilder`; readers also fill their
field of its typed :class:`~gpu_exporter.poll.readings.PollReadings`, and the
derivations that run after them (diagnosis, baseline) read those and publish
what they derive into a typed :class:`Slot`. The poller freezes the builder
into a :class:`Snapshot` and publishes it by swapping one reference.
``/metrics`` renders whatever snapshot is newest, so a GPU or process that is
gone is simply absent from the next one: nothing has to be removed by hand.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, NamedTuple, TypeVar, cast

from gpu_exporter.facts.catalog_types import Metric
from gpu_exporter.poll.catalog import metric
from gpu_exporter.poll.readings import PollReadings

T = TypeVar("T")


class Slot(Generic[T]):
    """A typed place in the snapshot for what one derivation publishes (the
    diagnosis's findings, the baseline's drifts). The module that writes it owns
    the slot object; a reader imports that object and gets the writer's type,
    while the snapshot itself stays below every derivation."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Slot({self.name!r})"


class Sample(NamedTuple):
    # A named tuple rather than a frozen dataclass: a poll creates ~2500 of
    # them, and a frozen dataclass's __init__ (object.__setattr__ per field)
    # cost more than everything else add() does.
    labels: tuple[str, ...]  # values in the order of the metric's catalog labels
    value: float


_new_sample = tuple.__new__  # skips NamedTuple's Python-level __new__



@dataclass(frozen=True)
class Snapshot:
    """Samples by metric name, the readers' typed readings, and what the
    derivations published."""

    timestamp: float  # unix time the poll started
    samples: Mapping[str, tuple[Sample, ...]]
    # What the readers read (GPU states, processes...) for the derivations and
    # the JSON endpoints; never rendered as metrics directly.
    readings: PollReadings = field(default_factory=PollReadings)
    published: Mapping[Slot[Any], object] = field(default_factory=dict)

    def derived(self, slot: Slot[T]) -> T | None:
        """What the derivation owning ``slot`` published this poll; None when it
        did not run (switched off, or failed before publishing)."""
        return cast("T | None", self.published.get(slot))

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
    def __init__(self, timestamp: float, drop: Collection[str] = frozenset()) -> None:
        self.timestamp = timestamp
        # Families not exported (the detail families without --metrics.detail):
        # their samples are not kept. The readers read them anyway (the
        # aggregates and the diagnosis are made from the readings), and on an
        # 8-GPU NVLink node they are some 1000 of a poll's 1600 samples.
        self._drop = drop
        self._samples: dict[str, list[Sample]] = {}
        self.readings = PollReadings()
        self._published: dict[Slot[Any], object] = {}

    def publish(self, slot: Slot[T], value: T) -> None:
        """Publish a derivation's result for this poll."""
        self._published[slot] = value

    def derived(self, slot: Slot[T]) -> T | None:
        """What a derivation that ran earlier in this poll published, or None."""
        return cast("T | None", self._published.get(slot))

    def keeps(self, family: Metric) -> bool:
        """Whether samples of ``family`` are kept (exported): a reader may skip
        making the ones that would not be."""
        return family.name not in self._drop

    def add(self, family: Metric, value: float | int | bool, /, **labels: str) -> None:
        """One sample of ``family``, a catalog handle: the only way a series is
        written, so a metric is named, typed and bounded in its catalog alone."""
        # The hot path of every poll (~2500 calls on an 8-GPU node): the label
        # names from the handle, the values read and converted in C.
        name, names = family.name, family.labels
        if name in self._drop:
            return
        if len(labels) != len(names):
            missing = set(names) - set(labels)
            extra = set(labels) - set(names)
            raise ValueError(f"{name}: labels missing {sorted(missing)}, "
                             f"unexpected {sorted(extra)}")
        try:
            values = tuple(map(str, map(labels.__getitem__, names)))
        except KeyError as exc:
            raise ValueError(f"{name}: missing label {exc}") from None
        self._append(name, values, value)

    def add_values(self, family: Metric, labels: tuple[str, ...],
                   value: float | int | bool, /) -> None:
        """Like add(), with the label values already in the catalog's order.

        For the collectors that add hundreds of series a poll with label sets
        they build once (per link, per process): no keyword mapping, no str()
        per label. The caller keeps the order: build ``labels`` from the same
        catalog tuples (GPU, PROC...) the metric is declared with.
        """
        name, names = family.name, family.labels
        if name in self._drop:
            return
        if len(labels) != len(names):
            raise ValueError(f"{name}: {len(labels)} label values for {names}")
        # _append(), inline: some 700 calls a poll on an 8-GPU node.
        v = float(value)
        if v != v:
            return  # a NaN is no value (see _append)
        samples = self._samples.get(name)
        if samples is None:
            samples = self._samples[name] = []
        samples.append(_new_sample(Sample, (labels, v)))

    def _append(self, name: str, labels: tuple[str, ...], value: float | int | bool) -> None:
        v = float(value)
        if v != v:
            # A NaN from a bad read is no value: never export it as if it were one.
            return
        samples = self._samples.get(name)
        if samples is None:
            samples = self._samples[name] = []
        samples.append(_new_sample(Sample, (labels, v)))

    def merge(self, other: SnapshotBuilder) -> None:
        """Take all samples of ``other`` (read into a scratch builder first)."""
        for name, samples in other._samples.items():
            if name not in self._drop:
                self._samples.setdefault(name, []).extend(samples)

    def discard_families(self, families: Collection[Metric]) -> None:
        """Drop these families."""
        for family in families:
            self._samples.pop(family.name, None)

    def build(self) -> Snapshot:
        frozen = {k: tuple(v) for k, v in self._samples.items()}
        return Snapshot(self.timestamp, MappingProxyType(frozen), self.readings,
                        MappingProxyType(dict(self._published)))
