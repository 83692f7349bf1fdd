"""Metrics of who holds each GPU (Kubernetes pods from the kubelet, Slurm jobs
from cgroups) and of each such workload's own cgroup signals.

Info series carry the owner once per allocation, so other series join to
them instead of every GPU series carrying pod or job labels. Workloads are
keyed by the ids ``gpu_process_info`` already carries (``pod_uid``,
``container_id``) or by ``slurm_job_id``; exactly one of the two keys is set
on a series, the other is "". No label is named ``job`` or ``instance``:
Prometheus sets those at scrape.
"""

from __future__ import annotations

from gpu_exporter.facts.catalog_types import GPU, Metric, declared
from gpu_exporter.facts.catalog_types import metric_spec as _m

# A MIG device's allocation is on its parent GPU, placed like a process's.
ALLOCATION = (*GPU, "gpu_instance", "compute_instance", "namespace", "pod", "container",
              "resource", "claim_namespace", "claim")
JOB = (*GPU, "scheduler", "slurm_job_id", "slurm_uid", "slurm_step")
# One workload: a container of a pod, or a Slurm job.
WORKLOAD = ("pod_uid", "container_id", "slurm_job_id")
SOURCE = "attribution"

ALLOCATION_INFO = _m(
    "gpu_allocation_info", "gauge",
    "A GPU or MIG device the kubelet allocated to a container (value 1), from the "
    "PodResources API: by the device plugin (resource nvidia.com/gpu ...), or through a "
    "ResourceClaim (resource gpu.nvidia.com, the DRA driver, with the claim's namespace "
    "and name; empty otherwise); gpu_instance and compute_instance are empty for a whole "
    "GPU. A GPU shared by time-slicing or by a claim several containers use has one "
    "series per container holding it.",
    ALLOCATION, SOURCE)

JOB_INFO = _m(
    "gpu_job_info", "gauge",
    "A Slurm job running on the GPU (value 1), from its processes' cgroups (or "
    "their nearest slurmstepd's process title); slurm_uid is the job's numeric "
    "user id, empty when not known.", JOB, SOURCE)

OWNER_SM_SHARE_RATIO = _m(
    "gpu_owner_sm_share_ratio", "gauge",
    "On a GPU with more than one owner, each owner's share of the SM time its processes "
    "used since the last per-process sample (NVML), which the energy recording rule splits "
    "the GPU's energy by: owner is \"slurm job <id>\", \"pod <uid> container <id>\" (a "
    "process's cgroup names its pod by UID) or \"host\". Absent where NVML gives no "
    "per-process samples or no process ran kernels.", (*GPU, "owner"), SOURCE)

WORKLOAD_PRESSURE_RATIO = _m(
    "gpu_workload_pressure_ratio", "gauge",
    "Share of the last 10 s in which some (kind=some) or all (kind=full) of the "
    "workload's tasks were stalled on the resource, from its cgroup's "
    "{cpu,io,memory}.pressure. Absent on cgroup v1 and kernels without PSI. "
    "rate(gpu_workload_pressure_stalled_seconds_total) is the same share over any window.",
    (*WORKLOAD, "resource", "kind"), SOURCE, detail=True)

WORKLOAD_PRESSURE_STALLED_SECONDS_TOTAL = _m(
    "gpu_workload_pressure_stalled_seconds_total", "counter",
    "Time the workload's tasks were stalled on the resource, from its cgroup's "
    "{cpu,io,memory}.pressure totals.", (*WORKLOAD, "resource", "kind"), SOURCE)

WORKLOAD_CPU_PERIODS_TOTAL = _m(
    "gpu_workload_cpu_periods_total", "counter",
    "CPU-limit enforcement periods in which the workload ran, from cpu.stat nr_periods "
    "(stays 0 without a CPU limit).", WORKLOAD, SOURCE)

WORKLOAD_CPU_THROTTLED_PERIODS_TOTAL = _m(
    "gpu_workload_cpu_throttled_periods_total", "counter",
    "Periods in which the workload used up its CPU limit and was throttled, from "
    "cpu.stat nr_throttled.", WORKLOAD, SOURCE)

WORKLOAD_CPU_THROTTLED_SECONDS_TOTAL = _m(
    "gpu_workload_cpu_throttled_seconds_total", "counter",
    "Time the workload's tasks were held off the CPU by its limit, from cpu.stat "
    "throttled_usec.", WORKLOAD, SOURCE)

WORKLOAD_CPU_LIMIT_CORES = _m(
    "gpu_workload_cpu_limit_cores", "gauge",
    "The workload's CPU limit in CPUs (quota / period from cpu.max); absent when "
    "unlimited.", WORKLOAD, SOURCE)

WORKLOAD_OOM_KILLS_TOTAL = _m(
    "gpu_workload_oom_kills_total", "counter",
    "Tasks of the workload killed by the OOM killer, from memory.events oom_kill.",
    WORKLOAD, SOURCE)

