"""A cgroup's own pressure, CPU limit and memory limit (cgroup v2): what its
tasks stalled on, how often its CPU limit throttled it, how close it runs to
its memory limit and how hard the kernel reclaims from it there, and whether
the OOM killer struck.

Read per job (a container's or a Slurm job's cgroup), so a cause is pinned on
the job that shows it rather than judged from host-wide counters. Every file
is optional: a cgroup v1 host has none of them, a kernel without PSI (or
booted with psi=0) has no ``*.pressure``, the cpu controller may not be
enabled for the subtree. What cannot be read or understood is None; nothing
here raises for what is found on disk. Counters are kept as totals since the
cgroup was made, so ``rate()`` works on them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gpu_exporter.attribution.procfiles import read_text_bounded
from gpu_exporter.host.pressure import Pressure, Stall

RESOURCES = ("cpu", "io", "memory")
DEFAULT_ROOT = "/sys/fs/cgroup"

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


def cgroup_dir(root: Path | str, cgroup: str) -> str | None:
    """``root`` joined with a cgroup path from /proc/PID/cgroup, or None for a
    path that could leave ``root`` ("..", NUL) or is not absolute."""
    if not cgroup.startswith("/") or "\0" in cgroup:
        return None
    parts = [p for p in cgroup.split("/") if p]
    if any(p in (".", "..") for p in parts):
        return None
    return os.path.join(os.fspath(root), *parts)


def read_signals(root: Path | str, cgroup: str) -> CgroupSignals:
    """The signals of ``cgroup`` (a path like "/kubepods.slice/...") under the
    cgroup v2 mount ``root``."""
    base = cgroup_dir(root, cgroup)

    def parsed(name: str, parse: Callable[[str], _T | None]) -> _T | None:
        content = None if base is None else read_text_bounded(os.path.join(base, name))
        return None if content is None else parse(content)

    events = parsed("memory.events", _keyed)
    limit = parsed("memory.max", parse_memory_max)
    used = parsed("memory.current", parse_count)
    memory_state = None
    if limit is not None or used is not None:  # else no memory controller here
        stat = parsed("memory.stat", _keyed)
        memory_state = MemoryState(
            None if limit is None or limit is True else int(limit), used,
            None if events is None else events.get("max"),
            None if stat is None else stat.get("pgsteal_direct"))
    return CgroupSignals(
        cgroup=cgroup,
        cpu=parsed("cpu.pressure", parse_pressure),
        io=parsed("io.pressure", parse_pressure),
        memory=parsed("memory.pressure", parse_pressure),
        cpu_stat=parsed("cpu.stat", parse_cpu_stat),
        cpu_limit=parsed("cpu.max", parse_cpu_max),
        oom_kills=None if events is None else events.get("oom_kill"),
        memory_state=memory_state)
