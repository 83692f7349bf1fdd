"""What a GPU and the host can report: the plausible range of every value the
exporter reads from NVML, /proc and /sys, and the check a reading passes before
it becomes a sample.

NVML answers SUCCESS with values that are not readings: its "not available"
sentinels (``NVML_VALUE_NOT_AVAILABLE``: 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF, and
0xFFFF / 0xFF in narrower fields), and, on a sick board or a buggy driver,
impossible values (a utilization of 255 %, more memory used than the board
has, a counter that goes backwards). Exported, they are the "fake value" the
exporter promises never to show: 4,294,967 W on a dashboard, a temperature
alert at 4.29e9 °C, a rate() that jumps by 1.8e19. A reading outside its range
leaves its series absent for that poll and counts a read error
(``gpu_exporter_collector_errors_total``); the first one per GPU and metric is
logged.

The host's files answer with garbage of their own: a truncated or corrupted
/proc (a FUSE overlay such as lxcfs, a container runtime's fake file, a kernel
bug) can hold negative or absurd numbers, a ratio above 100 %, free swap above
the total, a counter lower than its last reading. The same check holds them
back; the host collector counts them in its own read errors.

``BOUNDS`` is the one table of ranges, in the exporter's base units, keyed by
the metric the reading is exported as. The bounds are generous on purpose: they
reject what no board can report, never a reading that is merely unusual. A
reading whose bound depends on the board (power against its limit, memory used
against its total, a clock against its maximum) is also checked against a
ceiling the collector passes (``RELATIVE`` says how far above it a reading may
go).
"""

from __future__ import annotations

import logging
from typing import Protocol

from gpu_exporter.nvml.session import Gpu

log = logging.getLogger(__name__)

# NVML's "not available" values, in the widths NVML answers with. A reading
# equal to one of them (before the unit conversion) is never a measurement.
U8_NA = 0xFF
U16_NA = 0xFFFF
U32_NA = 0xFFFFFFFF
U64_NA = 0xFFFFFFFFFFFFFFFF

_TIB = 1024**4
_GHZ = 1e9

