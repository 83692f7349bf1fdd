"""Metrics of the newest boards' health (Blackwell and Grace-Blackwell: B200,
GB200, GB300), read by the device collector where the board and its driver
have them and absent elsewhere."""

from __future__ import annotations

from gpu_exporter.cadence import SLOW_READ_EVERY_POLLS
from gpu_exporter.catalog_types import GPU, Bounds, Metric, declared
from gpu_exporter.catalog_types import metric_spec as _m

_SLOW = f"Read every {SLOW_READ_EVERY_POLLS} polls, and at once after an NVML event on the GPU."
_FLAG = Bounds(0.0, 1.0)

C2C_ENABLED = _m(
    "gpu_c2c_enabled", "gauge",
    "1 when the GPU's NVLink chip-to-chip (C2C) link to its Grace CPU is on "
    "(nvmlDeviceGetC2cModeInfoV), 0 when off; absent on boards without one. Read once.",
    GPU, "device", bounds=_FLAG)

C2C_LINKS = _m(
    "gpu_c2c_links", "gauge",
    "C2C links between the GPU and its Grace CPU (NVML_FI_DEV_C2C_LINK_COUNT). Read once.",
    GPU, "device", bounds=Bounds(0.0, 64.0))

C2C_ERRORS_TOTAL = _m(
    "gpu_c2c_errors_total", "counter",
    "Errors on the GPU's C2C link to its Grace CPU, by type: intr (error interrupts), replay "
    "and replay_b2b (back-to-back replays); NVML_FI_DEV_C2C_LINK_ERROR_*, R575 and newer. "
    + _SLOW, (*GPU, "type"), "device", bounds=Bounds(0.0, 2.0**64))

REPAIR_PENDING = _m(
    "gpu_repair_pending", "gauge",
    "1 when a memory channel or TPC repair is pending and the GPU needs a reset to apply "
    "it (nvmlDeviceGetRepairStatus, R580 and newer), by kind (channel, tpc). " + _SLOW,
    (*GPU, "kind"), "device", bounds=_FLAG)

UNREPAIRABLE_MEMORY = _m(
    "gpu_unrepairable_memory", "gauge",
    "1 when the GPU has memory no repair can fix and should be replaced "
    "(nvmlDeviceGetUnrepairableMemoryFlag_v1, R590 and newer). " + _SLOW,
    GPU, "device", bounds=_FLAG)

POWER_SMOOTHING_ENABLED = _m(
    "gpu_power_smoothing_enabled", "gauge",
    "1 when power smoothing holds the GPU's draw up to a floor when its work drops "
    "(NVML_FI_PWR_SMOOTHING_ENABLED, R580 numbering), 0 when off. " + _SLOW,
    GPU, "device", bounds=_FLAG)

POWER_FLOOR_WATTS = _m(
    "gpu_power_floor_watts", "gauge",
    "The power floor power smoothing holds the GPU's draw at (its primary floor, "
    "NVML_FI_PWR_SMOOTHING_PRIMARY_POWER_FLOOR, R590 and newer): draw up to it is "
    "the smoothing's, not work. " + _SLOW, GPU, "device", bounds=Bounds(0.0, 5000.0))

FABRIC_HEALTH_ISSUE = _m(
    "gpu_fabric_health_issue", "gauge",
    "1 when the NVSwitch fabric reports this issue for the GPU, 0 when it reports it "
    "absent (the fabric info's health mask, R550 and newer; route_recovery, route_unhealthy "
    "and access_timeout_recovery R570 and newer): degraded_bandwidth, route_recovery, "
    "route_unhealthy, access_timeout_recovery, incorrect_configuration. Absent where the "
    "driver does not report the flag. " + _SLOW, (*GPU, "issue"), "device", bounds=_FLAG)

METRICS: tuple[Metric, ...] = declared(globals())
