"""The symptom -> cause table (SPEC §5), one row per rule. This is the single
source of truth the exporter (``gpu_diagnosis_active``), ``gpu-exporter
diagnose``, the runbook, the alert rules and the dashboards all read.

The principles every row is held to (judged at every load a cause can exist
at, the most specific evidence first, process states read for what they mean,
a cause on its own signal, what a cause explains listed under it, every cause
signal read, MIG instances judged like GPUs) are in docs/diagnosis.md, with
the tests that guard them and the generator's results.

Each row is a named object, written beside the rows that judge the same part
of the node: the board and its driver (``board_rows.py``), the GPU's links
(``link_rows.py``), the network (``network_rows.py``), a GPU starved by its
host (``starved_rows.py``), the workload (``workload_rows.py``) and whom the
GPU is allocated to (``allocation_rows.py``); this module puts them in one
table, in the order the docs and the alerts list them. A row's condition is
registered on it in the rules modules (``rule(t.IDLE_DATA_PIPELINE_IO)(_data_pipeline)``
in ``rules.py``: a misspelled row is an AttributeError at import); which causes
explain which others is ``precedence.py``; the thresholds its prose quotes
come from ``thresholds.py`` (``{iowait_high}`` in ``evidence`` is filled from
the running configuration), so the words never drift from the numbers the
rules use; and the metrics it reads (``Row.reads``) are the catalog's handles,
so a renamed metric is renamed for the rows too.
"""

from __future__ import annotations

# The rows of whom a GPU is allocated to and whether it is used.
from gpu_exporter.diagnosis.allocation_rows import ALLOCATED_RUNS_ON_CPU as ALLOCATED_RUNS_ON_CPU
from gpu_exporter.diagnosis.allocation_rows import ALLOCATED_UNUSED as ALLOCATED_UNUSED

# The rows of the board and its driver: clocks, cooling, PCIe, memory, Xids,
# recovery actions and the fabric.
from gpu_exporter.diagnosis.board_rows import APPLICATION_CLOCKS as APPLICATION_CLOCKS
from gpu_exporter.diagnosis.board_rows import ECC_UNCORRECTABLE as ECC_UNCORRECTABLE
from gpu_exporter.diagnosis.board_rows import FABRIC_DEGRADED as FABRIC_DEGRADED
from gpu_exporter.diagnosis.board_rows import FAN_STOPPED as FAN_STOPPED
from gpu_exporter.diagnosis.board_rows import FAULT_CAME_BACK as FAULT_CAME_BACK
from gpu_exporter.diagnosis.board_rows import GPU_LOST as GPU_LOST
from gpu_exporter.diagnosis.board_rows import HW_SLOWDOWN as HW_SLOWDOWN
from gpu_exporter.diagnosis.board_rows import PCIE_DOWNTRAINED as PCIE_DOWNTRAINED
from gpu_exporter.diagnosis.board_rows import PCIE_ERRORS as PCIE_ERRORS
from gpu_exporter.diagnosis.board_rows import PERSISTENCE_OFF as PERSISTENCE_OFF
from gpu_exporter.diagnosis.board_rows import POWER_BRAKE as POWER_BRAKE
from gpu_exporter.diagnosis.board_rows import POWER_CAP as POWER_CAP
from gpu_exporter.diagnosis.board_rows import RECOVERY_DRAIN_AND_RESET as RECOVERY_DRAIN_AND_RESET
from gpu_exporter.diagnosis.board_rows import RECOVERY_DRAIN_P2P as RECOVERY_DRAIN_P2P
from gpu_exporter.diagnosis.board_rows import RECOVERY_GPU_RESET as RECOVERY_GPU_RESET
from gpu_exporter.diagnosis.board_rows import RECOVERY_NODE_REBOOT as RECOVERY_NODE_REBOOT
from gpu_exporter.diagnosis.board_rows import ROW_REMAP_PENDING as ROW_REMAP_PENDING
from gpu_exporter.diagnosis.board_rows import THERMAL as THERMAL
from gpu_exporter.diagnosis.board_rows import XID as XID
from gpu_exporter.diagnosis.board_rows import XID_APPLICATION as XID_APPLICATION
from gpu_exporter.diagnosis.board_rows import XID_INFORMATIONAL as XID_INFORMATIONAL

