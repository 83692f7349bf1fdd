"""Owner rows: each device the kubelet allocated placed on its GPU or MIG
device (by UUID, by index, in the old MIG UUID form), one row per device and
container; and one Slurm job row per GPU and job however many processes."""

from __future__ import annotations

from gpu_exporter.attribution.gpu_owners import (
    AllocationRow,
    GpuIdentity,
    JobRow,
    MigIdentity,
    Placement,
    allocation_rows,
    job_rows,
)
from gpu_exporter.attribution.podresources import Owner, allocations_from
from gpu_exporter.attribution.slurm import SlurmJob
from gpu_exporter.simulator.kubelet import list_response
from gpu_exporter.simulator.tenants import Container, DeviceGrant, Pod

GPU = [f"GPU-{i:08x}-1111-2222-3333-{i:012x}" for i in range(8)]
MIG = [f"MIG-{i:08x}-aaaa-bbbb-cccc-{i:012x}" for i in range(4)]
# GPU 5 is split: MIG device 0 is GPU instance 1, MIG device 1 is instance 2.
NODE = [GpuIdentity(i, GPU[i], (MigIdentity(MIG[0], 0, 1, 0), MigIdentity(MIG[1], 1, 2, 0))
                    if i == 5 else ()) for i in range(8)]


def pod(name: str, n: int, *grants: tuple[str, list[str]]) -> Pod:
    return Pod(namespace="ml", name=name, uid=f"{n:08x}-0000-4000-8000-{n:012x}",
               containers=[Container(name="main", devices=[
                   DeviceGrant(resource=r, ids=ids) for r, ids in grants])])


def test_each_allocated_gpu_and_mig_device_gets_one_row_on_its_gpu() -> None:
    pods = [
        pod("a", 1, ("nvidia.com/gpu", [GPU[0], GPU[1]])),
        pod("b", 2, ("nvidia.com/mig-1g.10gb", [MIG[0]])),
        pod("c", 3, ("nvidia.com/mig-3g.40gb", ["5:1"]), ("nvidia.com/gpu", ["3"])),
        # one container holding two replicas of a shared GPU: one row
        pod("d", 4, ("nvidia.com/gpu.shared", [GPU[6] + "::0", GPU[6] + "::1"])),
        # the pre-R470 MIG form; and a GPU this node does not have (lost since)
        pod("e", 5, ("nvidia.com/mig-1g.10gb", [f"MIG-{GPU[5]}/1/0"]),
            ("nvidia.com/gpu", ["GPU-99999999-1111-2222-3333-000000000099"])),
    ]
    rows, unplaced = allocation_rows(allocations_from(list_response(pods)), NODE)

    def row(p: str, placement: Placement, resource: str = "nvidia.com/gpu") -> AllocationRow:
        return AllocationRow(placement, Owner("ml", p, "main"), resource)

    assert rows == [
        row("a", Placement(0, GPU[0])), row("a", Placement(1, GPU[1])),
        row("b", Placement(5, GPU[5], 1, 0), "nvidia.com/mig-1g.10gb"),
        row("c", Placement(5, GPU[5], 2, 0), "nvidia.com/mig-3g.40gb"),
        row("c", Placement(3, GPU[3])),
        row("d", Placement(6, GPU[6]), "nvidia.com/gpu.shared"),
        row("e", Placement(5, GPU[5], 1, 0), "nvidia.com/mig-1g.10gb"),
    ]
    assert [a.device.device_id for a in unplaced] == ["GPU-99999999-1111-2222-3333-000000000099"]


def test_an_index_beyond_the_node_or_a_mig_index_on_a_whole_gpu_is_unplaced() -> None:
    pods = [pod("a", 1, ("nvidia.com/gpu", ["8"]), ("nvidia.com/mig-1g.10gb", ["2:0", "5:7"]))]
    rows, unplaced = allocation_rows(allocations_from(list_response(pods)), NODE)
    assert rows == []
    assert [a.device.device_id for a in unplaced] == ["8", "2:0", "5:7"]


def test_one_job_row_per_gpu_and_job_however_many_processes() -> None:
    job = SlurmJob("4242", 1001, "0", None, "cgroup")
    other = SlurmJob("77", 1002, "batch", "/system.slice/slurmstepd.scope/job_77", "cgroup")
    process_gpus = {
        100: [(0, GPU[0]), (1, GPU[1])],  # one rank spanning two GPUs
        101: [(1, GPU[1])],  # a second process of the job on GPU 1
        102: [(1, GPU[1])],
        200: [(4, GPU[4])],
        300: [(7, GPU[7])],  # in no job
    }
    jobs = {100: job, 101: job, 102: job, 200: other}
    assert job_rows(process_gpus, jobs) == [
        JobRow(0, GPU[0], "4242", 1001, "0"), JobRow(1, GPU[1], "4242", 1001, "0"),
        JobRow(4, GPU[4], "77", 1002, "batch"),
    ]
