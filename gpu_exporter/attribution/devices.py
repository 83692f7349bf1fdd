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
