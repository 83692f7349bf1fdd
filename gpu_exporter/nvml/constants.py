"""NVML constants the exporter relies on, kept here so the rest of the code never
imports pynvml. Values are from ``nvml.h``; a contract test checks them."""

from __future__ import annotations

# Clock event ("throttle") reason bits -> label. pynvml deprecated the
# ThrottleReasons names in favour of ClocksEventReasons; we keep our own map so
# the exported labels never change with the binding.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clock",
    0x200: "board_limit",
    0x400: "reliability",
}
REASON_BITS: dict[str, int] = {name: bit for bit, name in CLOCK_EVENT_REASONS.items()}
# The nine reasons every driver branch still in fleets defines (R470 on; the
# R525 reference lists exactly these): the ones exported for a GPU whose
# supported mask the driver does not give.
CLASSIC_REASONS_MASK = 0x1FF

# nvmlClockType_t
CLOCK_GRAPHICS = 0
CLOCK_SM = 1
CLOCK_MEM = 2
# nvmlDeviceGetPerformanceState's answer when the driver does not know the state.
PSTATE_UNKNOWN = 32

CLOCK_TYPES: dict[str, int] = {"graphics": CLOCK_GRAPHICS, "sm": CLOCK_SM, "memory": CLOCK_MEM}

# nvmlTemperatureSensors_t
TEMPERATURE_GPU = 0

# nvmlTemperatureThresholds_t
THRESHOLD_SHUTDOWN = 0
THRESHOLD_SLOWDOWN = 1
THRESHOLD_MEM_MAX = 2
THRESHOLD_GPU_MAX = 3
TEMPERATURE_THRESHOLDS: dict[str, int] = {
    "shutdown": THRESHOLD_SHUTDOWN,
    "slowdown": THRESHOLD_SLOWDOWN,
    "max_operating": THRESHOLD_GPU_MAX,
}

# nvmlMemoryErrorType_t / nvmlEccCounterType_t
ECC_CORRECTED = 0
ECC_UNCORRECTED = 1
ECC_VOLATILE = 0
ECC_AGGREGATE = 1
ECC_TYPES: dict[str, int] = {"corrected": ECC_CORRECTED, "uncorrected": ECC_UNCORRECTED}
ECC_SCOPES: dict[str, int] = {"volatile": ECC_VOLATILE, "aggregate": ECC_AGGREGATE}

# nvmlDeviceArchitecture_t -> label
ARCHITECTURES: dict[int, str] = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
}

# NVML's "not available" answers, in the widths it answers with: a reading
# equal to one of them (before the unit conversion) is never a measurement.
U8_NA = 0xFF
U16_NA = 0xFFFF
U32_NA = 0xFFFFFFFF
U64_NA = 0xFFFFFFFFFFFFFFFF

# Field ids (nvmlDeviceGetFieldValues). pynvml does not define the PCIe byte
# counters, so they live here.
FI_DEV_MEMORY_TEMP = 82
# Volatile ECC totals: what nvmlDeviceGetTotalEccErrors answers for
# (corrected|uncorrected, volatile), single-bit being the corrected errors.
FI_DEV_ECC_SBE_VOL_TOTAL = 3
FI_DEV_ECC_DBE_VOL_TOTAL = 4
# The same over the GPU's life (what it answers for (type, aggregate)), and the
# ECC mode in force (1 enabled, 0 disabled).
FI_DEV_ECC_SBE_AGG_TOTAL = 5
FI_DEV_ECC_DBE_AGG_TOTAL = 6
FI_DEV_ECC_CURRENT = 1
# Counters and limits nvmlDeviceGetFieldValues answers like their own calls:
# energy in mJ and the PCIe replay counter (every branch here), remapped rows
# (R450 on), and power in mW (NVML 12.2, R535 on: CUDA 12.1's nvml.h ends at
# NVML_FI_MAX 173). POWER_AVERAGE is what nvmlDeviceGetPowerUsage answers on
# Ampere and newer (not GA100); elsewhere the field is NOT_SUPPORTED and the
# call answers.
FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
FI_DEV_PCIE_REPLAY_COUNTER = 94
FI_DEV_REMAPPED_COR = 142
FI_DEV_REMAPPED_UNC = 143
FI_DEV_REMAPPED_PENDING = 144
FI_DEV_REMAPPED_FAILURE = 145
FI_DEV_POWER_AVERAGE = 185
FI_DEV_POWER_DEFAULT_LIMIT = 189
FI_DEV_POWER_CURRENT_LIMIT = 190
FI_DEV_PCIE_COUNT_TX_BYTES = 197
FI_DEV_PCIE_COUNT_RX_BYTES = 198
FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138  # KiB, per link (scopeId)
FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
FI_DEV_NVLINK_LINK_COUNT = 91
FI_DEV_NVLINK_ERROR_DL_REPLAY = 161  # per link (scopeId)
FI_DEV_NVLINK_ERROR_DL_RECOVERY = 162
FI_DEV_NVLINK_ERROR_DL_CRC = 163
FI_DEV_NVLINK_GET_STATE = 165  # per link: 0 inactive, 1 active, 2 sleep, 3 active without traffic
NVLINK_STATE_ACTIVE = 1
# The driver's own verdict on what the GPU needs (nvmlDeviceGpuRecoveryAction_t).
FI_DEV_GET_GPU_RECOVERY_ACTION = 230
RECOVERY_ACTIONS: dict[int, str] = {
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}

