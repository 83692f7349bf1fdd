"""The kubelet's PodResources API (v1) over gRPC on its unix socket: one
connection, each call bounded by a deadline. Loaded by the watcher only once
the socket exists (grpcio and the generated protobuf modules cost about
14 MiB of memory; see BENCHMARKS.md, "What each library costs")."""

from __future__ import annotations

import os

import grpc

from gpu_exporter.attribution.kubelet_answers import (
    Allocation,
    KubeletFailure,
    Status,
    allocatable_from,
    allocations_from,
    check_socket,
)
from gpu_exporter.attribution.podresources_v1 import api_pb2, api_pb2_grpc
from gpu_exporter.settings.config_types import DEFAULT_POD_RESOURCES_SOCKET

# The kubelet's own PodResources client allows 16 MiB answers; a node with
# hundreds of pods and their CPU and memory lists needs more than gRPC's 4 MiB.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


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


def _rpc_failure(exc: grpc.RpcError) -> KubeletFailure:
    code, details = _rpc_status(exc)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return KubeletFailure(Status.TIMED_OUT, "the kubelet did not answer in time")
    if code == grpc.StatusCode.UNAVAILABLE and "ermission denied" in details:
        return KubeletFailure(Status.UNREADABLE, details)
    name = code.name if code is not None else "unknown"
    return KubeletFailure(Status.ERROR, f"{name}: {details}")


class PodResourcesClient:
    """One connection to the kubelet socket; each call bounded by ``timeout``
    seconds. Not thread-safe: the watcher's thread is its only user."""

    def __init__(self, socket_path: str = DEFAULT_POD_RESOURCES_SOCKET,
                 timeout: float = 2.0) -> None:
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
        """The GPU grants and allocatable GPU IDs now. Raises KubeletFailure."""
        check_socket(self.socket_path)
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