# metric name -> (lowest, highest) plausible reading, both inclusive.
BOUNDS: dict[str, tuple[float, float]] = {
    # Ratios NVML reports as percent of a whole (0-100 %): 255 % is the 0xFF
    # sentinel, anything above 100 % cannot be a share of time busy.
    "gpu_utilization_ratio": (0.0, 1.0),
    "gpu_memory_controller_utilization_ratio": (0.0, 1.0),
    # NVML: percent of the fan's intended maximum, which it "may exceed"; twice
    # the intended speed is more than any fan spins.
    "gpu_fan_speed_ratio": (0.0, 2.0),
    # The largest board sold has 288 GB; 4 TiB leaves room for ten generations
    # and rejects the 64-bit sentinel (1.8e19 bytes). Used also <= total.
    "gpu_memory_total_bytes": (1.0, 4 * _TIB),
    "gpu_memory_used_bytes": (0.0, 4 * _TIB),
    "gpu_memory_reserved_bytes": (0.0, 4 * _TIB),
    # NVML's temperatures are unsigned degrees; silicon shuts down near 100 °C
    # (an H100's shutdown threshold is 92 °C), so 150 °C is no reading, and
    # the 0xFFFF / 0xFFFFFFFF sentinels are far above it.
    "gpu_temperature_celsius": (0.0, 150.0),
    "gpu_temperature_threshold_celsius": (1.0, 150.0),
    # The most a board draws today is ~1.2 kW (B300); 5 kW is no GPU. The
    # 32-bit sentinel in milliwatts is 4,294,967 W. Power is also held
    # against the enforced limit (RELATIVE).
    "gpu_power_watts": (0.0, 5000.0),
    "gpu_power_limit_watts": (1.0, 5000.0),
    "gpu_power_default_limit_watts": (1.0, 5000.0),
    # Since the driver loaded: 5 kW for 60 years is 9.5e12 J. The 64-bit
    # sentinel in millijoules is 1.8e16 J.
    "gpu_energy_joules_total": (0.0, 1e13),
    # SM clocks stay near 2-3 GHz, but NVML reports GDDR memory clocks at their
    # data rate: 10.5 GHz on an RTX 4090, ~14 GHz with GDDR7. 40 GHz leaves
    # room and still rejects the 16-bit sentinel in MHz (65.5 GHz) and the
    # 32-bit one (4.3e15 Hz). Current clocks are also held against the board's
    # maximum (RELATIVE).
    "gpu_clock_hertz": (0.0, 40 * _GHZ),
    "gpu_clock_max_hertz": (1.0, 40 * _GHZ),
    "gpu_clock_application_hertz": (0.0, 40 * _GHZ),
    "gpu_clock_application_default_hertz": (0.0, 40 * _GHZ),
    # P0 (fastest) to P15 (slowest); NVML_PSTATE_UNKNOWN is 32.
    "gpu_performance_state": (0.0, 15.0),
    # PCIe 1.0 to 7.0 (the newest specification); x1 to x32 (the widest link
    # the specification defines). 0 is no link to read at all.
    "gpu_pcie_link_generation": (1.0, 7.0),
    "gpu_pcie_link_generation_max": (1.0, 7.0),
    "gpu_pcie_link_width": (1.0, 32.0),
    "gpu_pcie_link_width_max": (1.0, 32.0),
    # A 32-bit counter: its all-ones value is the sentinel; a link that had
    # replayed four billion times would have been retrained or dropped first.
    "gpu_pcie_replays_total": (0.0, U32_NA - 1),
    # A 64-bit byte counter: 2**63 bytes is 290 years at 1 TB/s; the 64-bit
    # sentinel (as the double NVML's field value becomes) is above it.
    "gpu_pcie_bytes_total": (0.0, 2.0**63),
    # Throttle time per reason, a 64-bit count of nanoseconds: 1e10 s is 300
    # years; the 64-bit sentinel (1.8e10 s) is above it.
    "gpu_throttle_seconds_total": (0.0, 1e10),
    # ECC counts: a board with four billion ECC errors has been retired long
    # before; the 32- and 64-bit sentinels are at or above it.
    "gpu_ecc_errors_total": (0.0, U32_NA - 1),
    # Rows an HBM board can remap are counted in the hundreds per bank; the
    # 32-bit sentinel is above a million.
    "gpu_remapped_rows_total": (0.0, 1e6),
    # --- The host (collectors/host.py), from /proc. ---
    # Shares of the last interval (CPU time in iowait or steal, time a disk
    # had I/O in flight) and PSI's avg10 (a percentage of the last 10 s).
    "gpu_host_cpu_iowait_ratio": (0.0, 1.0),
    "gpu_host_cpu_steal_ratio": (0.0, 1.0),
    "gpu_host_disk_busy_ratio": (0.0, 1.0),
    "gpu_host_pressure_ratio": (0.0, 1.0),
    # The largest machines sold hold 32-48 TiB; 1 PiB leaves room and
    # rejects a number no kernel's memory accounting reaches.
    "gpu_host_memory_total_bytes": (1.0, 2.0**50),
    "gpu_host_memory_available_bytes": (0.0, 2.0**50),
    "gpu_host_swap_used_bytes": (0.0, 2.0**50),
    # The load average counts runnable and waiting tasks, and there are at
    # most PID_MAX_LIMIT (4,194,304) tasks; NaN and inf parse as floats but
    # are no load.
    "gpu_host_load_average": (0.0, 4194304.0),
    # Kernel counters since boot are 64-bit unsigned; 2**63 is 290 years of
    # a billion a second, and the same all-ones garbage as on a GPU (a -1
    # written as unsigned) is above it.
    "gpu_host_context_switches_total": (0.0, 2.0**63),
    # CPU time in USER_HZ ticks (64-bit) and disk busy time in milliseconds.
    "gpu_host_cpu_seconds_total": (0.0, 2.0**63 / 100),
    "gpu_host_cpu_iowait_seconds_total": (0.0, 2.0**63 / 100),
    "gpu_host_cpu_steal_seconds_total": (0.0, 2.0**63 / 100),
    "gpu_host_disk_busy_seconds_total": (0.0, 2.0**64 / 1000),
    "gpu_host_swap_bytes_total": (0.0, 2.0**63),
    "gpu_host_pressure_stalled_seconds_total": (0.0, 2.0**63 / 1e6),  # microseconds
    "gpu_host_network_receive_errors_total": (0.0, 2.0**63),
    "gpu_host_network_receive_drops_total": (0.0, 2.0**63),
}

# metric name -> how far above its ceiling (the board's own figure the
# collector passes) a reading may be.
RELATIVE: dict[str, float] = {
    # Averaged power overshoots the enforced limit briefly by tens of percent
    # on transients; two and a half times the limit is a broken sensor.
    "gpu_power_watts": 2.5,
    # Used (or reserved) memory cannot exceed the board's total.
    "gpu_memory_used_bytes": 1.0,
    "gpu_memory_reserved_bytes": 1.0,
    # A clock runs at most at its maximum; half again over it allows for
    # boards whose "max" NVML reports below an overclock.
    "gpu_clock_hertz": 1.5,
    "gpu_clock_application_hertz": 1.5,
    # The host's available memory is part of its total.
    "gpu_host_memory_available_bytes": 1.0,
    # Swap in use cannot exceed the swap there is.
    "gpu_host_swap_used_bytes": 1.0,
}

