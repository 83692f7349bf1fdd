"""Where each plain value of the host is read, and the name the poll keeps
it under: one row per value. The host collector exports every row's value
under the row's metric, and the diagnosis reads it (readings.HostSignals)
under the row's ``read_as``; neither copies a value by hand.

A value is plain when it is one number of one kernel file, in the metric's
own unit once its file's reader has read it. The readers of host/ parse each
file once, within its bound, and apply the kernel's unit (kB, pages of this
host's page size, USER_HZ ticks, PSI's percent and microseconds), since the
unit is the kernel's and the same whoever reads the file. What is not plain
is the collector's own code, named in NOT_ROWS: shares of an interval taken
from two counters (/proc/stat's iowait and steal against all CPU time), sums
(swap in plus swap out), and the per-device tables (disks, interfaces, CPU
thermal counters).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import partial
from typing import Any

from gpu_exporter.catalogs import host as m
from gpu_exporter.facts.catalog_types import Metric
from gpu_exporter.host import cpu, memory, pressure

STAT = "/proc/stat"
MEMINFO = "/proc/meminfo"
VMSTAT = "/proc/vmstat"
LOADAVG = "/proc/loadavg"
PRESSURE = {resource: f"/proc/pressure/{resource}" for resource in pressure.RESOURCES}


@dataclass(frozen=True, slots=True)
class HostRow:
    """One plain host value: the metric it is exported as (``series``: its
    label values), where it is read (``file``, the line of that file that
    begins ``key``, and ``field``: the attribute of the file's reading that
    holds it, in the metric's unit), and ``read_as``: the name the poll's
    reading keeps it under, the field of readings.HostSignals where the
    diagnosis reads it ("": exported only).

    The kind is the metric's: a gauge is kept as read, a counter as its
    rate per second since the last poll. ``ceiling``: the attribute of the
    same reading the value cannot exceed (memory available within the total);
    where a row reads that attribute and it was rejected this poll, the
    value is held against its metric's bounds alone.
    """

    metric: Metric
    file: str
    key: str
    field: str
    series: tuple[str, ...] = ()
    read_as: str = ""
    ceiling: str = ""
    get: Callable[[Any], Any] = dataclass_field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # A dotted field ("some.avg10") reads through a part the kernel may
        # not have (PSI's "full" line before Linux 5.13): None, not a fault.
        parts = self.field.split(".")

        def get(reading: Any) -> Any:
            for part in parts:
                reading = getattr(reading, part)
                if reading is None:
                    return None
            return reading
        object.__setattr__(self, "get", get if len(parts) > 1
                           else operator.attrgetter(self.field))


ROWS: tuple[HostRow, ...] = (
    HostRow(m.HOST_CONTEXT_SWITCHES_TOTAL, STAT, "ctxt", "context_switches",
            read_as="context_switches_per_s"),
    *(HostRow(metric, PRESSURE[resource], kind, f"{kind}.{part}", (resource, kind),
              read_as=f"{resource}_pressure_{kind}" if part == "avg10" else "")
      for resource in pressure.RESOURCES for kind in ("some", "full")
      for metric, part in ((m.HOST_PRESSURE_RATIO, "avg10"),
                           (m.HOST_PRESSURE_STALLED_SECONDS_TOTAL, "total_seconds"))),
    HostRow(m.HOST_MEMORY_TOTAL_BYTES, MEMINFO, "MemTotal", "total_bytes",
            read_as="memory_total_bytes"),
    HostRow(m.HOST_MEMORY_AVAILABLE_BYTES, MEMINFO, "MemAvailable", "available_bytes",
            read_as="memory_available_bytes", ceiling="total_bytes"),
    HostRow(m.HOST_SWAP_USED_BYTES, MEMINFO, "SwapTotal - SwapFree", "swap_used_bytes",
            read_as="swap_used_bytes", ceiling="swap_total_bytes"),
    HostRow(m.HOST_SWAP_BYTES_TOTAL, VMSTAT, "pswpin", "in_bytes", ("in",),
            read_as="swap_in_bytes_per_s"),
    HostRow(m.HOST_SWAP_BYTES_TOTAL, VMSTAT, "pswpout", "out_bytes", ("out",),
            read_as="swap_out_bytes_per_s"),
    *(HostRow(m.HOST_LOAD_AVERAGE, LOADAVG, "", f"load{minutes}", (f"{minutes}m",),
              read_as=f"load_{minutes}m") for minutes in (1, 5, 15)),
)

# HostSignals fields that are the sum of rows' values, known only when every
# part is.
SUMS: dict[str, tuple[str, ...]] = {
    "swap_bytes_per_s": ("swap_in_bytes_per_s", "swap_out_bytes_per_s"),
}

# The HostSignals fields no row fills, and why: each is the collector's own
# code (collectors/host.py, _signals).
NOT_ROWS = {
    "iowait_ratio": "a share of the interval: two /proc/stat counters, iowait over all",
    "steal_ratio": "a share of the interval: two /proc/stat counters, steal over all",
    "swap_bytes_per_s": "the sum of two rows, swap in and swap out (SUMS)",
    "cpu_thermal_throttles": "a sum over the CPUs' sysfs counters, once per core and package",
    "cpu_thermal_throttled_seconds": "a sum over the CPUs' sysfs counters",
    "cpu_thermal_kept": "whether the CPUs keep thermal counters at all",
}


def readers(page_size: int = memory.PAGE_SIZE) -> dict[str, Callable[[str], object]]:
    """Each file's reader, by the file as the log names it, in the order a
    poll reads them; each is called with the proc root."""
    return {
        STAT: cpu.read_cpu_times,
        **{path: partial(pressure.read_pressure, resource=resource)
           for resource, path in PRESSURE.items()},
        MEMINFO: memory.read_meminfo,
        VMSTAT: partial(memory.read_swap_activity, page_size=page_size),
        LOADAVG: cpu.read_loadavg,
    }

