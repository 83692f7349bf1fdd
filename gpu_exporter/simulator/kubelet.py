"""A kubelet's PodResources API (v1) for the simulated node, served with
grpcio on a unix socket from the same generated code the exporter's client
uses, so what it answers is what a real kubelet puts on the wire: the device
plugin's devices and, in ``List`` and ``Get``, the devices of each
container's ResourceClaims (``dynamic_resources``).

``delay`` makes every call wait that long before answering, to stand in for
a kubelet that hangs; stopping the server wakes such calls at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Sequence
from concurrent import futures
from types import TracebackType

import grpc

from gpu_exporter.attribution.podresources_v1 import api_pb2, api_pb2_grpc
from gpu_exporter.simulator.tenants import ClaimGrant, DeviceGrant, Pod, Tenants


def _devices(grants: Sequence[DeviceGrant]) -> list[api_pb2.ContainerDevices]:
    return [api_pb2.ContainerDevices(resource_name=g.resource, device_ids=g.ids)
            for g in grants]


def _claims(pod: Pod, claims: Sequence[ClaimGrant]) -> list[api_pb2.DynamicResource]:
    """A container's ResourceClaims as the kubelet reports them (1.34 and
    newer): each claim with its devices' driver, pool, name and CDI devices."""
    return [api_pb2.DynamicResource(
        claim_name=claim.name, claim_namespace=claim.namespace or pod.namespace,
        claim_resources=[api_pb2.ClaimResource(
            cdi_devices=[api_pb2.CDIDevice(name=n) for n in claim.cdi_devices(d)],
            driver_name=d.driver, pool_name=d.pool, device_name=d.device)
            for d in claim.devices])
        for claim in claims]


def pod_resources(pod: Pod) -> api_pb2.PodResources:
    return api_pb2.PodResources(name=pod.name, namespace=pod.namespace, containers=[
        api_pb2.ContainerResources(name=c.name, devices=_devices(c.devices),
                                   dynamic_resources=_claims(pod, c.claims))
        for c in pod.containers])


def list_response(pods: Sequence[Pod]) -> api_pb2.ListPodResourcesResponse:
    return api_pb2.ListPodResourcesResponse(pod_resources=[pod_resources(pod) for pod in pods])


def allocatable_response(tenants: Tenants) -> api_pb2.AllocatableResourcesResponse:
    given = [g for pod in tenants.pods for c in pod.containers for g in c.devices]
    return api_pb2.AllocatableResourcesResponse(
        devices=_devices([*given, *tenants.free_devices]))


def device_checkpoint(tenants: Tenants) -> str:
    """The kubelet's device-manager checkpoint (``device-plugins/
    kubelet_internal_checkpoint``) of the device plugin's grants, as kubelets
    from 1.20 write it: device IDs by NUMA node, the plugin's answer base64."""
    entries = [{"PodUID": pod.uid, "ContainerName": c.name, "ResourceName": g.resource,
                "DeviceIDs": {"-1": list(g.ids)}, "AllocResp": ""}
               for pod in tenants.pods for c in pod.containers for g in c.devices]
    registered: dict[str, list[str]] = {}
    for pod in tenants.pods:
        for c in pod.containers:
            for g in c.devices:
                registered.setdefault(g.resource, []).extend(g.ids)
    for g in tenants.free_devices:
        registered.setdefault(g.resource, []).extend(g.ids)
    data = {"PodDeviceEntries": entries, "RegisteredDevices": registered}
    return json.dumps({"Data": data, "Checksum": 0})


class _Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, server: PodResourcesServer) -> None:
        self._server = server

    def List(self, request: api_pb2.ListPodResourcesRequest,
             context: grpc.ServicerContext) -> api_pb2.ListPodResourcesResponse:
        self._server.wait_delay()
        return list_response(self._server.tenants.pods)

    def GetAllocatableResources(
            self, request: api_pb2.AllocatableResourcesRequest,
            context: grpc.ServicerContext) -> api_pb2.AllocatableResourcesResponse:
        self._server.wait_delay()
        if not self._server.allocatable:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "allocatable resources not enabled")
        return allocatable_response(self._server.tenants)

    def Get(self, request: api_pb2.GetPodResourcesRequest,
            context: grpc.ServicerContext) -> api_pb2.GetPodResourcesResponse:
        self._server.wait_delay()
        for pod in self._server.tenants.pods:
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return api_pb2.GetPodResourcesResponse(pod_resources=pod_resources(pod))
        context.abort(grpc.StatusCode.NOT_FOUND,
                      f"pod {request.pod_namespace}/{request.pod_name} not found")


class PodResourcesServer:
    """Serves ``tenants`` on the unix socket ``socket_path`` (its directory
    must exist). ``tenants``, ``delay`` and ``allocatable`` may be changed
    while it runs; each call reads them afresh."""

    def __init__(self, socket_path: str, tenants: Tenants, delay: float = 0.0,
                 allocatable: bool = True, workers: int = 4) -> None:
        self.socket_path = socket_path
        self.tenants = tenants
        self.delay = delay
        self.allocatable = allocatable
        self._stopping = threading.Event()
        self._server = grpc.server(futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="kubelet-sim"))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), self._server)
        if self._server.add_insecure_port(f"unix://{os.path.abspath(socket_path)}") == 0:
            raise OSError(f"cannot listen on {socket_path}")

    def wait_delay(self) -> None:
        if self.delay > 0:
            self._stopping.wait(self.delay)

    def start(self) -> PodResourcesServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.stop(grace=None).wait(5.0)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    def __enter__(self) -> PodResourcesServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
