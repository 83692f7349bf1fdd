"""What one simulated GPU reports at a moment, in NVML's units: the state the
world computes (world.py) and the fake libnvidia-ml answers from (libnvml/).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MIB = 1024 * 1024
# Bus ids of an 8-GPU HGX H100 board; further GPUs continue the pattern.
_HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def bus_id(index: int) -> str:
    bus = _HGX_BUSES[index] if index < len(_HGX_BUSES) else 0x100 - 8 + index % 8
    return f"00000000:{bus:02X}:00.0"


@dataclass(frozen=True)
class GpuProcess:
    """A process as NVML lists it on one GPU."""

    pid: int
    used_bytes: int
    gpu_instance: int  # 0xFFFFFFFF when MIG is off
    compute_instance: int
    graphics: bool
    sm_util_pct: int | None  # None: no utilization samples for it


NO_MIG = 0xFFFFFFFF


@dataclass(frozen=True)
class MigState:
    gpu_instance: int
    compute_instance: int
    uuid: str
    memory_total: int
    memory_used: int
    sm_active_s: float  # GPM integral for this instance
    profile_id: int = 0  # the GPU instance's profile ID
    # Its GPM integrals by metric (sm_active, sm_occupancy, tensor_active,
    # dram_active), as the GPU's own.
    gpm: dict[str, float] = field(default_factory=dict)
    placement: tuple[int, int] = (0, 1)  # (first memory slice, slices), as NVML places it


@dataclass
class GpuState:
    """One GPU as NVML would report it now (NVML units)."""

    index: int
    lost: bool
    uuid: str
    serial: str
    bus_id: str
    util_pct: int
    mem_util_pct: int
    mem_total: int
    mem_reserved: int
    mem_used: int
    temp_c: int
    mem_temp_c: int | None
    power_mw: int
    limit_mw: int
    default_limit_mw: int
    energy_mj: int
    clocks_mhz: dict[int, int]
    max_clocks_mhz: dict[int, int]
    app_clocks_mhz: dict[int, int]
    default_app_clocks_mhz: dict[int, int]
    pstate: int
    fans_pct: list[int]
    reasons: int
    supported_reasons: int
    pcie_gen: int
    pcie_width: int
    pcie_max_gen: int
    pcie_max_width: int
    pcie_replays: int
    pcie_tx_bytes: int
    pcie_rx_bytes: int
    ecc_enabled: bool
    ecc: dict[tuple[int, int], int]
    remapped: tuple[int, int, int, int]
    persistence: bool
    errors: dict[str, int]
    field_errors: dict[int, int] = field(default_factory=dict)
    hangs: dict[str, float] = field(default_factory=dict)
    processes: list[GpuProcess] = field(default_factory=list)
    # GPM activity integrals (seconds of activity) and byte counters at t
    gpm: dict[str, float] = field(default_factory=dict)
    # The PCIe byte counters GPM differences: the integrated ones, also in a
    # replay, where pcie_tx/rx_bytes hold what the recording last read.
    gpm_pcie: tuple[int, int] = (0, 0)
    nvlink_up: list[bool] = field(default_factory=list)
    nvlink_errors: list[dict[int, int]] = field(default_factory=list)  # counter id -> count
    # NVLink 5's FEC, per link: "effective" | "symbol" -> its count, and the
    # bit-error rate of each now (empty on older boards and in replays).
    nvlink_fec: list[dict[str, int]] = field(default_factory=list)
    nvlink_ber: list[dict[str, float]] = field(default_factory=list)
    nvlink_tx_kib: list[int] = field(default_factory=list)
    nvlink_rx_kib: list[int] = field(default_factory=list)
    # A C2C board's error counters by field id (empty on other boards).
    c2c_errors: dict[int, int] = field(default_factory=dict)
    mig: list[MigState] = field(default_factory=list)
    # Per-reason clock event time (ns since the driver loaded), for the reasons
    # NVML counts (THROTTLE_TIME_FIELDS) that the board supports.
    throttle_ns: dict[str, int] = field(default_factory=dict)
    t: float = 0.0
    condition: dict[str, Any] = field(default_factory=dict)
    # Fan index -> the NVML error nvmlDeviceGetFanSpeed_v2 answers for it.
    fan_errors: dict[int, int] = field(default_factory=dict)
    # The board's ambient sensor (NVML_THERMAL_TARGET_BOARD), on boards with one.
    board_temp_c: int | None = None


@dataclass(frozen=True)
class XidLogEntry:
    """An Xid as the kernel log has it: the driver prints the process it
    attributes the error to, where it knows one."""

    t: float
    gpu: int
    xid: int
    pid: int | None
    link: int | None = None  # the NVLink an Xid 74 names



# The driver's sample ring buffers, as measured on an H100 80GB HBM3 (driver
# 580.159.04): power every 20 ms, 119 kept (2.4 s); utilization (GPU, memory,
# encoder, decoder) every 200 ms, 71 kept (14 s).
POWER_SAMPLES = (0.02, 119)  # (period in seconds, buffer length)
UTILIZATION_SAMPLES = (0.2, 71)
