"""Plain per-poll readings in base units, shared by the readers that produce
them and the derivations that reason over them (diagnosis, baseline, the
landing page, /diagnosis).

Each reader fills one field of :class:`PollReadings`; a derivation reads the
fields it needs. ``None`` always means "not known this poll" (unsupported,
failed, absent, or the reader is switched off), never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from gpu_exporter.host.nic_topology import DISTANCE
from gpu_exporter.host.nics import NetworkView, RdmaPort
from gpu_exporter.host.pci import PciDevice
from gpu_exporter.host.reading import HostReading


@dataclass(slots=True)
class GpuReading:
    index: int
    uuid: str
    up: bool
    name: str = ""
    pci_bus_id: str = ""
    driver_version: str = ""
    vbios_version: str = ""
    utilization: float | None = None
    memory_utilization: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    # What the driver and firmware keep for themselves (NVML's v2 memory
    # info; None before R510, whose ``used`` counts it instead).
    memory_reserved_bytes: float | None = None
    temperature_celsius: float | None = None
    slowdown_celsius: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    power_default_limit_watts: float | None = None
    clocks_hz: dict[str, float] = field(default_factory=dict)
    clocks_max_hz: dict[str, float] = field(default_factory=dict)
    clocks_application_hz: dict[str, float] = field(default_factory=dict)
    clocks_application_default_hz: dict[str, float] = field(default_factory=dict)
    throttle_reasons: frozenset[str] | None = None
    pcie_generation: int | None = None
    pcie_generation_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: float | None = None
    ecc_enabled: bool | None = None
    ecc_uncorrected_volatile: float | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    persistence_mode: bool | None = None
    # Each fan's speed as NVML reports it (share of its maximum), by fan index;
    # a fan whose call failed this poll is absent. Empty: no fan was read.
    fan_speeds: dict[int, float] = field(default_factory=dict)
    # How many fans NVML counts on the board (0: cooled by the chassis, no fan
    # to judge); None: not read.
    fan_count: int | None = None
    # The driver's own verdicts: its recovery action for the GPU (RECOVERY_ACTIONS
    # name), and the GPU's NVSwitch fabric probe (state, status, health summary).
    recovery_action: str | None = None
    fabric_state: str | None = None
    fabric_status: str | None = None
    fabric_health: str | None = None
    # What NVML does not offer on this GPU, for good (NOT_SUPPORTED, or a
    # function this driver branch lacks: a fact of the board and driver), and
    # what it refuses the exporter (NO_PERMISSION), each as the diagnosis
    # reads it: a field of this reading ("recovery_action"), a clock of one
    # ("clocks_application_hz[sm]"), or a signal of another reader of the GPU
    # ("sm_active" for GPM, "util_samples" for NVML's utilization samples).
    unavailable: frozenset[str] = frozenset()
    refused: frozenset[str] = frozenset()
    # The newest boards (collectors/board.py): a memory channel or TPC repair
    # pending, memory no repair can fix, power smoothing on and the floor it
    # holds the draw at (draw up to it is the smoothing's, not work).
    repair_pending: bool | None = None
    unrepairable_memory: bool | None = None
    power_smoothing: bool | None = None
    power_floor_watts: float | None = None
    # The C2C link's error counters by type (intr, replay, replay_b2b); None
    # on a board without the link or a driver that does not count them.
    c2c_errors: dict[str, float] | None = None
    # NVML's C2C mode: the link to a Grace CPU is on (None: not offered).
    c2c_link: bool | None = None
    # The newest boards' readings and event types the board or its driver
    # does not offer, in a person's words (collectors/board.py).
    board_lacks: tuple[str, ...] = ()


@dataclass(slots=True)
class ProcessReading:
    """A GPU process joined with the host's view of its PID, for one GPU."""

    gpu: int
    pid: int
    comm: str
    memory_used_bytes: float | None
    sm_utilization: float | None
    state: str | None = None  # R, S, D ... from /proc/PID/stat
    cpu_ratio: float | None = None  # CPUs' worth of time since the last poll
    run_queue_wait_ratio: float | None = None  # seconds waiting to run per second
    affinity_local: bool | None = None  # all allowed CPUs local to the GPU's NUMA node
    cpus_allowed: str | None = None  # as a cpulist, for evidence
    container_id: str = ""  # "" when not in a container
    pod_uid: str = ""  # "" when not in a Kubernetes pod
    # The MIG GPU instance it runs on (None without MIG).
    gpu_instance: int | None = None
    # How often it woke up from sleep per second since the last poll (its
    # voluntary context switches): a process asleep for good does not wake.
    wakeups_per_s: float | None = None
    # How many of the children its main thread forked (its loader workers)
    # are blocked in the kernel (D), of how many; None: not read.
    children_blocked: int | None = None
    children: int | None = None


