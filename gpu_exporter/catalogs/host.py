"""Metrics of the host around the GPUs (/proc): is the GPU waiting on its host?"""

from __future__ import annotations

from gpu_exporter.facts.catalog_types import Bounds, Metric, declared
from gpu_exporter.facts.catalog_types import metric_spec as _m

# Every reading from /proc is checked against these before it is exported or
# handed to the diagnosis: garbage leaves the series absent for the poll.
_TICKS = Bounds(0.0, 2.0**63 / 100)
_COUNT = Bounds(0.0, 2.0**63)

# Shares of the last interval. The kernel's per-CPU iowait and steal step
# back a little when a task migrates or a hypervisor corrects them: a share
# just outside the range is exported at its edge.
HOST_CPU_IOWAIT_RATIO = _m(
    "gpu_host_cpu_iowait_ratio", "gauge",
    "Share of all CPU time spent idle while waiting for I/O over the last poll interval, "
    "from /proc/stat. High while GPUs sit idle means storage is starving them. "
    "rate(gpu_host_cpu_iowait_seconds_total) over rate(gpu_host_cpu_seconds_total) is the "
    "same share over any window.", (), "host",
    detail=True,
    bounds=Bounds(0.0, 1.0, slack=0.05))

HOST_CPU_STEAL_RATIO = _m(
    "gpu_host_cpu_steal_ratio", "gauge",
    "Share of all CPU time the hypervisor gave to other guests over the last poll "
    "interval, from /proc/stat. rate(gpu_host_cpu_steal_seconds_total) over "
    "rate(gpu_host_cpu_seconds_total) is the same share over any window.", (), "host",
    detail=True,
    bounds=Bounds(0.0, 1.0, slack=0.05))

# CPU time in USER_HZ ticks, 64-bit: 2**63 ticks is far beyond any uptime,
# and the all-ones garbage of a -1 written as unsigned is above it.
HOST_CPU_SECONDS_TOTAL = _m(
    "gpu_host_cpu_seconds_total", "counter",
    "CPU time of all CPUs together in every mode since boot, from the aggregate cpu line "
    "of /proc/stat: the denominator of the iowait and steal shares over any window.", (),
    "host",
    bounds=_TICKS)

HOST_CPU_IOWAIT_SECONDS_TOTAL = _m(
    "gpu_host_cpu_iowait_seconds_total", "counter",
    "CPU time all CPUs together spent idle while waiting for I/O since boot, from "
    "/proc/stat; rate() of it over rate() of gpu_host_cpu_seconds_total is the iowait "
    "share of any window, whatever the scrape interval.", (), "host",
    bounds=_TICKS)

HOST_CPU_STEAL_SECONDS_TOTAL = _m(
    "gpu_host_cpu_steal_seconds_total", "counter",
    "CPU time the hypervisor gave to other guests since boot, all CPUs together, from "
    "/proc/stat.", (), "host",
    bounds=_TICKS)

# Kernel counters since boot are 64-bit unsigned; 2**63 is 290 years of a
# billion a second.
HOST_CONTEXT_SWITCHES_TOTAL = _m(
    "gpu_host_context_switches_total", "counter",
    "Context switches on all CPUs since boot, from /proc/stat.", (), "host",
    detail=True,
    bounds=_COUNT)

# PSI's avg10: a percentage of the last 10 s.
HOST_PRESSURE_RATIO = _m(
    "gpu_host_pressure_ratio", "gauge",
    "Share of the last 10 seconds in which some (kind=some) or all (kind=full) non-idle "
    "tasks were stalled waiting for the resource, from Linux pressure stall information "
    "(avg10 in /proc/pressure). Absent on kernels without PSI. "
    "rate(gpu_host_pressure_stalled_seconds_total) is the same share over any window.",
    ("resource", "kind"), "host", detail=True,
    bounds=Bounds(0.0, 1.0))

# Microseconds, 64-bit.
HOST_PRESSURE_STALLED_SECONDS_TOTAL = _m(
    "gpu_host_pressure_stalled_seconds_total", "counter",
    "Time some (or all) non-idle tasks were stalled waiting for the resource since boot, "
    "from /proc/pressure; rate() of it is the stalled share of any window. Absent on "
    "kernels without PSI.", ("resource", "kind"), "host",
    bounds=Bounds(0.0, 2.0**63 / 1e6))

# The largest machines sold hold 32-48 TiB; 1 PiB leaves room and rejects a
# number no kernel's memory accounting reaches. Available memory is part of
# the total, swap in use part of the swap there is.
HOST_MEMORY_TOTAL_BYTES = _m(
    "gpu_host_memory_total_bytes", "gauge",
    "Physical memory the kernel manages (MemTotal in /proc/meminfo).", (), "host",
    detail=True,
    bounds=Bounds(1.0, 2.0**50))

