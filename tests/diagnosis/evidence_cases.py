"""What the rule-evidence tests feed the rules: the signals a case is built
of, the evidence every held-memory row shows, and a case's shape."""

from __future__ import annotations

from gpu_exporter.diagnosis.rules import Evidence, Verdict
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import Row
from gpu_exporter.poll.readings import (
    GpuReading,
    ProcessReading,
)
from gpu_exporter.settings.thresholds import DiagnosisConfig
from tests.rule_signals import (
    CFG,
    GIB,
    MIB,
    signals,
    workload,
)

IDLE, UNDERFED, BUSY = 0.03, 0.15, 0.95
TOTAL = 80 * GIB  # busy_gpu's memory
SM_EV: Evidence = {"sm_clock_hertz": 1.98e9, "sm_clock_max_hertz": 1.98e9}
TEMP_EV: Evidence = {"temperature_celsius": 65.0, "slowdown_threshold_celsius": 89.0}
EPS = 1e-6  # "just" inside or outside a threshold
CAPPED = {"throttle_reasons": frozenset({"sw_power_cap"}), "power_limit_watts": 450.0,
          "clocks_hz": {"sm": 1.6e9}}
# A container at its 16 GiB memory limit, hitting it and reclaiming its cache.
# A container whose reads run at its io.max limit on the NVMe, stalled on I/O.
IO_AT_LIMIT = workload(io_limited=True, io_limit_used_ratio=0.97654, io_limit_device="259:0",
                       io_pressure_some=0.6)
AT_LIMIT = workload(memory_limit_bytes=16 * GIB, memory_used_bytes=15.9 * GIB,
                    memory_limit_hits_per_s=40.0, memory_reclaimed_bytes_per_s=200 * MIB,
                    memory_pressure_some=0.5)


def held_ev(util: float, used: float = 0.75) -> Evidence:
    """What the held-memory rows show of the GPU (busy_gpu holds 60 of 80 GiB)."""
    return {"gpu_memory_used_ratio": used, "gpu_utilization_ratio": util}


def hostless(gpu: GpuReading, procs: list[ProcessReading] | None = None) -> GpuSignals:
    """Signals with no host view at all (the host collector is off)."""
    sig = signals(gpu, procs=procs)
    sig.host = None
    return sig


def with_cfg(**changes: float) -> DiagnosisConfig:
    return CFG.model_copy(update=changes)




# (row, signals, config, expected verdict, why)
Case = tuple[Row, GpuSignals, DiagnosisConfig, Verdict, str]
