"""NVLink per-link state and error counters, and a Grace board's C2C mode."""

from __future__ import annotations

from ctypes import c_uint, c_ulonglong

from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.gpu_state import GpuState
from gpu_exporter.simulator.libnvml.table import OK, FakeNvmlLibrary, P, U, nvml_function, put


# --- NVLink ---------------------------------------------------------------------------------
def _link_ok(lib: FakeNvmlLibrary, link: int) -> int:
    if not lib.world.profile.nvlinks:
        return int(Return.NOT_SUPPORTED)
    if link >= lib.world.profile.nvlinks:
        return int(Return.INVALID_ARGUMENT)
    return OK


@nvml_function("nvmlDeviceGetNvLinkState", U, P)
def _nvlink_state(lib: FakeNvmlLibrary, st: GpuState, link: int, out: int) -> int:
    return _link_ok(lib, link) or put(out, c_uint, int(st.nvlink_up[link]))


@nvml_function("nvmlDeviceGetNvLinkErrorCounter", U, U, P)
def _nvlink_errors(lib: FakeNvmlLibrary, st: GpuState, link: int, counter: int,
                   out: int) -> int:
    bad = _link_ok(lib, link)
    if bad:
        return bad
    if counter not in st.nvlink_errors[link]:
        return int(Return.NOT_SUPPORTED)
    return put(out, c_ulonglong, st.nvlink_errors[link][counter])


# --- C2C --------------------------------------------------------------------------------
@nvml_function("nvmlDeviceGetC2cModeInfoV", P)
def _c2c_mode(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    # nvmlC2cModeInfo_v1_t is one unsigned int, isC2cEnabled.
    if not lib.world.profile.c2c:
        return int(Return.NOT_SUPPORTED)
    return put(out, c_uint, 1)
