"""Metrics of the NVML device collector."""

from __future__ import annotations

from gpu_exporter.facts.cadence import FACT_READ_EVERY_POLLS, SLOW_READ_EVERY_POLLS
from gpu_exporter.facts.catalog_types import GPU, Bounds, Metric, declared
from gpu_exporter.facts.catalog_types import metric_spec as _m

# Each reading is checked against its metric's bounds before it is exported
# or handed to the diagnosis: NVML's "not available" sentinels and impossible
# values leave the series absent for the poll and count a read error.
_TIB = 1024**4
_GHZ = 1e9
_U32_ALL_ONES = 2.0**32 - 1  # NVML's "not available" in a 32-bit answer
_PCIE_GENERATION = Bounds(1.0, 7.0)
# How often the slower reads are taken (gpu_exporter/facts/cadence.py), for the help.
_LOAD = (f"Read every {SLOW_READ_EVERY_POLLS} polls, and at once when the GPU turns busy or "
         "idle.")
_FACT = (f"Read every {FACT_READ_EVERY_POLLS} polls, and at once after an NVML event on the "
         "GPU or a reload.")
_PCIE_WIDTH = Bounds(1.0, 32.0)

INFO = _m(
    "gpu_info", "gauge",
    "Identity of the GPU (value 1): name, PCI bus id, serial, driver, VBIOS, CUDA driver "
    "version, architecture and compute capability, from NVML; its place in the rack "
    "(chassis serial number, slot, tray: nvmlDeviceGetPlatformInfo, R565 and newer, empty "
    "where the board does not say) and the node's confidential-computing mode (cc_mode: on, "
    "devtools, off; empty where the driver does not say). Read once.",
    (*GPU, "name", "pci_bus_id", "serial", "driver_version", "vbios_version",
     "cuda_driver_version", "architecture", "compute_capability", "chassis_serial", "slot",
     "tray", "cc_mode"), "device")

UP = _m(
    "gpu_up", "gauge",
    "1 when NVML answers for this GPU, 0 when it is lost, fell off the bus or keeps erroring.",
    GPU, "device")

# Ratios NVML reports as percent of a whole (0-100 %): 255 % is the 0xFF
# sentinel, anything above 100 % cannot be a share of time busy.
UTILIZATION_RATIO = _m(
    "gpu_utilization_ratio", "gauge",
    "Share of the last sample period in which at least one kernel was running on the GPU "
    "(NVML utilization.gpu). It does not say how many SMs were busy. "
    "rate(gpu_busy_seconds_total) is the same over any window, with nothing lost between "
    "scrapes.", GPU, "device", detail=True,
    bounds=Bounds(0.0, 1.0))

MEMORY_CONTROLLER_UTILIZATION_RATIO = _m(
    "gpu_memory_controller_utilization_ratio", "gauge",
    "Share of the last sample period in which device memory was being read or written "
    "(NVML utilization.memory).", GPU, "device",
    bounds=Bounds(0.0, 1.0))

# Used (or reserved) memory cannot exceed the board's total.
MEMORY_USED_BYTES = _m(
    "gpu_memory_used_bytes", "gauge",
    "Framebuffer memory allocated by processes, excluding memory reserved by the driver "
    "(NVML memory info v2).", GPU, "device",
    bounds=Bounds(0.0, 4 * _TIB, over_ceiling=1.0))

# The largest board sold has 288 GB; 4 TiB leaves room for ten generations
# and rejects the 64-bit sentinel (1.8e19 bytes).
MEMORY_TOTAL_BYTES = _m(
    "gpu_memory_total_bytes", "gauge", "Total framebuffer memory of the GPU (NVML).",
    GPU, "device",
    bounds=Bounds(1.0, 4 * _TIB))

MEMORY_RESERVED_BYTES = _m(
    "gpu_memory_reserved_bytes", "gauge",
    "Framebuffer memory reserved by the driver and firmware, unavailable to processes "
    "(NVML memory info v2).", GPU, "device",
    bounds=Bounds(0.0, 4 * _TIB, over_ceiling=1.0))

# NVML's temperatures are unsigned degrees; silicon shuts down near 100 °C
# (an H100's shutdown threshold is 92 °C), so 150 °C is no reading, and the
# 0xFFFF / 0xFFFFFFFF sentinels are far above it.
TEMPERATURE_CELSIUS = _m(
    "gpu_temperature_celsius", "gauge",
    "Temperature of the GPU die (sensor=gpu) or of its HBM/GDDR memory (sensor=memory), "
    "from NVML.", (*GPU, "sensor"), "device",
    bounds=Bounds(0.0, 150.0))

TEMPERATURE_THRESHOLD_CELSIUS = _m(
    "gpu_temperature_threshold_celsius", "gauge",
    "Temperature limits of this GPU model: slowdown (clocks are cut), shutdown, and the "
    "maximum operating temperature, from NVML.", (*GPU, "threshold"), "device",
    bounds=Bounds(1.0, 150.0))

