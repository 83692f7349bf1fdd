"""Metrics of the NVML device collector."""

from __future__ import annotations

from gpu_exporter.cadence import SLOW_READ_EVERY_POLLS
from gpu_exporter.catalog_types import GPU, Metric
from gpu_exporter.catalog_types import metric_spec as _m

METRICS: tuple[Metric, ...] = (
    _m("gpu_info", "gauge",
       "Identity of the GPU (value 1): name, PCI bus id, serial, driver, VBIOS, CUDA driver "
       "version, architecture and compute capability, from NVML.",
       (*GPU, "name", "pci_bus_id", "serial", "driver_version", "vbios_version",
        "cuda_driver_version", "architecture", "compute_capability"), "device"),
    _m("gpu_up", "gauge",
       "1 when NVML answers for this GPU, 0 when it is lost, fell off the bus or keeps erroring.",
       GPU, "device"),
    _m("gpu_utilization_ratio", "gauge",
       "Share of the last sample period in which at least one kernel was running on the GPU "
       "(NVML utilization.gpu). It does not say how many SMs were busy. "
       "rate(gpu_busy_seconds_total) is the same over any window, with nothing lost between "
       "scrapes.", GPU, "device", detail=True),
    _m("gpu_memory_controller_utilization_ratio", "gauge",
       "Share of the last sample period in which device memory was being read or written "
       "(NVML utilization.memory).", GPU, "device"),
    _m("gpu_memory_used_bytes", "gauge",
       "Framebuffer memory allocated by processes, excluding memory reserved by the driver "
       "(NVML memory info v2).", GPU, "device"),
    _m("gpu_memory_total_bytes", "gauge", "Total framebuffer memory of the GPU (NVML).",
       GPU, "device"),
    _m("gpu_memory_reserved_bytes", "gauge",
       "Framebuffer memory reserved by the driver and firmware, unavailable to processes "
       "(NVML memory info v2).", GPU, "device"),
    _m("gpu_temperature_celsius", "gauge",
       "Temperature of the GPU die (sensor=gpu) or of its HBM/GDDR memory (sensor=memory), "
       "from NVML.", (*GPU, "sensor"), "device"),
    _m("gpu_temperature_threshold_celsius", "gauge",
       "Temperature limits of this GPU model: slowdown (clocks are cut), shutdown, and the "
       "maximum operating temperature, from NVML.", (*GPU, "threshold"), "device"),
    _m("gpu_power_watts", "gauge", "Power drawn by the whole board, from NVML.", GPU, "device"),
    _m("gpu_power_limit_watts", "gauge",
       "Power limit the driver enforces now (the lowest of the configured limits), from NVML.",
       GPU, "device"),
    _m("gpu_power_default_limit_watts", "gauge",
       "Power limit the board ships with; a lower enforced limit means someone capped it.",
       GPU, "device"),
    _m("gpu_energy_joules_total", "counter",
       "Energy consumed by the GPU since the driver was loaded, from NVML; read every "
       f"{SLOW_READ_EVERY_POLLS} polls (a read costs milliseconds of CPU).", GPU, "device"),
    _m("gpu_clock_hertz", "gauge", "Current clock frequency, from NVML (clock sm and memory; "
       "graphics, in step with sm, with --metrics.detail).", (*GPU, "clock"),
       "device"),
    _m("gpu_clock_max_hertz", "gauge", "Highest clock frequency this GPU supports, from NVML "
       "(graphics with --metrics.detail).",
       (*GPU, "clock"), "device"),
    _m("gpu_clock_application_hertz", "gauge",
       "Application clock target set by the administrator (nvidia-smi -ac), from NVML.",
       (*GPU, "clock"), "device",
       detail=True),
    _m("gpu_clock_application_default_hertz", "gauge",
       "Application clock the GPU ships with; GPU Boost runs above it. An application clock "
       "set lower holds the GPU back.", (*GPU, "clock"), "device",
       detail=True),
    _m("gpu_performance_state", "gauge",
       "Performance state (P-state): 0 is maximum performance, 15 minimum.", GPU, "device"),
    _m("gpu_fan_speed_ratio", "gauge",
       "Fan speed as a share of its intended maximum; can exceed 1. Absent on passively "
       "cooled boards.", (*GPU, "fan"), "device"),
    _m("gpu_throttle_reason_active", "gauge",
       "1 while this reason holds the GPU's clocks below their maximum (NVML clock event "
       "reasons), one series per reason the GPU supports. A reason NVML also counts the time "
       "of (gpu_throttle_seconds_total) has this series with --metrics.detail only: the "
       "counter's rate says when and how long it held, between scrapes too.",
       (*GPU, "reason"), "device"),
    _m("gpu_throttle_seconds_total", "counter",
       "Time this reason held the GPU's clocks down, from NVML's per-reason clock event "
       "counters (nvmlDeviceGetFieldValues NVML_FI_DEV_CLOCKS_EVENT_REASON_* and "
       "NVML_FI_DEV_PERF_POLICY_*, nanoseconds since the driver was loaded); rate() of it is "
       "the share of any window the reason held. Only the reasons the driver counts: "
       "sw_power_cap, sync_boost, sw_thermal, hw_thermal, hw_power_brake, board_limit, "
       "reliability.", (*GPU, "reason"), "device"),
    _m("gpu_pcie_link_generation", "gauge",
       "PCIe generation the link is trained at now; idle GPUs downshift to save power.",
       GPU, "device"),
    _m("gpu_pcie_link_generation_max", "gauge",
       "Highest PCIe generation this GPU can reach in this system (card and slot).", GPU,
       "device"),
    _m("gpu_pcie_link_width", "gauge", "PCIe lanes the link is trained at now.", GPU, "device"),
    _m("gpu_pcie_link_width_max", "gauge",
       "Most PCIe lanes this GPU can use in this system.", GPU, "device"),
    _m("gpu_pcie_replays_total", "counter",
       "PCIe replays (retransmitted packets) since the driver was loaded, read every "
       f"{SLOW_READ_EVERY_POLLS} polls; a rising rate means a marginal link.", GPU, "device"),
    _m("gpu_pcie_bytes_total", "counter",
       "Bytes moved over the GPU's PCIe link, from NVML's PCIe byte counters, read every "
       f"{SLOW_READ_EVERY_POLLS} polls.",
       (*GPU, "direction"), "device"),
    _m("gpu_ecc_enabled", "gauge", "1 when ECC is enabled on the GPU's memory.", GPU, "device"),
    _m("gpu_ecc_errors_total", "counter",
       "ECC errors in device memory: volatile since the last driver load, aggregate over the "
       "GPU's life.", (*GPU, "type", "scope"), "device"),
    _m("gpu_remapped_rows_total", "counter",
       "Memory rows remapped to spares because of correctable or uncorrectable errors.",
       (*GPU, "type"), "device"),
    _m("gpu_row_remap_pending", "gauge",
       "1 when a row remap is pending and the GPU needs a reset to apply it.", GPU, "device"),
    _m("gpu_row_remap_failed", "gauge",
       "1 when a row remap failed: the GPU has run out of spare rows and should be replaced.",
       GPU, "device"),
    _m("gpu_persistence_mode_enabled", "gauge",
       "1 when persistence mode keeps the driver loaded with no clients.", GPU, "device"),
    _m("gpu_recovery_action", "gauge",
       "Value 1; action names what the driver says the GPU needs (NVML recovery action): "
       "none, gpu_reset, node_reboot, drain_p2p, drain_and_reset, ... Drivers before R565 "
       "do not say.", (*GPU, "action"), "device"),
    _m("gpu_fabric_state", "gauge",
       "Value 1; the GPU's registration with the NVSwitch fabric (NVML fabric info, HGX and "
       "NVL systems): state of the probe (not_started, in_progress, completed), its NVML "
       f"status once completed, and the health summary (unknown before R580). Read every "
       f"{SLOW_READ_EVERY_POLLS} polls.", (*GPU, "state", "status", "health"), "device"),
)
