"""The rows of a GPU starved by its host: a job holds the GPU (or MIG
instance) and it sits idle or works below capacity because its input waits
on storage, its process waits for a CPU, the host swaps, the process is stuck
asleep, or its workload runs at its CPU, memory or I/O limit, or on a VM
whose CPUs are stolen. Each cause is two rows, idle (a warning) and underfed
(info). ``table.py`` lists them in the table; their rules are in ``rules.py``."""

from __future__ import annotations

from gpu_exporter.catalogs import attribution, deep, host
from gpu_exporter.catalogs import device as dev
from gpu_exporter.catalogs import processes as procs

# The words of the rows of a workload held at its I/O limit.
from gpu_exporter.diagnosis.io_limit_words import IO_LIMIT as _IO_LIMIT
from gpu_exporter.diagnosis.io_limit_words import IO_LIMIT_CONFIRM as _IO_LIMIT_CONFIRM
from gpu_exporter.diagnosis.io_limit_words import IO_LIMIT_ESCALATE as _IO_LIMIT_ESCALATE
from gpu_exporter.diagnosis.io_limit_words import IO_LIMIT_FIX as _IO_LIMIT_FIX
from gpu_exporter.diagnosis.io_limit_words import IO_LIMIT_READS as _IO_LIMIT_READS
from gpu_exporter.diagnosis.row import Row
from gpu_exporter.facts.catalog_types import Metric

# docs/diagnosis.md states the principles every row follows; the prose says
# which way causation runs and never claims more than the evidence shows.
_JOB = ("a job holds the GPU or MIG instance (a process has a context on it; where the "
        "processes cannot be read, more than {memory_held_ratio} of its memory is used)")
_IDLE_GPU = (f"{_JOB} and it does almost no work (utilization, or a MIG instance's SM "
             "activity, below {idle_utilization})")
_UNDERFED_GPU = (f"{_JOB} and it works less than {{busy_utilization}} of the time (a fed GPU "
                 "works more; any load below that can be a starved one's)")
# The workload's own counters (its container's or Slurm job's cgroup, its
# processes' own state) judge before the host's: on a shared node host-wide
# counters blame the wrong job, and they speak only where the job's own are
# not read.
_IO = ("its input waits on storage: the process feeding it is blocked in the kernel (state "
       "D) for the window, or sleeps while at least half of the loader workers it forked "
       "are, or its workload's own I/O pressure is at least "
       "{io_pressure_high}; only where neither is read does the host's iowait (at least "
       "{iowait_high}) or I/O pressure (at least {io_pressure_high}) speak for it, and a "
       "workload whose own cgroup shows no I/O stall is not blamed for the host's")
_CPU = ("its process waits for a CPU: its own run-queue wait is at least "
        "{run_queue_wait_high} and its workload's own CPU pressure at least "
        "{cpu_pressure_high}, each where the kernel keeps it; only where neither is read "
        "does the host's CPU pressure (at least {cpu_pressure_high}) speak for it")
_SWAP = ("the host swaps: pages move in or out of swap at {swap_bytes_per_s} or more (memory "
         "pressure alone is not swapping), and the workload's own memory stall, where read, "
         "shows it waits on it")
_LIMIT = ("its workload (its container's or Slurm job's cgroup) is throttled by its CPU limit "
          "in at least {cpu_throttled_high} of its CPU periods: the limit holds the job "
          "back, whatever the host's CPU pressure")
_MEMORY_LIMIT = ("its workload runs at its memory limit (using at least "
                 "{memory_limit_used_ratio} of memory.max) and the kernel reclaims its page "
                 "cache there: it hits the limit, or reclaims at least {reclaim_bytes_per_s} "
                 "of it. Nothing needs to swap: the job re-reads what was evicted")
_STEAL = ("the host is a virtual machine whose hypervisor takes at least {steal_high} of its "
          "CPU time (steal): every CPU-side step of the job runs that much slower, and "
          "inside the guest only steal shows it")
_IO_FIX = ("Shard or pack small files into larger records, stage the dataset to local NVMe, "
           "prefetch (DataLoader prefetch_factor), and check the shared filesystem.")
_IO_CONFIRM = ("mpstat -P ALL 1 3", "iostat -xz 1 3", "cat /proc/pressure/io")
_IO_ESCALATE = ("Escalate to the storage team when iowait stays high on several nodes reading "
                "the same filesystem.")
_CPU_FIX = ("Pin the training process and its dataloader workers with taskset/numactl, use "
            "fewer dataloader workers than cores, and nice or move background jobs.")
_CPU_CONFIRM = ("cat /proc/pressure/cpu", "pidstat -w -p PID 1 5", "top -H -p PID")
_CPU_ESCALATE = "Escalate to the job owner when the node runs more workers than cores."
_SWAP_FIX = ("Reduce host memory use (dataloader workers, prefetch, caches), cap prefetching, "
             "or add RAM; never train on a swapping host.")