# The most a board draws today is ~1.2 kW (B300); 5 kW is no GPU. The 32-bit
# sentinel in milliwatts is 4,294,967 W. Averaged power overshoots the
# enforced limit briefly by tens of percent on transients; two and a half
# times the limit is a broken sensor.
POWER_WATTS = _m(
    "gpu_power_watts", "gauge", "Power drawn by the whole board, from NVML.", GPU, "device",
    bounds=Bounds(0.0, 5000.0, over_ceiling=2.5))

POWER_LIMIT_WATTS = _m(
    "gpu_power_limit_watts", "gauge",
    "Power limit the driver enforces now (the lowest of the configured limits), from NVML.",
    GPU, "device",
    bounds=Bounds(1.0, 5000.0))

POWER_DEFAULT_LIMIT_WATTS = _m(
    "gpu_power_default_limit_watts", "gauge",
    "Power limit the board ships with; a lower enforced limit means someone capped it.",
    GPU, "device",
    bounds=Bounds(1.0, 5000.0))

# Since the driver was loaded (NVML: "since the driver was last reloaded",
# so it resets then): 5 kW for 60 years is 9.5e12 J. The 64-bit sentinel in
# millijoules is 1.8e16 J.
ENERGY_JOULES_TOTAL = _m(
    "gpu_energy_joules_total", "counter",
    "Energy consumed by the GPU since the driver was loaded, from NVML; read every "
    f"{SLOW_READ_EVERY_POLLS} polls (a read costs milliseconds of CPU).", GPU, "device",
    bounds=Bounds(0.0, 1e13, resets=True))

# SM clocks stay near 2-3 GHz, but NVML reports GDDR memory clocks at their
# data rate: 10.5 GHz on an RTX 4090, ~14 GHz with GDDR7. 40 GHz leaves room
# and still rejects the 16-bit sentinel in MHz (65.5 GHz) and the 32-bit one
# (4.3e15 Hz). A clock runs at most at its maximum; half again over it allows
# for boards whose "max" NVML reports below an overclock.
CLOCK_HERTZ = _m(
    "gpu_clock_hertz", "gauge", "Current clock frequency, from NVML (clock sm and memory; "
    "graphics, in step with sm, with --metrics.detail).", (*GPU, "clock"),
    "device",
    bounds=Bounds(0.0, 40 * _GHZ, over_ceiling=1.5))

CLOCK_MAX_HERTZ = _m(
    "gpu_clock_max_hertz", "gauge", "Highest clock frequency this GPU supports, from NVML "
    "(graphics with --metrics.detail).",
    (*GPU, "clock"), "device",
    bounds=Bounds(1.0, 40 * _GHZ))

CLOCK_APPLICATION_HERTZ = _m(
    "gpu_clock_application_hertz", "gauge",
    "Application clock target set by the administrator (nvidia-smi -ac), from NVML. " + _FACT,
    (*GPU, "clock"), "device",
    detail=True,
    bounds=Bounds(0.0, 40 * _GHZ, over_ceiling=1.5))

CLOCK_APPLICATION_DEFAULT_HERTZ = _m(
    "gpu_clock_application_default_hertz", "gauge",
    "Application clock the GPU ships with; GPU Boost runs above it. An application clock "
    "set lower holds the GPU back.", (*GPU, "clock"), "device",
    detail=True,
    bounds=Bounds(0.0, 40 * _GHZ))

# P0 (fastest) to P15 (slowest); NVML_PSTATE_UNKNOWN is 32.
PERFORMANCE_STATE = _m(
    "gpu_performance_state", "gauge",
    "Performance state (P-state): 0 is maximum performance, 15 minimum. " + _LOAD, GPU,
    "device",
    bounds=Bounds(0.0, 15.0))

# NVML: percent of the fan's intended maximum, which it "may exceed"; twice
# the intended speed is more than any fan spins.
FAN_SPEED_RATIO = _m(
    "gpu_fan_speed_ratio", "gauge",
    "Fan speed as a share of its intended maximum; can exceed 1. Absent on passively "
    "cooled boards.", (*GPU, "fan"), "device",
    bounds=Bounds(0.0, 2.0))

THROTTLE_REASON_ACTIVE = _m(
    "gpu_throttle_reason_active", "gauge",
    "1 while this reason holds the GPU's clocks below their maximum (NVML clock event "
    "reasons), one series per reason the GPU supports. A reason NVML also counts the time "
    "of (gpu_throttle_seconds_total) has this series with --metrics.detail only: the "
    "counter's rate says when and how long it held, between scrapes too.",
    (*GPU, "reason"), "device")

# A 64-bit count of nanoseconds: 1e10 s is 300 years; the 64-bit sentinel
# (1.8e10 s) is above it.
THROTTLE_SECONDS_TOTAL = _m(
    "gpu_throttle_seconds_total", "counter",
    "Time this reason held the GPU's clocks down, from NVML's per-reason clock event "
    "counters (nvmlDeviceGetFieldValues NVML_FI_DEV_CLOCKS_EVENT_REASON_* and "
    "NVML_FI_DEV_PERF_POLICY_*, nanoseconds since the driver was loaded); rate() of it is "
    "the share of any window the reason held. Only the reasons the driver counts: "
    "sw_power_cap, sync_boost, sw_thermal, hw_thermal, hw_power_brake, board_limit, "
    "reliability.", (*GPU, "reason"), "device",
    bounds=Bounds(0.0, 1e10))

