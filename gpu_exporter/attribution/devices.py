"""The device IDs the NVIDIA device plugin hands the kubelet, and which GPU or
MIG device each one names.

The plugin's ``--device-id-strategy`` picks the form: ``uuid`` (the default)
gives ``GPU-<uuid>`` for a whole GPU and ``MIG-<uuid>`` for a MIG device;
``index`` gives ``<gpu index>`` and ``<gpu index>:<mig index>``. With GPU
sharing (time-slicing, MPS) each GPU is advertised once per replica, as
``<id>::<replica>``: the replicas are the same device, so the suffix is
dropped and a device can have several owners.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

# All patterns are ASCII-only (\d would take any script's digits) and end at
# \Z ($ would let a trailing newline through into a label).

# The resources of the NVIDIA device plugin: whole GPUs ("nvidia.com/gpu",
# "nvidia.com/gpu.shared" when sharing renames it) and MIG devices under the
# "mixed" strategy ("nvidia.com/mig-1g.10gb"). Under the "single" MIG strategy
# MIG devices are advertised as "nvidia.com/gpu", with MIG- IDs.
_GPU_RESOURCE = re.compile(r"^nvidia\.com/(?:gpu(?:\.[a-z0-9-]+)?|mig-[a-z0-9.+-]+)\Z")

# RFC 4122 text form. The plugin takes the UUIDs from NVML, so they are kept
# exactly as written: they are compared with NVML's own.
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_GPU_UUID = re.compile(rf"^GPU-{_UUID}\Z", re.ASCII)
# MIG UUIDs since driver R470; older drivers wrote MIG-GPU-<uuid>/<gi>/<ci>.
_MIG_UUID = re.compile(rf"^MIG-(?:{_UUID}|GPU-{_UUID}/\d{{1,3}}/\d{{1,3}})\Z", re.ASCII)
_INDEX = re.compile(r"^(\d{1,4})(?::(\d{1,4}))?\Z", re.ASCII)
_REPLICA = re.compile(r"::\d{1,6}\Z", re.ASCII)
# Far longer than any form above: anything past it is not a device ID.
_MAX_ID = 128


class DeviceKind(StrEnum):
    GPU_UUID = "gpu_uuid"
    MIG_UUID = "mig_uuid"
    GPU_INDEX = "gpu_index"
    MIG_INDEX = "mig_index"
    # Devices of NVIDIA's DRA driver, named by the GPU's device minor number.
    DRA_GPU = "dra_gpu"
    DRA_MIG = "dra_mig"


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """One device as the plugin named it. ``uuid`` is set for the UUID forms
    (as NVML writes it: ``GPU-...``, ``MIG-...``); ``gpu``/``mig`` for the
    index forms."""

    kind: DeviceKind
    device_id: str  # the plugin's ID, replica suffix removed
    uuid: str | None = None
    gpu: int | None = None
    mig: int | None = None
    # DRA devices: the GPU's device minor (/dev/nvidia<minor>), and for a MIG
    # device its profile as the driver names it ("1g10gb") or its profile ID,
    # and where it starts among the GPU's memory slices.
    minor: int | None = None
    mig_profile: str | None = None
    mig_profile_id: int | None = None
    mig_start: int | None = None


def is_gpu_resource(resource_name: str) -> bool:
    return _GPU_RESOURCE.match(resource_name) is not None


def parse_device_id(raw: str) -> DeviceRef | None:
    """The device ``raw`` names, or None for a form not known (another
    vendor's plugin, a future form): such IDs are skipped, never guessed."""
    if len(raw) > _MAX_ID:
        return None
    device_id = _REPLICA.sub("", raw)
    if _GPU_UUID.match(device_id):
        return DeviceRef(DeviceKind.GPU_UUID, device_id, uuid=device_id)
    if _MIG_UUID.match(device_id):
        return DeviceRef(DeviceKind.MIG_UUID, device_id, uuid=device_id)
    if m := _INDEX.match(device_id):
        if m.group(2) is None:
            return DeviceRef(DeviceKind.GPU_INDEX, device_id, gpu=int(m.group(1)))
        return DeviceRef(DeviceKind.MIG_INDEX, device_id, gpu=int(m.group(1)),
                         mig=int(m.group(2)))
    return None


# NVIDIA's DRA driver (k8s-dra-driver-gpu, driver "gpu.nvidia.com") names a
# whole GPU "gpu-<minor>" and a MIG device after its parent's minor and its
# place: "gpu-<minor>-mig-<profile id>-<start>-<size>" up to v25.8, and
# "gpu-<minor>-mig-<profile>-<profile id>-<start>" since v25.12 (the profile
# "1g.10gb" written "1g10gb"). Before v25.3.2 the number was the GPU's NVML
# index rather than its minor; those releases are not read (never guessed).
DRA_DRIVER = "gpu.nvidia.com"
_DRA_GPU = re.compile(r"^gpu-(\d{1,4})\Z", re.ASCII)
_DRA_MIG_OLD = re.compile(r"^gpu-(\d{1,4})-mig-(\d{1,3})-(\d{1,2})-(\d{1,2})\Z", re.ASCII)
_DRA_MIG = re.compile(r"^gpu-(\d{1,4})-mig-([a-z0-9][a-z0-9-]{0,29})-(\d{1,3})-(\d{1,2})\Z",
                      re.ASCII)


def is_gpu_driver(driver_name: str) -> bool:
    return driver_name == DRA_DRIVER


def parse_dra_device(driver: str, pool: str, device: str) -> DeviceRef | None:
    """The GPU or MIG device a DRA claim's device names, or None for another
    driver's or a name not known."""
    if not is_gpu_driver(driver) or len(device) > _MAX_ID or len(pool) > 253:
        return None
    device_id = f"{driver}/{pool}/{device}"
    if m := _DRA_GPU.match(device):
        return DeviceRef(DeviceKind.DRA_GPU, device_id, minor=int(m.group(1)))
    if m := _DRA_MIG_OLD.match(device):
        return DeviceRef(DeviceKind.DRA_MIG, device_id, minor=int(m.group(1)),
                         mig_profile_id=int(m.group(2)), mig_start=int(m.group(3)))
    if m := _DRA_MIG.match(device):
        return DeviceRef(DeviceKind.DRA_MIG, device_id, minor=int(m.group(1)),
                         mig_profile=m.group(2), mig_profile_id=int(m.group(3)),
                         mig_start=int(m.group(4)))
    return None


def dra_profile_name(profile: str) -> str:
    """A MIG profile as NVML names it ("1g.10gb+me") in the form the DRA
    driver puts in device names ("1g10gb-me")."""
    name = re.sub(r"[^a-z0-9.-]", "-", profile.replace(".", "").lower()).strip("-")
    return name.removesuffix(".")