WORKLOAD_MEMORY_LIMIT_BYTES = _m(
    "gpu_workload_memory_limit_bytes", "gauge",
    "The workload's memory limit, from memory.max; absent when unlimited.",
    WORKLOAD, SOURCE)

WORKLOAD_MEMORY_USED_BYTES = _m(
    "gpu_workload_memory_used_bytes", "gauge",
    "Memory charged to the workload (its anonymous memory, page cache and kernel "
    "memory), from memory.current.", WORKLOAD, SOURCE)

WORKLOAD_MEMORY_LIMIT_HITS_TOTAL = _m(
    "gpu_workload_memory_limit_hits_total", "counter",
    "Times the workload's memory use hit its limit and the kernel reclaimed to stay "
    "under it, from memory.events max.", WORKLOAD, SOURCE)

WORKLOAD_MEMORY_RECLAIMED_BYTES_TOTAL = _m(
    "gpu_workload_memory_reclaimed_bytes_total", "counter",
    "Memory the kernel reclaimed from the workload at its own limit (its tasks "
    "reclaiming as they charge), from memory.stat pgsteal_direct.", WORKLOAD, SOURCE)

# Each limited device is a series of its own; a pod limits the disk or two it uses.
IO_DEVICES_PER_WORKLOAD = 8
_IO_DEVICES = (f"Only devices io.max limits, at most {IO_DEVICES_PER_WORKLOAD} per workload "
               "(the first by number; device is the block device's MAJ:MIN as lsblk prints "
               "it); absent without a limit.")

WORKLOAD_IO_LIMIT_BYTES_PER_SECOND = _m(
    "gpu_workload_io_limit_bytes_per_second", "gauge",
    "The workload's I/O limit on a block device in bytes per second, from io.max rbps "
    "(direction=read) and wbps (direction=write). " + _IO_DEVICES,
    (*WORKLOAD, "device", "direction"), SOURCE)

WORKLOAD_IO_LIMIT_OPERATIONS_PER_SECOND = _m(
    "gpu_workload_io_limit_operations_per_second", "gauge",
    "The workload's I/O limit on a block device in I/Os per second, from io.max riops "
    "(direction=read) and wiops (direction=write). " + _IO_DEVICES,
    (*WORKLOAD, "device", "direction"), SOURCE)

WORKLOAD_IO_BYTES_TOTAL = _m(
    "gpu_workload_io_bytes_total", "counter",
    "Bytes the workload read (direction=read) and wrote (direction=write) on a block "
    "device its io.max limits, from io.stat rbytes and wbytes: rate() against "
    "gpu_workload_io_limit_bytes_per_second is how close it runs to its limit. "
    + _IO_DEVICES, (*WORKLOAD, "device", "direction"), SOURCE)

WORKLOAD_IO_OPERATIONS_TOTAL = _m(
    "gpu_workload_io_operations_total", "counter",
    "I/Os the workload issued on a block device its io.max limits, from io.stat rios "
    "(direction=read) and wios (direction=write). " + _IO_DEVICES,
    (*WORKLOAD, "device", "direction"), SOURCE)

EXPORTER_WORKLOAD_CGROUPS = _m(
    "gpu_exporter_workload_cgroups", "gauge",
    "Workloads with a process on a GPU, by how their own cgroup signals were read this "
    "poll: read, or why none could be: no_tree (no cgroup tree mounted), outside (the "
    "mounted tree is the exporter's own cgroup namespace's, not the host's), "
    "namespace_root_unknown (paths are relative to the exporter's cgroup namespace and its "
    "own cgroup is not in the tree), not_found, denied, no_files. Each state is always "
    "exported (0 when none).", ("state",), SOURCE)

EXPORTER_CGROUP_LAYOUT_INFO = _m(
    "gpu_exporter_cgroup_layout_info", "gauge",
    "The cgroup tree the exporter reads workloads' signals from (value 1): layout v2, "
    "hybrid (v1 controllers, cgroup2 at unified/), v1 or none; namespace host (paths "
    "placed as printed), private (placed under the exporter's own cgroup namespace root, "
    "found in the tree) or unknown (its own cgroup is not in the tree).",
    ("layout", "namespace"), SOURCE)

EXPORTER_POD_RESOURCES_STATE = _m(
    "gpu_exporter_pod_resources_state", "gauge",
    "1 for the current state of the kubelet PodResources client, 0 for the others: ok, "
    "socket_absent (attribution off), unreadable, timed_out, error, starting.",
    ("state",), SOURCE)

EXPORTER_POD_RESOURCES_FAILURES_TOTAL = _m(
    "gpu_exporter_pod_resources_failures_total", "counter",
    "Failed attempts to read the kubelet's PodResources API (an absent socket is not "
    "a failure: attribution is off).", (), SOURCE)

METRICS: tuple[Metric, ...] = declared(globals())
