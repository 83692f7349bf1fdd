"""MIG: mode, instances and what a MIG device handle answers."""

from __future__ import annotations

from ctypes import c_uint, c_void_p

from gpu_exporter.nvml import constants as k
from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.libnvml.table import (
    OK,
    FakeNvmlLibrary,
    MemoryV2,
    P,
    U,
    mig_function,
    nvml_function,
    put,
    put_str,
)
from gpu_exporter.simulator.world import GpuState, MigState


# --- MIG ------------------------------------------------------------------------------------
@nvml_function("nvmlDeviceGetMigMode", P, P)
def _mig_mode(lib: FakeNvmlLibrary, st: GpuState, current: int, pending: int) -> int:
    if not lib.world.profile.mig:
        return int(Return.NOT_SUPPORTED)
    on = int(bool(st.mig))
    return put(current, c_uint, on) or put(pending, c_uint, on)


@nvml_function("nvmlDeviceGetMaxMigDeviceCount", P)
def _mig_count(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    if not lib.world.profile.mig:
        return int(Return.NOT_SUPPORTED)
    return put(out, c_uint, 7 if st.mig else 0)


@nvml_function("nvmlDeviceGetMigDeviceHandleByIndex", U, P)
def _mig_handle(lib: FakeNvmlLibrary, st: GpuState, slot: int, out: int) -> int:
    if not st.mig:
        return int(Return.INVALID_ARGUMENT)
    if slot >= len(st.mig):
        return int(Return.NOT_FOUND)
    return put(out, c_void_p, lib.handle(st.index, slot))


@mig_function("nvmlDeviceGetUUID")
def _mig_uuid(lib: FakeNvmlLibrary, st: GpuState, mig: MigState, buf: int, length: int) -> int:
    return put_str(buf, length, mig.uuid)


@mig_function("nvmlDeviceGetGpuInstanceId")
def _mig_gi(lib: FakeNvmlLibrary, st: GpuState, mig: MigState, out: int) -> int:
    return put(out, c_uint, mig.gpu_instance)


@mig_function("nvmlDeviceGetComputeInstanceId")
def _mig_ci(lib: FakeNvmlLibrary, st: GpuState, mig: MigState, out: int) -> int:
    return put(out, c_uint, mig.compute_instance)


@mig_function("nvmlDeviceGetMemoryInfo_v2")
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
@nvml_function("nvmlDeviceGetGpuInstanceId", P)
def _gi_parent(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return int(Return.INVALID_ARGUMENT)  # only MIG device handles have one


@nvml_function("nvmlDeviceGetComputeInstanceId", P)
def _ci_parent(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return int(Return.INVALID_ARGUMENT)