# PCIe 1.0 to 7.0 (the newest specification); x1 to x32 (the widest link
# the specification defines). 0 is no link to read at all.
PCIE_LINK_GENERATION = _m(
    "gpu_pcie_link_generation", "gauge",
    "PCIe generation the link is trained at now; idle GPUs downshift to save power. " + _LOAD,
    GPU, "device",
    bounds=_PCIE_GENERATION)

PCIE_LINK_GENERATION_MAX = _m(
    "gpu_pcie_link_generation_max", "gauge",
    "Highest PCIe generation this GPU can reach in this system (card and slot).", GPU,
    "device",
    bounds=_PCIE_GENERATION)

PCIE_LINK_WIDTH = _m(
    "gpu_pcie_link_width", "gauge", "PCIe lanes the link is trained at now. " + _LOAD, GPU,
    "device",
    bounds=_PCIE_WIDTH)

PCIE_LINK_WIDTH_MAX = _m(
    "gpu_pcie_link_width_max", "gauge",
    "Most PCIe lanes this GPU can use in this system.", GPU, "device",
    bounds=_PCIE_WIDTH)

# A 32-bit counter: its all-ones value is the sentinel; a link that had
# replayed four billion times would have been retrained or dropped first.
PCIE_REPLAYS_TOTAL = _m(
    "gpu_pcie_replays_total", "counter",
    "PCIe replays (retransmitted packets) since the driver was loaded, read every "
    f"{SLOW_READ_EVERY_POLLS} polls; a rising rate means a marginal link.", GPU, "device",
    bounds=Bounds(0.0, _U32_ALL_ONES - 1))

# A 64-bit byte counter: 2**63 bytes is 290 years at 1 TB/s; the 64-bit
# sentinel (as the double NVML's field value becomes) is above it.
PCIE_BYTES_TOTAL = _m(
    "gpu_pcie_bytes_total", "counter",
    "Bytes moved over the GPU's PCIe link, from NVML's PCIe byte counters, read every "
    f"{SLOW_READ_EVERY_POLLS} polls.",
    (*GPU, "direction"), "device",
    bounds=Bounds(0.0, 2.0**63))

ECC_ENABLED = _m(
    "gpu_ecc_enabled", "gauge", "1 when ECC is enabled on the GPU's memory. " + _FACT, GPU,
    "device")

# A board with four billion ECC errors has been retired long before; the 32-
# and 64-bit sentinels are at or above it. The volatile counts reset "each
# time the driver loads", and with a GPU reset.
ECC_ERRORS_TOTAL = _m(
    "gpu_ecc_errors_total", "counter",
    "ECC errors in device memory: volatile since the last driver load, aggregate over the "
    "GPU's life.", (*GPU, "type", "scope"), "device",
    bounds=Bounds(0.0, _U32_ALL_ONES - 1, resets=("scope", "volatile")))

# Rows an HBM board can remap are counted in the hundreds per bank; the
# 32-bit sentinel is above a million.
REMAPPED_ROWS_TOTAL = _m(
    "gpu_remapped_rows_total", "counter",
    "Memory rows remapped to spares because of correctable or uncorrectable errors. Read "
    f"every {SLOW_READ_EVERY_POLLS} polls, and at once after an NVML event on the GPU, a "
    "reload, or a volatile ECC count that moved.",
    (*GPU, "type"), "device",
    bounds=Bounds(0.0, 1e6))

ROW_REMAP_PENDING = _m(
    "gpu_row_remap_pending", "gauge",
    "1 when a row remap is pending and the GPU needs a reset to apply it.", GPU, "device")

ROW_REMAP_FAILED = _m(
    "gpu_row_remap_failed", "gauge",
    "1 when a row remap failed: the GPU has run out of spare rows and should be replaced.",
    GPU, "device")

PERSISTENCE_MODE_ENABLED = _m(
    "gpu_persistence_mode_enabled", "gauge",
    "1 when persistence mode keeps the driver loaded with no clients. " + _FACT, GPU,
    "device")

RECOVERY_ACTION = _m(
    "gpu_recovery_action", "gauge",
    "Value 1; action names what the driver says the GPU needs (NVML recovery action): "
    "none, gpu_reset, node_reboot, drain_p2p, drain_and_reset, ... Drivers before R565 "
    "do not say.", (*GPU, "action"), "device")

FABRIC_STATE = _m(
    "gpu_fabric_state", "gauge",
    "Value 1; the GPU's registration with the NVSwitch fabric (NVML fabric info, HGX and "
    "NVL systems): state of the probe (not_started, in_progress, completed), its NVML "
    f"status once completed, and the health summary (unknown before R580). Read every "
    f"{SLOW_READ_EVERY_POLLS} polls, and at once after an NVML event on the GPU or a reload.",
    (*GPU, "state", "status", "health"), "device")

METRICS: tuple[Metric, ...] = declared(globals())
