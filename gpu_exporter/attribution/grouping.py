"""Processes -> the workload (container or Slurm job) they run in, and that
workload's cgroup, so signals are read once per workload, not per process.

A process's own cgroup is often a leaf below its workload's: Slurm puts each
task in ``job_<id>/step_<n>/user/task_<k>``, a container that manages its
own cgroups (systemd inside, nested runtimes) puts processes below its scope.
The CPU limit and the pressure that matter are the workload's: the
container's cgroup (where the kubelet sets ``cpu.max``) or the Slurm job's
(where slurmd sets the job's limits). So the path is cut there, and a job of
many processes over many GPUs still yields one set of signals.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gpu_exporter.attribution.cgroup_pressure import CgroupPaths, CgroupSignals, read_signals
from gpu_exporter.attribution.cgroup_tree import CgroupTree, parse_self_cgroup
from gpu_exporter.attribution.procfiles import read_text_bounded
from gpu_exporter.attribution.slurm import job_cgroup, job_from_cgroup
from gpu_exporter.host.procs import cgroup_ids


@dataclass(frozen=True, slots=True)
class Workload:
    kind: Literal["container", "slurm_job"]
    id: str  # the container id, or the Slurm job id
    # The workload's cgroup in each hierarchy as /proc/PID/cgroup prints it
    # (the unified one, and cgroup v1's cpu and memory ones where mounted).
    paths: CgroupPaths
    pod_uid: str = ""  # containers of Kubernetes pods
    slurm_uid: int | None = None  # Slurm jobs on cgroup v1 (the path names it)


def _cut_at(path: str, container_id: str) -> str | None:
    """``path`` up to and including the element that names the container."""
    elements = path.split("/")
    for i in range(len(elements) - 1, 0, -1):
        if container_id in elements[i]:
            return "/".join(elements[:i + 1])
    return None


def _paths(cgroup_text: str, cut: Callable[[str], str | None]) -> CgroupPaths:
    printed = parse_self_cgroup(cgroup_text)

    def at(hierarchy: str) -> str | None:
        path = printed.get(hierarchy)
        return None if path is None else cut(path)

    return CgroupPaths(at("unified"), at("cpu"), at("memory"))


def workload_of(cgroup_text: str) -> Workload | None:
    """The workload a /proc/PID/cgroup file's text places the process in, or
    None (a host process: it is judged by the host's signals)."""
    job = job_from_cgroup(cgroup_text)
    if job is not None:
        return Workload("slurm_job", job.job_id, _paths(cgroup_text, job_cgroup),
                        slurm_uid=job.uid)
    container, pod = cgroup_ids(cgroup_text)
    if not container:
        return None
    return Workload("container", container,
                    _paths(cgroup_text, lambda path: _cut_at(path, container)), pod)


def group_by_workload(cgroups: Mapping[int, str]) -> dict[Workload, tuple[int, ...]]:
    """PID -> cgroup file text, to workload -> its PIDs (ascending). Processes
    in no workload are left out."""
    groups: dict[Workload, list[int]] = {}
    for pid in sorted(cgroups):
        workload = workload_of(cgroups[pid])
        if workload is not None:
            groups.setdefault(workload, []).append(pid)
    return {w: tuple(pids) for w, pids in groups.items()}


def read_cgroups(procfs: Path | str, pids: Iterable[int]) -> dict[int, str]:
    """PID -> its /proc/PID/cgroup text, for those that could be read."""
    root = os.fspath(procfs)
    found: dict[int, str] = {}
    for pid in pids:
        text = read_text_bounded(f"{root}/{pid}/cgroup")
        if text is not None:
            found[pid] = text
    return found


def workload_signals(tree: CgroupTree,
                     workloads: Iterable[Workload]) -> dict[Workload, CgroupSignals]:
    """One read of signals per workload cgroup (workloads with no cgroup in
    any hierarchy are left out). Two workloads never share a cgroup, but
    should a caller pass the same cgroup twice it is still read once."""
    by_path: dict[CgroupPaths, CgroupSignals] = {}
    found: dict[Workload, CgroupSignals] = {}
    for workload in workloads:
        if not workload.paths.key():
            continue
        signals = by_path.get(workload.paths)
        if signals is None:
            signals = by_path[workload.paths] = read_signals(tree, workload.paths)
        found[workload] = signals
    return found
