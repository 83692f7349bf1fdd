"""The symptom -> cause table (SPEC §5), one row per rule. This is the single
source of truth the exporter (``gpu_diagnosis_active``), ``gpu-exporter
diagnose``, the runbook, the alert rules and the dashboards all read.

Each row is a named object: its condition is registered on it in ``rules.py``
(``rule(t.IDLE_DATA_PIPELINE_IO)(_data_pipeline)``: a misspelled row is an AttributeError at
import; which causes explain which others is ``precedence.py``, and the thresholds its
prose quotes come from ``thresholds.py`` (``{iowait_high}`` in ``evidence`` is
filled from the running configuration), so the words never drift from the
numbers the rules use.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Literal

from gpu_exporter.thresholds import DiagnosisConfig
from gpu_exporter.xids import XidTier

Severity = Literal["critical", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Row:
    symptom: str
    cause: str
    severity: Severity
    summary: str  # one line, plain words, for alert summaries and the landing page
    # What the exporter sees when the row fires; ``{name}`` quotes the
    # DiagnosisConfig threshold ``name`` as people read it (see evidence_text).
    evidence: str
    fix: str  # what the runbook tells the on-call engineer to do
    confirm: tuple[str, ...]  # commands that confirm it on the node
    escalate: str  # when to hand it on
    # Facts, not trends (a lost GPU, an ECC error): on at once, without the
    # diagnosis window.
    immediate: bool = False
    # The Xid rows: which tier of xids.py the row reports (who must
    # act); the alert carries it as its ``xid_tier`` label for routing.
    xid_tier: XidTier | None = None

    @property
    def key(self) -> str:
        return f"{self.symptom}/{self.cause}"

    @property
    def anchor(self) -> str:
        """Runbook anchor and built-in scenario name: underscores as hyphens."""
        return f"{self.symptom}-{self.cause}".replace("_", "-")

    def evidence_text(self, cfg: DiagnosisConfig) -> str:
        """``evidence`` with the thresholds of ``cfg`` written in."""
        return self.evidence.format_map(cfg.prose())

    def thresholds(self) -> tuple[str, ...]:
        """The DiagnosisConfig fields the evidence prose quotes."""
        return tuple(name for _, name, _, _ in string.Formatter().parse(self.evidence) if name)

    @property
    def alert_name(self) -> str:
        words = f"{self.symptom}_{self.cause}".split("_")
        if words[0] == "gpu":  # GpuLostHardware, not GpuGpuLostHardware
            words = words[1:]
        return "Gpu" + "".join(w.capitalize() for w in words)


_HELD = "GPU memory is held (more than {memory_held_ratio} used)"
_IDLE_GPU = f"{_HELD} but the GPU does almost no work (utilization below {{idle_utilization}})"
_UNDERFED_GPU = (f"{_HELD} and the GPU works below its busy threshold (utilization under "
                 "{busy_utilization})")
# Where the exporter reads the cgroup of the GPU's workload (its container or
# Slurm job), the workload's own pressure judges instead of the host's: on a
# shared node host-wide counters blame the wrong job.
_OWN = "the job's own where its cgroup is read, else the host's"
_IO = "I/O waits: the job's own I/O pressure is at least {io_pressure_high}, or, where " \
    "its cgroup is not read, the host's iowait is at least {iowait_high} or its I/O " \
    "pressure at least {io_pressure_high}"
_CPU = "CPU pressure (" + _OWN + ") is at least {cpu_pressure_high} (where the kernel has " \
    "PSI) and the GPU's process waits on the run queue at least {run_queue_wait_high} " \
    "(where it keeps schedstat)"
_SWAP = "the host swaps pages in or out at {swap_bytes_per_s} or more, or memory pressure " \
    "(full; " + _OWN + ") is above {memory_pressure_full}"
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

IDLE_DATA_PIPELINE_IO = Row(
    "memory_held_sm_idle", "data_pipeline_io", "warning",
    "GPU holds memory but sits idle waiting on storage",
    f"{_IDLE_GPU}, while {_IO}.", _IO_FIX, _IO_CONFIRM, _IO_ESCALATE)
IDLE_CPU_CONTENTION = Row(
    "memory_held_sm_idle", "cpu_contention", "warning",
    "GPU holds memory but sits idle while its process waits for a CPU",
    f"{_IDLE_GPU}, while {_CPU}.", _CPU_FIX, _CPU_CONFIRM, _CPU_ESCALATE)
IDLE_HOST_SWAPPING = Row(
    "memory_held_sm_idle", "host_swapping", "warning",
    "GPU holds memory but sits idle while the host swaps",
    f"{_IDLE_GPU}, while {_SWAP}.", _SWAP_FIX, _SWAP_CONFIRM, _SWAP_ESCALATE)
IDLE_PROCESS_STALLED = Row(
    "memory_held_sm_idle", "process_stalled", "warning",
    "GPU holds memory but its process is stalled",
    f"{_IDLE_GPU}, and the process holding it is sleeping or blocked using less than "
    "{stalled_cpu_ratio} of a CPU: stuck before its first step, deadlocked, or waiting on a "
    "distributed barrier. A host-side cause (storage, CPU, swapping) present at the same time "
    "explains the stall instead.",
    "Attach py-spy dump --pid PID to see where it waits; check the job's rendezvous and "
    "the other ranks; restart the job if it is deadlocked.",
    ("py-spy dump --pid PID", "ps -o pid,stat,etime,comm -p PID", "nvidia-smi pmon -c 1"),
    "Escalate to the job owner with the py-spy stack.")
# Starved GPUs rarely read exactly 0 %: between idle and busy, the same host
# causes slow the job down without stopping it. Reported for dashboards and
# `diagnose` (info); the idle rows above, for the same cause, open tickets.
UNDERFED_DATA_PIPELINE_IO = Row(
    "memory_held_sm_underfed", "data_pipeline_io", "info",
    "GPU holds memory but works well below capacity: its input waits on storage",
    f"{_UNDERFED_GPU}, while {_IO}. The job runs, slowed by its reads.",
    _IO_FIX, _IO_CONFIRM, _IO_ESCALATE)
UNDERFED_CPU_CONTENTION = Row(
    "memory_held_sm_underfed", "cpu_contention", "info",
    "GPU holds memory but works well below capacity: its process waits for a CPU",
    f"{_UNDERFED_GPU}, while {_CPU}. The job runs, slowed by the CPU it waits for.",
    _CPU_FIX, _CPU_CONFIRM, _CPU_ESCALATE)
UNDERFED_HOST_SWAPPING = Row(
    "memory_held_sm_underfed", "host_swapping", "info",
    "GPU holds memory but works well below capacity while the host swaps",
    f"{_UNDERFED_GPU}, while {_SWAP}. The job runs, slowed by page faults.",
    _SWAP_FIX, _SWAP_CONFIRM, _SWAP_ESCALATE)
BURSTY_INPUT = Row(
    "utilization_bursty", "input_starvation", "warning",
    "GPU utilization swings between idle and full: the input pipeline starves it",
    "Sub-second utilization samples swing from {burst_low} or less to {burst_high} or more "
    "within the window while the 1-second average looks moderate.",
    "More dataloader workers, pin_memory=True, persistent_workers=True, a larger "
    "prefetch_factor; move augmentation to the GPU.",
    ("nvidia-smi dmon -s u -d 1", "py-spy top --pid PID"),
    "Escalate to the job owner.")
POWER_CAP = Row(
    "throttled_under_load", "power_cap", "warning",
    "Busy GPU held below its clocks by its power limit",
    "The GPU is busy (utilization at least {busy_utilization}), sw_power_cap is active, the "
    "SM clock is below {clock_below_max_ratio} of its maximum and the enforced power limit is "
    "below the board's default (lowered by an administrator or by the rack's power policy). "
    "At the default limit a busy GPU drawing its rated power is working as designed and is "
    "not reported.",
    "Compare the power limit with the default (nvidia-smi -q -d POWER); restore it with "
    "nvidia-smi -pl if it was lowered by mistake, or check the rack's power policy.",
    ("nvidia-smi -q -d POWER", "nvidia-smi -q -d PERFORMANCE"),
    "Escalate to the datacenter team when the cap comes from rack power policy.")
THERMAL = Row(
    "throttled_under_load", "thermal", "warning",
    "Busy GPU slowed down by heat",
    "The GPU is busy (utilization at least {busy_utilization}) and a thermal clock reason "
    "(hw_thermal or sw_thermal) is active, or its temperature is within "
    "{thermal_margin_celsius} of its own slowdown threshold. NVML's umbrella hw_slowdown bit "
    "alone does not name heat.",
    "Check airflow, fans, filters and rack placement; compare with the neighbouring GPUs "
    "in the chassis; cap power while investigating.",
    ("nvidia-smi -q -d TEMPERATURE", "nvidia-smi -q -d PERFORMANCE", "ipmitool sdr type Fan"),
    "Escalate to the datacenter team for cooling or chassis faults.")
POWER_BRAKE = Row(
    "throttled_under_load", "power_brake", "warning",
    "GPU clocks cut by the hardware power brake",
    "The GPU is busy (utilization at least {busy_utilization}) and hw_power_brake is active: "
    "an external signal (power supply, chassis) forces the GPU down.",
    "Check the power supplies and the chassis' power brake signal; move load off the node.",
    ("nvidia-smi -q -d PERFORMANCE", "ipmitool sel list"),
    "Escalate to the datacenter/hardware team.")
HW_SLOWDOWN = Row(
    "throttled_under_load", "hw_slowdown", "warning",
    "Busy GPU slowed by the hardware, for a reason NVML does not name",
    "The GPU is busy (utilization at least {busy_utilization}) and NVML's hw_slowdown is "
    "active without hw_thermal, sw_thermal or hw_power_brake and with the temperature more "
    "than {thermal_margin_celsius} below its slowdown threshold. The driver sets hw_slowdown "
    "(clocks cut by half or more) for high temperature, an external power brake or its "
    "fast-trigger protection against excessive power draw, and here names none of them.",
    "Read the power draw against the limit (a spike past it trips the fast trigger), the "
    "temperatures and the power supplies' state; move load off the node if it persists.",
    ("nvidia-smi -q -d PERFORMANCE", "nvidia-smi -q -d POWER,TEMPERATURE",
     "ipmitool sel list"),
    "Escalate to the datacenter/hardware team when it persists without a named reason.")
APPLICATION_CLOCKS = Row(
    "clocks_capped", "application_clocks", "warning",
    "Busy GPU runs at application clocks set below their default",
    "The GPU is busy (utilization at least {busy_utilization}) and its application clock is "
    "set below {clock_below_max_ratio} of the default the board ships with (GPU Boost runs "
    "above the default; a lower setting holds it back).",
    "Reset the application clocks (nvidia-smi -rac) and audit the provisioning that set them.",
    ("nvidia-smi -q -d CLOCK",),
    "Escalate to whoever owns node provisioning.")
PCIE_DOWNTRAINED = Row(
    "pcie_downtrained", "link_degraded", "warning",
    "Busy GPU's PCIe link trained below its maximum width or generation",
    "While the GPU is busy (utilization at least {busy_utilization}), its PCIe link, or the "
    "link of the switch port above it, runs at a lower width or generation than it can "
    "(idle links downshift on purpose and are never judged).",
    "Reseat the card or riser, check the BIOS bifurcation and slot settings, and compare "
    "the upstream switch port's link.",
    ("nvidia-smi -q -d PCIE", "lspci -vv -s BUS_ID | grep -E 'LnkCap|LnkSta'"),
    "Escalate to hardware when reseating does not restore the link.")
PCIE_ERRORS = Row(
    "pcie_errors", "link_integrity", "warning",
    "PCIe replays or AER errors are rising on the GPU's link",
    "The GPU's PCIe replay counter or the kernel's AER correctable error counter rose by "
    "{pcie_errors_per_window} or more within the diagnosis window ({window}).",
    "Check the riser, cable and slot; drain the node if the rate keeps climbing.",
    ("nvidia-smi -q -d PCIE", "cat /sys/bus/pci/devices/BUS_ID/aer_dev_correctable",
     "dmesg -T | grep -i aer"),
    "Escalate to hardware when errors keep rising after a reseat.")
ECC_UNCORRECTABLE = Row(
    "memory_errors", "ecc_uncorrectable", "critical",
    "GPU memory had an uncorrectable ECC error or ran out of spare rows",
    "The volatile uncorrectable ECC counter is above zero, or a row remap failed.",
    "Drain the node, reset the GPU (nvidia-smi -r); if the row remap failed, RMA the GPU.",
    ("nvidia-smi -q -d ECC", "nvidia-smi -q -d ROW_REMAPPER"),
    "Escalate to hardware for an RMA when the remap failed or errors return after reset.",
    immediate=True)
ROW_REMAP_PENDING = Row(
    "memory_errors", "row_remap_pending", "warning",
    "GPU has a memory row remap pending",
    "A row remap is pending: the GPU needs a reset to retire the bad row.",
    "Drain the node and reset the GPU at the next maintenance window.",
    ("nvidia-smi -q -d ROW_REMAPPER",),
    "Escalate to hardware when remaps keep appearing.",
    immediate=True)
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
    immediate=True, xid_tier="hardware")
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
    immediate=True, xid_tier="application")
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
    immediate=True, xid_tier="informational")
GPU_LOST = Row(
    "gpu_lost", "hardware", "critical",
    "GPU is lost: NVML cannot reach it",
    "NVML answers GPU_IS_LOST for the GPU, or the kernel removed its PCI device.",
    "Drain the node, check the GPU's power cabling and PCIe seating; a reboot may bring it "
    "back, a repeat needs hardware.",
    ("nvidia-smi", "dmesg -T | grep -iE 'xid|fallen off'", "lspci | grep -i nvidia"),
    "Escalate to hardware.",
    immediate=True)
MEMORY_NEAR_FULL = Row(
    "memory_near_full", "oom_risk", "warning",
    "GPU memory is nearly full",
    "Memory used is above {memory_near_full_ratio} of the GPU's total.",
    "Smaller batches, stable tensor shapes, allocator settings (e.g. "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); check for leaks.",
    ("nvidia-smi --query-gpu=memory.used,memory.total --format=csv",),
    "Escalate to the job owner.")
UTILIZATION_INFLATED = Row(
    "utilization_inflated", "small_kernels", "info",
    "GPU looks busy but its SMs mostly idle",
    "NVML utilization is above {inflated_utilization} while GPM's SM activity is below "
    "{inflated_sm_active}: many tiny kernels or synchronisation keep one kernel running while "
    "most SMs wait.",
    "Profile (Nsight Systems), fuse operations, use bigger batches and fewer sync points.",
    ("nsys profile -o trace python train.py", "nvidia-smi dmon -s u"),
    "Escalate to the job owner with a profile.")
PERSISTENCE_OFF = Row(
    "persistence_off", "configuration", "info",
    "Persistence mode is off on a compute node",
    "Persistence mode is disabled, so the driver reloads state for every new client.",
    "Enable nvidia-persistenced (preferred) or nvidia-smi -pm 1.",
    ("nvidia-smi -q | grep -i persistence", "systemctl status nvidia-persistenced"),
    "Escalate to whoever owns node provisioning.",
    immediate=True)
NUMA_MISPLACED = Row(
    "numa_misplaced", "cpu_affinity", "warning",
    "A GPU process runs on CPUs outside the GPU's NUMA node",
    "A process using the GPU may run on CPUs outside the GPU's local CPU list, so its "
    "host-to-device traffic crosses sockets.",
    "Pin the process and its memory to the GPU's NUMA node (numactl --cpunodebind=N "
    "--membind=N, or the job scheduler's topology settings).",
    ("nvidia-smi topo -m", "taskset -cp PID", "numactl --show"),
    "Escalate to the job owner or the scheduler's configuration.")
# Rows that judge a GPU by its own workload (the container's or Slurm job's
# cgroup) and by whom it is allocated to.
IDLE_CPU_LIMIT_THROTTLED = Row(
    "memory_held_sm_idle", "cpu_limit_throttled", "warning",
    "GPU holds memory but sits idle while its container is throttled by its CPU limit",
    f"{_IDLE_GPU}, while the workload of its processes (its container's or Slurm job's "
    "cgroup) has a CPU limit and was throttled in at least {cpu_throttled_high} of its "
    "CPU periods, and the host is not short of CPUs (CPU pressure below "
    "{cpu_pressure_high}). The limit starves the job's data loaders, not the node.",
    "Raise the container's CPU limit (resources.limits.cpu) or the job's CPUs, or run fewer "
    "data loader workers than the limit allows; the node has CPUs to spare.",
    ("cat /sys/fs/cgroup/<workload cgroup>/cpu.stat", "cat /sys/fs/cgroup/<workload "
     "cgroup>/cpu.max", "kubectl describe pod -n NAMESPACE POD"),
    "Escalate to the job owner (the pod or job named in the finding).")
ALLOCATED_UNUSED = Row(
    "gpu_allocated_unused", "no_process", "warning",
    "GPU allocated to a pod but no process uses it",
    "The kubelet has allocated the GPU to a container, and for the whole diagnosis window "
    "({window}) no process held a context on it, its utilization stayed below "
    "{idle_utilization} and its memory below {memory_held_ratio}: a reserved GPU doing "
    "nothing. A job between phases looks the same for a while.",
    "Ask the pod's owner whether it still needs the GPU; delete idle notebooks and "
    "finished jobs that keep their pods, or let an idle-culling policy do it.",
    ("kubectl get pod -n NAMESPACE POD -o wide", "nvidia-smi",
     "kubectl logs -n NAMESPACE POD -c CONTAINER --tail=50"),
    "Escalate to the team that owns the namespace when the GPU stays reserved for hours.")

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
    immediate=True)
RECOVERY_NODE_REBOOT = Row(
    "recovery_action", "node_reboot", "critical",
    "The driver says the node must be rebooted",
    _RECOVERY_EVIDENCE.format(action="NODE_REBOOT"),
    "Drain the node and reboot it: the fault may have left the operating system in an "
    "inconsistent state, a GPU reset is not enough.",
    _RECOVERY_CONFIRM,
    "Escalate to hardware when the node asks for a reboot again after one.",
    immediate=True)
RECOVERY_DRAIN_P2P = Row(
    "recovery_action", "drain_p2p", "warning",
    "The driver asks for peer-to-peer traffic to be drained",
    _RECOVERY_EVIDENCE.format(action="DRAIN_P2P"),
    "Start no new multi-GPU (peer-to-peer / NVLink) jobs on the node and let the running "
    "ones finish; the action returns to none once P2P traffic has stopped.",
    _RECOVERY_CONFIRM,
    "Escalate to hardware when the action does not return to none after P2P work stops.",
    immediate=True)
RECOVERY_DRAIN_AND_RESET = Row(
    "recovery_action", "drain_and_reset", "warning",
    "The driver asks for the GPU to be drained, then reset",
    _RECOVERY_EVIDENCE.format(action="DRAIN_AND_RESET"),
    "Let the running jobs finish, schedule no new ones on the GPU, then reset it with "
    "nvidia-smi -r -i GPU at the first quiet moment.",
    _RECOVERY_CONFIRM,
    "Escalate to hardware when the GPU asks again after a reset.",
    immediate=True)
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
    "Escalate to hardware when the fabric stays degraded after a Fabric Manager restart.")

ROWS: tuple[Row, ...] = (
    IDLE_DATA_PIPELINE_IO, IDLE_CPU_CONTENTION, IDLE_HOST_SWAPPING, IDLE_PROCESS_STALLED,
    UNDERFED_DATA_PIPELINE_IO, UNDERFED_CPU_CONTENTION, UNDERFED_HOST_SWAPPING,
    BURSTY_INPUT, POWER_CAP, THERMAL, POWER_BRAKE, HW_SLOWDOWN, APPLICATION_CLOCKS,
    PCIE_DOWNTRAINED, PCIE_ERRORS, ECC_UNCORRECTABLE, ROW_REMAP_PENDING, XID, XID_APPLICATION,
    XID_INFORMATIONAL, GPU_LOST,
    MEMORY_NEAR_FULL, UTILIZATION_INFLATED, PERSISTENCE_OFF, NUMA_MISPLACED,
    RECOVERY_GPU_RESET, RECOVERY_NODE_REBOOT, RECOVERY_DRAIN_P2P, RECOVERY_DRAIN_AND_RESET,
    FABRIC_DEGRADED,
    IDLE_CPU_LIMIT_THROTTLED, ALLOCATED_UNUSED,
)

BY_KEY: dict[str, Row] = {row.key: row for row in ROWS}


def row(symptom: str, cause: str) -> Row:
    return BY_KEY[f"{symptom}/{cause}"]


def _check_rows() -> None:
    """Keys and anchors are unique, every threshold the prose quotes exists (a
    misspelled ``{name}`` fails here, at import, not in an alert), and every
    row has its runbook entry. (Its one rule is checked where rules register,
    in rules.py; its built-in scenario, named after its anchor, belongs to the
    simulator, and tests/test_diagnosis.py holds every row to one.)"""
    if len(BY_KEY) != len(ROWS) or len({r.anchor for r in ROWS}) != len(ROWS):
        raise ImportError("diagnosis table: two rows share a key or anchor")
    for r in ROWS:
        r.evidence_text(DiagnosisConfig())
        if not (r.fix and r.confirm and r.escalate):
            raise ImportError(f"diagnosis table: row {r.key} lacks its runbook entry")


_check_rows()
