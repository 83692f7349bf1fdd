"""The symptom -> cause table (SPEC §5), one row per rule. This is the single
source of truth the exporter (``gpu_diagnosis_active``), ``gpu-exporter
diagnose``, the runbook, the alert rules and the dashboards all read.

The principles every row is held to (judged at every load a cause can exist
at, the most specific evidence first, process states read for what they mean,
a cause on its own signal, what a cause explains listed under it, every cause
signal read, MIG instances judged like GPUs) are in docs/diagnosis.md, with
the tests that guard them and the generator's results.

Each row is a named object: its condition is registered on it in ``rules.py``
(``rule(t.IDLE_DATA_PIPELINE_IO)(_data_pipeline)``: a misspelled row is an AttributeError at
import; which causes explain which others is ``precedence.py``, and the thresholds its
prose quotes come from ``thresholds.py`` (``{iowait_high}`` in ``evidence`` is
filled from the running configuration), so the words never drift from the
numbers the rules use.
"""

from __future__ import annotations

# The row of an allocated GPU whose pod runs its code on the CPU.
from gpu_exporter.diagnosis.allocation_rows import ALLOCATED_RUNS_ON_CPU as ALLOCATED_RUNS_ON_CPU

# The words of the rows of a workload held at its I/O limit.
from gpu_exporter.diagnosis.io_limit_words import IO_LIMIT as _IO_LIMIT
from gpu_exporter.diagnosis.io_limit_words import IO_LIMIT_CONFIRM as _IO_LIMIT_CONFIRM
from gpu_exporter.diagnosis.io_limit_words import IO_LIMIT_ESCALATE as _IO_LIMIT_ESCALATE
from gpu_exporter.diagnosis.io_limit_words import IO_LIMIT_FIX as _IO_LIMIT_FIX
from gpu_exporter.diagnosis.io_limit_words import IO_LIMIT_READS as _IO_LIMIT_READS

# The link rows beside PCIe live in their own module (this one stays readable).
from gpu_exporter.diagnosis.link_rows import C2C_ERRORS as C2C_ERRORS
from gpu_exporter.diagnosis.link_rows import NVLINK_ERRORS as NVLINK_ERRORS
from gpu_exporter.diagnosis.network_rows import NIC_ACROSS_SOCKETS as NIC_ACROSS_SOCKETS
from gpu_exporter.diagnosis.network_rows import RDMA_ERRORS as RDMA_ERRORS
from gpu_exporter.diagnosis.network_rows import RDMA_PORT_DEGRADED as RDMA_PORT_DEGRADED

# Row and Severity are what a row is; the table's readers import them from here too.
from gpu_exporter.diagnosis.row import Row as Row
from gpu_exporter.diagnosis.row import Severity as Severity

# The rows of a workload's growth, its host CPUs' heat and memory-bound work.
from gpu_exporter.diagnosis.workload_rows import HOST_CPU_THERMAL as HOST_CPU_THERMAL
from gpu_exporter.diagnosis.workload_rows import HOST_MEMORY_GROWTH as HOST_MEMORY_GROWTH
from gpu_exporter.diagnosis.workload_rows import MEMORY_BOUND as MEMORY_BOUND
from gpu_exporter.diagnosis.workload_rows import MEMORY_FILLING as MEMORY_FILLING
from gpu_exporter.settings.thresholds import DiagnosisConfig

SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}


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
_STARVED_READS = ("gpu_utilization_ratio", "gpu_mig_sm_active_ratio", "gpu_memory_used_bytes",
                  "gpu_mig_memory_used_bytes", "gpu_process_memory_used_bytes")
_IO_READS = ("gpu_process_state", "gpu_workload_pressure_ratio", "gpu_host_cpu_iowait_ratio",
             "gpu_host_pressure_ratio")
_CPU_READS = ("gpu_process_run_queue_wait_seconds_total", "gpu_workload_pressure_ratio",
              "gpu_host_pressure_ratio")
_SWAP_READS = ("gpu_host_swap_bytes_total", "gpu_workload_pressure_ratio",
               "gpu_host_pressure_ratio")
_LIMIT_READS = ("gpu_workload_cpu_throttled_periods_total", "gpu_workload_cpu_periods_total",
                "gpu_workload_cpu_limit_cores")
_MEMORY_LIMIT_READS = ("gpu_workload_memory_limit_bytes", "gpu_workload_memory_used_bytes",
                       "gpu_workload_memory_limit_hits_total",
                       "gpu_workload_memory_reclaimed_bytes_total")
_STEAL_READS = ("gpu_host_cpu_steal_ratio",)


