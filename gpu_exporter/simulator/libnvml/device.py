"""One GPU's own readings: identity, load, memory, thermals, power, clocks,
fans, PCIe, field values, memory health and persistence."""

from __future__ import annotations

from collections.abc import Callable
from ctypes import Structure, c_int, c_uint, c_ulonglong

from gpu_exporter.nvml import constants as k
from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.drivers import knows_field
from gpu_exporter.simulator.gpu_state import GpuState
from gpu_exporter.simulator.libnvml.fields import NVLINK_FEC_FIELDS, SCALAR_FIELDS, nvlink_fec
from gpu_exporter.simulator.libnvml.table import (
    OK,
    STRUCTS,
    FakeNvmlLibrary,
    FieldValue,
    Memory,
    MemoryV2,
    P,
    PciInfo,
    U,
    Utilization,
    nvml_function,
    put,
    put_str,
)


# --- identity ----------------------------------------------------------------
@nvml_function("nvmlDeviceGetName", P, U)
def _name(lib: FakeNvmlLibrary, st: GpuState, buf: int, length: int) -> int:
    return put_str(buf, length, lib.world.profile.name)


@nvml_function("nvmlDeviceGetUUID", P, U)
def _uuid(lib: FakeNvmlLibrary, st: GpuState, buf: int, length: int) -> int:
    return put_str(buf, length, st.uuid)


@nvml_function("nvmlDeviceGetSerial", P, U)
def _serial(lib: FakeNvmlLibrary, st: GpuState, buf: int, length: int) -> int:
    return put_str(buf, length, st.serial)


@nvml_function("nvmlDeviceGetVbiosVersion", P, U)
def _vbios(lib: FakeNvmlLibrary, st: GpuState, buf: int, length: int) -> int:
    return put_str(buf, length, lib.world.profile.vbios_version)


