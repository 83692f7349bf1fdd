"""MIG: mode, instances, GPU instances and their profiles, and what a MIG
device handle answers."""

from __future__ import annotations

from ctypes import Structure, c_char, c_uint, c_ulonglong, c_void_p

from gpu_exporter.nvml import constants as k
from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.drivers import (
    GPU_INSTANCE_PROFILE_INFO_VERSION_SINCE,
    gpu_instance_profiles_known,
)
from gpu_exporter.simulator.gpu_state import GpuState, MigState
from gpu_exporter.simulator.libnvml.table import (
    OK,
    STRUCTS,
    FakeNvmlLibrary,
    Memory,
    MemoryV2,
    P,
    U,
    mig_function,
    nvml_function,
    put,
    put_str,
)
from gpu_exporter.simulator.model import MigProfile

NAME_V2_BUFFER_SIZE = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE

# nvmlGpuInstanceProfileInfo_t's members after the version word, in order; v3
# drops isP2pSupported and adds capabilities after the name.
_COUNTS = [("sliceCount", c_uint), ("instanceCount", c_uint),
           ("multiprocessorCount", c_uint), ("copyEngineCount", c_uint),
           ("decoderCount", c_uint), ("encoderCount", c_uint), ("jpegCount", c_uint),
           ("ofaCount", c_uint), ("memorySizeMB", c_ulonglong)]


class GpuInstanceProfileInfo(Structure):  # nvmlGpuInstanceProfileInfo_t (no name)
    _fields_ = [("id", c_uint), ("isP2pSupported", c_uint), *_COUNTS]


class GpuInstanceProfileInfoV2(Structure):  # nvmlGpuInstanceProfileInfo_v2_t
    _fields_ = [("version", c_uint), ("id", c_uint), ("isP2pSupported", c_uint), *_COUNTS,
                ("name", c_char * NAME_V2_BUFFER_SIZE)]


class GpuInstanceProfileInfoV3(Structure):  # nvmlGpuInstanceProfileInfo_v3_t
    _fields_ = [("version", c_uint), ("id", c_uint), *_COUNTS,
                ("name", c_char * NAME_V2_BUFFER_SIZE), ("capabilities", c_uint)]


class GpuInstancePlacement(Structure):  # nvmlGpuInstancePlacement_t
    _fields_ = [("start", c_uint), ("size", c_uint)]


class GpuInstanceInfo(Structure):  # nvmlGpuInstanceInfo_t
    _fields_ = [("device", c_void_p), ("id", c_uint), ("profileId", c_uint),
                ("placement", GpuInstancePlacement)]


STRUCTS["nvmlGpuInstanceProfileInfo_t"] = GpuInstanceProfileInfo
STRUCTS["nvmlGpuInstanceProfileInfo_v2_t"] = GpuInstanceProfileInfoV2
STRUCTS["nvmlGpuInstanceProfileInfo_v3_t"] = GpuInstanceProfileInfoV3
STRUCTS["nvmlGpuInstanceInfo_t"] = GpuInstanceInfo

_PROFILE_INFO_VERSIONS = {k.GPU_INSTANCE_PROFILE_INFO_V2_VERSION: 2,
                          k.GPU_INSTANCE_PROFILE_INFO_V3_VERSION: 3}
# nvmlGpuInstance_t handles are opaque pointers too; ours encode the GPU index
# and the GPU instance ID.
_GPU_INSTANCE_BASE = 0x6769000000


def gpu_instance_handle(index: int, gpu_instance: int) -> int:
    return _GPU_INSTANCE_BASE + 0x10000 * (index + 1) + gpu_instance


def _profile_by_id(lib: FakeNvmlLibrary, profile_id: int) -> MigProfile | None:
    return next((m for m in lib.world.profile.mig_profiles if m.id == profile_id), None)


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


@mig_function("nvmlDeviceGetMemoryInfo")
def _mig_mem_v1(lib: FakeNvmlLibrary, st: GpuState, mig: MigState, out: int) -> int:
    # What drivers before R510 (no _v2) answer; a MIG instance reserves nothing.
    if not out:
        return int(Return.INVALID_ARGUMENT)
    m = Memory.from_address(out)
    m.total, m.used, m.free = mig.memory_total, mig.memory_used, mig.memory_total - mig.memory_used
    return OK


