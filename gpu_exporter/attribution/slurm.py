"""Which Slurm job a process belongs to, from the cgroup slurmd put it in.

slurmd's task/cgroup plugin makes one cgroup per job, step and task:

* cgroup v1: ``/slurm/uid_<uid>/job_<id>/step_<step>/task_<n>`` in each
  controller (``/slurm_<nodename>/...`` when one host runs several slurmd);
* cgroup v2: ``/system.slice/slurmstepd.scope/job_<id>/step_<step>/user/task_<n>``
  (``<nodename>_slurmstepd.scope`` for several slurmd; the step's own
  slurmstepd sits in ``.../step_<step>/slurm``).

The path is set by slurmd and cannot be changed by the job, so it is
preferred. Where it names no job (proctrack/linuxproc, no task/cgroup), the
process's nearest ``slurmstepd`` ancestor names it: slurmstepd sets its
process title to ``slurmstepd: [<job>.<step>]``. Both ``stat`` (the parent
chain) and the ancestor's ``cmdline`` are world-readable, so this works as
any user, with no capability; the job's own processes' ``environ`` and
``cmdline`` are never read (they can hold secrets, and another user's
``environ`` needs CAP_SYS_PTRACE).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gpu_exporter.attribution.procfiles import read_bounded, read_text_bounded

# ASCII digits only: \d and str.isdigit() also take other scripts' digits.
# Slurm job ids are 32-bit; steps are numbers or batch/extern/interactive
# (hetjob components add "+<n>").
_JOB = r"job_(\d{1,10})"
_STEP = r"(?:/step_([A-Za-z0-9_+]{1,32}))?"
_V1 = re.compile(rf"(^.*?/slurm(?:_[^/]{{1,64}})?/uid_(\d{{1,10}})/{_JOB}){_STEP}(?:/|$)",
                 re.ASCII)
_V2 = re.compile(rf"(^.*?/(?:[^/]{{1,64}}_)?slurmstepd\.scope/{_JOB}){_STEP}(?:/|$)",
                 re.ASCII)
# slurmstepd's process title, as it sets it (src/slurmd/slurmstepd).
_TITLE = re.compile(rb"slurmstepd: \[(\d{1,10})\.([A-Za-z0-9_+]{1,32})\]", re.ASCII)
# A process title is one short line; the chain from a task to its slurmstepd
# is a few processes (the task, a shell, mpirun...): past these it is not.
TITLE_LIMIT = 4096
ANCESTORS_MAX = 16


@dataclass(frozen=True, slots=True)
class SlurmJob:
    job_id: str  # decimal, as Slurm prints it
    uid: int | None  # the job's user; None when not known
    step: str | None  # "0", "batch", "extern" ...; None when not known
    # The job's cgroup v2 path (relative to the cgroup root), where its own
    # pressure and CPU limit are read; None on cgroup v1 or from slurmstepd.
    cgroup: str | None
    source: Literal["cgroup", "slurmstepd"]


def job_from_cgroup(text: str) -> SlurmJob | None:
    """The job in a /proc/PID/cgroup file's text, or None."""
    v1: SlurmJob | None = None
    for line in text.splitlines():
        # hierarchy-id:controllers:path (v1), or 0::path (v2)
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, _, path = parts
        if hierarchy == "0" and (m := _V2.match(path)):
            # The unified hierarchy: pressure and limits are read from it.
            return SlurmJob(m.group(2), None, m.group(3), m.group(1), "cgroup")
        if v1 is None and (m := _V1.match(path)):
            v1 = SlurmJob(m.group(3), int(m.group(2)), m.group(4), None, "cgroup")
    return v1


def job_cgroup(path: str) -> str | None:
    """A cgroup path (any hierarchy, v1 or v2) cut at the job's own cgroup,
    where slurmd sets the job's limits; None when it names no job."""
    m = _V2.match(path) or _V1.match(path)
    return m.group(1) if m else None


def job_from_title(data: bytes) -> tuple[str, str] | None:
    """(job id, step) from slurmstepd's /proc/PID/cmdline, if it is one."""
    m = _TITLE.match(data.split(b"\0", 1)[0])
    return None if m is None else (m.group(1).decode(), m.group(2).decode())


def _parent(stat: str) -> int | None:
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    fields = stat[stat.rfind(")") + 1:].split(None, 2)
    if len(fields) < 2 or not (fields[1].isascii() and fields[1].isdigit()):
        return None
    return int(fields[1])


def job_from_ancestors(procfs: Path | str, pid: int) -> tuple[str, str] | None:
    """The job and step of the nearest slurmstepd above ``pid``, if any."""
    root = os.fspath(procfs)
    current = pid
    for _ in range(ANCESTORS_MAX):
        stat = read_text_bounded(f"{root}/{current}/stat")
        parent = None if stat is None else _parent(stat)
        if parent is None or parent <= 1:
            return None
        comm = read_text_bounded(f"{root}/{parent}/comm")
        if comm is not None and comm.strip() == "slurmstepd":
            title = read_bounded(f"{root}/{parent}/cmdline", TITLE_LIMIT)
            return None if title is None else job_from_title(title)
        current = parent
    return None


def _real_uid(status: str) -> int | None:
    for line in status.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            if len(fields) > 1 and fields[1].isascii() and fields[1].isdigit():
                return int(fields[1])
    return None


def read_job(procfs: Path | str, pid: int) -> SlurmJob | None:
    """The Slurm job of process ``pid``, or None (not in a job, gone, or its
    files unreadable). Never raises for what is found on disk."""
    base = f"{os.fspath(procfs)}/{pid}"
    cgroup = read_text_bounded(f"{base}/cgroup")
    job = job_from_cgroup(cgroup) if cgroup is not None else None
    if job is None:
        found = job_from_ancestors(procfs, pid)
        if found is None:
            return None
        job = SlurmJob(found[0], None, found[1], None, "slurmstepd")
    if job.uid is None:
        # cgroup v2 paths carry no user: the process's own real uid is the
        # job's (slurmstepd starts the tasks as the job's user).
        status = read_text_bounded(f"{base}/status")
        uid = _real_uid(status) if status is not None else None
        if uid is not None:
            job = SlurmJob(job.job_id, uid, job.step, job.cgroup, job.source)
    return job
