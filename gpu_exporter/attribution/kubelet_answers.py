"""What the kubelet's PodResources API (v1) answers, as the exporter keeps it:
which container holds which GPU or MIG device (and through which
ResourceClaim), how the last attempt went, and the checks made before asking
(a socket this process may connect to). No gRPC here: the client
(``kubelet_grpc``) is loaded only where the socket exists, so a node without
a kubelet never holds gRPC or protobuf in memory."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING

from gpu_exporter.attribution.devices import (
    DeviceRef,
    is_gpu_resource,
    parse_device_id,
    parse_dra_device,
)

if TYPE_CHECKING:
    from gpu_exporter.attribution.podresources_v1 import api_pb2

# Kubernetes names are at most 253 characters (DNS subdomain); a longer one is
# cut so that no answer can make a label of unbounded size.
MAX_NAME = 253
# GPU grants kept from one answer: a node has at most a few hundred (8 GPUs x
# 7 MIG devices x sharing replicas); more means something is wrong, and the
# rest are dropped rather than growing the exporter without bound.
MAX_ALLOCATIONS = 4096


class Status(StrEnum):
    STARTING = "starting"  # no answer yet
    OK = "ok"
    SOCKET_ABSENT = "socket_absent"  # off: no kubelet socket at the path
    UNREADABLE = "unreadable"  # not a socket, or no permission to connect
    TIMED_OUT = "timed_out"
    ERROR = "error"


# States that count as failures. An absent socket is the feature being off.
FAILED = frozenset({Status.UNREADABLE, Status.TIMED_OUT, Status.ERROR})


@dataclass(frozen=True, slots=True)
class Owner:
    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class Claim:
    """The ResourceClaim a device was allocated through (Dynamic Resource
    Allocation)."""

    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Allocation:
    """One device granted to one container: by the device plugin (``resource``
    the plugin's, "nvidia.com/gpu" ...), or through a ResourceClaim
    (``resource`` the DRA driver's name, "gpu.nvidia.com", and ``claim``)."""

    device: DeviceRef
    resource: str
    owner: Owner
    claim: Claim | None = None


@dataclass(frozen=True, slots=True)
class Allocations:
    """What the watcher knows now. ``allocations`` is from the last good
    answer (empty before the first); ``status`` is how the last attempt went;
    ``failures`` counts failed attempts since start (a counter)."""

    status: Status
    allocations: tuple[Allocation, ...] = ()
    # Device IDs (replica suffix removed) the kubelet could allocate; None
    # when it has not said (an older kubelet without GetAllocatableResources).
    allocatable: frozenset[str] | None = None
    failures: int = 0
    updated_at: float | None = None  # monotonic time of the last good answer
    detail: str = ""  # why the last attempt failed, for the log and /status
    by_device: Mapping[str, tuple[Owner, ...]] = field(
        default_factory=lambda: MappingProxyType({}))


def _name(text: str) -> str:
    return text[:MAX_NAME]


def allocations_from(response: api_pb2.ListPodResourcesResponse) -> list[Allocation]:
    """The GPU and MIG grants in a List answer, in the kubelet's order: the
    device plugin's, then each container's devices allocated through
    ResourceClaims (its ``dynamic_resources``, filled by kubelets from 1.34,
    or 1.27 with the KubeletPodResourcesDynamicResources gate). Devices of
    other resources or drivers and IDs of unknown forms are skipped."""
    found: list[Allocation] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            owner = Owner(_name(pod.namespace), _name(pod.name), _name(container.name))
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name):
                    continue
                for raw in devices.device_ids:
                    ref = parse_device_id(raw)
                    if ref is None:
                        continue
                    if len(found) >= MAX_ALLOCATIONS:
                        return found
                    found.append(Allocation(ref, devices.resource_name, owner))
            for dynamic in container.dynamic_resources:
                claim = Claim(_name(dynamic.claim_namespace), _name(dynamic.claim_name))
                for resource in dynamic.claim_resources:
                    ref = parse_dra_device(resource.driver_name, resource.pool_name,
                                           resource.device_name)
                    if ref is None:
                        continue
                    if len(found) >= MAX_ALLOCATIONS:
                        return found
                    found.append(Allocation(ref, resource.driver_name, owner, claim))
    return found


def allocatable_from(response: api_pb2.AllocatableResourcesResponse) -> frozenset[str]:
    ids: set[str] = set()
    for devices in response.devices:
        if not is_gpu_resource(devices.resource_name):
            continue
        for raw in devices.device_ids:
            ref = parse_device_id(raw)
            if ref is not None and len(ids) < MAX_ALLOCATIONS:
                ids.add(ref.device_id)
    return frozenset(ids)


def index_by_device(allocations: tuple[Allocation, ...]) -> Mapping[str, tuple[Owner, ...]]:
    """Device ID -> its owners, each once, in the order first seen. A device
    shared by time-slicing or MPS has several."""
    owners: dict[str, dict[Owner, None]] = {}
    for a in allocations:
        owners.setdefault(a.device.device_id, {})[a.owner] = None
    return MappingProxyType({d: tuple(o) for d, o in owners.items()})


# Error details come from gRPC and the peer: enough to say what went wrong,
# never a log line or status page of unbounded size.
MAX_DETAIL = 300


class KubeletFailure(Exception):
    """An attempt to ask the kubelet failed: how (``status``) and why."""

    def __init__(self, status: Status, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail[:MAX_DETAIL]


def check_socket(path: str) -> None:
    """Raises KubeletFailure unless ``path`` is a socket this process may connect
    to. Checked before gRPC is asked, so that the common cases (no kubelet,
    a missing mount, a file or directory in its place) are named plainly
    rather than as a connection error."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise KubeletFailure(Status.SOCKET_ABSENT, f"no socket at {path}") from None
    except OSError as exc:
        raise KubeletFailure(Status.UNREADABLE, f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise KubeletFailure(Status.UNREADABLE, f"{path} is not a socket")
    # Connecting to a unix socket needs write permission on it.
    if not os.access(path, os.R_OK | os.W_OK):
        raise KubeletFailure(Status.UNREADABLE, f"{path}: {os.strerror(errno.EACCES)}")