def _starved_pair(cause: str, what: str, idle_summary: str, underfed_summary: str,
                  runs: str, fix: str, confirm: tuple[str, ...], escalate: str,
                  reads: tuple[str, ...]) -> tuple[Row, Row]:
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
    per_instance=True, reads=(*_STARVED_READS, "gpu_process_state",
                              "gpu_process_cpu_seconds_total",
                              "gpu_process_context_switches_total"),
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
# NVML's own gpu_idle reason says when the GPU has no work: the rows that
# judge a slowdown of work judge whenever there is work, at any utilization.
_WORKING = "the GPU has work (NVML does not report it idle)"
_WORKING_GATE = ("only NVML's own gpu_idle (or, where it gives no reasons, 0 %): an idle GPU "
                 "lowers its clocks and its link's speed on purpose, and has no work to slow")
_REASON_READS = ("gpu_throttle_reason_active", "gpu_clock_hertz", "gpu_clock_max_hertz")
BURSTY_INPUT = Row(
    "utilization_bursty", "input_starvation", "warning",
    "GPU utilization swings between idle and full: the input pipeline starves it",
    "Sub-second utilization samples swing from {burst_low} or less to {burst_high} or more "
    "within the window while the 1-second average looks moderate, and nothing on the host "
    "explains it (a starved job's stall on storage, CPU or memory, listed beneath it, "
    "makes the same swings).",
    "More dataloader workers, pin_memory=True, persistent_workers=True, a larger "
    "prefetch_factor; move augmentation to the GPU.",
    ("nvidia-smi dmon -s u -d 1", "py-spy top --pid PID"),
    "Escalate to the job owner.",
    reads=("gpu_utilization_samples_ratio",))
POWER_CAP = Row(
    "throttled_under_load", "power_cap", "warning",
    "GPU held below its clocks by a power limit lowered below the board's default",
    "sw_power_cap is active, the SM clock is below {clock_below_max_ratio} of its maximum, "
    "the enforced power limit is below the board's default (lowered by an administrator or "
    "by the rack's power policy) and the GPU draws at least {power_cap_draw_ratio} of it: "
    "the cap binds, at whatever utilization. At the default limit a busy GPU drawing its "
    "rated power is working as designed and is not reported.",
    "Compare the power limit with the default (nvidia-smi -q -d POWER); restore it with "
    "nvidia-smi -pl if it was lowered by mistake, or check the rack's power policy.",
    ("nvidia-smi -q -d POWER", "nvidia-smi -q -d PERFORMANCE"),
    "Escalate to the datacenter team when the cap comes from rack power policy.",
    reads=(*_REASON_READS, "gpu_power_watts", "gpu_power_limit_watts",
           "gpu_power_default_limit_watts"))
THERMAL = Row(
    "throttled_under_load", "thermal", "warning",
    "GPU slowed down by heat",
    f"While {_WORKING}, a thermal clock reason (hw_thermal or sw_thermal) is active, or its "
    "temperature is within {thermal_margin_celsius} of its own slowdown threshold while its "
    "SM clock is below {clock_below_max_ratio} of its maximum (or NVML does not say its "
    "reasons). A hot GPU at full clocks is not slowed, and NVML's umbrella hw_slowdown bit "
    "alone does not name heat.",
    "Check airflow, fans, filters and rack placement; compare with the neighbouring GPUs "
    "in the chassis; cap power while investigating.",
    ("nvidia-smi -q -d TEMPERATURE", "nvidia-smi -q -d PERFORMANCE", "ipmitool sdr type Fan"),
    "Escalate to the datacenter team for cooling or chassis faults.",
    reads=(*_REASON_READS, "gpu_temperature_celsius", "gpu_temperature_threshold_celsius"),
    load_gate=_WORKING_GATE)
FAN_STOPPED = Row(
    "cooling_degraded", "fan_stopped", "warning",
    "A fan of the GPU has stopped",
    "A fan of the board reads {fan_stopped_ratio} or less while another of its fans spins "
    "at {fan_spinning_ratio} or more, or while the GPU is within "
    "{fan_warm_margin_celsius} of its slowdown temperature (a board stops its fans on "
    "purpose only while cool). The heat it leaves, and the thermal slowdown that heat "
    "brings, are listed beneath it.",
    "Replace the fan (or the board); until then cap the GPU's power or move its load, and "
    "check that nothing blocks the fan.",
    ("nvidia-smi --query-gpu=fan.speed,temperature.gpu --format=csv",
     "nvidia-smi -q -d TEMPERATURE,PERFORMANCE"),
    "Escalate to hardware for the fan.",
    reads=("gpu_fan_speed_ratio", "gpu_temperature_celsius",
           "gpu_temperature_threshold_celsius"))
POWER_BRAKE = Row(
    "throttled_under_load", "power_brake", "warning",
    "GPU clocks cut by the hardware power brake",
    f"While {_WORKING}, hw_power_brake is active: an external signal (power supply, "
    "chassis) forces the GPU down.",
    "Check the power supplies and the chassis' power brake signal; move load off the node.",
    ("nvidia-smi -q -d PERFORMANCE", "ipmitool sel list"),
    "Escalate to the datacenter/hardware team.",
    reads=_REASON_READS,
    load_gate=_WORKING_GATE)
