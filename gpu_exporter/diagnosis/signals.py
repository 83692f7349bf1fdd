"""What the rules look at for one GPU in one poll, gathered from the readers'
typed readings. Anything a reader could not see, or did not read because it is
switched off, is None, and a rule that needs it does not judge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from gpu_exporter.poll.readings import (
    READER_OF_FIELD,
    AttributionReading,
    GpmReading,
    GpuNetwork,
    GpuOwner,
    GpuReading,
    HostSignals,
    MigReading,
    OwnerCpu,
    PcieKernelView,
    PollReadings,
    ProcessReading,
    WorkloadSignals,
    XidCulprit,
)


def read_from(*sources: str, **default: Any) -> Any:
    """A GpuSignals field that gather() fills from the PollReadings field
    ``sources`` names (and so waits on the reader that fills it): one, or
    one per kind of place (a GPU's, a MIG instance's), all of one reader."""
    return field(metadata={"sources": sources}, **default)


@dataclass(frozen=True, slots=True)
class XidBlame:
    """The process the driver named for an Xid on the GPU, and whose it is."""

    at: float  # unix time of the Xid
    xid: int
    process: str  # "python3 (pid 4242)", not escaped
    owner: GpuOwner | None  # None: a host process, or gone before it was read
    pid: int | None = None
    # How many of the kernel log's lines of the process it stands for (an
    # application fault comes in bursts of lines).
    lines: int = 1


def owner_of(culprit: XidCulprit, owners: tuple[GpuOwner, ...],
             jobs: Mapping[str, GpuOwner] | None = None) -> GpuOwner | None:
    """Whose the process an Xid line names is: its Slurm job; for a process
    in a pod's container, the container the GPU is allocated to when it is
    allocated to one, else the pod by its UID (the kubelet names containers,
    the cgroup only UIDs, so on a GPU shared by several the UID is what is
    known); None for a host process."""
    if culprit.slurm_job_id:
        # The node's record of the job (``jobs``), with its user, where it
        # has one.
        return (jobs or {}).get(culprit.slurm_job_id, GpuOwner(slurm_job_id=culprit.slurm_job_id))
    if not culprit.pod_uid:
        return None
    pods = [o for o in owners if o.pod]
    if len(pods) == 1:
        return pods[0]
    return GpuOwner(pod_uid=culprit.pod_uid)


@dataclass(slots=True)
class GpuSignals:
    """What the rules see of one place in one poll: a GPU, or one MIG instance
    of a GPU split into instances (``gpu_instance``), which the rows of what
    runs on a GPU judge like a GPU of its own. Each field names the
    PollReadings field it is gathered from: the diagnosis's inputs, and the
    reader behind each value it went without, follow from these declarations."""

    index: int = read_from("gpus")
    uuid: str = read_from("gpus")
    gpu: GpuReading = read_from("gpus")
    host: HostSignals | None = read_from("host_signals")
    pcie: PcieKernelView | None = read_from("pcie_view")
    processes: list[ProcessReading] = read_from("processes", default_factory=list)
    # GPM's SM activity: a GPU's, or an instance's own
    sm_active: float | None = read_from("gpm", "gpm_instances", default=None)
    # min, mean, max of NVML's utilization samples
    util_samples: tuple[float, float, float] | None = read_from("samples", default=None)
    # (unix time, xid, the MIG instance NVML named for it or None)
    xids: list[tuple[float, int, int | None]] = read_from("xid", default_factory=list)
    # The processes the kernel log names for those Xids, where it does.
    xid_blames: list[XidBlame] = read_from("xid", default_factory=list)
    processes_known: bool = read_from("processes", default=False)  # the process reader ran
    # Whose the GPU (or instance) is (allocations, Slurm jobs), and the own
    # cgroup signals of the workloads of its processes: preferred over the host's.
    owners: tuple[GpuOwner, ...] = read_from("attribution", default=())
    workloads: tuple[WorkloadSignals, ...] = read_from("attribution", default=())
    # The kubelet's allocations are known (None: attribution not read)
    allocations_known: bool | None = read_from("attribution", default=None)
    # NVLink links the GPU has (0: none, so no NVSwitch fabric either; None:
    # the nvlink reader did not run). No rule judges it; the diagnosis's
    # coverage reads it to tell "no fabric here" from "fabric not read".
    nvlink_links: int | None = read_from("nvlink", default=None)
    # The GPU is split into MIG instances; this place is the GPU itself
    # (``gpu_instance`` None) or one of them.
    mig: bool = read_from("mig", default=False)
    gpu_instance: int | None = read_from("mig", default=None)
    compute_instance: int | None = read_from("mig", default=None)
    instance_memory: tuple[float, float] | None = read_from("mig", default=None)  # (used, total)
    # GPM is supported here but its first ratio has not come yet
    gpm_pending: bool = read_from("gpm_pending", default=False)
    # (unix time, xid, link) of the Xids whose kernel log line names an
    # NVLink (Xid 74), a GPU's only (links are the board's, not an instance's)
    xid_links: list[tuple[float, int, int]] = read_from("xid", default_factory=list)
    # Each NVLink link's error counters, (link, kind) -> count (None: the
    # nvlink reader did not run, or the GPU has no NVLink).
    nvlink_errors: dict[tuple[int, str], float] | None = read_from("nvlink", default=None)
    # NVLink 5: each link's bit-error rates, (link, "effective" | "symbol") -> rate.
    nvlink_bit_error_rates: dict[tuple[int, str], float] = read_from(
        "nvlink", default_factory=dict)
    # The Xid reader ran: without it ``xids`` is empty for want of a reader,
    # not for want of an Xid, and the Xid rows cannot be judged. gather()
    # always says which; a place built by hand has its Xids given.
    xids_known: bool = read_from("xid", default=True)
    # GPM's DRAM bandwidth use and tensor pipe activity, beside sm_active
    # (None without GPM): what the place's kernels wait on.
    dram_active: float | None = read_from("gpm", "gpm_instances", default=None)
    tensor_active: float | None = read_from("gpm", "gpm_instances", default=None)
    # The node's RDMA ports and the GPU's distance to each RDMA device (None:
    # the network reader did not run, or the GPU's PCI place is not known).
    network: GpuNetwork | None = read_from("network", default=None)
    # The node's allocated owners whose pod is placed: whether the pod has a
    # process on a GPU, and its cgroup's CPU use where none does.
    owner_cpu: dict[GpuOwner, OwnerCpu] = read_from("attribution", default_factory=dict)
    # Every owner that can hold a GPU here is named by a source the exporter
    # reads: False on a node running Slurm jobs, whose GPUs no unprivileged
    # source names (a Slurm job is seen only through its processes).
    gpu_holders_known: bool = read_from("attribution", default=True)

    @property
    def memory_used_ratio(self) -> float | None:
        if self.instance_memory is not None:
            used, total = self.instance_memory
            return used / total if total else None
        if self.mig:
            return None  # a split GPU's memory is its instances'
        # The share of what processes can allocate: the driver's reserve is
        # never theirs (v2's ``used`` leaves it out; v1's counts it, and has
        # no reserve to take off).
        g = self.gpu
        if g.memory_used_bytes is None or not g.memory_total_bytes:
            return None
        usable = g.memory_total_bytes - (g.memory_reserved_bytes or 0.0)
        return g.memory_used_bytes / usable if usable > 0 else None

    @property
    def load(self) -> float | None:
        """How busy the place is: NVML's utilization for a GPU, GPM's SM
        activity for a MIG instance (None without GPM: NVML has no
        utilization for an instance, nor for a GPU split into instances)."""
        if self.gpu_instance is not None:
            return self.sm_active
        return None if self.mig else self.gpu.utilization


# GpuSignals field -> the PollReadings fields it is gathered from, and the reader behind them.
SOURCES_OF_SIGNAL: dict[str, tuple[str, ...]] = {
    f.name: f.metadata["sources"] for f in fields(GpuSignals)}
READER_OF_SIGNAL: dict[str, str] = {
    name: READER_OF_FIELD[sources[0]] for name, sources in SOURCES_OF_SIGNAL.items()}
_mixed = {name for name, sources in SOURCES_OF_SIGNAL.items()
          if {READER_OF_FIELD[s] for s in sources} != {READER_OF_SIGNAL[name]}}
if _mixed:  # pragma: no cover - a programming error, caught at import
    raise ImportError(f"signals gathered from more than one reader: {sorted(_mixed)}")
# What the diagnosis reads: per reader (the ``input`` label of
# gpu_diagnosis_input_missing), the PollReadings fields it fills that the
# signals are gathered from. A reader switched off leaves them None, and the
# rows that need them unjudged.
_SOURCES = tuple(dict.fromkeys(s for sources in SOURCES_OF_SIGNAL.values() for s in sources))
INPUTS: dict[str, tuple[str, ...]] = {
    reader: tuple(source for source in _SOURCES if READER_OF_FIELD[source] == reader)
    for reader in dict.fromkeys(READER_OF_SIGNAL.values())}


def missing_inputs(readings: PollReadings) -> tuple[str, ...]:
    """The readers whose readings the rules went without this poll."""
    return tuple(reader for reader, names in INPUTS.items()
                 if any(getattr(readings, name) is None for name in names))


def gather(readings: PollReadings) -> list[GpuSignals]:
    """One GpuSignals per GPU the device reader read (none without it), and
    one per MIG instance of each GPU split into instances."""
    gpus = readings.gpus or {}
    host = readings.host_signals
    pcie = readings.pcie_view or {}
    procs = readings.processes
    gpm = readings.gpm or {}
    gpm_instances = readings.gpm_instances or {}
    gpm_pending = readings.gpm_pending or set()
    samples = readings.samples or {}
    xids = readings.xid or []
    attribution = readings.attribution
    nvlink = readings.nvlink
    mig = readings.mig or {}
    network = readings.network
    slurm_jobs = {} if attribution is None else {
        o.slurm_job_id: o for owners in attribution.owners.values() for o in owners
        if o.slurm_job_id}
    slurm_free = not slurm_jobs
    out = []
    for index, reading in sorted(gpus.items()):
        sig = GpuSignals(index, reading.uuid, reading, host, pcie.get(index))
        if procs is not None:
            sig.processes_known = True
            sig.processes = [p for p in procs if p.gpu == index]
        g = gpm.get(index)
        if g is not None:
            sig.sm_active = g.sm_active
            sig.dram_active, sig.tensor_active = g.dram_active, g.tensor_active
        sig.gpm_pending = index in gpm_pending
        util = samples.get(index, {}).get("gpu_utilization_samples_ratio")
        if util is not None:
            sig.util_samples = (util.min, util.mean, util.max)
        sig.xids = [(e.at, e.xid, e.gpu_instance) for e in xids if e.gpu == index]
        sig.xids_known = readings.xid is not None
        if attribution is not None:
            sig.owners = attribution.owners.get(index, ())
            sig.workloads = attribution.workloads.get(index, ())
            sig.allocations_known = attribution.allocations_known
            sig.owner_cpu = attribution.owner_cpu
            sig.gpu_holders_known = slurm_free
        sig.xid_blames = [
            XidBlame(e.at, e.xid, f"{e.culprit.process or '?'} (pid {e.culprit.pid})",
                     owner_of(e.culprit, sig.owners, slurm_jobs), e.culprit.pid, e.lines)
            for e in xids if e.gpu == index and e.culprit is not None]
        sig.xid_links = [(e.at, e.xid, e.link) for e in xids
                         if e.gpu == index and e.link is not None]
        if nvlink is not None:
            links = nvlink.get(index)
            sig.nvlink_links = 0 if links is None else links.links
            sig.nvlink_errors = None if links is None else links.errors
            if links is not None:
                sig.nvlink_bit_error_rates = links.bit_error_rates
        if network is not None:
            sig.network = network.gpus.get(index)
        out.append(sig)
        instances = mig.get(index)
        if instances:
            sig.mig = True
            out += [_instance(sig, m, gpm_instances.get(index, {}).get(m.gpu_instance),
                              attribution) for m in instances]
            sig.processes = [p for p in sig.processes if p.gpu_instance is None]
    return out


def _instance(gpu: GpuSignals, m: MigReading, activity: GpmReading | None,
              attribution: AttributionReading | None) -> GpuSignals:
    """The place of MIG instance ``m`` of ``gpu``: its own memory, activity,
    processes, owners and their workloads; the GPU's host and link."""
    procs = [p for p in gpu.processes if p.gpu_instance == m.gpu_instance]
    owners: tuple[GpuOwner, ...] = ()
    workloads: tuple[WorkloadSignals, ...] = ()
    if attribution is not None:
        owners = attribution.instance_owners.get((gpu.index, m.gpu_instance), ())
        mine = {(p.pod_uid, p.container_id) for p in procs}
        workloads = tuple(w for w in gpu.workloads
                          if (w.pod_uid, w.container_id) in mine or w.slurm_job_id)
    return GpuSignals(gpu.index, gpu.uuid, gpu.gpu, gpu.host, gpu.pcie, procs,
                      None if activity is None else activity.sm_active, None, gpu.xids,
                      [b for b in gpu.xid_blames if b.owner in owners],
                      gpu.processes_known, owners, workloads, gpu.allocations_known,
                      gpu.nvlink_links, mig=True, gpu_instance=m.gpu_instance,
                      compute_instance=m.compute_instance,
                      instance_memory=(float(m.memory_used_bytes),
                                       float(m.memory_total_bytes)),
                      xids_known=gpu.xids_known,
                      dram_active=None if activity is None else activity.dram_active,
                      tensor_active=None if activity is None else activity.tensor_active,
                      owner_cpu=gpu.owner_cpu, gpu_holders_known=gpu.gpu_holders_known)
