"""Whose GPU it is, and how that workload fares by its own signals.

Three sources, one reader:

* the kubelet's PodResources API (``--kubernetes.pod-resources-socket``): the
  GPUs and MIG devices allocated to each container, by the device plugin or
  through a ResourceClaim (DRA), as ``gpu_allocation_info``;
* the GPU processes' cgroups: the Slurm job of each, as ``gpu_job_info``;
* the cgroup (v2) of each workload with a process on a GPU: its own pressure,
  CPU-limit throttling and OOM kills, one set per workload (not per process).

The kubelet is asked off the poll path: a ``PodResourcesWatcher`` refreshes on
its own thread with a bounded deadline, and a poll only takes its last
snapshot, so a missing, unreadable or hung kubelet never delays a poll (its
state and failures are self metrics, each change of state one log line).
Under a virtual clock (tests, ``diagnose --simulate``) the refresh runs inside
collect() every ``refresh_every`` seconds of that clock instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Self

from gpu_exporter.attribution.cgroup_pressure import (
    RESOURCES,
    CgroupSignals,
    IoCounters,
    io_limit_use,
)
from gpu_exporter.attribution.cgroup_tree import CgroupTree, Problem, discover
from gpu_exporter.attribution.gpu_owners import (
    GpuIdentity,
    MigIdentity,
    allocation_rows,
    job_rows,
)
from gpu_exporter.attribution.grouping import (
    Workload,
    group_by_workload,
    read_cgroups,
    workload_of,
    workload_signals,
)
from gpu_exporter.attribution.pod_cpu import (
    CheckpointReader,
    checkpoint_path,
    cores_since,
    pod_cpu_seconds,
    pod_uids,
)
from gpu_exporter.attribution.podresources import Allocations, PodResourcesWatcher, Status
from gpu_exporter.attribution.slurm import SlurmJob, job_from_cgroup, read_job
from gpu_exporter.catalogs.attribution import (
    ALLOCATION_INFO,
    EXPORTER_CGROUP_LAYOUT_INFO,
    EXPORTER_POD_RESOURCES_FAILURES_TOTAL,
    EXPORTER_POD_RESOURCES_STATE,
    EXPORTER_WORKLOAD_CGROUPS,
    IO_DEVICES_PER_WORKLOAD,
    JOB_INFO,
    OWNER_SM_SHARE_RATIO,
    WORKLOAD_CPU_LIMIT_CORES,
    WORKLOAD_CPU_PERIODS_TOTAL,
    WORKLOAD_CPU_THROTTLED_PERIODS_TOTAL,
    WORKLOAD_CPU_THROTTLED_SECONDS_TOTAL,
    WORKLOAD_IO_BYTES_TOTAL,
    WORKLOAD_IO_LIMIT_BYTES_PER_SECOND,
    WORKLOAD_IO_LIMIT_OPERATIONS_PER_SECOND,
    WORKLOAD_IO_OPERATIONS_TOTAL,
    WORKLOAD_MEMORY_LIMIT_BYTES,
    WORKLOAD_MEMORY_LIMIT_HITS_TOTAL,
    WORKLOAD_MEMORY_RECLAIMED_BYTES_TOTAL,
    WORKLOAD_MEMORY_USED_BYTES,
    WORKLOAD_OOM_KILLS_TOTAL,
    WORKLOAD_PRESSURE_RATIO,
    WORKLOAD_PRESSURE_STALLED_SECONDS_TOTAL,
)
from gpu_exporter.collectors.base import Collector
from gpu_exporter.host.nvidia_proc import device_minor
from gpu_exporter.host.procs import PAGE_SIZE
from gpu_exporter.nvml.session import NvmlSession
from gpu_exporter.poll.readings import (
    AttributionReading,
    GpuOwner,
    OwnerCpu,
    PollReadings,
    ProcessReading,
    WorkloadSignals,
)
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import SnapshotBuilder

log = logging.getLogger(__name__)

# How often the kubelet is asked, and how long one call may take. Pods come
# and go over seconds to minutes; a 2 s deadline is far beyond a healthy
# kubelet's few milliseconds and still ends a hung call well before the next.
REFRESH_EVERY_S = 10.0
CALL_TIMEOUT_S = 2.0
# The cgroup tree is looked at again this often while the exporter's own
# cgroup is not found in it (a mount that appears later); once found, never:
# neither the mounts nor the exporter's own cgroup move under it.
TREE_RETRY_S = 60.0
_CGROUP_STATES = ("read", *(p.name.lower() for p in Problem))


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


def _whose(cgroup: str | None, job: SlurmJob | None) -> str:
    """A process's owner as gpu_owner_sm_share_ratio names it: its Slurm job
    (as gpu:gpu_owner:info does), its pod's container by UID and container
    id (the kubelet names containers, a process's cgroup only these), or
    "host"."""
    if job is not None:
        return GpuOwner(slurm_job_id=job.job_id).describe()
    workload = workload_of(cgroup) if cgroup is not None else None
    if workload is None:
        return "host"
    if workload.kind == "slurm_job":
        return GpuOwner(slurm_job_id=workload.id).describe()
    if workload.pod_uid:
        return f"pod {workload.pod_uid} container {workload.id[:12]}"
    return f"container {workload.id[:12]}"


class AttributionCollector(Collector):
    name = "attribution"
    description = ("who holds each GPU (kubelet PodResources, Slurm cgroups) and each "
                   "workload's own cgroup pressure and CPU throttling")
    settings = (lambda s: s.kubernetes.pod_resources_socket, lambda s: s.path.procfs,
                lambda s: s.path.sysfs)

    def __init__(self, session: NvmlSession, socket_path: str, procfs: Path,
                 cgroup_root: Path, monotonic: Callable[[], float],
                 synchronous: bool = False, refresh_every: float = REFRESH_EVERY_S,
                 call_timeout: float = CALL_TIMEOUT_S) -> None:
        self.session = session
        self.procfs = procfs
        self.cgroup_root = cgroup_root
        self._mono = monotonic
        self._synchronous = synchronous
        self._refresh_every = refresh_every
        self._next_refresh: float | None = None
        self.watcher: PodResourcesWatcher | None = None
        self._checkpoint = CheckpointReader(checkpoint_path(socket_path) if socket_path else "")
        # pod UID -> (monotonic time, CPU seconds its cgroup used) at the last read
        self._pod_cpu_before: dict[str, tuple[float, float]] = {}
        if socket_path:
            self.watcher = PodResourcesWatcher(socket_path, refresh_every, call_timeout,
                                               clock=monotonic)
        # GPU bus id -> its device minor (the DRA driver's name for it), once read
        self._minors: dict[str, int | None] = {}
        # workload cgroup -> (nr_periods, nr_throttled) at the last read
        self._cpu_before: dict[str, tuple[int, int]] = {}
        self._uuids: dict[int, str] = {}
        # workload cgroup -> (when, memory limit hits, pages reclaimed at the
        # limit) at the last read
        self._memory_before: dict[str, tuple[float, int | None, int | None]] = {}
        self._memory_seen: dict[str, tuple[float, int | None, int | None]] = {}
        # workload cgroup -> (when, io.stat by device) at the last read, and this one
        self._io_before: dict[str, tuple[float, dict[str, IoCounters]]] = {}
        self._io_seen: dict[str, tuple[float, dict[str, IoCounters]]] = {}
        self._errors = 0
        self._tree: CgroupTree | None = None
        self._tree_at = 0.0

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        s = rt.settings
        return cls(rt.session, s.kubernetes.pod_resources_socket, s.path.procfs,
                   s.path.sysfs / "fs" / "cgroup", rt.monotonic, rt.synchronous)

    def errors(self) -> int:
        return self._errors

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.close()

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        self._uuids = {gpu.index: gpu.identity.uuid for gpu in self.session.gpus}
        reading = AttributionReading()
        out.readings.attribution = reading
        owners: dict[int, dict[GpuOwner, None]] = {}
        snap = None
        if self.watcher is not None:
            snap = self._kubelet(out)
            self._allocations(out, snap, owners, reading)
        procs = out.readings.processes
        states = dict.fromkeys(_CGROUP_STATES, 0)
        if procs:
            whose = self._processes(out, out.readings, owners, reading, states)
            self._shares(out, procs, owners, whose)
            tree = self._tree
        else:
            tree = self._cgroup_tree(out)
        if snap is not None and procs is not None and tree is not None:
            self._owner_cpu(snap, procs, tree, reading)
        # Every state, always: a node with no workload says so with zeros.
        for state, count in states.items():
            out.add(EXPORTER_WORKLOAD_CGROUPS, count, state=state)
        reading.owners = {gpu: tuple(found) for gpu, found in sorted(owners.items())}

    # --- the kubelet ------------------------------------------------------------
    def _kubelet(self, out: SnapshotBuilder) -> Allocations:
        assert self.watcher is not None
        if not self._synchronous:
            # Started by the first poll, not when built: an exporter that fails
            # to start (a port in use) never asks the kubelet.
            self.watcher.start()
        else:
            now = self._mono()
            if self._next_refresh is None or now >= self._next_refresh:
                self._next_refresh = now + self._refresh_every
                self.watcher.refresh()
        snap = self.watcher.snapshot()
        for state in Status:
            out.add(EXPORTER_POD_RESOURCES_STATE, snap.status == state, state=state.value)
        out.add(EXPORTER_POD_RESOURCES_FAILURES_TOTAL, snap.failures)
        return snap

    def _identities(self, readings: PollReadings, minors: bool) -> list[GpuIdentity]:
        """The node's GPUs and MIG devices; with ``minors``, each GPU's device
        minor too (only DRA names need it: read then, and kept)."""
        mig = readings.mig or {}
        return [GpuIdentity(gpu.index, gpu.identity.uuid, tuple(
                    MigIdentity(m.uuid, m.index if m.index is not None else slot,
                                m.gpu_instance, m.compute_instance, m.profile)
                    for slot, m in enumerate(mig.get(gpu.index, []))),
                    self._minor(gpu.identity.pci_bus_id) if minors else None)
                for gpu in self.session.gpus]

    def _minor(self, bus_id: str) -> int | None:
        if bus_id not in self._minors:
            self._minors[bus_id] = device_minor(self.procfs, bus_id)
        return self._minors[bus_id]

    def _allocations(self, out: SnapshotBuilder, snap: Allocations,
                     owners: dict[int, dict[GpuOwner, None]],
                     reading: AttributionReading) -> None:
        reading.allocations_known = snap.updated_at is not None
        if not snap.allocations:
            return
        dra = any(a.claim is not None for a in snap.allocations)
        rows, _unplaced = allocation_rows(snap.allocations, self._identities(out.readings, dra))
        for row in rows:
            p, o, c = row.placement, row.owner, row.claim
            out.add(ALLOCATION_INFO, 1, gpu=str(p.gpu), uuid=p.uuid,
                    gpu_instance=_opt(p.gpu_instance), compute_instance=_opt(p.compute_instance),
                    namespace=o.namespace, pod=o.pod, container=o.container,
                    resource=row.resource, claim_namespace=c.namespace if c else "",
                    claim=c.name if c else "")
            owner = GpuOwner(o.namespace, o.pod, o.container,
                             claim=f"{c.namespace}/{c.name}" if c else "")
            owners.setdefault(p.gpu, {})[owner] = None
            if p.gpu_instance is not None:
                held = reading.instance_owners.get((p.gpu, p.gpu_instance), ())
                if owner not in held:
                    reading.instance_owners[(p.gpu, p.gpu_instance)] = (*held, owner)

    def _owner_cpu(self, snap: Allocations, procs: list[ProcessReading], tree: CgroupTree,
                   reading: AttributionReading) -> None:
        """Each allocated owner whose pod UID the device manager's checkpoint
        gives: whether its pod has a process on a GPU and, where none does,
        how busy its pod's cgroup is on the CPU (pod_cpu.py)."""
        grants = self._checkpoint.grants() if snap.allocations else None
        if grants is None:
            self._pod_cpu_before = {}
            return
        on_gpu = {p.pod_uid for p in procs if p.pod_uid}
        now = self._mono()
        seen: dict[str, tuple[float, float]] = {}
        for owner, uid in pod_uids(snap.allocations, grants).items():
            key = GpuOwner(owner.namespace, owner.pod, owner.container)
            if uid in on_gpu:
                reading.owner_cpu[key] = OwnerCpu(on_gpu=True)
                continue
            used = pod_cpu_seconds(tree, uid)
            if isinstance(used, str):
                reading.owner_cpu[key] = OwnerCpu(on_gpu=False, problem=used)
                continue
            seen[uid] = (now, used)
            reading.owner_cpu[key] = OwnerCpu(
                on_gpu=False, cpu_cores=cores_since(self._pod_cpu_before, uid, now, used))
        self._pod_cpu_before = seen

    # --- the GPU processes' jobs and workloads ------------------------------------
    def _processes(self, out: SnapshotBuilder, readings: PollReadings,
                   owners: dict[int, dict[GpuOwner, None]],
                   reading: AttributionReading, states: dict[str, int]) -> dict[int, str]:
        """Export the GPUs' Slurm jobs and their workloads' signals, counting
        each workload in ``states`` by how its cgroup was read; return whose
        each process is (the owner label of gpu_owner_sm_share_ratio)."""
        procs = readings.processes or []
        uuids = {gpu.index: gpu.identity.uuid for gpu in self.session.gpus}
        process_gpus: dict[int, set[tuple[int, str]]] = {}
        for p in procs:
            if p.gpu in uuids:
                process_gpus.setdefault(p.pid, set()).add((p.gpu, uuids[p.gpu]))
        cgroups = read_cgroups(self.procfs, process_gpus)
        jobs = self._jobs(cgroups, process_gpus)
        for row in job_rows(process_gpus, jobs):
            out.add(JOB_INFO, 1, gpu=str(row.gpu), uuid=row.uuid, scheduler="slurm",
                    slurm_job_id=row.job_id, slurm_uid=_opt(row.uid),
                    slurm_step=row.step or "")
            owners.setdefault(row.gpu, {})[
                GpuOwner(slurm_job_id=row.job_id, slurm_uid=_opt(row.uid))] = None
        # A Slurm job with a process on a MIG instance holds that instance:
        # its findings and its job name the job, as a pod's name the pod.
        for p in procs:
            job = jobs.get(p.pid)
            if job is not None and p.gpu_instance is not None:
                owner = GpuOwner(slurm_job_id=job.job_id, slurm_uid=_opt(job.uid))
                held = reading.instance_owners.get((p.gpu, p.gpu_instance), ())
                if owner not in held:
                    reading.instance_owners[(p.gpu, p.gpu_instance)] = (*held, owner)
        groups = group_by_workload(cgroups)
        tree = self._cgroup_tree(out)
        signals = workload_signals(tree, groups)
        seen: dict[str, tuple[int, int]] = {}
        self._memory_seen = {}
        self._io_seen = {}
        per_gpu: dict[int, dict[WorkloadSignals, None]] = {}
        for workload, pids in groups.items():
            found = signals.get(workload)
            if found is None:
                continue
            if found.problem is not None:
                states[self._problem_state(tree, found.problem)] += 1
                keys = self._keys(workload)
                own = WorkloadSignals(keys["pod_uid"], keys["container_id"],
                                      keys["slurm_job_id"], problem=found.problem)
            else:
                states["read"] += 1
                own = self._export_workload(out, workload, found, seen)
            for pid in pids:
                for gpu, _uuid in process_gpus.get(pid, ()):
                    per_gpu.setdefault(gpu, {})[own] = None
        self._cpu_before = seen
        self._memory_before = self._memory_seen
        self._io_before = self._io_seen
        reading.workloads = {gpu: tuple(w) for gpu, w in sorted(per_gpu.items())}
        return {pid: _whose(cgroups.get(pid), jobs.get(pid)) for pid in process_gpus}

    def _shares(self, out: SnapshotBuilder, procs: list[ProcessReading],
                owners: dict[int, dict[GpuOwner, None]], whose: dict[int, str]) -> None:
        """On each GPU with more than one owner, each owner's share of the SM
        time its processes used (NVML's per-process samples): how the GPU's
        energy is split between them. Absent where NVML gives no samples or
        no process ran kernels: the split is not known there."""
        for gpu, found in sorted(owners.items()):
            if len(found) < 2:
                continue
            used: dict[str, float] = {}
            known = True
            for p in procs:
                if p.gpu != gpu:
                    continue
                if p.sm_utilization is None:
                    known = False
                    break
                owner = whose.get(p.pid, "host")
                used[owner] = used.get(owner, 0.0) + p.sm_utilization
            total = sum(used.values())
            if not known or total <= 0:
                continue
            uuid = self._uuids.get(gpu, "")
            for owner, sm in sorted(used.items()):
                out.add(OWNER_SM_SHARE_RATIO, sm / total, gpu=str(gpu), uuid=uuid,
                        owner=owner)

    def _jobs(self, cgroups: dict[int, str],
              pids: Iterable[int]) -> dict[int, SlurmJob]:
        """Each process's Slurm job. Its ancestors are looked at only for a
        process whose cgroup names no container (a container's processes are
        the kubelet's)."""
        jobs: dict[int, SlurmJob] = {}
        for pid in pids:
            text = cgroups.get(pid)
            if text is not None and job_from_cgroup(text) is None and workload_of(text):
                continue
            job = read_job(self.procfs, pid)
            if job is not None:
                jobs[pid] = job
        return jobs

    # --- the cgroup tree ----------------------------------------------------------------
    def _cgroup_tree(self, out: SnapshotBuilder) -> CgroupTree:
        """The host's cgroup hierarchies, found at the first poll with a
        workload and kept once the exporter's own cgroup is placed in them."""
        now = self._mono()
        tree = self._tree
        if tree is None or (self._unplaced(tree) and now - self._tree_at >= TREE_RETRY_S):
            tree = discover(self.cgroup_root)
            if self._tree is None or tree != self._tree:
                log.info("cgroup tree at %s: layout %s, namespace %s", tree.root, tree.layout,
                         self._namespace(tree))
            self._tree, self._tree_at = tree, now
        out.add(EXPORTER_CGROUP_LAYOUT_INFO, 1, layout=tree.layout,
                namespace=self._namespace(tree))
        return tree

    @staticmethod
    def _hierarchies(tree: CgroupTree) -> list[tuple[str, ...] | None]:
        return [h.ns_root for h in (tree.unified, tree.cpu, tree.memory) if h is not None]

    def _unplaced(self, tree: CgroupTree) -> bool:
        roots = self._hierarchies(tree)
        return not roots or any(r is None for r in roots)

    def _namespace(self, tree: CgroupTree) -> str:
        roots = self._hierarchies(tree)
        if not roots or any(r is None for r in roots):
            return "unknown"
        return "host" if all(r == () for r in roots) else "private"

    @staticmethod
    def _problem_state(tree: CgroupTree, text: str) -> str:
        for problem in Problem:
            if tree.problem_text(problem) == text:
                return problem.name.lower()
        return "not_found"

    @staticmethod
    def _keys(workload: Workload) -> dict[str, str]:
        if workload.kind == "slurm_job":
            return {"pod_uid": "", "container_id": "", "slurm_job_id": workload.id}
        return {"pod_uid": workload.pod_uid, "container_id": workload.id, "slurm_job_id": ""}

    def _export_workload(self, out: SnapshotBuilder, workload: Workload,
                         sig: CgroupSignals,
                         seen: dict[str, tuple[int, int]]) -> WorkloadSignals:
        keys = self._keys(workload)
        for resource in RESOURCES:
            pressure = getattr(sig, resource)
            if pressure is None:
                continue
            for kind, stall in (("some", pressure.some), ("full", pressure.full)):
                if stall is not None:
                    out.add(WORKLOAD_PRESSURE_RATIO, stall.avg10, **keys,
                            resource=resource, kind=kind)
                    out.add(WORKLOAD_PRESSURE_STALLED_SECONDS_TOTAL,
                            stall.total_seconds, **keys, resource=resource, kind=kind)
        throttled_ratio = None
        stat = sig.cpu_stat
        if stat is not None:
            if stat.nr_periods is not None:
                out.add(WORKLOAD_CPU_PERIODS_TOTAL, stat.nr_periods, **keys)
            if stat.nr_throttled is not None:
                out.add(WORKLOAD_CPU_THROTTLED_PERIODS_TOTAL, stat.nr_throttled, **keys)
            if stat.throttled_seconds is not None:
                out.add(WORKLOAD_CPU_THROTTLED_SECONDS_TOTAL, stat.throttled_seconds,
                        **keys)
            if stat.nr_periods is not None and stat.nr_throttled is not None:
                now = (stat.nr_periods, stat.nr_throttled)
                seen[sig.cgroup] = now
                before = self._cpu_before.get(sig.cgroup)
                if before is not None and now[0] > before[0] and now[1] >= before[1]:
                    throttled_ratio = min(1.0, (now[1] - before[1]) / (now[0] - before[0]))
        limit = sig.cpu_limit.cores if sig.cpu_limit is not None else None
        if limit is not None:
            out.add(WORKLOAD_CPU_LIMIT_CORES, limit, **keys)
        if sig.oom_kills is not None:
            out.add(WORKLOAD_OOM_KILLS_TOTAL, sig.oom_kills, **keys)
        state = sig.memory_state
        if state is not None:
            if state.limit_bytes is not None:
                out.add(WORKLOAD_MEMORY_LIMIT_BYTES, state.limit_bytes, **keys)
            if state.used_bytes is not None:
                out.add(WORKLOAD_MEMORY_USED_BYTES, state.used_bytes, **keys)
            if state.limit_hits is not None:
                out.add(WORKLOAD_MEMORY_LIMIT_HITS_TOTAL, state.limit_hits, **keys)
            if state.reclaimed_pages is not None:
                out.add(WORKLOAD_MEMORY_RECLAIMED_BYTES_TOTAL,
                        state.reclaimed_pages * PAGE_SIZE, **keys)
        memory = self._memory(sig)
        io = self._io(out, sig, keys)
        return WorkloadSignals(
            keys["pod_uid"], keys["container_id"], keys["slurm_job_id"],
            cpu_pressure_some=sig.cpu.some.avg10 if sig.cpu else None,
            io_pressure_some=sig.io.some.avg10 if sig.io else None,
            memory_pressure_full=(sig.memory.full.avg10
                                  if sig.memory and sig.memory.full else None),
            cpu_throttled_ratio=throttled_ratio if limit is not None else None,
            cpu_limit_cores=limit,
            memory_pressure_some=sig.memory.some.avg10 if sig.memory else None,
            **memory, **io)

    def _io(self, out: SnapshotBuilder, sig: CgroupSignals,
            keys: dict[str, str]) -> dict[str, Any]:
        """The workload's io.max limits and its traffic on the devices they
        limit, and since the last read the largest share of a limit it used."""
        limits = sig.io_limits
        if limits is None:
            return {}
        devices = sorted(limits)[:IO_DEVICES_PER_WORKLOAD]
        stat = sig.io_stat or {}
        for device in devices:
            limit, moved = limits[device], stat.get(device)
            for direction, bps, iops in (("read", limit.rbps, limit.riops),
                                         ("write", limit.wbps, limit.wiops)):
                at = {**keys, "device": device, "direction": direction}
                if bps is not None:
                    out.add(WORKLOAD_IO_LIMIT_BYTES_PER_SECOND, bps, **at)
                if iops is not None:
                    out.add(WORKLOAD_IO_LIMIT_OPERATIONS_PER_SECOND, iops, **at)
                if moved is not None:
                    read = direction == "read"
                    out.add(WORKLOAD_IO_BYTES_TOTAL, moved.rbytes if read else moved.wbytes,
                            **at)
                    out.add(WORKLOAD_IO_OPERATIONS_TOTAL, moved.rios if read else moved.wios,
                            **at)
        found: dict[str, Any] = {"io_limited": bool(devices)}
        if not devices or sig.io_stat is None:
            return found
        now = self._mono()
        self._io_seen[sig.cgroup] = (now, sig.io_stat)
        before = self._io_before.get(sig.cgroup)
        if before is not None:
            use = io_limit_use(limits, devices, before[1], sig.io_stat, now - before[0])
            if use is not None:
                found["io_limit_used_ratio"], found["io_limit_device"] = use
        return found

    def _memory(self, sig: CgroupSignals) -> dict[str, Any]:
        """The workload's memory limit and use, and since the last read how often
        it hit the limit and how much the kernel reclaimed from it there."""
        state = sig.memory_state
        if state is None:
            return {}
        now = self._mono()
        self._memory_seen[sig.cgroup] = (now, state.limit_hits, state.reclaimed_pages)
        hits = reclaimed = None
        before = self._memory_before.get(sig.cgroup)
        if before is not None and now > before[0]:
            dt = now - before[0]
            if state.limit_hits is not None and before[1] is not None:
                hits = max(0.0, (state.limit_hits - before[1]) / dt)
            if state.reclaimed_pages is not None and before[2] is not None:
                reclaimed = max(0.0, (state.reclaimed_pages - before[2]) * PAGE_SIZE / dt)
        return {"memory_limit_bytes": None if state.limit_bytes is None
                else float(state.limit_bytes),
                "memory_used_bytes": None if state.used_bytes is None
                else float(state.used_bytes),
                "memory_limit_hits_per_s": hits, "memory_reclaimed_bytes_per_s": reclaimed}
