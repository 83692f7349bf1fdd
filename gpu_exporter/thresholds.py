"""Thresholds and windows of the diagnosis rules, with the defaults an
experienced SRE would start from. Set under ``diagnosis:`` in the config file
(e.g. ``diagnosis: {window: 1m, iowait_high: 0.3}``)."""

from __future__ import annotations

from typing import Self

from annotated_types import Le
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpu_exporter.config_types import Duration
from gpu_exporter.xids import XidTier, codes


class DiagnosisConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description=(
        "Judge the symptom -> cause table every poll (gpu_diagnosis_active, /diagnosis and "
        "the node page's findings); off, the exporter only reads."))
    # A condition must hold this long before its row turns on ...
    window: Duration = Field(30.0, ge=0)
    # ... and stay clear this long before it turns off (no flapping).
    clear_after: Duration = Field(30.0, ge=0)
    # Share of polls in the window the condition must hold (tolerates one odd poll).
    hold_ratio: float = Field(0.9, gt=0, le=1)

    memory_held_ratio: float = Field(0.5, gt=0, le=1)
    idle_utilization: float = Field(0.10, ge=0, le=1)
    busy_utilization: float = Field(0.50, ge=0, le=1)
    iowait_high: float = Field(0.20, ge=0, le=1)
    io_pressure_high: float = Field(0.20, ge=0, le=1)
    cpu_pressure_high: float = Field(0.30, ge=0, le=1)
    run_queue_wait_high: float = Field(0.30, ge=0)  # seconds waiting per second
    swap_bytes_per_s: float = Field(1024 * 1024, ge=0)
    memory_pressure_full: float = Field(0.0, ge=0, le=1)
    stalled_cpu_ratio: float = Field(0.05, ge=0)  # CPUs' worth of time
    # Share of its CPU-limit periods in which a workload was throttled.
    cpu_throttled_high: float = Field(0.25, ge=0, le=1)
    burst_low: float = Field(0.10, ge=0, le=1)
    burst_high: float = Field(0.90, ge=0, le=1)
    thermal_margin_celsius: float = Field(3.0, ge=0)
    clock_below_max_ratio: float = Field(0.95, gt=0, le=1)
    pcie_errors_per_window: float = Field(1.0, ge=0)
    memory_near_full_ratio: float = Field(0.95, gt=0, le=1)
    inflated_utilization: float = Field(0.80, ge=0, le=1)
    inflated_sm_active: float = Field(0.30, ge=0, le=1)
    # Xids by who must act (xids.py is the table these default to): a
    # site may move a code to another tier; a code in no list is informational.
    hardware_xids: tuple[int, ...] = codes("hardware")
    application_xids: tuple[int, ...] = codes("application")
    informational_xids: tuple[int, ...] = codes("informational")
    xid_hold: Duration = Field(900.0, ge=0)  # an Xid keeps its row on this long
    expect_persistence: bool = True
    # A cause explains another row's signals (swapping -> iowait) only while its
    # own condition held within this long: short dips keep the explanation,
    # a cause that has stopped no longer explains what persists.
    explained_within: Duration = Field(10.0, ge=0)

    @model_validator(mode="after")
    def _one_tier_per_xid(self) -> Self:
        seen: dict[int, str] = {}
        for tier in ("hardware", "application", "informational"):
            for code in getattr(self, f"{tier}_xids"):
                if code in seen and seen[code] != tier:
                    raise ValueError(f"Xid {code} is in both {seen[code]}_xids and "
                                     f"{tier}_xids")
                seen[code] = tier
        return self

    def xid_tier(self, code: int) -> XidTier:
        """The tier this configuration puts ``code`` in (unknown: informational)."""
        if code in self.hardware_xids:
            return "hardware"
        if code in self.application_xids:
            return "application"
        return "informational"

    def prose(self) -> dict[str, str]:
        """Every setting as the table's prose quotes it: ratios as percent,
        durations in s/min, the Xid list spelled out."""
        out: dict[str, str] = {}
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if name in _DURATIONS:
                out[name] = _duration(float(value))
            elif name.endswith("_xids"):
                out[name] = ", ".join(str(x) for x in value)
            elif name == "swap_bytes_per_s":
                out[name] = f"{value / 2**20:g} MiB/s"
            elif name.endswith("_celsius"):
                out[name] = f"{value:g} °C"
            elif name == "run_queue_wait_high":
                out[name] = f"{value:g} s per second"
            elif name == "stalled_cpu_ratio":
                out[name] = f"{value * 100:g} %"
            elif isinstance(value, bool):
                out[name] = "yes" if value else "no"
            elif any(isinstance(m, Le) and m.le == 1 for m in info.metadata):
                out[name] = f"{value * 100:g} %"
            else:
                out[name] = f"{value:g}"
        return out


_DURATIONS = frozenset({"window", "clear_after", "xid_hold", "explained_within"})


def _duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
