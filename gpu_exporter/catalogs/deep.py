"""Deep GPU signals: GPM "real" utilization, sub-second samples, Xid events,
NVLink and MIG instances."""

from __future__ import annotations

from gpu_exporter.facts.cadence import FACT_READ_EVERY_POLLS, SAMPLES_EVERY_S
from gpu_exporter.facts.catalog_types import GPU, Metric, declared
from gpu_exporter.facts.catalog_types import metric_spec as _m

MIG = (*GPU, "gpu_instance", "compute_instance")

SM_ACTIVE_RATIO = _m(
    "gpu_sm_active_ratio", "gauge",
    "Share of time at least one warp was active on an SM, averaged over all SMs (NVML GPM, "
    "Hopper and newer): the 'real' utilization that NVML's busy flag hides.",
    GPU, "gpm",
    detail=True)

SM_OCCUPANCY_RATIO = _m(
    "gpu_sm_occupancy_ratio", "gauge",
    "Resident warps as a share of the maximum the SMs can hold (NVML GPM).", GPU, "gpm")

TENSOR_ACTIVE_RATIO = _m(
    "gpu_tensor_active_ratio", "gauge",
    "Share of time any tensor core pipe was active (NVML GPM).", GPU, "gpm",
    detail=True)

DRAM_ACTIVE_RATIO = _m(
    "gpu_dram_active_ratio", "gauge",
    "Share of peak device memory bandwidth in use (NVML GPM).", GPU, "gpm",
    detail=True)

SM_ACTIVE_SECONDS_TOTAL = _m(
    "gpu_sm_active_seconds_total", "counter",
    "SM-active time: the GPM SM activity of each interval between two GPM samples times "
    "its length, summed since the exporter started (NVML GPM, Hopper and newer). rate() "
    "of it is the mean SM activity of any window, whatever the scrape interval.",
    GPU, "gpm")

TENSOR_ACTIVE_SECONDS_TOTAL = _m(
    "gpu_tensor_active_seconds_total", "counter",
    "Tensor-active time: the GPM tensor activity of each interval times its length, "
    "summed since the exporter started; rate() of it is the mean tensor activity of any "
    "window.", GPU, "gpm")

DRAM_ACTIVE_SECONDS_TOTAL = _m(
    "gpu_dram_active_seconds_total", "counter",
    "DRAM-active time: the GPM share of peak memory bandwidth in use in each interval "
    "times its length, summed since the exporter started; rate() of it is the mean "
    "memory bandwidth use of any window.", GPU, "gpm")

GPM_PCIE_BYTES_PER_SECOND = _m(
    "gpu_gpm_pcie_bytes_per_second", "gauge",
    "PCIe traffic rate over the last GPM interval (NVML GPM).", (*GPU, "direction"), "gpm",
    detail=True)

GPM_NVLINK_BYTES_PER_SECOND = _m(
    "gpu_gpm_nvlink_bytes_per_second", "gauge",
    "NVLink traffic rate over the last GPM interval, all links (NVML GPM).",
    (*GPU, "direction"), "gpm",
    detail=True)

MIG_SM_ACTIVE_RATIO = _m(
    "gpu_mig_sm_active_ratio", "gauge",
    "GPM SM activity of one MIG GPU instance.", (*GPU, "gpu_instance"), "gpm")

MIG_SM_OCCUPANCY_RATIO = _m(
    "gpu_mig_sm_occupancy_ratio", "gauge",
    "GPM SM occupancy of one MIG GPU instance.", (*GPU, "gpu_instance"), "gpm")

MIG_TENSOR_ACTIVE_RATIO = _m(
    "gpu_mig_tensor_active_ratio", "gauge",
    "GPM tensor activity of one MIG GPU instance.", (*GPU, "gpu_instance"), "gpm")

MIG_DRAM_ACTIVE_RATIO = _m(
    "gpu_mig_dram_active_ratio", "gauge",
    "GPM memory bandwidth use of one MIG GPU instance.", (*GPU, "gpu_instance"), "gpm")

BUSY_SECONDS_TOTAL = _m(
    "gpu_busy_seconds_total", "counter",
    "Time at least one kernel was running on the GPU since the exporter started; rate() of "
    "it is the GPU's utilization over any window, with nothing lost between scrapes. "
    "Integrated from NVML's sub-second utilization samples (each sample's busy share times "
    "the time since the one before; it lags the newest sample by up to "
    f"{SAMPLES_EVERY_S:g} s, the buffer's read cadence), or, where the driver keeps no "
    "samples (some boards, vGPU), from the 1-second utilization rate read at each poll "
    "times the time since the poll before: gpu_busy_source_info says which.",
    GPU, "samples")

BUSY_SOURCE_INFO = _m(
    "gpu_busy_source_info", "gauge",
    "Where gpu_busy_seconds_total of the GPU comes from (value 1): source=samples (NVML's "
    "sub-second utilization samples, nvmlDeviceGetSamples) or source=utilization_rate (the "
    "1-second utilization rate at each poll, nvmlDeviceGetUtilizationRates, where the "
    "driver keeps no samples).", (*GPU, "source"), "samples")

