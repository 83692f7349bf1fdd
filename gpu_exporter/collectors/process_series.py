"""The per-process series (``gpu_process_*``): one set per GPU process, so the
series a node exports grow with its jobs and churn when they restart (a new
PID is a new set of series; see docs/series.md).

The processes reader takes the readings either way; this collector only
exports the series it published. ``--no-collector.process_series`` drops
them from /metrics while the diagnosis, which reads the processes reader's
readings, judges the same.
"""

from __future__ import annotations

from typing import Self

from gpu_exporter.collectors.base import Collector
from gpu_exporter.collectors.processes import PROCESS_SERIES
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import SnapshotBuilder


class ProcessSeriesCollector(Collector):
    name = "process_series"
    description = ("per-process series of the GPU processes the processes collector reads "
                   "(off: no per-process series, the same diagnosis)")

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        return cls()

    def collect(self, out: SnapshotBuilder) -> None:
        series = out.derived(PROCESS_SERIES)
        if series is not None:  # None: the processes reader is off or failed
            out.merge(series)
