"""MIG: a MIG instance's own device handle, and the GPU instance profiles of
its parent (the ``1g.10gb`` people search for)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pynvml

from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.binding import text, translate
from gpu_exporter.nvml.errors import Return

# A GPU instance profile as NVML writes it: "MIG 1g.10gb" in the profile info's
# name, "<board> MIG 1g.10gb" as a MIG device's name, "<board> MIG 1c.3g.40gb"
# where the compute instance is smaller than its GPU instance. Suffixes name the
# media engines or graphics (+me, -me, +gfx).
_PROFILE = re.compile(r"(?:^|\bMIG )(?:\d+c\.)?(\d+g\.\d+gb(?:[+-][a-z]+)*)$")


def profile_name(name: str) -> str:
    """The GPU instance profile in an NVML name (``1g.10gb``); "" where there is none."""
    found = _PROFILE.search(name.strip())
    return found.group(1) if found else ""


class MigDevice:
    """A MIG instance's device handle."""

    def __init__(self, handle: Any) -> None:
        self._h = handle

    @translate("nvmlDeviceGetUUID")
    def uuid(self) -> str:
        return text(pynvml.nvmlDeviceGetUUID(self._h))

    @translate("nvmlDeviceGetName")
    def name(self) -> str:
        """The MIG device's name: the board's, then its profile ("... MIG 1g.10gb")."""
        return text(pynvml.nvmlDeviceGetName(self._h))

    @translate("nvmlDeviceGetGpuInstanceId")
    def gpu_instance(self) -> int:
        return int(pynvml.nvmlDeviceGetGpuInstanceId(self._h))

    @translate("nvmlDeviceGetComputeInstanceId")
    def compute_instance(self) -> int:
        return int(pynvml.nvmlDeviceGetComputeInstanceId(self._h))

    @translate("nvmlDeviceGetMemoryInfo_v2")
    def memory(self) -> tuple[int, int]:
        """(total, used) bytes of the instance."""
        m = pynvml.nvmlDeviceGetMemoryInfo(self._h, version=c.MEMORY_V2_VERSION)
        return int(m.total), int(m.used)

    @translate("nvmlDeviceGetMemoryInfo")
    def memory_v1(self) -> tuple[int, int]:
        """(total, used) bytes through the call drivers before R510 have."""
        m = pynvml.nvmlDeviceGetMemoryInfo(self._h)
        return int(m.total), int(m.used)


@translate("nvmlDeviceGetGpuInstanceById")
def gpu_instance(parent: Any, gpu_instance_id: int) -> Any:
    """The GPU instance's handle (NVML asks for a privileged user)."""
    return pynvml.nvmlDeviceGetGpuInstanceById(parent, gpu_instance_id)


@translate("nvmlGpuInstanceGetInfo")
def gpu_instance_profile_id(instance: Any) -> int:
    """The profile ID the GPU instance was created with."""
    return int(pynvml.nvmlGpuInstanceGetInfo(instance).profileId)


@dataclass(frozen=True, slots=True)
class GpuInstanceProfile:
    """One GPU instance profile as nvmlDeviceGetGpuInstanceProfileInfoV answers it."""

    profile: int  # the NVML_GPU_INSTANCE_PROFILE_* value it was asked by
    id: int  # the profile ID its GPU instances carry
    name: str  # as NVML writes it: "MIG 1g.10gb"
    slices: int
    instances: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int
    memory_mib: int

    @property
    def short_name(self) -> str:
        """The name people search for: "1g.10gb"."""
        return profile_name(self.name)


def gpu_instance_profiles(parent: Any) -> tuple[GpuInstanceProfile, ...]:
    """Every GPU instance profile the GPU has, through nvmlDeviceGetGpuInstanceProfileInfoV.

    The v2 struct (R510 and newer; every later branch accepts it) is the first
    with the name. Asked by NVML_GPU_INSTANCE_PROFILE_* value: the board lacks
    the ones answered NOT_SUPPORTED, the driver knows none past the first
    answered INVALID_ARGUMENT. By ID (nvmlDeviceGetGpuInstanceProfileInfoByIdV)
    only R580 can answer; this runs once per GPU. NOT_SUPPORTED for every value:
    raised, the GPU has no profile to tell.
    """
    found: list[GpuInstanceProfile] = []
    absent: pynvml.NVMLError | None = None
    for profile in range(c.GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(parent, profile, version=2)
        except pynvml.NVMLError as exc:
            if exc.value == Return.NOT_SUPPORTED:
                absent = exc
                continue
            if exc.value == Return.INVALID_ARGUMENT:
                break
            raise
        found.append(GpuInstanceProfile(
            profile, int(info.id), text(info.name), int(info.sliceCount),
            int(info.instanceCount), int(info.multiprocessorCount), int(info.copyEngineCount),
            int(info.decoderCount), int(info.encoderCount), int(info.jpegCount),
            int(info.ofaCount), int(info.memorySizeMB)))
    if not found and absent is not None:
        raise absent
    return tuple(found)