_SWAP_CONFIRM = ("free -h", "vmstat 1 5", "cat /proc/pressure/memory")
_SWAP_ESCALATE = "Escalate to the job owner; if the node's RAM is below its spec, to hardware."

_LIMIT_FIX = ("Raise the container's CPU limit (resources.limits.cpu) or the job's CPUs, or run "
              "fewer data loader workers than the limit allows; the node may have CPUs to "
              "spare.")
_LIMIT_CONFIRM = ("cat /sys/fs/cgroup/<workload cgroup>/cpu.stat",
                  "cat /sys/fs/cgroup/<workload cgroup>/cpu.max",
                  "kubectl describe pod -n NAMESPACE POD")
_LIMIT_ESCALATE = "Escalate to the job owner (the pod or job named in the finding)."
_MEMORY_LIMIT_FIX = ("Raise the workload's memory limit (resources.limits.memory, the job's "
                     "--mem) or shrink what it keeps in memory (data loader workers, prefetch, "
                     "caches): at its limit the kernel evicts the page cache the job's reads "
                     "need, and it reads the same files again.")
_MEMORY_LIMIT_CONFIRM = ("cat /sys/fs/cgroup/<workload cgroup>/memory.events",
                         "grep -E 'pgscan|pgsteal|workingset_refault' "
                         "/sys/fs/cgroup/<workload cgroup>/memory.stat",
                         "cat /sys/fs/cgroup/<workload cgroup>/memory.pressure")
_STEAL_FIX = ("Move the job to a VM whose vCPUs are dedicated (no overcommit), or ask the cloud "
              "or hypervisor team why the host is overcommitted; inside the guest nothing "
              "gives the CPU back.")
_STEAL_CONFIRM = ("mpstat -P ALL 1 3", "vmstat 1 5", "cat /proc/stat")
_STEAL_ESCALATE = "Escalate to whoever runs the hypervisor or the cloud account."
_STARVED_READS = (dev.UTILIZATION_RATIO, deep.MIG_SM_ACTIVE_RATIO, dev.MEMORY_USED_BYTES,
                  deep.MIG_MEMORY_USED_BYTES, procs.PROCESS_MEMORY_USED_BYTES)
_IO_READS = (procs.PROCESS_STATE, attribution.WORKLOAD_PRESSURE_RATIO, host.HOST_CPU_IOWAIT_RATIO,
             host.HOST_PRESSURE_RATIO)
_CPU_READS = (procs.PROCESS_RUN_QUEUE_WAIT_SECONDS_TOTAL, attribution.WORKLOAD_PRESSURE_RATIO,
              host.HOST_PRESSURE_RATIO)
_SWAP_READS = (host.HOST_SWAP_BYTES_TOTAL, attribution.WORKLOAD_PRESSURE_RATIO,
               host.HOST_PRESSURE_RATIO)
_LIMIT_READS = (attribution.WORKLOAD_CPU_THROTTLED_PERIODS_TOTAL,
                attribution.WORKLOAD_CPU_PERIODS_TOTAL, attribution.WORKLOAD_CPU_LIMIT_CORES)
_MEMORY_LIMIT_READS = (attribution.WORKLOAD_MEMORY_LIMIT_BYTES,
                       attribution.WORKLOAD_MEMORY_USED_BYTES,
                       attribution.WORKLOAD_MEMORY_LIMIT_HITS_TOTAL,
                       attribution.WORKLOAD_MEMORY_RECLAIMED_BYTES_TOTAL)
_STEAL_READS = (host.HOST_CPU_STEAL_RATIO,)


def _starved_pair(cause: str, what: str, idle_summary: str, underfed_summary: str,
                  runs: str, fix: str, confirm: tuple[str, ...], escalate: str,
                  reads: tuple[Metric, ...]) -> tuple[Row, Row]:
    """A host-side cause of a starved GPU, as two rows: the GPU (or MIG
    instance) almost idle (a warning) and working below its busy threshold
    (info; the idle row, when on, restates it)."""
    return (Row("memory_held_sm_idle", cause, "warning", idle_summary,
                f"{_IDLE_GPU}, because {what}.", fix, confirm, escalate,
                per_instance=True, reads=_STARVED_READS + reads, load_gate=_STARVED_GATE),
            Row("memory_held_sm_underfed", cause, "info", underfed_summary,
                f"{_UNDERFED_GPU}, because {what}. {runs}", fix, confirm, escalate,
                per_instance=True, reads=_STARVED_READS + reads, load_gate=_STARVED_GATE))


# The symptom of a starved GPU is its load: what keeps its input from it
# leaves it idle or underfed, and a GPU kept busy is fed, whatever the host's
# figures say.
_STARVED_GATE = ("the symptom is the load: a GPU or instance kept busy is fed, whatever "
                 "slows its host")


