"""A cgroup's own pressure, CPU limit, memory limit and I/O limit (cgroup
v2): what its tasks stalled on, how often its CPU limit throttled it, how
close it runs to its memory limit and how hard the kernel reclaims from it
there, whether the OOM killer struck, and what io.max allows it on each
device beside what io.stat counts it moved there.

Read per job (a container's or a Slurm job's cgroup), so a cause is pinned on
the job that shows it rather than judged from host-wide counters. Every file
is optional: a cgroup v1 host has none of them, a kernel without PSI (or
booted with psi=0) has no ``*.pressure``, the cpu controller may not be
enabled for the subtree. What cannot be read or understood is None; nothing
here raises for what is found on disk. Counters are kept as totals since the
cgroup was made, so ``rate()`` works on them.
"""

from __future__ import annotations

import dataclasses
import errno
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from gpu_exporter.attribution.cgroup_tree import CgroupTree, Hierarchy, Problem, read_file
from gpu_exporter.host.pressure import Pressure, Stall

RESOURCES = ("cpu", "io", "memory")

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class CpuStat:
    """cpu.stat: CFS bandwidth periods and throttling. ``nr_periods`` stays 0
    while the cgroup has no CPU limit."""

    usage_seconds: float | None
    nr_periods: int | None
    nr_throttled: int | None
    throttled_seconds: float | None


@dataclass(frozen=True, slots=True)
class CpuLimit:
    """cpu.max. ``cores`` is quota / period (2.5 = two and a half CPUs' time
    per period); None when unlimited ("max")."""

    cores: float | None
    period_seconds: float


@dataclass(frozen=True, slots=True)
class MemoryState:
    """memory.max, memory.current, and the counters of reclaim at the limit:
    memory.events ``max`` (times the usage hit memory.max) and memory.stat
    ``pgsteal_direct`` (pages the charging tasks reclaimed themselves, which
    is what reclaim at a cgroup's own limit is). ``limit_bytes`` None: no
    limit ("max")."""

    limit_bytes: int | None
    used_bytes: int | None
    limit_hits: int | None
    reclaimed_pages: int | None


@dataclass(frozen=True, slots=True)
class IoLimit:
    """One device's line of io.max: bytes and I/Os per second it may read and
    write; None where "max" (no limit)."""

    rbps: int | None = None
    wbps: int | None = None
    riops: int | None = None
    wiops: int | None = None

    def limited(self) -> bool:
        return any(v is not None for v in (self.rbps, self.wbps, self.riops, self.wiops))


@dataclass(frozen=True, slots=True)
class IoCounters:
    """One device's line of io.stat: bytes and I/Os read and written since
    the cgroup was made. The kernel lists a device once the cgroup did I/O
    on it: one not listed has moved nothing."""

    rbytes: int
    wbytes: int
    rios: int
    wios: int


@dataclass(frozen=True, slots=True)
class CgroupSignals:
    """One cgroup's signals; each None when it could not be read."""

    cgroup: str  # relative to the cgroup root, starting with "/"
    cpu: Pressure | None
    io: Pressure | None
    memory: Pressure | None
    cpu_stat: CpuStat | None
    cpu_limit: CpuLimit | None
    oom_kills: int | None  # memory.events oom_kill: tasks killed, a counter
    memory_state: MemoryState | None = None
    # io.max by device ("MAJ:MIN"), only the devices with a limit ({}: none
    # anywhere); io.stat by device. None: the file could not be read or
    # understood (no io controller for the subtree, cgroup v1).
    io_limits: dict[str, IoLimit] | None = None
    io_stat: dict[str, IoCounters] | None = None
    # Why none of its files could be read (a gap to close); None when read.
    problem: str | None = None


def _number(text: str) -> float | None:
    if not text.isascii():
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _count(text: str) -> int | None:
    # Kernel counters are unsigned ASCII decimals; int() would also take "+1",
    # "1_0", and isdigit() alone digits int() refuses ("²").
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None


