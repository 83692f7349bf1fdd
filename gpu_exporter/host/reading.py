"""The host as one poll saw it, left in the poll's readings (``readings.host``)
for the diagnosis rules and the JSON endpoints. ``None`` means "not known this
poll" (the first poll has no interval yet, or the kernel lacks the source),
never 0."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpu_exporter.host.cpu import LoadAverage
from gpu_exporter.host.pressure import Pressure
from gpu_exporter.host.thermal import ThermalThrottle


@dataclass(frozen=True, slots=True)
class HostReading:
    iowait_ratio: float | None = None
    steal_ratio: float | None = None
    # resource (cpu, memory, io) -> stall figures; only what this kernel has
    pressure: dict[str, Pressure] = field(default_factory=dict)
    memory_total_bytes: int | None = None
    memory_available_bytes: int | None = None
    swap_used_bytes: int | None = None
    swap_in_bytes_per_s: float | None = None
    swap_out_bytes_per_s: float | None = None
    context_switches_per_s: float | None = None
    load: LoadAverage | None = None
    disk_busy_ratio: dict[str, float] = field(default_factory=dict)
    # The CPUs' thermal throttle totals; None where the CPUs keep none.
    cpu_thermal: ThermalThrottle | None = None
    # Whether the CPUs keep thermal throttle counters (False: none, as on AMD,
    # Arm and most VMs; None: not known, the read failed).
    cpu_thermal_kept: bool | None = None