HW_SLOWDOWN = Row(
    "throttled_under_load", "hw_slowdown", "warning",
    "GPU slowed by the hardware, for a reason NVML does not name",
    f"While {_WORKING}, NVML's hw_slowdown is active without hw_thermal, sw_thermal or "
    "hw_power_brake and with the temperature more than {thermal_margin_celsius} below its "
    "slowdown threshold. The driver sets hw_slowdown (clocks cut by half or more) for high "
    "temperature, an external power brake or its fast-trigger protection against excessive "
    "power draw, and here names none of them.",
    "Read the power draw against the limit (a spike past it trips the fast trigger), the "
    "temperatures and the power supplies' state; move load off the node if it persists.",
    ("nvidia-smi -q -d PERFORMANCE", "nvidia-smi -q -d POWER,TEMPERATURE",
     "ipmitool sel list"),
    "Escalate to the datacenter/hardware team when it persists without a named reason.",
    reads=(*_REASON_READS, "gpu_temperature_celsius", "gpu_power_watts"),
    load_gate=_WORKING_GATE)
APPLICATION_CLOCKS = Row(
    "clocks_capped", "application_clocks", "warning",
    "GPU runs at application clocks set below their default",
    f"While {_WORKING}, its application clock is set below {{clock_below_max_ratio}} of the "
    "default the board ships with (GPU Boost runs above the default; a lower setting holds "
    "it back whenever the GPU works).",
    "Reset the application clocks (nvidia-smi -rac) and audit the provisioning that set them.",
    ("nvidia-smi -q -d CLOCK",),
    "Escalate to whoever owns node provisioning.",
    reads=("gpu_clock_application_hertz", "gpu_clock_application_default_hertz",
           "gpu_throttle_reason_active"),
    load_gate=_WORKING_GATE)
PCIE_DOWNTRAINED = Row(
    "pcie_downtrained", "link_degraded", "warning",
    "GPU's PCIe link trained below its maximum width or generation",
    "Its PCIe link, or the link of the switch port above it, is narrower than it can be, "
    f"at any load (a width is never lowered to save power), or runs a lower generation "
    f"while {_WORKING} (an idle GPU lowers its generation on purpose). A link that carries "
    "all it can starves its GPU: the GPU's low utilization is the link's doing.",
    "Reseat the card or riser, check the BIOS bifurcation and slot settings, and compare "
    "the upstream switch port's link.",
    ("nvidia-smi -q -d PCIE", "lspci -vv -s BUS_ID | grep -E 'LnkCap|LnkSta'"),
    "Escalate to hardware when reseating does not restore the link.",
    reads=("gpu_pcie_link_width", "gpu_pcie_link_width_max", "gpu_pcie_link_generation",
           "gpu_pcie_link_generation_max", "gpu_pcie_sysfs_link_width",
           "gpu_pcie_sysfs_link_width_max", "gpu_pcie_sysfs_link_generation",
           "gpu_pcie_sysfs_link_generation_max", "gpu_throttle_reason_active"),
    load_gate=("the generation only, " + _WORKING_GATE
               + "; a width is never lowered to save power and is judged at any load"),
    boot_grace=True)
PCIE_ERRORS = Row(
    "pcie_errors", "link_integrity", "warning",
    "PCIe replays or AER errors are rising on the GPU's link",
    "The GPU's PCIe replay counter or the kernel's AER correctable error counter rose by "
    "{pcie_errors_per_window} or more within the diagnosis window ({window}).",
    "Check the riser, cable and slot; drain the node if the rate keeps climbing.",
    ("nvidia-smi -q -d PCIE", "cat /sys/bus/pci/devices/BUS_ID/aer_dev_correctable",
     "dmesg -T | grep -i aer"),
    "Escalate to hardware when errors keep rising after a reseat.",
    reads=("gpu_pcie_replays_total", "gpu_pcie_aer_errors_total"), boot_grace=True)
ECC_UNCORRECTABLE = Row(
    "memory_errors", "ecc_uncorrectable", "critical",
    "GPU memory had an uncorrectable ECC error or ran out of spare rows",
    "The volatile uncorrectable ECC counter is above zero, a row remap failed, or the GPU "
    "reports memory no repair can fix.",
    "Drain the node, reset the GPU (nvidia-smi -r); if the row remap failed, RMA the GPU.",
    ("nvidia-smi -q -d ECC", "nvidia-smi -q -d ROW_REMAPPER"),
    "Escalate to hardware for an RMA when the remap failed or errors return after reset.",
    immediate=True, reads=("gpu_ecc_errors_total", "gpu_row_remap_failed",
                           "gpu_unrepairable_memory"))
