"""What the rules look at for one GPU in one poll, gathered from the facts the
collectors left in the snapshot. Anything a collector could not see is None,
and a rule that needs it does not judge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpu_exporter.readings import GpuReading, HostSignals, PcieKernelView, ProcessReading


@dataclass(slots=True)
class GpuSignals:
    index: int
    uuid: str
    gpu: GpuReading
    host: HostSignals | None
    pcie: PcieKernelView | None
    processes: list[ProcessReading] = field(default_factory=list)
    sm_active: float | None = None  # GPM
    util_samples: tuple[float, float, float] | None = None  # min, mean, max
    xids: list[tuple[float, int]] = field(default_factory=list)  # (unix time, xid)
    processes_known: bool = False  # the process collector ran this poll

    @property
    def memory_used_ratio(self) -> float | None:
        g = self.gpu
        if g.memory_used_bytes is None or not g.memory_total_bytes:
            return None
        return g.memory_used_bytes / g.memory_total_bytes


def gather(facts: dict[str, Any] | Any) -> list[GpuSignals]:
    gpus: dict[int, GpuReading] = facts.get("gpus", {})
    host: HostSignals | None = facts.get("host_signals")
    pcie: dict[int, PcieKernelView] = facts.get("pcie_view", {})
    procs: list[ProcessReading] | None = facts.get("processes")
    gpm = facts.get("gpm", {})
    samples = facts.get("samples", {})
    xids = facts.get("xid", [])
    out = []
    for index, reading in sorted(gpus.items()):
        sig = GpuSignals(index, reading.uuid, reading, host, pcie.get(index))
        if procs is not None:
            sig.processes_known = True
            sig.processes = [p for p in procs if p.gpu == index]
        g = gpm.get(index)
        if g is not None:
            sig.sm_active = g.sm_active
        util = samples.get(index, {}).get("gpu_utilization_samples_ratio")
        if util is not None:
            sig.util_samples = (util.min, util.mean, util.max)
        sig.xids = [(e.at, e.xid) for e in xids if e.gpu == index]
        out.append(sig)
    return out
