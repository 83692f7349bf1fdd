"""The processes NVML lists on a GPU, and their utilization samples."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ProcessEntry:
    pid: int
    used_bytes: int | None  # None where the driver cannot say (WDDM)
    gpu_instance: int | None  # None when MIG is off
    compute_instance: int | None
    graphics: bool


@dataclass(frozen=True, slots=True)
class ProcessSample:
    pid: int
    timestamp_us: int
    sm_ratio: float
    memory_ratio: float


_NO_MIG = 0xFFFFFFFF


def process_entries(raw: Iterable[Any], graphics: bool) -> list[ProcessEntry]:
    out = []
    for p in raw:
        gi, ci = int(p.gpuInstanceId), int(p.computeInstanceId)
        out.append(ProcessEntry(int(p.pid), None if p.usedGpuMemory is None else
                                int(p.usedGpuMemory), None if gi == _NO_MIG else gi,
                                None if ci == _NO_MIG else ci, graphics))
    return out