# GPU fabric (NVSwitch / NVL systems): nvmlDeviceGetGpuFabricInfoV.
FABRIC_STATES: dict[int, str] = {0: "not_supported", 1: "not_started", 2: "in_progress",
                                 3: "completed"}
FABRIC_HEALTH_SUMMARIES: dict[int, str] = {0: "not_supported", 1: "healthy", 2: "unhealthy",
                                           3: "limited_capacity"}
# NVML_STRUCT_VERSION(GpuFabricInfo, n) = sizeof(nvmlGpuFabricInfo_vn_t) | n << 24
FABRIC_INFO_V2_VERSION = 0x02000024
FABRIC_INFO_V3_VERSION = 0x03000028

# Per-reason clock event ("throttle") time counters, in nanoseconds since the
# driver loaded: NVML_FI_DEV_CLOCKS_EVENT_REASON_* (the power cap and sync boost
# ones are the older NVML_FI_DEV_PERF_POLICY_* ids under a new name) and the
# perf-policy counters nvmlDeviceGetViolationStatus's deprecation maps to field
# values. Field id -> the reason's label in CLOCK_EVENT_REASONS.
FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP = 74
FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST = 76
FI_DEV_PERF_POLICY_BOARD_LIMIT = 77
FI_DEV_PERF_POLICY_RELIABILITY = 79
FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN = 269
FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN = 270
FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN = 271
THROTTLE_TIME_FIELDS: dict[int, str] = {
    FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP: "sw_power_cap",
    FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST: "sync_boost",
    FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: "sw_thermal",
    FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN: "hw_thermal",
    FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: "hw_power_brake",
    FI_DEV_PERF_POLICY_BOARD_LIMIT: "board_limit",
    FI_DEV_PERF_POLICY_RELIABILITY: "reliability",
}

# nvmlSamplingType_t
SAMPLING_TOTAL_POWER = 0  # mW
SAMPLING_GPU_UTILIZATION = 1  # percent
SAMPLING_PROCESSOR_CLOCK = 5  # MHz

# GPM metric ids (nvmlGpmMetricId_t)
GPM_SM_UTIL = 2
GPM_SM_OCCUPANCY = 3
GPM_ANY_TENSOR_UTIL = 5
GPM_DRAM_BW_UTIL = 10
GPM_PCIE_TX_PER_SEC = 20  # MiB/s
GPM_PCIE_RX_PER_SEC = 21
GPM_NVLINK_TOTAL_RX_PER_SEC = 60
GPM_NVLINK_TOTAL_TX_PER_SEC = 61

# The newest boards' health fields (nvml.h; pynvml's NVML_FI_* of the same names).
FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS = 219  # per link: errors left after FEC
FI_DEV_NVLINK_COUNT_EFFECTIVE_BER = 220  # per link: their bit-error rate
FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS = 221  # per link: symbol errors FEC corrected
FI_DEV_NVLINK_COUNT_SYMBOL_BER = 222  # per link: their bit-error rate
# nvml.h packs each BER into one value: "Bit [0:7]: BER Exponent value, Bit
# [8:11]: BER MANTISSA value" (NVML_NVLINK_BER_EXP_SHIFT 0 / _WIDTH 0xff,
# NVML_NVLINK_BER_MANTISSA_SHIFT 8 / _WIDTH 0xf); the rate is mantissa x 10^-exponent.
NVLINK_BER_MANTISSA_SHIFT, NVLINK_BER_MANTISSA_WIDTH = 8, 0xF
NVLINK_BER_EXP_SHIFT, NVLINK_BER_EXP_WIDTH = 0, 0xFF


