"""The symptom -> cause table (SPEC §5), one row per rule. This is the single
source of truth the exporter (``gpu_diagnosis_active``), ``gpu-exporter
diagnose``, the runbook, the alert rules and the dashboards all read.

Conditions live in ``rules.py`` (one function per row, keyed by ``key``) and
their thresholds in ``thresholds.py``; this module holds what people read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["critical", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Row:
    symptom: str
    cause: str
    severity: Severity
    summary: str  # one line, plain words, for alert summaries and the landing page
    evidence: str  # what the exporter sees when the row fires
    fix: str  # what the runbook tells the on-call engineer to do
    confirm: tuple[str, ...]  # commands that confirm it on the node
    escalate: str  # when to hand it on
    # Facts, not trends (a lost GPU, an ECC error): on at once, without the
    # diagnosis window.
    immediate: bool = False

    @property
    def key(self) -> str:
        return f"{self.symptom}/{self.cause}"

    @property
    def anchor(self) -> str:
        """Runbook anchor and built-in scenario name: underscores as hyphens."""
        return f"{self.symptom}-{self.cause}".replace("_", "-")

    @property
    def alert_name(self) -> str:
        words = f"{self.symptom}_{self.cause}".split("_")
        if words[0] == "gpu":  # GpuLostHardware, not GpuGpuLostHardware
            words = words[1:]
        return "Gpu" + "".join(w.capitalize() for w in words)


_IDLE_GPU = "GPU memory is held (over half used) but the GPU does almost no work"

ROWS: tuple[Row, ...] = (
    Row("memory_held_sm_idle", "data_pipeline_io", "warning",
        "GPU holds memory but sits idle waiting on storage",
        f"{_IDLE_GPU}, while the host waits on I/O (iowait or I/O pressure high).",
        "Shard or pack small files into larger records, stage the dataset to local NVMe, "
        "prefetch (DataLoader prefetch_factor), and check the shared filesystem.",
        ("mpstat -P ALL 1 3", "iostat -xz 1 3", "cat /proc/pressure/io"),
        "Escalate to the storage team when iowait stays high on several nodes reading the "
        "same filesystem."),
    Row("memory_held_sm_idle", "cpu_contention", "warning",
        "GPU holds memory but sits idle while its process waits for a CPU",
        f"{_IDLE_GPU}, while its process waits on the CPU run queue and CPU pressure is high.",
        "Pin the training process and its dataloader workers with taskset/numactl, use fewer "
        "dataloader workers than cores, and nice or move background jobs.",
        ("cat /proc/pressure/cpu", "pidstat -w -p PID 1 5", "top -H -p PID"),
        "Escalate to the job owner when the node runs more workers than cores."),
    Row("memory_held_sm_idle", "host_swapping", "warning",
        "GPU holds memory but sits idle while the host swaps",
        f"{_IDLE_GPU}, while the host swaps pages in or out or memory pressure (full) is "
        "above zero.",
        "Reduce host memory use (dataloader workers, prefetch, caches), cap prefetching, or "
        "add RAM; never train on a swapping host.",
        ("free -h", "vmstat 1 5", "cat /proc/pressure/memory"),
        "Escalate to the job owner; if the node's RAM is below its spec, to hardware."),
    Row("memory_held_sm_idle", "process_stalled", "warning",
        "GPU holds memory but its process is stalled",
        f"{_IDLE_GPU}, and the process holding it is sleeping or blocked with almost no CPU "
        "time: stuck before its first step, deadlocked, or waiting on a distributed barrier.",
        "Attach py-spy dump --pid PID to see where it waits; check the job's rendezvous and "
        "the other ranks; restart the job if it is deadlocked.",
        ("py-spy dump --pid PID", "ps -o pid,stat,etime,comm -p PID", "nvidia-smi pmon -c 1"),
        "Escalate to the job owner with the py-spy stack."),
    Row("utilization_bursty", "input_starvation", "warning",
        "GPU utilization swings between idle and full: the input pipeline starves it",
        "Sub-second utilization samples swing between near 0 and near 100 % within the window "
        "while the 1-second average looks moderate.",
        "More dataloader workers, pin_memory=True, persistent_workers=True, a larger "
        "prefetch_factor; move augmentation to the GPU.",
        ("nvidia-smi dmon -s u -d 1", "py-spy top --pid PID"),
        "Escalate to the job owner."),
    Row("throttled_under_load", "power_cap", "warning",
        "Busy GPU held below its clocks by its power limit",
        "The GPU is busy, sw_power_cap is active, clocks are below their maximum and the "
        "enforced power limit is below the board's default (lowered by an administrator or "
        "by the rack's power policy). At the default limit a busy GPU drawing its rated "
        "power is working as designed and is not reported.",
        "Compare the power limit with the default (nvidia-smi -q -d POWER); restore it with "
        "nvidia-smi -pl if it was lowered by mistake, or check the rack's power policy.",
        ("nvidia-smi -q -d POWER", "nvidia-smi -q -d PERFORMANCE"),
        "Escalate to the datacenter team when the cap comes from rack power policy."),
    Row("throttled_under_load", "thermal", "warning",
        "Busy GPU slowed down by heat",
        "The GPU is busy and hw_slowdown, hw_thermal or sw_thermal is active, or its "
        "temperature is within a few degrees of its own slowdown threshold.",
        "Check airflow, fans, filters and rack placement; compare with the neighbouring GPUs "
        "in the chassis; cap power while investigating.",
        ("nvidia-smi -q -d TEMPERATURE", "nvidia-smi -q -d PERFORMANCE", "ipmitool sdr type Fan"),
        "Escalate to the datacenter team for cooling or chassis faults."),
    Row("throttled_under_load", "power_brake", "warning",
        "GPU clocks cut by the hardware power brake",
        "hw_power_brake is active: an external signal (power supply, chassis) forces the GPU "
        "down.",
        "Check the power supplies and the chassis' power brake signal; move load off the node.",
        ("nvidia-smi -q -d PERFORMANCE", "ipmitool sel list"),
        "Escalate to the datacenter/hardware team."),
    Row("clocks_capped", "application_clocks", "warning",
        "Busy GPU runs at application clocks set below their default",
        "The GPU is busy and its application clock is set below the default the board ships "
        "with (GPU Boost runs above the default; a lower setting holds it back).",
        "Reset the application clocks (nvidia-smi -rac) and audit the provisioning that set "
        "them.",
        ("nvidia-smi -q -d CLOCK",),
        "Escalate to whoever owns node provisioning."),
    Row("pcie_downtrained", "link_degraded", "warning",
        "Busy GPU's PCIe link trained below its maximum width or generation",
        "While the GPU is busy, its PCIe link runs at a lower width or generation than it "
        "can (idle links downshift on purpose and are never judged).",
        "Reseat the card or riser, check the BIOS bifurcation and slot settings, and compare "
        "the upstream switch port's link.",
        ("nvidia-smi -q -d PCIE", "lspci -vv -s BUS_ID | grep -E 'LnkCap|LnkSta'"),
        "Escalate to hardware when reseating does not restore the link."),
    Row("pcie_errors", "link_integrity", "warning",
        "PCIe replays or AER errors are rising on the GPU's link",
        "The GPU's PCIe replay counter or the kernel's AER correctable error counter keeps "
        "rising.",
        "Check the riser, cable and slot; drain the node if the rate keeps climbing.",
        ("nvidia-smi -q -d PCIE", "cat /sys/bus/pci/devices/BUS_ID/aer_dev_correctable",
         "dmesg -T | grep -i aer"),
        "Escalate to hardware when errors keep rising after a reseat."),
    Row("memory_errors", "ecc_uncorrectable", "critical",
        "GPU memory had an uncorrectable ECC error or ran out of spare rows",
        "The volatile uncorrectable ECC counter is above zero, or a row remap failed.",
        "Drain the node, reset the GPU (nvidia-smi -r); if the row remap failed, RMA the GPU.",
        ("nvidia-smi -q -d ECC", "nvidia-smi -q -d ROW_REMAPPER"),
        "Escalate to hardware for an RMA when the remap failed or errors return after reset.",
        immediate=True),
    Row("memory_errors", "row_remap_pending", "warning",
        "GPU has a memory row remap pending",
        "A row remap is pending: the GPU needs a reset to retire the bad row.",
        "Drain the node and reset the GPU at the next maintenance window.",
        ("nvidia-smi -q -d ROW_REMAPPER",),
        "Escalate to hardware when remaps keep appearing.",
        immediate=True),
    Row("xid_error", "driver_reported", "critical",
        "The driver reported a critical Xid error for the GPU",
        "NVML delivered a critical Xid event (48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, "
        "120 ...).",
        "Act per Xid: 79 means the GPU fell off the bus (check power and PCIe), 48/94/95 are "
        "ECC errors (drain and reset), 74 is an NVLink error, 119/120 are GSP errors (reset).",
        ("dmesg -T | grep -i xid", "nvidia-smi -q"),
        "Escalate to hardware when the same GPU repeats an Xid.",
        immediate=True),
    Row("gpu_lost", "hardware", "critical",
        "GPU is lost: NVML cannot reach it",
        "NVML answers GPU_IS_LOST for the GPU, or the kernel removed its PCI device.",
        "Drain the node, check the GPU's power cabling and PCIe seating; a reboot may bring it "
        "back, a repeat needs hardware.",
        ("nvidia-smi", "dmesg -T | grep -iE 'xid|fallen off'", "lspci | grep -i nvidia"),
        "Escalate to hardware.",
        immediate=True),
    Row("memory_near_full", "oom_risk", "warning",
        "GPU memory is nearly full",
        "Memory used is above 95 % of the GPU's total.",
        "Smaller batches, stable tensor shapes, allocator settings (e.g. "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); check for leaks.",
        ("nvidia-smi --query-gpu=memory.used,memory.total --format=csv",),
        "Escalate to the job owner."),
    Row("utilization_inflated", "small_kernels", "info",
        "GPU looks busy but its SMs mostly idle",
        "NVML utilization is above 80 % while GPM's SM activity is below 30 %: many tiny "
        "kernels or synchronisation keep one kernel running while most SMs wait.",
        "Profile (Nsight Systems), fuse operations, use bigger batches and fewer sync points.",
        ("nsys profile -o trace python train.py", "nvidia-smi dmon -s u"),
        "Escalate to the job owner with a profile."),
    Row("persistence_off", "configuration", "info",
        "Persistence mode is off on a compute node",
        "Persistence mode is disabled, so the driver reloads state for every new client.",
        "Enable nvidia-persistenced (preferred) or nvidia-smi -pm 1.",
        ("nvidia-smi -q | grep -i persistence", "systemctl status nvidia-persistenced"),
        "Escalate to whoever owns node provisioning.",
        immediate=True),
    Row("numa_misplaced", "cpu_affinity", "warning",
        "A GPU process runs on CPUs outside the GPU's NUMA node",
        "A process using the GPU may run on CPUs outside the GPU's local CPU list, so its "
        "host-to-device traffic crosses sockets.",
        "Pin the process and its memory to the GPU's NUMA node (numactl --cpunodebind=N "
        "--membind=N, or the job scheduler's topology settings).",
        ("nvidia-smi topo -m", "taskset -cp PID", "numactl --show"),
        "Escalate to the job owner or the scheduler's configuration."),
)

BY_KEY: dict[str, Row] = {row.key: row for row in ROWS}


def row(symptom: str, cause: str) -> Row:
    return BY_KEY[f"{symptom}/{cause}"]
