"""The cgroup side of the simulated node's tenants, as real files: each
process's ``/proc/PID/cgroup`` line(s) where kubelet's container runtime or
slurmd would put it, and each workload's own cgroup files.

cgroup v2 (pods, Slurm jobs with ``cgroup_version: 2``), under the v2 root:
``cpu.pressure``, ``io.pressure``, ``memory.pressure`` (not on a kernel
without PSI), ``cpu.stat``, ``cpu.max``, ``memory.current``, ``memory.max``,
``memory.stat``, ``memory.events``, ``memory.swap.current``, ``io.max`` (the
devices it limits; empty where none is, as the kernel leaves "max" out),
``io.stat`` (each device it moved bytes on), and
``cpuset.cpus``/``cpuset.cpus.effective`` for a workload with a cpuset; and
each pod's own slice (above its containers) a ``cpu.stat`` whose usage is its
containers' summed, as a parent cgroup's is.

cgroup v1 (Slurm jobs with ``cgroup_version: 1``), each controller its own
hierarchy under the root (``memory/``, ``cpu,cpuacct/``, ``cpuset/``), at the
job's level (``/slurm/uid_U/job_J``): ``memory.limit_in_bytes``,
``memory.usage_in_bytes``, ``memory.max_usage_in_bytes``, ``memory.failcnt``,
``memory.stat``, ``memory.oom_control``, ``cpu.cfs_quota_us``,
``cpu.cfs_period_us``, ``cpu.stat``, ``cpuacct.usage``, ``cpuset.cpus``,
``cpuset.effective_cpus``. v1 has no pressure files.

Counters are totals that grow between two writes at the condition's rates
(scaled by the scenario's jitter), so two reads a few seconds apart give a
reader the rates asked for. A workload's ``changes`` (a limit applied or
lifted, its figures changed) take effect at their time: the counters grow at
the old figures up to it and at the new ones after, however seldom the files
are written. The per-task leaf cgroups below a Slurm job get
files too, all zero: a reader that took the leaf instead of the job would see
nothing.

A process no tenant places still lives in the cgroup its ``cgroup`` line names
(a container started without the kubelet, a service): that cgroup v2 directory
is written as well, with no CPU or memory limit, charged the memory its
processes hold (a process is never in a cgroup that does not exist). It has no
pressure files: its stalls would follow its processes' states (a task in D
stalls on I/O), which the simulator does not derive, so a reader finds them
unread rather than zero.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpu_exporter.simulator.tenants import (
    CgroupChange,
    CgroupCondition,
    Container,
    IoLimitSpec,
    Pod,
    SlurmJobSpec,
    Tenants,
)

CPU_PERIOD_US = 100_000  # the kubelet's and slurmd's CFS period
# memory.stat's event counters count pages; the readers convert with this
# machine's page size, so the files use it too.
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_V1_CONTROLLERS = ("memory", "cpuset", "freezer", "devices", "cpu,cpuacct")
# cgroup v1's "no limit" (PAGE_COUNTER_MAX pages, as memory.limit_in_bytes shows it)
_V1_UNLIMITED = 9223372036854771712
_IDLE = CgroupCondition()
_PRESSURE_FILES = ("cpu.pressure", "io.pressure", "memory.pressure")
# The size of one read or write a data loader issues (the kernel's read-ahead
# window): io.stat's I/O counts are its bytes over this.
IO_SIZE = 128 * 1024


@dataclass(frozen=True, slots=True)
class CgroupPlacement:
    """Where a workload's processes live: the lines of their /proc/PID/cgroup,
    the workload's cgroup v2 path (None on v1) and its tasks' leaf (v2), and
    on v1 the job's path in each controller's hierarchy."""

    proc_cgroup: str
    cgroup: str | None
    leaf: str | None
    v1_job: str | None = None


def pod_placement(pod: Pod, container: Container) -> CgroupPlacement:
    """The systemd cgroup driver's layout (the kubelet's default on cgroup v2)."""
    uid = pod.uid.replace("-", "_")
    if pod.qos == "guaranteed":
        pod_slice = f"/kubepods.slice/kubepods-pod{uid}.slice"
    else:
        qos = f"kubepods-{pod.qos}"
        pod_slice = f"/kubepods.slice/{qos}.slice/{qos}-pod{uid}.slice"
    path = f"{pod_slice}/cri-containerd-{container.container_id(pod)}.scope"
    return CgroupPlacement(f"0::{path}\n", path, None)


def slurm_placement(job: SlurmJobSpec) -> CgroupPlacement:
    if job.cgroup_version == 1:
        job_path = f"/slurm/uid_{job.uid}/job_{job.job_id}"
        leaf = f"{job_path}/step_{job.step}/task_0"
        lines = [f"{i}:{c}:{leaf}" for i, c in enumerate(_V1_CONTROLLERS, start=2)]
        lines.append("1:name=systemd:/system.slice/slurmd.service")
        return CgroupPlacement("\n".join(lines) + "\n", None, None, job_path)
    job_path = f"/system.slice/slurmstepd.scope/job_{job.job_id}"
    leaf = f"{job_path}/step_{job.step}/user/task_0"
    return CgroupPlacement(f"0::{leaf}\n", job_path, leaf)


@dataclass(slots=True)
class _Totals:
    """One cgroup's counters since it was made."""

    stall_us: dict[str, float] = field(default_factory=dict)  # "cpu/some" -> microseconds
    periods: float = 0.0
    throttled: float = 0.0
    usage_us: float = 0.0
    scanned: float = 0.0  # pages
    stolen: float = 0.0
    refaults: float = 0.0
    max_events: float = 0.0
    # device -> [bytes read, bytes written, reads, writes]
    io: dict[str, list[float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Workload:
    placement: CgroupPlacement
    pids: list[int]
    cond: CgroupCondition
    cpu_limit: float | None
    memory_limit: int | None
    cpus: str | None
    io_max: tuple[IoLimitSpec, ...] = ()
    changes: tuple[CgroupChange, ...] = ()

    def at(self, t: float) -> _Workload:
        """The workload as its changes leave it at t."""
        w = self
        for change in self.changes:
            if change.at > t:
                break
            given = change.model_fields_set
            w = dataclasses.replace(
                w, cpu_limit=change.cpu_limit if "cpu_limit" in given else w.cpu_limit,
                io_max=tuple(change.io_max or ()) if "io_max" in given else w.io_max,
                cond=w.cond if change.cgroup is None else w.cond.model_copy(
                    update=change.cgroup.model_dump(exclude_unset=True)))
        return w


def _held_to(rate: float, bps: int | None, iops: int | None) -> float:
    """Bytes per second moved when asked for ``rate`` under the limits."""
    return min(rate, math.inf if bps is None else bps,
               math.inf if iops is None else iops * IO_SIZE)


Jitter = Callable[[str, float], float]
CpuOf = Callable[[Sequence[int], float], float]


class TenantFs:
    """Writes every tenant's files under ``procfs`` and ``cgroup_root``;
    ``write(elapsed)`` brings them up to that time."""

    def __init__(self, tenants: Tenants | None, procfs: Path | str, cgroup_root: Path | str,
                 jitter: Jitter | None = None, psi: Callable[[float], bool] | None = None,
                 cpus: int = 128, others: Mapping[str, int] | None = None,
                 cpu_of: CpuOf | None = None) -> None:
        """``others``: the cgroup v2 paths of processes no tenant places, with
        the memory their processes hold. ``cpu_of(pids, t)``: CPUs' worth of
        time those processes burn at t (none given: nothing)."""
        self._proc, self._root = os.fspath(procfs), os.fspath(cgroup_root)
        self._cpu_of = cpu_of or (lambda pids, t: 0.0)
        self._jitter = jitter or (lambda key, t: 1.0)
        self._psi = psi or (lambda t: True)
        self._cpus = cpus
        pods = [] if tenants is None else tenants.pods
        jobs = [] if tenants is None else tenants.slurm_jobs
        self._work = [_Workload(pod_placement(pod, c), c.pids, c.cgroup, c.cpu_limit,
                                c.memory_limit_bytes, c.cpus, tuple(c.io_max),
                                tuple(sorted(c.changes, key=lambda ch: ch.at)))
                      for pod in pods for c in pod.containers]
        self._work += [_Workload(slurm_placement(job), job.pids, job.cgroup, job.cpu_limit,
                                 job.memory_limit_bytes, job.cpus, tuple(job.io_max),
                                 tuple(sorted(job.changes, key=lambda ch: ch.at)))
                       for job in jobs]
        placed = {w.placement.cgroup for w in self._work} | {
            w.placement.leaf for w in self._work}
        self._unplaced = [_Workload(CgroupPlacement("", path, None), [],
                                    CgroupCondition(memory_anon_bytes=held), None, None, None)
                          for path, held in sorted((others or {}).items())
                          if path not in placed]
        self._totals: dict[str, _Totals] = {}
        self._last: float | None = None

    def _roots(self) -> None:
        """Each hierarchy's root files, by which a reader tells the layout: the
        v2 root lists its controllers; a v1 hierarchy has its controller's files."""
        if any(w.placement.cgroup is not None for w in self._work) or self._unplaced:
            _write(os.path.join(self._root, "cgroup.controllers"),
                   "cpuset cpu io memory hugetlb pids rdma misc\n")
        if any(w.placement.v1_job is not None for w in self._work):
            _write(os.path.join(self._root, "memory", "memory.limit_in_bytes"),
                   f"{_V1_UNLIMITED}\n")
            _write(os.path.join(self._root, "cpu,cpuacct", "cpu.cfs_quota_us"), "-1\n")

    def write(self, elapsed: float) -> None:
        if self._last is None:
            self._roots()
        # The workloads started when the node did: the first write covers it all.
        dt = elapsed if self._last is None else max(0.0, elapsed - self._last)
        self._last = elapsed
        psi = self._psi(elapsed)
        for w in self._work:
            for pid in w.pids:
                _write(f"{self._proc}/{pid}/cgroup", w.placement.proc_cgroup)
            p = w.placement
            # A kernel without PSI has no pressure files at all.
            absent = () if psi else _PRESSURE_FILES
            if p.cgroup is not None:
                files = self._v2_files(p.cgroup, w, elapsed, dt, psi)
                _write_cgroup(self._root, p.cgroup, files, absent)
            if p.leaf is not None:
                idle = _Workload(p, [], _IDLE, None, None, None)
                _write_cgroup(self._root, p.leaf,
                              self._v2_files(p.leaf, idle, elapsed, dt, psi), absent)
            if p.v1_job is not None:
                for controller, files in self._v1_files(p.v1_job, w, elapsed, dt).items():
                    _write_cgroup(os.path.join(self._root, controller), p.v1_job, files)
        self._pod_slices()
        for w in self._unplaced:
            path = w.placement.cgroup or ""
            _write_cgroup(self._root, path, self._v2_files(path, w, elapsed, dt, psi=False),
                          _PRESSURE_FILES)

    def _pod_slices(self) -> None:
        """Each pod's own cgroup (the slice above its containers): its CPU use
        is its containers', as a parent's cpu.stat counts its children's."""
        used: dict[str, float] = {}
        for w in self._work:
            p = w.placement
            if p.cgroup is not None and p.cgroup.startswith("/kubepods"):
                pod_slice = os.path.dirname(p.cgroup)
                used[pod_slice] = used.get(pod_slice, 0.0) + self._totals[p.cgroup].usage_us
        for pod_slice, usage_us in used.items():
            usage = int(usage_us)
            _write_cgroup(self._root, pod_slice, {"cpu.stat": (
                f"usage_usec {usage}\nuser_usec {usage * 9 // 10}\n"
                f"system_usec {usage - usage * 9 // 10}\nnr_periods 0\nnr_throttled 0\n"
                "throttled_usec 0\nnr_bursts 0\nburst_usec 0\n")})

    # --- what grows ------------------------------------------------------------------
    def _grow(self, path: str, w: _Workload, t: float, dt: float) -> _Totals:
        """Grow the counters over the ``dt`` up to t, cut where a change of
        the workload's took effect: each stretch at the figures in force."""
        start = t - dt
        cuts = [start, *sorted(c.at for c in w.changes if start < c.at < t), t]
        tot = self._totals.setdefault(path, _Totals())
        for a, b in itertools.pairwise(cuts):
            tot = self._advance(path, w.at(a), b, b - a)
        return tot

    def _advance(self, path: str, w: _Workload, t: float, dt: float) -> _Totals:
        tot = self._totals.setdefault(path, _Totals())
        j, c = self._jitter, w.cond
        for res in ("cpu", "io", "memory"):
            for kind in ("some", "full"):
                key = f"{res}/{kind}"
                ratio = min(1.0, getattr(c, f"{res}_{kind}") * j(f"cg{path}/{key}", t))
                tot.stall_us[key] = tot.stall_us.get(key, 0.0) + ratio * dt * 1e6
        if w.cpu_limit is not None:
            periods = dt * 1e6 / CPU_PERIOD_US
            tot.periods += periods
            share = min(1.0, c.cpu_throttled_ratio * j(f"cg{path}/throttled", t))
            tot.throttled += periods * share
        # What its tasks burn: the scenario's figure, else its processes'.
        busy = self._cpu_of(w.pids, t) if c.cpu_busy_cores is None else \
            c.cpu_busy_cores * j(f"cg{path}/usage", t)
        tot.usage_us += dt * 1e6 * min(busy, w.cpu_limit or busy)
        tot.scanned += c.reclaim_scan_bytes_per_s * dt * j(f"cg{path}/scan", t) / PAGE_SIZE
        tot.stolen += c.reclaim_steal_bytes_per_s * dt * j(f"cg{path}/steal", t) / PAGE_SIZE
        tot.refaults += c.refault_bytes_per_s * dt * j(f"cg{path}/refault", t) / PAGE_SIZE
        tot.max_events += c.memory_max_events_per_s * dt * j(f"cg{path}/max", t)
        limit = next((lim for lim in w.io_max if lim.device == c.io_device), IoLimitSpec())
        read = _held_to(c.io_read_bytes_per_s * j(f"cg{path}/read", t), limit.rbps, limit.riops)
        written = _held_to(c.io_write_bytes_per_s * j(f"cg{path}/write", t), limit.wbps,
                           limit.wiops)
        if read or written:
            moved = tot.io.setdefault(c.io_device, [0.0, 0.0, 0.0, 0.0])
            for i, amount in enumerate((read, written, read / IO_SIZE, written / IO_SIZE)):
                moved[i] += amount * dt
        return tot

    def _avg10(self, path: str, key: str, ratio: float, t: float) -> float:
        return min(1.0, ratio * self._jitter(f"cg{path}/{key}", t))

    # --- cgroup v2 ---------------------------------------------------------------------
    def _v2_files(self, path: str, w: _Workload, t: float, dt: float,
                  psi: bool) -> dict[str, str]:
        tot = self._grow(path, w, t, dt)
        w = w.at(t)
        c = w.cond
        files: dict[str, str] = {}
        if psi:
            for res in ("cpu", "io", "memory"):
                lines = []
                for kind in ("some", "full"):
                    avg = self._avg10(path, f"{res}/{kind}", getattr(c, f"{res}_{kind}"), t)
                    pct = avg * 100
                    lines.append(f"{kind} avg10={pct:.2f} avg60={pct:.2f} avg300={pct:.2f} "
                                 f"total={int(tot.stall_us[f'{res}/{kind}'])}\n")
                files[f"{res}.pressure"] = "".join(lines)
        usage, throttled = int(tot.usage_us), int(tot.throttled)
        quota = "max" if w.cpu_limit is None else str(round(w.cpu_limit * CPU_PERIOD_US))
        files["cpu.stat"] = (f"usage_usec {usage}\nuser_usec {usage * 9 // 10}\n"
                             f"system_usec {usage - usage * 9 // 10}\n"
                             f"nr_periods {int(tot.periods)}\nnr_throttled {throttled}\n"
                             f"throttled_usec {throttled * CPU_PERIOD_US // 2}\n"
                             "nr_bursts 0\nburst_usec 0\n")
        files["cpu.max"] = f"{quota} {CPU_PERIOD_US}\n"
        # Kernel memory (slab, page tables) is charged too, within the limit.
        charged = c.memory_anon_bytes + c.memory_file_bytes
        kernel = charged // 50
        if w.memory_limit is not None:
            kernel = max(0, min(kernel, w.memory_limit - charged))
        files["memory.current"] = f"{c.memory_anon_bytes + c.memory_file_bytes + kernel}\n"
        files["memory.max"] = "max\n" if w.memory_limit is None else f"{w.memory_limit}\n"
        files["memory.swap.current"] = f"{c.memory_swap_bytes}\n"
        files["memory.stat"] = _v2_memory_stat(c, tot, kernel)
        files["memory.events"] = (f"low 0\nhigh 0\nmax {int(tot.max_events)}\n"
                                  f"oom {c.oom_kills}\noom_kill {c.oom_kills}\n"
                                  "oom_group_kill 0\n")
        files["io.max"] = "".join(_io_max_line(lim) for lim in w.io_max)
        files["io.stat"] = "".join(
            f"{device} rbytes={int(r)} wbytes={int(wr)} rios={int(ri)} wios={int(wi)} "
            "dbytes=0 dios=0\n" for device, (r, wr, ri, wi) in sorted(tot.io.items()))
        if w.cpus is not None:
            files["cpuset.cpus"] = f"{w.cpus}\n"
            files["cpuset.cpus.effective"] = f"{w.cpus}\n"
        return files

    # --- cgroup v1 ---------------------------------------------------------------------
    def _v1_files(self, path: str, w: _Workload, t: float,
                  dt: float) -> dict[str, dict[str, str]]:
        tot = self._grow(path, w, t, dt)
        w = w.at(t)
        c = w.cond
        used = c.memory_anon_bytes + c.memory_file_bytes
        limit = _V1_UNLIMITED if w.memory_limit is None else w.memory_limit
        quota = -1 if w.cpu_limit is None else round(w.cpu_limit * CPU_PERIOD_US)
        throttled = int(tot.throttled)
        cpus = w.cpus or f"0-{self._cpus - 1}"
        return {
            "memory": {
                "memory.limit_in_bytes": f"{limit}\n",
                "memory.usage_in_bytes": f"{used}\n",
                "memory.max_usage_in_bytes": f"{used}\n",
                # v1 counts every time the usage hit the limit here.
                "memory.failcnt": f"{int(tot.max_events)}\n",
                "memory.stat": _v1_memory_stat(c, limit),
                "memory.oom_control": f"oom_kill_disable 0\nunder_oom 0\noom_kill {c.oom_kills}\n",
            },
            "cpu,cpuacct": {
                "cpu.cfs_period_us": f"{CPU_PERIOD_US}\n",
                "cpu.cfs_quota_us": f"{quota}\n",
                "cpu.stat": (f"nr_periods {int(tot.periods)}\nnr_throttled {throttled}\n"
                             f"throttled_time {throttled * CPU_PERIOD_US * 500}\n"),
                "cpuacct.usage": f"{int(tot.usage_us * 1000)}\n",
            },
            "cpuset": {"cpuset.cpus": f"{cpus}\n", "cpuset.effective_cpus": f"{cpus}\n",
                       "cpuset.mems": "0\n"},
        }


def _io_max_line(limit: IoLimitSpec) -> str:
    """A device's io.max line; one with no limit left is not listed."""
    values = (limit.rbps, limit.wbps, limit.riops, limit.wiops)
    if all(v is None for v in values):
        return ""
    shown = ("max" if v is None else str(v) for v in values)
    return f"{limit.device} " + " ".join(
        f"{k}={v}" for k, v in zip(("rbps", "wbps", "riops", "wiops"), shown, strict=True)) + "\n"


def _v2_memory_stat(c: CgroupCondition, tot: _Totals, kernel: int) -> str:
    """The fields readers use, in the kernel's order: bytes first, then the
    event counters in pages. Reclaim at the cgroup's own limit is direct
    reclaim (the charging task reclaims), so it shows in the *_direct ones."""
    anon, file = c.memory_anon_bytes, c.memory_file_bytes
    scanned, stolen, refaults = int(tot.scanned), int(tot.stolen), int(tot.refaults)
    rows = [("anon", anon), ("file", file), ("kernel", kernel), ("shmem", 0),
            ("file_mapped", file // 8), ("file_dirty", 0), ("file_writeback", 0),
            ("swapcached", 0), ("inactive_anon", anon // 4), ("active_anon", anon - anon // 4),
            ("inactive_file", file // 2), ("active_file", file - file // 2), ("unevictable", 0),
            ("slab_reclaimable", kernel // 2), ("slab_unreclaimable", kernel // 4),
            ("slab", kernel // 2 + kernel // 4),
            ("workingset_refault_anon", 0), ("workingset_refault_file", refaults),
            ("workingset_activate_anon", 0), ("workingset_activate_file", refaults // 2),
            ("workingset_restore_anon", 0), ("workingset_restore_file", refaults // 4),
            ("workingset_nodereclaim", 0),
            ("pgscan", scanned), ("pgsteal", stolen), ("pgscan_kswapd", 0),
            ("pgscan_direct", scanned), ("pgsteal_kswapd", 0), ("pgsteal_direct", stolen),
            ("pgfault", 1000 + refaults), ("pgmajfault", refaults), ("pgrefill", scanned // 2)]
    return "".join(f"{name} {value}\n" for name, value in rows)


def _v1_memory_stat(c: CgroupCondition, limit: int) -> str:
    anon, file = c.memory_anon_bytes, c.memory_file_bytes
    rows = [("cache", file), ("rss", anon), ("rss_huge", 0), ("shmem", 0),
            ("mapped_file", file // 8), ("dirty", 0), ("writeback", 0),
            ("swap", c.memory_swap_bytes), ("inactive_anon", anon // 4),
            ("active_anon", anon - anon // 4), ("inactive_file", file // 2),
            ("active_file", file - file // 2), ("unevictable", 0),
            ("hierarchical_memory_limit", limit), ("total_cache", file), ("total_rss", anon),
            ("total_swap", c.memory_swap_bytes)]
    return "".join(f"{name} {value}\n" for name, value in rows)


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _write_cgroup(cgroup_root: str, path: str, files: dict[str, str],
                  absent: tuple[str, ...] = ()) -> None:
    base = os.path.join(cgroup_root, path.lstrip("/"))
    for name, text in files.items():
        _write(os.path.join(base, name), text)
    for name in absent:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(base, name))


def write_tenants(tenants: Tenants, procfs: Path | str, cgroup_root: Path | str,
                  elapsed: float) -> None:
    """Every tenant's files as they stand ``elapsed`` seconds after the
    workloads started, in one write (no jitter, PSI on)."""
    TenantFs(tenants, procfs, cgroup_root).write(elapsed)
