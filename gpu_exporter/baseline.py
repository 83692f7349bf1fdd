"""The node baseline: what should not change on a GPU node (GPU count and UUIDs,
PCIe generation and width — maximum and as trained under load — NUMA placement,
driver and VBIOS versions, power limits, application clocks, persistence and
ECC modes), captured once and compared on every poll.

``gpu-exporter baseline capture`` writes it; ``baseline diff`` prints each drift
and exits 1 when anything drifted; the daemon with ``--baseline.file`` exports
``gpu_baseline_drift{gpu, uuid, field}``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from gpu_exporter import __version__
from gpu_exporter.catalogs.diagnosis import BASELINE_DRIFT
from gpu_exporter.poll.readings import GpuReading, PcieKernelView, PollReadings
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import Slot, Snapshot, SnapshotBuilder
from gpu_exporter.poll.stage import Derivation
from gpu_exporter.settings import safefile
from gpu_exporter.settings.config import ConfigError, Settings
from gpu_exporter.settings.sections import Section, ValidationError, setting

log = logging.getLogger(__name__)

FORMAT = "gpu-exporter-baseline/1"
# A GPU counts as "under load" for the trained-link fields at this utilization.
LOADED = 0.5
# Fields compared only while the GPU is under load: idle links downshift.
UNDER_LOAD = ("pcie_generation_under_load", "pcie_width_under_load")
FIELDS = ("present", "uuid", "pci_bus_id", "pcie_generation_max", "pcie_width_max",
          *UNDER_LOAD, "numa_node", "local_cpulist", "driver_version", "vbios_version",
          "power_limit_watts", "power_default_limit_watts", "application_sm_clock_hertz",
          "application_memory_clock_hertz", "persistence_mode", "ecc_enabled")

# The fields NVML reports as whole numbers of a smaller unit than the one
# recorded, and half that unit: power limits are unsigned ints of milliwatts
# (nvmlDeviceGetEnforcedPowerLimit, nvmlDeviceGetPowerManagementDefaultLimit),
# application clocks unsigned ints of MHz (nvmlDeviceGetApplicationsClock). Two
# readings closer than that are one reading rounded differently on its way
# through watts, hertz and JSON; one step of NVML's apart is always drift.
RESOLUTION = {"power_limit_watts": 0.001 / 2, "power_default_limit_watts": 0.001 / 2,
              "application_sm_clock_hertz": 1e6 / 2, "application_memory_clock_hertz": 1e6 / 2}

# One GPU as the baseline records it: field name -> value (None: not known).
Fields = dict[str, Any]


def gpu_fields(r: GpuReading, view: PcieKernelView | None) -> Fields:
    """What the baseline records of one GPU in one poll (None: not known)."""
    loaded = r.utilization is not None and r.utilization >= LOADED
    return {
        "present": True,
        "uuid": r.uuid,
        "pci_bus_id": r.pci_bus_id or None,
        "pcie_generation_max": r.pcie_generation_max,
        "pcie_width_max": r.pcie_width_max,
        "pcie_generation_under_load": r.pcie_generation if loaded else None,
        "pcie_width_under_load": r.pcie_width if loaded else None,
        "numa_node": view.numa_node if view else None,
        "local_cpulist": view.local_cpulist if view else None,
        "driver_version": r.driver_version or None,
        "vbios_version": r.vbios_version or None,
        "power_limit_watts": r.power_limit_watts,
        "power_default_limit_watts": r.power_default_limit_watts,
        "application_sm_clock_hertz": r.clocks_application_hz.get("sm"),
        "application_memory_clock_hertz": r.clocks_application_hz.get("memory"),
        "persistence_mode": r.persistence_mode,
        "ecc_enabled": r.ecc_enabled,
    }


def readings_fields(readings: PollReadings) -> dict[int, Fields]:
    """The baseline's fields of every GPU that is up in one poll's readings."""
    views = readings.pcie_view or {}
    return {i: gpu_fields(r, views.get(i)) for i, r in (readings.gpus or {}).items() if r.up}


def capture(snapshots: Iterable[Snapshot]) -> dict[str, Any]:
    """Merge several polls: the newest value of each field, and for the trained
    link the best seen under load."""
    gpus: dict[int, Fields] = {}
    for snap in snapshots:
        for index, fields in readings_fields(snap.readings).items():
            merged = gpus.setdefault(index, {})
            for key, value in fields.items():
                if value is None:
                    continue
                if key in UNDER_LOAD and merged.get(key) is not None:
                    value = max(value, merged[key])
                merged[key] = value
    return {"format": FORMAT, "exporter_version": __version__,
            "gpu_count": len(gpus),
            "gpus": [{"index": i, **{k: gpus[i].get(k) for k in FIELDS}} for i in sorted(gpus)]}


@dataclass(frozen=True)
class Drift:
    gpu: int
    uuid: str
    field: str
    expected: Any
    found: Any

    def as_dict(self) -> dict[str, Any]:
        return {"gpu": str(self.gpu), "uuid": self.uuid, "field": self.field,
                "expected": self.expected, "found": self.found}


# The drifts found this poll, published in the snapshot for /diagnosis.
DRIFTS: Slot[tuple[Drift, ...]] = Slot("baseline_drifts")


def compare(baseline: Mapping[str, Any], current: Mapping[int, Fields]) -> list[Drift]:
    """Drifts of the node from its baseline; a field not known now is no drift."""
    drifts = []
    for entry in baseline["gpus"]:
        index, uuid = int(entry["index"]), str(entry.get("uuid") or "")
        now = current.get(index)
        if now is None:
            drifts.append(Drift(index, uuid, "present", True, False))
            continue
        for key in FIELDS:
            want, got = entry.get(key), now.get(key)
            if want is None or got is None or key == "present":
                continue
            tolerance = RESOLUTION.get(key)
            if tolerance is not None:
                if abs(float(want) - float(got)) < tolerance:
                    continue
            elif want == got or (key == "pci_bus_id" and str(want).lower() == str(got).lower()):
                continue  # bus ids: a baseline from before the exporter kept NVML's case
            drifts.append(Drift(index, uuid, key, want, got))
    known = {int(e["index"]) for e in baseline["gpus"]}
    for index in sorted(set(current) - known):
        drifts.append(Drift(index, str(current[index].get("uuid") or ""), "present", False,
                            True))
    return drifts


class _BaselineGpu(Section):
    """One GPU as ``capture`` writes it (a field not known then is null)."""

    strict = True

    index: int = setting(ge=0, lt=1024)
    present: bool | None = None
    uuid: str | None = setting(None, max_length=256)
    pci_bus_id: str | None = setting(None, max_length=64)
    pcie_generation_max: int | None = setting(None, ge=0, le=16)
    pcie_width_max: int | None = setting(None, ge=0, le=64)
    pcie_generation_under_load: int | None = setting(None, ge=0, le=16)
    pcie_width_under_load: int | None = setting(None, ge=0, le=64)
    numa_node: int | None = setting(None, ge=-1, le=4096)
    local_cpulist: str | None = setting(None, max_length=4096)
    driver_version: str | None = setting(None, max_length=256)
    vbios_version: str | None = setting(None, max_length=256)
    power_limit_watts: float | None = setting(None, ge=0)
    power_default_limit_watts: float | None = setting(None, ge=0)
    application_sm_clock_hertz: float | None = setting(None, ge=0)
    application_memory_clock_hertz: float | None = setting(None, ge=0)
    persistence_mode: bool | None = None
    ecc_enabled: bool | None = None


class _Baseline(Section):
    strict = True

    format: str
    exporter_version: str = setting("", max_length=256)
    gpu_count: int = setting(0, ge=0, lt=1024)
    gpus: list[_BaselineGpu] = setting(max_length=1024)


def load(path: Path) -> dict[str, Any]:
    try:
        data = safefile.load_json(path, safefile.BASELINE_FILE)
    except safefile.FileRefused as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"baseline file {path}: not a gpu-exporter baseline (write one with "
                          "`gpu-exporter baseline capture`)")
    try:
        baseline = _Baseline.model_validate(data)
    except ValidationError as exc:
        loc, problem = safefile.validation_problem(exc, unknown="unknown field")
        raise ConfigError(f"baseline file {path}: {safefile.dotted(loc)}: {problem}") from None
    indices = [g.index for g in baseline.gpus]
    if len(set(indices)) != len(indices):
        raise ConfigError(f"baseline file {path}: gpus: a GPU index appears twice")
    return baseline.model_dump()


class BaselineCheck(Derivation):
    """Compares every poll with the baseline file and exports the drifts; on
    exactly when ``--baseline.file`` is set."""

    name = "baseline"
    description = "drift from the node baseline (--baseline.file)"
    starts_on_reload = False  # the baseline file is read at start

    def __init__(self, path: Path) -> None:
        self.path = path
        self.baseline = load(path)

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        assert rt.settings.baseline_file is not None  # wanted() says so
        return cls(rt.settings.baseline_file)

    @classmethod
    def wanted(cls, settings: Settings) -> bool:
        return settings.baseline_file is not None

    def collect(self, out: SnapshotBuilder) -> None:
        if out.readings.gpus is None:
            return  # the device reader is off: nothing to compare, and no GPU is missing
        current = readings_fields(out.readings)
        lost = {i for i, r in (out.readings.gpus or {}).items() if not r.up}
        drifts = [d for d in compare(self.baseline, current)
                  # A lost GPU is the gpu_lost finding's business, not a drift.
                  if not (d.field == "present" and d.gpu in lost)]
        out.publish(DRIFTS, tuple(drifts))
        on = {(d.gpu, d.field) for d in drifts}
        for entry in self.baseline["gpus"]:
            index = int(entry["index"])
            uuid = str(entry.get("uuid") or "")
            for key in FIELDS:
                out.add(BASELINE_DRIFT, (index, key) in on, gpu=str(index), uuid=uuid,
                        field=key)