ROW_REMAP_PENDING = Row(
    "memory_errors", "row_remap_pending", "warning",
    "GPU has a memory row remap pending",
    "A row remap, or a memory channel or TPC repair, is pending: the GPU needs a reset.",
    "Drain the node and reset the GPU at the next maintenance window.",
    ("nvidia-smi -q -d ROW_REMAPPER",),
    "Escalate to hardware when remaps keep appearing.",
    immediate=True, reads=("gpu_row_remap_pending", "gpu_repair_pending"))
_XID_CONFIRM = ("dmesg -T | grep -i xid", "nvidia-smi -q")
XID = Row(
    "xid_error", "driver_reported", "critical",
    "The driver reported a hardware or driver Xid error for the GPU",
    "The driver reported an Xid (NVML's event, or its kernel log line where NVML could not "
    "deliver it) that NVIDIA's Xid catalog puts on the GPU's hardware or the driver (one of "
    "{hardware_xids}) within the last {xid_hold}.",
    "Act per Xid (the runbook's Xid table): drain the node and reset the GPU for ECC, "
    "micro-controller, NVLink and GSP errors; a GPU that fell off the bus needs a reboot "
    "and a check of its power and PCIe seating.",
    _XID_CONFIRM,
    "Escalate to hardware when the same GPU repeats an Xid.",
    immediate=True, xid_tier="hardware", reads=("gpu_xid_errors_total",))
XID_APPLICATION = Row(
    "xid_error", "application_fault", "warning",
    "The job on the GPU faulted: the driver reported an application Xid",
    "The driver reported an Xid (NVML's event, or its kernel log line) that NVIDIA's Xid "
    "catalog attributes to the application (one of {application_xids}) within the last "
    "{xid_hold}; the kernel log's line names the process and its pod or Slurm job.",
    "The job's owner restarts the job and checks it for illegal memory accesses "
    "(compute-sanitizer) and for the CUDA version it was built for; the GPU stays usable.",
    _XID_CONFIRM,
    "Escalate to hardware when the same GPU repeats the Xid under different jobs.",
    immediate=True, xid_tier="application", per_instance=True,
    reads=("gpu_xid_errors_total",))
XID_INFORMATIONAL = Row(
    "xid_error", "informational", "info",
    "The driver reported an informational Xid for the GPU",
    "The driver reported an Xid (NVML's event, or its kernel log line) that needs no action "
    "by itself (one of {informational_xids}, or a code the Xid table does not list) within "
    "the last {xid_hold}.",
    "Nothing by itself; look the code up in NVIDIA's Xid catalog when the table does not "
    "list it, and move it to its tier in the diagnosis settings.",
    _XID_CONFIRM,
    "Escalate to hardware when an unlisted code repeats on the same GPU.",
    immediate=True, xid_tier="informational", reads=("gpu_xid_errors_total",))
GPU_LOST = Row(
    "gpu_lost", "hardware", "critical",
    "GPU is lost: NVML cannot reach it",
    "NVML answers GPU_IS_LOST for the GPU, or the kernel removed its PCI device.",
    "Drain the node, check the GPU's power cabling and PCIe seating; a reboot may bring it "
    "back, a repeat needs hardware.",
    ("nvidia-smi", "dmesg -T | grep -iE 'xid|fallen off'", "lspci | grep -i nvidia"),
    "Escalate to hardware.",
    immediate=True, reads=("gpu_up",))
# What the exporter remembers of a GPU across restarts and reboots
# (--path.state-file; memory.py): a fault that returns on the same board
# (by UUID) after a reset or reboot is the board's, whatever cleared it.
FAULT_CAME_BACK = Row(
    "fault_recurred", "came_back_after_reset", "critical",
    "A hardware fault came back on the same GPU after a reset or reboot",
    "The same hardware fault (an Xid of {hardware_xids}, an uncorrectable ECC error, a row "
    "remap pending, the GPU lost) happened on this GPU, by its UUID, before a reboot (another "
    "boot id) or before the GPU was lost and came back, and again since.",
    "Replace or RMA the GPU: a reset or reboot clears such a fault for a while, never for "
    "good. Drain the node until the board is swapped; the finding ends when the GPU (a new "
    "UUID) is, or when its faults leave the state file after 30 days.",
    ("dmesg -T | grep -iE 'xid|fallen off'", "nvidia-smi -q -d ECC,ROW_REMAPPER",
     "nvidia-smi --query-gpu=index,uuid,serial --format=csv"),
    "Escalate to hardware for an RMA, with the GPU's serial and the faults the finding lists.",
    immediate=True, reads=("gpu_xid_errors_total", "gpu_ecc_errors_total",
                           "gpu_row_remap_pending", "gpu_up"))
