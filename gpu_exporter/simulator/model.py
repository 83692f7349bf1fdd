"""The simulator's inputs, validated: device profiles (what a GPU model is and
what it cannot do) and scenarios (a node of such GPUs and a timeline of
conditions on them).

Units in these files are the ones people read on ``nvidia-smi``: MiB, MHz, W,
degrees C and ratios 0-1. The simulator converts them to NVML's units (bytes, mW,
mJ, KB/s, percent) at its C boundary, exactly where a real driver would.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpu_exporter.config import Duration
from gpu_exporter.nvml.constants import REASON_BITS
from gpu_exporter.nvml.errors import Return


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Clocks(_Strict):
    sm: int
    graphics: int
    memory: int


class Thresholds(_Strict):
    shutdown: int
    slowdown: int
    max_operating: int
    memory_max: int = 0


class DeviceProfile(_Strict):
    """One GPU model as NVML describes it."""

    key: str = ""
    name: str
    brand: int = 2
    architecture: int
    compute_capability: tuple[int, int]
    memory_total_mib: int
    memory_reserved_mib: int
    power_default_limit_w: float
    power_min_limit_w: float
    power_max_limit_w: float
    power_idle_w: float
    clocks_max_mhz: Clocks
    clocks_idle_mhz: Clocks
    clocks_application_mhz: Clocks
    temperature_thresholds_c: Thresholds
    temperature_idle_c: float = 32.0
    temperature_load_rise_c: float = 38.0
    memory_temperature_offset_c: float | None = 6.0  # None: no memory sensor
    pcie_max_generation: int
    pcie_max_width: int
    pcie_idle_generation: int = 1
    fans: int = 0
    pstate_idle: int = 0
    vbios_version: str
    serial_base: int = 1650000000000
    supported_clock_reasons: list[str] = Field(default_factory=lambda: list(REASON_BITS))
    # C functions (and field ids) this model answers NOT_SUPPORTED for.
    unsupported_calls: list[str] = Field(default_factory=list)
    unsupported_fields: list[int] = Field(default_factory=list)
    ecc: bool = True

    @field_validator("supported_clock_reasons")
    @classmethod
    def _reasons(cls, v: list[str]) -> list[str]:
        for r in v:
            if r not in REASON_BITS:
                raise ValueError(f"unknown clock reason {r!r}; known: {', '.join(REASON_BITS)}")
        return v


ErrorName = str


def _check_error_name(name: str) -> str:
    if name not in Return.__members__:
        raise ValueError(f"unknown NVML error {name!r}; known: " +
                         ", ".join(n for n in Return.__members__ if n != "SUCCESS"))
    return name


class GpuCondition(_Strict):
    """What is true of a GPU from some moment on. Every field is optional: a
    timeline step changes only what it names; unset values are derived from
    the load and the profile as a real GPU's would be."""

    utilization: float | None = Field(None, ge=0, le=1)
    memory_utilization: float | None = Field(None, ge=0, le=1)
    memory_used_ratio: float | None = Field(None, ge=0, le=1)
    temperature_c: float | None = None
    power_w: float | None = Field(None, ge=0)
    power_limit_w: float | None = Field(None, gt=0)
    throttle_reasons: list[str] | None = None
    sm_clock_mhz: int | None = Field(None, gt=0)
    application_sm_clock_mhz: int | None = Field(None, gt=0)
    pcie_link_generation: int | None = Field(None, ge=1, le=6)
    pcie_link_width: int | None = Field(None, ge=1, le=32)
    pcie_replays_per_s: float | None = Field(None, ge=0)
    pcie_tx_bytes_per_s: float | None = Field(None, ge=0)
    pcie_rx_bytes_per_s: float | None = Field(None, ge=0)
    ecc_enabled: bool | None = None
    ecc_corrected_volatile: int | None = Field(None, ge=0)
    ecc_uncorrected_volatile: int | None = Field(None, ge=0)
    remapped_rows_correctable: int | None = Field(None, ge=0)
    remapped_rows_uncorrectable: int | None = Field(None, ge=0)
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    persistence_mode: bool | None = None
    fan_ratio: float | None = Field(None, ge=0, le=2)
    lost: bool | None = None
    # Fault injection: C function name -> NVML error it returns from now on.
    errors: dict[str, ErrorName] | None = None

    @field_validator("throttle_reasons")
    @classmethod
    def _reasons(cls, v: list[str] | None) -> list[str] | None:
        for r in v or []:
            if r not in REASON_BITS:
                raise ValueError(f"unknown throttle reason {r!r}; known: {', '.join(REASON_BITS)}")
        return v

    @field_validator("errors")
    @classmethod
    def _errors(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for name in (v or {}).values():
            _check_error_name(name)
        return v


GpuSelector = Literal["all"] | list[int]


class Step(_Strict):
    at: Duration = Field(0.0, ge=0)
    gpus: GpuSelector = "all"
    set: GpuCondition


class Node(_Strict):
    gpus: int = Field(8, ge=0, le=64)
    profile: str = "h100-sxm5-80gb"
    driver_version: str = "580.159.04"
    cuda_driver_version: int = 13000
    # NVML as a whole: "ok", or the error nvmlInit returns ("library_missing"
    # makes the library itself absent).
    nvml: Literal["ok", "library_missing", "driver_not_loaded", "no_permission"] = "ok"


class Scenario(_Strict):
    name: str
    description: str = ""
    node: Node = Node()
    # Starting condition of every GPU, then per-GPU overrides, then the timeline.
    state: GpuCondition = GpuCondition()
    gpus: dict[int, GpuCondition] = Field(default_factory=dict)
    timeline: list[Step] = Field(default_factory=list)
    noise: bool = True
    # Free-form sections later features read (host, processes, expect ...).
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _indices(self) -> Scenario:
        n = self.node.gpus
        for i in self.gpus:
            if not 0 <= i < n:
                raise ValueError(f"gpus: index {i} is outside 0..{n - 1}")
        for k, step in enumerate(self.timeline):
            if step.gpus != "all":
                for i in step.gpus:
                    if not 0 <= i < n:
                        raise ValueError(f"timeline[{k}].gpus: index {i} is outside 0..{n - 1}")
        return self