# Starved GPUs rarely read exactly 0 %: between idle and busy, the same host
# causes slow the job down without stopping it. Reported for dashboards and
# `diagnose` (info); the idle rows, for the same cause, open tickets.
IDLE_DATA_PIPELINE_IO, UNDERFED_DATA_PIPELINE_IO = _starved_pair(
    "data_pipeline_io", _IO, "GPU holds memory but sits idle waiting on storage",
    "GPU holds memory but works well below capacity: its input waits on storage",
    "The job runs, slowed by its reads.", _IO_FIX, _IO_CONFIRM, _IO_ESCALATE, _IO_READS)
IDLE_CPU_CONTENTION, UNDERFED_CPU_CONTENTION = _starved_pair(
    "cpu_contention", _CPU, "GPU holds memory but sits idle while its process waits for a CPU",
    "GPU holds memory but works well below capacity: its process waits for a CPU",
    "The job runs, slowed by the CPU it waits for.", _CPU_FIX, _CPU_CONFIRM, _CPU_ESCALATE,
    _CPU_READS)
IDLE_HOST_SWAPPING, UNDERFED_HOST_SWAPPING = _starved_pair(
    "host_swapping", _SWAP, "GPU holds memory but sits idle while the host swaps",
    "GPU holds memory but works well below capacity while the host swaps",
    "The job runs, slowed by page faults.", _SWAP_FIX, _SWAP_CONFIRM, _SWAP_ESCALATE,
    _SWAP_READS)
IDLE_PROCESS_STALLED = Row(
    "memory_held_sm_idle", "process_stalled", "warning",
    "GPU holds memory but its process is stuck asleep",
    f"{_IDLE_GPU}, and every process on it has been asleep (state S) for the window on less "
    "than {stalled_cpu_ratio} of a CPU, waking fewer than {stalled_wakeups_per_s} times a "
    "second: it waits for something that does not come (a lock, a barrier, a peer that "
    "died). A process blocked in the kernel (D) waits on I/O instead, and one that wakes "
    "often waits for work (an idle server): neither is reported here.",
    "Attach py-spy dump --pid PID to see where it waits; for a distributed job, check its "
    "rendezvous and its other ranks.",
    ("py-spy dump --pid PID", "ps -o pid,stat,etime,comm -p PID",
     "grep ctxt_switches /proc/PID/status", "nvidia-smi pmon -c 1"),
    "Escalate to the job owner with the py-spy stack.",
    per_instance=True, reads=(*_STARVED_READS, procs.PROCESS_STATE,
                              procs.PROCESS_CPU_SECONDS_TOTAL,
                              procs.PROCESS_CONTEXT_SWITCHES_TOTAL),
    load_gate="a process stuck asleep launches nothing: its GPU or instance is idle")
IDLE_CPU_LIMIT_THROTTLED, UNDERFED_CPU_LIMIT_THROTTLED = _starved_pair(
    "cpu_limit_throttled", _LIMIT,
    "GPU holds memory but sits idle while its container is throttled by its CPU limit",
    "GPU holds memory but works well below capacity: its workload's CPU limit throttles it",
    "The job runs, slowed by its CPU limit.", _LIMIT_FIX, _LIMIT_CONFIRM, _LIMIT_ESCALATE,
    _LIMIT_READS)
IDLE_MEMORY_LIMIT_RECLAIM, UNDERFED_MEMORY_LIMIT_RECLAIM = _starved_pair(
    "memory_limit_reclaim", _MEMORY_LIMIT,
    "GPU holds memory but sits idle while its workload reclaims at its memory limit",
    "GPU holds memory but works well below capacity: its workload is at its memory limit",
    "The job runs, slowed by the reads its evicted cache costs it.", _MEMORY_LIMIT_FIX,
    _MEMORY_LIMIT_CONFIRM, _LIMIT_ESCALATE, _MEMORY_LIMIT_READS)
IDLE_CPU_STEAL, UNDERFED_CPU_STEAL = _starved_pair(
    "cpu_steal", _STEAL, "GPU holds memory but sits idle on a VM whose CPUs are stolen",
    "GPU holds memory but works well below capacity: the VM's CPUs are stolen",
    "The job runs, slowed by the CPU time the hypervisor takes.", _STEAL_FIX, _STEAL_CONFIRM,
    _STEAL_ESCALATE, _STEAL_READS)
IDLE_IO_LIMIT_THROTTLED, UNDERFED_IO_LIMIT_THROTTLED = _starved_pair(
    "io_limit_throttled", _IO_LIMIT,
    "GPU holds memory but sits idle while its workload's reads are held at its I/O limit",
    "GPU holds memory but works well below capacity: its workload's I/O limit holds its reads",
    "The job runs, slowed by its I/O limit.", _IO_LIMIT_FIX, _IO_LIMIT_CONFIRM,
    _IO_LIMIT_ESCALATE, _IO_LIMIT_READS)
