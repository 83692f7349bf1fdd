"""Sub-second samples (nvmlDeviceGetSamples): NVML's ring buffers of utilization,
power and clock samples, read without pynvml's per-member Python hooks."""

from __future__ import annotations

import ctypes
import itertools
import struct
from typing import Any

import pynvml

from gpu_exporter.nvml import constants as c


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


SAMPLE_LAYOUTS = _sample_layouts()


def get_samples(handle: Any, kind: int, last_seen_us: int) -> list[tuple[int, float]]:
    """pynvml.nvmlDeviceGetSamples's two calls (size query, then the samples),
    decoded in one struct pass; raises pynvml.NVMLError as the wrapper does."""
    assert SAMPLE_LAYOUTS is not None
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
    # An unknown value type reads as unsigned long long, as union_value does.
    layout = SAMPLE_LAYOUTS.get(vtype.value) or SAMPLE_LAYOUTS[c.VALUE_TYPE_UNSIGNED_LONG_LONG]
    # The second call may report fewer samples than the first (never more than
    # the buffer holds): only those are answers.
    return [(ts, float(v)) for ts, v in itertools.islice(layout.iter_unpack(buf), count.value)]