MEMORY_NEAR_FULL = Row(
    "memory_near_full", "oom_risk", "warning",
    "GPU memory is nearly full",
    "Memory used is above {memory_near_full_ratio} of what processes can allocate (the "
    "GPU's total less what the driver reserves).",
    "Smaller batches, stable tensor shapes, allocator settings (e.g. "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); check for leaks.",
    ("nvidia-smi --query-gpu=memory.used,memory.total --format=csv",),
    "Escalate to the job owner.",
    per_instance=True, reads=("gpu_memory_used_bytes", "gpu_memory_total_bytes",
                              "gpu_memory_reserved_bytes", "gpu_mig_memory_used_bytes",
                              "gpu_mig_memory_total_bytes"))
UTILIZATION_INFLATED = Row(
    "utilization_inflated", "small_kernels", "info",
    "GPU looks busy but its SMs mostly idle",
    "NVML utilization is above {inflated_utilization} while GPM's SM activity is below "
    "{inflated_sm_active}: many tiny kernels or synchronisation keep one kernel running while "
    "most SMs wait.",
    "Profile (Nsight Systems), fuse operations, use bigger batches and fewer sync points.",
    ("nsys profile -o trace python train.py", "nvidia-smi dmon -s u"),
    "Escalate to the job owner with a profile.",
    reads=("gpu_utilization_ratio", "gpu_sm_active_ratio"),
    load_gate="the symptom is NVML's utilization reading busy while the SMs are not")
PERSISTENCE_OFF = Row(
    "persistence_off", "configuration", "info",
    "Persistence mode is off on a compute node",
    "Persistence mode is disabled, so the driver reloads state for every new client.",
    "Enable nvidia-persistenced (preferred) or nvidia-smi -pm 1.",
    ("nvidia-smi -q | grep -i persistence", "systemctl status nvidia-persistenced"),
    "Escalate to whoever owns node provisioning.",
    immediate=True, reads=("gpu_persistence_mode_enabled",))
NUMA_MISPLACED = Row(
    "numa_misplaced", "cpu_affinity", "warning",
    "A GPU process runs on CPUs outside the GPU's NUMA node",
    "A process using the GPU may run on CPUs outside the GPU's local CPU list, so its "
    "host-to-device traffic crosses sockets.",
    "Pin the process and its memory to the GPU's NUMA node (numactl --cpunodebind=N "
    "--membind=N, or the job scheduler's topology settings).",
    ("nvidia-smi topo -m", "taskset -cp PID", "numactl --show"),
    "Escalate to the job owner or the scheduler's configuration.",
    per_instance=True, reads=("gpu_process_cpu_affinity_local", "gpu_numa_info"))
# Rows that judge a GPU by its own workload (the container's or Slurm job's
# cgroup) and by whom it is allocated to.
ALLOCATED_UNUSED = Row(
    "gpu_allocated_unused", "no_process", "warning",
    "GPU allocated to a pod but no process uses it",
    "The kubelet has allocated the GPU (or MIG instance) to a container, and for the whole "
    "diagnosis window ({window}) no process held a context on it, its utilization stayed "
    "below {idle_utilization} and its memory below {memory_held_ratio}: a reserved GPU "
    "doing nothing. A job between phases looks the same for a while.",
    "Ask the pod's owner whether it still needs the GPU; delete idle notebooks and "
    "finished jobs that keep their pods, or let an idle-culling policy do it.",
    ("kubectl get pod -n NAMESPACE POD -o wide", "nvidia-smi",
     "kubectl logs -n NAMESPACE POD -c CONTAINER --tail=50"),
    "Escalate to the team that owns the namespace when the GPU stays reserved for hours.",
    per_instance=True, reads=("gpu_allocation_info", "gpu_process_memory_used_bytes",
                              "gpu_utilization_ratio", "gpu_mig_sm_active_ratio",
                              "gpu_memory_used_bytes", "gpu_mig_memory_used_bytes"),
    load_gate="a GPU doing work is used, whether or not its process can be seen")

# The driver's own verdict (NVML recovery action, R565 and newer): more
# authoritative than any heuristic above, so each action is a row of its own
# with NVIDIA's instruction for it (A100/H100 GPU memory error management,
# "Error Recovery and Response Flags").
_RECOVERY_CONFIRM = ("nvidia-smi -q | grep -iA2 recovery", "dmesg -T | grep -i xid")
_RECOVERY_EVIDENCE = "NVML's recovery action for the GPU is {action}."
RECOVERY_GPU_RESET = Row(
    "recovery_action", "gpu_reset", "critical",
    "The driver says the GPU must be reset",
    _RECOVERY_EVIDENCE.format(action="GPU_RESET"),
    "Drain the node (no new jobs), stop every process on the GPU, then reset it with "
    "nvidia-smi -r -i GPU; the GPU takes work again once the recovery action reads none.",
    _RECOVERY_CONFIRM,
    "Escalate to hardware when the GPU asks for a reset again after one.",
    immediate=True, reads=("gpu_recovery_action",))
