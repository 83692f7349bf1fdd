"""Sub-second samples (nvmlDeviceGetSamples)."""

from __future__ import annotations

from ctypes import Structure, c_int, c_uint, c_ulonglong

from gpu_exporter.nvml import constants as k
from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.gpu_state import POWER_SAMPLES, UTILIZATION_SAMPLES, GpuState
from gpu_exporter.simulator.libnvml.table import (
    OK,
    STRUCTS,
    FakeNvmlLibrary,
    P,
    U,
    Value,
    nvml_function,
)

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


class NvmlSample(Structure):  # nvmlSample_t
    _fields_ = [("timeStamp", c_ulonglong), ("sampleValue", Value)]


STRUCTS["nvmlSample_t"] = NvmlSample


@nvml_function("nvmlDeviceGetSamples", U, c_ulonglong, P, P, P)
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
    buf = (NvmlSample * n).from_address(out)
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
