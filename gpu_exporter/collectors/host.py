"""The host around the GPUs: CPU iowait and steal, pressure stalls, memory and
swap, load, context switches, disk busy time and network receive errors. A slow
GPU is usually waiting on its host; these are the host's side of that story.

Ratios and rates over an interval need the previous reading, so the first poll
exports none (never a made-up 0). A source this kernel does not have (no PSI)
is absent and said once in the log; a file that cannot be read is counted in
errors() and the other sources are still exported.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self, TypeVar

from gpu_exporter.catalogs import host as m
from gpu_exporter.collectors.base import Collector
from gpu_exporter.collectors.host_rows import ROWS, STAT, SUMS, HostRow, readers
from gpu_exporter.collectors.values import accept, accept_counter, accept_share, series_key
from gpu_exporter.facts.catalog_types import Metric
from gpu_exporter.host import cpu, disks, memory, network, thermal
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
        # A string, joined once per file read: no pathlib join every poll.
        self.root = str(procfs)
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
            value = fn(self.root, *args)
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
        self._src = _Sources(procfs)
        # Each file's reader and the rows read from it, in the order a poll reads them.
        self._files = tuple((path, reader, tuple(row for row in ROWS if row.file == path))
                            for path, reader in readers(page_size).items())
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

        values: dict[str, float] = {}
        iowait = steal = None
        for path, reader, rows in self._files:
            # Only what is exported or read by the diagnosis is read: without
            # --metrics.detail, not /proc/loadavg at all.
            wanted = [row for row in rows if row.read_as in _DIAGNOSED or out.keeps(row.metric)]
            if not wanted and path != STAT:
                continue
            reading = src.read(path, reader)
            if reading is None:
                continue
            if path == STAT and isinstance(reading, cpu.CpuTimes):
                iowait, steal = self._cpu(out, reading, now)
            self._rows(out, wanted, reading, values, now)
        busy = src.read("/proc/diskstats", disks.read_diskstats)
        busy_ratios = self._disks(out, busy, now)
        if (out.keeps(m.HOST_NETWORK_RECEIVE_ERRORS_TOTAL)
                or out.keeps(m.HOST_NETWORK_RECEIVE_DROPS_TOTAL)):
            self._network(out, src.read("/proc/net/dev", network.read_netdev), now)
        throttles, thermal_kept = self._thermal(out, now)

        if src.read_ok == 0 and src.first_error is not None:
            # Nothing at all could be read: the root is wrong or not mounted.
            raise RuntimeError(f"no host source under {self.procfs} could be read: "
                               f"{src.first_error}")

        reading = HostReading(
            values=values, iowait_ratio=iowait, steal_ratio=steal,
            disk_busy_ratio=busy_ratios, cpu_thermal=throttles, cpu_thermal_kept=thermal_kept)
        out.readings.host = reading
        out.readings.host_signals = _signals(reading)

    def _rows(self, out: SnapshotBuilder, rows: list[HostRow], reading: object,
              values: dict[str, float], now: float) -> None:
        """Export each row's value where its metric's bounds accept it, and keep
        it under the row's name: a gauge as read, a counter's rate."""
        rejected: set[str] = set()
        for row in rows:
            value = row.get(reading)
            if value is None:
                continue  # this kernel does not say (no MemAvailable, no PSI "full")
            if row.metric.kind == "counter":
                kept = self._counter(out, row.metric, value, now, *row.series,
                                     rate=bool(row.read_as))
            else:
                ceiling = None
                if row.ceiling and row.ceiling not in rejected:
                    ceiling = getattr(reading, row.ceiling)
                if not self._gauge(out, row.metric, value, *row.series, ceiling=ceiling):
                    rejected.add(row.field)
                    continue
                kept = value
            if row.read_as and kept is not None:
                values[row.read_as] = kept

    def _counter(self, out: SnapshotBuilder, metric: Metric, value: float, now: float,
                 *series: str, rate: bool = True) -> float | None:
        """Export the counter if collectors.values.accept_counter() accepts it;
        its rate per second since its last accepted reading (None on the
        first one, when rejected, when no time passed, or not asked for)."""
        if not accept_counter(self._src, self._src.counters, metric, value, *series):
            return None
        out.add_values(metric, series, value)
        if not rate:
            return None
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

    def _cpu(self, out: SnapshotBuilder, times: cpu.CpuTimes,
             now: float) -> tuple[float | None, float | None]:
        """CPU time, iowait and steal counters, and the iowait and steal
        shares of the interval since the last poll."""
        # The counters carry every second between scrapes; the ratios below
        # are the last poll's share, for the diagnosis's now-value.
        self._counter(out, m.HOST_CPU_SECONDS_TOTAL, times.total, now)
        for mode, family in (("iowait", m.HOST_CPU_IOWAIT_SECONDS_TOTAL),
                             ("steal", m.HOST_CPU_STEAL_SECONDS_TOTAL)):
            if mode in times.seconds:
                self._counter(out, family, self._held(family, times.seconds[mode]), now)
        before, self._cpu_before = self._cpu_before, (now, times)
        ratios = cpu.cpu_ratios(before[1], times) if before is not None else None
        if ratios is None:
            return None, None
        return (self._share(out, m.HOST_CPU_IOWAIT_RATIO, ratios.iowait),
                self._share(out, m.HOST_CPU_STEAL_RATIO, ratios.steal))

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


# The HostSignals fields a row fills, by the name the row reads its value as.
_FROM_ROWS = tuple(f.name for f in dataclasses.fields(HostSignals)
                   if f.name in {row.read_as for row in ROWS})
# The rows' values the diagnosis reads: read whether or not they are exported.
_DIAGNOSED = frozenset((*_FROM_ROWS, *(name for parts in SUMS.values() for name in parts)))


def _signals(f: HostReading) -> HostSignals:
    """The figures the diagnosis rules read: each row's value under its name,
    and the few the collector works out itself (host_rows.NOT_ROWS)."""
    v = f.values
    signals = HostSignals(
        iowait_ratio=f.iowait_ratio, steal_ratio=f.steal_ratio,
        cpu_thermal_kept=f.cpu_thermal_kept,
        cpu_thermal_throttles=(None if f.cpu_thermal is None or not f.cpu_thermal.events
                               else float(sum(f.cpu_thermal.events.values()))),
        cpu_thermal_throttled_seconds=(
            None if f.cpu_thermal is None or not f.cpu_thermal.seconds
            else sum(f.cpu_thermal.seconds.values())))
    for name in _FROM_ROWS:
        if name in v:
            setattr(signals, name, v[name])
    for name, parts in SUMS.items():
        if all(part in v for part in parts):
            setattr(signals, name, sum(v[part] for part in parts))
    return signals