# metric name -> how far outside its range a share computed over an interval
# may land for reasons that are no fault; it is exported at the range's edge,
# beyond this it is rejected. The kernel's per-CPU iowait and steal step back
# a little when a task migrates or a hypervisor corrects them, and a disk's
# busy time is counted by the kernel while the interval is the collector's
# own clock between two polls, which a delayed poll stretches or shrinks.
SLACK: dict[str, float] = {
    "gpu_host_cpu_iowait_ratio": 0.05,
    "gpu_host_cpu_steal_ratio": 0.05,
    "gpu_host_disk_busy_ratio": 0.5,
}

# Counters whose resets are documented: NVML's volatile ECC counts ("reset
# each time the driver loads", and by a GPU reset) and energy counter ("since
# the driver was last reloaded"), and a network interface's counters, which
# restart at 0 when its driver re-creates it under the same name (a module
# reload, a virtual function re-created), and a disk's busy time, which older
# kernels print as 32-bit milliseconds (a wrap every 49.7 days). Any other counter that goes
# backwards is not a reading. Keys as went_backwards() sees them: a metric
# name (all its series), or a series up to a "/".
RESETTABLE: frozenset[str] = frozenset({"gpu_ecc_errors_total:volatile",
                                        "gpu_energy_joules_total",
                                        "gpu_host_network_receive_errors_total",
                                        "gpu_host_network_receive_drops_total",
                                        "gpu_host_disk_busy_seconds_total"})


class Tally(Protocol):
    """One source of readings (a GPU, the host) as the checks keep it: its
    read errors this poll, the series already logged, each counter's last
    accepted reading, and how the log names it."""

    errors: int

    @property
    def warned(self) -> set[str]: ...

    @property
    def counters(self) -> dict[str, float]: ...

    @property
    def label(self) -> str:
        """How a log line names this source: "GPU 3", "host"."""
        ...

    @property
    def kind(self) -> str:
        """What no source of its kind can report: "GPU", "host"."""
        ...


def plausible(name: str, value: float, ceiling: float | None = None) -> bool:
    """Whether ``value`` can be a reading of metric ``name`` (see BOUNDS;
    ``ceiling``: the board's own figure, see RELATIVE)."""
    low, high = BOUNDS[name]
    if not low <= value <= high:
        return False
    return ceiling is None or value <= ceiling * RELATIVE[name]


def went_backwards(t: Tally, series: str, value: float) -> bool:
    """Whether counter ``series`` (a metric name, then ``:`` and what tells
    its series apart, e.g. ``gpu_ecc_errors_total:volatile/corrected``) of
    ``t`` is lower than its last accepted reading and no reset of it is
    documented; remembers ``value`` when it is accepted."""
    last = t.counters.get(series)
    if last is not None and value < last and not _resettable(series):
        return True
    t.counters[series] = value
    return False


def _resettable(series: str) -> bool:
    head = series.partition("/")[0]
    return head in RESETTABLE or head.partition(":")[0] in RESETTABLE


def accept(t: Tally, name: str, value: float, ceiling: float | None = None,
           series: str = "") -> bool:
    """Check a gauge reading of ``t``: True to export it; False leaves it
    absent this poll, counts a read error and logs it once per source and
    series."""
    if plausible(name, value, ceiling):
        return True
    reject(t, name + series, value)
    return False


def accept_share(t: Tally, name: str, value: float, series: str = "") -> float | None:
    """Check a share of an interval (see SLACK): the value to export, moved
    to the range's edge where it lies just outside; None where it lies
    farther out (counted and logged as accept() does)."""
    low, high = BOUNDS[name]
    slack = SLACK[name]
    if not low - slack <= value <= high + slack:
        reject(t, name + series, value)
        return None
    return min(high, max(low, value))


def accept_counter(t: Tally, name: str, value: float, series: str = "") -> bool:
    """Check a counter reading: in range, and not lower than the last one
    (unless its resets are documented, RESETTABLE)."""
    key = name + series
    if plausible(name, value) and not went_backwards(t, key, value):
        return True
    reject(t, key, value)
    return False


def accept_slow_counter(gpu: Gpu, name: str, value: float, series: str = "",
                        cache_key: str = "") -> bool:
    """accept_counter() for a GPU counter held by a slow read: ``cache_key``,
    the slow_read key the value came from, is asked again next poll when the
    value is rejected."""
    if accept_counter(gpu, name, value, series):
        return True
    if cache_key:
        gpu.slow.pop(cache_key, None)
    return False


def reject(t: Tally, series: str, value: float) -> None:
    t.errors += 1
    tag = "implausible:" + series
    if tag not in t.warned:
        t.warned.add(tag)
        log.warning("%s: %s reads %r, which no %s can report (a 'not available' value "
                    "or a faulty reading); left out while it does", t.label, series, value,
                    t.kind)
