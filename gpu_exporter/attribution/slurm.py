"""Which Slurm job a process belongs to, from the cgroup slurmd put it in.

slurmd's task/cgroup plugin makes one cgroup per job, step and task:

* cgroup v1: ``/slurm/uid_<uid>/job_<id>/step_<step>/task_<n>`` in each
  controller (``/slurm_<nodename>/...`` when one host runs several slurmd);
* cgroup v2: ``/system.slice/slurmstepd.scope/job_<id>/step_<step>/user/task_<n>``
  (``<nodename>_slurmstepd.scope`` for several slurmd; the step's own
  slurmstepd sits in ``.../step_<step>/slurm``).

The path is set by slurmd and cannot be changed by the job, so it is
preferred. Where it names no job (proctrack/linuxproc, no task/cgroup),
``SLURM_JOB_ID`` in the process's environment is used when it can be read;
nothing else is taken from the environment, which can hold secrets.
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
_ENV_KEY = b"SLURM_JOB_ID="
# The environment is at most a few MiB (ARG_MAX); a job's variables are near
# its start, and what lies past this is not looked at.
ENVIRON_LIMIT = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SlurmJob:
    job_id: str  # decimal, as Slurm prints it
    uid: int | None  # the job's user; None when not known
    step: str | None  # "0", "batch", "extern" ...; None when not known
    # The job's cgroup v2 path (relative to the cgroup root), where its own
    # pressure and CPU limit are read; None on cgroup v1 or from the environment.
    cgroup: str | None
    source: Literal["cgroup", "environ"]


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


def job_from_environ(data: bytes) -> str | None:
    """``SLURM_JOB_ID`` from a NUL-separated environment, if a job id."""
    for entry in data.split(b"\0"):
        if entry.startswith(_ENV_KEY):
            value = entry[len(_ENV_KEY):]
            if value.isdigit() and len(value) <= 10:
                return value.decode("ascii")
            return None
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
        environ = read_bounded(f"{base}/environ", ENVIRON_LIMIT)
        job_id = job_from_environ(environ) if environ is not None else None
        if job_id is None:
            return None
        job = SlurmJob(job_id, None, None, None, "environ")
    if job.uid is None:
        # cgroup v2 paths carry no user: the process's own real uid is the
        # job's (slurmstepd starts the tasks as the job's user).
        status = read_text_bounded(f"{base}/status")
        uid = _real_uid(status) if status is not None else None
        if uid is not None:
            job = SlurmJob(job.job_id, uid, job.step, job.cgroup, job.source)
    return job
