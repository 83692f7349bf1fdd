"""GPM: sample buffers and the metrics between two samples."""

from __future__ import annotations

import ctypes
from ctypes import Structure, c_double, c_int, c_uint, c_void_p

from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.gpu_state import GpuState
from gpu_exporter.simulator.libnvml.table import (
    OK,
    STRUCTS,
    FakeNvmlLibrary,
    GpmSampleData,
    P,
    U,
    nvml_function,
    put,
)


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


@nvml_function("nvmlGpmQueryDeviceSupport", P)
def _gpm_support(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    sup = GpmSupport.from_address(out)
    if sup.version != 1:
        return int(Return.ARGUMENT_VERSION_MISMATCH)
    sup.isSupportedDevice = int(lib.world.profile.gpm)
    return OK


@nvml_function("nvmlGpmSampleAlloc", P, device=False)
def _gpm_alloc(lib: FakeNvmlLibrary, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    buf = ctypes.create_string_buffer(64)  # opaque to the caller
    addr = ctypes.addressof(buf)
    lib.gpm_samples[addr] = (buf, GpmSampleData())
    return put(out, c_void_p, addr)


@nvml_function("nvmlGpmSampleFree", P, device=False)
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
        data.gpm = dict(mig[0].gpm) or {"sm_active": mig[0].sm_active_s}
    data.pcie = st.gpm_pcie
    data.nvlink = (sum(st.nvlink_rx_kib) * 1024, sum(st.nvlink_tx_kib) * 1024)
    return OK


@nvml_function("nvmlGpmSampleGet", P)
def _gpm_get(lib: FakeNvmlLibrary, st: GpuState, sample: int) -> int:
    return _take(lib, st, sample, None)


@nvml_function("nvmlGpmMigSampleGet", U, P)
def _gpm_mig_get(lib: FakeNvmlLibrary, st: GpuState, gi: int, sample: int) -> int:
    return _take(lib, st, sample, gi)


# GPM needs its two samples this far apart to compute rates.
GPM_MIN_INTERVAL_S = 0.1


@nvml_function("nvmlGpmMetricsGet", P, device=False)
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