@nvml_function("nvmlDeviceGetPciInfo_v3", P)
def _pci(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    info = PciInfo.from_address(out)
    bus = int(st.bus_id.split(":")[1], 16)
    info.busIdLegacy = st.bus_id[4:].encode()
    info.busId = st.bus_id.encode()
    info.domain, info.bus, info.device = 0, bus, 0
    info.pciDeviceId, info.pciSubSystemId = 0x233010DE, 0x16C110DE
    return OK


@nvml_function("nvmlDeviceGetArchitecture", P)
def _arch(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_uint, lib.world.profile.architecture)


@nvml_function("nvmlDeviceGetCudaComputeCapability", P, P)
def _cc(lib: FakeNvmlLibrary, st: GpuState, major: int, minor: int) -> int:
    cc = lib.world.profile.compute_capability
    return put(major, c_int, cc[0]) or put(minor, c_int, cc[1])


# --- load, memory, thermals, power ---------------------------------------------
@nvml_function("nvmlDeviceGetUtilizationRates", P)
def _util(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    if st.mig:
        return int(Return.NOT_SUPPORTED)  # NVML has no device utilization in MIG mode
    if not out:
        return int(Return.INVALID_ARGUMENT)
    u = Utilization.from_address(out)
    u.gpu, u.memory = st.util_pct, st.mem_util_pct
    return OK


@nvml_function("nvmlDeviceGetMemoryInfo", P)
def _mem_v1(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    m = Memory.from_address(out)
    # v1's "used" includes the driver's reservation.
    m.total, m.used = st.mem_total, st.mem_used + st.mem_reserved
    m.free = st.mem_total - m.used
    return OK


@nvml_function("nvmlDeviceGetMemoryInfo_v2", P)
def _mem_v2(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    m = MemoryV2.from_address(out)
    if m.version != k.MEMORY_V2_VERSION:
        return int(Return.ARGUMENT_VERSION_MISMATCH)
    m.total, m.reserved, m.used = st.mem_total, st.mem_reserved, st.mem_used
    m.free = st.mem_total - st.mem_reserved - st.mem_used
    return OK


@nvml_function("nvmlDeviceGetTemperature", U, P)
def _temp(lib: FakeNvmlLibrary, st: GpuState, sensor: int, out: int) -> int:
    if sensor != k.TEMPERATURE_GPU:
        return int(Return.INVALID_ARGUMENT)
    return put(out, c_uint, st.temp_c)


@nvml_function("nvmlDeviceGetTemperatureThreshold", U, P)
def _threshold(lib: FakeNvmlLibrary, st: GpuState, which: int, out: int) -> int:
    t = lib.world.profile.temperature_thresholds_c
    values = {k.THRESHOLD_SHUTDOWN: t.shutdown, k.THRESHOLD_SLOWDOWN: t.slowdown,
              k.THRESHOLD_GPU_MAX: t.max_operating, k.THRESHOLD_MEM_MAX: t.memory_max}
    if which not in values:
        return int(Return.INVALID_ARGUMENT)
    if not values[which]:
        return int(Return.NOT_SUPPORTED)
    return put(out, c_uint, values[which])


@nvml_function("nvmlDeviceGetPowerUsage", P)
def _power(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_uint, st.power_mw)


@nvml_function("nvmlDeviceGetEnforcedPowerLimit", P)
def _limit(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_uint, st.limit_mw)


@nvml_function("nvmlDeviceGetPowerManagementLimit", P)
def _mgmt_limit(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_uint, st.limit_mw)


@nvml_function("nvmlDeviceGetPowerManagementDefaultLimit", P)
def _default_limit(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_uint, st.default_limit_mw)


@nvml_function("nvmlDeviceGetTotalEnergyConsumption", P)
def _energy(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_ulonglong, st.energy_mj)


# --- clocks --------------------------------------------------------------------
def _clock(table: dict[int, int], kind: int, out: int) -> int:
    if kind not in table:
        return int(Return.INVALID_ARGUMENT)
    return put(out, c_uint, table[kind])


@nvml_function("nvmlDeviceGetClockInfo", U, P)
def _clock_info(lib: FakeNvmlLibrary, st: GpuState, kind: int, out: int) -> int:
    return _clock(st.clocks_mhz, kind, out)


@nvml_function("nvmlDeviceGetMaxClockInfo", U, P)
def _max_clock(lib: FakeNvmlLibrary, st: GpuState, kind: int, out: int) -> int:
    return _clock(st.max_clocks_mhz, kind, out)


@nvml_function("nvmlDeviceGetApplicationsClock", U, P)
def _app_clock(lib: FakeNvmlLibrary, st: GpuState, kind: int, out: int) -> int:
    return _clock(st.app_clocks_mhz, kind, out)


@nvml_function("nvmlDeviceGetDefaultApplicationsClock", U, P)
def _default_app_clock(lib: FakeNvmlLibrary, st: GpuState, kind: int, out: int) -> int:
    if "nvmlDeviceGetApplicationsClock" in lib.world.profile.unsupported_calls:
        return int(Return.NOT_SUPPORTED)
    return _clock(st.default_app_clocks_mhz, kind, out)


@nvml_function("nvmlDeviceGetPerformanceState", P)
def _pstate(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_uint, st.pstate)


@nvml_function("nvmlDeviceGetCurrentClocksEventReasons", P)
def _reasons(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_ulonglong, st.reasons)


@nvml_function("nvmlDeviceGetSupportedClocksEventReasons", P)
def _supported_reasons(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_ulonglong, st.supported_reasons)


# The same answers under the names every branch before R535 knows (and R535
# through R580 still export, deprecated).
@nvml_function("nvmlDeviceGetCurrentClocksThrottleReasons", P)
def _throttle_reasons(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_ulonglong, st.reasons)


@nvml_function("nvmlDeviceGetSupportedClocksThrottleReasons", P)
def _supported_throttle_reasons(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_ulonglong, st.supported_reasons)


# --- fans ----------------------------------------------------------------------
@nvml_function("nvmlDeviceGetNumFans", P)
def _num_fans(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_uint, len(st.fans_pct))


@nvml_function("nvmlDeviceGetFanSpeed_v2", U, P)
def _fan(lib: FakeNvmlLibrary, st: GpuState, fan: int, out: int) -> int:
    if fan >= len(st.fans_pct):
        return int(Return.INVALID_ARGUMENT)
    if fan in st.fan_errors:
        return st.fan_errors[fan]
    return put(out, c_uint, st.fans_pct[fan])


# --- thermal sensors -------------------------------------------------------------
class ThermalSensor(Structure):  # one entry of nvmlGpuThermalSettings_t.sensor
    _fields_ = [("controller", c_int), ("defaultMinTemp", c_int), ("defaultMaxTemp", c_int),
                ("currentTemp", c_int), ("target", c_int)]


MAX_THERMAL_SENSORS_PER_GPU = 3  # NVML_MAX_THERMAL_SENSORS_PER_GPU


class ThermalSettings(Structure):  # nvmlGpuThermalSettings_t
    _fields_ = [("count", c_uint), ("sensor", ThermalSensor * MAX_THERMAL_SENSORS_PER_GPU)]


STRUCTS["nvmlGpuThermalSettings_t"] = ThermalSettings
_CONTROLLER_GPU_INTERNAL = 1  # NVML_THERMAL_CONTROLLER_GPU_INTERNAL
_TARGET_GPU, _TARGET_BOARD, _TARGET_ALL = 1, 8, 15  # nvmlThermalTarget_t


@nvml_function("nvmlDeviceGetThermalSettings", U, P)
def _thermal_settings(lib: FakeNvmlLibrary, st: GpuState, index: int, out: int) -> int:
    """The GPU die's sensor, and the board's ambient sensor on boards with one;
    ``index`` NVML_THERMAL_TARGET_ALL asks for all of them, else one by index."""
    if not out:
        return int(Return.INVALID_ARGUMENT)
    shutdown = lib.world.profile.temperature_thresholds_c.shutdown
    sensors = [(_TARGET_GPU, st.temp_c)]
    if st.board_temp_c is not None:
        sensors.append((_TARGET_BOARD, st.board_temp_c))
    if index != _TARGET_ALL:
        if index >= len(sensors):
            return int(Return.INVALID_ARGUMENT)
        sensors = [sensors[index]]
    settings = ThermalSettings.from_address(out)
    settings.count = len(sensors)
    for slot, (target, temp) in zip(settings.sensor, sensors, strict=False):
        slot.controller, slot.defaultMinTemp, slot.defaultMaxTemp = \
            _CONTROLLER_GPU_INTERNAL, 0, shutdown
        slot.currentTemp, slot.target = temp, target
    return OK


# --- PCIe ------------------------------------------------------------------------
@nvml_function("nvmlDeviceGetCurrPcieLinkGeneration", P)
def _gen(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_uint, st.pcie_gen)


@nvml_function("nvmlDeviceGetMaxPcieLinkGeneration", P)
def _gen_max(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_uint, st.pcie_max_gen)


@nvml_function("nvmlDeviceGetCurrPcieLinkWidth", P)
def _width(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_uint, st.pcie_width)


@nvml_function("nvmlDeviceGetMaxPcieLinkWidth", P)
def _width_max(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_uint, st.pcie_max_width)


@nvml_function("nvmlDeviceGetPcieReplayCounter", P)
def _replays(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_uint, st.pcie_replays)


# Per-link NVLink fields (scopeId = link) -> the value for that link.
_LINK_FIELDS: dict[int, Callable[[GpuState, int], int]] = {
    k.FI_DEV_NVLINK_THROUGHPUT_DATA_TX: lambda st, link: st.nvlink_tx_kib[link],
    k.FI_DEV_NVLINK_THROUGHPUT_DATA_RX: lambda st, link: st.nvlink_rx_kib[link],
    k.FI_DEV_NVLINK_GET_STATE: lambda st, link: int(st.nvlink_up[link]),
    k.FI_DEV_NVLINK_ERROR_DL_REPLAY: lambda st, link: st.nvlink_errors[link][0],
    k.FI_DEV_NVLINK_ERROR_DL_RECOVERY: lambda st, link: st.nvlink_errors[link][1],
    k.FI_DEV_NVLINK_ERROR_DL_CRC: lambda st, link: st.nvlink_errors[link][2],
}


_RECOVERY_CODES = {name: code for code, name in k.RECOVERY_ACTIONS.items()}
# Volatile ECC total fields -> the error type they count.
_ECC_VOLATILE_FIELDS = {k.FI_DEV_ECC_SBE_VOL_TOTAL: k.ECC_CORRECTED,
                        k.FI_DEV_ECC_DBE_VOL_TOTAL: k.ECC_UNCORRECTED}


@nvml_function("nvmlDeviceGetFieldValues", c_int, P)
def _fields(lib: FakeNvmlLibrary, st: GpuState, count: int, out: int) -> int:
    if not out or count <= 0:
        return int(Return.INVALID_ARGUMENT)
    values = (FieldValue * count).from_address(out)
    now_us = int(lib.world.clock() * 1e6)
    unsupported = lib.world.profile.unsupported_fields
    for fv in values:
        fv.timestamp, fv.latencyUsec = now_us, 0
        fid = int(fv.fieldId)
        value: int | None = None
        if not knows_field(lib.branch, fid):
            fv.nvmlReturn = int(Return.NOT_SUPPORTED)  # a field newer than the driver
            continue
        if fid in st.field_errors:
            fv.nvmlReturn = st.field_errors[fid]
            continue
        if lib.inject_field_error is not None:
            code = lib.inject_field_error(st.index, fid, int(fv.scopeId))
            if code is not None:
                fv.nvmlReturn = code
                continue
        links = len(st.nvlink_up)
        if fid == k.FI_DEV_NVLINK_LINK_COUNT:
            fv.nvmlReturn, fv.valueType = OK, k.VALUE_TYPE_UNSIGNED_INT
            fv.value.uiVal = links
            continue
        if fid in _LINK_FIELDS:
            link = int(fv.scopeId)
            if not links or link >= links:
                fv.nvmlReturn = int(Return.NOT_SUPPORTED if not links else
                                    Return.INVALID_ARGUMENT)
                continue
            fv.nvmlReturn, fv.valueType = OK, k.VALUE_TYPE_UNSIGNED_LONG_LONG
            fv.value.ullVal = _LINK_FIELDS[fid](st, link)
            continue
        if fid in NVLINK_FEC_FIELDS:
            fv.nvmlReturn, fv.valueType, fv.value.ullVal = nvlink_fec(
                lib.world.profile, st, fid, int(fv.scopeId))
            continue
        if fid == k.FI_DEV_GET_GPU_RECOVERY_ACTION:
            action = st.condition.get("recovery_action") or "none"
            fv.nvmlReturn, fv.valueType = OK, k.VALUE_TYPE_UNSIGNED_INT
            # A recorded code with no name here replays as "code_N".
            fv.value.uiVal = (_RECOVERY_CODES[action] if action in _RECOVERY_CODES
                              else int(action.removeprefix("code_")))
            continue
        if fid in st.c2c_errors and fid not in unsupported:
            fv.nvmlReturn, fv.valueType = OK, k.VALUE_TYPE_UNSIGNED_LONG_LONG
            fv.value.ullVal = st.c2c_errors[fid]
            continue
        if fid in _ECC_VOLATILE_FIELDS:
            # As nvmlDeviceGetTotalEccErrors: not supported with ECC off (or
            # where a replayed recording holds no such counter).
            errors = st.ecc.get((_ECC_VOLATILE_FIELDS[fid], k.ECC_VOLATILE))
            if not st.ecc_enabled or errors is None or fid in unsupported:
                fv.nvmlReturn = int(Return.NOT_SUPPORTED)
            else:
                fv.nvmlReturn, fv.valueType = OK, k.VALUE_TYPE_UNSIGNED_LONG_LONG
                fv.value.ullVal = errors
            continue
        scalar = SCALAR_FIELDS.get(fid)
        if scalar is not None:
            answer = (None if scalar.call in lib.world.profile.unsupported_calls
                      or lib.world.profile.architecture < scalar.since_architecture
                      or fid in unsupported else scalar.value(st))
            if answer is None:
                fv.nvmlReturn = int(Return.NOT_SUPPORTED)
            else:
                fv.nvmlReturn, fv.valueType, fv.value.ullVal = OK, scalar.value_type, answer
            continue
        if fid in k.THROTTLE_TIME_FIELDS:
            # NOT_SUPPORTED for a reason the board does not have (no entry).
            value = st.throttle_ns.get(k.THROTTLE_TIME_FIELDS[fid])
        elif fid == k.FI_DEV_MEMORY_TEMP:
            value = st.mem_temp_c
        elif fid == k.FI_DEV_PCIE_COUNT_TX_BYTES:
            value = st.pcie_tx_bytes
        elif fid == k.FI_DEV_PCIE_COUNT_RX_BYTES:
            value = st.pcie_rx_bytes
        if fid in unsupported or value is None:
            fv.nvmlReturn = int(Return.NOT_SUPPORTED)
            continue
        fv.nvmlReturn = OK
        if fid == k.FI_DEV_MEMORY_TEMP:
            fv.valueType, fv.value.uiVal = k.VALUE_TYPE_UNSIGNED_INT, value
        else:
            fv.valueType, fv.value.ullVal = k.VALUE_TYPE_UNSIGNED_LONG_LONG, value
    return OK


# --- memory health, persistence ---------------------------------------------------
@nvml_function("nvmlDeviceGetEccMode", P, P)
def _ecc_mode(lib: FakeNvmlLibrary, st: GpuState, current: int, pending: int) -> int:
    return put(current, c_uint, int(st.ecc_enabled)) or put(pending, c_uint,
                                                                int(st.ecc_enabled))


@nvml_function("nvmlDeviceGetTotalEccErrors", U, U, P)
def _ecc_total(lib: FakeNvmlLibrary, st: GpuState, etype: int, counter: int, out: int) -> int:
    if not st.ecc_enabled:
        return int(Return.NOT_SUPPORTED)
    if (etype, counter) not in st.ecc:
        return int(Return.INVALID_ARGUMENT)
    return put(out, c_ulonglong, st.ecc[(etype, counter)])


@nvml_function("nvmlDeviceGetRemappedRows", P, P, P, P)
def _remapped(lib: FakeNvmlLibrary, st: GpuState, corr: int, unc: int, pending: int,
              failed: int) -> int:
    c_, u_, p_, f_ = st.remapped
    return (put(corr, c_uint, c_) or put(unc, c_uint, u_) or put(pending, c_uint, p_)
            or put(failed, c_uint, f_))


@nvml_function("nvmlDeviceGetPersistenceMode", P)
def _persistence(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_uint, int(st.persistence))
