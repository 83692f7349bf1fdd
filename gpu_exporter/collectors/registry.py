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


def _device(rt: Runtime) -> Collector:
    from gpu_exporter.collectors.device import DeviceCollector

    return DeviceCollector(rt.session)


COLLECTORS: dict[str, CollectorInfo] = {
    info.name: info for info in (
        CollectorInfo("device", "NVML device metrics: utilization, memory, power, clocks, "
                      "throttle reasons, PCIe, ECC", True, _device),
    )
}


def build(rt: Runtime) -> list[Collector]:
    return [info.factory(rt) for info in COLLECTORS.values()
            if rt.settings.collector_enabled(info.name, info.default)]