RECOVERY_NODE_REBOOT = Row(
    "recovery_action", "node_reboot", "critical",
    "The driver says the node must be rebooted",
    _RECOVERY_EVIDENCE.format(action="NODE_REBOOT"),
    "Drain the node and reboot it: the fault may have left the operating system in an "
    "inconsistent state, a GPU reset is not enough.",
    _RECOVERY_CONFIRM,
    "Escalate to hardware when the node asks for a reboot again after one.",
    immediate=True, reads=("gpu_recovery_action",))
RECOVERY_DRAIN_P2P = Row(
    "recovery_action", "drain_p2p", "warning",
    "The driver asks for peer-to-peer traffic to be drained",
    _RECOVERY_EVIDENCE.format(action="DRAIN_P2P"),
    "Start no new multi-GPU (peer-to-peer / NVLink) jobs on the node and let the running "
    "ones finish; the action returns to none once P2P traffic has stopped.",
    _RECOVERY_CONFIRM,
    "Escalate to hardware when the action does not return to none after P2P work stops.",
    immediate=True, reads=("gpu_recovery_action",))
RECOVERY_DRAIN_AND_RESET = Row(
    "recovery_action", "drain_and_reset", "warning",
    "The driver asks for the GPU to be drained, then reset",
    _RECOVERY_EVIDENCE.format(action="DRAIN_AND_RESET"),
    "Let the running jobs finish, schedule no new ones on the GPU, then reset it with "
    "nvidia-smi -r -i GPU at the first quiet moment.",
    _RECOVERY_CONFIRM,
    "Escalate to hardware when the GPU asks again after a reset.",
    immediate=True, reads=("gpu_recovery_action",))
# The GPU's place in the NVSwitch fabric (HGX / NVL systems, R550 and newer).
FABRIC_DEGRADED = Row(
    "fabric_degraded", "nvswitch_fabric", "critical",
    "The GPU is not healthy in the NVSwitch fabric",
    "NVML's fabric probe for the GPU has not completed, completed with an error, or reports "
    "the fabric unhealthy or at limited capacity, for {window}.",
    "Check Fabric Manager (systemctl status nvidia-fabricmanager, its log) and the NVSwitch "
    "links; restart Fabric Manager on a probe that never completes; drain the node while the "
    "fabric is degraded, multi-GPU jobs run slow or fail.",
    ("systemctl status nvidia-fabricmanager", "nvidia-smi -q | grep -iA6 fabric",
     "nvidia-smi nvlink -s"),
    "Escalate to hardware when the fabric stays degraded after a Fabric Manager restart.",
    reads=("gpu_fabric_state",), boot_grace=True)

ROWS: tuple[Row, ...] = (
    IDLE_DATA_PIPELINE_IO, IDLE_CPU_CONTENTION, IDLE_HOST_SWAPPING, IDLE_PROCESS_STALLED,
    UNDERFED_DATA_PIPELINE_IO, UNDERFED_CPU_CONTENTION, UNDERFED_HOST_SWAPPING,
    BURSTY_INPUT, POWER_CAP, THERMAL, POWER_BRAKE, HW_SLOWDOWN, APPLICATION_CLOCKS,
    PCIE_DOWNTRAINED, PCIE_ERRORS, NVLINK_ERRORS, C2C_ERRORS, ECC_UNCORRECTABLE,
    ROW_REMAP_PENDING, XID, XID_APPLICATION,
    XID_INFORMATIONAL, GPU_LOST, FAULT_CAME_BACK,
    MEMORY_NEAR_FULL, UTILIZATION_INFLATED, PERSISTENCE_OFF, NUMA_MISPLACED,
    RECOVERY_GPU_RESET, RECOVERY_NODE_REBOOT, RECOVERY_DRAIN_P2P, RECOVERY_DRAIN_AND_RESET,
    FABRIC_DEGRADED,
    IDLE_CPU_LIMIT_THROTTLED, ALLOCATED_UNUSED, ALLOCATED_RUNS_ON_CPU,
    UNDERFED_CPU_LIMIT_THROTTLED, IDLE_MEMORY_LIMIT_RECLAIM, UNDERFED_MEMORY_LIMIT_RECLAIM,
    IDLE_CPU_STEAL, UNDERFED_CPU_STEAL, IDLE_IO_LIMIT_THROTTLED, UNDERFED_IO_LIMIT_THROTTLED,
    FAN_STOPPED,
    MEMORY_FILLING, HOST_CPU_THERMAL, HOST_MEMORY_GROWTH, MEMORY_BOUND,
    NIC_ACROSS_SOCKETS, RDMA_PORT_DEGRADED, RDMA_ERRORS,
)

BY_KEY: dict[str, Row] = {row.key: row for row in ROWS}

