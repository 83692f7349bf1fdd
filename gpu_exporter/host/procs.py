"""The host's view of one process, from ``<procfs>/PID``: name, state, CPU time,
memory, threads, context switches, run-queue wait, allowed CPUs and, where it
runs in a container, its container id and Kubernetes pod UID.

Never reads ``cmdline`` or ``environ``: they can hold secrets. A process that
exits between listing and reading yields None, silently: that is normal on a
busy host, not an error.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.host.files import MalformedFile, read_text, to_int

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

# Fields of /proc/PID/stat after "pid (comm) ", counted from 0 (proc(5) minus 3).
_STATE, _PPID, _UTIME, _STIME, _THREADS, _RSS = 0, 1, 11, 12, 17, 21

# The cgroup a container runtime puts a container in: cri-containerd-<id>.scope,
# docker-<id>.scope, crio-<id>.scope, libpod-<id>.scope (systemd driver), or
# crio-<id> (CRI-O with the cgroupfs driver). "crio-conmon-<id>" is CRI-O's
# monitor process, not the container.
_SCOPE = re.compile(r"^(?:cri-containerd|docker|crio|libpod)-([0-9a-f]{64})(?:\.scope)?$")
# cgroupfs driver (v1 and v2): the container id is a bare path element.
_BARE_ID = re.compile(r"^([0-9a-f]{64})$")
# kubepods-burstable-pod<uid>.slice (systemd driver: "_" in place of "-") or
# pod<uid> (cgroupfs driver).
_POD = re.compile(r"(?:^|-)pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_]"
                  r"[0-9a-f]{12})(?:\.slice)?$")


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    comm: str
    state: str  # R, S, D, Z, T, I ... (proc(5))
    ppid: int
    threads: int
    cpu_seconds: float  # user + system
    rss_bytes: int
    voluntary_ctxt_switches: int | None
    involuntary_ctxt_switches: int | None
    run_queue_wait_seconds: float | None  # None: this kernel keeps no schedstat
    cpus_allowed: frozenset[int] | None
    cpus_allowed_list: str | None  # as the kernel wrote it, for evidence
    container_id: str  # "" when not in a container
    pod_uid: str  # "" when not in a Kubernetes pod


def parse_cpulist(text: str) -> frozenset[int]:
    """``0-3,8,10-11`` -> {0, 1, 2, 3, 8, 10, 11}; raises ValueError when malformed."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        span, _, stride = part.partition(":")
        lo, sep, hi = span.partition("-")
        start = int(lo)
        end = int(hi) if sep else start
        step = int(stride) if stride else 1
        if start < 0 or end < start or step < 1:
            raise ValueError(f"bad CPU range {part!r}")
        cpus.update(range(start, end + 1, step))
    return frozenset(cpus)


def cgroup_ids(text: str) -> tuple[str, str]:
    """(container id, pod UID) from a /proc/PID/cgroup file; "" for each not found."""
    container = pod = ""
    for line in text.splitlines():
        # hierarchy-id:controllers:path (v1), or 0::path (v2)
        path = line.split(":", 2)[-1]
        for element in reversed(path.split("/")):
            if not container:
                m = _SCOPE.match(element) or _BARE_ID.match(element)
                if m:
                    container = m.group(1)
            if not pod:
                m = _POD.search(element)
                if m:
                    pod = m.group(1).replace("_", "-")
        if container and pod:
            break
    return container, pod


def list_pids(procfs: Path) -> list[int]:
    return sorted(int(e.name) for e in os.scandir(procfs) if e.name.isdigit())


class _Gone(Exception):
    """The process exited while it was being read."""


def _read(path: Path) -> str:
    try:
        return read_text(path)
    except FileNotFoundError:
        raise _Gone() from None
    except OSError as exc:
        # Reading a file of a process that has just exited can fail with ESRCH.
        if exc.errno == errno.ESRCH:
            raise _Gone() from None
        raise


def _optional(base: Path, name: str) -> str | None:
    """A file some kernels lack; None then. Raises _Gone when the process is."""
    try:
        return _read(base / name)
    except _Gone:
        if not base.exists():
            raise
        return None


def _status(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key] = value.strip()
    return out


def read_process(procfs: Path, pid: int, clk_tck: int = CLK_TCK,
                 page_size: int = PAGE_SIZE) -> ProcessInfo | None:
    """The process's facts, or None when it is gone now. Raises MalformedFile
    for a file it cannot understand."""
    try:
        return _read_process(procfs / str(pid), pid, clk_tck, page_size)
    except _Gone:
        return None


def _read_process(base: Path, pid: int, clk_tck: int, page_size: int) -> ProcessInfo:
    stat_path = base / "stat"
    stat = _read(stat_path)
    status = _status(_read(base / "status"))
    # comm may contain spaces and parentheses: it ends at the last ")".
    open_, close = stat.find("("), stat.rfind(")")
    if open_ < 0 or close < open_:
        raise MalformedFile(stat_path, "no (comm)")
    comm = stat[open_ + 1:close]
    rest = stat[close + 1:].split()
    if len(rest) <= _RSS:
        raise MalformedFile(stat_path, f"{len(rest) + 2} fields, expected at least {_RSS + 3}")
    utime, stime = to_int(stat_path, rest[_UTIME]), to_int(stat_path, rest[_STIME])

    wait: float | None = None
    schedstat = _optional(base, "schedstat")
    if schedstat is not None:
        # cpu time on the CPU (ns), time waiting on a run queue (ns), timeslices
        fields = schedstat.split()
        if len(fields) < 2:
            raise MalformedFile(base / "schedstat", "fewer than two fields")
        wait = to_int(base / "schedstat", fields[1]) / 1e9

    cgroup = _optional(base, "cgroup")
    container, pod = cgroup_ids(cgroup) if cgroup is not None else ("", "")

    allowed_list = status.get("Cpus_allowed_list")
    allowed: frozenset[int] | None = None
    if allowed_list is not None:
        try:
            allowed = parse_cpulist(allowed_list)
        except ValueError:
            raise MalformedFile(base / "status",
                                f"Cpus_allowed_list {allowed_list!r}") from None

    status_path = base / "status"
    rss = status.get("VmRSS", "").split()  # absent for kernel threads and zombies
    threads = status.get("Threads")

    def count(key: str) -> int | None:
        value = status.get(key)
        return None if value is None else to_int(status_path, value)

    return ProcessInfo(
        pid=pid, comm=comm, state=rest[_STATE], ppid=to_int(stat_path, rest[_PPID]),
        threads=to_int(status_path, threads) if threads is not None
        else to_int(stat_path, rest[_THREADS]),
        cpu_seconds=(utime + stime) / clk_tck,
        rss_bytes=to_int(status_path, rss[0]) * 1024 if rss
        else to_int(stat_path, rest[_RSS]) * page_size,
        voluntary_ctxt_switches=count("voluntary_ctxt_switches"),
        involuntary_ctxt_switches=count("nonvoluntary_ctxt_switches"),
        run_queue_wait_seconds=wait,
        cpus_allowed=allowed, cpus_allowed_list=allowed_list,
        container_id=container, pod_uid=pod)