def _stall(fields: list[str]) -> Stall | None:
    values = dict(f.partition("=")[::2] for f in fields)
    avg10 = _number(values.get("avg10", ""))
    total = _count(values.get("total", ""))
    if avg10 is None or total is None or avg10 > 100:
        return None
    # avg10 is a percentage, total microseconds.
    return Stall(avg10 / 100.0, total / 1e6)


def parse_pressure(text: str) -> Pressure | None:
    """A ``*.pressure`` file: "some" and (kernel 5.13+ for cpu) "full" lines.
    None unless it has a readable "some" line."""
    lines: dict[str, Stall | None] = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] in ("some", "full") and parts[0] not in lines:
            lines[parts[0]] = _stall(parts[1:])
    some = lines.get("some")
    return Pressure(some, lines.get("full")) if some is not None else None


def _keyed(text: str) -> dict[str, int]:
    """"key value" lines (cpu.stat, memory.events); lines not of that shape
    are skipped."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and (n := _count(parts[1])) is not None:
            values.setdefault(parts[0], n)
    return values


def parse_cpu_stat(text: str) -> CpuStat | None:
    values = _keyed(text)
    if not values:
        return None
    usage, throttled = values.get("usage_usec"), values.get("throttled_usec")
    return CpuStat(
        usage_seconds=None if usage is None else usage / 1e6,
        nr_periods=values.get("nr_periods"), nr_throttled=values.get("nr_throttled"),
        throttled_seconds=None if throttled is None else throttled / 1e6)


def parse_cpu_max(text: str) -> CpuLimit | None:
    """"<quota> <period>" or "max <period>" (microseconds)."""
    parts = text.split()
    if len(parts) != 2:
        return None
    period = _count(parts[1])
    if not period:
        return None
    if parts[0] == "max":
        return CpuLimit(None, period / 1e6)
    quota = _count(parts[0])
    return None if quota is None else CpuLimit(quota / period, period / 1e6)


def parse_oom_kills(text: str) -> int | None:
    return _keyed(text).get("oom_kill")


def parse_memory_max(text: str) -> int | bool | None:
    """memory.max: bytes, or True for "max" (no limit); None when unreadable."""
    value = text.strip()
    if value == "max":
        return True
    return _count(value)


def parse_count(text: str) -> int | None:
    return _count(text.strip())


# A node has a few block devices; a file listing more than this is not the
# kernel's, and no more are kept (each is a series).
MAX_IO_DEVICES = 64
_IO_MAX_KEYS = ("rbps", "wbps", "riops", "wiops")
_IO_STAT_KEYS = ("rbytes", "wbytes", "rios", "wios")


def _device(text: str) -> str | None:
    """"MAJ:MIN" as the kernel prints a block device number."""
    major, sep, minor = text.partition(":")
    if not sep or len(major) > 10 or len(minor) > 10:
        return None
    return text if _count(major) is not None and _count(minor) is not None else None


_Values = dict[str, int | bool]


def _device_lines(text: str, keys: tuple[str, ...],
                  value: Callable[[str], int | bool | None]) -> dict[str, _Values] | None:
    """Lines of "MAJ:MIN key=value ..." (io.max, io.stat): each device's
    values of ``keys``; keys it does not know are skipped (newer kernels add
    some). None when a line is not of that shape, a value is not understood
    or a device repeats: a file the kernel did not write is refused whole."""
    devices: dict[str, _Values] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        device = _device(parts[0])
        if device is None or device in devices or len(devices) >= MAX_IO_DEVICES:
            return None
        values: _Values = {}
        for field in parts[1:]:
            key, sep, raw = field.partition("=")
            if not sep:
                return None
            if key in keys:
                got = value(raw)
                if got is None or key in values:
                    return None
                values[key] = got
        devices[device] = values
    return devices


def _limit_value(text: str) -> int | bool | None:
    """An io.max value: a count, or True for "max"."""
    return True if text == "max" else _count(text)


def parse_io_max(text: str) -> dict[str, IoLimit] | None:
    """io.max: the devices it limits (a device set back to "max" everywhere
    is left out, as the kernel leaves it out)."""
    devices = _device_lines(text, _IO_MAX_KEYS, _limit_value)
    if devices is None:
        return None
    out: dict[str, IoLimit] = {}
    for device, values in devices.items():
        limit = IoLimit(*(None if (v := values.get(k, True)) is True else int(v)
                          for k in _IO_MAX_KEYS))
        if limit.limited():
            out[device] = limit
    return out


def parse_io_stat(text: str) -> dict[str, IoCounters] | None:
    """io.stat: each device's bytes and I/Os read and written; a line
    without all four is refused with the file."""
    devices = _device_lines(text, _IO_STAT_KEYS, _count)
    if devices is None or any(len(v) != len(_IO_STAT_KEYS) for v in devices.values()):
        return None
    return {device: IoCounters(*(int(v[k]) for k in _IO_STAT_KEYS))
            for device, v in devices.items()}


_NONE_MOVED = IoCounters(0, 0, 0, 0)


def io_limit_use(limits: dict[str, IoLimit], devices: list[str],
                 before: dict[str, IoCounters], now: dict[str, IoCounters],
                 seconds: float) -> tuple[float, str] | None:
    """The largest share of an io.max limit the workload used on one of
    ``devices`` over ``seconds`` between two io.stat reads, and the device;
    None with no limit or no time between the reads. A counter that went back
    (the cgroup was made again) counts nothing."""
    if seconds <= 0:
        return None
    worst: tuple[float, str] | None = None
    for device in devices:
        a, b, limit = before.get(device, _NONE_MOVED), now.get(device, _NONE_MOVED), \
            limits.get(device)
        if limit is None:
            continue
        moved = ((b.rbytes - a.rbytes, limit.rbps), (b.wbytes - a.wbytes, limit.wbps),
                 (b.rios - a.rios, limit.riops), (b.wios - a.wios, limit.wiops))
        for amount, allowed in moved:
            if allowed is None or amount < 0:
                continue
            share = amount / seconds / allowed if allowed else 1.0
            if worst is None or share > worst[0]:
                worst = (share, device)
    return worst


# cgroup v1's memory.limit_in_bytes when no limit is set is PAGE_COUNTER_MAX
# pages (0x7FFFFFFFFFFFF000 with 4 KiB pages); anything from 2^62 up is that.
_V1_NO_LIMIT = 1 << 62


@dataclass(frozen=True, slots=True)
class CgroupPaths:
    """A workload's cgroup in each hierarchy, as /proc/PID/cgroup prints it
    to the exporter (relative to its cgroup namespace root)."""

    unified: str | None = None
    cpu: str | None = None  # cgroup v1's cpu hierarchy
    memory: str | None = None  # cgroup v1's memory hierarchy

    def key(self) -> str:
        """One name for the workload's cgroup, for what is kept between reads."""
        return self.unified or self.cpu or self.memory or ""