@dataclass(slots=True)
class HostSignals:
    """The host figures the diagnosis rules read (ratios over the last interval)."""

    iowait_ratio: float | None = None
    io_pressure_some: float | None = None
    cpu_pressure_some: float | None = None
    memory_pressure_full: float | None = None
    swap_bytes_per_s: float | None = None  # swap-in plus swap-out
    steal_ratio: float | None = None  # CPU time the hypervisor took (a VM)
    # Thermal throttle events of the host's cores and packages since boot,
    # and seconds throttled (kernels 5.7+); None where the CPUs keep none.
    cpu_thermal_throttles: float | None = None
    cpu_thermal_kept: bool | None = None  # False: the CPUs keep no such counters
    cpu_thermal_throttled_seconds: float | None = None
    # /proc/meminfo's MemTotal and MemAvailable (None before Linux 3.14).
    memory_total_bytes: float | None = None
    memory_available_bytes: float | None = None


@dataclass(slots=True)
class PcieKernelView:
    """The kernel's view of a GPU's PCIe placement (sysfs)."""

    numa_node: int | None = None
    local_cpulist: str | None = None
    upstream_generation: int | None = None
    upstream_generation_max: int | None = None
    upstream_width: int | None = None
    upstream_width_max: int | None = None
    aer_correctable: float | None = None


@dataclass(frozen=True, slots=True)
class GpuNetwork:
    """The node's RDMA ports as one GPU sees them: each port, and how far the
    GPU is from the device behind it (nic_topology.RELATIONS: PIX nearest,
    SYS across the sockets). A GPU's own ports are those nearest it: the
    ones its collectives go out through."""

    ports: tuple[RdmaPort, ...]
    relations: dict[str, str]  # RDMA device (hca) -> relation; absent: not told

    @property
    def nearest(self) -> str | None:
        """The relation of the nearest RDMA device; None: none told."""
        return min(self.relations.values(), key=DISTANCE.__getitem__, default=None)

    @property
    def own_ports(self) -> tuple[RdmaPort, ...]:
        """The ports of the RDMA devices nearest the GPU."""
        nearest = self.nearest
        if nearest is None:
            return ()
        return tuple(p for p in self.ports if self.relations.get(p.hca) == nearest)


@dataclass(frozen=True, slots=True)
class NetworkReading:
    view: NetworkView
    gpus: dict[int, GpuNetwork]  # per GPU index with a known PCI place


@dataclass(frozen=True, slots=True)
class MigReading:
    gpu_instance: int
    compute_instance: int
    uuid: str
    memory_total_bytes: int
    memory_used_bytes: int
    # The MIG device's index on its GPU (NVML's slot; the device plugin's
    # "<gpu>:<index>" IDs name it); None where not known.
    index: int | None = None
    # Its GPU instance profile as NVML names it ("1g.10gb"); "" where NVML
    # cannot say.
    profile: str = ""


@dataclass(frozen=True, slots=True)
class GpmReading:
    sm_active: float | None
    sm_occupancy: float | None
    tensor_active: float | None
    dram_active: float | None


@dataclass(frozen=True, slots=True)
class SampleStats:
    count: int
    min: float
    mean: float
    max: float


