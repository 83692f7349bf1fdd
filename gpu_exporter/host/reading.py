"""The host as one poll saw it, left in the poll's readings (``readings.host``)
for the diagnosis rules and the JSON endpoints. Absent or ``None`` means "not
known this poll" (the first poll has no interval yet, or the kernel lacks the
source), never 0."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpu_exporter.host.thermal import ThermalThrottle


@dataclass(frozen=True, slots=True)
class HostReading:
    # Each plain value accepted this poll, by the name its row reads it as
    # (collectors/host_rows.py): a gauge as read, a counter as its rate per
    # second since the last poll.
    values: dict[str, float] = field(default_factory=dict)
    iowait_ratio: float | None = None
    steal_ratio: float | None = None
    disk_busy_ratio: dict[str, float] = field(default_factory=dict)
    # The CPUs' thermal throttle totals; None where the CPUs keep none.
    cpu_thermal: ThermalThrottle | None = None
    # Whether the CPUs keep thermal throttle counters (False: none, as on AMD,
    # Arm and most VMs; None: not known, the read failed).
    cpu_thermal_kept: bool | None = None
