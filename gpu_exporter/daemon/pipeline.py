"""The stages in the order one poll runs them: the readers first, then the
derivations that read their readings (the diagnosis, the baseline).

This module only orders them: each stage declares its name, description, the
settings that switch it on and how it reloads in its own module (readers:
``gpu_exporter.collectors.base``; derivations: ``gpu_exporter.poll.stage``).
Within the readers, MIG comes before GPM, which samples each MIG instance the
MIG reader found; attribution comes after the processes (it reads their
cgroups) and MIG (it places MIG allocations); the kernel log comes right
before xid, which merges its Xids with NVML's (the log as it stood at start is
read before xid registers for NVML's events).
"""

from __future__ import annotations

from gpu_exporter.baseline import BaselineCheck
from gpu_exporter.collectors.attribution import AttributionCollector
from gpu_exporter.collectors.base import Collector
from gpu_exporter.collectors.device import DeviceCollector
from gpu_exporter.collectors.gpm import GpmCollector
from gpu_exporter.collectors.host import HostCollector
from gpu_exporter.collectors.kmsg import KmsgCollector
from gpu_exporter.collectors.mig import MigCollector
from gpu_exporter.collectors.network import NetworkCollector
from gpu_exporter.collectors.nvlink import NvlinkCollector
from gpu_exporter.collectors.pcie import PcieCollector
from gpu_exporter.collectors.process_series import ProcessSeriesCollector
from gpu_exporter.collectors.processes import ProcessesCollector
from gpu_exporter.collectors.samples import SamplesCollector
from gpu_exporter.collectors.xid import XidCollector
from gpu_exporter.diagnosis.engine import Diagnosis
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.stage import Derivation, Stage

READERS: tuple[type[Collector], ...] = (
    DeviceCollector, MigCollector, GpmCollector, SamplesCollector, NvlinkCollector,
    KmsgCollector, XidCollector, ProcessesCollector, ProcessSeriesCollector,
    AttributionCollector, HostCollector, PcieCollector, NetworkCollector,
)
DERIVATIONS: tuple[type[Derivation], ...] = (Diagnosis, BaselineCheck)

# The readers by name: --collector.<name> and the YAML collectors: keys.
COLLECTORS: dict[str, type[Collector]] = {c.name: c for c in READERS}
# Every stage by name, in run order.
STAGES: dict[str, type[Stage]] = {s.name: s for s in (*READERS, *DERIVATIONS)}
if len(STAGES) != len(READERS) + len(DERIVATIONS):  # pragma: no cover - a programming error
    raise RuntimeError("two stages share a name")


def build(rt: Runtime) -> list[Stage]:
    """The stages the settings switch on, built, in run order."""
    return [kind.build(rt) for kind in STAGES.values() if kind.wanted(rt.settings)]
