"""The owner rows of each GPU: the series behind ``gpu_allocation_info``
(a device the kubelet allocated, placed on its GPU or MIG device as NVML
numbers them) and ``gpu_job_info`` (a Slurm job with a process on the GPU).

Pure functions of what the collectors read (the node's GPUs and MIG devices
from NVML, the kubelet's grants, the GPU processes' jobs), so each row is
made once and tested without a kubelet or a driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpu_exporter.attribution.devices import DeviceKind, DeviceRef, dra_profile_name
from gpu_exporter.attribution.podresources import Allocation, Claim, Owner
from gpu_exporter.attribution.slurm import SlurmJob


@dataclass(frozen=True, slots=True)
class MigIdentity:
    uuid: str  # "MIG-..."
    index: int  # the MIG device's index on its GPU (the plugin's "<gpu>:<index>")
    gpu_instance: int
    compute_instance: int
    profile: str = ""  # "1g.10gb" as NVML names it; "" where not known


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    index: int
    uuid: str  # "GPU-..."
    migs: tuple[MigIdentity, ...] = ()
    # The GPU's device minor (/dev/nvidia<minor>), by which the DRA driver
    # names it; None where the driver's /proc file could not be read.
    minor: int | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a device sits: its GPU, and its MIG instance when it is one."""

    gpu: int
    uuid: str
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass(frozen=True, slots=True)
class AllocationRow:
    placement: Placement
    owner: Owner
    resource: str
    claim: Claim | None = None


@dataclass(frozen=True, slots=True)
class JobRow:
    gpu: int
    uuid: str
    job_id: str
    uid: int | None
    step: str | None


class DeviceIndex:
    """Finds the GPU or MIG device a plugin device ID names, by UUID or by
    index, on this node's GPUs."""

    def __init__(self, gpus: Iterable[GpuIdentity]) -> None:
        self._by_uuid: dict[str, Placement] = {}
        self._by_index: dict[tuple[int, int | None], Placement] = {}
        # Drivers before R470 named MIG devices MIG-GPU-<uuid>/<gi>/<ci>.
        self._legacy: dict[str, Placement] = {}
        # DRA: a GPU by its device minor; a MIG device by its parent's minor and
        # its profile as the DRA driver writes it (where one instance has it).
        self._by_minor: dict[int, Placement] = {}
        self._by_profile: dict[tuple[int, str], list[Placement]] = {}
        for gpu in gpus:
            whole = Placement(gpu.index, gpu.uuid)
            self._by_uuid[gpu.uuid] = whole
            self._by_index[(gpu.index, None)] = whole
            if gpu.minor is not None:
                self._by_minor[gpu.minor] = whole
            for mig in gpu.migs:
                placed = Placement(gpu.index, gpu.uuid, mig.gpu_instance, mig.compute_instance)
                self._by_uuid[mig.uuid] = placed
                self._by_index[(gpu.index, mig.index)] = placed
                self._legacy[f"MIG-{gpu.uuid}/{mig.gpu_instance}/{mig.compute_instance}"] = placed
                if gpu.minor is not None and mig.profile:
                    self._by_profile.setdefault(
                        (gpu.minor, dra_profile_name(mig.profile)), []).append(placed)

    def place(self, device: DeviceRef) -> Placement | None:
        if device.kind in (DeviceKind.GPU_UUID, DeviceKind.MIG_UUID):
            return self._by_uuid.get(device.device_id) or self._legacy.get(device.device_id)
        if device.kind == DeviceKind.DRA_GPU:
            return self._by_minor.get(device.minor) if device.minor is not None else None
        if device.kind == DeviceKind.DRA_MIG:
            # NVML does not say where an instance starts among the memory
            # slices: a profile that two instances share names neither.
            if device.minor is None or device.mig_profile is None:
                return None
            found = self._by_profile.get((device.minor, device.mig_profile), [])
            return found[0] if len(found) == 1 else None
        if device.gpu is None:
            return None
        return self._by_index.get((device.gpu, device.mig))


def allocation_rows(allocations: Sequence[Allocation], gpus: Iterable[GpuIdentity],
                    ) -> tuple[list[AllocationRow], list[Allocation]]:
    """One row per device and container holding it (a shared GPU's replicas
    held by one container are one row), in the kubelet's order; and the
    grants naming no device of this node (a GPU lost since, a stale answer),
    which get no row."""
    index = DeviceIndex(gpus)
    rows: dict[AllocationRow, None] = {}
    unplaced: list[Allocation] = []
    for a in allocations:
        placement = index.place(a.device)
        if placement is None:
            unplaced.append(a)
        else:
            rows[AllocationRow(placement, a.owner, a.resource, a.claim)] = None
    return list(rows), unplaced


def job_rows(process_gpus: Mapping[int, Iterable[tuple[int, str]]],
             jobs: Mapping[int, SlurmJob]) -> list[JobRow]:
    """One row per GPU and job (and step) with a process on it. ``process_gpus``
    is PID -> the (index, UUID) of each GPU it holds a context on; ``jobs``
    the PIDs' jobs, for those in one."""
    rows: dict[JobRow, None] = {}
    for pid in sorted(process_gpus):
        job = jobs.get(pid)
        if job is None:
            continue
        for gpu, uuid in sorted(process_gpus[pid]):
            rows[JobRow(gpu, uuid, job.job_id, job.uid, job.step)] = None
    return list(rows)