UTILIZATION_SAMPLES_RATIO = _m(
    "gpu_utilization_samples_ratio", "gauge",
    "Minimum, mean and maximum of NVML's sub-second GPU utilization samples (taken every "
    f"200 ms) since the last read, every {SAMPLES_EVERY_S:g} s: a wide min-max spread with "
    "a moderate mean means bursty input.",
    (*GPU, "stat"), "samples",
    detail=True)

POWER_SAMPLES_WATTS = _m(
    "gpu_power_samples_watts", "gauge",
    "Minimum, mean and maximum of NVML's sub-second power samples (taken every 20 ms) "
    "since the last poll.",
    (*GPU, "stat"), "samples",
    detail=True)

SM_CLOCK_SAMPLES_HERTZ = _m(
    "gpu_sm_clock_samples_hertz", "gauge",
    "Minimum, mean and maximum of NVML's sub-second SM clock samples since the last read, "
    f"every {SAMPLES_EVERY_S:g} s (absent where the driver keeps none, as on H100).",
    (*GPU, "stat"), "samples",
    detail=True)

XID_ERRORS_TOTAL = _m(
    "gpu_xid_errors_total", "counter",
    "Xid errors the driver reported for the GPU, by Xid code: NVML's critical Xid events "
    "since the exporter started, and where the kernel log is readable the driver's Xid "
    "lines since boot that NVML did not deliver (each Xid once). A code's series appears "
    "at its first Xid: count first events with gpu_xid_errors_all_total.",
    (*GPU, "xid"), "xid")

XID_ERRORS_ALL_TOTAL = _m(
    "gpu_xid_errors_all_total", "counter",
    "Xid errors of every code the driver reported for the GPU, counted as "
    "gpu_xid_errors_total; 0 from the GPU's first poll (the kernel log's Xids from "
    "before the exporter started are added at the second), so increase() sees them.",
    GPU, "xid")

EVENTS_TOTAL = _m(
    "gpu_events_total", "counter",
    "Other NVML health events seen for the GPU since the exporter started, by type "
    "(ECC errors and storms, DRAM retirement and its failure, poison, the GPU unavailable, "
    "a recovery action, a power-source change), each where the GPU offers it.",
    (*GPU, "type"), "xid")

NVLINK_LINKS = _m(
    "gpu_nvlink_links", "gauge",
    "NVLink links the GPU has (NVML's link count); 0 series on GPUs without NVLink.",
    GPU, "nvlink")

NVLINK_LINKS_ACTIVE = _m(
    "gpu_nvlink_links_active", "gauge",
    "NVLink links of the GPU that are active now; below gpu_nvlink_links, a link is down "
    "(which one: gpu_nvlink_link_up, with --metrics.detail).", GPU, "nvlink")

NVLINK_ERRORS_ALL_LINKS_TOTAL = _m(
    "gpu_nvlink_errors_all_links_total", "counter",
    "NVLink errors of all the GPU's links together: crc (flit CRC), replay and recovery, "
    "from NVML (per link: gpu_nvlink_errors_total, with --metrics.detail).",
    (*GPU, "type"), "nvlink")

NVLINK_BYTES_ALL_LINKS_TOTAL = _m(
    "gpu_nvlink_bytes_all_links_total", "counter",
    "Data bytes moved over all the GPU's NVLink links together, from NVML's throughput "
    "counters (per link: gpu_nvlink_bytes_total, with --metrics.detail).",
    (*GPU, "direction"), "nvlink")

NVLINK_LINK_UP = _m(
    "gpu_nvlink_link_up", "gauge", "1 when the NVLink link is active, 0 when it is down.",
    (*GPU, "link"), "nvlink",
    detail=True)

NVLINK_ERRORS_TOTAL = _m(
    "gpu_nvlink_errors_total", "counter",
    "NVLink errors per link: crc (flit CRC), replay and recovery, from NVML.",
    (*GPU, "link", "type"), "nvlink",
    detail=True)

NVLINK_BYTES_TOTAL = _m(
    "gpu_nvlink_bytes_total", "counter",
    "Data bytes moved over the NVLink link, from NVML's throughput counters.",
    (*GPU, "link", "direction"), "nvlink",
    detail=True)

MIG_MODE_ENABLED = _m(
    "gpu_mig_mode_enabled", "gauge",
    f"1 when MIG mode is on for the GPU. Read every {FACT_READ_EVERY_POLLS} polls, and at once "
    "after an NVML event on the GPU or a reload.", GPU, "mig")

MIG_INFO = _m(
    "gpu_mig_info", "gauge",
    "A MIG instance of the GPU (value 1) with its own UUID and its GPU instance profile "
    "as NVML names it (mig_profile=\"1g.10gb\"; empty where NVML cannot say).",
    (*MIG, "mig_uuid", "mig_profile"), "mig")

MIG_MEMORY_USED_BYTES = _m(
    "gpu_mig_memory_used_bytes", "gauge", "Memory used in the MIG instance, from NVML.",
    MIG, "mig")

MIG_MEMORY_TOTAL_BYTES = _m(
    "gpu_mig_memory_total_bytes", "gauge", "Memory of the MIG instance, from NVML.", MIG,
    "mig")

METRICS: tuple[Metric, ...] = declared(globals())