@dataclass(frozen=True, slots=True)
class NvlinkReading:
    links: int  # NVLink links the GPU has
    up: int  # of them, active this poll
    # (link, "crc" | "replay" | "recovery") -> the link's error counter, as
    # read this poll (a link whose read failed is left out); on NVLink 5 also
    # "effective" and "symbol", its FEC counts.
    errors: dict[tuple[int, str], float] = field(default_factory=dict)
    # (link, "effective" | "symbol") -> the link's bit-error rate this poll.
    bit_error_rates: dict[tuple[int, str], float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class XidCulprit:
    """The process the driver named for an Xid in the kernel log
    (``pid=4242, name=python3``), with the workload it ran in when the line
    was read: a container of a pod (``pod_uid``, ``container_id``) or a Slurm
    job; all empty when it had exited or could not be read."""

    pid: int
    process: str  # as the driver printed it; escape it for its destination
    pod_uid: str = ""
    container_id: str = ""
    slurm_job_id: str = ""


@dataclass(frozen=True, slots=True)
class XidEvent:
    gpu: int
    uuid: str
    xid: int
    at: float  # unix time it was received (NVML) or logged (the kernel log)
    culprit: XidCulprit | None = None  # from the kernel log's line, where it names one
    source: Literal["nvml", "kernel_log"] = "nvml"
    # The MIG GPU instance NVML names for it (an error of a job on one
    # instance); None for the whole GPU, without MIG, or from the kernel log.
    gpu_instance: int | None = None
    # The NVLink the kernel log's line names (Xid 74), where it names one.
    link: int | None = None
    # How many of the kernel log's lines it stands for: 1 for NVML's event (one
    # Xid each); a log line NVML did not deliver stands for every line of its
    # GPU, code, process and link that NVML did not deliver either.
    lines: int = 1


@dataclass(frozen=True, slots=True)
class KernelXid:
    """One (GPU, code, process, NVLink) of the kernel log's Xid lines since boot."""

    gpu: int
    uuid: str
    xid: int
    culprit: XidCulprit | None
    count: int
    before_start: int  # of count, logged before the exporter started
    first_at: float  # unix times of the first and last line
    last_at: float
    link: int | None = None  # the NVLink an Xid 74 names


@dataclass(slots=True)
class KernelLogReading:
    """What the kernel log said (kmsg reader): its state (``ok`` when read),
    the Xid lines per GPU, code and process, and per GPU and code how many were
    logged before the exporter started and after."""

    state: str
    xids: list[KernelXid] = field(default_factory=list)
    # (gpu, uuid, xid) -> (lines before start, lines after)
    counts: dict[tuple[int, str, int], tuple[int, int]] = field(default_factory=dict)


def filled_by(reader: str) -> Any:
    """A PollReadings field that only ``reader`` fills (None until it has read
    this poll): the field's metadata names it, so what a derivation reads maps
    to the reader it waits on without a second list."""
    return field(default=None, metadata={"reader": reader})


@dataclass(slots=True)
class PollReadings:
    """What the readers read in one poll, each field filled by the reader its
    metadata names (``filled_by``).

    A field stays ``None`` when its reader is switched off or did not get as far
    as reading this poll: a derivation tells "nothing there" (an empty mapping)
    from "nobody looked" (None), and says which inputs it went without.
    """

    # per GPU index, every GPU NVML lists (lost ones with up=False)
    gpus: dict[int, GpuReading] | None = filled_by("device")
    # per GPU index, its MIG instances (GPUs without MIG are absent)
    mig: dict[int, list[MigReading]] | None = filled_by("mig")
    # per GPU index, the GPM ratios over the last interval
    gpm: dict[int, GpmReading] | None = filled_by("gpm")
    # per MIG instance: GPU index -> GPU instance -> its GPM ratios
    gpm_instances: dict[int, dict[int, GpmReading]] | None = filled_by("gpm")
    # the GPUs whose GPM is supported but whose first ratio is still on its
    # way (it needs two samples SAMPLES_EVERY_S apart)
    gpm_pending: set[int] | None = filled_by("gpm")
    # per GPU index, metric name -> summary of NVML's sub-second samples
    samples: dict[int, dict[str, SampleStats]] | None = filled_by("samples")
    # per GPU index with NVLink, its links and how many are up
    nvlink: dict[int, NvlinkReading] | None = filled_by("nvlink")
    # the kernel log's Xid lines (read before xid, which merges them)
    kmsg: KernelLogReading | None = filled_by("kmsg")
    # the most recent Xid events, oldest first (NVML's, and the kernel log's
    # that NVML did not deliver)
    xid: list[XidEvent] | None = filled_by("xid")
    # every exported GPU process, joined with /proc
    processes: list[ProcessReading] | None = filled_by("processes")
    # the host's figures, and the ones the diagnosis rules read
    host: HostReading | None = filled_by("host")
    host_signals: HostSignals | None = filled_by("host")
    # per GPU index, the GPU's PCI device in sysfs, and the kernel's view of it
    pcie: dict[int, PciDevice] | None = filled_by("pcie")
    pcie_view: dict[int, PcieKernelView] | None = filled_by("pcie")
    # the node's NICs and RDMA ports, and each GPU's distance to them
    network: NetworkReading | None = filled_by("network")
    # who holds each GPU, and its workloads' own signals
    attribution: AttributionReading | None = filled_by("attribution")


# PollReadings field -> the reader that fills it.
READER_OF_FIELD: dict[str, str] = {f.name: f.metadata["reader"] for f in fields(PollReadings)}


@dataclass(frozen=True, slots=True)
class GpuOwner:
    """Whose a GPU is: a container of a Kubernetes pod the kubelet allocated
    it to (through the device plugin, or a ResourceClaim: ``claim`` is then
    the claim's ``namespace/name``), or a Slurm job with a process on it.
    Where only a process's cgroup names the pod (a GPU shared by several), the
    pod is known by its UID alone. Empty strings where not known."""

    namespace: str = ""
    pod: str = ""
    container: str = ""
    slurm_job_id: str = ""
    claim: str = ""
    pod_uid: str = ""
    # A Slurm job's user, by its numeric uid (its cgroup v1 path's uid_N, or
    # its processes' real uid): who to ask about the job.
    slurm_uid: str = ""

    def as_dict(self) -> dict[str, str]:
        if self.slurm_job_id:
            user = {"slurm_uid": self.slurm_uid} if self.slurm_uid else {}
            return {"scheduler": "slurm", "slurm_job_id": self.slurm_job_id, **user}
        if not self.pod and self.pod_uid:
            return {"pod_uid": self.pod_uid}
        out = {"namespace": self.namespace, "pod": self.pod, "container": self.container}
        if self.claim:
            out["claim"] = self.claim
        return out

    def describe(self) -> str:
        """``ml/train-a/trainer``, ``ml/train-a/trainer (claim ml/gpus)``, ``pod
        <uid>``, ``slurm job 4242`` or ``slurm job 4242 (uid 2001)``, for people
        (not escaped)."""
        if self.slurm_job_id:
            user = f" (uid {self.slurm_uid})" if self.slurm_uid else ""
            return f"slurm job {self.slurm_job_id}{user}"
        if not self.pod and self.pod_uid:
            return f"pod {self.pod_uid}"
        named = f"{self.namespace}/{self.pod}/{self.container}"
        return f"{named} (claim {self.claim})" if self.claim else named


@dataclass(frozen=True, slots=True)
class WorkloadSignals:
    """One workload's own cgroup signals (a container's or a Slurm job's),
    keyed as its series are; each None where it could not be read."""

    pod_uid: str
    container_id: str
    slurm_job_id: str
    cpu_pressure_some: float | None = None
    io_pressure_some: float | None = None
    memory_pressure_full: float | None = None
    # Share of CPU-limit periods since the last read in which the limit
    # throttled it; None without a limit or before a second read.
    cpu_throttled_ratio: float | None = None
    cpu_limit_cores: float | None = None
    memory_pressure_some: float | None = None
    # Its memory limit (memory.max; None: none), what it uses (memory.current),
    # and since the last read how often it hit the limit (memory.events max)
    # and how much the kernel reclaimed from it at its limit (pgsteal_direct).
    memory_limit_bytes: float | None = None
    memory_used_bytes: float | None = None
    memory_limit_hits_per_s: float | None = None
    memory_reclaimed_bytes_per_s: float | None = None
    # Whether io.max limits it on any device (None: io.max not read: no io
    # controller for its cgroup, cgroup v1), and since the last read the
    # largest share of such a limit its I/O used, on which device (None
    # before a second read, or no traffic counted there).
    io_limited: bool | None = None
    io_limit_used_ratio: float | None = None
    io_limit_device: str | None = None
    # Why none of its cgroup's files could be read (no mount, a private cgroup
    # namespace, permission): a gap the diagnosis names; None when read.
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class OwnerCpu:
    """How an allocated owner (a pod's container) uses the node: whether any
    process of its pod holds a context on a GPU, and how many CPUs' worth of
    time its pod's cgroup used since the last read (None: not read yet, or
    not readable: ``problem`` then says why)."""

    on_gpu: bool
    cpu_cores: float | None = None
    problem: str | None = None


@dataclass(slots=True)
class AttributionReading:
    """Who holds each GPU and how its workloads fare (attribution reader)."""

    # GPU index -> its owners (allocations, then Slurm jobs), each once; a GPU
    # split into MIG instances is every instance's owners'
    owners: dict[int, tuple[GpuOwner, ...]] = field(default_factory=dict)
    # (GPU index, GPU instance) -> the owners of that MIG instance
    instance_owners: dict[tuple[int, int], tuple[GpuOwner, ...]] = field(default_factory=dict)
    # GPU index -> the workloads of its processes, with their own signals
    workloads: dict[int, tuple[WorkloadSignals, ...]] = field(default_factory=dict)
    # Whether the kubelet's allocations are known (it answered at least once)
    allocations_known: bool = False
    # Each allocated owner whose pod the exporter could place (its pod UID
    # known from the kubelet's device-plugin checkpoint): absent, not judged.
    owner_cpu: dict[GpuOwner, OwnerCpu] = field(default_factory=dict)
