"""``gpu-exporter record``: poll a node through the same NVML adapter the daemon
uses and write a simulator scenario that replays it — a device profile, and per
poll what every NVML call returned (values in NVML's units, and error codes).

Users attach a recording to a bug report; ``gpu-exporter --simulate node.yaml``
then runs the real exporter on that machine's answers. Of the host side only
the GPU processes are recorded (name, state, CPU use, affinity: what the
process findings read), as the scenario's process list changing poll by poll;
the rest of /proc and /sys, and NVML's sub-second sample buffers, are not.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime as dt
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpu_exporter import __version__
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.adapter import Device, MigDevice, set_recorder
from gpu_exporter.nvml.errors import NvmlError, Return
from gpu_exporter.poll.readings import ProcessReading
from gpu_exporter.settings.config import ConfigError, parse_duration
from gpu_exporter.simulator import ScenarioError

GpuRec = dict[str, Any]
# /proc/PID/stat states the scenario model knows; anything else reads as sleeping.
_STATES = ("R", "S", "D", "Z", "T", "I")
_ARCH_CODES = {name: code for code, name in c.ARCHITECTURES.items()}


def _mhz(hz: float) -> int:
    return round(hz / 1e6)


class Recorder:
    """Keeps, per GPU, the newest answer to every call; ``mark(t)`` freezes a poll."""

    def __init__(self) -> None:
        self.system: dict[str, Any] = {}
        self.gpus: dict[int, GpuRec] = {}
        self.polls: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self._samples: dict[int, tuple[int, int | None]] = {}  # id(GpmSample) -> gpu, gi
        # gpu -> the poll (its index in self.polls) of its newest GPM sample, and
        # of the one before: the exporter samples GPM every few polls, and the
        # rates a sample gives hold for every poll since the one before.
        self._gpm_polls: dict[int, tuple[int | None, int]] = {}
        self._migs: dict[int, tuple[int, int]] = {}  # id(MigDevice) -> gpu, slot
        self._handles: dict[int, int] = {}  # device handle address -> gpu
        self._t = 0.0
        self._last: dict[int, GpuRec] = {}
        # The GPU processes as the host saw them: the first poll's list, then
        # (time, list) whenever it changed.
        self.processes: list[dict[str, Any]] | None = None
        self.process_steps: list[tuple[float, list[dict[str, Any]]]] = []

    # --- the hook -------------------------------------------------------------
    def __call__(self, call: str, args: tuple[Any, ...], result: object) -> None:
        target = args[0] if args else None
        if isinstance(target, Device):
            self._device(call, target, args[1:], result)
        elif isinstance(target, MigDevice):
            self._mig(call, target, result)
        elif call == "nvmlGpmMetricsGet" and not isinstance(result, NvmlError):
            self._gpm(args, result)
        elif call == "nvmlEventSetWait_v2" and isinstance(result, tuple):
            handle, event_type, data, gpu_instance = result
            if event_type & c.EVENT_XID_CRITICAL and handle in self._handles:
                event = {"t": self._t, "gpu": self._handles[handle], "xid": data}
                if gpu_instance is not None:  # the MIG instance NVML names
                    event["gpu_instance"] = gpu_instance
                self.events.append(event)
        elif not isinstance(result, NvmlError):
            if call == "nvmlSystemGetDriverVersion":
                self.system["driver_version"] = result
            elif call == "nvmlSystemGetCudaDriverVersion":
                major, minor = str(result).split(".")
                self.system["cuda_driver_version"] = int(major) * 1000 + int(minor) * 10
            elif call == "nvmlDeviceGetCount_v2":
                self.system["gpus"] = result

    def _device(self, call: str, d: Device, args: tuple[Any, ...], result: object) -> None:
        g = self.gpus.setdefault(d.index, {"errors": {}, "lost": False})
        self._handles[d.handle_value] = d.index
        if isinstance(result, NvmlError):
            if result.device_gone:
                g["lost"] = True
            elif call not in ("nvmlDeviceGetProcessUtilization", "nvmlDeviceGetSamples"):
                g["errors"][call] = result.name
            return
        g["lost"] = False
        g["errors"].pop(call, None)
        handler = _HANDLERS.get(call)
        if handler is not None:
            handler(self, g, d, args, result)

    def _mig(self, call: str, m: MigDevice, result: object) -> None:
        where = self._migs.get(id(m))
        if where is None or isinstance(result, NvmlError):
            return
        gpu, slot = where
        migs = self.gpus.setdefault(gpu, {"errors": {}, "lost": False}).setdefault("mig", {})
        inst = migs.setdefault(slot, {"compute_instance": 0, "sm_active": 0.0})
        if call == "nvmlDeviceGetUUID":
            inst["uuid"] = result
        elif call == "nvmlDeviceGetGpuInstanceId":
            inst["gpu_instance"] = result
        elif call == "nvmlDeviceGetComputeInstanceId":
            inst["compute_instance"] = result
        elif call == "nvmlDeviceGetMemoryInfo_v2":
            assert isinstance(result, tuple)
            inst["memory_total"], inst["memory_used"] = result[0], result[1]

    def _gpm(self, args: tuple[Any, ...], result: object) -> None:
        second = args[1] if len(args) > 1 else None
        where = self._samples.get(id(second))
        if where is None or not isinstance(result, dict):
            return
        gpu, gi = where
        # metric -> (scenario rate, scale from GPM's unit): percentages become
        # ratios; PCIe MiB/s become the byte rate that drives the counters, so a
        # replay computes the same GPM PCIe rates even though the PCIe byte
        # counters themselves are read (and recorded) only every few polls.
        names = {c.GPM_SM_UTIL: ("sm_active", 0.01), c.GPM_SM_OCCUPANCY: ("sm_occupancy", 0.01),
                 c.GPM_ANY_TENSOR_UTIL: ("tensor_active", 0.01),
                 c.GPM_DRAM_BW_UTIL: ("dram_active", 0.01),
                 c.GPM_PCIE_TX_PER_SEC: ("pcie_tx_bytes_per_s", 1024.0 * 1024.0),
                 c.GPM_PCIE_RX_PER_SEC: ("pcie_rx_bytes_per_s", 1024.0 * 1024.0)}
        g = self.gpus.setdefault(gpu, {"errors": {}, "lost": False})
        for mid, value in result.items():
            if mid not in names or isinstance(value, NvmlError):
                continue
            if gi is None:
                name, scale = names[mid]
                g.setdefault("rates", {})[name] = value * scale
        since = self._gpm_polls.get(gpu, (None, 0))[0] if gi is None else None
        if since is not None and since + 1 < len(self.polls) and "rates" in g:
            # The polls since the previous sample replay at these rates too.
            first = self.polls[since + 1]["gpus"].setdefault(gpu, {})
            first["rates"] = copy.deepcopy(g["rates"])
        for mid, value in result.items():
            if mid not in names or isinstance(value, NvmlError) or gi is None:
                continue
            if mid == c.GPM_SM_UTIL:
                for inst in g.get("mig", {}).values():
                    if inst.get("gpu_instance") == gi:
                        inst["sm_active"] = value / 100.0

    # --- polls ---------------------------------------------------------------
    def mark(self, t: float) -> None:
        """Freeze this poll: only what changed since the previous poll is kept."""
        self._t = t
        gpus: dict[int, GpuRec] = {}
        for index, now in self.gpus.items():
            before = self._last.get(index, {})
            changed = {k: copy.deepcopy(v) for k, v in now.items() if before.get(k) != v}
            if changed:
                gpus[index] = changed
        self._last = copy.deepcopy(self.gpus)
        self.polls.append({"t": round(t, 6), "gpus": gpus})

    def mark_processes(self, t: float, readings: list[ProcessReading]) -> None:
        """The host's view of this poll's GPU processes, one entry per PID."""
        by_pid: dict[int, dict[str, Any]] = {}
        for r in readings:
            if r.pid <= 1:
                continue
            entry = by_pid.get(r.pid)
            if entry is None:
                entry = by_pid[r.pid] = {"pid": r.pid, "comm": (r.comm or "?")[:15],
                                         "gpus": []}
                if r.state in _STATES:
                    entry["state"] = r.state
                if r.cpu_ratio is not None:
                    entry["cpu_ratio"] = round(max(0.0, r.cpu_ratio), 3)
                if r.run_queue_wait_ratio is not None:
                    entry["run_queue_wait_ratio"] = round(max(0.0, r.run_queue_wait_ratio), 3)
                if r.wakeups_per_s is not None:
                    # The process's own wake-ups: a stuck process and an idle
                    # server burn alike, only how often they wake tells them apart.
                    entry["voluntary_ctxt_switches_per_s"] = round(max(0.0, r.wakeups_per_s), 3)
                if r.sm_utilization is not None:
                    entry["sm_utilization"] = round(min(1.0, max(0.0, r.sm_utilization)), 3)
                if r.cpus_allowed:
                    entry["cpus_allowed"] = r.cpus_allowed
            entry["gpus"].append(r.gpu)
        current = [by_pid[pid] for pid in sorted(by_pid)]
        for entry in current:
            entry["gpus"] = sorted(set(entry["gpus"]))
        if self.processes is None:
            self.processes = current
        elif current != (self.process_steps[-1][1] if self.process_steps else self.processes):
            self.process_steps.append((round(t, 6), current))

    def scenario(self, name: str, description: str) -> dict[str, Any]:
        first = dict(self._last.get(0, {}))
        # The profile says what the board model cannot do: what no GPU answered.
        # A single GPU's refusals (MIG mode, a fault) stay in its own replay.
        absent = None
        for g in self._last.values():
            mine = {k for k, v in g.get("errors", {}).items()
                    if v in ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND")}
            absent = mine if absent is None else absent & mine
        first["errors"] = {k: "NOT_SUPPORTED" for k in absent or ()}
        first["mig_profiles"] = self.system.get("mig_profiles", [])
        return {
            "name": name,
            "description": description,
            "node": {"gpus": int(self.system.get("gpus", len(self.gpus))),
                     "profile": _profile(first),
                     "driver_version": self.system.get("driver_version", "unknown"),
                     "cuda_driver_version": self.system.get("cuda_driver_version", 0)},
            "noise": False,
            "processes": self.processes or [],
            "timeline": [{"at": t, "processes": procs} for t, procs in self.process_steps],
            "replay": {"polls": self.polls, "events": self.events},
        }


def _profile(g: GpuRec) -> dict[str, Any]:
    """A device profile from one GPU's static answers; replay overrides the rest."""
    mib = 1024 * 1024
    clocks = g.get("max_clocks_mhz", {})
    app = g.get("app_clocks_mhz", {})
    th = g.get("thresholds", {})
    unsupported = sorted(k for k, v in g.get("errors", {}).items()
                         if v in ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND"))
    return {
        "name": g.get("name", "unknown"),
        "architecture": _ARCH_CODES.get(g.get("architecture", ""), 0),
        "compute_capability": [int(x) for x in str(g.get("cc", "0.0")).split(".")],
        "memory_total_mib": int(g.get("mem_total", 0)) // mib,
        "memory_reserved_mib": int(g.get("mem_reserved", 0)) // mib,
        "power_default_limit_w": g.get("default_limit_mw", 0) / 1000.0,
        "power_min_limit_w": 0.0,
        "power_max_limit_w": g.get("default_limit_mw", 0) / 1000.0,
        "power_idle_w": 0.0,
        "clocks_max_mhz": {"graphics": clocks.get(0, 0), "sm": clocks.get(1, 0),
                           "memory": clocks.get(2, 0)},
        "clocks_idle_mhz": {"graphics": clocks.get(0, 0), "sm": clocks.get(1, 0),
                            "memory": clocks.get(2, 0)},
        "clocks_application_mhz": {"graphics": app.get(0, 0), "sm": app.get(1, 0),
                                   "memory": app.get(2, 0)},
        "temperature_thresholds_c": {"shutdown": th.get(c.THRESHOLD_SHUTDOWN, 0),
                                     "slowdown": th.get(c.THRESHOLD_SLOWDOWN, 0),
                                     "max_operating": th.get(c.THRESHOLD_GPU_MAX, 0)},
        "pcie_max_generation": g.get("pcie_max_gen", 1),
        "pcie_max_width": g.get("pcie_max_width", 1),
        "fans": len(g.get("fans_pct", {})),
        "vbios_version": g.get("vbios", ""),
        "unsupported_calls": unsupported,
        "ecc": bool(g.get("ecc_enabled", False)),
        "gpm": bool(g.get("gpm_supported", False)),
        "nvlinks": int(g.get("nvlink_count", len(g.get("nvlink_up", {})))),
        "mig": bool(g.get("mig_capable")),
        "mig_profiles": g.get("mig_profiles", []),
        "fabric": bool(g.get("fabric_capable")),
        "event_types": g.get("event_types", 0),
    }


Handler = Callable[[Recorder, GpuRec, Device, tuple[Any, ...], Any], None]


def _set(key: str, convert: Callable[[Any], Any] = lambda v: v) -> Handler:
    def handler(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
        g[key] = convert(v)

    return handler


def _keyed(key: str, convert: Callable[[Any], Any] = lambda v: v) -> Handler:
    def handler(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
        g.setdefault(key, {})[args[0]] = convert(v)

    return handler


def _util(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
    g["util_pct"], g["mem_util_pct"] = round(v[0] * 100), round(v[1] * 100)


def _memory(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
    g["mem_total"], g["mem_reserved"], g["mem_used"] = v


# Device fields -> the state key they set, as their own calls are recorded.
_FIELD_KEYS = {c.FI_DEV_MEMORY_TEMP: "mem_temp_c", c.FI_DEV_PCIE_COUNT_TX_BYTES: "pcie_tx_bytes",
               c.FI_DEV_PCIE_COUNT_RX_BYTES: "pcie_rx_bytes",
               c.FI_DEV_TOTAL_ENERGY_CONSUMPTION: "energy_mj",
               c.FI_DEV_PCIE_REPLAY_COUNTER: "pcie_replays", c.FI_DEV_POWER_AVERAGE: "power_mw",
               c.FI_DEV_POWER_CURRENT_LIMIT: "limit_mw",
               c.FI_DEV_POWER_DEFAULT_LIMIT: "default_limit_mw"}
# ECC total fields -> (type, counter), as nvmlDeviceGetTotalEccErrors is recorded.
_ECC_FIELDS = {c.FI_DEV_ECC_SBE_VOL_TOTAL: (c.ECC_CORRECTED, c.ECC_VOLATILE),
               c.FI_DEV_ECC_DBE_VOL_TOTAL: (c.ECC_UNCORRECTED, c.ECC_VOLATILE),
               c.FI_DEV_ECC_SBE_AGG_TOTAL: (c.ECC_CORRECTED, c.ECC_AGGREGATE),
               c.FI_DEV_ECC_DBE_AGG_TOTAL: (c.ECC_UNCORRECTED, c.ECC_AGGREGATE)}
# Remapped row fields -> their place in nvmlDeviceGetRemappedRows' answer.
_REMAP_FIELDS = {c.FI_DEV_REMAPPED_COR: 0, c.FI_DEV_REMAPPED_UNC: 1,
                 c.FI_DEV_REMAPPED_PENDING: 2, c.FI_DEV_REMAPPED_FAILURE: 3}
_NVLINK_FIELDS = {c.FI_DEV_NVLINK_GET_STATE, c.FI_DEV_NVLINK_ERROR_DL_REPLAY,
                  c.FI_DEV_NVLINK_ERROR_DL_RECOVERY, c.FI_DEV_NVLINK_ERROR_DL_CRC,
                  c.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, c.FI_DEV_NVLINK_THROUGHPUT_DATA_RX}


def _fields(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
    """One nvmlDeviceGetFieldValues answer: keyed by field id, or by (field
    id, scope id) where the exporter asked per-link NVLink fields with the
    GPU's own in one call."""
    scoped: dict[tuple[int, int], Any] = {}
    for key, value in v.items():
        fid, scope = key if isinstance(key, tuple) else (key, 0)
        if fid in _NVLINK_FIELDS:
            scoped[fid, scope] = value
        elif isinstance(value, NvmlError):
            g.setdefault("field_errors", {})[fid] = value.name
        elif fid in _FIELD_KEYS:
            g[_FIELD_KEYS[fid]] = int(value)
        elif fid in _ECC_FIELDS:
            etype, counter = _ECC_FIELDS[fid]
            g.setdefault("ecc", {})[f"{etype}/{counter}"] = int(value)
        elif fid == c.FI_DEV_ECC_CURRENT:
            g["ecc_enabled"] = bool(value)
        elif fid in _REMAP_FIELDS:
            g.setdefault("remapped", [0, 0, 0, 0])[_REMAP_FIELDS[fid]] = int(value)
        elif fid == c.FI_DEV_NVLINK_LINK_COUNT:
            g["nvlink_count"] = int(value)
        elif fid == c.FI_DEV_GET_GPU_RECOVERY_ACTION:
            g["recovery_action"] = c.RECOVERY_ACTIONS.get(int(value), f"code_{int(value)}")
        elif fid in c.THROTTLE_TIME_FIELDS:  # nanoseconds, as NVML answers
            g.setdefault("throttle_ns", {})[c.THROTTLE_TIME_FIELDS[fid]] = int(value)
    if scoped:
        _scoped(rec, g, d, args, scoped)


def _fabric(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
    g["fabric_capable"] = True
    g["fabric_state"], g["fabric_status"] = v.state, v.status
    if v.health is not None:
        g["fabric_health"] = v.health


def _scoped(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
    errors = {c.FI_DEV_NVLINK_ERROR_DL_REPLAY: 0, c.FI_DEV_NVLINK_ERROR_DL_RECOVERY: 1,
              c.FI_DEV_NVLINK_ERROR_DL_CRC: 2}
    for (fid, link), value in v.items():
        if isinstance(value, NvmlError):
            continue
        if fid == c.FI_DEV_NVLINK_GET_STATE:
            g.setdefault("nvlink_up", {})[link] = value == c.NVLINK_STATE_ACTIVE
        elif fid in errors:
            g.setdefault("nvlink_errors", {}).setdefault(link, {})[errors[fid]] = int(value)
        elif fid == c.FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
            g.setdefault("nvlink_tx_kib", {})[link] = int(value)
        elif fid == c.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
            g.setdefault("nvlink_rx_kib", {})[link] = int(value)


def _ecc(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
    g.setdefault("ecc", {})[f"{args[0]}/{args[1]}"] = v


def _nvlink_errors(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...],
                   v: Any) -> None:
    g.setdefault("nvlink_errors", {}).setdefault(args[0], {})[args[1]] = v


def _procs(graphics: bool) -> Handler:
    def handler(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
        procs = [p for p in g.get("processes", []) if p["graphics"] != graphics]
        procs += [{"pid": p.pid, "used_bytes": p.used_bytes or 0,
                   "gpu_instance": p.gpu_instance, "compute_instance": p.compute_instance,
                   "graphics": graphics} for p in v]
        g["processes"] = procs

    return handler


def _proc_samples(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
    g["process_sm_pct"] = {s.pid: round(s.sm_ratio * 100) for s in v}


def _gpm_sample(gi: int | None) -> Handler:
    def handler(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
        sample = args[-1]
        rec._samples[id(sample)] = (d.index, args[0] if gi == -1 else None)
        if gi is None:
            newest = rec._gpm_polls.get(d.index, (None, None))[1]
            rec._gpm_polls[d.index] = (newest, len(rec.polls))

    return handler


def _mig_device(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
    rec._migs[id(v)] = (d.index, args[0])


def _mig_profiles(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
    # The board's table, as the device profile's mig_profiles.
    rec.system["mig_profiles"] = [dataclasses.asdict(p) for p in v]


def _gpu_instance_profile(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...],
                          v: Any) -> None:
    for inst in g.get("mig", {}).values():
        if inst.get("gpu_instance") == args[0]:
            inst["profile_id"] = v


def _mig_mode(rec: Recorder, g: GpuRec, d: Device, args: tuple[Any, ...], v: Any) -> None:
    g["mig_capable"] = True
    if v:
        g["mig_on"] = True
    else:
        g.pop("mig_on", None)
        g.pop("mig", None)


_HANDLERS: dict[str, Handler] = {
    "nvmlDeviceGetName": _set("name"),
    "nvmlDeviceGetUUID": _set("uuid"),
    "nvmlDeviceGetSerial": _set("serial"),
    "nvmlDeviceGetPciInfo_v3": _set("bus_id"),
    "nvmlDeviceGetVbiosVersion": _set("vbios"),
    "nvmlDeviceGetArchitecture": _set("architecture"),
    "nvmlDeviceGetCudaComputeCapability": _set("cc"),
    "nvmlDeviceGetUtilizationRates": _util,
    "nvmlDeviceGetMemoryInfo_v2": _memory,
    "nvmlDeviceGetTemperature": _set("temp_c", round),
    "nvmlDeviceGetTemperatureThreshold": _keyed("thresholds", round),
    "nvmlDeviceGetFieldValues": _fields,
    "nvmlDeviceGetPowerUsage": _set("power_mw", lambda w: round(w * 1000)),
    "nvmlDeviceGetEnforcedPowerLimit": _set("limit_mw", lambda w: round(w * 1000)),
    "nvmlDeviceGetPowerManagementDefaultLimit": _set("default_limit_mw",
                                                     lambda w: round(w * 1000)),
    "nvmlDeviceGetTotalEnergyConsumption": _set("energy_mj", lambda j: round(j * 1000)),
    "nvmlDeviceGetClockInfo": _keyed("clocks_mhz", _mhz),
    "nvmlDeviceGetMaxClockInfo": _keyed("max_clocks_mhz", _mhz),
    "nvmlDeviceGetApplicationsClock": _keyed("app_clocks_mhz", _mhz),
    "nvmlDeviceGetDefaultApplicationsClock": _keyed("default_app_clocks_mhz", _mhz),
    "nvmlDeviceGetPerformanceState": _set("pstate"),
    "nvmlDeviceGetFanSpeed_v2": _keyed("fans_pct", lambda r: round(r * 100)),
    "nvmlDeviceGetCurrentClocksEventReasons": _set("reasons"),
    "nvmlDeviceGetSupportedClocksEventReasons": _set("supported_reasons"),
    "nvmlDeviceGetCurrPcieLinkGeneration": _set("pcie_gen"),
    "nvmlDeviceGetMaxPcieLinkGeneration": _set("pcie_max_gen"),
    "nvmlDeviceGetCurrPcieLinkWidth": _set("pcie_width"),
    "nvmlDeviceGetMaxPcieLinkWidth": _set("pcie_max_width"),
    "nvmlDeviceGetPcieReplayCounter": _set("pcie_replays"),
    "nvmlDeviceGetEccMode": _set("ecc_enabled", lambda v: bool(v[0])),
    "nvmlDeviceGetTotalEccErrors": _ecc,
    "nvmlDeviceGetRemappedRows": _set("remapped", lambda v: [int(x) for x in v]),
    "nvmlDeviceGetPersistenceMode": _set("persistence"),
    "nvmlDeviceGetGpuFabricInfoV": _fabric,
    "nvmlDeviceGetComputeRunningProcesses_v3": _procs(False),
    "nvmlDeviceGetGraphicsRunningProcesses_v3": _procs(True),
    "nvmlDeviceGetProcessUtilization": _proc_samples,
    "nvmlGpmQueryDeviceSupport": _set("gpm_supported"),
    "nvmlGpmSampleGet": _gpm_sample(None),
    "nvmlGpmMigSampleGet": _gpm_sample(-1),
    "nvmlDeviceGetSupportedEventTypes": _set("event_types"),
    "nvmlDeviceGetNvLinkState": _keyed("nvlink_up"),
    "nvmlDeviceGetNvLinkErrorCounter": _nvlink_errors,
    "nvmlDeviceGetMigMode": _mig_mode,
    "nvmlDeviceGetMigDeviceHandleByIndex": _mig_device,
    "nvmlDeviceGetGpuInstanceProfileInfoV": _mig_profiles,
    "nvmlGpuInstanceGetInfo": _gpu_instance_profile,
}


def record(duration: float, interval: float, out: Path, simulate: str | None) -> int:
    """Poll for ``duration`` and write the recording; the number of polls."""
    from gpu_exporter.commands.one_shot import one_shot_on_simulated_node
    from gpu_exporter.daemon.exporter import Exporter
    from gpu_exporter.settings.config import load
    from gpu_exporter.simulator import load_scenario, recordings

    # NVML is recorded, and the GPU processes as the host sees them; the other
    # host readers and the diagnosis would add nothing.
    settings = load({"poll": {"interval": interval},
                     "collectors": {"host": False, "pcie": False},
                     "diagnosis": {"enabled": False}})
    rec = Recorder()
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], float]
    if simulate:
        scenario = load_scenario(simulate)
        exporter, clock = one_shot_on_simulated_node(settings, scenario)
        sleep, now = clock.advance, clock
        source = f"the simulated scenario {scenario.name}"
    else:
        exporter = Exporter(settings, synchronous=True)
        # Each poll watched as in the daemon: a hung call costs --poll.timeout,
        # not its whole hang, so a recording ends on time.
        exporter.session.call_timeout = settings.poll.timeout
        now = time.monotonic
        source = f"{platform.node()}"
    set_recorder(rec)
    try:
        start = now()
        polls = 0
        while True:
            snap = exporter.poller.poll()
            if polls == 0 and not exporter.session.up:
                # Nothing to record: say so now, not after the whole duration.
                err = exporter.session.last_error
                raise NvmlError(err.code if err else Return.UNKNOWN, "nvmlInitWithFlags")
            polls += 1
            rec.mark(now() - start)
            if snap is not None:
                rec.mark_processes(now() - start, snap.readings.processes or [])
            if now() - start + interval > duration + 1e-9:
                break
            sleep(interval)
    finally:
        set_recorder(None)
        exporter.stop()
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    data = rec.scenario(out.stem, f"Recorded from {source} on {when} by gpu-exporter "
                        f"{__version__}: {polls} polls, {interval:g}s apart.")
    # The format version and poll count first, the checksum last: a file cut
    # short or changed is refused, not replayed (simulator/recordings.py).
    out.write_text(recordings.seal(
        "# Replay with: gpu-exporter --simulate " + out.name + "\n"
        + yaml.safe_dump(recordings.header(polls), sort_keys=False)
        + yaml.safe_dump(data, sort_keys=False, width=100), polls))
    return polls


def main(argv: Sequence[str], parser_cls: type[argparse.ArgumentParser]) -> int:
    p = parser_cls(prog="gpu-exporter record", description="Poll this node's GPUs (or a "
                   "simulated scenario) and write a scenario file that replays what every NVML "
                   "call answered: attach it to a bug report; run it with --simulate FILE.")
    p.add_argument("--duration", default="60s", help="how long to record (default 60s)")
    p.add_argument("--interval", default="1s", help="time between polls (default 1s)")
    p.add_argument("--out", type=Path, default=Path("node.yaml"),
                   help="the file to write (default node.yaml)")
    p.add_argument("--simulate", metavar="NAME|FILE",
                   help="record a simulated scenario instead (on a virtual clock)")
    args = p.parse_args(argv)
    try:
        duration, interval = parse_duration(args.duration), parse_duration(args.interval)
    except ValueError as exc:
        p.error(str(exc))
    if interval <= 0 or duration < 0:
        p.error("--interval must be positive and --duration not negative")
    try:
        polls = record(duration, interval, args.out, args.simulate)
    except ScenarioError as exc:
        raise ConfigError(str(exc)) from None
    except NvmlError as exc:
        raise ConfigError(f"cannot record: NVML is not available: {exc.init_hint()}") from None
    except OSError as exc:
        raise ConfigError(f"cannot write {args.out}: {exc.strerror}") from None
    print(f"recorded {polls} polls to {args.out}; replay with: gpu-exporter --simulate "
          f"{args.out}")
    return 0
