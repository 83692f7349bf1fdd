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
from pathlib import Path
from typing import Self, TypeVar

from gpu_exporter.catalogs import host as m
from gpu_exporter.collectors.base import Collector
from gpu_exporter.collectors.values import accept, accept_counter, accept_share, series_key
from gpu_exporter.facts.catalog_types import Metric
from gpu_exporter.host import cpu, disks, memory, network, pressure, thermal
from gpu_exporter.host.reading import HostReading
from gpu_exporter.poll.readings import HostSignals
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import SnapshotBuilder

log = logging.getLogger(__name__)
T = TypeVar("T")

# The CPUs' thermal counters are one file per core: on a node of a hundred
# cores most of a poll's reads. They only count up, so reading them this
# seldom loses no event, only when within these seconds it came.
THERMAL_EVERY_S = 5.0

# Bounds the label cardinality of per-device series: a node with hundreds of
# block devices or interfaces exports the first ones by name.
MAX_DEVICES = 64


class _Sources:
    """Reads each source, remembering which are absent or failing so each is
    logged once (and once more when it recovers), not every poll. Also the
    host's tally for collectors/values.py: a reading no host can report
    counts in ``errors`` like a file that cannot be read."""

    label = kind = "host"

    def __init__(self, procfs: Path) -> None:
        self.procfs = procfs
        self.absent: set[str] = set()
        self.failing: set[str] = set()
        self.errors = 0
        self.read_ok = 0
        self.first_error: Exception | None = None
        self.warned: set[str] = set()
        self.counters: dict[str, float] = {}

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
    """Every value passes its metric's bounds before it is exported or
    reaches the diagnosis: one the host cannot report (a negative count, a
    ratio above 1, a counter going backwards, more memory available than
    there is) leaves its series absent for that poll and counts a read error.
    A rate or ratio over the interval needs both ends: it is absent for a
    poll whose reading, or whose previous reading, was rejected."""

    name = "host"
    description = ("host CPU iowait/steal, pressure stalls, memory, swap, load, disks, "
                   "network, CPU thermal throttling")
    settings = (lambda s: s.path.procfs, lambda s: s.path.sysfs)

    def __init__(self, procfs: Path, monotonic: Callable[[], float] = time.monotonic,
                 max_devices: int = MAX_DEVICES, page_size: int = memory.PAGE_SIZE,
                 sysfs: Path | None = None) -> None:
        self.procfs = procfs
        # None: the CPUs' thermal counters are not read (a caller with only /proc).
        self.sysfs = sysfs
        self._cpu_topology: dict[int, tuple[int, int]] = {}
        # The last thermal reading, its time, and whether the CPUs keep counters.
        self._thermal_read: tuple[float, thermal.ThermalThrottle | None, bool | None] | None = \
            None
        self._mono = monotonic
        self._max = max_devices
        self._page_size = page_size
        self._src = _Sources(procfs)
        # The last poll's readings the ratios are taken against, with its time.
        self._cpu_before: tuple[float, cpu.CpuTimes] | None = None
        self._disks_before: tuple[float, disks.DiskBusy] | None = None
        # The last accepted counter readings the rates are taken against, by series.
        self._counted: dict[str, tuple[float, float]] = {}
        self._capped: set[str] = set()

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        return cls(rt.settings.path.procfs, rt.monotonic, sysfs=rt.settings.path.sysfs)

    def errors(self) -> int:
        return self._src.errors

    def collect(self, out: SnapshotBuilder) -> None:
        src = self._src
        src.begin()
        now = self._mono()

        times = src.read("/proc/stat", cpu.read_cpu_times)
        iowait, steal, ctxt_rate = self._cpu(out, times, now)
        stalls = self._pressure(out, now)
        mem = src.read("/proc/meminfo", memory.read_meminfo)
        total, available, swap_used = self._memory(out, mem)
        swap = src.read("/proc/vmstat", memory.read_swap_activity, self._page_size)
        swap_in, swap_out = self._swap(out, swap, now)
        load = self._load(out, src.read("/proc/loadavg", cpu.read_loadavg))
        busy = src.read("/proc/diskstats", disks.read_diskstats)
        busy_ratios = self._disks(out, busy, now)
        self._network(out, src.read("/proc/net/dev", network.read_netdev), now)
        throttles, thermal_kept = self._thermal(out, now)

        if src.read_ok == 0 and src.first_error is not None:
            # Nothing at all could be read: the root is wrong or not mounted.
            raise RuntimeError(f"no host source under {self.procfs} could be read: "
                               f"{src.first_error}")

        reading = HostReading(
            iowait_ratio=iowait, steal_ratio=steal, pressure=stalls,
            memory_total_bytes=total, memory_available_bytes=available,
            swap_used_bytes=swap_used,
            swap_in_bytes_per_s=swap_in, swap_out_bytes_per_s=swap_out,
            context_switches_per_s=ctxt_rate, load=load, disk_busy_ratio=busy_ratios,
            cpu_thermal=throttles, cpu_thermal_kept=thermal_kept)
        out.readings.host = reading
        out.readings.host_signals = _signals(reading)

    def _counter(self, out: SnapshotBuilder, metric: Metric, value: float, now: float,
                 *series: str) -> float | None:
        """Export the counter if collectors.values.accept_counter() accepts it;
        its rate per second since its last accepted reading (None on the
        first one, when rejected, or when no time passed)."""
        if not accept_counter(self._src, self._src.counters, metric, value, *series):
            return None
        out.add_values(metric, series, value)
        key = series_key(metric, series)
        before = self._counted.get(key)
        self._counted[key] = (now, value)
        if before is None or now <= before[0]:
            return None
        return (value - before[1]) / (now - before[0])

    def _held(self, metric: Metric, value: float) -> float:
        """A CPU time that stepped back held at its last accepted reading. The
        kernel's iowait count may decrease (proc(5): "not reliable"; it is kept
        per CPU and a task moves between CPUs): the step back is the kernel's
        own, not a faulty reading, and a counter exported lower would read as a
        reset to rate()."""
        last = self._counted.get(metric.name)
        return max(value, last[1]) if last is not None else value

    def _share(self, out: SnapshotBuilder, metric: Metric, value: float | None,
               *series: str) -> float | None:
        """Export a share of the interval if collectors.values.accept_share() accepts it."""
        if value is None:
            return None
        share = accept_share(self._src, metric, value, *series)
        if share is not None:
            out.add_values(metric, series, share)
        return share

    def _gauge(self, out: SnapshotBuilder, metric: Metric, value: float, *series: str,
               ceiling: float | None = None) -> bool:
        """Export a gauge if collectors.values.accept() accepts it; whether it did."""
        if not accept(self._src, metric, value, *series, ceiling=ceiling):
            return False
        out.add_values(metric, series, value)
        return True

    def _cpu(self, out: SnapshotBuilder, times: cpu.CpuTimes | None,
             now: float) -> tuple[float | None, float | None, float | None]:
        """iowait and steal ratios and the context switch rate since the last poll."""
        if times is None:
            return None, None, None
        # The counters carry every second between scrapes; the ratios below
        # are the last poll's share, for the diagnosis's now-value.
        self._counter(out, m.HOST_CPU_SECONDS_TOTAL, times.total, now)
        for mode, family in (("iowait", m.HOST_CPU_IOWAIT_SECONDS_TOTAL),
                             ("steal", m.HOST_CPU_STEAL_SECONDS_TOTAL)):
            if mode in times.seconds:
                self._counter(out, family, self._held(family, times.seconds[mode]), now)
        before, self._cpu_before = self._cpu_before, (now, times)
        ratios = cpu.cpu_ratios(before[1], times) if before is not None else None
        iowait = steal = rate = None
        if ratios is not None:
            iowait = self._share(out, m.HOST_CPU_IOWAIT_RATIO, ratios.iowait)
            steal = self._share(out, m.HOST_CPU_STEAL_RATIO, ratios.steal)
        if times.context_switches is not None:
            rate = self._counter(out, m.HOST_CONTEXT_SWITCHES_TOTAL,
                                 times.context_switches, now)
        return iowait, steal, rate

    def _pressure(self, out: SnapshotBuilder, now: float) -> dict[str, pressure.Pressure]:
        """Each resource's stalls; a resource whose "some" share is rejected is
        left out of the reading, a rejected "full" share leaves only "some"."""
        stalls = {}
        for resource in pressure.RESOURCES:
            p = self._src.read(f"/proc/pressure/{resource}", pressure.read_pressure, resource)
            if p is None:
                continue
            shown: dict[str, pressure.Stall | None] = {}
            for kind, stall in (("some", p.some), ("full", p.full)):
                if stall is None:
                    continue
                if self._gauge(out, m.HOST_PRESSURE_RATIO, stall.avg10, resource, kind):
                    shown[kind] = stall
                self._counter(out, m.HOST_PRESSURE_STALLED_SECONDS_TOTAL,
                              stall.total_seconds, now, resource, kind)
            some = shown.get("some")
            if some is not None:
                stalls[resource] = pressure.Pressure(some, shown.get("full"))
        return stalls

    def _memory(self, out: SnapshotBuilder, mem: memory.MemInfo | None
                ) -> tuple[int | None, int | None, int | None]:
        """Total and available memory, swap in use: each None when rejected."""
        if mem is None:
            return None, None, None
        total = (mem.total_bytes
                 if self._gauge(out, m.HOST_MEMORY_TOTAL_BYTES, mem.total_bytes) else None)
        available = None
        if mem.available_bytes is not None and self._gauge(
                out, m.HOST_MEMORY_AVAILABLE_BYTES, mem.available_bytes, ceiling=total):
            available = mem.available_bytes
        used = mem.swap_used_bytes
        swap_used = used if self._gauge(out, m.HOST_SWAP_USED_BYTES, used,
                                        ceiling=mem.swap_total_bytes) else None
        return total, available, swap_used

    def _swap(self, out: SnapshotBuilder, swap: memory.SwapActivity | None,
              now: float) -> tuple[float | None, float | None]:
        """Swap-in and swap-out bytes per second since the last poll."""
        if swap is None:
            return None, None
        swap_in = self._counter(out, m.HOST_SWAP_BYTES_TOTAL, swap.in_bytes, now, "in")
        swap_out = self._counter(out, m.HOST_SWAP_BYTES_TOTAL, swap.out_bytes, now, "out")
        return swap_in, swap_out

    def _load(self, out: SnapshotBuilder,
              load: cpu.LoadAverage | None) -> cpu.LoadAverage | None:
        """The load averages; the reading keeps them only when all three pass."""
        if load is None:
            return None
        shown = [self._gauge(out, m.HOST_LOAD_AVERAGE, value, window)
                 for window, value in (("1m", load.load1), ("5m", load.load5),
                                       ("15m", load.load15))]
        return load if all(shown) else None

    def _disks(self, out: SnapshotBuilder, busy: disks.DiskBusy | None,
               now: float) -> dict[str, float]:
        if busy is None:
            return {}
        for name in self._cap("block devices", busy.busy_seconds):
            self._counter(out, m.HOST_DISK_BUSY_SECONDS_TOTAL, busy.busy_seconds[name], now,
                          name)
        before, self._disks_before = self._disks_before, (now, busy)
        if before is None:
            return {}
        ratios = disks.busy_ratios(before[1], busy, now - before[0])
        shown = {}
        for name in self._cap("block devices", ratios):
            share = self._share(out, m.HOST_DISK_BUSY_RATIO, ratios[name], name)
            if share is not None:
                shown[name] = share
        return shown

    def _network(self, out: SnapshotBuilder, net: dict[str, network.ReceiveCounters] | None,
                 now: float) -> None:
        if net is None:
            return
        for name in self._cap("network interfaces", net):
            self._counter(out, m.HOST_NETWORK_RECEIVE_ERRORS_TOTAL, net[name].errors, now,
                          name)
            self._counter(out, m.HOST_NETWORK_RECEIVE_DROPS_TOTAL, net[name].drops, now, name)

    def _thermal(self, out: SnapshotBuilder, now: float
                 ) -> tuple[thermal.ThermalThrottle | None, bool | None]:
        """The CPUs' thermal throttle totals, read every THERMAL_EVERY_S and
        exported as last read in between."""
        last = self._thermal_read
        if last is not None and 0 <= now - last[0] < THERMAL_EVERY_S:
            _, found, kept = last
            if found is not None:
                for kind, count in found.events.items():
                    out.add_values(m.HOST_CPU_THERMAL_THROTTLES_TOTAL, (kind,), count)
                for kind, secs in found.seconds.items():
                    out.add_values(m.HOST_CPU_THERMAL_THROTTLED_SECONDS_TOTAL, (kind,), secs)
            return found, kept
        found, kept = self._read_thermal(out)
        self._thermal_read = (now, found, kept)
        return found, kept

    def _read_thermal(self, out: SnapshotBuilder
                      ) -> tuple[thermal.ThermalThrottle | None, bool | None]:
        """The CPUs' thermal throttle totals, each exported where accepted
        (what was accepted is what the diagnosis reads), and whether the CPUs
        keep them: False where they keep none, None where they could not be
        read."""
        sysfs = self.sysfs
        if sysfs is None:
            return None, None
        source = "/sys/devices/system/cpu/*/thermal_throttle"
        found = self._src.read(source, lambda _procfs: thermal.read_thermal_throttle(
            sysfs, self._cpu_topology))
        if found is None:
            return None, (None if source in self._src.failing else False)
        events: dict[str, int] = {}
        seconds: dict[str, float] = {}
        for kind, count in found.events.items():
            metric = m.HOST_CPU_THERMAL_THROTTLES_TOTAL
            if accept_counter(self._src, self._src.counters, metric, count, kind):
                out.add_values(metric, (kind,), count)
                events[kind] = count
        for kind, secs in found.seconds.items():
            metric = m.HOST_CPU_THERMAL_THROTTLED_SECONDS_TOTAL
            if accept_counter(self._src, self._src.counters, metric, secs, kind):
                out.add_values(metric, (kind,), secs)
                seconds[kind] = secs
        return thermal.ThermalThrottle(events, seconds), True

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
        swap_bytes_per_s=swap, steal_ratio=f.steal_ratio,
        cpu_thermal_kept=f.cpu_thermal_kept,
        memory_total_bytes=f.memory_total_bytes,
        memory_available_bytes=f.memory_available_bytes,
        cpu_thermal_throttles=(None if f.cpu_thermal is None or not f.cpu_thermal.events
                               else float(sum(f.cpu_thermal.events.values()))),
        cpu_thermal_throttled_seconds=(
            None if f.cpu_thermal is None or not f.cpu_thermal.seconds
            else sum(f.cpu_thermal.seconds.values())))
