"""The collectors the exporter knows, with their default state. Each can be
switched with ``--collector.<name>`` / ``--no-collector.<name>``, the YAML
``collectors:`` mapping, or ``GPU_EXPORTER_COLLECTORS__<NAME>``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpu_exporter.collectors.base import Collector
from gpu_exporter.runtime import Runtime


@dataclass(frozen=True)
class CollectorInfo:
    name: str
    description: str
    default: bool
    factory: Callable[[Runtime], Collector]
    needs_baseline: bool = False  # runs only when a baseline file is configured


def _device(rt: Runtime) -> Collector:
    from gpu_exporter.collectors.device import DeviceCollector

    return DeviceCollector(rt.session)


def _mig(rt: Runtime) -> Collector:
    from gpu_exporter.collectors.mig import MigCollector

    return MigCollector(rt.session)


def _gpm(rt: Runtime) -> Collector:
    from gpu_exporter.collectors.gpm import GpmCollector

    return GpmCollector(rt.session, rt.monotonic)


def _samples(rt: Runtime) -> Collector:
    from gpu_exporter.collectors.samples import SamplesCollector

    return SamplesCollector(rt.session)


def _nvlink(rt: Runtime) -> Collector:
    from gpu_exporter.collectors.nvlink import NvlinkCollector

    return NvlinkCollector(rt.session)


def _xid(rt: Runtime) -> Collector:
    from gpu_exporter.collectors.xid import XidCollector

    return XidCollector(rt.session, rt.wall_clock, rt.synchronous)


def _processes(rt: Runtime) -> Collector:
    from gpu_exporter.collectors.processes import ProcessesCollector

    s = rt.settings
    return ProcessesCollector(rt.session, s.path.procfs, s.path.sysfs, s.processes.max_per_gpu,
                              rt.monotonic)


def _host(rt: Runtime) -> Collector:
    from gpu_exporter.collectors.host import HostCollector

    return HostCollector(rt.settings.path.procfs, rt.monotonic)


def _pcie(rt: Runtime) -> Collector:
    from gpu_exporter.collectors.pcie import PcieCollector
    from gpu_exporter.collectors.udev import open_source

    sysfs = rt.settings.path.sysfs
    # A simulated node has no udev behind its /sys.
    return PcieCollector(rt.session, sysfs, open_source(sysfs) if rt.simulation is None else None)


def _diagnosis(rt: Runtime) -> Collector:
    from gpu_exporter.diagnosis.engine import DiagnosisCollector

    return DiagnosisCollector(rt.settings.diagnosis, rt.monotonic, rt.wall_clock)


def _baseline(rt: Runtime) -> Collector:
    from gpu_exporter.baseline import BaselineCollector

    assert rt.settings.baseline_file is not None
    return BaselineCollector(rt.settings.baseline_file)


# In run order: later collectors may read what earlier ones put in the
# snapshot's facts (GPM reads the MIG instances; diagnosis reads everything).
COLLECTORS: dict[str, CollectorInfo] = {
    info.name: info for info in (
        CollectorInfo("device", "NVML device metrics: utilization, memory, power, clocks, "
                      "throttle reasons, PCIe, ECC", True, _device),
        CollectorInfo("mig", "MIG mode and per-instance identity and memory", True, _mig),
        CollectorInfo("gpm", "GPM SM, tensor and memory activity (Hopper and newer)", True,
                      _gpm),
        CollectorInfo("samples", "min/mean/max of NVML's sub-second utilization, power and "
                      "SM clock samples", True, _samples),
        CollectorInfo("nvlink", "NVLink per-link state, errors and throughput", True, _nvlink),
        CollectorInfo("xid", "Xid errors and ECC/power events from NVML's event API", True,
                      _xid),
        CollectorInfo("processes", "GPU processes (NVML) joined with /proc: memory, SM, CPU, "
                      "run-queue wait, affinity, container", True, _processes),
        CollectorInfo("host", "host CPU iowait/steal, pressure stalls, memory, swap, load, "
                      "disks, network", True, _host),
        CollectorInfo("pcie", "PCIe links (GPU and upstream port), AER errors and NUMA from "
                      "sysfs; udev remove events", True, _pcie),
        CollectorInfo("diagnosis", "the symptom -> cause table evaluated per GPU "
                      "(gpu_diagnosis_active)", True, _diagnosis),
        CollectorInfo("baseline", "drift from the node baseline (--baseline.file)", True,
                      _baseline, needs_baseline=True),
    )
}


def build(rt: Runtime) -> list[Collector]:
    return [info.factory(rt) for info in COLLECTORS.values()
            if rt.settings.collector_enabled(info.name, info.default)
            and (rt.settings.baseline_file is not None or not info.needs_baseline)]
