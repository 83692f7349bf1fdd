"""GPUs allocated through ResourceClaims (Dynamic Resource Allocation): the
kubelet's PodResources answer (List and Get) carries each container's claims
with their devices; each GPU or MIG device NVIDIA's DRA driver allocated is
named by its claim and pod, against the v1 proto on a real gRPC server on a
unix socket."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gpu_exporter.attribution.devices import DeviceKind, dra_profile_name, parse_dra_device
from gpu_exporter.attribution.gpu_owners import GpuIdentity, MigIdentity, allocation_rows
from gpu_exporter.attribution.podresources import (
    Claim,
    Owner,
    PodResourcesWatcher,
    Status,
    allocations_from,
)
from gpu_exporter.attribution.podresources_v1 import api_pb2, api_pb2_grpc
from gpu_exporter.commands.report import render_text
from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.host.nvidia_proc import device_minor, proc_bus_id
from gpu_exporter.simulator.kubelet import PodResourcesServer
from gpu_exporter.simulator.tenants import (
    ClaimDevice,
    ClaimGrant,
    Container,
    DeviceGrant,
    Pod,
    Tenants,
)
from tests.exposition import samples
from tests.simnode import SimRun

CLAIM_UID = "1b2c3d4e-5f60-4718-8293-a4b5c6d7e8f9"
NODE = Tenants(pods=[
    Pod(namespace="ml", name="train-a", uid="00000001-0000-4000-8000-000000000001",
        containers=[Container(name="trainer", devices=[
            DeviceGrant(resource="nvidia.com/gpu", ids=["0", "1"])])]),
    Pod(namespace="ml", name="infer-c", uid="00000002-0000-4000-8000-000000000002",
        containers=[Container(name="server", claims=[ClaimGrant(
            name="infer-gpus", uid=CLAIM_UID, devices=[
                ClaimDevice(device="gpu-3"), ClaimDevice(device="gpu-2-mig-1g10gb-19-0"),
                # Another driver's device in the same claim: not a GPU.
                ClaimDevice(driver="example.com", device="fpga-0")])])]),
    # A claim in another namespace, shared by two containers.
    Pod(namespace="research", name="notebook-d", uid="00000003-0000-4000-8000-000000000003",
        containers=[
            Container(name="jupyter", claims=[ClaimGrant(
                name="shared-gpu", namespace="platform", devices=[ClaimDevice(device="gpu-5")])]),
            Container(name="sidecar", claims=[ClaimGrant(
                name="shared-gpu", namespace="platform", devices=[ClaimDevice(device="gpu-5")])]),
        ]),
])


@pytest.fixture
def kubelet() -> Iterator[PodResourcesServer]:
    # Not pytest's tmp_path: a unix socket path must fit in 108 bytes.
    directory = Path(tempfile.mkdtemp(prefix="kubelet-"))
    try:
        with PodResourcesServer(str(directory / "kubelet.sock"), NODE) as server:
            yield server
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_the_proto_carries_claims_as_kubernetes_1_36_does() -> None:
    """The field numbers are the wire contract: those of k8s.io/kubelet
    v0.36.0, pkg/apis/podresources/v1/api.proto (DynamicResource's field 1,
    class_name, was removed in 1.31 and is not reused)."""
    def numbers(message: type[object]) -> dict[str, int]:
        descriptor = message.DESCRIPTOR  # type: ignore[attr-defined]
        return {f.name: f.number for f in descriptor.fields}

    assert numbers(api_pb2.ContainerResources)["dynamic_resources"] == 5
    assert numbers(api_pb2.DynamicResource) == {
        "claim_name": 2, "claim_namespace": 3, "claim_resources": 4}
    assert numbers(api_pb2.ClaimResource) == {
        "cdi_devices": 1, "driver_name": 2, "pool_name": 3, "device_name": 4, "share_id": 5}
    assert numbers(api_pb2.CDIDevice) == {"name": 1}


def test_list_and_get_answer_each_containers_claims(kubelet: PodResourcesServer) -> None:
    channel = grpc.insecure_channel(f"unix://{kubelet.socket_path}")
    try:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        listed = stub.List(api_pb2.ListPodResourcesRequest(), timeout=5)
        got = stub.Get(api_pb2.GetPodResourcesRequest(pod_name="notebook-d",
                                                      pod_namespace="research"), timeout=5)
    finally:
        channel.close()
    server = listed.pod_resources[1].containers[0]
    (claim,) = server.dynamic_resources
    assert (claim.claim_namespace, claim.claim_name) == ("ml", "infer-gpus")
    assert [(r.driver_name, r.pool_name, r.device_name) for r in claim.claim_resources] == [
        ("gpu.nvidia.com", "sim-node-01", "gpu-3"),
        ("gpu.nvidia.com", "sim-node-01", "gpu-2-mig-1g10gb-19-0"),
        ("example.com", "sim-node-01", "fpga-0")]
    assert [d.name for d in claim.claim_resources[0].cdi_devices] == [
        f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-3"]
    assert [c.name for c in got.pod_resources.containers] == ["jupyter", "sidecar"]
    assert all(c.dynamic_resources[0].claim_namespace == "platform"
               for c in got.pod_resources.containers)


def test_each_claimed_gpu_maps_to_its_claim_pod_and_container(
        kubelet: PodResourcesServer) -> None:
    watcher = PodResourcesWatcher(kubelet.socket_path, timeout=5.0)
    try:
        state = watcher.refresh()
    finally:
        watcher.close()
    assert state.status is Status.OK
    got = [(a.device.device_id, a.resource, a.owner, a.claim) for a in state.allocations]
    server = Owner("ml", "infer-c", "server")
    infer, shared = Claim("ml", "infer-gpus"), Claim("platform", "shared-gpu")
    assert got == [
        ("0", "nvidia.com/gpu", Owner("ml", "train-a", "trainer"), None),
        ("1", "nvidia.com/gpu", Owner("ml", "train-a", "trainer"), None),
        ("gpu.nvidia.com/sim-node-01/gpu-3", "gpu.nvidia.com", server, infer),
        ("gpu.nvidia.com/sim-node-01/gpu-2-mig-1g10gb-19-0", "gpu.nvidia.com", server, infer),
        ("gpu.nvidia.com/sim-node-01/gpu-5", "gpu.nvidia.com",
         Owner("research", "notebook-d", "jupyter"), shared),
        ("gpu.nvidia.com/sim-node-01/gpu-5", "gpu.nvidia.com",
         Owner("research", "notebook-d", "sidecar"), shared),
    ]


def test_a_kubelet_that_reports_no_claims_gives_the_plugins_grants() -> None:
    """Kubelets before 1.34 (without the gate) leave dynamic_resources empty."""
    answer = api_pb2.ListPodResourcesResponse(pod_resources=[api_pb2.PodResources(
        name="p", namespace="n", containers=[api_pb2.ContainerResources(
            name="c", devices=[api_pb2.ContainerDevices(resource_name="nvidia.com/gpu",
                                                        device_ids=["0"])])])])
    assert [a.claim for a in allocations_from(answer)] == [None]


@pytest.mark.parametrize(("device", "kind", "minor", "profile"), [
    ("gpu-0", DeviceKind.DRA_GPU, 0, None),
    ("gpu-12", DeviceKind.DRA_GPU, 12, None),
    # Since v25.12: the profile, its ID and where it starts.
    ("gpu-3-mig-1g10gb-19-0", DeviceKind.DRA_MIG, 3, "1g10gb"),
    ("gpu-1-mig-1g10gb-me-20-6", DeviceKind.DRA_MIG, 1, "1g10gb-me"),
    # v25.3.2 to v25.8: profile ID, start, size (no profile name).
    ("gpu-3-mig-19-0-1", DeviceKind.DRA_MIG, 3, None),
])
def test_the_dra_drivers_device_names(device: str, kind: DeviceKind, minor: int,
                                      profile: str | None) -> None:
    ref = parse_dra_device("gpu.nvidia.com", "node-1", device)
    assert ref is not None
    assert (ref.kind, ref.minor, ref.mig_profile) == (kind, minor, profile)


@pytest.mark.parametrize(("driver", "device"), [
    ("compute-domain.nvidia.com", "channel-0"), ("example.com", "gpu-0"),
    ("gpu.nvidia.com", "gpu-vfio-0"), ("gpu.nvidia.com", "gpu-"),
    ("gpu.nvidia.com", "GPU-0"), ("gpu.nvidia.com", "gpu-0" + "0" * 200),
    ("gpu.nvidia.com", "gpu-0\n"),
])
def test_other_drivers_and_unknown_names_are_skipped(driver: str, device: str) -> None:
    assert parse_dra_device(driver, "node-1", device) is None


def test_mig_profiles_in_the_drivers_spelling() -> None:
    assert dra_profile_name("1g.10gb") == "1g10gb"
    assert dra_profile_name("1g.10gb+me") == "1g10gb-me"
    assert dra_profile_name("7g.80gb") == "7g80gb"


def _claimed(device: str) -> list[object]:
    answer = api_pb2.ListPodResourcesResponse(pod_resources=[api_pb2.PodResources(
        name="p", namespace="n", containers=[api_pb2.ContainerResources(
            name="c", dynamic_resources=[api_pb2.DynamicResource(
                claim_name="k", claim_namespace="n", claim_resources=[api_pb2.ClaimResource(
                    driver_name="gpu.nvidia.com", pool_name="node-1",
                    device_name=device)])])])])
    return list(allocations_from(answer))


def test_gpus_are_placed_by_device_minor_not_nvml_index() -> None:
    gpus = [GpuIdentity(0, "GPU-a", minor=1), GpuIdentity(1, "GPU-b", minor=0),
            GpuIdentity(2, "GPU-c", (
                MigIdentity("MIG-1", 0, 7, 0, "1g.10gb"),
                MigIdentity("MIG-2", 1, 1, 0, "3g.40gb"),
                MigIdentity("MIG-3", 2, 2, 0, "3g.40gb")), minor=2),
            GpuIdentity(3, "GPU-d")]  # its minor could not be read
    rows, unplaced = allocation_rows(_claimed("gpu-0"), gpus)  # type: ignore[arg-type]
    assert [(r.placement.gpu, r.placement.uuid) for r in rows] == [(1, "GPU-b")]
    rows, _ = allocation_rows(_claimed("gpu-2-mig-1g10gb-19-0"), gpus)  # type: ignore[arg-type]
    assert [(r.placement.gpu, r.placement.gpu_instance) for r in rows] == [(2, 7)]
    # Two instances of the profile: NVML does not say which one starts at 0.
    for name in ("gpu-2-mig-3g40gb-9-0", "gpu-2-mig-9-0-4", "gpu-3", "gpu-9"):
        rows, unplaced = allocation_rows(_claimed(name), gpus)  # type: ignore[arg-type]
        assert rows == [] and len(unplaced) == 1, name


def test_the_drivers_proc_file_gives_the_minor(tmp_path: Path) -> None:
    assert proc_bus_id("00000000:1A:00.0") == "0000:1a:00.0"
    assert proc_bus_id("garbage") is None
    directory = tmp_path / "driver" / "nvidia" / "gpus" / "0000:1a:00.0"
    directory.mkdir(parents=True)
    info = directory / "information"
    info.write_text("Model: \t\t NVIDIA H100 80GB HBM3\nBus Location: \t 0000:1a:00.0\n"
                    "Device Minor: \t 3\nGPU Excluded:\t No\n")
    assert device_minor(tmp_path, "00000000:1A:00.0") == 3
    assert device_minor(tmp_path, "00000000:1B:00.0") is None
    info.write_text("Device Minor: \t three\n")
    assert device_minor(tmp_path, "00000000:1A:00.0") is None
    info.write_text("Device Minor: \t 3\n" + "x" * 10000)
    assert device_minor(tmp_path, "00000000:1A:00.0") is None


def test_the_dra_scenario_names_claims_next_to_device_plugin_pods() -> None:
    with SimRun("dra-claims-node") as run:
        run.poll(15)
        text = run.scrape()
        findings = list(run.snapshot.derived(FINDINGS))
    rows = {(r["gpu"], r["pod"], r["container"], r["resource"], r["claim_namespace"],
             r["claim"]) for r, _ in samples(text, "gpu_allocation_info")}
    assert rows == {
        *((str(g), "train-a", "trainer", "nvidia.com/gpu", "", "") for g in range(4)),
        # The driver gave minors 4 and 5 the other way round: minor 5 is GPU 4.
        ("4", "infer-c", "server", "gpu.nvidia.com", "ml", "infer-gpu"),
        ("5", "batch-e", "worker", "gpu.nvidia.com", "ml", "batch-gpu"),
        ("6", "notebook-d", "jupyter", "gpu.nvidia.com", "research", "shared-gpu"),
        ("6", "notebook-d", "sidecar", "gpu.nvidia.com", "research", "shared-gpu"),
        ("7", "notebook-1", "jupyter", "nvidia.com/gpu.shared", "", ""),
        ("7", "notebook-2", "jupyter", "nvidia.com/gpu.shared", "", ""),
    }
    (finding,) = findings
    assert (finding.gpu, finding.row.cause) == (4, "application_fault")
    assert [o.as_dict() for o in finding.owners] == [
        {"namespace": "ml", "pod": "infer-c", "container": "server", "claim": "ml/infer-gpu"}]
    assert finding.evidence["xid_owner"] == "ml/infer-c/server (claim ml/infer-gpu)"


def test_a_shared_gpu_splits_by_its_owners_sm_share() -> None:
    """GPU 7 of dra-claims-node is time-sliced between two notebooks whose
    processes ran kernels 60 % and 20 % of the time: 3/4 and 1/4 of the GPU's
    SM time, what the energy rule splits its joules by. GPU 6's claim is held
    by two containers of one pod, one process between them: all of it. GPUs
    with one owner have no share series (the rule takes them whole)."""
    with SimRun("dra-claims-node") as run:
        run.poll(25)
        text = run.scrape()
    shares = {(labels["gpu"], labels["owner"]): value
              for labels, value in samples(text, "gpu_owner_sm_share_ratio")}
    notebook_1 = "pod 9c0d1e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f container "
    notebook_2 = "pod 0d1e2f3a-4b5c-4d6e-9f7a-8b9c0d1e2f3a container "
    notebook_d = "pod 8b9c0d1e-2f3a-4b4c-9d5e-6f7a8b9c0d1e container "
    got = {(gpu, owner[:len(owner) - 12]): round(value, 9)
           for (gpu, owner), value in shares.items()}
    assert got == {("7", notebook_1): 0.75, ("7", notebook_2): 0.25, ("6", notebook_d): 1.0}


def test_a_shared_gpu_without_per_process_samples_has_no_split(tmp_path: Path) -> None:
    """NVML gives GPU 7 no per-process samples (neither process ran kernels
    it sampled): its energy cannot be split, and no share says otherwise."""
    path = tmp_path / "no-samples.yaml"
    path.write_text("name: no-samples\nextends: dra-claims-node\nexpect: null\n"
                    "process_changes:\n  24107: {sm_utilization: null}\n"
                    "  24207: {sm_utilization: null}\n")
    with SimRun(str(path)) as run:
        run.poll(25)
        text = run.scrape()
    gpus = {labels["gpu"] for labels, _ in samples(text, "gpu_owner_sm_share_ratio")}
    assert gpus == {"6"}  # GPU 7's energy stays unsplit (split="unknown" in the rule)


def test_diagnose_names_the_claim_and_escapes_the_process_name(tmp_path: Path) -> None:
    """What `gpu-exporter diagnose` prints for the scenario's Xid: the owner
    with its claim, and the process the driver named; a process name with a
    terminal escape sequence in it (the kernel log carries it as \\x1b) is
    shown as text, never sent to the terminal."""
    path = tmp_path / "hostile.yaml"
    path.write_text("name: hostile\nextends: dra-claims-node\nkernel_log:\n  lines:\n"
                    "    - {at: 10, xid: 31, gpu: 4, pid: 24104, name: \"py\\x1b[2Jthon\"}\n")
    with SimRun(str(path)) as run:
        run.poll(15)
        (finding,) = run.snapshot.derived(FINDINGS)
    text = render_text([finding.as_dict()], color=False)
    assert "owner:    ml/infer-c/server (claim ml/infer-gpu)" in text
    assert "\x1b" not in text and "py\\x1b[2Jthon (pid 24104)" in text
