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
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.host.files import MalformedFile, to_int

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

# Fields of /proc/PID/stat after "pid (comm) ", counted from 0 (proc(5) minus 3).
_STATE, _PPID, _UTIME, _STIME, _THREADS, _STARTTIME, _RSS = 0, 1, 11, 12, 17, 19, 21

# The lines of /proc/PID/status that are used, each as "\n<key>:" so that a
# search finds it only at the start of a line (and "voluntary_ctxt_switches"
# not inside "nonvoluntary_ctxt_switches").
_STATUS_KEYS = ("\nThreads:", "\nVmRSS:", "\nCpus_allowed_list:",
                "\nvoluntary_ctxt_switches:", "\nnonvoluntary_ctxt_switches:")

# A process's files are far smaller than this (status, the largest, ~1.5 KiB).
_CHUNK = 16384

# Distinct Cpus_allowed_list texts remembered; a node has a handful (one per
# NUMA node, "all"), so reaching this means something churns: start afresh.
_CPULISTS_MAX = 256
# Children read per process (a loader forks a few dozen at most).
_CHILDREN_MAX = 64

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
    # The states of the children its main thread forked (DataLoader workers,
    # say), from /proc/PID/task/PID/children and each child's stat; None
    # where the kernel has no such file (CONFIG_PROC_CHILDREN off).
    children_states: tuple[str, ...] | None = None


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