class _Reads:
    """The files read for one workload, and why the first one that could not
    be read could not (EACCES outranks ENOENT: a file not permitted is a gap,
    one not there is often a controller not enabled)."""

    def __init__(self) -> None:
        self.found = 0
        self.denied = False

    def text(self, directory: str | Problem, name: str) -> str | None:
        if isinstance(directory, Problem):
            return None
        got = read_file(directory, name)
        if isinstance(got, str):
            self.found += 1
            return got
        if got in (errno.EACCES, errno.EPERM):
            self.denied = True
        return None

    def parsed(self, directory: str | Problem, name: str,
               parse: Callable[[str], _T | None]) -> _T | None:
        text = self.text(directory, name)
        return None if text is None else parse(text)


def _v1_cpu_stat(text: str) -> CpuStat | None:
    """cgroup v1 cpu.stat: nr_periods, nr_throttled, throttled_time (ns)."""
    values = _keyed(text)
    if "nr_periods" not in values:
        return None
    throttled = values.get("throttled_time")
    return CpuStat(None, values.get("nr_periods"), values.get("nr_throttled"),
                   None if throttled is None else throttled / 1e9)


def _v1_quota(text: str) -> int | None:
    """cpu.cfs_quota_us: microseconds per period, -1 for no limit (0 here)."""
    value = text.strip()
    return 0 if value == "-1" else _count(value)


