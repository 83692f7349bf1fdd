"""The host around the GPUs: CPU iowait and steal, pressure stalls, memory and
swap, load, context switches, disk busy time and network receive errors. A slow
GPU is usually waiting on its host; these are the host's side of that story.

Ratios and rates over an interval need the previous reading, so the first poll
exports none (never a made-up 0). A source this kernel does not have (no PSI)
is absent and said once in the log; a file that cannot be read is counted in
errors() and the other sources are still exported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Self, TypeVar

from gpu_exporter.collectors.base import Collector
from gpu_exporter.host import cpu, disks, memory, network, pressure
from gpu_exporter.host.reading import HostReading
from gpu_exporter.readings import HostSignals
from gpu_exporter.runtime import Runtime
from gpu_exporter.snapshot import SnapshotBuilder

log = logging.getLogger(__name__)
T = TypeVar("T")

# Bounds the label cardinality of per-device series: a node with hundreds of
# block devices or interfaces exports the first ones by name.
MAX_DEVICES = 64


@dataclass(frozen=True, slots=True)
class _Previous:
    at: float
    cpu: cpu.CpuTimes | None
    disks: disks.DiskBusy | None
    swap: memory.SwapActivity | None


class _Sources:
    """Reads each source, remembering which are absent or failing so each is
    logged once (and once more when it recovers), not every poll."""

    def __init__(self, procfs: Path) -> None:
        self.procfs = procfs
        self.absent: set[str] = set()
        self.failing: set[str] = set()
        self.errors = 0
        self.read_ok = 0
        self.first_error: Exception | None = None

    def begin(self) -> None:
        self.errors = self.read_ok = 0
        self.first_error = None

    def read(self, source: str, fn: Callable[..., T], *args: object) -> T | None:
        try:
            value = fn(self.procfs, *args)
        except FileNotFoundError as exc:
            if source not in self.absent:
                self.absent.add(source)
                log.info("%s does not exist on this host (%s); its series are absent",
                         source, exc.filename or source)
            self.first_error = self.first_error or exc
            return None
        except (OSError, ValueError) as exc:
            self.errors += 1
            self.first_error = self.first_error or exc
            if source not in self.failing:
                self.failing.add(source)
                log.warning("reading %s failed: %s; its series are absent until it can be "
                            "read", source, exc)
            return None
        if source in self.failing:
            self.failing.discard(source)
            log.info("%s can be read again", source)
        self.absent.discard(source)
        self.read_ok += 1
        return value


class HostCollector(Collector):
    name = "host"
    description = ("host CPU iowait/steal, pressure stalls, memory, swap, load, disks, "
                   "network")
    settings = ("path.procfs",)

    def __init__(self, procfs: Path, monotonic: Callable[[], float] = time.monotonic,
                 max_devices: int = MAX_DEVICES, page_size: int = memory.PAGE_SIZE) -> None:
        self.procfs = procfs
        self._mono = monotonic
        self._max = max_devices
        self._page_size = page_size
        self._src = _Sources(procfs)
        self._prev: _Previous | None = None
        self._capped: set[str] = set()

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        return cls(rt.settings.path.procfs, rt.monotonic)

    def errors(self) -> int:
        return self._src.errors

    def collect(self, out: SnapshotBuilder) -> None:
        src = self._src
        src.begin()
        now = self._mono()
        prev = self._prev
        dt = now - prev.at if prev is not None else 0.0

        times = src.read("/proc/stat", cpu.read_cpu_times)
        ratios, ctxt_rate = self._cpu(out, times, prev.cpu if prev else None, dt)
        stalls = self._pressure(out)
        mem = src.read("/proc/meminfo", memory.read_meminfo)
        if mem is not None:
            out.add("gpu_host_memory_total_bytes", mem.total_bytes)
            if mem.available_bytes is not None:
                out.add("gpu_host_memory_available_bytes", mem.available_bytes)
            out.add("gpu_host_swap_used_bytes", mem.swap_used_bytes)
        swap = src.read("/proc/vmstat", memory.read_swap_activity, self._page_size)
        swap_in, swap_out = self._swap(out, swap, prev.swap if prev else None, dt)
        load = src.read("/proc/loadavg", cpu.read_loadavg)
        if load is not None:
            for window, value in (("1m", load.load1), ("5m", load.load5),
                                  ("15m", load.load15)):
                out.add("gpu_host_load_average", value, window=window)
        busy = src.read("/proc/diskstats", disks.read_diskstats)
        busy_ratios = self._disks(out, busy, prev.disks if prev else None, dt)
        self._network(out, src.read("/proc/net/dev", network.read_netdev))

        if src.read_ok == 0 and src.first_error is not None:
            # Nothing at all could be read: the root is wrong or not mounted.
            raise RuntimeError(f"no host source under {self.procfs} could be read: "
                               f"{src.first_error}")

        self._prev = _Previous(now, times, busy, swap)
        reading = HostReading(
            iowait_ratio=ratios.iowait if ratios else None,
            steal_ratio=ratios.steal if ratios else None,
            pressure=stalls,
            memory_total_bytes=mem.total_bytes if mem else None,
            memory_available_bytes=mem.available_bytes if mem else None,
            swap_used_bytes=mem.swap_used_bytes if mem else None,
            swap_in_bytes_per_s=swap_in, swap_out_bytes_per_s=swap_out,
            context_switches_per_s=ctxt_rate, load=load, disk_busy_ratio=busy_ratios)
        out.readings.host = reading
        out.readings.host_signals = _signals(reading)

    @staticmethod
    def _cpu(out: SnapshotBuilder, times: cpu.CpuTimes | None, before: cpu.CpuTimes | None,
             dt: float) -> tuple[cpu.CpuRatios | None, float | None]:
        """iowait and steal ratios and the context switch rate since the last poll."""
        if times is None:
            return None, None
        # The counters carry every second between scrapes; the ratios below
        # are the last poll's share, for the diagnosis's now-value.
        out.add("gpu_host_cpu_seconds_total", times.total)
        for mode, name in (("iowait", "gpu_host_cpu_iowait_seconds_total"),
                           ("steal", "gpu_host_cpu_steal_seconds_total")):
            if mode in times.seconds:
                out.add(name, times.seconds[mode])
        ratios = cpu.cpu_ratios(before, times) if before is not None else None
        if ratios is not None and ratios.iowait is not None:
            out.add("gpu_host_cpu_iowait_ratio", ratios.iowait)
        if ratios is not None and ratios.steal is not None:
            out.add("gpu_host_cpu_steal_ratio", ratios.steal)
        rate = None
        if times.context_switches is not None:
            out.add("gpu_host_context_switches_total", times.context_switches)
            if before is not None and before.context_switches is not None and dt > 0:
                rate = max(0, times.context_switches - before.context_switches) / dt
        return ratios, rate

    def _pressure(self, out: SnapshotBuilder) -> dict[str, pressure.Pressure]:
        stalls = {}
        for resource in pressure.RESOURCES:
            p = self._src.read(f"/proc/pressure/{resource}", pressure.read_pressure, resource)
            if p is None:
                continue
            stalls[resource] = p
            for kind, stall in (("some", p.some), ("full", p.full)):
                if stall is not None:
                    out.add("gpu_host_pressure_ratio", stall.avg10, resource=resource, kind=kind)
                    out.add("gpu_host_pressure_stalled_seconds_total", stall.total_seconds,
                            resource=resource, kind=kind)
        return stalls

    @staticmethod
    def _swap(out: SnapshotBuilder, swap: memory.SwapActivity | None,
              before: memory.SwapActivity | None, dt: float) -> tuple[float | None, float | None]:
        """Swap-in and swap-out bytes per second since the last poll."""
        if swap is None:
            return None, None
        out.add("gpu_host_swap_bytes_total", swap.in_bytes, direction="in")
        out.add("gpu_host_swap_bytes_total", swap.out_bytes, direction="out")
        if before is None or dt <= 0:
            return None, None
        return (max(0, swap.in_bytes - before.in_bytes) / dt,
                max(0, swap.out_bytes - before.out_bytes) / dt)

    def _disks(self, out: SnapshotBuilder, busy: disks.DiskBusy | None,
               before: disks.DiskBusy | None, dt: float) -> dict[str, float]:
        if busy is None:
            return {}
        for name in self._cap("block devices", busy.busy_seconds):
            out.add("gpu_host_disk_busy_seconds_total", busy.busy_seconds[name], device=name)
        if before is None:
            return {}
        ratios = disks.busy_ratios(before, busy, dt)
        for name in self._cap("block devices", ratios):
            out.add("gpu_host_disk_busy_ratio", ratios[name], device=name)
        return ratios

    def _network(self, out: SnapshotBuilder,
                 net: dict[str, network.ReceiveCounters] | None) -> None:
        if net is None:
            return
        for name in self._cap("network interfaces", net):
            out.add("gpu_host_network_receive_errors_total", net[name].errors, interface=name)
            out.add("gpu_host_network_receive_drops_total", net[name].drops, interface=name)

    def _cap(self, what: str, by_name: dict[str, T]) -> list[str]:
        names = sorted(by_name)
        if len(names) > self._max and what not in self._capped:
            self._capped.add(what)
            log.warning("%d %s: exporting the first %d by name to bound the number of series",
                        len(names), what, self._max)
        return names[:self._max]


def _signals(f: HostReading) -> HostSignals:
    """The figures the diagnosis rules read."""
    cpu_p, mem_p, io_p = (f.pressure.get(r) for r in pressure.RESOURCES)
    swap = None
    if f.swap_in_bytes_per_s is not None and f.swap_out_bytes_per_s is not None:
        swap = f.swap_in_bytes_per_s + f.swap_out_bytes_per_s
    return HostSignals(
        iowait_ratio=f.iowait_ratio,
        io_pressure_some=io_p.some.avg10 if io_p else None,
        cpu_pressure_some=cpu_p.some.avg10 if cpu_p else None,
        memory_pressure_full=mem_p.full.avg10 if mem_p and mem_p.full else None,
        swap_bytes_per_s=swap)