def read_text(path: str) -> str:
    """One of a process's files, whole. As host.files.read_text, less the
    closing empty read where the first read did not fill the buffer: stat,
    status, schedstat and cgroup are single-record seq_files, which hand over
    all they hold in one read, so a short read is their end. One syscall fewer
    per file, three files per GPU process every poll."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, _CHUNK)
        if len(data) == _CHUNK:  # there may be more: read on to the end
            parts = [data]
            while chunk := os.read(fd, _CHUNK):
                parts.append(chunk)
            data = b"".join(parts)
    finally:
        os.close(fd)
    # Names (comm) can hold any bytes: what is not UTF-8 is replaced.
    return data.decode("utf-8", errors="replace")


class _Gone(Exception):
    """The process exited while it was being read."""


def _read(path: str) -> str:
    try:
        return read_text(path)
    except FileNotFoundError:
        raise _Gone() from None
    except OSError as exc:
        # Reading a file of a process that has just exited can fail with ESRCH.
        if exc.errno == errno.ESRCH:
            raise _Gone() from None
        raise


def _optional(base: str, name: str) -> str | None:
    """A file some kernels lack; None then. Raises _Gone when the process is."""
    try:
        return _read(f"{base}/{name}")
    except _Gone:
        if not os.path.exists(base):
            raise
        return None


def _status_values(text: str) -> list[str | None]:
    """The values of the status lines used (_STATUS_KEYS order), each from
    the key's last line, stripped; None for a key not there. A search for the
    few keys rather than a dict of all ~55 lines: the file is read for every
    GPU process every poll."""
    values: list[str | None] = []
    for key in _STATUS_KEYS:
        i = text.rfind(key)
        if i < 0:
            if not text.startswith(key[1:]):
                values.append(None)
                continue
            i = -1  # on the first line, which has no "\n" before it
        end = text.find("\n", i + 1)
        values.append(text[i + len(key):end if end >= 0 else None].strip())
    return values


class ProcessReader:
    """Reads the processes of one procfs poll after poll, remembering what
    does not change in a process's life, so that each poll reads and parses
    only what does.

    A process's cgroup (its container and pod) is set when it starts; it is
    remembered per process instance, keyed by PID and start time (stat field
    22), so a PID reused by another process is read afresh and never given
    the old one's container. ``retain`` forgets the processes no longer
    listed. Cpus_allowed_list texts are few and repeat across processes:
    each is parsed once.
    """

    def __init__(self, procfs: Path | str, clk_tck: int = CLK_TCK,
                 page_size: int = PAGE_SIZE) -> None:
        # A string, not a Path: joining and converting Paths was ~15 % of the
        # processes collector's CPU.
        self._root = os.fspath(procfs)
        self._clk_tck = clk_tck
        self._page_size = page_size
        self._cgroups: dict[int, tuple[str, tuple[str, str]]] = {}
        self._cpulists: dict[str, frozenset[int]] = {}
        self._children_file = True

    def read(self, pid: int) -> ProcessInfo | None:
        """The process's facts, or None when it is gone now. Raises
        MalformedFile for a file it cannot understand, OSError for one it
        cannot read."""
        try:
            return self._read(f"{self._root}/{pid}", pid)
        except _Gone:
            self._cgroups.pop(pid, None)
            return None

    def retain(self, pids: Iterable[int]) -> None:
        """Forget the processes not in ``pids`` (keeps memory bounded by the
        processes listed)."""
        keep = set(pids)
        for pid in [p for p in self._cgroups if p not in keep]:
            del self._cgroups[pid]

    def _cpus(self, base: str, text: str) -> frozenset[int]:
        cpus = self._cpulists.get(text)
        if cpus is None:
            try:
                cpus = parse_cpulist(text)
            except ValueError:
                raise MalformedFile(f"{base}/status", f"Cpus_allowed_list {text!r}") from None
            if len(self._cpulists) >= _CPULISTS_MAX:
                self._cpulists.clear()
            self._cpulists[text] = cpus
        return cpus

    def _children_states(self, base: str, pid: int) -> tuple[str, ...] | None:
        """The states of the first _CHILDREN_MAX children of the process's
        main thread; None without the children file."""
        if not self._children_file:
            return None
        text = _optional(base, f"task/{pid}/children")
        if text is None:  # the kernel keeps none (CONFIG_PROC_CHILDREN off): stop asking
            self._children_file = False
            return None
        states = []
        for word in text.split()[:_CHILDREN_MAX]:
            if word.isascii() and word.isdigit():
                state = _child_state(f"{self._root}/{word}/stat")
                if state is not None:
                    states.append(state)
        return tuple(states)

    def _read(self, base: str, pid: int) -> ProcessInfo:
        stat_path = f"{base}/stat"
        stat = _read(stat_path)
        status = _read(f"{base}/status")
        # comm may contain spaces and parentheses: it ends at the last ")".
        open_, close = stat.find("("), stat.rfind(")")
        if open_ < 0 or close < open_:
            raise MalformedFile(stat_path, "no (comm)")
        comm = stat[open_ + 1:close]
        # Only the fields up to rss are used: the ~30 after it are not split off.
        rest = stat[close + 1:].split(None, _RSS + 1)
        if len(rest) <= _RSS:
            raise MalformedFile(stat_path,
                                f"{len(rest) + 2} fields, expected at least {_RSS + 3}")
        utime, stime = to_int(stat_path, rest[_UTIME]), to_int(stat_path, rest[_STIME])

        wait: float | None = None
        schedstat = _optional(base, "schedstat")
        if schedstat is not None:
            # cpu time on the CPU (ns), time waiting on a run queue (ns), timeslices
            fields = schedstat.split(None, 2)
            if len(fields) < 2:
                raise MalformedFile(f"{base}/schedstat", "fewer than two fields")
            wait = to_int(f"{base}/schedstat", fields[1]) / 1e9

        started = rest[_STARTTIME]
        known = self._cgroups.get(pid)
        if known is not None and known[0] == started:
            container, pod = known[1]
        else:
            cgroup = _optional(base, "cgroup")
            container, pod = cgroup_ids(cgroup) if cgroup is not None else ("", "")
            self._cgroups[pid] = (started, (container, pod))

        threads_text, rss_text, allowed_list, voluntary_text, involuntary_text = (
            _status_values(status))
        allowed = self._cpus(base, allowed_list) if allowed_list is not None else None
        status_path = f"{base}/status"
        # VmRSS ("<n> kB") is absent for kernel threads and zombies: rss from stat then.
        rss_kib = rss_text.split(None, 1) if rss_text is not None else None
        if rss_kib:
            rss = to_int(status_path, rss_kib[0]) * 1024
        else:
            rss = to_int(stat_path, rest[_RSS]) * self._page_size
        threads = None if threads_text is None else to_int(status_path, threads_text)
        voluntary = None if voluntary_text is None else to_int(status_path, voluntary_text)
        involuntary = (None if involuntary_text is None
                       else to_int(status_path, involuntary_text))

        return ProcessInfo(
            children_states=self._children_states(base, pid),
            pid=pid, comm=comm, state=rest[_STATE], ppid=to_int(stat_path, rest[_PPID]),
            threads=threads if threads is not None else to_int(stat_path, rest[_THREADS]),
            cpu_seconds=(utime + stime) / self._clk_tck, rss_bytes=rss,
            voluntary_ctxt_switches=voluntary, involuntary_ctxt_switches=involuntary,
            run_queue_wait_seconds=wait,
            cpus_allowed=allowed, cpus_allowed_list=allowed_list,
            container_id=container, pod_uid=pod)


def _child_state(path: str) -> str | None:
    try:
        stat = read_text(path)
    except OSError:  # gone since its parent listed it
        return None
    close = stat.rfind(")")
    state = stat[close + 1:close + 3].strip() if close > 0 else ""
    return state or None


def read_process(procfs: Path, pid: int, clk_tck: int = CLK_TCK,
                 page_size: int = PAGE_SIZE) -> ProcessInfo | None:
    """The process's facts, or None when it is gone now. Raises MalformedFile
    for a file it cannot understand. Reads every file afresh; a collector that
    reads the same processes each poll keeps a ProcessReader instead."""
    return ProcessReader(procfs, clk_tck, page_size).read(pid)