# Every metric the exporter exports, walked against the rows
# (tests/diagnosis/test_cause_signals.py): a row reads it (``Row.reads``), or it is
# another form of a signal a row reads (a counter beside its ratio), or the
# catalog entry below says why no row reads it. A cause signal the playbooks
# name left out of all three fails that test.
SAME_SIGNAL: dict[str, str] = {
    "gpu_host_cpu_iowait_seconds_total": "gpu_host_cpu_iowait_ratio",
    "gpu_host_cpu_steal_seconds_total": "gpu_host_cpu_steal_ratio",
    "gpu_host_cpu_seconds_total": "gpu_host_cpu_iowait_ratio",
    "gpu_host_pressure_stalled_seconds_total": "gpu_host_pressure_ratio",
    "gpu_workload_pressure_stalled_seconds_total": "gpu_workload_pressure_ratio",
    "gpu_workload_cpu_throttled_seconds_total": "gpu_workload_cpu_throttled_periods_total",
    "gpu_throttle_seconds_total": "gpu_throttle_reason_active",
    "gpu_busy_seconds_total": "gpu_utilization_ratio",
    "gpu_sm_active_seconds_total": "gpu_sm_active_ratio",
    "gpu_xid_errors_all_total": "gpu_xid_errors_total",
    "gpu_dram_active_seconds_total": "gpu_dram_active_ratio",
    "gpu_nvlink_bit_error_rate_worst_link": "gpu_nvlink_bit_error_rate",
}

_CHARACTER = ("what the workload's kernels are like (occupancy, tensor or DRAM use), "
              "which a profiler judges against the code; no fault of the node's makes it so")
