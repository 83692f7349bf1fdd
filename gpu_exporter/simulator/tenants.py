"""Who runs on the simulated node: Kubernetes pods (with the devices the
kubelet gave their containers) and Slurm jobs, each with its own cgroup
signals. Validated like the rest of a scenario; a scenario's ``tenants:``
section has this shape.

Ratios are 0-1 as elsewhere in scenarios; the simulator turns them into the
kernel's percentages and microsecond totals when it writes the files.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from gpu_exporter.settings.config_types import Duration
from gpu_exporter.settings.sections import Section, setting

# Kubernetes object names: RFC 1123 labels / subdomains.
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
_UID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
# A kernel cpulist: "0-15,32-47".
_CPULIST = r"^\d{1,4}(-\d{1,4})?(,\d{1,4}(-\d{1,4})?){0,63}$"
# A block device's number as the kernel prints it: "MAJ:MIN".
_DEVICE = r"^\d{1,10}:\d{1,10}$"


class CgroupCondition(Section):
    """A workload cgroup's signals: the share of time its tasks stalled
    (some: at least one task; full: all at once), the share of CPU-limit
    periods in which it was throttled, OOM kills so far, and its memory: what
    it charges (anonymous memory and page cache) and how hard the kernel
    reclaims from it. Reclaim inside a cgroup at its memory limit evicts its
    page cache (and swaps its anonymous memory only where it may swap): it
    scans and steals pages, re-reads evicted file pages (refaults) and counts
    each time the limit was hit (memory.events "max")."""

    cpu_some: float = setting(0.0, ge=0, le=1)
    cpu_full: float = setting(0.0, ge=0, le=1)
    io_some: float = setting(0.0, ge=0, le=1)
    io_full: float = setting(0.0, ge=0, le=1)
    memory_some: float = setting(0.0, ge=0, le=1)
    memory_full: float = setting(0.0, ge=0, le=1)
    cpu_throttled_ratio: float = setting(0.0, ge=0, le=1)
    oom_kills: int = setting(0, ge=0)
    memory_anon_bytes: int = setting(0, ge=0)
    memory_file_bytes: int = setting(0, ge=0)  # page cache charged to it
    memory_swap_bytes: int = setting(0, ge=0)  # its pages in swap (memory.swap.current)
    reclaim_scan_bytes_per_s: float = setting(0.0, ge=0)  # pgscan
    reclaim_steal_bytes_per_s: float = setting(0.0, ge=0)  # pgsteal: reclaimed
    refault_bytes_per_s: float = setting(0.0, ge=0)  # workingset_refault_file
    memory_max_events_per_s: float = setting(0.0, ge=0)  # memory.events "max"
    # CPUs' worth of time its tasks use (cpu.stat usage_usec's rate); None:
    # one CPU, or its limit, less the share its tasks stall on the CPU.
    cpu_busy_cores: float | None = setting(None, ge=0)
    # What its tasks ask to read and write on ``io_device`` (io.stat), in
    # bytes per second; an io.max limit on the device holds them to it.
    io_read_bytes_per_s: float = setting(0.0, ge=0)
    io_write_bytes_per_s: float = setting(0.0, ge=0)
    io_device: str = setting("259:0", pattern=_DEVICE)


class IoLimitSpec(Section):
    """One device's io.max line: bytes and I/Os per second; None: "max"."""

    device: str = setting("259:0", pattern=_DEVICE)
    rbps: int | None = setting(None, gt=0)
    wbps: int | None = setting(None, gt=0)
    riops: int | None = setting(None, gt=0)
    wiops: int | None = setting(None, gt=0)


class CgroupChange(Section):
    """What changes in a workload's cgroup ``at`` seconds after the node
    started: a CPU limit or io.max limits applied (a value) or lifted (null,
    or an empty io_max), the figures of its signals given in ``cgroup``. A
    field left out (of ``cgroup`` too) stays as it was; the counters grow at
    the old figures until then, at the new after."""

    at: Duration = setting(ge=0)
    cpu_limit: float | None = setting(None, gt=0)
    io_max: list[IoLimitSpec] | None = None
    cgroup: CgroupCondition | None = None


class DeviceGrant(Section):
    """Devices of one resource given to a container, with the IDs the device
    plugin handed out: "GPU-<uuid>", "MIG-<uuid>", "0", "0:1", "GPU-<uuid>::2"."""

    resource: str = "nvidia.com/gpu"
    ids: list[str] = setting(min_length=1)


class ClaimDevice(Section):
    """One device a ResourceClaim was allocated, as the kubelet reports it:
    the DRA driver, its pool (the node, for NVIDIA's driver) and the device's
    name in it ("gpu-0" is the GPU of device minor 0; "gpu-0-mig-1g10gb-19-0" a
    MIG device on it)."""

    driver: str = "gpu.nvidia.com"
    pool: str = setting("sim-node-01", pattern=_DNS_SUBDOMAIN)
    device: str = setting(pattern=_DNS_LABEL)


