"""One poll's worth of series and readings, immutable once built.

Collectors add series to a :class:`SnapshotBuilder`; readers also fill their
field of its typed :class:`~gpu_exporter.poll.readings.PollReadings`, and the
derivations that run after them (diagnosis, baseline) read those and publish
what they derive into a typed :class:`Slot`. The poller freezes the builder
into a :class:`Snapshot` and publishes it by swapping one reference.
``/metrics`` renders whatever snapshot is newest, so a GPU or process that is
gone is simply absent from the next one: nothing has to be removed by hand.

A poll keeps each family as two parallel lists, the series' label values and
their values, and nothing more: most polls are never scraped (a 1 s poll under
a 15 s scrape), so a series is formed into a sample or a line of text only
where something reads it (``Snapshot.samples``, the /metrics renderer).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Generic, NamedTuple, NoReturn, Protocol, TypeVar, cast

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
    """One series of a family, formed on reading (``Snapshot.samples``)."""

    labels: tuple[str, ...]  # values in the order of the metric's catalog labels
    value: float


class Family(Protocol):
    """A family's series: ``labels[i]`` (values in the order of the metric's
    catalog labels) has the value ``values[i]``."""

    @property
    def labels(self) -> Sequence[tuple[str, ...]]: ...

    @property
    def values(self) -> Sequence[float]: ...


class _Columns(NamedTuple):
    """A family as the builder appends to it; the snapshot reads the same
    lists as a Family, read-only."""

    labels: list[tuple[str, ...]]
    values: list[float]


_values_of = attrgetter("values")


class _Samples(Mapping[str, tuple[Sample, ...]]):
    """The families as samples, each formed the first time it is read."""

    def __init__(self, families: Mapping[str, Family]) -> None:
        self._families = families
        self._formed: dict[str, tuple[Sample, ...]] = {}

    def __getitem__(self, name: str) -> tuple[Sample, ...]:
        formed = self._formed.get(name)
        if formed is None:
            family = self._families[name]
            formed = self._formed[name] = tuple(map(Sample, family.labels, family.values))
        return formed

    def __contains__(self, name: object) -> bool:
        return name in self._families

    def __iter__(self) -> Iterator[str]:
        return iter(self._families)

    def __len__(self) -> int:
        return len(self._families)


@dataclass(frozen=True)
class Snapshot:
    """Series by metric name, the readers' typed readings, and what the
    derivations published."""

    timestamp: float  # unix time the poll started
    families: Mapping[str, Family]
    # What the readers read (GPU states, processes...) for the derivations and
    # the JSON endpoints; never rendered as metrics directly.
    readings: PollReadings = field(default_factory=PollReadings)
    published: Mapping[Slot[Any], object] = field(default_factory=dict)

    @cached_property
    def samples(self) -> Mapping[str, tuple[Sample, ...]]:
        """Each family's series as samples (formed when first read)."""
        return _Samples(self.families)

    def derived(self, slot: Slot[T]) -> T | None:
        """What the derivation owning ``slot`` published this poll; None when it
        did not run (switched off, or failed before publishing)."""
        return cast("T | None", self.published.get(slot))

    def get(self, name: str, **labels: str) -> float | None:
        """The value of one series, or None. Convenience for tests and rules."""
        family = self.families.get(name)
        if family is None:
            return None
        spec = metric(name)
        at = [(spec.labels.index(k), v) for k, v in labels.items()]
        for values, value in zip(family.labels, family.values, strict=True):
            if all(values[i] == v for i, v in at):
                return value
        return None

    def series(self, name: str) -> list[tuple[dict[str, str], float]]:
        family = self.families.get(name)
        if family is None:
            return []
        names = metric(name).labels
        return [(dict(zip(names, values, strict=True)), value)
                for values, value in zip(family.labels, family.values, strict=True)]


class _Built(dict[str, _Columns]):
    """A built builder's families: none left, and any added is refused (the
    snapshot shares the lists it had, and must not change)."""

    def get(self, name: str, default: object = None, /) -> NoReturn:
        raise RuntimeError(f"{name}: series added after the snapshot was built")