_IDENTITY = "identity or configuration of the node, the GPU or its owner, not a measurement"
_OURS = "the exporter's own health or its verdicts, not a signal of the node's"
NOT_READ: dict[str, str] = {
    "gpu_nic_info": _IDENTITY,
    "gpu_nic_up": "a NIC that is not an RDMA device (the rows judge the RDMA ports' own "
                  "state: gpu_rdma_port_state)",
    "gpu_nic_speed_bytes_per_second": "a NIC's speed (the rows judge the RDMA ports' own "
                                      "rate: gpu_rdma_port_rate_bytes_per_second)",
    "gpu_rdma_port_hw_counter_total": "the driver's congestion and retransmit counters: "
                                      "traffic the fabric slowed, not a fault of the node's",
    "gpu_network_devices_left_out": _OURS,
    "gpu_nic_kernel_events_total": "the NIC driver's log lines, for the on-call engineer; "
                                   "the port rows read the ports' own state and counters",
    "gpu_info": _IDENTITY, "gpu_mig_info": _IDENTITY, "gpu_job_info": _IDENTITY,
    "gpu_process_info": _IDENTITY, "gpu_mig_mode_enabled": _IDENTITY,
    "gpu_ecc_enabled": _IDENTITY,
    "gpu_memory_controller_utilization_ratio": _CHARACTER,
    "gpu_sm_occupancy_ratio": _CHARACTER,
    "gpu_tensor_active_seconds_total": _CHARACTER, "gpu_mig_sm_occupancy_ratio": _CHARACTER,
    "gpu_mig_tensor_active_ratio": _CHARACTER, "gpu_mig_dram_active_ratio": _CHARACTER,
    "gpu_energy_joules_total": "energy over time; the throttle rows read the power it "
                               "integrates against its limit",
    "gpu_performance_state": "the P-state follows the clocks and the load, which the throttle "
                             "rows read with the driver's reasons",
    "gpu_pcie_bytes_total": "PCIe traffic: the link row judges the trained width at any load "
                            "(a lane lost is capacity lost whatever the traffic now) and the "
                            "generation while the GPU has work; the counter is read one poll "
                            "in ten",
    "gpu_gpm_pcie_bytes_per_second": "PCIe traffic (see gpu_pcie_bytes_total)",
    "gpu_gpm_nvlink_bytes_per_second": "NVLink traffic: how much a job talks, not a fault",
    "gpu_nvlink_bytes_total": "NVLink traffic: how much a job talks, not a fault",
    "gpu_nvlink_bytes_all_links_total": "NVLink traffic: how much a job talks, not a fault",
    "gpu_nvlink_links": _IDENTITY, "gpu_c2c_enabled": _IDENTITY, "gpu_c2c_links": _IDENTITY,
    "gpu_power_smoothing_enabled": _IDENTITY, "gpu_power_floor_watts": "the floor the draw is "
    "held at: the power-draw rows read the draw against their own limits",
    "gpu_fabric_health_issue": "the flags behind the fabric's health summary, which the "
                               "nvswitch_fabric row reads",
    "gpu_nvlink_links_active": "a link down raises Xid 74 (read by the Xid rows) and, on a "
                               "fabric, the fabric state (the nvswitch_fabric row)",
    "gpu_nvlink_link_up": "a link down raises Xid 74 (the Xid rows) and, on a fabric, the "
                          "fabric state (the nvswitch_fabric row)",
    "gpu_remapped_rows_total": "rows already remapped are history; the pending and failed "
                               "flags (the memory_errors rows) are what needs action",
    "gpu_power_samples_watts": "the distribution of power readings the throttle rows read",
    "gpu_sm_clock_samples_hertz": "the distribution of clocks the throttle rows read",
    "gpu_events_total": "an event makes the GPU's readers read again at once what the row "
                        "owning it judges (diagnosis/events.py); the counts are for the "
                        "dashboards",
    "gpu_process_sm_utilization_ratio": "a process's share of its GPU; the rows read the "
                                        "GPU's and the instance's",
    "gpu_process_resident_memory_bytes": "host memory a process holds; memory trouble is "
                                         "read from its cgroup (memory_limit_reclaim) and "
                                         "the host's swap traffic (host_swapping)",
    "gpu_process_threads": "a process's thread count says nothing of what it waits on",
    "gpu_process_series_dropped_total": _OURS,
    "gpu_workload_oom_kills_total": "an OOM kill ends the job: what it leaves is judged as "
                                    "what it is (a GPU allocated and unused); the pressure "
                                    "before it is the memory_limit_reclaim row's",
    "gpu_exporter_pod_resources_state": _OURS,
    "gpu_exporter_pod_resources_failures_total": _OURS,
    "gpu_exporter_workload_cgroups": _OURS, "gpu_exporter_cgroup_layout_info": _OURS,
    "gpu_udev_events_total": "a device's add/remove/change events: a GPU that left is read "
                             "as gpu_up, a link that retrained as its width and generation",
    "gpu_host_context_switches_total": "host-wide switches: the stalled-process row reads "
                                       "the process's own",
    "gpu_host_swap_used_bytes": "swap held is no traffic: pages swapped out long ago cost "
                                "nothing until read back (the swapping rows read swap I/O)",
    "gpu_host_load_average": "the load average counts runnable and D-state tasks together; "
                             "the rows read CPU pressure, run-queue waits and process states "
                             "apart",
    "gpu_host_disk_busy_ratio": "a device's busy share is its own saturation, not a job's "
                                "wait: the I/O rows read the job's I/O pressure and state D",
    "gpu_host_disk_busy_seconds_total": "as gpu_host_disk_busy_ratio",
    "gpu_host_network_receive_errors_total": "a NIC's errors; a job waiting on the network "
                                             "is read as its I/O pressure or state D",
    "gpu_host_network_receive_drops_total": "as gpu_host_network_receive_errors_total",
    "gpu_busy_source_info": _IDENTITY,
    "gpu_owner_sm_share_ratio": "who of a GPU's owners used its SMs (the energy split), not "
                                "what slows them",
    "gpu_nvswitch_sxid_errors_total": "NVSwitch errors from the kernel log: what they cost "
                                      "the fabric the driver reports as its state and "
                                      "health (the nvswitch_fabric row); the counts are for "
                                      "the dashboards",
    "gpu_exporter_kernel_log_state": _OURS,
    "gpu_exporter_kernel_log_records_lost_total": _OURS,
    "gpu_exporter_kernel_log_records_malformed_total": _OURS,
    "gpu_exporter_kernel_log_overflow_total": _OURS,
    "gpu_diagnosis_active": _OURS, "gpu_diagnosis_not_judged": _OURS,
    "gpu_diagnosis_input_missing": _OURS, "gpu_baseline_drift": _OURS,
    "gpu_exporter_build_info": _OURS, "gpu_exporter_nvml_up": _OURS,
    "gpu_exporter_nvml_driver_info": _IDENTITY, "gpu_exporter_collector_success": _OURS,
    "gpu_exporter_collector_duration_seconds": _OURS,
    "gpu_exporter_collector_errors_total": _OURS, "gpu_exporter_nvml_timeouts_total": _OURS,
    "gpu_exporter_poll_duration_seconds": _OURS, "gpu_exporter_polls_total": _OURS,
    "gpu_exporter_last_poll_timestamp_seconds": _OURS,
    "gpu_exporter_config_last_reload_success": _OURS,
    "gpu_exporter_config_last_reload_success_timestamp_seconds": _OURS,
}


def row(symptom: str, cause: str) -> Row:
    return BY_KEY[f"{symptom}/{cause}"]


def _check_rows() -> None:
    """Keys and anchors are unique, every threshold the prose quotes exists (a
    misspelled ``{name}`` fails here, at import, not in an alert), and every
    row has its runbook entry. (Its one rule is checked where rules register,
    in rules.py; its built-in scenario, named after its anchor, belongs to the
    simulator, and tests/diagnosis/test_diagnosis.py holds every row to one.)"""
    if len(BY_KEY) != len(ROWS) or len({r.anchor for r in ROWS}) != len(ROWS):
        raise ImportError("diagnosis table: two rows share a key or anchor")
    for r in ROWS:
        r.evidence_text(DiagnosisConfig())
        if not (r.fix and r.confirm and r.escalate):
            raise ImportError(f"diagnosis table: row {r.key} lacks its runbook entry")


_check_rows()
