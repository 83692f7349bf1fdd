"""What the scenario says at time t: each GPU's and the host's conditions
(defaults, the scenario's state, then the timeline's steps in force), the
processes alive, NVML as a whole, and the events (Xids, health events) with
their times. The GPUs' state computed from these is world.py's.
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Callable
from typing import Any

from gpu_exporter.nvml.constants import EVENT_NAMES
from gpu_exporter.simulator.gpu_state import XidLogEntry
from gpu_exporter.simulator.model import (
    GpuCondition,
    HostCondition,
    ProcessCondition,
    Scenario,
    XidCondition,
)

# The host of a typical 8-GPU training node when a scenario says nothing else.
HOST_DEFAULTS: dict[str, Any] = {
    "cpus": 128,
    "numa_nodes": 2,
    "cpu_busy_ratio": 0.25,
    "iowait_ratio": 0.002,
    "steal_ratio": 0.0,
    "pressure_cpu": {"some": 0.01, "full": 0.0},
    "pressure_memory": {"some": 0.0, "full": 0.0},
    "pressure_io": {"some": 0.005, "full": 0.002},
    "psi_available": True,
    "schedstat_available": True,
    "delay_accounting": False,
    "memory_total_bytes": 2 * 1024**4,
    "memory_available_ratio": 0.7,
    "memory_available_drop_ratio_per_s": 0.0,
    "swap_total_bytes": 0,
    "swap_used_ratio": 0.0,
    "swap_in_bytes_per_s": 0.0,
    "swap_out_bytes_per_s": 0.0,
    "load1": 24.0,
    "context_switches_per_s": 40000.0,
    "disks": {"nvme0n1": 0.05, "nvme1n1": 0.04},
    "net_rx_drops_per_s": {"eth0": 0.0, "ib0": 0.0},
    "net_rx_errors_per_s": {"eth0": 0.0, "ib0": 0.0},
    "cpu_thermal_counters": True,
    "cpu_thermal_throttles_per_s": 0.0,
    "cpu_thermal_throttled_ratio": 0.0,
    # One fixed boot (the uptime is the scenario's, see hostfs.boot_uptime).
    "boot_id": "5e1f0a9c-2b3d-4c8e-9f6a-0d1e2f3a4b5c",
}


class ScenarioTimeline:
    """The scenario resolved for any time t, measured from when it started on
    ``clock``."""

    def __init__(self, scenario: Scenario, clock: Callable[[], float]) -> None:
        self.scenario = scenario
        self.clock = clock
        self._t0 = clock()
        self.gpu_count = scenario.node.gpus
        self._steps = sorted(scenario.timeline, key=lambda s: s.at)
        self._step_times = [s.at for s in self._steps]
        self._changes: frozenset[float] | None = None
        # Conditions are constant between two timeline steps: resolved once per
        # (GPU or host, steps in force), not at every call (model_dump is costly).
        self._conditions: dict[tuple[int, int], dict[str, Any]] = {}
        self._host_conditions: dict[int, dict[str, Any]] = {}
        # When NVML as a whole changes (node-level faults), in time order.
        self.nvml_changes: list[tuple[float, str]] = [
            (s.at, s.nvml) for s in self._steps if s.nvml is not None]
        # Xid events as (time, gpu, xid), delivered once each, and the same
        # Xids as the kernel log has them (with the process the driver names).
        self.events: list[tuple[float, int, int]] = []
        self.xid_log: list[XidLogEntry] = []

        # An Xid of a process on a MIG instance: NVML's event names the
        # instance (gpuInstanceId, computeInstanceId); others say 0xFFFFFFFF.
        self.xid_instances: dict[tuple[float, int, int], tuple[int, int]] = {}

        def xid(at: float, i: int, item: int | XidCondition) -> None:
            code, pid, link = ((item, None, None) if isinstance(item, int)
                               else (item.code, item.pid, item.link))
            self.events.append((at, i, code))
            self.xid_log.append(XidLogEntry(at, i, code, pid, link))
            proc = next((p for p in self.processes(at) if p.pid == pid), None)
            if proc is not None and proc.mig is not None and i in proc.gpus:
                self.xid_instances[(at, i, code)] = proc.mig

        for i in range(self.gpu_count):
            for cond in (scenario.state, scenario.gpus.get(i)):
                for item in (cond.xid or []) if cond else []:
                    xid(0.0, i, item)
        for step in self._steps:
            for i in range(self.gpu_count):
                if step.gpus == "all" or i in step.gpus:
                    for item in step.set.xid or []:
                        xid(step.at, i, item)
        # Other health events as (time, gpu, nvmlEventType bit), delivered once each.
        self.health_events: list[tuple[float, int, int]] = []
        bits = {name: bit for bit, name in EVENT_NAMES.items()}
        for i in range(self.gpu_count):
            for cond in (scenario.state, scenario.gpus.get(i)):
                for name in (cond.nvml_events or []) if cond else []:
                    self.health_events.append((0.0, i, bits[name]))
            for step in self._steps:
                if step.gpus == "all" or i in step.gpus:
                    for name in step.set.nvml_events or []:
                        self.health_events.append((step.at, i, bits[name]))
        self.health_events.sort()
        replay = scenario.replay
        for ev in replay.events if replay else []:
            xid(float(ev["t"]), int(ev["gpu"]), int(ev["xid"]))
            if ev.get("gpu_instance") is not None:
                self.xid_instances[(float(ev["t"]), int(ev["gpu"]), int(ev["xid"]))] = (
                    int(ev["gpu_instance"]), 0)
        self.events.sort()
        self.xid_log.sort(key=lambda e: (e.t, e.gpu))

    # --- time ------------------------------------------------------------
    def elapsed(self) -> float:
        return max(0.0, self.clock() - self._t0)

    def jitter(self, key: str, t: float) -> float:
        """The factor ``key``'s rate is scaled by at t: within 1 +- the
        scenario's jitter, drawn anew every second, the same for the same seed,
        key and second (so two readers of one value agree)."""
        amount = self.scenario.jitter
        if not amount:
            return 1.0
        draw = zlib.crc32(f"{self.scenario.seed}/{key}/{int(t)}".encode()) / 0xFFFFFFFF
        return 1.0 + amount * (2.0 * draw - 1.0)

    def xid_process(self, t: float, gpu: int, code: int) -> tuple[int, str] | None:
        """The process (pid, comm) the driver names for the Xid ``code`` on
        ``gpu`` at ``t`` (the kernel log's line, simulator/kmsg.py), or None."""
        pid = next((e.pid for e in self.xid_log
                    if (e.t, e.gpu, e.xid) == (t, gpu, code) and e.pid is not None), None)
        if pid is None:
            return None
        comm = next((p.comm for p in self.processes(t) if p.pid == pid), "<unknown>")
        return pid, comm

    # --- conditions ------------------------------------------------------
    def nvml_condition(self, t: float | None = None) -> str:
        """NVML as a whole at t (now by default): the node's, then its steps'."""
        mode: str = self.scenario.node.nvml
        if self.nvml_changes:
            t = self.elapsed() if t is None else t
            for at, changed in self.nvml_changes:
                if at > t:
                    break
                mode = changed
        return mode

    def _steps_in_force(self, t: float) -> int:
        """How many timeline steps have begun at t."""
        return bisect.bisect_right(self._step_times, t)

    def change_times(self) -> frozenset[float]:
        """When the node's conditions change: the timeline's steps and the
        processes' exits."""
        if self._changes is None:
            exits = {float(p.exits_at) for procs in
                     [self.scenario.processes, *(s.processes or [] for s in self._steps)]
                     for p in procs if p.exits_at is not None}
            self._changes = frozenset(self._step_times) | exits
        return self._changes

    def condition(self, index: int, t: float) -> dict[str, Any]:
        """GPU ``index``'s condition at t (a copy: callers may change it)."""
        key = (index, self._steps_in_force(t))
        cached = self._conditions.get(key)
        if cached is None:
            cached = self._conditions[key] = self._resolve_condition(index, key[1])
        return dict(cached)

    def _resolve_condition(self, index: int, steps: int) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        errors: dict[str, str] = {}
        hangs: dict[str, float] = {}

        def apply(cond: GpuCondition) -> None:
            values = cond.model_dump(exclude_none=True)
            errors.update(values.pop("errors", {}))
            hangs.update(values.pop("hangs", {}))
            values.pop("xid", None)  # events, not state
            merged.update(values)

        apply(self.scenario.state)
        if index in self.scenario.gpus:
            apply(self.scenario.gpus[index])
        for step in self._steps[:steps]:
            if step.gpus == "all" or index in step.gpus:
                apply(step.set)
        merged["errors"] = errors
        merged["hangs"] = hangs
        return merged

    def host_condition(self, t: float) -> dict[str, Any]:
        """The host's condition at t: defaults, the scenario's, then its steps
        (a copy: callers may change it)."""
        steps = self._steps_in_force(t)
        cached = self._host_conditions.get(steps)
        if cached is None:
            cached = self._host_conditions[steps] = self._resolve_host(steps)
        return dict(cached)

    def _resolve_host(self, steps: int) -> dict[str, Any]:
        merged = dict(HOST_DEFAULTS)

        def apply(cond: HostCondition) -> None:
            merged.update(cond.model_dump(exclude_none=True))

        apply(self.scenario.host)
        for step in self._steps[:steps]:
            if step.host is not None:
                apply(step.host)
        return merged

    def processes(self, t: float) -> list[ProcessCondition]:
        """Processes alive at t: the scenario's list or the latest step's."""
        procs = self.scenario.processes
        for step in self._steps:
            if step.at > t:
                break
            if step.processes is not None:
                procs = step.processes
        return [p for p in procs if p.exits_at is None or p.exits_at > t]

    def gpu_numa_node(self, index: int, t: float) -> int:
        c = self.condition(index, t)
        if "numa_node" in c:
            return int(c["numa_node"])
        nodes = int(self.host_condition(t)["numa_nodes"])
        per_node = max(1, -(-self.gpu_count // nodes))
        return min(nodes - 1, index // per_node)

    def node_cpus(self, node: int, t: float) -> tuple[int, int]:
        """First and last CPU of a NUMA node (CPUs split evenly, in order)."""
        host = self.host_condition(t)
        cpus, nodes = int(host["cpus"]), int(host["numa_nodes"])
        per = max(1, cpus // nodes)
        return node * per, min(cpus, (node + 1) * per) - 1