class SnapshotBuilder:
    def __init__(self, timestamp: float, drop: Collection[str] = frozenset()) -> None:
        self.timestamp = timestamp
        # Families not exported (the detail families without --metrics.detail):
        # their series are not kept. The readers read them anyway (the
        # aggregates and the diagnosis are made from the readings), and on an
        # 8-GPU NVLink node they are some 1000 of a poll's 1600 series.
        self._drop = drop
        self._families: dict[str, _Columns] = {}
        self.readings = PollReadings()
        self._published: dict[Slot[Any], object] = {}
        self._built: Snapshot | None = None

    def publish(self, slot: Slot[T], value: T) -> None:
        """Publish a derivation's result for this poll."""
        self._published[slot] = value

    def derived(self, slot: Slot[T]) -> T | None:
        """What a derivation that ran earlier in this poll published, or None."""
        return cast("T | None", self._published.get(slot))

    def keeps(self, family: Metric) -> bool:
        """Whether series of ``family`` are kept (exported): a reader may skip
        making the ones that would not be."""
        return family.name not in self._drop

    def add(self, family: Metric, value: float | int | bool, /, **labels: str) -> None:
        """One series of ``family``, a catalog handle: the only way a series is
        written, so a metric is named, typed and bounded in its catalog alone."""
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
        self.add_values(family, values, value)

    def add_values(self, family: Metric, labels: tuple[str, ...],
                   value: float | int | bool, /) -> None:
        """Like add(), with the label values already in the catalog's order.

        For the collectors that add hundreds of series a poll with label sets
        they build once (per link, per process): no keyword mapping, no str()
        per label. The caller keeps the order: build ``labels`` from the same
        catalog tuples (GPU, PROC...) the metric is declared with.
        """
        # The hot path of every poll (~700 calls on an 8-GPU node, ~2000 with
        # --metrics.detail): two appends, no object per series.
        name, names = family.name, family.labels
        if name in self._drop:
            return
        if len(labels) != len(names):
            raise ValueError(f"{name}: {len(labels)} label values for {names}")
        v = float(value)
        if v != v:
            # A NaN from a bad read is no value: never export it as if it were one.
            return
        columns = self._families.get(name)
        if columns is None:
            columns = self._families[name] = _Columns([], [])
        columns.labels.append(labels)
        columns.values.append(v)

    @contextmanager
    def all_or_nothing(self) -> Iterator[None]:
        """Keep the series added in the block only if it ends normally: a GPU
        lost half-way through its reads contributes none of its half-read
        values. What was added before the block stays."""
        self._writable()
        names = list(self._families)
        lengths = list(map(len, map(_values_of, self._families.values())))
        try:
            yield
        except BaseException:
            for name, length in zip(names, lengths, strict=True):
                columns = self._families.get(name)
                if columns is not None:
                    del columns.labels[length:], columns.values[length:]
            for name in self._families.keys() - set(names):
                del self._families[name]
            raise

    def merge(self, other: SnapshotBuilder) -> None:
        """Take all series of ``other`` (read into a builder of its own first)."""
        families = self._writable()
        if other._built is not None:
            raise RuntimeError("the builder merged from was built: its series went with it")
        for name, (labels, values) in other._families.items():
            if name in self._drop:
                continue
            columns = families.get(name)
            if columns is None:
                columns = families[name] = _Columns([], [])
            columns.labels.extend(labels)
            columns.values.extend(values)

    def discard_families(self, families: Collection[Metric]) -> None:
        """Drop these families."""
        mine = self._writable()
        for family in families:
            mine.pop(family.name, None)

    def _writable(self) -> dict[str, _Columns]:
        if self._built is not None:
            raise RuntimeError("the snapshot was built: its series can no longer change")
        return self._families

    def build(self) -> Snapshot:
        """The snapshot, sharing the builder's lists (no copy): the builder
        takes no series after this, and building again gives the same one."""
        if self._built is None:
            self._built = Snapshot(self.timestamp, MappingProxyType(self._families), self.readings,
                                   MappingProxyType(dict(self._published)))
            self._families = _Built()
        return self._built
