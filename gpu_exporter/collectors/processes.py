"""GPU processes: what NVML lists on each GPU (and MIG instance) — memory and SM
utilization — joined with the host's view of the same PID: name, CPU time,
memory, threads, state, context switches, run-queue wait, whether it may run
on CPUs outside the GPU's NUMA node, and its container and pod.

At most ``--processes.max-per-gpu`` processes per GPU are exported, those with
the most GPU memory first; the rest are counted. A process that is gone next
poll is simply not in the next snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.collectors.base import Collector
from gpu_exporter.host.files import MalformedFile
from gpu_exporter.host.procs import ProcessInfo, parse_cpulist, read_process
from gpu_exporter.nvml.adapter import Device, ProcessEntry
from gpu_exporter.nvml.session import Gpu, NvmlSession, normalize_bus_id
from gpu_exporter.readings import ProcessReading
from gpu_exporter.snapshot import SnapshotBuilder

log = logging.getLogger(__name__)


@dataclass
class _Listed:
    """One process on one GPU (instance), as NVML listed it this poll."""

    pid: int
    used_bytes: int | None
    gpu_instance: int | None
    compute_instance: int | None
    graphics: bool
    sm_ratio: float | None = None


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


class ProcessesCollector(Collector):
    name = "processes"
    description = "GPU processes with their GPU memory and SM use, joined with /proc"

    def __init__(self, session: NvmlSession, procfs: Path, sysfs: Path, max_per_gpu: int,
                 monotonic: Callable[[], float]) -> None:
        self.session = session
        self.procfs = procfs
        self.sysfs = sysfs
        self.max_per_gpu = max_per_gpu
        self._mono = monotonic
        self._last_seen_us: dict[int, int] = {}
        # pid -> (time, cpu seconds, run-queue wait seconds) at the previous poll
        self._prev: dict[int, tuple[float, float, float | None]] = {}
        self._dropped: dict[int, int] = {}
        self._local_cpus: dict[int, frozenset[int] | None] = {}
        self._errors = 0

    def errors(self) -> int:
        return self._errors

    def _list(self, gpu: Gpu, device: Device, found: dict[int, list[_Listed]]) -> None:
        entries: list[ProcessEntry] = []
        entries += gpu.read("processes_compute", device.compute_processes) or []
        entries += gpu.read("processes_graphics", device.graphics_processes) or []
        listed = _merge(entries)
        samples = gpu.read("process_samples", device.process_samples,
                           self._last_seen_us.get(gpu.index, 0))
        if samples is not None:
            if samples:
                self._last_seen_us[gpu.index] = max(s.timestamp_us for s in samples)
            per_pid: dict[int, list[float]] = {}
            for s in samples:
                per_pid.setdefault(s.pid, []).append(s.sm_ratio)
            for p in listed:
                values = per_pid.get(p.pid)
                # No new sample: the process ran no kernel since the last poll.
                p.sm_ratio = sum(values) / len(values) if values else 0.0
        found[gpu.index] = listed

    def collect(self, out: SnapshotBuilder) -> None:
        readings: list[ProcessReading] = []
        out.facts["processes"] = readings
        if not self.session.up:
            self._errors = 0
            return
        found: dict[int, list[_Listed]] = {}
        self._errors = self.session.each_gpu(lambda gpu, d: self._list(gpu, d, found))
        now = self._mono()
        prev, self._prev = self._prev, {}
        host_cache: dict[int, ProcessInfo | None] = {}
        for gpu in self.session.gpus:
            listed = found.get(gpu.index)
            if listed is None:
                continue
            labels = {"gpu": str(gpu.index), "uuid": gpu.identity.uuid}
            listed.sort(key=lambda p: p.used_bytes or 0, reverse=True)
            if len(listed) > self.max_per_gpu:
                self._dropped[gpu.index] = (self._dropped.get(gpu.index, 0)
                                            + len(listed) - self.max_per_gpu)
                listed = listed[: self.max_per_gpu]
            if gpu.index in self._dropped:
                out.add("gpu_process_series_dropped_total", self._dropped[gpu.index], **labels)
            local = self._gpu_local_cpus(gpu)
            for p in listed:
                if p.pid not in host_cache:
                    host_cache[p.pid] = self._read_pid(p.pid)
                info = host_cache[p.pid]
                if info is None:
                    continue  # exited between NVML's list and /proc: skip silently
                readings.append(self._export(out, labels, p, info, local, now, prev))

    def _read_pid(self, pid: int) -> ProcessInfo | None:
        try:
            return read_process(self.procfs, pid)
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

    def _export(self, out: SnapshotBuilder, gpu_labels: dict[str, str], p: _Listed,
                info: ProcessInfo, local: frozenset[int] | None, now: float,
                prev: dict[int, tuple[float, float, float | None]]) -> ProcessReading:
        labels = {**gpu_labels, "pid": str(p.pid), "comm": info.comm,
                  "gpu_instance": "" if p.gpu_instance is None else str(p.gpu_instance),
                  "compute_instance": "" if p.compute_instance is None
                  else str(p.compute_instance)}
        out.add("gpu_process_info", 1, **labels, type="graphics" if p.graphics else "compute",
                container_id=info.container_id, pod_uid=info.pod_uid)
        if p.used_bytes is not None:
            out.add("gpu_process_memory_used_bytes", p.used_bytes, **labels)
        if p.sm_ratio is not None:
            out.add("gpu_process_sm_utilization_ratio", p.sm_ratio, **labels)
        out.add("gpu_process_cpu_seconds_total", info.cpu_seconds, **labels)
        if info.run_queue_wait_seconds is not None:
            out.add("gpu_process_run_queue_wait_seconds_total", info.run_queue_wait_seconds,
                    **labels)
        out.add("gpu_process_resident_memory_bytes", info.rss_bytes, **labels)
        out.add("gpu_process_threads", info.threads, **labels)
        out.add("gpu_process_state", 1, **labels, state=info.state)
        for kind, count in (("voluntary", info.voluntary_ctxt_switches),
                            ("involuntary", info.involuntary_ctxt_switches)):
            if count is not None:
                out.add("gpu_process_context_switches_total", count, **labels, kind=kind)
        affinity_local = None
        if local is not None and info.cpus_allowed is not None:
            affinity_local = info.cpus_allowed <= local
            out.add("gpu_process_cpu_affinity_local", affinity_local, **labels)
        cpu_ratio = wait_ratio = None
        before = prev.get(p.pid)
        if before is not None and now > before[0]:
            dt = now - before[0]
            cpu_ratio = max(0.0, (info.cpu_seconds - before[1]) / dt)
            if info.run_queue_wait_seconds is not None and before[2] is not None:
                wait_ratio = max(0.0, (info.run_queue_wait_seconds - before[2]) / dt)
        self._prev[p.pid] = (now, info.cpu_seconds, info.run_queue_wait_seconds)
        return ProcessReading(
            gpu=int(gpu_labels["gpu"]), pid=p.pid, comm=info.comm,
            memory_used_bytes=p.used_bytes, sm_utilization=p.sm_ratio, state=info.state,
            cpu_ratio=cpu_ratio, run_queue_wait_ratio=wait_ratio, affinity_local=affinity_local,
            cpus_allowed=info.cpus_allowed_list)
