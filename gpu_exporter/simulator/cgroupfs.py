"""The cgroup side of the simulated node's tenants, as real files: each
process's ``/proc/PID/cgroup`` line(s) where kubelet's container runtime or
slurmd would put it, and under the cgroup v2 root each workload's
``cpu.pressure``, ``io.pressure``, ``memory.pressure``, ``cpu.stat``,
``memory.events`` and ``cpu.max``.

Counters are totals that grow with ``elapsed`` (seconds since the workload
started) at the condition's ratios, so two writes a few seconds apart give a
reader exactly the rates asked for. The per-task leaf cgroups below a Slurm
job get files too, all zero: a reader that took the leaf instead of the job
would see nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.simulator.tenants import CgroupCondition, Container, Pod, SlurmJob, Tenants

CPU_PERIOD_US = 100_000  # the kubelet's and slurmd's CFS period
_V1_CONTROLLERS = ("memory", "cpuset", "freezer", "devices", "cpu,cpuacct")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a workload's processes live: the lines of their /proc/PID/cgroup,
    the workload's cgroup v2 path (None on v1) and its tasks' leaf (v2)."""

    proc_cgroup: str
    cgroup: str | None
    leaf: str | None


def pod_placement(pod: Pod, container: Container) -> Placement:
    """The systemd cgroup driver's layout (the kubelet's default on cgroup v2)."""
    uid = pod.uid.replace("-", "_")
    if pod.qos == "guaranteed":
        pod_slice = f"/kubepods.slice/kubepods-pod{uid}.slice"
    else:
        qos = f"kubepods-{pod.qos}"
        pod_slice = f"/kubepods.slice/{qos}.slice/{qos}-pod{uid}.slice"
    path = f"{pod_slice}/cri-containerd-{container.container_id(pod)}.scope"
    return Placement(f"0::{path}\n", path, None)


def slurm_placement(job: SlurmJob) -> Placement:
    if job.cgroup_version == 1:
        leaf = f"/slurm/uid_{job.uid}/job_{job.job_id}/step_{job.step}/task_0"
        lines = [f"{i}:{c}:{leaf}" for i, c in enumerate(_V1_CONTROLLERS, start=2)]
        lines.append("1:name=systemd:/system.slice/slurmd.service")
        return Placement("\n".join(lines) + "\n", None, None)
    job_path = f"/system.slice/slurmstepd.scope/job_{job.job_id}"
    leaf = f"{job_path}/step_{job.step}/user/task_0"
    return Placement(f"0::{leaf}\n", job_path, leaf)


def _pressure(some: float, full: float, elapsed: float) -> str:
    def line(kind: str, ratio: float) -> str:
        pct = ratio * 100
        total = int(ratio * elapsed * 1e6)
        return f"{kind} avg10={pct:.2f} avg60={pct:.2f} avg300={pct:.2f} total={total}\n"
    return line("some", some) + line("full", full)


def cgroup_files(cond: CgroupCondition, cpu_limit: float | None,
                 elapsed: float) -> dict[str, str]:
    """File name -> text for one cgroup."""
    periods = int(elapsed * 1e6 / CPU_PERIOD_US) if cpu_limit is not None else 0
    throttled = int(periods * cond.cpu_throttled_ratio)
    cores = cpu_limit if cpu_limit is not None else 1.0
    usage = int(elapsed * 1e6 * cores * (1 - cond.cpu_some))
    quota = "max" if cpu_limit is None else str(round(cpu_limit * CPU_PERIOD_US))
    return {
        "cpu.pressure": _pressure(cond.cpu_some, cond.cpu_full, elapsed),
        "io.pressure": _pressure(cond.io_some, cond.io_full, elapsed),
        "memory.pressure": _pressure(cond.memory_some, cond.memory_full, elapsed),
        "cpu.stat": (f"usage_usec {usage}\nuser_usec {usage * 9 // 10}\n"
                     f"system_usec {usage - usage * 9 // 10}\n"
                     f"nr_periods {periods}\nnr_throttled {throttled}\n"
                     f"throttled_usec {throttled * CPU_PERIOD_US // 2}\n"
                     "nr_bursts 0\nburst_usec 0\n"),
        "memory.events": (f"low 0\nhigh 0\nmax {cond.oom_kills}\n"
                          f"oom {cond.oom_kills}\noom_kill {cond.oom_kills}\n"
                          "oom_group_kill 0\n"),
        "cpu.max": f"{quota} {CPU_PERIOD_US}\n",
    }


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _write_cgroup(cgroup_root: str, path: str, files: dict[str, str]) -> None:
    base = os.path.join(cgroup_root, path.lstrip("/"))
    for name, text in files.items():
        _write(os.path.join(base, name), text)


def write_tenants(tenants: Tenants, procfs: Path | str, cgroup_root: Path | str,
                  elapsed: float) -> None:
    """Write every tenant's files under ``procfs`` and ``cgroup_root``."""
    proc, root = os.fspath(procfs), os.fspath(cgroup_root)
    idle = CgroupCondition()
    work: list[tuple[Placement, list[int], CgroupCondition, float | None]] = [
        (pod_placement(pod, c), c.pids, c.cgroup, c.cpu_limit)
        for pod in tenants.pods for c in pod.containers]
    work += [(slurm_placement(job), job.pids, job.cgroup, job.cpu_limit)
             for job in tenants.slurm_jobs]
    for placement, pids, cond, cpu_limit in work:
        for pid in pids:
            _write(f"{proc}/{pid}/cgroup", placement.proc_cgroup)
        if placement.cgroup is not None:
            _write_cgroup(root, placement.cgroup, cgroup_files(cond, cpu_limit, elapsed))
        if placement.leaf is not None:
            _write_cgroup(root, placement.leaf, cgroup_files(idle, None, elapsed))