def nvlink_ber(packed: int) -> float:
    """The bit-error rate an NVLink BER field packs (NVML_NVLINK_ERROR_COUNTER_BER_GET
    of its mantissa and exponent): 0x30C is 3 x 10^-12."""
    mantissa = (packed >> NVLINK_BER_MANTISSA_SHIFT) & NVLINK_BER_MANTISSA_WIDTH
    exponent = (packed >> NVLINK_BER_EXP_SHIFT) & NVLINK_BER_EXP_WIDTH
    return mantissa / 10.0 ** exponent


FI_DEV_C2C_LINK_COUNT = 170
FI_DEV_C2C_LINK_ERROR_INTR = 231
FI_DEV_C2C_LINK_ERROR_REPLAY = 232
FI_DEV_C2C_LINK_ERROR_REPLAY_B2B = 233
FI_PWR_SMOOTHING_ENABLED = 251
FI_PWR_SMOOTHING_PRIMARY_POWER_FLOOR = 275  # W
# NVML_GPU_FABRIC_HEALTH_MASK_*: two bits per flag at these shifts, 1 = TRUE,
# 2 = FALSE, 0 = not supported; the incorrect-configuration flag is four
# bits wide, 1 = none, 2 and up a fault.
FABRIC_HEALTH_FLAGS: dict[str, tuple[int, int]] = {
    "degraded_bandwidth": (0, 0x3), "route_recovery": (2, 0x3),
    "route_unhealthy": (4, 0x3), "access_timeout_recovery": (6, 0x3),
    "incorrect_configuration": (8, 0xF)}

# nvmlEventType bits (nvml.h; pynvml's nvmlEventType* constants). P-state and
# clock changes (0x4, 0x10) and MIG reconfiguration (0x100) are not health.
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID_CRITICAL = 0x8
EVENT_POWER_SOURCE_CHANGE = 0x80
EVENT_SINGLE_BIT_ECC_STORM = 0x200
EVENT_DRAM_RETIREMENT = 0x400
EVENT_DRAM_RETIREMENT_FAILURE = 0x800
EVENT_NON_FATAL_POISON = 0x1000
EVENT_FATAL_POISON = 0x2000
EVENT_GPU_UNAVAILABLE = 0x4000
EVENT_GPU_RECOVERY_ACTION = 0x8000
# Every health event type the driver may offer, by the name it is counted
# under (gpu_events_total's type label; the Xid is counted on its own).
EVENT_NAMES: dict[int, str] = {EVENT_SINGLE_BIT_ECC: "ecc_single_bit",
                               EVENT_DOUBLE_BIT_ECC: "ecc_double_bit",
                               EVENT_XID_CRITICAL: "xid",
                               EVENT_POWER_SOURCE_CHANGE: "power_source_change",
                               EVENT_SINGLE_BIT_ECC_STORM: "ecc_single_bit_storm",
                               EVENT_DRAM_RETIREMENT: "dram_retirement",
                               EVENT_DRAM_RETIREMENT_FAILURE: "dram_retirement_failure",
                               EVENT_NON_FATAL_POISON: "poison_non_fatal",
                               EVENT_FATAL_POISON: "poison_fatal",
                               EVENT_GPU_UNAVAILABLE: "gpu_unavailable",
                               EVENT_GPU_RECOVERY_ACTION: "recovery_action"}
# The types the exporter registers for: all of the above, each where the GPU
# offers it (nvmlDeviceGetSupportedEventTypes).
EVENT_TYPES_WANTED = sum(EVENT_NAMES)


# nvmlValueType_t
VALUE_TYPE_DOUBLE = 0
VALUE_TYPE_UNSIGNED_INT = 1
VALUE_TYPE_UNSIGNED_LONG = 2
VALUE_TYPE_UNSIGNED_LONG_LONG = 3
VALUE_TYPE_SIGNED_LONG_LONG = 4
VALUE_TYPE_SIGNED_INT = 5

# nvmlMemory_v2 version word: sizeof(nvmlMemory_v2_t) | (2 << 24)
MEMORY_V2_VERSION = 0x02000028

# nvmlInitWithFlags
INIT_FLAG_NO_GPUS = 1

# MIG GPU instance profiles: NVML_GPU_INSTANCE_PROFILE_COUNT of the pinned
# nvml.h (the profile values a driver may know; older ones answer
# INVALID_ARGUMENT past their own last one), and the versions of the
# nvmlGpuInstanceProfileInfo_v2_t / _v3_t structs (sizeof | version << 24).
GPU_INSTANCE_PROFILE_COUNT = 0x12
GPU_INSTANCE_PROFILE_INFO_V2_VERSION = 0x02000098
GPU_INSTANCE_PROFILE_INFO_V3_VERSION = 0x03000098
