"""Which pod holds which GPU, from the kubelet's PodResources API (v1) on its
unix socket.

The kubelet answers ``List`` with every container's devices; the GPUs and MIG
devices the NVIDIA device plugin handed out, and those NVIDIA's DRA driver
allocated through a ResourceClaim, are kept, each with its (namespace, pod,
container) and its claim. A ``PodResourcesWatcher`` asks on its own thread
every ``period`` seconds with a bounded deadline and keeps the last good
answer: the poll reads ``snapshot()``, which never waits on the kubelet, so a
slow, hung or missing kubelet never stalls it. A failure is logged once when
the state changes (not on every refresh) and counted.

No socket at the path means the node runs no kubelet (or it is not mounted
into the exporter's pod): attribution is off, which is not an error.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

import grpc

from gpu_exporter.attribution.devices import (
    DeviceRef,
    is_gpu_resource,
    parse_device_id,
    parse_dra_device,
)
from gpu_exporter.attribution.podresources_v1 import api_pb2, api_pb2_grpc
from gpu_exporter.config_types import DEFAULT_POD_RESOURCES_SOCKET

log = logging.getLogger(__name__)

DEFAULT_SOCKET = DEFAULT_POD_RESOURCES_SOCKET
# The kubelet's own PodResources client allows 16 MiB answers; a node with
# hundreds of pods and their CPU and memory lists needs more than gRPC's 4 MiB.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
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


class _Failure(Exception):
    def __init__(self, status: Status, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail[:MAX_DETAIL]


def _check_socket(path: str) -> None:
    """Raises _Failure unless ``path`` is a socket this process may connect
    to. Checked before gRPC is asked, so that the common cases (no kubelet,
    a missing mount, a file or directory in its place) are named plainly
    rather than as a connection error."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _Failure(Status.SOCKET_ABSENT, f"no socket at {path}") from None
    except OSError as exc:
        raise _Failure(Status.UNREADABLE, f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise _Failure(Status.UNREADABLE, f"{path} is not a socket")
    # Connecting to a unix socket needs write permission on it.
    if not os.access(path, os.R_OK | os.W_OK):
        raise _Failure(Status.UNREADABLE, f"{path}: {os.strerror(errno.EACCES)}")


def _rpc_status(exc: grpc.RpcError) -> tuple[grpc.StatusCode | None, str]:
    """The status code and details of a failed call. The errors gRPC raises
    for calls are also grpc.Call objects, which the type stubs cannot
    express (the two classes' signatures clash), hence the look-up by name."""
    code_of = getattr(exc, "code", None)
    details_of = getattr(exc, "details", None)
    code = code_of() if callable(code_of) else None
    details = details_of() if callable(details_of) else None
    return (code if isinstance(code, grpc.StatusCode) else None,
            details if isinstance(details, str) and details else str(exc))


def _rpc_failure(exc: grpc.RpcError) -> _Failure:
    code, details = _rpc_status(exc)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return _Failure(Status.TIMED_OUT, "the kubelet did not answer in time")
    if code == grpc.StatusCode.UNAVAILABLE and "ermission denied" in details:
        return _Failure(Status.UNREADABLE, details)
    name = code.name if code is not None else "unknown"
    return _Failure(Status.ERROR, f"{name}: {details}")


class PodResourcesClient:
    """One connection to the kubelet socket; each call bounded by ``timeout``
    seconds. Not thread-safe: the watcher's thread is its only user."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 2.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None

    def _connect(self) -> api_pb2_grpc.PodResourcesListerStub:
        if self._stub is None:
            # "unix://" takes an absolute path; a relative one would be read
            # as an authority.
            self._channel = grpc.insecure_channel(
                f"unix://{os.path.abspath(self.socket_path)}",
                options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                         # A proxy in the environment is for HTTP, never the socket.
                         ("grpc.enable_http_proxy", 0)])
            self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        return self._stub

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = None

    def fetch(self) -> tuple[list[Allocation], frozenset[str] | None]:
        """The GPU grants and allocatable GPU IDs now. Raises _Failure."""
        _check_socket(self.socket_path)
        stub = self._connect()
        try:
            listed = stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            # A fresh channel next time: gRPC's reconnect backoff grows to
            # minutes, far longer than a restarted kubelet takes to return.
            self.close()
            raise _rpc_failure(exc) from None
        allocatable: frozenset[str] | None = None
        try:
            allocatable = allocatable_from(stub.GetAllocatableResources(
                api_pb2.AllocatableResourcesRequest(), timeout=self.timeout))
        except grpc.RpcError as exc:
            # Kubelets before 1.23 (or with the feature gate off) answer
            # UNIMPLEMENTED: the grants alone are still worth having.
            if _rpc_status(exc)[0] != grpc.StatusCode.UNIMPLEMENTED:
                self.close()
                raise _rpc_failure(exc) from None
        return allocations_from(listed), allocatable


class PodResourcesWatcher:
    """Keeps ``snapshot()`` fresh from the kubelet without ever making its
    reader wait. ``start()`` runs the refreshes on a daemon thread;
    ``refresh()`` runs one on the caller's thread (for tests and one-shot
    tools)."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, period: float = 10.0,
                 timeout: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if timeout <= 0 or period <= 0:
            raise ValueError("period and timeout must be positive")
        self.socket_path = socket_path
        self.period = period
        self._client = PodResourcesClient(socket_path, timeout)
        self._clock = clock
        self._lock = threading.Lock()  # guards _state; never held while asking
        self._refreshing = threading.Lock()
        self._state = Allocations(Status.STARTING)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def snapshot(self) -> Allocations:
        """The last good grants and how the last attempt went. Never blocks
        on the kubelet: at most on a lock held for an assignment."""
        with self._lock:
            return self._state

    def refresh(self) -> Allocations:
        """Ask the kubelet once (bounded by the client's timeout), update the
        snapshot and return it."""
        try:
            # The client is one connection: one refresh at a time uses it.
            with self._refreshing:
                allocations, allocatable = self._client.fetch()
        except _Failure as failure:
            return self._fail(failure)
        except Exception as exc:  # a refresh must never kill the thread
            return self._fail(_Failure(Status.ERROR, f"{type(exc).__name__}: {exc}"))
        grants = tuple(allocations)
        with self._lock:
            before = self._state
            self._state = Allocations(
                Status.OK, grants, allocatable, before.failures, self._clock(), "",
                index_by_device(grants))
        if before.status != Status.OK:
            log.info("kubelet pod resources: %d GPU allocations from %s",
                     len(grants), self.socket_path)
        return self._state

    def _fail(self, failure: _Failure) -> Allocations:
        with self._lock:
            before = self._state
            failures = before.failures + (failure.status in FAILED)
            self._state = Allocations(
                failure.status, before.allocations, before.allocatable, failures,
                before.updated_at, failure.detail, before.by_device)
        if before.status != failure.status:
            if failure.status == Status.SOCKET_ABSENT:
                log.info("kubelet pod resources off: %s", failure.detail)
            else:
                log.warning("kubelet pod resources %s: %s (keeping the last answer)",
                            failure.status.value, failure.detail)
        return self._state

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="podresources", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.refresh()
                self._stop.wait(self.period)
        finally:
            self._client.close()

    def close(self, timeout: float | None = None) -> None:
        """Stop refreshing; waits at most ``timeout`` (default: the client's
        deadline plus a second) for a refresh in flight."""
        self._stop.set()
        if self._thread is None:
            self._client.close()
            return
        # The thread closes the client itself once its refresh is done.
        self._thread.join(self._client.timeout + 1.0 if timeout is None else timeout)
        self._thread = None
