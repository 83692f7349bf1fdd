"""A stand-in for ``libnvidia-ml.so.1``: C-callable functions (ctypes
``CFUNCTYPE``) with NVML's C signatures, put where pynvml looks for the loaded
library. pynvml's own wrappers, versioned structs, size queries and error
mapping then run unchanged against the simulated node.

The structs here are written from ``nvml.h`` independently of pynvml's, so a
layout disagreement between the binding and the header would show up as wrong
values in the tests rather than pass silently.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from ctypes import (
    CFUNCTYPE,
    Structure,
    Union,
    c_char,
    c_double,
    c_int,
    c_int64,
    c_uint,
    c_uint32,
    c_ulong,
    c_ulonglong,
    c_ushort,
    c_void_p,
)
from dataclasses import dataclass, field
from typing import Any

from gpu_exporter.nvml import constants as k
from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.world import (
    POWER_SAMPLES,
    UTILIZATION_SAMPLES,
    GpuState,
    MigState,
    World,
)

log = logging.getLogger(__name__)

OK = int(Return.SUCCESS)


# --- structs, as declared in nvml.h ------------------------------------------
class PciInfo(Structure):  # nvmlPciInfo_t
    _fields_ = [("busIdLegacy", c_char * 16), ("domain", c_uint), ("bus", c_uint),
                ("device", c_uint), ("pciDeviceId", c_uint), ("pciSubSystemId", c_uint),
                ("busId", c_char * 32)]


class Memory(Structure):  # nvmlMemory_t
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class MemoryV2(Structure):  # nvmlMemory_v2_t
    _fields_ = [("version", c_uint), ("total", c_ulonglong), ("reserved", c_ulonglong),
                ("free", c_ulonglong), ("used", c_ulonglong)]


class Utilization(Structure):  # nvmlUtilization_t
    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class Value(Union):  # nvmlValue_t
    _fields_ = [("dVal", c_double), ("uiVal", c_uint), ("ulVal", c_ulong),
                ("ullVal", c_ulonglong), ("sllVal", ctypes.c_longlong), ("siVal", c_int),
                ("usVal", c_ushort)]


class FieldValue(Structure):  # nvmlFieldValue_t
    _fields_ = [("fieldId", c_uint32), ("scopeId", c_uint32), ("timestamp", c_int64),
                ("latencyUsec", c_int64), ("valueType", c_int), ("nvmlReturn", c_int),
                ("value", Value)]


class ProcessInfo(Structure):  # nvmlProcessInfo_t (= nvmlProcessInfo_v2_t)
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong), ("gpuInstanceId", c_uint),
                ("computeInstanceId", c_uint)]


class ProcessUtilizationSample(Structure):  # nvmlProcessUtilizationSample_t
    _fields_ = [("pid", c_uint), ("timeStamp", c_ulonglong), ("smUtil", c_uint),
                ("memUtil", c_uint), ("encUtil", c_uint), ("decUtil", c_uint)]


STRUCTS: dict[str, type[Structure]] = {
    "nvmlPciInfo_t": PciInfo, "nvmlMemory_t": Memory, "nvmlMemory_v2_t": MemoryV2,
    "nvmlUtilization_t": Utilization, "nvmlFieldValue_t": FieldValue,
    "nvmlProcessInfo_t": ProcessInfo,
    "nvmlProcessUtilizationSample_t": ProcessUtilizationSample,
}

# --- the function table -------------------------------------------------------
H = c_void_p  # nvmlDevice_t
P = c_void_p  # any out-pointer
U = c_uint

Impl = Callable[..., int]
# name -> (argument types after the handle or all of them, implementation, takes a device)
FUNCTIONS: dict[str, tuple[tuple[Any, ...], Impl, bool]] = {}
# What a MIG device handle answers, by function: impl(lib, parent_state, mig_state, *args).
MIG_FUNCTIONS: dict[str, Impl] = {}
# Functions that answer before nvmlInit.
_NO_INIT = {"nvmlInitWithFlags", "nvmlInit_v2", "nvmlErrorString"}


def _nvml(name: str, *argtypes: Any, device: bool = True) -> Callable[[Impl], Impl]:
    def register(fn: Impl) -> Impl:
        FUNCTIONS[name] = (argtypes, fn, device)
        return fn

    return register


def _mig(name: str) -> Callable[[Impl], Impl]:
    def register(fn: Impl) -> Impl:
        MIG_FUNCTIONS[name] = fn
        return fn

    return register


def _put(ptr: int | None, ctype: Any, value: Any) -> int:
    if not ptr:
        return int(Return.INVALID_ARGUMENT)
    ctype.from_address(ptr).value = value
    return OK


def _put_str(ptr: int | None, length: int, text: str) -> int:
    data = text.encode()
    if not ptr:
        return int(Return.INVALID_ARGUMENT)
    if length < len(data) + 1:
        return int(Return.INSUFFICIENT_SIZE)
    ctypes.memmove(ptr, data + b"\0", len(data) + 1)
    return OK


class FakeNvmlLibrary:
    """The object pynvml uses as its loaded library: one attribute per C symbol."""

    def __init__(self, world: World, latency_us: dict[str, float] | None = None) -> None:
        self.world = world
        self.latency_us = latency_us or {}
        self._latency_by_arg = {key.partition(":")[0] for key in self.latency_us if ":" in key}
        self.calls: Counter[str] = Counter()
        # Symbols pynvml asked for that this library does not have.
        self.missing: set[str] = set()
        self._init_count = 0
        self._lock = threading.Lock()
        self.gpm_samples: dict[int, tuple[Any, _GpmSampleData]] = {}
        self.event_sets: dict[int, _EventSet] = {}
        self._next_set = 0x5E7000
        self._keep: list[Any] = []
        # Fault injection for property tests (both None otherwise). inject_error
        # sees every call (function name, GPU index or None for system calls)
        # and returns an NVML error code to answer instead, or None. inject_state
        # sees the GPU state a device call is about to answer from and returns
        # the state to use (a bad value is a tampered copy).
        self.inject_error: Callable[[str, int | None], int | None] | None = None
        self.inject_state: Callable[[str, GpuState], GpuState] | None = None
        for name, (argtypes, impl, device) in FUNCTIONS.items():
            full = (H, *argtypes) if device else argtypes
            proto = CFUNCTYPE(c_int, *full)
            fn = proto(self._make(name, impl, device))
            self._keep.append(fn)
            setattr(self, name, fn)

    # pynvml asks for symbols by getattr; an unimplemented one must look like a
    # symbol the library lacks (pynvml maps AttributeError to FUNCTION_NOT_FOUND).
    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvml"):
            self.missing.add(name)
        raise AttributeError(name)

    def _make(self, name: str, impl: Impl, device: bool) -> Callable[..., int]:
        def call(*args: Any) -> int:
            try:
                return self._dispatch(name, impl, device, args)
            except Exception:  # a bug here must look like a C error, not crash ctypes
                log.exception("simulated %s failed", name)
                return int(Return.UNKNOWN)

        return call

    def _dispatch(self, name: str, impl: Impl, device: bool, args: tuple[Any, ...]) -> int:
        self.calls[name] += 1
        delay = self.latency_us.get(name)
        if name in self._latency_by_arg and len(args) > 1:
            # A row "name:N" prices the call whose first argument after the
            # handle is N (the power sample buffer costs a fraction of the others).
            delay = self.latency_us.get(f"{name}:{args[1]}", delay)
        if delay:
            time.sleep(delay / 1e6)
        if self.inject_error is not None:
            where = self._index(args[0]) if device and args else None
            code = self.inject_error(name, where[0] if where else None)
            if code is not None:
                return code
        if name not in _NO_INIT and self._init_count == 0:
            return int(Return.UNINITIALIZED)
        if self.world.nvml_changes and name not in _NO_INIT and name != "nvmlShutdown":
            # NVML as a whole failing under an initialised library (driver
            # upgraded or unloaded underneath the process).
            failure = _NODE_FAILURES.get(self.world.nvml_condition())
            if failure is not None:
                return failure
        if not device:
            return impl(self, *args)
        decoded = self._index(args[0])
        if decoded is None:
            return int(Return.INVALID_ARGUMENT)
        index, slot = decoded
        st = self.world.state(index)
        if self.inject_state is not None:
            st = self.inject_state(name, st)
        hang = st.hangs.get(name)
        if hang:
            time.sleep(hang)  # a call that blocks on a sick GPU, as the real one can
        if st.lost:
            return int(Return.GPU_IS_LOST)
        if name in st.errors:
            return st.errors[name]
        if slot is not None:
            if slot >= len(st.mig):
                return int(Return.INVALID_ARGUMENT)
            mig_impl = MIG_FUNCTIONS.get(name)
            if mig_impl is None:
                return int(Return.NOT_SUPPORTED)
            return mig_impl(self, st, st.mig[slot], *args[1:])
        if name in self.world.profile.unsupported_calls:
            return int(Return.NOT_SUPPORTED)
        return impl(self, st, *args[1:])

    # Handles are opaque pointers; ours encode the GPU index and, for MIG
    # devices, the instance slot in the low byte.
    _HANDLE_BASE = 0x6E766D6C0000

    def handle(self, index: int, mig_slot: int | None = None) -> int:
        return self._HANDLE_BASE + 0x100 * (index + 1) + (0 if mig_slot is None else mig_slot + 1)

    def _index(self, handle: int | None) -> tuple[int, int | None] | None:
        if not handle:
            return None
        offset = handle - self._HANDLE_BASE
        index, low = offset // 0x100 - 1, offset % 0x100
        if not 0 <= index < self.world.gpu_count:
            return None
        return index, (low - 1 if low else None)


# --- system ------------------------------------------------------------------
# What NVML returns while the node's NVML condition is not "ok".
_NODE_FAILURES = {"driver_not_loaded": int(Return.DRIVER_NOT_LOADED),
                  "no_permission": int(Return.NO_PERMISSION),
                  "lib_rm_version_mismatch": int(Return.LIB_RM_VERSION_MISMATCH)}


@_nvml("nvmlInitWithFlags", U, device=False)
def _init(lib: FakeNvmlLibrary, flags: int) -> int:
    failure = _NODE_FAILURES.get(lib.world.nvml_condition())
    if failure is not None:
        return failure
    with lib._lock:
        lib._init_count += 1
    return OK


@_nvml("nvmlShutdown", device=False)
def _shutdown(lib: FakeNvmlLibrary) -> int:
    with lib._lock:
        if lib._init_count == 0:
            return int(Return.UNINITIALIZED)
        lib._init_count -= 1
    return OK


@_nvml("nvmlSystemGetDriverVersion", P, U, device=False)
def _driver_version(lib: FakeNvmlLibrary, buf: int, length: int) -> int:
    return _put_str(buf, length, lib.world.scenario.node.driver_version)


@_nvml("nvmlSystemGetNVMLVersion", P, U, device=False)
def _nvml_version(lib: FakeNvmlLibrary, buf: int, length: int) -> int:
    return _put_str(buf, length, "13." + lib.world.scenario.node.driver_version)


@_nvml("nvmlSystemGetCudaDriverVersion", P, device=False)
def _cuda_version(lib: FakeNvmlLibrary, out: int) -> int:
    return _put(out, c_int, lib.world.scenario.node.cuda_driver_version)


@_nvml("nvmlDeviceGetCount_v2", P, device=False)
def _count(lib: FakeNvmlLibrary, out: int) -> int:
    return _put(out, c_uint, lib.world.gpu_count)


@_nvml("nvmlDeviceGetHandleByIndex_v2", U, P, device=False)
def _handle(lib: FakeNvmlLibrary, index: int, out: int) -> int:
    if index >= lib.world.gpu_count:
        return int(Return.INVALID_ARGUMENT)
    if lib.world.state(index).lost:
        return int(Return.GPU_IS_LOST)
    return _put(out, c_void_p, lib.handle(index))


# --- identity ----------------------------------------------------------------
@_nvml("nvmlDeviceGetName", P, U)
def _name(lib: FakeNvmlLibrary, st: GpuState, buf: int, length: int) -> int:
    return _put_str(buf, length, lib.world.profile.name)


@_nvml("nvmlDeviceGetUUID", P, U)
def _uuid(lib: FakeNvmlLibrary, st: GpuState, buf: int, length: int) -> int:
    return _put_str(buf, length, st.uuid)


@_nvml("nvmlDeviceGetSerial", P, U)
def _serial(lib: FakeNvmlLibrary, st: GpuState, buf: int, length: int) -> int:
    return _put_str(buf, length, st.serial)


@_nvml("nvmlDeviceGetVbiosVersion", P, U)
def _vbios(lib: FakeNvmlLibrary, st: GpuState, buf: int, length: int) -> int:
    return _put_str(buf, length, lib.world.profile.vbios_version)


@_nvml("nvmlDeviceGetPciInfo_v3", P)
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


@_nvml("nvmlDeviceGetArchitecture", P)
def _arch(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_uint, lib.world.profile.architecture)


@_nvml("nvmlDeviceGetCudaComputeCapability", P, P)
def _cc(lib: FakeNvmlLibrary, st: GpuState, major: int, minor: int) -> int:
    cc = lib.world.profile.compute_capability
    return _put(major, c_int, cc[0]) or _put(minor, c_int, cc[1])


# --- load, memory, thermals, power ---------------------------------------------
@_nvml("nvmlDeviceGetUtilizationRates", P)
def _util(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    if st.mig:
        return int(Return.NOT_SUPPORTED)  # NVML has no device utilization in MIG mode
    if not out:
        return int(Return.INVALID_ARGUMENT)
    u = Utilization.from_address(out)
    u.gpu, u.memory = st.util_pct, st.mem_util_pct
    return OK


@_nvml("nvmlDeviceGetMemoryInfo", P)
def _mem_v1(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    m = Memory.from_address(out)
    # v1's "used" includes the driver's reservation.
    m.total, m.used = st.mem_total, st.mem_used + st.mem_reserved
    m.free = st.mem_total - m.used
    return OK


@_nvml("nvmlDeviceGetMemoryInfo_v2", P)
def _mem_v2(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    m = MemoryV2.from_address(out)
    if m.version != k.MEMORY_V2_VERSION:
        return int(Return.ARGUMENT_VERSION_MISMATCH)
    m.total, m.reserved, m.used = st.mem_total, st.mem_reserved, st.mem_used
    m.free = st.mem_total - st.mem_reserved - st.mem_used
    return OK


@_nvml("nvmlDeviceGetTemperature", U, P)
def _temp(lib: FakeNvmlLibrary, st: GpuState, sensor: int, out: int) -> int:
    if sensor != k.TEMPERATURE_GPU:
        return int(Return.INVALID_ARGUMENT)
    return _put(out, c_uint, st.temp_c)


@_nvml("nvmlDeviceGetTemperatureThreshold", U, P)
def _threshold(lib: FakeNvmlLibrary, st: GpuState, which: int, out: int) -> int:
    t = lib.world.profile.temperature_thresholds_c
    values = {k.THRESHOLD_SHUTDOWN: t.shutdown, k.THRESHOLD_SLOWDOWN: t.slowdown,
              k.THRESHOLD_GPU_MAX: t.max_operating, k.THRESHOLD_MEM_MAX: t.memory_max}
    if which not in values:
        return int(Return.INVALID_ARGUMENT)
    if not values[which]:
        return int(Return.NOT_SUPPORTED)
    return _put(out, c_uint, values[which])


@_nvml("nvmlDeviceGetPowerUsage", P)
def _power(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_uint, st.power_mw)


@_nvml("nvmlDeviceGetEnforcedPowerLimit", P)
def _limit(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_uint, st.limit_mw)


@_nvml("nvmlDeviceGetPowerManagementLimit", P)
def _mgmt_limit(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_uint, st.limit_mw)


@_nvml("nvmlDeviceGetPowerManagementDefaultLimit", P)
def _default_limit(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_uint, st.default_limit_mw)


@_nvml("nvmlDeviceGetTotalEnergyConsumption", P)
def _energy(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_ulonglong, st.energy_mj)


# --- clocks --------------------------------------------------------------------
def _clock(table: dict[int, int], kind: int, out: int) -> int:
    if kind not in table:
        return int(Return.INVALID_ARGUMENT)
    return _put(out, c_uint, table[kind])


@_nvml("nvmlDeviceGetClockInfo", U, P)
def _clock_info(lib: FakeNvmlLibrary, st: GpuState, kind: int, out: int) -> int:
    return _clock(st.clocks_mhz, kind, out)


@_nvml("nvmlDeviceGetMaxClockInfo", U, P)
def _max_clock(lib: FakeNvmlLibrary, st: GpuState, kind: int, out: int) -> int:
    return _clock(st.max_clocks_mhz, kind, out)


@_nvml("nvmlDeviceGetApplicationsClock", U, P)
def _app_clock(lib: FakeNvmlLibrary, st: GpuState, kind: int, out: int) -> int:
    return _clock(st.app_clocks_mhz, kind, out)


@_nvml("nvmlDeviceGetDefaultApplicationsClock", U, P)
def _default_app_clock(lib: FakeNvmlLibrary, st: GpuState, kind: int, out: int) -> int:
    if "nvmlDeviceGetApplicationsClock" in lib.world.profile.unsupported_calls:
        return int(Return.NOT_SUPPORTED)
    return _clock(st.default_app_clocks_mhz, kind, out)


@_nvml("nvmlDeviceGetPerformanceState", P)
def _pstate(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_uint, st.pstate)


@_nvml("nvmlDeviceGetCurrentClocksEventReasons", P)
def _reasons(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_ulonglong, st.reasons)


@_nvml("nvmlDeviceGetSupportedClocksEventReasons", P)
def _supported_reasons(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_ulonglong, st.supported_reasons)


# --- fans ----------------------------------------------------------------------
@_nvml("nvmlDeviceGetNumFans", P)
def _num_fans(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_uint, len(st.fans_pct))


@_nvml("nvmlDeviceGetFanSpeed_v2", U, P)
def _fan(lib: FakeNvmlLibrary, st: GpuState, fan: int, out: int) -> int:
    if fan >= len(st.fans_pct):
        return int(Return.INVALID_ARGUMENT)
    return _put(out, c_uint, st.fans_pct[fan])


# --- PCIe ------------------------------------------------------------------------
@_nvml("nvmlDeviceGetCurrPcieLinkGeneration", P)
def _gen(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_uint, st.pcie_gen)


@_nvml("nvmlDeviceGetMaxPcieLinkGeneration", P)
def _gen_max(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_uint, st.pcie_max_gen)


@_nvml("nvmlDeviceGetCurrPcieLinkWidth", P)
def _width(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_uint, st.pcie_width)


@_nvml("nvmlDeviceGetMaxPcieLinkWidth", P)
def _width_max(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_uint, st.pcie_max_width)


@_nvml("nvmlDeviceGetPcieReplayCounter", P)
def _replays(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_uint, st.pcie_replays)


# Per-link NVLink fields (scopeId = link) -> the value for that link.
_LINK_FIELDS: dict[int, Callable[[GpuState, int], int]] = {
    k.FI_DEV_NVLINK_THROUGHPUT_DATA_TX: lambda st, link: st.nvlink_tx_kib[link],
    k.FI_DEV_NVLINK_THROUGHPUT_DATA_RX: lambda st, link: st.nvlink_rx_kib[link],
    k.FI_DEV_NVLINK_GET_STATE: lambda st, link: int(st.nvlink_up[link]),
    k.FI_DEV_NVLINK_ERROR_DL_REPLAY: lambda st, link: st.nvlink_errors[link][0],
    k.FI_DEV_NVLINK_ERROR_DL_RECOVERY: lambda st, link: st.nvlink_errors[link][1],
    k.FI_DEV_NVLINK_ERROR_DL_CRC: lambda st, link: st.nvlink_errors[link][2],
}


@_nvml("nvmlDeviceGetFieldValues", c_int, P)
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
        if fid in st.field_errors:
            fv.nvmlReturn = st.field_errors[fid]
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
        if fid == k.FI_DEV_MEMORY_TEMP:
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
@_nvml("nvmlDeviceGetEccMode", P, P)
def _ecc_mode(lib: FakeNvmlLibrary, st: GpuState, current: int, pending: int) -> int:
    return _put(current, c_uint, int(st.ecc_enabled)) or _put(pending, c_uint,
                                                                int(st.ecc_enabled))


@_nvml("nvmlDeviceGetTotalEccErrors", U, U, P)
def _ecc_total(lib: FakeNvmlLibrary, st: GpuState, etype: int, counter: int, out: int) -> int:
    if not st.ecc_enabled:
        return int(Return.NOT_SUPPORTED)
    if (etype, counter) not in st.ecc:
        return int(Return.INVALID_ARGUMENT)
    return _put(out, c_ulonglong, st.ecc[(etype, counter)])


@_nvml("nvmlDeviceGetRemappedRows", P, P, P, P)
def _remapped(lib: FakeNvmlLibrary, st: GpuState, corr: int, unc: int, pending: int,
              failed: int) -> int:
    c_, u_, p_, f_ = st.remapped
    return (_put(corr, c_uint, c_) or _put(unc, c_uint, u_) or _put(pending, c_uint, p_)
            or _put(failed, c_uint, f_))


@_nvml("nvmlDeviceGetPersistenceMode", P)
def _persistence(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_uint, int(st.persistence))


# --- processes ------------------------------------------------------------------
def _process_list(st: GpuState, graphics: bool, count_ptr: int, out: int | None) -> int:
    """NVML's size-query protocol: with too small a buffer (or none) answer
    INSUFFICIENT_SIZE and the count needed; SUCCESS with 0 when there are none."""
    if not count_ptr:
        return int(Return.INVALID_ARGUMENT)
    procs = [p for p in st.processes if p.graphics == graphics]
    count = c_uint.from_address(count_ptr)
    if count.value < len(procs) or (not out and procs):
        count.value = len(procs)
        return int(Return.INSUFFICIENT_SIZE)
    count.value = len(procs)
    if procs and out:
        infos = (ProcessInfo * len(procs)).from_address(out)
        for info, p in zip(infos, procs, strict=True):
            info.pid, info.usedGpuMemory = p.pid, p.used_bytes
            info.gpuInstanceId, info.computeInstanceId = p.gpu_instance, p.compute_instance
    return OK


@_nvml("nvmlDeviceGetComputeRunningProcesses_v3", P, P)
def _compute_procs(lib: FakeNvmlLibrary, st: GpuState, count: int, out: int) -> int:
    return _process_list(st, False, count, out)


@_nvml("nvmlDeviceGetGraphicsRunningProcesses_v3", P, P)
def _graphics_procs(lib: FakeNvmlLibrary, st: GpuState, count: int, out: int) -> int:
    return _process_list(st, True, count, out)


# NVML keeps per-process samples from the driver's sampling; the simulator
# produces one per second of scenario time for each process that has a value.
_SAMPLE_PERIOD_S = 1.0


@_nvml("nvmlDeviceGetProcessUtilization", P, P, c_ulonglong)
def _proc_util(lib: FakeNvmlLibrary, st: GpuState, out: int, count_ptr: int,
               last_seen_us: int) -> int:
    if not count_ptr:
        return int(Return.INVALID_ARGUMENT)
    t = lib.world.elapsed()
    now_us = int(lib.world.clock() * 1e6)
    stamp_us = now_us - int((t % _SAMPLE_PERIOD_S) * 1e6)
    samples = [(p.pid, stamp_us, p.sm_util_pct) for p in st.processes
               if p.sm_util_pct is not None and stamp_us > last_seen_us]
    if not samples:
        return int(Return.NOT_FOUND)  # no samples newer than last_seen: normal
    count = c_uint.from_address(count_ptr)
    if not out or count.value < len(samples):
        count.value = len(samples)
        return int(Return.INSUFFICIENT_SIZE)
    count.value = len(samples)
    buf = (ProcessUtilizationSample * len(samples)).from_address(out)
    for slot, (pid, ts, sm) in zip(buf, samples, strict=True):
        slot.pid, slot.timeStamp, slot.smUtil = pid, ts, sm
        slot.memUtil, slot.encUtil, slot.decUtil = sm // 2, 0, 0
    return OK


# --- sub-second samples (nvmlDeviceGetSamples) ---------------------------------------
# nvmlSamplingType_t. On an H100 (driver 580.159.04) types 0-4 answer, the clock
# types 5 and 6 answer NOT_FOUND (never filled), module power (7) and anything
# beyond answer INVALID_ARGUMENT.
SAMPLING_POWER, SAMPLING_GPU_UTIL, SAMPLING_MEM_UTIL, SAMPLING_ENC, SAMPLING_DEC = 0, 1, 2, 3, 4
SAMPLING_SM_CLOCK, SAMPLING_MEM_CLOCK = 5, 6
_SAMPLING_LAST = 6
# What the driver leaves in the upper half of an unsigned-int sample's 8-byte
# union: seen on the real driver (e.g. 0xffff8880_00000000), so a reader must
# honour the value type.
_UNION_GARBAGE = 0xFFFF8880 << 32


class Sample(Structure):  # nvmlSample_t
    _fields_ = [("timeStamp", c_ulonglong), ("sampleValue", Value)]


STRUCTS["nvmlSample_t"] = Sample


@_nvml("nvmlDeviceGetSamples", U, c_ulonglong, P, P, P)
def _samples(lib: FakeNvmlLibrary, st: GpuState, kind: int, last_seen_us: int, vtype: int,
             count_ptr: int, out: int) -> int:
    if not count_ptr or not vtype or kind > _SAMPLING_LAST:
        return int(Return.INVALID_ARGUMENT)
    w, p = lib.world, lib.world.profile
    if kind in (SAMPLING_SM_CLOCK, SAMPLING_MEM_CLOCK) and not p.clock_samples:
        return int(Return.NOT_FOUND)
    epoch = w.clock() - w.elapsed()  # wall time of scenario time 0
    since = max(0.0, last_seen_us / 1e6 - epoch)
    buffer = POWER_SAMPLES if kind == SAMPLING_POWER else UTILIZATION_SAMPLES
    # Compare whole microseconds, as the driver does: float seconds since the
    # epoch would let the last seen sample through again.
    raw = [(ts, util) for ts, util in
           ((round((epoch + t) * 1e6), util)
            for t, util in w.samples(st.index, max(0.0, since - buffer[0]), st.t, buffer))
           if ts > last_seen_us]
    if not raw:
        return int(Return.NOT_FOUND)  # nothing newer than last_seen: normal
    count = c_uint.from_address(count_ptr)
    c_int.from_address(vtype).value = k.VALUE_TYPE_UNSIGNED_INT
    if not out:
        count.value = len(raw)  # the size query succeeds with the count
        return OK
    n = min(count.value, len(raw))
    buf = (Sample * n).from_address(out)
    limit_w = st.limit_mw / 1000.0
    for slot, (stamp, util) in zip(buf, raw[-n:], strict=True):
        slot.timeStamp = stamp
        if kind == SAMPLING_GPU_UTIL:
            value = round(util * 100)
        elif kind == SAMPLING_POWER:
            value = round(1000 * (p.power_idle_w + (0.9 * limit_w - p.power_idle_w) * util))
        elif kind == SAMPLING_MEM_UTIL:
            value = st.mem_util_pct
        elif kind in (SAMPLING_ENC, SAMPLING_DEC):
            value = 0
        else:
            value = st.clocks_mhz[1] if util >= 0.05 else p.clocks_idle_mhz.sm
        slot.sampleValue.ullVal = _UNION_GARBAGE | value
    count.value = n
    return OK


# --- GPM ------------------------------------------------------------------------------
class GpmSupport(Structure):  # nvmlGpmSupport_t
    _fields_ = [("version", c_uint), ("isSupportedDevice", c_uint)]


class _MetricInfo(Structure):
    _fields_ = [("shortName", c_void_p), ("longName", c_void_p), ("unit", c_void_p)]


class GpmMetric(Structure):  # nvmlGpmMetric_t
    _fields_ = [("metricId", c_uint), ("nvmlReturn", c_int), ("value", c_double),
                ("metricInfo", _MetricInfo)]


GPM_METRIC_MAX = 477


class GpmMetricsGet(Structure):  # nvmlGpmMetricsGet_t
    _fields_ = [("version", c_uint), ("numMetrics", c_uint), ("sample1", c_void_p),
                ("sample2", c_void_p), ("metrics", GpmMetric * GPM_METRIC_MAX)]


STRUCTS.update({"nvmlGpmSupport_t": GpmSupport, "nvmlGpmMetric_t": GpmMetric,
                "nvmlGpmMetricsGet_t": GpmMetricsGet})

# metric id -> (GPM integral name, scale to the metric's unit)
_GPM_RATIOS = {2: "sm_active", 3: "sm_occupancy", 5: "tensor_active", 10: "dram_active"}
_MIB = 1024 * 1024


@dataclass
class _GpmSampleData:
    taken: bool = False
    t: float = 0.0
    index: int = 0
    gpu_instance: int | None = None
    gpm: dict[str, float] = field(default_factory=dict)
    pcie: tuple[int, int] = (0, 0)
    nvlink: tuple[int, int] = (0, 0)


@_nvml("nvmlGpmQueryDeviceSupport", P)
def _gpm_support(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    sup = GpmSupport.from_address(out)
    if sup.version != 1:
        return int(Return.ARGUMENT_VERSION_MISMATCH)
    sup.isSupportedDevice = int(lib.world.profile.gpm)
    return OK


@_nvml("nvmlGpmSampleAlloc", P, device=False)
def _gpm_alloc(lib: FakeNvmlLibrary, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    buf = ctypes.create_string_buffer(64)  # opaque to the caller
    addr = ctypes.addressof(buf)
    lib.gpm_samples[addr] = (buf, _GpmSampleData())
    return _put(out, c_void_p, addr)


@_nvml("nvmlGpmSampleFree", P, device=False)
def _gpm_free(lib: FakeNvmlLibrary, sample: int) -> int:
    if lib.gpm_samples.pop(sample or 0, None) is None:
        return int(Return.INVALID_ARGUMENT)
    return OK


def _take(lib: FakeNvmlLibrary, st: GpuState, sample: int, gi: int | None) -> int:
    if not lib.world.profile.gpm:
        return int(Return.NOT_SUPPORTED)
    entry = lib.gpm_samples.get(sample or 0)
    if entry is None:
        return int(Return.INVALID_ARGUMENT)
    data = entry[1]
    data.taken, data.t, data.index, data.gpu_instance = True, st.t, st.index, gi
    if gi is None:
        data.gpm = dict(st.gpm)
    else:
        mig = [m for m in st.mig if m.gpu_instance == gi]
        if not mig:
            return int(Return.NOT_FOUND)
        data.gpm = {"sm_active": mig[0].sm_active_s}
    data.pcie = st.gpm_pcie
    data.nvlink = (sum(st.nvlink_rx_kib) * 1024, sum(st.nvlink_tx_kib) * 1024)
    return OK


@_nvml("nvmlGpmSampleGet", P)
def _gpm_get(lib: FakeNvmlLibrary, st: GpuState, sample: int) -> int:
    return _take(lib, st, sample, None)


@_nvml("nvmlGpmMigSampleGet", U, P)
def _gpm_mig_get(lib: FakeNvmlLibrary, st: GpuState, gi: int, sample: int) -> int:
    return _take(lib, st, sample, gi)


# GPM needs its two samples this far apart to compute rates.
GPM_MIN_INTERVAL_S = 0.1


@_nvml("nvmlGpmMetricsGet", P, device=False)
def _gpm_metrics(lib: FakeNvmlLibrary, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    req = GpmMetricsGet.from_address(out)
    if req.version != 1:
        return int(Return.ARGUMENT_VERSION_MISMATCH)
    if req.numMetrics > GPM_METRIC_MAX:
        return int(Return.INVALID_ARGUMENT)
    e1, e2 = lib.gpm_samples.get(req.sample1 or 0), lib.gpm_samples.get(req.sample2 or 0)
    if e1 is None or e2 is None or not (e1[1].taken and e2[1].taken):
        return int(Return.INVALID_ARGUMENT)
    a, b = e1[1], e2[1]
    dt = b.t - a.t
    if dt < GPM_MIN_INTERVAL_S or a.index != b.index or a.gpu_instance != b.gpu_instance:
        return int(Return.INVALID_ARGUMENT)
    for m in req.metrics[: req.numMetrics]:
        mid = int(m.metricId)
        value: float | None = None
        if mid in _GPM_RATIOS:
            name = _GPM_RATIOS[mid]
            if name in a.gpm and name in b.gpm:
                value = 100.0 * (b.gpm[name] - a.gpm[name]) / dt
        elif mid in (20, 21) and a.gpu_instance is None:
            j = 0 if mid == 20 else 1
            value = (b.pcie[j] - a.pcie[j]) / dt / _MIB
        elif mid in (60, 61) and a.gpu_instance is None and lib.world.profile.nvlinks:
            j = 0 if mid == 60 else 1
            value = (b.nvlink[j] - a.nvlink[j]) / dt / _MIB
        if value is None:
            m.nvmlReturn = int(Return.NOT_SUPPORTED)
            continue
        m.nvmlReturn, m.value = OK, max(0.0, value)
    return OK


# --- events (Xid) -----------------------------------------------------------------------
class EventData(Structure):  # nvmlEventData_t
    _fields_ = [("device", c_void_p), ("eventType", c_ulonglong), ("eventData", c_ulonglong),
                ("gpuInstanceId", c_uint), ("computeInstanceId", c_uint)]


STRUCTS["nvmlEventData_t"] = EventData
EVENT_XID = 0x8


@dataclass
class _EventSet:
    # gpu index -> (scenario time of registration, event type mask)
    registered: dict[int, tuple[float, int]] = field(default_factory=dict)
    delivered: set[tuple[float, int, int]] = field(default_factory=set)


@_nvml("nvmlEventSetCreate", P, device=False)
def _event_set_create(lib: FakeNvmlLibrary, out: int) -> int:
    with lib._lock:
        lib._next_set += 1
        handle = lib._next_set
        lib.event_sets[handle] = _EventSet()
    return _put(out, c_void_p, handle)


@_nvml("nvmlEventSetFree", P, device=False)
def _event_set_free(lib: FakeNvmlLibrary, handle: int) -> int:
    with lib._lock:
        if lib.event_sets.pop(handle or 0, None) is None:
            return int(Return.INVALID_ARGUMENT)
    return OK


@_nvml("nvmlDeviceGetSupportedEventTypes", P)
def _event_types(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return _put(out, c_ulonglong, lib.world.profile.event_types)


@_nvml("nvmlDeviceRegisterEvents", c_ulonglong, P)
def _register(lib: FakeNvmlLibrary, st: GpuState, types: int, handle: int) -> int:
    es = lib.event_sets.get(handle or 0)
    if es is None:
        return int(Return.INVALID_ARGUMENT)
    if types & ~lib.world.profile.event_types:
        return int(Return.NOT_SUPPORTED)
    # Events that happened before registration are never delivered.
    es.registered[st.index] = (st.t, types)
    return OK


@_nvml("nvmlEventSetWait_v2", P, P, U, device=False)
def _wait(lib: FakeNvmlLibrary, handle: int, out: int, timeout_ms: int) -> int:
    es = lib.event_sets.get(handle or 0)
    if es is None or not out:
        return int(Return.INVALID_ARGUMENT)
    deadline = time.monotonic() + timeout_ms / 1000.0
    while True:
        now = lib.world.elapsed()
        for ev in lib.world.events:
            at, index, xid = ev
            if at > now:
                break
            reg = es.registered.get(index)
            if reg is None or at <= reg[0] or not reg[1] & EVENT_XID or ev in es.delivered:
                continue
            es.delivered.add(ev)
            data = EventData.from_address(out)
            data.device, data.eventType, data.eventData = lib.handle(index), EVENT_XID, xid
            data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFF
            return OK
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return int(Return.TIMEOUT)
        # Blocks like the real call, waking up to look again.
        time.sleep(min(0.02, remaining))


# --- NVLink ---------------------------------------------------------------------------------
def _link_ok(lib: FakeNvmlLibrary, link: int) -> int:
    if not lib.world.profile.nvlinks:
        return int(Return.NOT_SUPPORTED)
    if link >= lib.world.profile.nvlinks:
        return int(Return.INVALID_ARGUMENT)
    return OK


@_nvml("nvmlDeviceGetNvLinkState", U, P)
def _nvlink_state(lib: FakeNvmlLibrary, st: GpuState, link: int, out: int) -> int:
    return _link_ok(lib, link) or _put(out, c_uint, int(st.nvlink_up[link]))


@_nvml("nvmlDeviceGetNvLinkErrorCounter", U, U, P)
def _nvlink_errors(lib: FakeNvmlLibrary, st: GpuState, link: int, counter: int,
                   out: int) -> int:
    bad = _link_ok(lib, link)
    if bad:
        return bad
    if counter not in st.nvlink_errors[link]:
        return int(Return.NOT_SUPPORTED)
    return _put(out, c_ulonglong, st.nvlink_errors[link][counter])


# --- MIG ------------------------------------------------------------------------------------
@_nvml("nvmlDeviceGetMigMode", P, P)
def _mig_mode(lib: FakeNvmlLibrary, st: GpuState, current: int, pending: int) -> int:
    if not lib.world.profile.mig:
        return int(Return.NOT_SUPPORTED)
    on = int(bool(st.mig))
    return _put(current, c_uint, on) or _put(pending, c_uint, on)


@_nvml("nvmlDeviceGetMaxMigDeviceCount", P)
def _mig_count(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    if not lib.world.profile.mig:
        return int(Return.NOT_SUPPORTED)
    return _put(out, c_uint, 7 if st.mig else 0)


@_nvml("nvmlDeviceGetMigDeviceHandleByIndex", U, P)
def _mig_handle(lib: FakeNvmlLibrary, st: GpuState, slot: int, out: int) -> int:
    if not st.mig:
        return int(Return.INVALID_ARGUMENT)
    if slot >= len(st.mig):
        return int(Return.NOT_FOUND)
    return _put(out, c_void_p, lib.handle(st.index, slot))


@_mig("nvmlDeviceGetUUID")
def _mig_uuid(lib: FakeNvmlLibrary, st: GpuState, mig: MigState, buf: int, length: int) -> int:
    return _put_str(buf, length, mig.uuid)


@_mig("nvmlDeviceGetGpuInstanceId")
def _mig_gi(lib: FakeNvmlLibrary, st: GpuState, mig: MigState, out: int) -> int:
    return _put(out, c_uint, mig.gpu_instance)


@_mig("nvmlDeviceGetComputeInstanceId")
def _mig_ci(lib: FakeNvmlLibrary, st: GpuState, mig: MigState, out: int) -> int:
    return _put(out, c_uint, mig.compute_instance)


@_mig("nvmlDeviceGetMemoryInfo_v2")
def _mig_mem(lib: FakeNvmlLibrary, st: GpuState, mig: MigState, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    m = MemoryV2.from_address(out)
    if m.version != k.MEMORY_V2_VERSION:
        return int(Return.ARGUMENT_VERSION_MISMATCH)
    m.total, m.reserved, m.used = mig.memory_total, 0, mig.memory_used
    m.free = mig.memory_total - mig.memory_used
    return OK


# Registered after the MIG implementations so a MIG handle is accepted by them.
@_nvml("nvmlDeviceGetGpuInstanceId", P)
def _gi_parent(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return int(Return.INVALID_ARGUMENT)  # only MIG device handles have one


@_nvml("nvmlDeviceGetComputeInstanceId", P)
def _ci_parent(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return int(Return.INVALID_ARGUMENT)
