"""Plain per-poll readings in base units, shared by the collectors that produce
them and the parts that reason over them (diagnosis, baseline, /diagnosis).

``None`` always means "not known this poll" (unsupported, failed, absent), never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class GpuReading:
    index: int
    uuid: str
    up: bool
    name: str = ""
    pci_bus_id: str = ""
    driver_version: str = ""
    vbios_version: str = ""
    utilization: float | None = None
    memory_utilization: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    temperature_celsius: float | None = None
    slowdown_celsius: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    power_default_limit_watts: float | None = None
    clocks_hz: dict[str, float] = field(default_factory=dict)
    clocks_max_hz: dict[str, float] = field(default_factory=dict)
    clocks_application_hz: dict[str, float] = field(default_factory=dict)
    throttle_reasons: frozenset[str] | None = None
    pcie_generation: int | None = None
    pcie_generation_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: float | None = None
    ecc_enabled: bool | None = None
    ecc_uncorrected_volatile: float | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    persistence_mode: bool | None = None
