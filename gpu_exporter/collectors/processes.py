"""GPU processes: what NVML lists on each GPU (and MIG instance) — memory and SM
utilization — joined with the host's view of the same PID: name, CPU time,
memory, threads, state, context switches, run-queue wait, whether it may run
on CPUs outside the GPU's NUMA node, and its container and pod.

At most ``--processes.max-per-gpu`` processes per GPU are exported, those with
the most GPU memory first; the rest are counted. A process that is gone next
poll is simply not in the next snapshot.

This reader only publishes the per-process series (``PROCESS_SERIES``); the
``process_series`` collector exports them. Switched off, no per-process series
is exported while the readings the diagnosis judges stay the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from gpu_exporter.catalogs import processes as m
from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.facts.cadence import PROCESS_SAMPLES_EVERY_S, SLOW_READ_EVERY_POLLS
from gpu_exporter.host.files import MalformedFile
from gpu_exporter.host.procs import ProcessInfo, ProcessReader, parse_cpulist
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.processes import ProcessEntry
from gpu_exporter.nvml.session import Gpu, NvmlSession, normalize_bus_id
from gpu_exporter.poll.readings import PollReadings, ProcessReading
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import Slot, SnapshotBuilder
from gpu_exporter.settings.config import Settings

log = logging.getLogger(__name__)

# This poll's per-process series, for the process_series collector to export.
PROCESS_SERIES: Slot[SnapshotBuilder] = Slot("process_series")


@dataclass(slots=True)
class _Listed:
    """One process on one GPU (instance), as NVML listed it this poll."""

    pid: int
    used_bytes: int | None
    gpu_instance: int | None
    compute_instance: int | None
    graphics: bool
    sm_ratio: float | None = None


@dataclass(slots=True)
class _Labels:
    """The label values of one process's series on one GPU (instance), kept
    from poll to poll while what they are made of stays the same (it rarely
    changes): five tuples fewer per process and poll, less CPU and fewer
    objects for the garbage collector, which this collector's allocations set
    off more than any other's."""

    uuid: str
    comm: str
    graphics: bool
    container_id: str
    pod_uid: str
    state: str
    proc: tuple[str, ...]  # catalogs.processes.PROC order
    info: tuple[str, ...]  # PROC, type, container_id, pod_uid
    state_labels: tuple[str, ...]  # PROC, state
    voluntary: tuple[str, ...]  # PROC, kind
    involuntary: tuple[str, ...]

    def same(self, uuid: str, info: ProcessInfo, graphics: bool) -> bool:
        return (self.uuid == uuid and self.comm == info.comm and self.graphics == graphics
                and self.container_id == info.container_id and self.pod_uid == info.pod_uid)


def _labels(gpu_labels: tuple[str, str], p: _Listed, info: ProcessInfo) -> _Labels:
    proc = (*gpu_labels, str(p.pid), info.comm,
            "" if p.gpu_instance is None else str(p.gpu_instance),
            "" if p.compute_instance is None else str(p.compute_instance))
    return _Labels(
        gpu_labels[1], info.comm, p.graphics, info.container_id, info.pod_uid, info.state,
        proc, (*proc, "graphics" if p.graphics else "compute", info.container_id, info.pod_uid),
        (*proc, info.state), (*proc, "voluntary"), (*proc, "involuntary"))


def _merge(entries: list[ProcessEntry]) -> list[_Listed]:
    """A process can be listed as compute and graphics: one entry, memory summed."""
    merged: dict[tuple[int, int | None, int | None], _Listed] = {}
    for e in entries:
        key = (e.pid, e.gpu_instance, e.compute_instance)
        cur = merged.get(key)
        if cur is None:
            merged[key] = _Listed(e.pid, e.used_bytes, e.gpu_instance, e.compute_instance,
                                  e.graphics)
        else:
            if e.used_bytes is not None:
                cur.used_bytes = (cur.used_bytes or 0) + e.used_bytes
            cur.graphics = cur.graphics and e.graphics
    return list(merged.values())


