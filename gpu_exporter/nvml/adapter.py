"""The only module that imports ``pynvml``.

Every method converts NVML's units to base units (bytes, seconds, watts, joules,
hertz, celsius, ratios) and every pynvml exception to :class:`NvmlError`, so the
rest of the exporter never sees the binding.

The library behind pynvml is normally ``libnvidia-ml.so.1``. ``install_library``
lets the simulator put its own C-callable functions in that place; the real path
never calls it.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import pynvml

from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.errors import NvmlError, Return

P = ParamSpec("P")
T = TypeVar("T")



# Sees every call and its result (or NvmlError) when set: `gpu-exporter record`.
# Arguments: C call name, the positional arguments (the Device first for device
# calls), the result or the NvmlError.
Recorder = Callable[[str, tuple[Any, ...], object], None]
_recorder: Recorder | None = None


def set_recorder(recorder: Recorder | None) -> None:
    global _recorder
    _recorder = recorder


def _translate(call: str) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Turn pynvml's exceptions into NvmlError naming the C call."""

    def wrap(fn: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(fn)
        def inner(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                result = fn(*args, **kwargs)
            except pynvml.NVMLError as exc:
                error = NvmlError(exc.value, call)
            except pynvml.NVMLLibraryMismatchError:
                # Not an NVMLError subclass: raised when an old driver lacks a
                # versioned symbol. For us that is "function not found".
                error = NvmlError(Return.FUNCTION_NOT_FOUND, call)
            else:
                if _recorder is not None:
                    _recorder(call, args, result)
                return result
            if _recorder is not None:
                _recorder(call, args, error)
            raise error

        return inner

    return wrap


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


_REAL_CDLL = pynvml.CDLL


def install_library(lib: object | None, loader: Callable[[str], object] | None = None) -> None:
    """Put ``lib`` where pynvml expects the loaded NVML library.

    pynvml resolves each symbol with ``getattr(lib, name)`` on first use and
    caches it, so the cache is cleared too. With ``lib=None`` pynvml loads a
    library again on the next init, through ``loader`` when given (the
    simulator's "library missing" case) or the real ``ctypes.CDLL``.
    """
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml.CDLL = loader or _REAL_CDLL
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0


class Device:
    """One GPU handle. Methods raise NvmlError; values are in base units."""

    def __init__(self, index: int, handle: Any) -> None:
        self.index = index
        self._h = handle

    # --- identity (static) -------------------------------------------------
    @_translate("nvmlDeviceGetName")
    def name(self) -> str:
        return _text(pynvml.nvmlDeviceGetName(self._h))

    @_translate("nvmlDeviceGetUUID")
    def uuid(self) -> str:
        return _text(pynvml.nvmlDeviceGetUUID(self._h))

    @_translate("nvmlDeviceGetSerial")
    def serial(self) -> str:
        return _text(pynvml.nvmlDeviceGetSerial(self._h))

    @_translate("nvmlDeviceGetPciInfo_v3")
    def pci_bus_id(self) -> str:
        info = pynvml.nvmlDeviceGetPciInfo_v3(self._h)
        return _text(info.busId)

    @_translate("nvmlDeviceGetVbiosVersion")
    def vbios_version(self) -> str:
        return _text(pynvml.nvmlDeviceGetVbiosVersion(self._h))

    @_translate("nvmlDeviceGetArchitecture")
    def architecture(self) -> str:
        code = pynvml.nvmlDeviceGetArchitecture(self._h)
        return c.ARCHITECTURES.get(int(code), "unknown")

    @_translate("nvmlDeviceGetCudaComputeCapability")
    def compute_capability(self) -> str:
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(self._h)
        return f"{major}.{minor}"

    # --- utilization and memory -------------------------------------------
    @_translate("nvmlDeviceGetUtilizationRates")
    def utilization(self) -> tuple[float, float]:
        """(GPU busy, memory controller busy) as ratios."""
        u = pynvml.nvmlDeviceGetUtilizationRates(self._h)
        return u.gpu / 100.0, u.memory / 100.0

    @_translate("nvmlDeviceGetMemoryInfo_v2")
    def memory(self) -> tuple[int, int, int]:
        """(total, reserved, used) bytes; v2's ``used`` excludes ``reserved``."""
        m = pynvml.nvmlDeviceGetMemoryInfo(self._h, version=c.MEMORY_V2_VERSION)
        return int(m.total), int(m.reserved), int(m.used)

    @_translate("nvmlDeviceGetMemoryInfo")
    def memory_v1(self) -> tuple[int, int, int]:
        """Fallback for drivers without the v2 call; reserved is unknown (0)."""
        m = pynvml.nvmlDeviceGetMemoryInfo(self._h)
        return int(m.total), 0, int(m.used)

    # --- temperature --------------------------------------------------------
    @_translate("nvmlDeviceGetTemperature")
    def temperature(self) -> float:
        return float(pynvml.nvmlDeviceGetTemperature(self._h, c.TEMPERATURE_GPU))

    @_translate("nvmlDeviceGetTemperatureThreshold")
    def temperature_threshold(self, threshold: int) -> float:
        return float(pynvml.nvmlDeviceGetTemperatureThreshold(self._h, threshold))

    # --- power and energy ---------------------------------------------------
    @_translate("nvmlDeviceGetPowerUsage")
    def power_watts(self) -> float:
        return float(pynvml.nvmlDeviceGetPowerUsage(self._h)) / 1000.0

    @_translate("nvmlDeviceGetEnforcedPowerLimit")
    def power_limit_watts(self) -> float:
        return float(pynvml.nvmlDeviceGetEnforcedPowerLimit(self._h)) / 1000.0

    @_translate("nvmlDeviceGetPowerManagementDefaultLimit")
    def power_default_limit_watts(self) -> float:
        return float(pynvml.nvmlDeviceGetPowerManagementDefaultLimit(self._h)) / 1000.0

    @_translate("nvmlDeviceGetTotalEnergyConsumption")
    def energy_joules(self) -> float:
        return float(pynvml.nvmlDeviceGetTotalEnergyConsumption(self._h)) / 1000.0

    # --- clocks and performance state ---------------------------------------
    @_translate("nvmlDeviceGetClockInfo")
    def clock_hz(self, clock: int) -> float:
        return float(pynvml.nvmlDeviceGetClockInfo(self._h, clock)) * 1e6

    @_translate("nvmlDeviceGetMaxClockInfo")
    def max_clock_hz(self, clock: int) -> float:
        return float(pynvml.nvmlDeviceGetMaxClockInfo(self._h, clock)) * 1e6

    @_translate("nvmlDeviceGetApplicationsClock")
    def application_clock_hz(self, clock: int) -> float:
        return float(pynvml.nvmlDeviceGetApplicationsClock(self._h, clock)) * 1e6

    @_translate("nvmlDeviceGetDefaultApplicationsClock")
    def default_application_clock_hz(self, clock: int) -> float:
        return float(pynvml.nvmlDeviceGetDefaultApplicationsClock(self._h, clock)) * 1e6

    @_translate("nvmlDeviceGetPerformanceState")
    def performance_state(self) -> int:
        return int(pynvml.nvmlDeviceGetPerformanceState(self._h))

    @_translate("nvmlDeviceGetCurrentClocksEventReasons")
    def clock_event_reasons(self) -> int:
        return int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(self._h))

    @_translate("nvmlDeviceGetSupportedClocksEventReasons")
    def supported_clock_event_reasons(self) -> int:
        return int(pynvml.nvmlDeviceGetSupportedClocksEventReasons(self._h))

    # --- fans ---------------------------------------------------------------
    @_translate("nvmlDeviceGetNumFans")
    def fan_count(self) -> int:
        return int(pynvml.nvmlDeviceGetNumFans(self._h))

    @_translate("nvmlDeviceGetFanSpeed_v2")
    def fan_speed_ratio(self, fan: int) -> float:
        # NVML's percent of the fan's intended maximum; it can exceed 100.
        return float(pynvml.nvmlDeviceGetFanSpeed_v2(self._h, fan)) / 100.0

    # --- PCIe ---------------------------------------------------------------
    @_translate("nvmlDeviceGetCurrPcieLinkGeneration")
    def pcie_link_generation(self) -> int:
        return int(pynvml.nvmlDeviceGetCurrPcieLinkGeneration(self._h))

    @_translate("nvmlDeviceGetMaxPcieLinkGeneration")
    def pcie_link_generation_max(self) -> int:
        # The maximum of this GPU *in this system* (the lower of card and slot),
        # so a Gen5 card in a Gen4 slot is not reported as downtrained.
        return int(pynvml.nvmlDeviceGetMaxPcieLinkGeneration(self._h))

    @_translate("nvmlDeviceGetCurrPcieLinkWidth")
    def pcie_link_width(self) -> int:
        return int(pynvml.nvmlDeviceGetCurrPcieLinkWidth(self._h))

    @_translate("nvmlDeviceGetMaxPcieLinkWidth")
    def pcie_link_width_max(self) -> int:
        return int(pynvml.nvmlDeviceGetMaxPcieLinkWidth(self._h))

    @_translate("nvmlDeviceGetPcieReplayCounter")
    def pcie_replays(self) -> int:
        return int(pynvml.nvmlDeviceGetPcieReplayCounter(self._h))

    # --- field values -------------------------------------------------------
    @_translate("nvmlDeviceGetFieldValues")
    def field_values(self, field_ids: Sequence[int]) -> dict[int, float | NvmlError]:
        """Each field's value, or the NvmlError of that field's own return code."""
        if _FIELD_LAYOUT is None:
            raw = pynvml.nvmlDeviceGetFieldValues(self._h, list(field_ids))
            return {int(fv.fieldId): _field_result(fv) for fv in raw}
        request = tuple((int(fid), 0) for fid in field_ids)
        return {fid: value for (fid, _scope), value in _field_answers(self._h, request).items()}

    @_translate("nvmlDeviceGetFieldValues")
    def scoped_field_values(self, fields: Sequence[tuple[int, int]],
                            ) -> dict[tuple[int, int], float | NvmlError]:
        """Like field_values for (field id, scope id) pairs, e.g. per NVLink link.

        Pass the same tuple every poll where possible: the request array is
        prepared once per distinct request, and its pairs are the answer's keys."""
        if _FIELD_LAYOUT is None:
            raw = pynvml.nvmlDeviceGetFieldValues(self._h, list(fields))
            return {(int(fv.fieldId), int(fv.scopeId)): _field_result(fv) for fv in raw}
        return _field_answers(self._h, fields if isinstance(fields, tuple) else tuple(fields))

    # --- sub-second samples ---------------------------------------------------
    @_translate("nvmlDeviceGetSamples")
    def samples(self, kind: int, last_seen_us: int) -> list[tuple[int, float]]:
        """(timestamp in µs, value in NVML's unit) of the driver's samples newer than
        ``last_seen_us``; [] when there are none (NOT_FOUND)."""
        try:
            if _SAMPLE_LAYOUTS is not None:
                return _get_samples(self._h, kind, last_seen_us)
            vtype, raw = pynvml.nvmlDeviceGetSamples(self._h, kind, last_seen_us)
        except pynvml.NVMLError as exc:
            if exc.value == Return.NOT_FOUND:
                return []
            raise
        return [(int(smp.timeStamp), _union_value(int(vtype), smp.sampleValue)) for smp in raw]

    # --- GPM ------------------------------------------------------------------
    @_translate("nvmlGpmQueryDeviceSupport")
    def gpm_supported(self) -> bool:
        return bool(pynvml.nvmlGpmQueryDeviceSupport(self._h).isSupportedDevice)

    @_translate("nvmlGpmSampleGet")
    def gpm_sample(self, sample: GpmSample) -> None:
        pynvml.nvmlGpmSampleGet(self._h, sample.raw)

    @_translate("nvmlGpmMigSampleGet")
    def gpm_mig_sample(self, gpu_instance: int, sample: GpmSample) -> None:
        pynvml.nvmlGpmMigSampleGet(self._h, gpu_instance, sample.raw)

    # --- events ---------------------------------------------------------------
    @_translate("nvmlDeviceGetSupportedEventTypes")
    def supported_event_types(self) -> int:
        return int(pynvml.nvmlDeviceGetSupportedEventTypes(self._h))

    @_translate("nvmlDeviceRegisterEvents")
    def register_events(self, types: int, event_set: EventSet) -> None:
        pynvml.nvmlDeviceRegisterEvents(self._h, types, event_set.raw)

    @property
    def handle_value(self) -> int:
        """The handle's address, to match devices named in event data."""
        return int(ctypes.cast(self._h, ctypes.c_void_p).value or 0)

    # --- MIG ------------------------------------------------------------------
    @_translate("nvmlDeviceGetMigMode")
    def mig_mode(self) -> bool:
        current, _pending = pynvml.nvmlDeviceGetMigMode(self._h)
        return bool(current)

    @_translate("nvmlDeviceGetMaxMigDeviceCount")
    def max_mig_devices(self) -> int:
        return int(pynvml.nvmlDeviceGetMaxMigDeviceCount(self._h))

    @_translate("nvmlDeviceGetMigDeviceHandleByIndex")
    def mig_device(self, slot: int) -> MigDevice:
        return MigDevice(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(self._h, slot))

    # --- ECC, row remapping, persistence ------------------------------------
    @_translate("nvmlDeviceGetEccMode")
    def ecc_mode(self) -> tuple[bool, bool]:
        current, pending = pynvml.nvmlDeviceGetEccMode(self._h)
        return bool(current), bool(pending)

    @_translate("nvmlDeviceGetTotalEccErrors")
    def ecc_errors(self, error_type: int, counter: int) -> int:
        return int(pynvml.nvmlDeviceGetTotalEccErrors(self._h, error_type, counter))

    @_translate("nvmlDeviceGetRemappedRows")
    def remapped_rows(self) -> tuple[int, int, bool, bool]:
        """(correctable, uncorrectable, pending, failed)."""
        corr, unc, pending, failed = pynvml.nvmlDeviceGetRemappedRows(self._h)
        return int(corr), int(unc), bool(pending), bool(failed)

    # --- processes --------------------------------------------------------
    @_translate("nvmlDeviceGetComputeRunningProcesses_v3")
    def compute_processes(self) -> list[ProcessEntry]:
        return _entries(pynvml.nvmlDeviceGetComputeRunningProcesses_v3(self._h), False)

    @_translate("nvmlDeviceGetGraphicsRunningProcesses_v3")
    def graphics_processes(self) -> list[ProcessEntry]:
        return _entries(pynvml.nvmlDeviceGetGraphicsRunningProcesses_v3(self._h), True)

    @_translate("nvmlDeviceGetProcessUtilization")
    def process_samples(self, last_seen_us: int) -> list[ProcessSample]:
        """Per-process samples newer than ``last_seen_us``; [] when there are none
        (NVML's NOT_FOUND, which is normal, not an error)."""
        try:
            raw = pynvml.nvmlDeviceGetProcessUtilization(self._h, last_seen_us)
        except pynvml.NVMLError as exc:
            if exc.value == Return.NOT_FOUND:
                return []
            raise
        return [ProcessSample(int(s.pid), int(s.timeStamp), s.smUtil / 100.0,
                              s.memUtil / 100.0) for s in raw]

    @_translate("nvmlDeviceGetPersistenceMode")
    def persistence_mode(self) -> bool:
        return bool(pynvml.nvmlDeviceGetPersistenceMode(self._h))


class MigDevice:
    """A MIG instance's device handle."""

    def __init__(self, handle: Any) -> None:
        self._h = handle

    @_translate("nvmlDeviceGetUUID")
    def uuid(self) -> str:
        return _text(pynvml.nvmlDeviceGetUUID(self._h))

    @_translate("nvmlDeviceGetGpuInstanceId")
    def gpu_instance(self) -> int:
        return int(pynvml.nvmlDeviceGetGpuInstanceId(self._h))

    @_translate("nvmlDeviceGetComputeInstanceId")
    def compute_instance(self) -> int:
        return int(pynvml.nvmlDeviceGetComputeInstanceId(self._h))

    @_translate("nvmlDeviceGetMemoryInfo_v2")
    def memory(self) -> tuple[int, int]:
        """(total, used) bytes of the instance."""
        m = pynvml.nvmlDeviceGetMemoryInfo(self._h, version=c.MEMORY_V2_VERSION)
        return int(m.total), int(m.used)


class GpmSample:
    """A GPM sample buffer; free it with close()."""

    @_translate("nvmlGpmSampleAlloc")
    def __init__(self) -> None:
        self.raw = pynvml.nvmlGpmSampleAlloc()

    @_translate("nvmlGpmSampleFree")
    def close(self) -> None:
        if self.raw is not None:
            pynvml.nvmlGpmSampleFree(self.raw)
            self.raw = None


@_translate("nvmlGpmMetricsGet")
def gpm_metrics(first: GpmSample, second: GpmSample,
                metric_ids: Sequence[int]) -> dict[int, float | NvmlError]:
    """Each metric's value between two samples, or its own NvmlError."""
    if _GPM_LAYOUT is not None:
        return _get_gpm_metrics(first, second, tuple(metric_ids))
    req = pynvml.c_nvmlGpmMetricsGet_t()
    req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    req.numMetrics = len(metric_ids)
    req.sample1, req.sample2 = first.raw, second.raw
    for i, mid in enumerate(metric_ids):
        req.metrics[i].metricId = mid
    pynvml.nvmlGpmMetricsGet(req)
    out: dict[int, float | NvmlError] = {}
    for i, mid in enumerate(metric_ids):
        m = req.metrics[i]
        out[mid] = (float(m.value) if m.nvmlReturn == Return.SUCCESS
                    else NvmlError(m.nvmlReturn, f"GPM metric {mid}"))
    return out


class EventSet:
    """An NVML event set; wait() blocks up to the timeout."""

    @_translate("nvmlEventSetCreate")
    def __init__(self) -> None:
        self.raw = pynvml.nvmlEventSetCreate()

    @_translate("nvmlEventSetWait_v2")
    def wait(self, timeout_ms: int) -> tuple[int, int, int] | None:
        """(device handle address, event type, event data), or None on timeout."""
        try:
            data = pynvml.nvmlEventSetWait_v2(self.raw, timeout_ms)
        except pynvml.NVMLError as exc:
            if exc.value == Return.TIMEOUT:
                return None
            raise
        device = int(ctypes.cast(data.device, ctypes.c_void_p).value or 0)
        return device, int(data.eventType), int(data.eventData)

    @_translate("nvmlEventSetFree")
    def close(self) -> None:
        if self.raw is not None:
            pynvml.nvmlEventSetFree(self.raw)
            self.raw = None


@dataclass(frozen=True, slots=True)
class ProcessEntry:
    pid: int
    used_bytes: int | None  # None where the driver cannot say (WDDM)
    gpu_instance: int | None  # None when MIG is off
    compute_instance: int | None
    graphics: bool


@dataclass(frozen=True, slots=True)
class ProcessSample:
    pid: int
    timestamp_us: int
    sm_ratio: float
    memory_ratio: float


_NO_MIG = 0xFFFFFFFF


def _entries(raw: Iterable[Any], graphics: bool) -> list[ProcessEntry]:
    out = []
    for p in raw:
        gi, ci = int(p.gpuInstanceId), int(p.computeInstanceId)
        out.append(ProcessEntry(int(p.pid), None if p.usedGpuMemory is None else
                                int(p.usedGpuMemory), None if gi == _NO_MIG else gi,
                                None if ci == _NO_MIG else ci, graphics))
    return out


# --- field values without pynvml's per-member Python hooks ---------------------------
# pynvml's structs route every member read and write through Python-level
# __getattribute__/__setattr__ (_PrintableStructure): ~7 calls per field, which
# made decoding 108 NVLink fields cost more than the C call itself. The fast path
# below calls the same C function through pynvml's own symbol lookup, on an array
# of pynvml's own c_nvmlFieldValue_t, and reads the answers in one struct pass.
# Where this pynvml lacks what it leans on, _FIELD_LAYOUT is None and the
# methods use pynvml.nvmlDeviceGetFieldValues as before.

def _field_value_layout() -> struct.Struct | None:
    """valueType, nvmlReturn and the value's 8 bytes (as an unsigned long long) of
    one c_nvmlFieldValue_t, at pynvml's offsets; None where this pynvml lacks what
    the fast path leans on. fieldId and scopeId are inputs NVML leaves as they
    were, so the answers are keyed by the request's own pairs (no new key tuples)."""
    fv = getattr(pynvml, "c_nvmlFieldValue_t", None)
    if fv is None or not callable(getattr(pynvml, "_nvmlGetFunctionPointer", None)):
        return None
    return _struct_layout(fv, (("fieldId", 4, ""), ("scopeId", 4, ""),
                               ("valueType", 4, "I"), ("nvmlReturn", 4, "I"),
                               ("value", 8, "Q")))


def _struct_layout(ctype: Any, members: tuple[tuple[str, int, str], ...]) -> struct.Struct | None:
    """A struct.Struct reading ``members`` (name, size, struct code; "" to skip)
    of the ctypes type ``ctype`` at ctypes' own offsets; None where a member is
    missing, of another size or out of order (another pynvml's layout)."""
    fmt, pos = "=", 0  # native byte order, no implicit padding: offsets come from ctypes
    for name, size, code in members:
        member = getattr(ctype, name, None)
        if member is None or member.size != size or member.offset < pos:
            return None
        if code:
            if member.offset > pos:
                fmt += f"{member.offset - pos}x"
            fmt += code
            pos = member.offset + size
    total = ctypes.sizeof(ctype)
    if total > pos:
        fmt += f"{total - pos}x"
    layout = struct.Struct(fmt)
    return layout if layout.size == total else None


_FIELD_LAYOUT = _field_value_layout()
_ULL = c.VALUE_TYPE_UNSIGNED_LONG_LONG
_RAW = struct.Struct("=Q")
# The union members other than unsigned long long, read from the value's bytes
# (native sizes and order, as the C union has them).
_MEMBERS = {
    c.VALUE_TYPE_DOUBLE: struct.Struct("@d"),
    c.VALUE_TYPE_UNSIGNED_INT: struct.Struct("@I"),
    c.VALUE_TYPE_UNSIGNED_LONG: struct.Struct("@L"),
    c.VALUE_TYPE_SIGNED_LONG_LONG: struct.Struct("@q"),
    c.VALUE_TYPE_SIGNED_INT: struct.Struct("@i"),
}

# Request (field id, scope id) pairs -> an array holding them, everything else
# zero: copied for each call, so no poll sets fieldId/scopeId member by member
# and no answer of a previous call can be read back as this call's.
_templates: dict[tuple[tuple[int, int], ...], Any] = {}
_TEMPLATES_MAX = 64  # distinct requests are few (field lists, link counts)


def _get_field_values(handle: Any, request: tuple[tuple[int, int], ...]) -> Any:
    """nvmlDeviceGetFieldValues for ``request``: the filled array, as pynvml's
    wrapper would return it; raises pynvml.NVMLError as the wrapper does."""
    template = _templates.get(request)
    if template is None:
        template = (pynvml.c_nvmlFieldValue_t * len(request))()
        for slot, (fid, scope) in zip(template, request, strict=True):
            slot.fieldId, slot.scopeId = fid, scope
        if len(_templates) >= _TEMPLATES_MAX:
            _templates.clear()
        _templates[request] = template
    values = type(template).from_buffer_copy(template)
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
    ret = fn(handle, ctypes.c_int32(len(request)), ctypes.byref(values))
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    return values


def _field_answers(handle: Any, request: tuple[tuple[int, int], ...],
                   ) -> dict[tuple[int, int], float | NvmlError]:
    assert _FIELD_LAYOUT is not None
    out: dict[tuple[int, int], float | NvmlError] = {}
    answers = _FIELD_LAYOUT.iter_unpack(_get_field_values(handle, request))
    for key, (vt, ret, value) in zip(request, answers, strict=True):
        # The common case inline: a poll of an 8-GPU NVLink node decodes ~900
        # fields, nearly all of them unsigned long long counters.
        out[key] = (float(value) if ret == 0 and vt == _ULL
                    else _decoded(key[0], vt, ret, value))
    return out


def _decoded(fid: int, vt: int, ret: int, value: int) -> float | NvmlError:
    """One field's answer from the raw words; the same as _field_result."""
    if ret != Return.SUCCESS:
        return NvmlError(ret, f"field {fid}")
    member = _MEMBERS.get(vt)
    if member is None:  # unsigned long long, or a type this code does not know
        return float(value)
    return float(member.unpack_from(_RAW.pack(value))[0])


# --- sub-second samples, the same way ---------------------------------------------
def _sample_layouts() -> dict[int, struct.Struct] | None:
    """Value type -> (timeStamp, the union member that type names) of one
    c_nvmlSample_t, in native alignment as the C struct has them."""
    st = getattr(pynvml, "c_nvmlSample_t", None)
    if st is None or not callable(getattr(pynvml, "_nvmlGetFunctionPointer", None)):
        return None
    ts, value = getattr(st, "timeStamp", None), getattr(st, "sampleValue", None)
    size = ctypes.sizeof(st)
    if (ts is None or value is None or (ts.offset, ts.size) != (0, 8)
            or (value.offset, value.size) != (8, 8) or size != 16):
        return None
    layouts = {}
    for vt, code in ((c.VALUE_TYPE_DOUBLE, "d"), (c.VALUE_TYPE_UNSIGNED_INT, "I"),
                     (c.VALUE_TYPE_UNSIGNED_LONG, "L"), (c.VALUE_TYPE_UNSIGNED_LONG_LONG, "Q"),
                     (c.VALUE_TYPE_SIGNED_LONG_LONG, "q"), (c.VALUE_TYPE_SIGNED_INT, "i")):
        fmt = "@Q" + code
        fmt += "x" * (size - struct.calcsize(fmt))  # a 4-byte member: the union's tail
        layouts[vt] = struct.Struct(fmt)
    return layouts


_SAMPLE_LAYOUTS = _sample_layouts()


def _get_samples(handle: Any, kind: int, last_seen_us: int) -> list[tuple[int, float]]:
    """pynvml.nvmlDeviceGetSamples's two calls (size query, then the samples),
    decoded in one struct pass; raises pynvml.NVMLError as the wrapper does."""
    assert _SAMPLE_LAYOUTS is not None
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetSamples")
    c_kind, c_since = ctypes.c_uint(kind), ctypes.c_ulonglong(last_seen_us)
    vtype, count = ctypes.c_uint(), ctypes.c_uint(0)
    ret = fn(handle, c_kind, c_since, ctypes.byref(vtype), ctypes.byref(count), None)
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    buf = (pynvml.c_nvmlSample_t * count.value)()
    ret = fn(handle, c_kind, c_since, ctypes.byref(vtype), ctypes.byref(count), buf)
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    # An unknown value type reads as unsigned long long, as _union_value does.
    layout = _SAMPLE_LAYOUTS.get(vtype.value) or _SAMPLE_LAYOUTS[c.VALUE_TYPE_UNSIGNED_LONG_LONG]
    # The second call may report fewer samples than the first (never more than
    # the buffer holds): only those are answers.
    return [(ts, float(v)) for ts, v in itertools.islice(layout.iter_unpack(buf), count.value)]


# --- GPM metrics, the same way ---------------------------------------------------------
def _gpm_layout() -> tuple[int, struct.Struct] | None:
    """(offset of the metrics array, (metricId, nvmlReturn, value) of one
    c_nvmlGpmMetric_t) in pynvml's c_nvmlGpmMetricsGet_t."""
    req, metric = (getattr(pynvml, "c_nvmlGpmMetricsGet_t", None),
                   getattr(pynvml, "c_nvmlGpmMetric_t", None))
    if (req is None or metric is None or getattr(req, "metrics", None) is None
            or not callable(getattr(pynvml, "_nvmlGetFunctionPointer", None))):
        return None
    layout = _struct_layout(metric, (("metricId", 4, "I"), ("nvmlReturn", 4, "I"),
                                     ("value", 8, "d")))
    return None if layout is None else (req.metrics.offset, layout)


_GPM_LAYOUT = _gpm_layout()
# Metric ids -> a request holding version, count and ids (samples unset); copied
# for each call like the field-value templates.
_gpm_templates: dict[tuple[int, ...], Any] = {}


def _get_gpm_metrics(first: GpmSample, second: GpmSample,
                     metric_ids: tuple[int, ...]) -> dict[int, float | NvmlError]:
    assert _GPM_LAYOUT is not None
    offset, layout = _GPM_LAYOUT
    template = _gpm_templates.get(metric_ids)
    if template is None:
        template = pynvml.c_nvmlGpmMetricsGet_t()
        template.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        template.numMetrics = len(metric_ids)
        for i, mid in enumerate(metric_ids):
            template.metrics[i].metricId = mid
        if len(_gpm_templates) >= _TEMPLATES_MAX:
            _gpm_templates.clear()
        _gpm_templates[metric_ids] = template
    req = type(template).from_buffer_copy(template)
    req.sample1, req.sample2 = first.raw, second.raw
    ret = pynvml._nvmlGetFunctionPointer("nvmlGpmMetricsGet")(ctypes.byref(req))
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    out: dict[int, float | NvmlError] = {}
    step = layout.size
    for i, mid in enumerate(metric_ids):
        _mid, code, value = layout.unpack_from(req, offset + i * step)
        out[mid] = (float(value) if code == Return.SUCCESS
                    else NvmlError(code, f"GPM metric {mid}"))
    return out


def _field_result(fv: Any) -> float | NvmlError:
    if fv.nvmlReturn != Return.SUCCESS:
        return NvmlError(fv.nvmlReturn, f"field {fv.fieldId}")
    return _union_value(int(fv.valueType), fv.value)


def _union_value(vt: int, v: Any) -> float:
    """The member of an nvmlValue_t union that ``vt`` (nvmlValueType_t) names."""
    if vt == c.VALUE_TYPE_DOUBLE:
        return float(v.dVal)
    if vt == c.VALUE_TYPE_UNSIGNED_INT:
        return float(v.uiVal)
    if vt == c.VALUE_TYPE_UNSIGNED_LONG:
        return float(v.ulVal)
    if vt == c.VALUE_TYPE_UNSIGNED_LONG_LONG:
        return float(v.ullVal)
    if vt == c.VALUE_TYPE_SIGNED_LONG_LONG:
        return float(v.sllVal)
    if vt == c.VALUE_TYPE_SIGNED_INT:
        return float(v.siVal)
    return float(v.ullVal)


class Nvml:
    """The NVML library as a whole: init, shutdown, system facts, device handles."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.initialized = False

    @_translate("nvmlInitWithFlags")
    def init(self) -> None:
        with self._lock:
            if not self.initialized:
                pynvml.nvmlInit()
                self.initialized = True

    @_translate("nvmlShutdown")
    def shutdown(self) -> None:
        with self._lock:
            if self.initialized:
                self.initialized = False
                pynvml.nvmlShutdown()

    @_translate("nvmlSystemGetDriverVersion")
    def driver_version(self) -> str:
        return _text(pynvml.nvmlSystemGetDriverVersion())

    @_translate("nvmlSystemGetCudaDriverVersion")
    def cuda_driver_version(self) -> str:
        v = int(pynvml.nvmlSystemGetCudaDriverVersion())
        return f"{v // 1000}.{(v % 1000) // 10}"

    @_translate("nvmlDeviceGetCount_v2")
    def device_count(self) -> int:
        return int(pynvml.nvmlDeviceGetCount())

    @_translate("nvmlDeviceGetHandleByIndex_v2")
    def device(self, index: int) -> Device:
        return Device(index, pynvml.nvmlDeviceGetHandleByIndex(index))

    def devices(self) -> Iterable[Device]:
        for i in range(self.device_count()):
            yield self.device(i)


__all__ = ["Device", "EventSet", "GpmSample", "MigDevice", "Nvml", "gpm_metrics",
           "install_library"]

