"""prometheus_client's own rendering of a snapshot (a custom collector that
yields fresh metric families from the newest snapshot): the reference the
served exposition (``web.render``) is compared with in the parity tests.
The daemon never loads it: it serves ``web.render``'s rendering."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from gpu_exporter.poll.catalog import CATALOG
from gpu_exporter.poll.snapshot import Snapshot


class SnapshotCollector(Collector):
    def __init__(self, source: Callable[[], Snapshot | None]) -> None:
        self._source = source

    def describe(self) -> list[Metric]:
        # Nothing to describe up front: series come and go with the hardware.
        return []

    def collect(self) -> Iterator[Metric]:
        snap = self._source()
        if snap is None:
            return
        for spec in CATALOG:
            series = snap.families.get(spec.name)
            if series is None or not series.values:
                continue
            family: GaugeMetricFamily | CounterMetricFamily
            if spec.kind == "counter":
                family = CounterMetricFamily(spec.name[: -len("_total")], spec.help,
                                             labels=spec.labels)
            else:
                family = GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
            for labels, value in zip(series.labels, series.values, strict=True):
                family.add_metric(labels, value)
            yield family


def encode(registry: CollectorRegistry, accept: str) -> tuple[bytes, str]:
    """``registry`` rendered by prometheus_client in the format ``accept``
    asks for, with its content type."""
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


def snapshot_registry(source: Callable[[], Snapshot | None]) -> CollectorRegistry:
    """A registry that renders the newest snapshot of ``source`` through
    prometheus_client: the reference the served exposition is compared with."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(source))
    return registry