def _v1_memory(reads: _Reads, directory: str | Problem) -> tuple[MemoryState | None, int | None]:
    limit = reads.parsed(directory, "memory.limit_in_bytes", parse_count)
    used = reads.parsed(directory, "memory.usage_in_bytes", parse_count)
    if limit is None and used is None:
        return None, None
    # failcnt: times a charge failed at the limit, v1's count of hitting it.
    hits = reads.parsed(directory, "memory.failcnt", parse_count)
    oom = reads.parsed(directory, "memory.oom_control", _keyed)
    state = MemoryState(None if limit is None or limit >= _V1_NO_LIMIT else limit, used,
                        hits, None)
    return state, None if oom is None else oom.get("oom_kill")


def _placed(tree: CgroupTree, hierarchy: Hierarchy | None,
            printed: str | None) -> str | Problem | None:
    if hierarchy is None or printed is None:
        return None
    return hierarchy.directory(printed)


def read_signals(tree: CgroupTree, paths: CgroupPaths) -> CgroupSignals:
    """The signals of the workload whose cgroup is ``paths``, read from the
    unified hierarchy where it has them and from cgroup v1's cpu and memory
    hierarchies where it does not (hybrid and v1 hosts)."""
    reads = _Reads()
    unified = _placed(tree, tree.unified, paths.unified)
    cpu_v1 = _placed(tree, tree.cpu, paths.cpu)
    memory_v1 = _placed(tree, tree.memory, paths.memory)
    none: Problem = Problem.NO_FILES

    def v2(name: str, parse: Callable[[str], _T | None]) -> _T | None:
        return None if unified is None else reads.parsed(unified, name, parse)

    events = v2("memory.events", _keyed)
    limit = v2("memory.max", parse_memory_max)
    used = v2("memory.current", parse_count)
    memory_state = None
    oom_kills = None if events is None else events.get("oom_kill")
    if limit is not None or used is not None:  # else no memory controller here
        stat = v2("memory.stat", _keyed)
        memory_state = MemoryState(
            None if limit is None or limit is True else int(limit), used,
            None if events is None else events.get("max"),
            None if stat is None else stat.get("pgsteal_direct"))
    elif memory_v1 is not None:
        memory_state, oom_kills = _v1_memory(reads, memory_v1)
    cpu_stat = v2("cpu.stat", parse_cpu_stat)
    cpu_limit = v2("cpu.max", parse_cpu_max)
    if cpu_limit is None and cpu_v1 is not None:
        # The unified cpu.stat has usage alone where the cpu controller is
        # v1's: the periods and throttling are read there.
        v1_stat = reads.parsed(cpu_v1, "cpu.stat", _v1_cpu_stat)
        if v1_stat is not None:
            cpu_stat = CpuStat(cpu_stat.usage_seconds if cpu_stat else None,
                               v1_stat.nr_periods, v1_stat.nr_throttled,
                               v1_stat.throttled_seconds)
        quota = reads.parsed(cpu_v1, "cpu.cfs_quota_us", _v1_quota)
        period = reads.parsed(cpu_v1, "cpu.cfs_period_us", parse_count)
        if quota is not None and period:
            cpu_limit = CpuLimit(quota / period if quota else None, period / 1e6)
    signals = CgroupSignals(
        cgroup=paths.key(),
        cpu=v2("cpu.pressure", parse_pressure),
        io=v2("io.pressure", parse_pressure),
        memory=v2("memory.pressure", parse_pressure),
        cpu_stat=cpu_stat, cpu_limit=cpu_limit, oom_kills=oom_kills,
        memory_state=memory_state, io_limits=v2("io.max", parse_io_max),
        io_stat=v2("io.stat", parse_io_stat))
    if reads.found:
        return signals
    placed = [d for d in (unified, cpu_v1, memory_v1) if d is not None]
    if tree.layout == "none" or not placed:
        none = Problem.NO_TREE
    elif reads.denied:
        none = Problem.DENIED
    elif problems := [d for d in placed if isinstance(d, Problem)]:
        none = problems[0]
    elif not any(os.path.isdir(d) for d in placed if isinstance(d, str)):
        none = Problem.NOT_FOUND
    return dataclasses.replace(signals, problem=tree.problem_text(none))
