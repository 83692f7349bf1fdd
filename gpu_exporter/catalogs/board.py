"""Metrics of the newest boards' health (Blackwell and Grace-Blackwell: B200,
GB200, GB300), read by the device collector where the board and its driver
have them and absent elsewhere."""

from __future__ import annotations

from gpu_exporter.facts.cadence import SLOW_READ_EVERY_POLLS
from gpu_exporter.facts.catalog_types import GPU, Bounds, Metric, declared
from gpu_exporter.facts.catalog_types import metric_spec as _m

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
    "NVML_FI_PWR_SMOOTHING_PRIMARY_POWER_FLOOR, R590 and newer): draw up to it may be "
    "the smoothing's rather than work, so no row reads it as work and an owner's joules "
    "while the draw is at or under it are an upper bound; every watt above it is work. "
    + _SLOW, GPU, "device", bounds=Bounds(0.0, 5000.0))

FABRIC_HEALTH_ISSUE = _m(
    "gpu_fabric_health_issue", "gauge",
    "1 when the NVSwitch fabric reports this issue for the GPU, 0 when it reports it "
    "absent (the fabric info's health mask, R550 and newer; route_recovery, route_unhealthy "
    "and access_timeout_recovery R570 and newer): degraded_bandwidth, route_recovery, "
    "route_unhealthy, access_timeout_recovery, incorrect_configuration. Absent where the "
    "driver does not report the flag. " + _SLOW, (*GPU, "issue"), "device", bounds=_FLAG)

# NVLink 5's forward error correction (FEC), per link: NVML fields 219-222,
# where the board and driver answer them; read by the NVLink reader every poll.
_FEC_KINDS = ("effective (errors left in packets after FEC: NVML_FI_DEV_NVLINK_COUNT_"
              "EFFECTIVE_ERRORS) and symbol (received symbols in error, which FEC corrects: "
              "NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS)")
_BER_KINDS = ("effective (NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER) and symbol "
              "(NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER), decoded from NVML's mantissa and "
              "exponent (mantissa x 10^-exponent)")
# The counters start over when a GPU is reset and when an administrator clears
# them (nvidia-smi nvlink --reseterrorcounters).
_ERRORS_BOUNDS = Bounds(0.0, 2.0**64, resets=True)
# A packed BER's largest value: mantissa 15, exponent 0.
_BER_BOUNDS = Bounds(0.0, 15.0)

NVLINK_FEC_ERRORS_ALL_LINKS_TOTAL = _m(
    "gpu_nvlink_fec_errors_all_links_total", "counter",
    f"NVLink forward-error-correction counts of all the GPU's links together, by type: "
    f"{_FEC_KINDS}. Absent where the board or driver does not count them (per link: "
    "gpu_nvlink_fec_errors_total, with --metrics.detail).",
    (*GPU, "type"), "nvlink", bounds=_ERRORS_BOUNDS)

NVLINK_FEC_ERRORS_TOTAL = _m(
    "gpu_nvlink_fec_errors_total", "counter",
    f"NVLink forward-error-correction counts per link, by type: {_FEC_KINDS}.",
    (*GPU, "link", "type"), "nvlink", detail=True, bounds=_ERRORS_BOUNDS)

NVLINK_BIT_ERROR_RATE_WORST_LINK = _m(
    "gpu_nvlink_bit_error_rate_worst_link", "gauge",
    f"The highest bit-error rate among the GPU's NVLink links, by type: {_BER_KINDS}. "
    "Absent where the board or driver does not report it (per link: "
    "gpu_nvlink_bit_error_rate, with --metrics.detail).",
    (*GPU, "type"), "nvlink", bounds=_BER_BOUNDS)

NVLINK_BIT_ERROR_RATE = _m(
    "gpu_nvlink_bit_error_rate", "gauge",
    f"The NVLink link's bit-error rate, by type: {_BER_KINDS}.",
    (*GPU, "link", "type"), "nvlink", detail=True, bounds=_BER_BOUNDS)

METRICS: tuple[Metric, ...] = declared(globals())
