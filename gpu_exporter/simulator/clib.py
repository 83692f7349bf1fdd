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
from typing import Any

from gpu_exporter.nvml import constants as k
from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.world import GpuState, World

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
# Functions that answer before nvmlInit.
_NO_INIT = {"nvmlInitWithFlags", "nvmlInit_v2", "nvmlErrorString"}


def _nvml(name: str, *argtypes: Any, device: bool = True) -> Callable[[Impl], Impl]:
    def register(fn: Impl) -> Impl:
        FUNCTIONS[name] = (argtypes, fn, device)
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
        self.calls: Counter[str] = Counter()
        # Symbols pynvml asked for that this library does not have.
        self.missing: set[str] = set()
        self._init_count = 0
        self._lock = threading.Lock()
        self._keep: list[Any] = []
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
        if delay:
            time.sleep(delay / 1e6)
        if name not in _NO_INIT and self._init_count == 0:
            return int(Return.UNINITIALIZED)
        if not device:
            return impl(self, *args)
        index = self._index(args[0])
        if index is None:
            return int(Return.INVALID_ARGUMENT)
        st = self.world.state(index)
        if st.lost:
            return int(Return.GPU_IS_LOST)
        if name in st.errors:
            return st.errors[name]
        if name in self.world.profile.unsupported_calls:
            return int(Return.NOT_SUPPORTED)
        return impl(self, st, *args[1:])

    # Handles are opaque pointers; ours encode the index.
    _HANDLE_BASE = 0x6E766D6C0000

    def handle(self, index: int) -> int:
        return self._HANDLE_BASE + 0x100 * (index + 1)

    def _index(self, handle: int | None) -> int | None:
        if not handle:
            return None
        offset = handle - self._HANDLE_BASE
        index = offset // 0x100 - 1
        if offset % 0x100 or not 0 <= index < self.world.gpu_count:
            return None
        return index


# --- system ------------------------------------------------------------------
@_nvml("nvmlInitWithFlags", U, device=False)
def _init(lib: FakeNvmlLibrary, flags: int) -> int:
    mode = lib.world.scenario.node.nvml
    if mode == "driver_not_loaded":
        return int(Return.DRIVER_NOT_LOADED)
    if mode == "no_permission":
        return int(Return.NO_PERMISSION)
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
