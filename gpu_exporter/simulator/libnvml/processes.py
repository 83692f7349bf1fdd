"""The processes on a GPU and their utilization samples."""

from __future__ import annotations

from ctypes import c_uint, c_ulonglong

from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.gpu_state import GpuState
from gpu_exporter.simulator.libnvml.table import (
    OK,
    FakeNvmlLibrary,
    NvmlProcessInfo,
    P,
    ProcessUtilizationSample,
    nvml_function,
)


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
        infos = (NvmlProcessInfo * len(procs)).from_address(out)
        for info, p in zip(infos, procs, strict=True):
            info.pid, info.usedGpuMemory = p.pid, p.used_bytes
            info.gpuInstanceId, info.computeInstanceId = p.gpu_instance, p.compute_instance
    return OK


@nvml_function("nvmlDeviceGetComputeRunningProcesses_v3", P, P)
def _compute_procs(lib: FakeNvmlLibrary, st: GpuState, count: int, out: int) -> int:
    return _process_list(st, False, count, out)


@nvml_function("nvmlDeviceGetGraphicsRunningProcesses_v3", P, P)
def _graphics_procs(lib: FakeNvmlLibrary, st: GpuState, count: int, out: int) -> int:
    return _process_list(st, True, count, out)


# The lists under the names drivers before R535 export; the struct is the same
# (nvmlProcessInfo_v2_t: pid, usedGpuMemory, gpuInstanceId, computeInstanceId).
@nvml_function("nvmlDeviceGetComputeRunningProcesses_v2", P, P)
def _compute_procs_v2(lib: FakeNvmlLibrary, st: GpuState, count: int, out: int) -> int:
    return _process_list(st, False, count, out)


@nvml_function("nvmlDeviceGetGraphicsRunningProcesses_v2", P, P)
def _graphics_procs_v2(lib: FakeNvmlLibrary, st: GpuState, count: int, out: int) -> int:
    return _process_list(st, True, count, out)


# NVML keeps per-process samples from the driver's sampling; the simulator
# produces one per second of scenario time for each process that has a value.
_SAMPLE_PERIOD_S = 1.0


@nvml_function("nvmlDeviceGetProcessUtilization", P, P, c_ulonglong)
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
