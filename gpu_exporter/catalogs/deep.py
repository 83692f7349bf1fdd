"""Deep GPU signals: GPM "real" utilization, sub-second samples, Xid events,
NVLink and MIG instances."""

from __future__ import annotations

from gpu_exporter.cadence import SAMPLES_EVERY_S
from gpu_exporter.catalog_types import GPU, Metric
from gpu_exporter.catalog_types import metric_spec as _m

MIG = (*GPU, "gpu_instance", "compute_instance")

METRICS: tuple[Metric, ...] = (
    _m("gpu_sm_active_ratio", "gauge",
       "Share of time at least one warp was active on an SM, averaged over all SMs (NVML GPM, "
       "Hopper and newer): the 'real' utilization that NVML's busy flag hides.",
       GPU, "gpm",
       detail=True),
    _m("gpu_sm_occupancy_ratio", "gauge",
       "Resident warps as a share of the maximum the SMs can hold (NVML GPM).", GPU, "gpm"),
    _m("gpu_tensor_active_ratio", "gauge",
       "Share of time any tensor core pipe was active (NVML GPM).", GPU, "gpm",
       detail=True),
    _m("gpu_dram_active_ratio", "gauge",
       "Share of peak device memory bandwidth in use (NVML GPM).", GPU, "gpm",
       detail=True),
    _m("gpu_sm_active_seconds_total", "counter",
       "SM-active time: the GPM SM activity of each interval between two GPM samples times "
       "its length, summed since the exporter started (NVML GPM, Hopper and newer). rate() "
       "of it is the mean SM activity of any window, whatever the scrape interval.",
       GPU, "gpm"),
    _m("gpu_tensor_active_seconds_total", "counter",
       "Tensor-active time: the GPM tensor activity of each interval times its length, "
       "summed since the exporter started; rate() of it is the mean tensor activity of any "
       "window.", GPU, "gpm"),
    _m("gpu_dram_active_seconds_total", "counter",
       "DRAM-active time: the GPM share of peak memory bandwidth in use in each interval "
       "times its length, summed since the exporter started; rate() of it is the mean "
       "memory bandwidth use of any window.", GPU, "gpm"),
    _m("gpu_gpm_pcie_bytes_per_second", "gauge",
       "PCIe traffic rate over the last GPM interval (NVML GPM).", (*GPU, "direction"), "gpm",
       detail=True),
    _m("gpu_gpm_nvlink_bytes_per_second", "gauge",
       "NVLink traffic rate over the last GPM interval, all links (NVML GPM).",
       (*GPU, "direction"), "gpm",
       detail=True),
    _m("gpu_mig_sm_active_ratio", "gauge",
       "GPM SM activity of one MIG GPU instance.", (*GPU, "gpu_instance"), "gpm"),
    _m("gpu_mig_sm_occupancy_ratio", "gauge",
       "GPM SM occupancy of one MIG GPU instance.", (*GPU, "gpu_instance"), "gpm"),
    _m("gpu_mig_tensor_active_ratio", "gauge",
       "GPM tensor activity of one MIG GPU instance.", (*GPU, "gpu_instance"), "gpm"),
    _m("gpu_mig_dram_active_ratio", "gauge",
       "GPM memory bandwidth use of one MIG GPU instance.", (*GPU, "gpu_instance"), "gpm"),
    _m("gpu_busy_seconds_total", "counter",
       "Time at least one kernel was running on the GPU, integrated from NVML's sub-second "
       "utilization samples (each sample's busy share times the time since the one before) "
       "since the exporter started; rate() of it is the GPU's utilization over any window, "
       "with nothing lost between scrapes. Lags the newest sample by up to "
       f"{SAMPLES_EVERY_S:g} s (the buffer's read cadence).", GPU, "samples"),
    _m("gpu_utilization_samples_ratio", "gauge",
       "Minimum, mean and maximum of NVML's sub-second GPU utilization samples (taken every "
       f"200 ms) since the last read, every {SAMPLES_EVERY_S:g} s: a wide min-max spread with "
       "a moderate mean means bursty input.",
       (*GPU, "stat"), "samples",
       detail=True),
    _m("gpu_power_samples_watts", "gauge",
       "Minimum, mean and maximum of NVML's sub-second power samples (taken every 20 ms) "
       "since the last poll.",
       (*GPU, "stat"), "samples",
       detail=True),
    _m("gpu_sm_clock_samples_hertz", "gauge",
       "Minimum, mean and maximum of NVML's sub-second SM clock samples since the last read, "
       f"every {SAMPLES_EVERY_S:g} s (absent where the driver keeps none, as on H100).",
       (*GPU, "stat"), "samples",
       detail=True),
    _m("gpu_xid_errors_total", "counter",
       "Xid errors the driver reported for the GPU, by Xid code: NVML's critical Xid events "
       "since the exporter started, and where the kernel log is readable the driver's Xid "
       "lines since boot that NVML did not deliver (each Xid once). A code's series appears "
       "at its first Xid: count first events with gpu_xid_errors_all_total.",
       (*GPU, "xid"), "xid"),
    _m("gpu_xid_errors_all_total", "counter",
       "Xid errors of every code the driver reported for the GPU, counted as "
       "gpu_xid_errors_total; 0 from the GPU's first poll (the kernel log's Xids from "
       "before the exporter started are added at the second), so increase() sees them.",
       GPU, "xid"),
    _m("gpu_events_total", "counter",
       "Other NVML events seen for the GPU since the exporter started, by type.",
       (*GPU, "type"), "xid"),
    _m("gpu_nvlink_links", "gauge",
       "NVLink links the GPU has (NVML's link count); 0 series on GPUs without NVLink.",
       GPU, "nvlink"),
    _m("gpu_nvlink_links_active", "gauge",
       "NVLink links of the GPU that are active now; below gpu_nvlink_links, a link is down "
       "(which one: gpu_nvlink_link_up, with --metrics.detail).", GPU, "nvlink"),
    _m("gpu_nvlink_errors_all_links_total", "counter",
       "NVLink errors of all the GPU's links together: crc (flit CRC), replay and recovery, "
       "from NVML (per link: gpu_nvlink_errors_total, with --metrics.detail).",
       (*GPU, "type"), "nvlink"),
    _m("gpu_nvlink_bytes_all_links_total", "counter",
       "Data bytes moved over all the GPU's NVLink links together, from NVML's throughput "
       "counters (per link: gpu_nvlink_bytes_total, with --metrics.detail).",
       (*GPU, "direction"), "nvlink"),
    _m("gpu_nvlink_link_up", "gauge", "1 when the NVLink link is active, 0 when it is down.",
       (*GPU, "link"), "nvlink",
       detail=True),
    _m("gpu_nvlink_errors_total", "counter",
       "NVLink errors per link: crc (flit CRC), replay and recovery, from NVML.",
       (*GPU, "link", "type"), "nvlink",
       detail=True),
    _m("gpu_nvlink_bytes_total", "counter",
       "Data bytes moved over the NVLink link, from NVML's throughput counters.",
       (*GPU, "link", "direction"), "nvlink",
       detail=True),
    _m("gpu_mig_mode_enabled", "gauge", "1 when MIG mode is on for the GPU.", GPU, "mig"),
    _m("gpu_mig_info", "gauge",
       "A MIG instance of the GPU (value 1) with its own UUID and its GPU instance profile "
       "as NVML names it (mig_profile=\"1g.10gb\"; empty where NVML cannot say).",
       (*MIG, "mig_uuid", "mig_profile"), "mig"),
    _m("gpu_mig_memory_used_bytes", "gauge", "Memory used in the MIG instance, from NVML.",
       MIG, "mig"),
    _m("gpu_mig_memory_total_bytes", "gauge", "Memory of the MIG instance, from NVML.", MIG,
       "mig"),
)