class ClaimGrant(Section):
    """A ResourceClaim a container uses and the devices allocated to it.
    ``namespace`` unset: the pod's."""

    name: str = setting(pattern=_DNS_SUBDOMAIN)
    namespace: str | None = setting(None, pattern=_DNS_LABEL)
    uid: str = setting("00000000-0000-4000-8000-000000000000", pattern=_UID)
    devices: list[ClaimDevice] = setting(min_length=1)

    def cdi_devices(self, device: ClaimDevice) -> list[str]:
        """The CDI device names NVIDIA's DRA driver gives it
        ("k8s.gpu.nvidia.com/claim=<claim uid>-<device>")."""
        return [f"k8s.gpu.nvidia.com/claim={self.uid}-{device.device}"]


# The user a tenant's processes run as where the scenario names none: the
# first user a Linux distribution gives out.
DEFAULT_UID = 1000


class Container(Section):
    name: str = setting(pattern=_DNS_LABEL)
    devices: list[DeviceGrant] = setting(default_factory=list)
    # Devices allocated through ResourceClaims (Dynamic Resource Allocation).
    claims: list[ClaimGrant] = setting(default_factory=list)
    cpu_limit: float | None = setting(None, gt=0)  # CPUs; None: no limit
    memory_limit_bytes: int | None = setting(None, gt=0)  # memory.max; None: no limit
    # Its cpuset (the kubelet's static CPU manager gives guaranteed pods whole
    # CPUs); None: every CPU of the node.
    cpus: str | None = setting(None, pattern=_CPULIST)
    pids: list[int] = setting(default_factory=list)  # its processes on the node
    cgroup: CgroupCondition = CgroupCondition()
    # io.max: the devices its I/O is limited on (none: "max" everywhere).
    io_max: list[IoLimitSpec] = setting(default_factory=list, max_length=64)
    # Its cgroup's figures changing over time, applied in the order of ``at``.
    changes: list[CgroupChange] = setting(default_factory=list)
    # The user its processes run as (the pod's runAsUser; /proc/PID/status's Uid).
    run_as_uid: int = setting(DEFAULT_UID, ge=0, lt=2**32)

    def container_id(self, pod: Pod) -> str:
        """A stable 64-hex-digit id, as container runtimes make."""
        key = f"{pod.namespace}/{pod.name}/{self.name}".encode()
        return hashlib.sha256(key).hexdigest()


class Pod(Section):
    namespace: str = setting(pattern=_DNS_LABEL)
    name: str = setting(pattern=_DNS_SUBDOMAIN)
    uid: str = setting(pattern=_UID)
    qos: Literal["guaranteed", "burstable", "besteffort"] = "burstable"
    containers: list[Container] = setting(min_length=1)

    def _check(self) -> None:
        names = [c.name for c in self.containers]
        if len(set(names)) != len(names):
            raise ValueError(f"pod {self.namespace}/{self.name}: container names repeat")


class SlurmJobSpec(Section):
    job_id: int = setting(ge=1, lt=2**32)
    # The job's user: its cgroup v1 path's uid_N, and the real uid slurmstepd
    # starts its tasks as (/proc/PID/status's Uid).
    uid: int = setting(DEFAULT_UID, ge=0, lt=2**32)
    step: str = setting("0", pattern=r"^(?:\d{1,9}|batch|extern|interactive)$")
    cgroup_version: Literal[1, 2] = 2
    gpus: list[int] = setting(default_factory=list)
    cpu_limit: float | None = setting(None, gt=0)
    memory_limit_bytes: int | None = setting(None, gt=0)
    # The job's cpuset, as slurmd's task/cgroup plugin confines it (cpuset.cpus;
    # cpuset.cpus.effective shows the same); None: every CPU of the node.
    cpus: str | None = setting(None, pattern=_CPULIST)
    pids: list[int] = setting(default_factory=list)
    cgroup: CgroupCondition = CgroupCondition()
    # io.max: the devices its I/O is limited on (none: "max" everywhere).
    io_max: list[IoLimitSpec] = setting(default_factory=list, max_length=64)
    # Its cgroup's figures changing over time, applied in the order of ``at``.
    changes: list[CgroupChange] = setting(default_factory=list)


class Tenants(Section):
    pods: list[Pod] = setting(default_factory=list)
    slurm_jobs: list[SlurmJobSpec] = setting(default_factory=list)
    # Devices the kubelet could give besides those given (GetAllocatableResources).
    free_devices: list[DeviceGrant] = setting(default_factory=list)
    # The kubelet's device-manager checkpoint (each device grant's pod UID) is
    # written beside the PodResources socket; False: absent, as where it is
    # not mounted into the exporter's container.
    device_checkpoint: bool = True

    def _check(self) -> None:
        pids = [p for pod in self.pods for c in pod.containers for p in c.pids]
        pids += [p for job in self.slurm_jobs for p in job.pids]
        if len(set(pids)) != len(pids):
            raise ValueError("a process is listed in more than one container or job")
