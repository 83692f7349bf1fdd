"""Simulated GPUs underneath pynvml: the demo mode, the engine of the end-to-end
tests and the fixture of the benchmarks. See ``clib`` for how it plugs in."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from gpu_exporter.nvml import binding
from gpu_exporter.settings import safefile, safeyaml
from gpu_exporter.settings.sections import ValidationError
from gpu_exporter.simulator import recordings
from gpu_exporter.simulator.cgroupfs import TenantFs, pod_placement, slurm_placement
from gpu_exporter.simulator.clib import FakeNvmlLibrary
from gpu_exporter.simulator.hostfs import HostFs
from gpu_exporter.simulator.kmsg import KernelLogFile
from gpu_exporter.simulator.kubelet import PodResourcesServer, device_checkpoint
from gpu_exporter.simulator.model import DeviceProfile, ProcessCondition, Scenario
from gpu_exporter.simulator.nvidia_proc import write_information
from gpu_exporter.simulator.tenants import Tenants
from gpu_exporter.simulator.world import World


class ScenarioError(Exception):
    """A scenario or profile that cannot be used, worded as one line."""


def _package_dir(name: str) -> Path:
    return Path(str(resources.files("gpu_exporter.simulator").joinpath(name)))


def builtin_scenarios() -> list[str]:
    return sorted(p.stem for p in _package_dir("scenarios").glob("*.yaml"))


def builtin_profiles() -> list[str]:
    return sorted(p.stem for p in _package_dir("profiles").glob("*.yaml"))


# Steps in a scenario's timeline: each poll resolves a GPU's condition through
# every step in force, so their number is bounded (the built-in scenarios have
# at most 2); a recording's steps are its process list changing, at most one a
# poll.
MAX_TIMELINE_STEPS = 1_000


def _load_yaml(path: Path, kind: safefile.FileKind) -> Any:
    try:
        return safeyaml.load_yaml(path, kind)
    except safefile.FileRefused as exc:
        raise ScenarioError(str(exc)) from None


def _read_scenario(path: Path) -> dict[str, Any]:
    """A scenario file's mapping, read within the bounds of a scenario, or of
    a recording when it says it is one: a recording is checked whole (its end
    line and checksum, its header, every recorded answer) before it is used."""
    kind = safefile.RECORDING_FILE
    try:
        data = safefile.read_bytes(path, kind)
        sealed_polls = None
        if recordings.looks_sealed(data):
            sealed_polls = recordings.check_seal(data)
        else:
            kind = safefile.SCENARIO_FILE
            safefile.within(data, path, kind)
        doc = safeyaml.parse_yaml(safefile.decode(data, path, kind), path, kind)
        if not isinstance(doc, dict):
            raise ScenarioError(f"scenario {path}: expected a mapping with name, node, state, "
                                "timeline")
        if sealed_polls is not None or "replay" in doc:
            kind = safefile.RECORDING_FILE
            recordings.check_document(doc, sealed_polls)
            del doc[recordings.HEADER]
    except safefile.FileRefused as exc:
        raise ScenarioError(str(exc)) from None
    except recordings.RecordingRefused as exc:
        raise ScenarioError(str(safefile.FileRefused(safefile.RECORDING_FILE, path, str(exc)))
                            ) from None
    timeline = doc.get("timeline")
    most = MAX_TIMELINE_STEPS if sealed_polls is None else sealed_polls
    if isinstance(timeline, list) and len(timeline) > most:
        raise ScenarioError(f"{kind.name} {path}: timeline: {len(timeline):,} steps, more than "
                            f"the {most:,} a {kind.name} may have")
    return doc


def _one_line(exc: ValidationError) -> str:
    loc, problem = safefile.validation_problem(exc, unknown="unknown field")
    return f"{safefile.dotted(loc) or '(top level)'}: {problem}"


def load_profile(name: str | dict[str, Any]) -> DeviceProfile:
    if isinstance(name, dict):
        try:
            return DeviceProfile(key="inline", **name)
        except ValidationError as exc:
            raise ScenarioError(f"inline profile: {_one_line(exc)}") from None
    path = Path(name)
    if not name.endswith((".yaml", ".yml")):
        path = _package_dir("profiles") / f"{name}.yaml"
    if not _exists(path):
        raise ScenarioError(f"unknown device profile {safefile.shown(name)}; built-in: "
                            + ", ".join(builtin_profiles()))
    data = _load_yaml(path, safefile.PROFILE_FILE)
    if not isinstance(data, dict):
        raise ScenarioError(f"profile {path}: expected a mapping")
    try:
        return DeviceProfile(key=name, **data)
    except ValidationError as exc:
        raise ScenarioError(f"profile {path}: {_one_line(exc)}") from None


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _exists(path: Path) -> bool:
    """Whether a file is there; a name no file can have (too long, a NUL in
    it: what a scenario's ``extends`` may hold) is not."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _resolve(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if not (name_or_path.endswith((".yaml", ".yml")) or _exists(path)):
        path = _package_dir("scenarios") / f"{name_or_path}.yaml"
        if not _exists(path):
            raise ScenarioError(f"unknown scenario {safefile.shown(name_or_path)}: not a file "
                                "and not one of the built-in scenarios: "
                                + ", ".join(builtin_scenarios()))
    elif not _exists(path):
        raise ScenarioError(f"scenario {path}: no such file")
    return path


def _scenario_data(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The file's mapping, merged over the scenario it ``extends`` (if any)."""
    if path in seen:
        raise ScenarioError(f"scenario {path}: extends itself through "
                            + " -> ".join(str(p) for p in seen))
    data = _read_scenario(path)
    base_name = data.pop("extends", None)
    if base_name is None:
        return data
    if not isinstance(base_name, str):
        raise ScenarioError(f"scenario {path}: extends: expected a scenario name or file")
    try:
        base_path = _resolve_from(base_name, path.parent)
    except ScenarioError as exc:
        raise ScenarioError(f"scenario {path}: extends: {exc}") from None
    base = _scenario_data(base_path, (*seen, path))
    base.pop("name", None)
    base.pop("description", None)
    base.pop("expect", None)
    changes = data.pop("process_changes", None)
    merged = _deep_merge(base, data)
    if changes is not None:
        merged["processes"] = _change_processes(path, merged.get("processes", []), changes)
    return merged


def _change_processes(path: Path, procs: Any, changes: Any) -> list[Any]:
    """``process_changes: {PID: {field: value}}`` edits inherited processes."""
    if not isinstance(changes, dict) or not isinstance(procs, list):
        raise ScenarioError(f"scenario {path}: process_changes: expected a mapping of pid to "
                            "fields")
    by_pid = {p.get("pid"): p for p in procs if isinstance(p, dict)}
    for pid, fields in changes.items():
        if pid not in by_pid:
            raise ScenarioError(f"scenario {path}: process_changes: no process with pid "
                                f"{safefile.shown(pid)} "
                                "in the scenario it extends")
        if not isinstance(fields, dict):
            raise ScenarioError(f"scenario {path}: process_changes.{safefile.shown(pid)}: "
                                "expected a mapping")
        _scale_switches(by_pid[pid], fields)
        by_pid[pid].update(fields)
    return procs


# Context switch rates a changed process keeps in proportion to its CPU time.
_SWITCHES = ("voluntary_ctxt_switches_per_s", "nonvoluntary_ctxt_switches_per_s")


def _scale_switches(proc: dict[str, Any], fields: dict[str, Any]) -> None:
    """A change of a process's CPU time that leaves its context switches
    unsaid scales the inherited rates with it: a process runs only by waking
    (or being switched in), so a job that drops from 1.2 CPUs to 0.2 % of one
    no longer wakes 900 times a second, whatever the busy job it extends did."""
    old, new = proc.get("cpu_ratio"), fields.get("cpu_ratio")
    if not isinstance(old, int | float) or not isinstance(new, int | float) or old <= 0:
        return
    for key in _SWITCHES:
        rate = proc.get(key)
        if key not in fields and isinstance(rate, int | float):
            fields[key] = rate * max(0.0, float(new)) / float(old)


def _resolve_from(name: str, directory: Path) -> Path:
    """``extends:`` names a built-in scenario or a file next to the extending one."""
    local = directory / name
    if _exists(local):
        return local
    return _resolve(name)


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a YAML file by path."""
    path = _resolve(name_or_path)
    data = _scenario_data(path)
    data.setdefault("name", path.stem)
    try:
        scenario = Scenario(**data)
    except ValidationError as exc:
        raise ScenarioError(f"scenario {path}: {_one_line(exc)}") from None
    try:
        load_profile(scenario.node.profile)  # fail now, not at the first poll
    except ScenarioError as exc:
        raise ScenarioError(f"scenario {path}: node.profile: {exc}") from None
    return scenario


# How long a simulated GPU's readings stand on a real clock: a real driver
# refreshes power every 20 ms and utilization every 200 ms; 50 ms keeps the
# readings of one poll consistent and computes each GPU about once a poll.
REAL_CLOCK_TICK_S = 0.05


def _missing_library(name: str) -> object:
    raise OSError(f"{name}: cannot open shared object file: No such file or directory")


def _tenant_cgroups(tenants: Tenants) -> dict[int, str]:
    """PID -> its /proc/PID/cgroup text (without the last newline), where the
    container runtime or slurmd puts each tenant's processes."""
    found: dict[int, str] = {}
    for pod in tenants.pods:
        for c in pod.containers:
            text = pod_placement(pod, c).proc_cgroup.rstrip("\n")
            found.update((pid, text) for pid in c.pids)
    for job in tenants.slurm_jobs:
        text = slurm_placement(job).proc_cgroup.rstrip("\n")
        found.update((pid, text) for pid in job.pids)
    return found


def _tenant_cpusets(tenants: Tenants) -> dict[int, str]:
    """PID -> its workload's cpuset, for the workloads that have one: the
    kernel keeps a task's allowed CPUs within its cpuset."""
    found: dict[int, str] = {}
    for pod in tenants.pods:
        for c in pod.containers:
            if c.cpus is not None:
                found.update((pid, c.cpus) for pid in c.pids)
    for job in tenants.slurm_jobs:
        if job.cpus is not None:
            found.update((pid, job.cpus) for pid in job.pids)
    return found


def _tenant_uids(tenants: Tenants) -> dict[int, int]:
    """PID -> the user it runs as: its container's, or its Slurm job's."""
    found: dict[int, int] = {}
    for pod in tenants.pods:
        for c in pod.containers:
            found.update((pid, c.run_as_uid) for pid in c.pids)
    for job in tenants.slurm_jobs:
        found.update((pid, job.uid) for pid in job.pids)
    return found


def _placed(scenario: Scenario) -> Scenario:
    """The scenario with each tenant's processes in their workload's cgroup,
    confined to its cpuset unless a process names its own CPUs, and run as
    its tenant's user unless a process names its own."""
    if scenario.tenants is None:
        return scenario
    cgroups = _tenant_cgroups(scenario.tenants)
    cpusets = _tenant_cpusets(scenario.tenants)
    uids = _tenant_uids(scenario.tenants)

    def place(procs: list[ProcessCondition]) -> list[ProcessCondition]:
        out = []
        for p in procs:
            update: dict[str, str | int] = {}
            if p.pid in cgroups:
                update["cgroup"] = cgroups[p.pid]
            if p.pid in uids and p.uid is None:
                update["uid"] = uids[p.pid]
            if p.pid in cpusets and p.cpus_allowed is None:
                update["cpus_allowed"] = cpusets[p.pid]
            out.append(p.model_copy(update=update) if update else p)
        return out

    return scenario.model_copy(update={
        "processes": place(scenario.processes),
        "timeline": [s if s.processes is None else
                     s.model_copy(update={"processes": place(s.processes)})
                     for s in scenario.timeline]})


def _unplaced_cgroups(scenario: Scenario) -> dict[str, int]:
    """The cgroup v2 paths of the processes no tenant places (their
    ``cgroup`` line's "0::" path), with the memory those processes hold at
    most at once: the cgroups exist whether or not a tenant declares them."""
    tenants = scenario.tenants
    placed = set() if tenants is None else {
        pid for pod in tenants.pods for c in pod.containers for pid in c.pids} | {
        pid for job in tenants.slurm_jobs for pid in job.pids}
    held: dict[str, int] = {}
    for procs in [scenario.processes] + [s.processes for s in scenario.timeline
                                         if s.processes is not None]:
        step: dict[str, int] = {}
        for proc in procs:
            path = next((line[3:] for line in proc.cgroup.splitlines()
                         if line.startswith("0::/")), None)
            if path is not None and proc.pid not in placed:
                step[path] = step.get(path, 0) + proc.rss_bytes
        for path, rss in step.items():
            held[path] = max(held.get(path, 0), rss)
    return held


class SimulatedNode:
    """A scenario running on a clock, installed underneath pynvml. On the real
    clock (the default) the GPUs' readings stand for ``REAL_CLOCK_TICK_S``; on
    any other clock (a virtual one) they follow every move of it. With
    ``tenants:`` its kubelet serves their pods on ``pod_resources_socket``
    and each workload's cgroup files are under ``sysfs``/fs/cgroup."""

    def __init__(self, scenario: Scenario, clock: Callable[[], float] = time.monotonic,
                 latency_us: dict[str, float] | None = None,
                 tick_s: float | None = None) -> None:
        scenario = _placed(scenario)
        self.scenario = scenario
        self.profile = load_profile(scenario.node.profile)
        if tick_s is None:
            tick_s = REAL_CLOCK_TICK_S if clock is time.monotonic else 0.0
        self.world = World(scenario, self.profile, clock, tick_s)
        self.library = FakeNvmlLibrary(self.world, latency_us)
        # A poll thread refreshes the files while the command's main thread may
        # be unwinding (SIGTERM) and closing: one at a time, and nothing is
        # written after close, or a refresh in flight would make the removed
        # directories again (in /dev/shm, behind the root's links).
        self._files_lock = threading.RLock()
        self._closed = False
        self.kubelet: PodResourcesServer | None = None
        self._root = Path(tempfile.mkdtemp(prefix="gpu-exporter-sim-"))
        atexit.register(self.close)  # however the process ends, leave no files behind
        self.hostfs = HostFs(self.world, self._root)
        self.procfs = self.hostfs.procfs
        self.sysfs = self.hostfs.sysfs
        # The driver's /proc files (each GPU's device minor).
        write_information(self.world, self.procfs)
        # The kernel log, read as /dev/kmsg (--path.kmsg).
        self.kernel_log = KernelLogFile(self.world, scenario, self._root, self.procfs)
        self.kmsg = str(self.kernel_log.path)
        # Where the node's kubelet serves its PodResources API: nothing listens
        # there unless the scenario declares pods.
        self.pod_resources_socket = str(self._root / "pod-resources" / "kubelet.sock")
        tenants = scenario.tenants
        self._tenant_fs = TenantFs(
            tenants, self.procfs, self.sysfs / "fs" / "cgroup", self.world.jitter,
            lambda t: bool(self.world.host_condition(t)["psi_available"]),
            int(self.world.host_condition(0.0)["cpus"]), _unplaced_cgroups(scenario),
            lambda pids, t: sum(p.cpu_ratio for p in self.world.processes(t) if p.pid in pids))
        if tenants is not None and (tenants.pods or tenants.free_devices):
            os.makedirs(os.path.dirname(self.pod_resources_socket), exist_ok=True)
            self.kubelet = PodResourcesServer(self.pod_resources_socket, tenants).start()
            if tenants.device_checkpoint:
                checkpoint = self._root / "device-plugins" / "kubelet_internal_checkpoint"
                os.makedirs(checkpoint.parent, exist_ok=True)
                checkpoint.write_text(device_checkpoint(tenants))
        self.refresh()

    @property
    def real_host(self) -> bool:
        """Only NVML is simulated: the exporter reads this machine's /proc,
        /sys and kernel log, at the paths its settings give."""
        return self.scenario.node.host == "real"

    def refresh(self) -> None:
        """Bring the simulated /proc and /sys up to the clock's time."""
        if self.real_host:
            return
        with self._files_lock:
            if self._closed:
                return
            elapsed = self.world.elapsed()
            self.hostfs.render(elapsed)
            self.kernel_log.render(elapsed)
            self._tenant_fs.write(elapsed)

    def close(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None
        with self._files_lock:
            self._closed = True
            # Stopped before its HostFs was made, there is none yet to free.
            hostfs: HostFs | None = getattr(self, "hostfs", None)
            if hostfs is not None:
                hostfs.close()  # its files may live in memory (/dev/shm): free them now
            shutil.rmtree(self._root, ignore_errors=True)
        atexit.unregister(self.close)

    @classmethod
    def from_name(cls, name_or_path: str, clock: Callable[[], float] = time.monotonic,
                  latency_us: dict[str, float] | None = None) -> SimulatedNode:
        return cls(load_scenario(name_or_path), clock, latency_us)

    def install(self) -> None:
        if self.scenario.node.nvml == "library_missing":
            binding.install_library(None, loader=_missing_library)
        else:
            binding.install_library(self.library)

    def uninstall(self) -> None:
        binding.install_library(None)


__all__ = ["ScenarioError", "SimulatedNode", "builtin_profiles", "builtin_scenarios",
           "load_profile", "load_scenario"]