HOST_MEMORY_AVAILABLE_BYTES = _m(
    "gpu_host_memory_available_bytes", "gauge",
    "Memory available to start new work without swapping (MemAvailable in /proc/meminfo).",
    (), "host",
    detail=True,
    bounds=Bounds(0.0, 2.0**50, over_ceiling=1.0))

HOST_SWAP_USED_BYTES = _m(
    "gpu_host_swap_used_bytes", "gauge",
    "Swap space in use (SwapTotal minus SwapFree in /proc/meminfo).", (), "host",
    bounds=Bounds(0.0, 2.0**50, over_ceiling=1.0))

HOST_SWAP_BYTES_TOTAL = _m(
    "gpu_host_swap_bytes_total", "counter",
    "Bytes read in from swap (direction=in) or written out to it (direction=out) since "
    "boot, from pswpin and pswpout in /proc/vmstat.", ("direction",), "host",
    bounds=_COUNT)

# Runnable and waiting tasks: at most PID_MAX_LIMIT (4,194,304); NaN and inf
# parse as floats but are no load.
HOST_LOAD_AVERAGE = _m(
    "gpu_host_load_average", "gauge",
    "Runnable and uninterruptible tasks averaged over the window (1m, 5m or 15m), from "
    "/proc/loadavg.", ("window",), "host",
    detail=True,
    bounds=Bounds(0.0, 4194304.0))

# A disk's busy time is counted by the kernel while the interval is the
# collector's own clock between two polls, which a delayed poll stretches or
# shrinks.
HOST_DISK_BUSY_RATIO = _m(
    "gpu_host_disk_busy_ratio", "gauge",
    "Share of the last poll interval in which the block device had I/O in flight, from "
    "io_ticks in /proc/diskstats (whole devices; partitions, loop and RAM devices left "
    "out). rate(gpu_host_disk_busy_seconds_total) is the same share over any window.",
    ("device",), "host", detail=True,
    bounds=Bounds(0.0, 1.0, slack=0.5))

# Milliseconds; older kernels print them as 32 bits (a wrap every 49.7 days).
HOST_DISK_BUSY_SECONDS_TOTAL = _m(
    "gpu_host_disk_busy_seconds_total", "counter",
    "Time the block device had I/O in flight since boot, from io_ticks in /proc/diskstats "
    "(whole devices; partitions, loop and RAM devices left out); rate() of it is the busy "
    "share of any window.", ("device",), "host",
    bounds=Bounds(0.0, 2.0**64 / 1000, resets=True))

# An interface's counters restart at 0 when its driver re-creates it under
# the same name (a module reload, a virtual function re-created).
HOST_NETWORK_RECEIVE_ERRORS_TOTAL = _m(
    "gpu_host_network_receive_errors_total", "counter",
    "Receive errors on the network interface since boot, from /proc/net/dev (loopback and "
    "container virtual interfaces left out).", ("interface",), "host",
    detail=True,
    bounds=Bounds(0.0, 2.0**63, resets=True))

HOST_NETWORK_RECEIVE_DROPS_TOTAL = _m(
    "gpu_host_network_receive_drops_total", "counter",
    "Received packets the interface or kernel dropped since boot, from /proc/net/dev "
    "(loopback and container virtual interfaces left out).", ("interface",), "host",
    detail=True,
    bounds=Bounds(0.0, 2.0**63, resets=True))

# The kernel's thermal throttle counters (x86 CPUs that keep them; absent
# elsewhere). They restart at 0 only with a boot, or a CPU taken offline and
# back.
HOST_CPU_THERMAL_THROTTLES_TOTAL = _m(
    "gpu_host_cpu_thermal_throttles_total", "counter",
    "Times the host's CPU cores (kind=core) or packages (kind=package) went above their "
    "temperature limit and were slowed since boot, from "
    "/sys/devices/system/cpu/cpu*/thermal_throttle/*_throttle_count, each core and package "
    "counted once. Absent on CPUs that keep no such counters.", ("kind",), "host",
    bounds=Bounds(0.0, 2.0**63, resets=True))

HOST_CPU_THERMAL_THROTTLED_SECONDS_TOTAL = _m(
    "gpu_host_cpu_thermal_throttled_seconds_total", "counter",
    "Time the host's CPU cores (kind=core) or packages (kind=package) spent throttled for "
    "heat since boot, summed over each core and package once, from "
    "*_throttle_total_time_ms (kernel 5.7 and newer).", ("kind",), "host",
    detail=True,
    bounds=Bounds(0.0, 2.0**63 / 1000, resets=True))

METRICS: tuple[Metric, ...] = declared(globals())
