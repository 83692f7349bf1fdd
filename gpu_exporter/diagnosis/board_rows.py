"""The rows of the board and its driver: clocks held down (a power cap, heat,
the power brake, the hardware's own slowdown, application clocks), a stopped
fan, the PCIe link trained low or erring, memory errors, Xid errors, a GPU
lost or a fault come back after a reset, persistence mode off, the driver's
own recovery action, and the GPU's place in the NVSwitch fabric. ``table.py``
lists them in the table; their rules are in ``rules.py``, ``xid_rules.py`` and
``fault_rules.py``."""

from __future__ import annotations

from gpu_exporter.catalogs import board, deep, pcie
from gpu_exporter.catalogs import device as dev
from gpu_exporter.diagnosis.row import Row

# NVML's own gpu_idle reason says when the GPU has no work: the rows that
# judge a slowdown of work judge whenever there is work, at any utilization.
_WORKING = "the GPU has work (NVML does not report it idle)"
_WORKING_GATE = ("only NVML's own gpu_idle (or, where it gives no reasons, 0 %): an idle GPU "
                 "lowers its clocks and its link's speed on purpose, and has no work to slow")
_REASON_READS = (dev.THROTTLE_REASON_ACTIVE, dev.CLOCK_HERTZ, dev.CLOCK_MAX_HERTZ)
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
    reads=(*_REASON_READS, dev.POWER_WATTS, dev.POWER_LIMIT_WATTS,
           dev.POWER_DEFAULT_LIMIT_WATTS))
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
    reads=(*_REASON_READS, dev.TEMPERATURE_CELSIUS, dev.TEMPERATURE_THRESHOLD_CELSIUS),
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
    reads=(dev.FAN_SPEED_RATIO, dev.TEMPERATURE_CELSIUS,
           dev.TEMPERATURE_THRESHOLD_CELSIUS))
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
    reads=(*_REASON_READS, dev.TEMPERATURE_CELSIUS, dev.POWER_WATTS),
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
    reads=(dev.CLOCK_APPLICATION_HERTZ, dev.CLOCK_APPLICATION_DEFAULT_HERTZ,
           dev.THROTTLE_REASON_ACTIVE),
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
    reads=(dev.PCIE_LINK_WIDTH, dev.PCIE_LINK_WIDTH_MAX, dev.PCIE_LINK_GENERATION,
           dev.PCIE_LINK_GENERATION_MAX, pcie.PCIE_SYSFS_LINK_WIDTH,
           pcie.PCIE_SYSFS_LINK_WIDTH_MAX, pcie.PCIE_SYSFS_LINK_GENERATION,
           pcie.PCIE_SYSFS_LINK_GENERATION_MAX, dev.THROTTLE_REASON_ACTIVE),
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
    reads=(dev.PCIE_REPLAYS_TOTAL, pcie.PCIE_AER_ERRORS_TOTAL), boot_grace=True)
ECC_UNCORRECTABLE = Row(
    "memory_errors", "ecc_uncorrectable", "critical",
    "GPU memory had an uncorrectable ECC error or ran out of spare rows",
    "The volatile uncorrectable ECC counter is above zero, a row remap failed, or the GPU "
    "reports memory no repair can fix.",
    "Drain the node, reset the GPU (nvidia-smi -r); if the row remap failed, RMA the GPU.",
    ("nvidia-smi -q -d ECC", "nvidia-smi -q -d ROW_REMAPPER"),
    "Escalate to hardware for an RMA when the remap failed or errors return after reset.",
    immediate=True, reads=(dev.ECC_ERRORS_TOTAL, dev.ROW_REMAP_FAILED,
                           board.UNREPAIRABLE_MEMORY))
ROW_REMAP_PENDING = Row(
    "memory_errors", "row_remap_pending", "warning",
    "GPU has a memory row remap pending",
    "A row remap, or a memory channel or TPC repair, is pending: the GPU needs a reset.",
    "Drain the node and reset the GPU at the next maintenance window.",
    ("nvidia-smi -q -d ROW_REMAPPER",),
    "Escalate to hardware when remaps keep appearing.",
    immediate=True, reads=(dev.ROW_REMAP_PENDING, board.REPAIR_PENDING))
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
    immediate=True, xid_tier="hardware", reads=(deep.XID_ERRORS_TOTAL,))
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
    reads=(deep.XID_ERRORS_TOTAL,))
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
    immediate=True, xid_tier="informational", reads=(deep.XID_ERRORS_TOTAL,))
GPU_LOST = Row(
    "gpu_lost", "hardware", "critical",
    "GPU is lost: NVML cannot reach it",
    "NVML answers GPU_IS_LOST for the GPU, or the kernel removed its PCI device.",
    "Drain the node, check the GPU's power cabling and PCIe seating; a reboot may bring it "
    "back, a repeat needs hardware.",
    ("nvidia-smi", "dmesg -T | grep -iE 'xid|fallen off'", "lspci | grep -i nvidia"),
    "Escalate to hardware.",
    immediate=True, reads=(dev.UP,))
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
    immediate=True, reads=(deep.XID_ERRORS_TOTAL, dev.ECC_ERRORS_TOTAL,
                           dev.ROW_REMAP_PENDING, dev.UP))
PERSISTENCE_OFF = Row(
    "persistence_off", "configuration", "info",
    "Persistence mode is off on a compute node",
    "Persistence mode is disabled, so the driver reloads state for every new client.",
    "Enable nvidia-persistenced (preferred) or nvidia-smi -pm 1.",
    ("nvidia-smi -q | grep -i persistence", "systemctl status nvidia-persistenced"),
    "Escalate to whoever owns node provisioning.",
    immediate=True, reads=(dev.PERSISTENCE_MODE_ENABLED,))
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
    immediate=True, reads=(dev.RECOVERY_ACTION,))
RECOVERY_NODE_REBOOT = Row(
    "recovery_action", "node_reboot", "critical",
    "The driver says the node must be rebooted",
    _RECOVERY_EVIDENCE.format(action="NODE_REBOOT"),
    "Drain the node and reboot it: the fault may have left the operating system in an "
    "inconsistent state, a GPU reset is not enough.",
    _RECOVERY_CONFIRM,
    "Escalate to hardware when the node asks for a reboot again after one.",
    immediate=True, reads=(dev.RECOVERY_ACTION,))
RECOVERY_DRAIN_P2P = Row(
    "recovery_action", "drain_p2p", "warning",
    "The driver asks for peer-to-peer traffic to be drained",
    _RECOVERY_EVIDENCE.format(action="DRAIN_P2P"),
    "Start no new multi-GPU (peer-to-peer / NVLink) jobs on the node and let the running "
    "ones finish; the action returns to none once P2P traffic has stopped.",
    _RECOVERY_CONFIRM,
    "Escalate to hardware when the action does not return to none after P2P work stops.",
    immediate=True, reads=(dev.RECOVERY_ACTION,))
RECOVERY_DRAIN_AND_RESET = Row(
    "recovery_action", "drain_and_reset", "warning",
    "The driver asks for the GPU to be drained, then reset",
    _RECOVERY_EVIDENCE.format(action="DRAIN_AND_RESET"),
    "Let the running jobs finish, schedule no new ones on the GPU, then reset it with "
    "nvidia-smi -r -i GPU at the first quiet moment.",
    _RECOVERY_CONFIRM,
    "Escalate to hardware when the GPU asks again after a reset.",
    immediate=True, reads=(dev.RECOVERY_ACTION,))
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
    reads=(dev.FABRIC_STATE,), boot_grace=True)

