"""The simulated node's /proc and /sys as real files, so the host readers run
unchanged on simulated data (pointed there as with --path.procfs/--path.sysfs).

Counters grow with time at the scenario's rates, so a reader that takes the
difference between two polls sees exactly what the scenario asked for: with
``iowait_ratio: 0.4``, 40 % of all CPU jiffies between two renders are iowait;
a process with ``cpu_ratio: 1.5`` gains 1.5 s of utime+stime per second.

Every file is written whole on the poller's thread right before the
collectors read it; a file whose text has not changed is not written at all.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from gpu_exporter.simulator.gpu_state import GpuState
from gpu_exporter.simulator.model import ProcessCondition
from gpu_exporter.simulator.nicfs import NicRenderer
from gpu_exporter.simulator.tenants import DEFAULT_UID
from gpu_exporter.simulator.world import World

# The readers convert with this machine's values, so the files use them too.
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
# The simulated host has been up this long when the scenario starts: its
# since-boot counters start where its first condition would have taken them.
BOOT_UPTIME_S = 86400.0
# What a host whose memory leaks keeps available at the end: the kernel's
# reserves (min_free_kbytes and the like), never zero.
MIN_AVAILABLE_RATIO = 0.01


def boot_uptime(given: float | None) -> float:
    """How long the host has been up when the scenario starts: the scenario's
    ``host: {uptime_s: ...}``, else a day."""
    return BOOT_UPTIME_S if given is None else given

_SHM = "/dev/shm"
_PSI_RESOURCES = ("cpu", "memory", "io")
_LINK_SPEED = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe",
               4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}
_AER = (("correctable", "COR", ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout",
                                "NonFatalErr", "CorrIntErr", "HeaderOF")),
        ("nonfatal", "NONFATAL", ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO",
                                  "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP", "ECRC",
                                  "UnsupReq", "ACSViol")),
        ("fatal", "FATAL", ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt",
                            "UnxCmplt", "RxOF", "MalfTLP", "ECRC", "UnsupReq", "ACSViol")))
# proc(5) fields 25-41 (rsslim ... policy), then 43-52 (guest_time ... exit_code);
# field 42, delayacct_blkio_ticks, is written between them.
_STAT_MIDDLE = "18446744073709551615 1 1 0 0 0 0 0 16781312 134234626 0 0 0 17 0 0 0"
_STAT_END = "0 0 0 0 0 0 0 0 0 0"
# The host figures that are rates or shares of an interval, which the
# scenario's jitter scales (levels like the memory available are left as set).
_JITTERED_HOST = ("cpu_busy_ratio", "iowait_ratio", "steal_ratio", "swap_in_bytes_per_s",
                  "swap_out_bytes_per_s", "context_switches_per_s")
_STATE_NAMES = {"R": "R (running)", "S": "S (sleeping)", "D": "D (disk sleep)",
                "Z": "Z (zombie)", "T": "T (stopped)", "I": "I (idle)"}


class _Files:
    """Whole-file writes, skipping those whose text is unchanged. Paths are plain
    strings: this runs for every file on every poll. A plain write (no temp file
    and rename) is enough: the files are rendered on the poller's thread right
    before the collectors read them, and nothing else reads them; a rename per
    file per poll was most of a simulated poll's cost."""

    def __init__(self) -> None:
        self._text: dict[str, str] = {}
        self._dirs: set[str] = set()
        self._links: set[str] = set()

    def write(self, path: str, text: str) -> None:
        if self._text.get(path) == text:
            return
        parent = os.path.dirname(path)
        if parent not in self._dirs:
            os.makedirs(parent, exist_ok=True)
            self._dirs.add(parent)
        with open(path, "w") as f:
            f.write(text)
        self._text[path] = text

    def remove(self, path: str) -> None:
        self._text.pop(path, None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def remove_tree(self, directory: str) -> None:
        shutil.rmtree(directory, ignore_errors=True)
        prefix = directory + "/"
        self._dirs = {d for d in self._dirs if d != directory and not d.startswith(prefix)}
        for path in [p for p in self._text if p.startswith(prefix)]:
            del self._text[path]

    def symlink(self, link: str, target: str) -> None:
        if link in self._links:
            return
        parent = os.path.dirname(link)
        os.makedirs(parent, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.symlink(os.path.relpath(target, parent), link)
        self._links.add(link)

    def unlink(self, link: str) -> None:
        self._links.discard(link)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(link)


@dataclass
class _HostCounters:
    jiffies: dict[str, float] = field(default_factory=dict)
    ctxt: float = 0.0
    psi_us: dict[tuple[str, str], float] = field(default_factory=dict)
    psi_avg: dict[tuple[str, str, int], float] = field(default_factory=dict)
    swap_pages: dict[str, float] = field(default_factory=lambda: {"in": 0.0, "out": 0.0})
    load: dict[int, float] = field(default_factory=dict)
    io_ticks_ms: dict[str, float] = field(default_factory=dict)
    net: dict[tuple[str, str], float] = field(default_factory=dict)
    thermal_events: float = 0.0  # on each core and each package alike
    memory_dropped: float = 0.0  # share of MemTotal no longer available since the start
    thermal_ms: float = 0.0


@dataclass
class _ProcCounters:
    start_t: float
    cpu_ticks: float = 0.0  # utime + stime, in clock ticks
    wait_ns: float = 0.0
    voluntary: float = 0.0
    involuntary: float = 0.0
    blkio_ticks: float = 0.0  # delayacct_blkio_ticks


def _memory_backed(root: Path) -> Path | None:
    """A fresh directory on tmpfs when ``root`` is on a disk. On ext4,
    replacing a file's contents (truncating it, or renaming over it) starts
    writeback of the new data: some 75 files a poll cost tens of milliseconds
    on a busy disk, microseconds in memory."""
    try:
        if not os.access(_SHM, os.W_OK) or os.stat(root).st_dev == os.stat(_SHM).st_dev:
            return None
        return Path(tempfile.mkdtemp(prefix="gpu-exporter-hostfs-", dir=_SHM))
    except OSError:
        return None


class HostFs:
    def __init__(self, world: World, root: Path) -> None:
        self.world = world
        self.procfs = root / "proc"
        self.sysfs = root / "sys"
        root.mkdir(parents=True, exist_ok=True)
        fresh = not self.procfs.exists() and not self.sysfs.exists()
        memory = _memory_backed(root) if fresh else None
        # Nothing to free for files under root itself: whoever made root removes it.
        self._free: Callable[[], object] = lambda: None
        if memory is not None:
            # root/proc and root/sys point into memory, freed by close(), or
            # when this object goes, or at exit.
            self._free = weakref.finalize(self, shutil.rmtree, memory, True)
            for tree in (self.procfs, self.sysfs):
                (memory / tree.name).mkdir()
                tree.symlink_to(memory / tree.name)
        self.procfs.mkdir(parents=True, exist_ok=True)
        self.sysfs.mkdir(parents=True, exist_ok=True)
        self._proc = str(self.procfs)
        self._sys = str(self.sysfs)
        self._files = _Files()
        self._nics = NicRenderer(self._files, self._sys)
        self._last_t: float | None = None
        self._host = _HostCounters()
        self._procs: dict[int, _ProcCounters] = {}
        self._aer: dict[tuple[int, str], float] = {}
        self._boot_uptime = boot_uptime(world.scenario.host.uptime_s)

    def close(self) -> None:
        """Free the files kept in memory (the root's own are its owner's)."""
        self._free()

    def render(self, t: float) -> None:
        """Write the files for time ``t`` (seconds since the scenario started).
        The counters grow over each stretch since the last render at the rates
        in force during it: the stretch is cut where a timeline step changed
        them, so a process that ran until a step and sleeps after it has
        gained exactly its running time, however seldom the files are read."""
        if self._last_t is None:
            self._last_t = t
            self._render_at(t, t, BOOT_UPTIME_S, first=True)
            return
        start, self._last_t = self._last_t, t
        changes = self.world.change_times()
        cuts = [start, *sorted(c for c in changes if start < c < t), t]
        for a, b in itertools.pairwise(cuts):
            self._render_at(a, b, max(0.0, b - a), first=False)
        if t in changes:
            # A change at t itself: what stands from now on is written too.
            self._render_at(t, t, 0.0, first=False)

    def _render_at(self, when: float, until: float, dt: float, first: bool) -> None:
        """Grow the counters by ``dt`` at the rates in force at ``when``, and
        write the files as they stand then (the clock reads ``until``)."""
        host = self._jittered(self.world.host_condition(when), until)
        states = self.world.states()
        numa = [self.world.gpu_numa_node(st.index, when) for st in states]
        self._render_host(host, dt)
        self._files.write(f"{self._proc}/sys/kernel/random/boot_id", f"{host['boot_id']}\n")
        self._render_processes(self.world.processes(when), host, numa, when,
                               0.0 if first else dt)
        self._render_sysfs(states, host, numa, 0.0 if first else dt)
        self._nics.render({st.index: (_sysfs_bdf(st.bus_id), _bridge_chain(_sysfs_bdf(st.bus_id)))
                           for st in states},
                          host.get("rdma"), {st.index: numa[st.index] for st in states},
                          0.0 if first else dt)

    def _jittered(self, h: dict[str, Any], t: float) -> dict[str, Any]:
        """The host condition with the scenario's jitter on its rates and
        shares (each ratio kept within 0-1)."""
        if not self.world.scenario.jitter:
            return h
        j = self.world.jitter
        for name in _JITTERED_HOST:
            value = float(h[name]) * j(f"host/{name}", t)
            h[name] = min(1.0, value) if name.endswith("_ratio") else value
        for resource in _PSI_RESOURCES:
            key = f"pressure_{resource}"
            h[key] = {kind: min(1.0, float(v) * j(f"host/{key}/{kind}", t))
                      for kind, v in h[key].items()}
        for name in ("disks", "net_rx_drops_per_s", "net_rx_errors_per_s"):
            h[name] = {dev: (min(1.0, float(v) * j(f"host/{name}/{dev}", t)) if name == "disks"
                             else float(v) * j(f"host/{name}/{dev}", t))
                       for dev, v in h[name].items()}
        return h

    # --- /proc: the host ---------------------------------------------------------
    def _render_host(self, h: dict[str, Any], dt: float) -> None:
        self._render_stat(h, dt)
        self._render_pressure(h, dt)
        self._render_memory(h, dt)
        self._render_loadavg(h, dt)
        self._render_diskstats(h, dt)
        self._render_netdev(h, dt)
        self._render_thermal(h, dt)

    def _render_stat(self, h: dict[str, Any], dt: float) -> None:
        c = self._host
        iowait, steal = float(h["iowait_ratio"]), float(h["steal_ratio"])
        if iowait + steal > 1.0:
            iowait, steal = iowait / (iowait + steal), steal / (iowait + steal)
        busy = min(float(h["cpu_busy_ratio"]), 1.0 - iowait - steal)
        idle = 1.0 - busy - iowait - steal
        shares = {"user": busy * 0.82, "nice": 0.0, "system": busy * 0.15, "idle": idle,
                  "iowait": iowait, "irq": 0.0, "softirq": busy * 0.03, "steal": steal}
        jiffies_per_s = int(h["cpus"]) * CLK_TCK
        for mode, share in shares.items():
            c.jiffies[mode] = c.jiffies.get(mode, 0.0) + share * jiffies_per_s * dt
        c.ctxt += float(h["context_switches_per_s"]) * dt
        columns = " ".join(str(int(c.jiffies[m])) for m in shares)
        # Per-CPU lines are left out: no reader uses them, and on a 128-CPU node
        # they would be most of every write.
        self._files.write(f"{self._proc}/stat", (
            f"cpu  {columns} 0 0\n"
            f"intr {int(c.ctxt // 3)}\n"
            f"ctxt {int(c.ctxt)}\n"
            "btime 1790000000\n"
            f"processes {100000 + len(self._procs)}\n"
            f"procs_running {max(1, min(int(h['cpus']), round(float(h['load1']))))}\n"
            "procs_blocked 0\n"))

    def _render_pressure(self, h: dict[str, Any], dt: float) -> None:
        directory = f"{self._proc}/pressure"
        if not h["psi_available"]:
            # A kernel without CONFIG_PSI has no /proc/pressure at all.
            if os.path.exists(directory):
                self._files.remove_tree(directory)
            return
        c = self._host
        for resource in _PSI_RESOURCES:
            rows = []
            for kind in ("some", "full"):
                ratio = float(h[f"pressure_{resource}"][kind])
                c.psi_us[(resource, kind)] = c.psi_us.get((resource, kind), 0.0) + \
                    ratio * dt * 1e6
                # avg10 is what the scenario says; the longer windows follow it
                # the way the kernel's exponential averages do.
                avgs = [ratio]
                for window in (60, 300):
                    key = (resource, kind, window)
                    before = c.psi_avg.get(key, ratio)
                    after = ratio + (before - ratio) * math.exp(-dt / window)
                    c.psi_avg[key] = after
                    avgs.append(after)
                rows.append(f"{kind} avg10={avgs[0] * 100:.2f} avg60={avgs[1] * 100:.2f} "
                            f"avg300={avgs[2] * 100:.2f} total={int(c.psi_us[(resource, kind)])}")
            self._files.write(f"{directory}/{resource}", "\n".join(rows) + "\n")

    def _render_memory(self, h: dict[str, Any], dt: float) -> None:
        c = self._host
        total_kb = int(h["memory_total_bytes"]) // 1024
        # A leak takes memory a few pages at a time, from the scenario's start
        # (the first render's dt is the time since boot): the available share
        # falls in steps of each poll's dt, down to the kernel's last reserves.
        if dt < BOOT_UPTIME_S:
            c.memory_dropped += float(h["memory_available_drop_ratio_per_s"]) * dt
        ratio = max(MIN_AVAILABLE_RATIO, float(h["memory_available_ratio"]) - c.memory_dropped)
        available_kb = int(total_kb * ratio)
        swap_kb = int(h["swap_total_bytes"]) // 1024
        swap_free_kb = int(swap_kb * (1.0 - float(h["swap_used_ratio"])))
        self._files.write(f"{self._proc}/meminfo", (
            f"MemTotal:       {total_kb} kB\n"
            f"MemFree:        {available_kb // 3} kB\n"
            f"MemAvailable:   {available_kb} kB\n"
            f"Buffers:        {available_kb // 50} kB\n"
            f"Cached:         {available_kb // 2} kB\n"
            "SwapCached:     0 kB\n"
            f"SwapTotal:      {swap_kb} kB\n"
            f"SwapFree:       {swap_free_kb} kB\n"
            "Dirty:          1024 kB\n"))
        for direction in ("in", "out"):
            rate = float(h[f"swap_{direction}_bytes_per_s"])
            c.swap_pages[direction] += rate * dt / PAGE_SIZE
        self._files.write(f"{self._proc}/vmstat", (
            f"nr_free_pages {available_kb * 1024 // 3 // PAGE_SIZE}\n"
            "pgpgin 0\npgpgout 0\n"
            f"pswpin {int(c.swap_pages['in'])}\n"
            f"pswpout {int(c.swap_pages['out'])}\n"))

    def _render_loadavg(self, h: dict[str, Any], dt: float) -> None:
        load1 = float(h["load1"])
        averages = []
        for window in (5, 15):
            before = self._host.load.get(window, load1)
            after = load1 + (before - load1) * math.exp(-dt / (window * 60))
            self._host.load[window] = after
            averages.append(after)
        running = max(1, min(int(h["cpus"]), round(load1)))
        last_pid = max(self._procs, default=4242)
        self._files.write(f"{self._proc}/loadavg",
                          f"{load1:.2f} {averages[0]:.2f} {averages[1]:.2f} "
                          f"{running}/{2000 + len(self._procs)} {last_pid}\n")

    def _render_diskstats(self, h: dict[str, Any], dt: float) -> None:
        c = self._host
        lines = []
        for minor, (name, busy) in enumerate(sorted(h["disks"].items())):
            c.io_ticks_ms[name] = c.io_ticks_ms.get(name, 0.0) + float(busy) * dt * 1000.0
            ticks = int(c.io_ticks_ms[name])
            ios = ticks * 4  # a few I/Os per busy millisecond, split reads/writes
            row = (f"{ios * 3 // 4} 0 {ios * 48} {ticks // 2} {ios // 4} 0 {ios * 16} "
                   f"{ticks // 2} 0 {ticks} {ticks * 2} 0 0 0 0 0 0")
            lines.append(f" 259 {minor * 2} {name} {row}")
            # A partition repeats its disk's time; the reader must not count it twice.
            part = f"{name}p1" if name[-1].isdigit() else f"{name}1"
            lines.append(f" 259 {minor * 2 + 1} {part} {row}")
        lines.append("   7       0 loop0 120 0 960 10 0 0 0 0 0 10 10 0 0 0 0 0 0")
        self._files.write(f"{self._proc}/diskstats", "\n".join(lines) + "\n")

    def _render_thermal(self, h: dict[str, Any], dt: float) -> None:
        """Each CPU's thermal throttle counters, as Intel CPUs keep them: every
        CPU is a core of its own here, its package that of its NUMA node."""
        base = f"{self._sys}/devices/system/cpu"
        cpus, nodes = int(h["cpus"]), int(h["numa_nodes"])
        if not h["cpu_thermal_counters"]:
            for cpu in range(cpus):
                directory = f"{base}/cpu{cpu}/thermal_throttle"
                if os.path.exists(directory):
                    self._files.remove_tree(directory)
            return
        c = self._host
        c.thermal_events += float(h["cpu_thermal_throttles_per_s"]) * dt
        c.thermal_ms += float(h["cpu_thermal_throttled_ratio"]) * dt * 1000.0
        events, ms = int(c.thermal_events), int(c.thermal_ms)
        per_package = max(1, cpus // nodes)
        for cpu in range(cpus):
            directory = f"{base}/cpu{cpu}"
            self._files.write(f"{directory}/topology/physical_package_id",
                              f"{cpu // per_package}\n")
            self._files.write(f"{directory}/topology/core_id", f"{cpu % per_package}\n")
            for kind in ("core", "package"):
                self._files.write(f"{directory}/thermal_throttle/{kind}_throttle_count",
                                  f"{events}\n")
                self._files.write(f"{directory}/thermal_throttle/{kind}_throttle_total_time_ms",
                                  f"{ms}\n")

    def _render_netdev(self, h: dict[str, Any], dt: float) -> None:
        c = self._host
        drops, errors = h["net_rx_drops_per_s"], h["net_rx_errors_per_s"]
        rows = ["Inter-|   Receive                                                |  Transmit",
                " face |bytes    packets errs drop fifo frame compressed multicast|bytes    "
                "packets errs drop fifo colls carrier compressed",
                "    lo: 1048576 1024 0 0 0 0 0 0 1048576 1024 0 0 0 0 0 0"]
        for name in sorted(set(drops) | set(errors)):
            for kind, rate in (("drops", drops.get(name, 0.0)), ("errors", errors.get(name, 0.0)),
                               ("bytes", 1.25e8), ("packets", 1.0e5)):
                key = (name, kind)
                c.net[key] = c.net.get(key, 0.0) + float(rate) * dt
            rx = [int(c.net[(name, k)]) for k in ("bytes", "packets", "errors", "drops")]
            rows.append(f"{name:>6}: {rx[0]} {rx[1]} {rx[2]} {rx[3]} 0 0 0 0 "
                        f"{rx[0] // 3} {rx[1] // 3} 0 0 0 0 0 0")
        self._files.write(f"{self._proc}/net/dev", "\n".join(rows) + "\n")

    # --- /proc: processes --------------------------------------------------------
    def _render_processes(self, procs: list[ProcessCondition], h: dict[str, Any],
                          numa: list[int], t: float, dt: float) -> None:
        alive = {p.pid: p for p in procs}
        for pid in [pid for pid in self._procs if pid not in alive]:
            # The process has exited: its directory goes, as in a real /proc.
            del self._procs[pid]
            self._files.remove_tree(f"{self._proc}/{pid}")
        j = self.world.jitter
        for p in procs:
            c = self._procs.get(p.pid)
            if c is None:
                c = self._procs[p.pid] = _ProcCounters(start_t=t)
            else:
                key = f"pid{p.pid}"
                c.cpu_ticks += p.cpu_ratio * dt * CLK_TCK * j(f"{key}/cpu", t)
                c.wait_ns += p.run_queue_wait_ratio * dt * 1e9 * j(f"{key}/wait", t)
                c.voluntary += p.wakeups_per_s * dt * j(f"{key}/vcs", t)
                c.involuntary += p.nonvoluntary_ctxt_switches_per_s * dt * j(f"{key}/ivcs", t)
                if h["delay_accounting"]:
                    delay = p.blkio_delay_ratio
                    if delay is None:
                        delay = 1.0 if p.state == "D" else 0.0
                    c.blkio_ticks += delay * dt * CLK_TCK
            allowed = p.cpus_allowed or self._default_cpus(p, alive, h, numa)
            self._render_process(p, c, allowed, bool(h["schedstat_available"]))
        # /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN): the children the
        # thread forked, each PID followed by a space; the main thread's here.
        children: dict[int, list[int]] = {}
        for p in procs:
            children.setdefault(p.ppid, []).append(p.pid)
        for p in procs:
            kids = sorted(children.get(p.pid, ()))
            self._files.write(f"{self._proc}/{p.pid}/task/{p.pid}/children",
                              "".join(f"{k} " for k in kids))

    def _default_cpus(self, p: ProcessCondition, alive: dict[int, ProcessCondition],
                      h: dict[str, Any], numa: list[int]) -> str:
        """A GPU process (or a worker of one) runs on its GPU's local CPUs; any
        other process may run anywhere."""
        gpus = p.gpus or (alive[p.ppid].gpus if p.ppid in alive else [])
        if gpus and gpus[0] < len(numa):
            lo, hi = _node_cpus(h, numa[gpus[0]])
            return f"{lo}-{hi}"
        return f"0-{int(h['cpus']) - 1}"

    def _render_process(self, p: ProcessCondition, c: _ProcCounters, allowed: str,
                        schedstat: bool) -> None:
        base = f"{self._proc}/{p.pid}"
        ticks = int(c.cpu_ticks)
        utime = ticks * 9 // 10
        stime = ticks - utime
        rss_pages = p.rss_bytes // PAGE_SIZE
        start = int((self._boot_uptime + c.start_t) * CLK_TCK)
        vsize = p.rss_bytes * 4
        # Gid: the user's private group, numbered as the user.
        uid = DEFAULT_UID if p.uid is None else p.uid
        # proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt
        # cminflt majflt cmajflt utime stime cutime cstime priority nice
        # num_threads itrealvalue starttime vsize rss, then fields no reader
        # uses (rsslim ... exit_code).
        self._files.write(f"{base}/stat", (
            f"{p.pid} ({p.comm}) {p.state} {p.ppid} {p.pid} {p.pid} 0 -1 4194560 250000 0 12 0 "
            f"{utime} {stime} 0 0 20 0 {p.threads} 0 {start} {vsize} {rss_pages} "
            f"{_STAT_MIDDLE} {int(c.blkio_ticks)} {_STAT_END}\n"))
        self._files.write(f"{base}/status", (
            f"Name:\t{p.comm}\nUmask:\t0022\nState:\t{_STATE_NAMES[p.state]}\n"
            f"Tgid:\t{p.pid}\nNgid:\t0\nPid:\t{p.pid}\nPPid:\t{p.ppid}\nTracerPid:\t0\n"
            f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
            f"VmPeak:\t{vsize // 1024} kB\nVmSize:\t{vsize // 1024} kB\n"
            f"VmRSS:\t{p.rss_bytes // 1024} kB\nThreads:\t{p.threads}\n"
            f"Cpus_allowed:\t{_cpumask(allowed)}\nCpus_allowed_list:\t{allowed}\n"
            f"voluntary_ctxt_switches:\t{int(c.voluntary)}\n"
            f"nonvoluntary_ctxt_switches:\t{int(c.involuntary)}\n"))
        if schedstat:
            on_cpu_ns = int(c.cpu_ticks * 1e9 / CLK_TCK)
            slices = int(c.voluntary + c.involuntary)
            self._files.write(f"{base}/schedstat", f"{on_cpu_ns} {int(c.wait_ns)} {slices}\n")
        else:
            # A kernel without CONFIG_SCHEDSTATS/SCHED_INFO has no such file.
            self._files.remove(f"{base}/schedstat")
        self._files.write(f"{base}/cgroup", p.cgroup + "\n")
        self._files.write(f"{base}/comm", p.comm + "\n")

    # --- /sys --------------------------------------------------------------------
    def _render_sysfs(self, states: list[GpuState], h: dict[str, Any], numa: list[int],
                      dt: float) -> None:
        devices = f"{self._sys}/bus/pci/devices"
        gpu_bdfs = {_sysfs_bdf(st.bus_id) for st in states}
        for st in states:
            bdf = _sysfs_bdf(st.bus_id)
            chain = _bridge_chain(bdf)
            parent = f"{self._sys}/devices/pci{bdf[:4]}:{chain[0][5:7]}"
            for port in chain:
                parent = f"{parent}/{port}"
                self._render_port(parent, st, port == chain[-1])
                if port not in gpu_bdfs:
                    self._files.symlink(f"{devices}/{port}", parent)
            directory = f"{parent}/{bdf}"
            link = f"{devices}/{bdf}"
            for severity, _, _ in _AER:
                rate = float(st.condition.get(f"aer_{severity}_per_s", 0.0))
                key = (st.index, severity)
                self._aer[key] = self._aer.get(key, 0.0) + rate * dt
            if st.lost:
                # A GPU that fell off the bus is gone from sysfs too.
                self._files.unlink(link)
                if os.path.exists(directory):
                    self._files.remove_tree(directory)
                continue
            lo, hi = _node_cpus(h, numa[st.index])
            files = {"vendor": "0x10de", "device": "0x2330", "class": "0x030200",
                     "numa_node": str(numa[st.index]), "local_cpulist": f"{lo}-{hi}",
                     "current_link_speed": _LINK_SPEED[st.pcie_gen],
                     "current_link_width": str(st.pcie_width),
                     "max_link_speed": _LINK_SPEED[st.pcie_max_gen],
                     "max_link_width": str(st.pcie_max_width)}
            for severity, tag, names in _AER:
                total = int(self._aer[(st.index, severity)])
                # The kernel breaks the total down by error type; the simulator
                # puts it all on the first one.
                rows = [f"{name} {total if i == 0 else 0}" for i, name in enumerate(names)]
                files[f"aer_dev_{severity}"] = "\n".join([*rows, f"TOTAL_ERR_{tag} {total}"])
            for name, text in files.items():
                self._files.write(f"{directory}/{name}", text + "\n")
            self._files.symlink(link, directory)

    def _render_port(self, directory: str, st: GpuState, above_gpu: bool) -> None:
        """A root or switch port. The one right above the GPU is the other end
        of the GPU's own link, so it trains with it (idle downshift and a
        narrowed link included); the scenario's upstream_link_* can only lower
        it further. The ports further up run at the GPU's maximum."""
        gen, width = st.pcie_max_gen, st.pcie_max_width
        if above_gpu:
            gen = min(st.pcie_gen, int(st.condition.get("upstream_link_generation", gen)))
            width = min(st.pcie_width, int(st.condition.get("upstream_link_width", width)))
        files = {"vendor": "0x1000", "class": "0x060400",
                 "current_link_speed": _LINK_SPEED[gen], "current_link_width": str(width),
                 "max_link_speed": _LINK_SPEED[st.pcie_max_gen],
                 "max_link_width": str(st.pcie_max_width)}
        for name, text in files.items():
            self._files.write(f"{directory}/{name}", text + "\n")


def _node_cpus(h: dict[str, Any], node: int) -> tuple[int, int]:
    """First and last CPU of a NUMA node (as World.node_cpus, from a host
    condition already resolved for this render)."""
    cpus, nodes = int(h["cpus"]), int(h["numa_nodes"])
    per = max(1, cpus // nodes)
    return node * per, min(cpus, (node + 1) * per) - 1


def _sysfs_bdf(nvml_bus_id: str) -> str:
    """``00000000:18:00.0`` (NVML) -> ``0000:18:00.0`` (sysfs)."""
    domain, rest = nvml_bus_id.lower().split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


def _bridge_chain(bdf: str) -> list[str]:
    """Root port, switch upstream port and switch downstream port above the GPU
    at ``bdf``, on the three buses below the GPU's, as on an HGX board."""
    domain, bus = bdf[:4], int(bdf[5:7], 16)
    root = max(0, bus - 3)
    return [f"{domain}:{root:02x}:01.0", f"{domain}:{min(0xff, root + 1):02x}:00.0",
            f"{domain}:{min(0xff, root + 2):02x}:00.0"]


@lru_cache(maxsize=64)
def _cpumask(cpulist: str) -> str:
    """``0-63`` -> the hex mask /proc/PID/status shows, in 32-bit groups."""
    mask = 0
    for part in cpulist.split(","):
        lo, _, hi = part.partition("-")
        for cpu in range(int(lo), int(hi or lo) + 1):
            mask |= 1 << cpu
    groups = max(1, (mask.bit_length() + 31) // 32)
    return ",".join(f"{(mask >> (32 * g)) & 0xFFFFFFFF:08x}" for g in reversed(range(groups)))