# The rows of the GPU's links beside PCIe (NVLink, C2C).
from gpu_exporter.diagnosis.link_rows import C2C_ERRORS as C2C_ERRORS
from gpu_exporter.diagnosis.link_rows import NVLINK_ERRORS as NVLINK_ERRORS

# The rows of the network beside the GPU.
from gpu_exporter.diagnosis.network_rows import NIC_ACROSS_SOCKETS as NIC_ACROSS_SOCKETS
from gpu_exporter.diagnosis.network_rows import RDMA_ERRORS as RDMA_ERRORS
from gpu_exporter.diagnosis.network_rows import RDMA_PORT_DEGRADED as RDMA_PORT_DEGRADED

# Row and Severity are what a row is; the table's readers import them from here too.
from gpu_exporter.diagnosis.row import Row as Row
from gpu_exporter.diagnosis.row import Severity as Severity

# The rows of a GPU its host starves: storage, CPUs, swap, limits, steal.
from gpu_exporter.diagnosis.starved_rows import IDLE_CPU_CONTENTION as IDLE_CPU_CONTENTION
from gpu_exporter.diagnosis.starved_rows import IDLE_CPU_LIMIT_THROTTLED as IDLE_CPU_LIMIT_THROTTLED
from gpu_exporter.diagnosis.starved_rows import IDLE_CPU_STEAL as IDLE_CPU_STEAL
from gpu_exporter.diagnosis.starved_rows import IDLE_DATA_PIPELINE_IO as IDLE_DATA_PIPELINE_IO
from gpu_exporter.diagnosis.starved_rows import IDLE_HOST_SWAPPING as IDLE_HOST_SWAPPING
from gpu_exporter.diagnosis.starved_rows import IDLE_IO_LIMIT_THROTTLED as IDLE_IO_LIMIT_THROTTLED
from gpu_exporter.diagnosis.starved_rows import (
    IDLE_MEMORY_LIMIT_RECLAIM as IDLE_MEMORY_LIMIT_RECLAIM,
)
from gpu_exporter.diagnosis.starved_rows import IDLE_PROCESS_STALLED as IDLE_PROCESS_STALLED
from gpu_exporter.diagnosis.starved_rows import UNDERFED_CPU_CONTENTION as UNDERFED_CPU_CONTENTION
from gpu_exporter.diagnosis.starved_rows import (
    UNDERFED_CPU_LIMIT_THROTTLED as UNDERFED_CPU_LIMIT_THROTTLED,
)
from gpu_exporter.diagnosis.starved_rows import UNDERFED_CPU_STEAL as UNDERFED_CPU_STEAL
from gpu_exporter.diagnosis.starved_rows import (
    UNDERFED_DATA_PIPELINE_IO as UNDERFED_DATA_PIPELINE_IO,
)
from gpu_exporter.diagnosis.starved_rows import UNDERFED_HOST_SWAPPING as UNDERFED_HOST_SWAPPING
from gpu_exporter.diagnosis.starved_rows import (
    UNDERFED_IO_LIMIT_THROTTLED as UNDERFED_IO_LIMIT_THROTTLED,
)
from gpu_exporter.diagnosis.starved_rows import (
    UNDERFED_MEMORY_LIMIT_RECLAIM as UNDERFED_MEMORY_LIMIT_RECLAIM,
)

# The rows of what the workload does on its GPU and host.
from gpu_exporter.diagnosis.workload_rows import BURSTY_INPUT as BURSTY_INPUT
from gpu_exporter.diagnosis.workload_rows import HOST_CPU_THERMAL as HOST_CPU_THERMAL
from gpu_exporter.diagnosis.workload_rows import HOST_MEMORY_GROWTH as HOST_MEMORY_GROWTH
from gpu_exporter.diagnosis.workload_rows import MEMORY_BOUND as MEMORY_BOUND
from gpu_exporter.diagnosis.workload_rows import MEMORY_FILLING as MEMORY_FILLING
from gpu_exporter.diagnosis.workload_rows import MEMORY_NEAR_FULL as MEMORY_NEAR_FULL
from gpu_exporter.diagnosis.workload_rows import NUMA_MISPLACED as NUMA_MISPLACED
from gpu_exporter.diagnosis.workload_rows import UTILIZATION_INFLATED as UTILIZATION_INFLATED
from gpu_exporter.settings.thresholds import DiagnosisConfig

SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}

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