class ProcessesCollector(NvmlCollector):
    name = "processes"
    description = ("GPU processes (NVML) joined with /proc: memory, SM, CPU, run-queue wait, "
                   "affinity, container")
    settings = (lambda s: s.processes.max_per_gpu, lambda s: s.path.procfs,
                lambda s: s.path.sysfs)

    def __init__(self, session: NvmlSession, procfs: Path, sysfs: Path, max_per_gpu: int,
                 monotonic: Callable[[], float]) -> None:
        super().__init__(session)
        self.procfs = procfs
        self.sysfs = sysfs
        self.max_per_gpu = max_per_gpu
        self._mono = monotonic
        self._last_seen_us: dict[int, int] = {}
        # gpu index -> (when its process samples were read, pid -> SM ratio)
        self._sm: dict[int, tuple[float, dict[int, float]]] = {}
        # pid -> (time, cpu seconds, run-queue wait seconds, voluntary context
        # switches) at the previous poll
        self._prev: dict[int, tuple[float, float, float | None, int | None]] = {}
        self._dropped: dict[int, int] = {}
        # (gpu index, pid, gpu instance, compute instance) -> its label values,
        # for the processes exported at the previous poll
        self._labels: dict[tuple[int, int, int | None, int | None], _Labels] = {}
        self._local_cpus: dict[int, frozenset[int] | None] = {}
        self._reader = ProcessReader(procfs)
        # gpu index -> (its used memory when the list was read, polls since,
        # the list)
        self._listed: dict[int, tuple[float | None, int, list[ProcessEntry]]] = {}
        self._generation = -1

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        s = rt.settings
        return cls(rt.session, s.path.procfs, s.path.sysfs, s.processes.max_per_gpu,
                   rt.monotonic)

    def reconfigure(self, settings: Settings) -> None:
        # The paths take effect at the next start (a running reader keeps its root).
        self.max_per_gpu = settings.processes.max_per_gpu

    def _list(self, gpu: Gpu, device: Device, found: dict[int, list[_Listed]],
              readings: PollReadings) -> None:
        listed = _merge(self._entries(gpu, device, readings))
        if listed:
            self._attribute_sm(gpu, device, listed)
        found[gpu.index] = listed

    def _entries(self, gpu: Gpu, device: Device, readings: PollReadings) -> list[ProcessEntry]:
        """The GPU's process list (two NVML calls: compute, graphics). Read
        again where the GPU's used memory moved since the list was read (every
        CUDA context holds device memory: a process that starts, ends or
        allocates moves it), where that is not known this poll (the device
        reader off or failing, MIG instances), and at least every
        SLOW_READ_EVERY_POLLS polls; else the list read then."""
        reading = (readings.gpus or {}).get(gpu.index)
        used = reading.memory_used_bytes if reading is not None else None
        if gpu.index in (readings.mig or {}):
            used = None
        held = self._listed.get(gpu.index)
        if (held is not None and used is not None and held[0] == used
                and held[1] < SLOW_READ_EVERY_POLLS):
            self._listed[gpu.index] = (used, held[1] + 1, held[2])
            return held[2]
        compute = gpu.read_first(("processes_compute", device.compute_processes),
                                 ("processes_compute_v2", device.compute_processes_v2))
        graphics = gpu.read_first(("processes_graphics", device.graphics_processes),
                                  ("processes_graphics_v2", device.graphics_processes_v2))
        entries = [*(compute or []), *(graphics or [])]
        if (compute is None and "processes_compute_v2" not in gpu.unsupported) or (
                graphics is None and "processes_graphics_v2" not in gpu.unsupported):
            self._listed.pop(gpu.index, None)  # failed this once: read again next poll
        else:
            self._listed[gpu.index] = (used, 1, entries)
        return entries

    def _attribute_sm(self, gpu: Gpu, device: Device, listed: list[_Listed]) -> None:
        """Each listed process's SM utilization, the mean of its samples since the
        last read. A read costs milliseconds of CPU on a real H100 (BENCHMARKS.md,
        "Measured on a real H100") whether or not it finds samples, and the
        driver keeps one sample per process a second with a buffer that outlasts
        the cadence: it is read every PROCESS_SAMPLES_EVERY_S, at once when a
        process without a value appears, and never on a GPU with no processes."""
        now = self.session.now()
        held = self._sm.get(gpu.index)
        if (held is not None and now - held[0] < PROCESS_SAMPLES_EVERY_S
                and all(p.pid in held[1] for p in listed)):
            for p in listed:
                p.sm_ratio = held[1][p.pid]
            return
        samples = gpu.read("process_samples", device.process_samples,
                           self._last_seen_us.get(gpu.index, 0))
        if samples is None:
            self._sm.pop(gpu.index, None)
            return
        if samples:
            self._last_seen_us[gpu.index] = max(s.timestamp_us for s in samples)
        per_pid: dict[int, list[float]] = {}
        for s in samples:
            per_pid.setdefault(s.pid, []).append(s.sm_ratio)
        ratios = {}
        for p in listed:
            values = per_pid.get(p.pid)
            # No new sample: the process ran no kernel since the last read.
            p.sm_ratio = ratios[p.pid] = sum(values) / len(values) if values else 0.0
        self._sm[gpu.index] = (now, ratios)

    def collect(self, out: SnapshotBuilder) -> None:
        readings: list[ProcessReading] = []
        out.readings.processes = readings
        series = SnapshotBuilder(out.timestamp)
        out.publish(PROCESS_SERIES, series)
        self.session.begin(self.name, out)  # NVML's poll, begun where no reader began it
        self._collect(series, readings, out.readings)

    def _collect(self, out: SnapshotBuilder, readings: list[ProcessReading],
                 polled: PollReadings) -> None:
        if not self.session.up:
            self._errors = 0
            return
        found: dict[int, list[_Listed]] = {}
        if self.session.generation != self._generation:
            self._listed.clear()  # lists of a session that is gone
            self._generation = self.session.generation
        each = self.session.each_gpu()
        for gpu, d in each:
            with each:
                self._list(gpu, d, found, polled)
        self._errors = each.errors
        now = self._mono()
        prev, self._prev = self._prev, {}
        known, self._labels = self._labels, {}
        host_cache: dict[int, ProcessInfo | None] = {}
        for gpu in self.session.gpus:
            listed = found.get(gpu.index)
            if listed is None:
                continue
            gpu_labels = (str(gpu.index), gpu.identity.uuid)  # catalogs.GPU order
            listed.sort(key=lambda p: p.used_bytes or 0, reverse=True)
            if len(listed) > self.max_per_gpu:
                self._dropped[gpu.index] = (self._dropped.get(gpu.index, 0)
                                            + len(listed) - self.max_per_gpu)
                listed = listed[: self.max_per_gpu]
            if gpu.index in self._dropped:
                out.add_values(m.PROCESS_SERIES_DROPPED_TOTAL, gpu_labels,
                               self._dropped[gpu.index])
            local = self._gpu_local_cpus(gpu)
            for p in listed:
                if p.pid not in host_cache:
                    host_cache[p.pid] = self._read_pid(p.pid)
                info = host_cache[p.pid]
                if info is None:
                    continue  # exited between NVML's list and /proc: skip silently
                readings.append(self._export(out, gpu.index, gpu_labels, p, info, local, now,
                                             prev, known))
        # What the reader remembers of processes not listed now goes with them.
        self._reader.retain(host_cache)

    def _read_pid(self, pid: int) -> ProcessInfo | None:
        try:
            return self._reader.read(pid)
        except (MalformedFile, ValueError, IndexError, OSError) as exc:
            # OSError: a file of the process cannot be read (EACCES under a
            # hidepid=1 /proc): this process is skipped, the others exported.
            self._errors += 1
            log.debug("reading /proc/%d failed: %s", pid, exc)
            return None

    def _gpu_local_cpus(self, gpu: Gpu) -> frozenset[int] | None:
        if gpu.index not in self._local_cpus:
            bdf = normalize_bus_id(gpu.identity.pci_bus_id)
            path = self.sysfs / "bus" / "pci" / "devices" / bdf / "local_cpulist"
            try:
                self._local_cpus[gpu.index] = parse_cpulist(path.read_text())
            except (OSError, ValueError):
                self._local_cpus[gpu.index] = None
        return self._local_cpus[gpu.index]

    def _export(self, out: SnapshotBuilder, gpu: int, gpu_labels: tuple[str, str],
                p: _Listed, info: ProcessInfo, local: frozenset[int] | None, now: float,
                prev: dict[int, tuple[float, float, float | None, int | None]],
                known: dict[tuple[int, int, int | None, int | None], _Labels]
                ) -> ProcessReading:
        key = (gpu, p.pid, p.gpu_instance, p.compute_instance)
        lab = known.get(key)
        if lab is None or not lab.same(gpu_labels[1], info, p.graphics):
            lab = _labels(gpu_labels, p, info)
        elif lab.state != info.state:
            lab.state, lab.state_labels = info.state, (*lab.proc, info.state)
        self._labels[key] = lab
        # Label values in the catalog's order: add_values skips the keyword
        # mapping add() does for each of the ~12 series.
        labels = lab.proc
        add = out.add_values
        add(m.PROCESS_INFO, lab.info, 1)
        if p.used_bytes is not None:
            add(m.PROCESS_MEMORY_USED_BYTES, labels, p.used_bytes)
        if p.sm_ratio is not None:
            add(m.PROCESS_SM_UTILIZATION_RATIO, labels, p.sm_ratio)
        add(m.PROCESS_CPU_SECONDS_TOTAL, labels, info.cpu_seconds)
        if info.run_queue_wait_seconds is not None:
            add(m.PROCESS_RUN_QUEUE_WAIT_SECONDS_TOTAL, labels, info.run_queue_wait_seconds)
        add(m.PROCESS_RESIDENT_MEMORY_BYTES, labels, info.rss_bytes)
        add(m.PROCESS_THREADS, labels, info.threads)
        add(m.PROCESS_STATE, lab.state_labels, 1)
        if info.voluntary_ctxt_switches is not None:
            add(m.PROCESS_CONTEXT_SWITCHES_TOTAL, lab.voluntary,
                info.voluntary_ctxt_switches)
        if info.involuntary_ctxt_switches is not None:
            add(m.PROCESS_CONTEXT_SWITCHES_TOTAL, lab.involuntary,
                info.involuntary_ctxt_switches)
        affinity_local = None
        if local is not None and info.cpus_allowed is not None:
            affinity_local = info.cpus_allowed <= local
            add(m.PROCESS_CPU_AFFINITY_LOCAL, labels, affinity_local)
        cpu_ratio = wait_ratio = wakeups = None
        before = prev.get(p.pid)
        if before is not None and now > before[0]:
            dt = now - before[0]
            cpu_ratio = max(0.0, (info.cpu_seconds - before[1]) / dt)
            if info.run_queue_wait_seconds is not None and before[2] is not None:
                wait_ratio = max(0.0, (info.run_queue_wait_seconds - before[2]) / dt)
            if info.voluntary_ctxt_switches is not None and before[3] is not None:
                wakeups = max(0.0, (info.voluntary_ctxt_switches - before[3]) / dt)
        self._prev[p.pid] = (now, info.cpu_seconds, info.run_queue_wait_seconds,
                             info.voluntary_ctxt_switches)
        return ProcessReading(
            gpu=gpu, pid=p.pid, comm=info.comm,
            memory_used_bytes=p.used_bytes, sm_utilization=p.sm_ratio, state=info.state,
            cpu_ratio=cpu_ratio, run_queue_wait_ratio=wait_ratio, affinity_local=affinity_local,
            cpus_allowed=info.cpus_allowed_list, container_id=info.container_id,
            pod_uid=info.pod_uid, gpu_instance=p.gpu_instance, wakeups_per_s=wakeups,
            children=None if info.children_states is None else len(info.children_states),
            children_blocked=None if info.children_states is None
            else info.children_states.count("D"))
