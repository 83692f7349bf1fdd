"""NVML as a whole: init, shutdown, versions, device count and handles."""

from __future__ import annotations

from ctypes import c_int, c_uint, c_void_p

from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.libnvml.table import (
    NODE_FAILURES,
    OK,
    FakeNvmlLibrary,
    P,
    U,
    nvml_function,
    put,
    put_str,
)

# --- system ------------------------------------------------------------------


@nvml_function("nvmlInitWithFlags", U, device=False)
def _init(lib: FakeNvmlLibrary, flags: int) -> int:
    failure = NODE_FAILURES.get(lib.world.nvml_condition())
    if failure is not None:
        return failure
    with lib.lock:
        lib.init_count += 1
    return OK


@nvml_function("nvmlShutdown", device=False)
def _shutdown(lib: FakeNvmlLibrary) -> int:
    with lib.lock:
        if lib.init_count == 0:
            return int(Return.UNINITIALIZED)
        lib.init_count -= 1
    return OK


@nvml_function("nvmlSystemGetDriverVersion", P, U, device=False)
def _driver_version(lib: FakeNvmlLibrary, buf: int, length: int) -> int:
    return put_str(buf, length, lib.world.scenario.node.driver_version)


@nvml_function("nvmlSystemGetNVMLVersion", P, U, device=False)
def _nvml_version(lib: FakeNvmlLibrary, buf: int, length: int) -> int:
    return put_str(buf, length, "13." + lib.world.scenario.node.driver_version)


@nvml_function("nvmlSystemGetCudaDriverVersion", P, device=False)
def _cuda_version(lib: FakeNvmlLibrary, out: int) -> int:
    return put(out, c_int, lib.world.scenario.node.cuda_driver_version)


@nvml_function("nvmlDeviceGetCount_v2", P, device=False)
def _count(lib: FakeNvmlLibrary, out: int) -> int:
    return put(out, c_uint, lib.world.gpu_count)


@nvml_function("nvmlDeviceGetHandleByIndex_v2", U, P, device=False)
def _handle(lib: FakeNvmlLibrary, index: int, out: int) -> int:
    if index >= lib.world.gpu_count:
        return int(Return.INVALID_ARGUMENT)
    if lib.world.state(index).lost:
        return int(Return.GPU_IS_LOST)
    return put(out, c_void_p, lib.handle(index))
