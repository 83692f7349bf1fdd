"""The simulated library's frame: the structs of ``nvml.h`` shared by several
areas, the table each area registers its C functions in, and the library object
pynvml loads, which answers every call from that table."""

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

from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.drivers import exports
from gpu_exporter.simulator.gpu_state import GpuState
from gpu_exporter.simulator.world import World

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


class NvmlProcessInfo(Structure):  # nvmlProcessInfo_t (= nvmlProcessInfo_v2_t)
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong), ("gpuInstanceId", c_uint),
                ("computeInstanceId", c_uint)]


class ProcessUtilizationSample(Structure):  # nvmlProcessUtilizationSample_t
    _fields_ = [("pid", c_uint), ("timeStamp", c_ulonglong), ("smUtil", c_uint),
                ("memUtil", c_uint), ("encUtil", c_uint), ("decUtil", c_uint)]


STRUCTS: dict[str, type[Structure]] = {
    "nvmlPciInfo_t": PciInfo, "nvmlMemory_t": Memory, "nvmlMemory_v2_t": MemoryV2,
    "nvmlUtilization_t": Utilization, "nvmlFieldValue_t": FieldValue,
    "nvmlProcessInfo_t": NvmlProcessInfo,
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
NO_INIT = {"nvmlInitWithFlags", "nvmlInit_v2", "nvmlErrorString"}


def nvml_function(name: str, *argtypes: Any, device: bool = True) -> Callable[[Impl], Impl]:
    def register(fn: Impl) -> Impl:
        FUNCTIONS[name] = (argtypes, fn, device)
        return fn

    return register


def mig_function(name: str) -> Callable[[Impl], Impl]:
    def register(fn: Impl) -> Impl:
        MIG_FUNCTIONS[name] = fn
        return fn

    return register


def put(ptr: int | None, ctype: Any, value: Any) -> int:
    if not ptr:
        return int(Return.INVALID_ARGUMENT)
    ctype.from_address(ptr).value = value
    return OK


def put_str(ptr: int | None, length: int, text: str) -> int:
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
        # Every call, by C function; and each device call by (function, GPU
        # index; -1 for a handle no GPU has): the NVML call budget of a poll,
        # per GPU (tests/nvml/test_call_budget.py).
        self.calls: Counter[str] = Counter()
        self.calls_per_gpu: Counter[tuple[str, int]] = Counter()
        # Symbols pynvml asked for that this library does not have.
        self.missing: set[str] = set()
        self.init_count = 0
        # Taken by the calls that change the library itself (init, event sets).
        self.lock = threading.Lock()
        self.gpm_samples: dict[int, tuple[Any, GpmSampleData]] = {}
        self.event_sets: dict[int, EventSetData] = {}
        self.next_event_set = 0x5E7000
        self._keep: list[Any] = []
        # Fault injection for property tests (both None otherwise). inject_error
        # sees every call (function name, GPU index or None for system calls)
        # and returns an NVML error code to answer instead, or None. inject_state
        # sees the GPU state a device call is about to answer from and returns
        # the state to use (a bad value is a tampered copy).
        self.inject_error: Callable[[str, int | None], int | None] | None = None
        self.inject_state: Callable[[str, GpuState], GpuState] | None = None
        # And one field of nvmlDeviceGetFieldValues (GPU index, field id,
        # scope id: the link of a per-link field): an error code for that
        # field alone, or None.
        self.inject_field_error: Callable[[int, int, int], int | None] | None = None
        # The driver branch decides which symbols the library exports at all.
        self.branch = world.scenario.node.branch
        for name, (argtypes, impl, device) in FUNCTIONS.items():
            if not exports(self.branch, name):
                continue
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
        if device:
            where = self._index(args[0]) if args else None
            self.calls_per_gpu[name, where[0] if where is not None else -1] += 1
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
        if name not in NO_INIT and self.init_count == 0:
            return int(Return.UNINITIALIZED)
        if self.world.nvml_changes and name not in NO_INIT and name != "nvmlShutdown":
            # NVML as a whole failing under an initialised library (driver
            # upgraded or unloaded underneath the process).
            failure = NODE_FAILURES.get(self.world.nvml_condition())
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


# What NVML returns while the node's NVML condition is not "ok".
NODE_FAILURES = {"driver_not_loaded": int(Return.DRIVER_NOT_LOADED),
                  "no_permission": int(Return.NO_PERMISSION),
                  "lib_rm_version_mismatch": int(Return.LIB_RM_VERSION_MISMATCH)}


@dataclass
class GpmSampleData:
    taken: bool = False
    t: float = 0.0
    index: int = 0
    gpu_instance: int | None = None
    gpm: dict[str, float] = field(default_factory=dict)
    pcie: tuple[int, int] = (0, 0)
    nvlink: tuple[int, int] = (0, 0)


@dataclass
class EventSetData:
    # gpu index -> (scenario time of registration, event type mask)
    registered: dict[int, tuple[float, int]] = field(default_factory=dict)
    delivered: set[tuple[float, int, int]] = field(default_factory=set)
