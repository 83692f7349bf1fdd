"""Metrics of the host around the GPUs (/proc): is the GPU waiting on its host?"""

from __future__ import annotations

from gpu_exporter.catalog_types import Metric
from gpu_exporter.catalog_types import metric_spec as _m

METRICS: tuple[Metric, ...] = (
    _m("gpu_host_cpu_iowait_ratio", "gauge",
       "Share of all CPU time spent idle while waiting for I/O over the last poll interval, "
       "from /proc/stat. High while GPUs sit idle means storage is starving them. "
       "rate(gpu_host_cpu_iowait_seconds_total) over rate(gpu_host_cpu_seconds_total) is the "
       "same share over any window.", (), "host",
       detail=True),
    _m("gpu_host_cpu_steal_ratio", "gauge",
       "Share of all CPU time the hypervisor gave to other guests over the last poll "
       "interval, from /proc/stat. rate(gpu_host_cpu_steal_seconds_total) over "
       "rate(gpu_host_cpu_seconds_total) is the same share over any window.", (), "host",
       detail=True),
    _m("gpu_host_cpu_seconds_total", "counter",
       "CPU time of all CPUs together in every mode since boot, from the aggregate cpu line "
       "of /proc/stat: the denominator of the iowait and steal shares over any window.", (),
       "host"),
    _m("gpu_host_cpu_iowait_seconds_total", "counter",
       "CPU time all CPUs together spent idle while waiting for I/O since boot, from "
       "/proc/stat; rate() of it over rate() of gpu_host_cpu_seconds_total is the iowait "
       "share of any window, whatever the scrape interval.", (), "host"),
    _m("gpu_host_cpu_steal_seconds_total", "counter",
       "CPU time the hypervisor gave to other guests since boot, all CPUs together, from "
       "/proc/stat.", (), "host"),
    _m("gpu_host_context_switches_total", "counter",
       "Context switches on all CPUs since boot, from /proc/stat.", (), "host",
       detail=True),
    _m("gpu_host_pressure_ratio", "gauge",
       "Share of the last 10 seconds in which some (kind=some) or all (kind=full) non-idle "
       "tasks were stalled waiting for the resource, from Linux pressure stall information "
       "(avg10 in /proc/pressure). Absent on kernels without PSI. "
       "rate(gpu_host_pressure_stalled_seconds_total) is the same share over any window.",
       ("resource", "kind"), "host", detail=True),
    _m("gpu_host_pressure_stalled_seconds_total", "counter",
       "Time some (or all) non-idle tasks were stalled waiting for the resource since boot, "
       "from /proc/pressure; rate() of it is the stalled share of any window. Absent on "
       "kernels without PSI.", ("resource", "kind"), "host"),
    _m("gpu_host_memory_total_bytes", "gauge",
       "Physical memory the kernel manages (MemTotal in /proc/meminfo).", (), "host",
       detail=True),
    _m("gpu_host_memory_available_bytes", "gauge",
       "Memory available to start new work without swapping (MemAvailable in /proc/meminfo).",
       (), "host",
       detail=True),
    _m("gpu_host_swap_used_bytes", "gauge",
       "Swap space in use (SwapTotal minus SwapFree in /proc/meminfo).", (), "host"),
    _m("gpu_host_swap_bytes_total", "counter",
       "Bytes read in from swap (direction=in) or written out to it (direction=out) since "
       "boot, from pswpin and pswpout in /proc/vmstat.", ("direction",), "host"),
    _m("gpu_host_load_average", "gauge",
       "Runnable and uninterruptible tasks averaged over the window (1m, 5m or 15m), from "
       "/proc/loadavg.", ("window",), "host",
       detail=True),
    _m("gpu_host_disk_busy_ratio", "gauge",
       "Share of the last poll interval in which the block device had I/O in flight, from "
       "io_ticks in /proc/diskstats (whole devices; partitions, loop and RAM devices left "
       "out). rate(gpu_host_disk_busy_seconds_total) is the same share over any window.",
       ("device",), "host", detail=True),
    _m("gpu_host_disk_busy_seconds_total", "counter",
       "Time the block device had I/O in flight since boot, from io_ticks in /proc/diskstats "
       "(whole devices; partitions, loop and RAM devices left out); rate() of it is the busy "
       "share of any window.", ("device",), "host"),
    _m("gpu_host_network_receive_errors_total", "counter",
       "Receive errors on the network interface since boot, from /proc/net/dev (loopback and "
       "container virtual interfaces left out).", ("interface",), "host",
       detail=True),
    _m("gpu_host_network_receive_drops_total", "counter",
       "Received packets the interface or kernel dropped since boot, from /proc/net/dev "
       "(loopback and container virtual interfaces left out).", ("interface",), "host",
       detail=True),
)
