"""The collectors in the order one poll runs them: the readers first, then the
derivations that read their readings (the diagnosis, the baseline).

This module only orders them: each collector declares its name, default,
description, settings and how it reloads in its own module (see
``gpu_exporter.collectors.base``). Within the readers, MIG comes before GPM,
which samples each MIG instance the MIG reader found; attribution comes after
the processes (it reads their cgroups) and MIG (it places MIG allocations).
"""

from __future__ import annotations

from gpu_exporter.baseline import BaselineCollector
from gpu_exporter.collectors.attribution import AttributionCollector
from gpu_exporter.collectors.base import Collector
from gpu_exporter.collectors.device import DeviceCollector
from gpu_exporter.collectors.gpm import GpmCollector
from gpu_exporter.collectors.host import HostCollector
from gpu_exporter.collectors.mig import MigCollector
from gpu_exporter.collectors.nvlink import NvlinkCollector
from gpu_exporter.collectors.pcie import PcieCollector
from gpu_exporter.collectors.process_series import ProcessSeriesCollector
from gpu_exporter.collectors.processes import ProcessesCollector
from gpu_exporter.collectors.samples import SamplesCollector
from gpu_exporter.collectors.xid import XidCollector
from gpu_exporter.diagnosis.engine import DiagnosisCollector
from gpu_exporter.runtime import Runtime

READERS: tuple[type[Collector], ...] = (
    DeviceCollector, MigCollector, GpmCollector, SamplesCollector, NvlinkCollector,
    XidCollector, ProcessesCollector, ProcessSeriesCollector, AttributionCollector, HostCollector,
    PcieCollector,
)
DERIVATIONS: tuple[type[Collector], ...] = (DiagnosisCollector, BaselineCollector)

COLLECTORS: dict[str, type[Collector]] = {c.name: c for c in (*READERS, *DERIVATIONS)}
if len(COLLECTORS) != len(READERS) + len(DERIVATIONS):  # pragma: no cover - a programming error
    raise RuntimeError("two collectors share a name")


def build(rt: Runtime) -> list[Collector]:
    """The collectors the settings switch on, built, in run order."""
    return [kind.build(rt) for kind in COLLECTORS.values() if kind.wanted(rt.settings)]
