"""Metrics of GPU processes: NVML's view joined with the host's view of the PID."""

from __future__ import annotations

from gpu_exporter.facts.cadence import PROCESS_SAMPLES_EVERY_S
from gpu_exporter.facts.catalog_types import GPU, Metric, declared
from gpu_exporter.facts.catalog_types import metric_spec as _m

# MIG placement is part of every per-process series; empty when MIG is off.
PROC = (*GPU, "pid", "comm", "gpu_instance", "compute_instance")

PROCESS_INFO = _m(
    "gpu_process_info", "gauge",
    "A process holding a context on the GPU (value 1): its type (compute or graphics) and, "
    "when it runs in a container, the container id and Kubernetes pod UID from its cgroup.",
    (*PROC, "type", "container_id", "pod_uid"), "process_series")

PROCESS_MEMORY_USED_BYTES = _m(
    "gpu_process_memory_used_bytes", "gauge",
    "GPU memory the process holds on this GPU, from NVML.", PROC, "process_series")

PROCESS_SM_UTILIZATION_RATIO = _m(
    "gpu_process_sm_utilization_ratio", "gauge",
    f"Share of the time since the last read (every {PROCESS_SAMPLES_EVERY_S:g} s) in which "
    "the process ran kernels "
    "on this GPU, from NVML's per-process samples (0 when it ran none).", PROC,
    "process_series")

PROCESS_CPU_SECONDS_TOTAL = _m(
    "gpu_process_cpu_seconds_total", "counter",
    "CPU time (user + system) the process has used, from /proc/PID/stat.", PROC,
    "process_series")

PROCESS_RUN_QUEUE_WAIT_SECONDS_TOTAL = _m(
    "gpu_process_run_queue_wait_seconds_total", "counter",
    "Time the process's threads spent runnable but waiting for a CPU, from "
    "/proc/PID/schedstat; absent where the kernel does not keep it.", PROC, "process_series")

PROCESS_RESIDENT_MEMORY_BYTES = _m(
    "gpu_process_resident_memory_bytes", "gauge",
    "Host memory resident for the process, from /proc/PID/status.", PROC, "process_series")

PROCESS_THREADS = _m(
    "gpu_process_threads", "gauge", "Threads of the process, from /proc/PID/status.",
    PROC, "process_series")

PROCESS_STATE = _m(
    "gpu_process_state", "gauge",
    "1 for the process's current scheduler state (R running, S sleeping, D blocked on "
    "I/O, ...), from /proc/PID/stat.", (*PROC, "state"), "process_series")

PROCESS_CONTEXT_SWITCHES_TOTAL = _m(
    "gpu_process_context_switches_total", "counter",
    "Context switches of the process: voluntary (it waited) or involuntary (it was "
    "preempted), from /proc/PID/status.", (*PROC, "kind"), "process_series")

PROCESS_CPU_AFFINITY_LOCAL = _m(
    "gpu_process_cpu_affinity_local", "gauge",
    "1 when every CPU the process may run on is local to the GPU's NUMA node, 0 when some "
    "are not (its host-to-device traffic may cross sockets).", PROC, "process_series")

PROCESS_SERIES_DROPPED_TOTAL = _m(
    "gpu_process_series_dropped_total", "counter",
    "GPU processes not exported because the GPU had more than --processes.max-per-gpu; "
    "the ones with the least GPU memory are dropped first.", GPU, "process_series")

METRICS: tuple[Metric, ...] = declared(globals())