# Registered after the MIG implementations so a MIG handle is accepted by them.
@nvml_function("nvmlDeviceGetGpuInstanceId", P)
def _gi_parent(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return int(Return.INVALID_ARGUMENT)  # only MIG device handles have one


@nvml_function("nvmlDeviceGetComputeInstanceId", P)
def _ci_parent(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return int(Return.INVALID_ARGUMENT)


@mig_function("nvmlDeviceGetName")
def _mig_name(lib: FakeNvmlLibrary, st: GpuState, mig: MigState, buf: int, length: int) -> int:
    # "<board> MIG <profile>" (nvidia-smi -L: "MIG 1g.10gb Device 0"); the board's
    # name alone for a profile its table lacks.
    profile = _profile_by_id(lib, mig.profile_id)
    board = lib.world.profile.name
    return put_str(buf, length, f"{board} {profile.name}" if profile else board)


# --- GPU instances and their profiles ---------------------------------------------------------
def _profile_query(lib: FakeNvmlLibrary, st: GpuState, profile: int) -> MigProfile | int:
    """The board's profile asked for by its NVML_GPU_INSTANCE_PROFILE_* value, or
    the code a driver answers: NOT_SUPPORTED on a board without MIG, with MIG off
    before R550 (which lifted that) or for a profile the board lacks;
    INVALID_ARGUMENT past the values the branch knows."""
    if not lib.world.profile.mig or (not st.mig and lib.branch.number < 550):
        return int(Return.NOT_SUPPORTED)
    if profile >= gpu_instance_profiles_known(lib.branch):
        return int(Return.INVALID_ARGUMENT)
    found = next((m for m in lib.world.profile.mig_profiles if m.profile == profile), None)
    return int(Return.NOT_SUPPORTED) if found is None else found


def _fill(info: Structure, m: MigProfile) -> None:
    info.id, info.sliceCount, info.instanceCount = m.id, m.slices, m.instances
    info.multiprocessorCount, info.copyEngineCount = m.multiprocessors, m.copy_engines
    info.decoderCount, info.encoderCount = m.decoders, m.encoders
    info.jpegCount, info.ofaCount, info.memorySizeMB = m.jpegs, m.ofas, m.memory_mib


@nvml_function("nvmlDeviceGetGpuInstanceProfileInfo", U, P)
def _profile_info(lib: FakeNvmlLibrary, st: GpuState, profile: int, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    found = _profile_query(lib, st, profile)
    if isinstance(found, int):
        return found
    _fill(GpuInstanceProfileInfo.from_address(out), found)
    return OK


@nvml_function("nvmlDeviceGetGpuInstanceProfileInfoV", U, P)
def _profile_info_v(lib: FakeNvmlLibrary, st: GpuState, profile: int, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    version = _PROFILE_INFO_VERSIONS.get(int(c_uint.from_address(out).value))
    if version is None or GPU_INSTANCE_PROFILE_INFO_VERSION_SINCE[version] > lib.branch.number:
        return int(Return.ARGUMENT_VERSION_MISMATCH)
    found = _profile_query(lib, st, profile)
    if isinstance(found, int):
        return found
    info = (GpuInstanceProfileInfoV3 if version == 3 else GpuInstanceProfileInfoV2
            ).from_address(out)
    _fill(info, found)
    info.name = found.name.encode()[:NAME_V2_BUFFER_SIZE - 1]
    return OK


@nvml_function("nvmlDeviceGetGpuInstanceById", U, P)
def _gpu_instance_by_id(lib: FakeNvmlLibrary, st: GpuState, gpu_instance: int,
                        out: int) -> int:
    if not lib.world.profile.mig or not st.mig:
        return int(Return.NOT_SUPPORTED)
    if not any(m.gpu_instance == gpu_instance for m in st.mig):
        return int(Return.NOT_FOUND)
    return put(out, c_void_p, gpu_instance_handle(st.index, gpu_instance))


@nvml_function("nvmlGpuInstanceGetInfo", P, P, device=False)
def _gpu_instance_info(lib: FakeNvmlLibrary, handle: int | None, out: int | None) -> int:
    offset = (handle or 0) - _GPU_INSTANCE_BASE
    index, gpu_instance = offset // 0x10000 - 1, offset % 0x10000
    if not out or not 0 <= index < lib.world.gpu_count:
        return int(Return.INVALID_ARGUMENT)
    st = lib.world.state(index)
    if st.lost:
        return int(Return.GPU_IS_LOST)
    if "nvmlGpuInstanceGetInfo" in st.errors:
        return st.errors["nvmlGpuInstanceGetInfo"]
    mig = next((m for m in st.mig if m.gpu_instance == gpu_instance), None)
    if mig is None:  # destroyed since its handle was taken
        return int(Return.INVALID_ARGUMENT)
    info = GpuInstanceInfo.from_address(out)
    info.device, info.id, info.profileId = lib.handle(index), mig.gpu_instance, mig.profile_id
    info.placement.start, info.placement.size = mig.placement
    return OK

