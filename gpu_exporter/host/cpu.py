"""CPU time by mode and context switches (/proc/stat), and the load average
(/proc/loadavg)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.host.files import MalformedFile, line_fields, read_text, to_float, to_int

CLK_TCK = os.sysconf("SC_CLK_TCK")
# The columns of the aggregate "cpu" line, in order. guest and guest_nice come
# after these and are already counted in user and nice, so they are left out.
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Seconds all CPUs together spent in each mode since boot."""

    seconds: dict[str, float]  # only the modes this kernel reports
    context_switches: int | None

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


@dataclass(frozen=True, slots=True)
class CpuRatios:
    """Share of all CPU time in a mode between two readings, as the counters
    give it: 0-1 from a sane kernel, a little below 0 where the kernel's
    iowait stepped back, anything from a broken /proc (the collector holds
    it against its metric's bounds)."""

    iowait: float | None
    steal: float | None


def read_cpu_times(procfs: Path | str, clk_tck: int = CLK_TCK) -> CpuTimes:
    """Only the aggregate cpu line and the ctxt line are split."""
    path = f"{procfs}/stat"
    text = read_text(path)
    columns = line_fields(text, "cpu ")
    if columns is None:
        raise MalformedFile(path, "no aggregate cpu line")
    if len(columns) < 4:  # user nice system idle exist on every kernel
        raise MalformedFile(path, f"short cpu line {'cpu  ' + ' '.join(columns)!r}")
    try:
        ticks = [int(v) for v in columns[:len(CPU_MODES)]]
    except ValueError:  # name the first column that is not a number
        ticks = [to_int(path, v) for v in columns]
    seconds = dict(zip(CPU_MODES, (t / clk_tck for t in ticks), strict=False))
    ctxt = line_fields(text, "ctxt ")
    return CpuTimes(seconds, to_int(path, ctxt[0]) if ctxt and len(ctxt) == 1 else None)


def cpu_ratios(before: CpuTimes, after: CpuTimes) -> CpuRatios | None:
    """iowait and steal over the interval between two readings; None when no
    CPU time passed (the same reading twice). Where the total went backwards
    no share can be told: NaN, which no range holds."""
    total = after.total - before.total
    if total == 0:
        return None

    def ratio(mode: str) -> float | None:
        if mode not in before.seconds or mode not in after.seconds:
            return None
        if total < 0:
            return math.nan
        return (after.seconds[mode] - before.seconds[mode]) / total

    return CpuRatios(ratio("iowait"), ratio("steal"))


@dataclass(frozen=True, slots=True)
class LoadAverage:
    """Runnable plus uninterruptible tasks, averaged over 1, 5 and 15 minutes."""

    load1: float
    load5: float
    load15: float


def read_loadavg(procfs: Path | str) -> LoadAverage:
    path = f"{procfs}/loadavg"
    parts = read_text(path).split()
    if len(parts) < 3:
        raise MalformedFile(path, "fewer than three load averages")
    return LoadAverage(*(to_float(path, p) for p in parts[:3]))
