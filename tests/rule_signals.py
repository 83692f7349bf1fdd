"""Signals for the diagnosis rules' tests: a healthy busy H100, its process and a
quiet host, each changed by keyword, and the rules run on them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpu_exporter.diagnosis.rules import RULES, Trend, Verdict
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import Row
from gpu_exporter.poll.readings import (
    GpuOwner,
    GpuReading,
    HostSignals,
    PcieKernelView,
    ProcessReading,
    WorkloadSignals,
)
from gpu_exporter.settings.thresholds import DiagnosisConfig

CFG = DiagnosisConfig()
NOW = 1_790_000_000.0
GIB = 1024.0**3
MIB = 1024.0**2


def busy_gpu(**changes: Any) -> GpuReading:
    """A healthy H100 at work: busy, cool, full clocks, a full-width Gen5 link."""
    base = GpuReading(
        index=0, uuid="GPU-0", up=True, utilization=0.95, memory_used_bytes=60 * GIB,
        memory_total_bytes=80 * GIB, temperature_celsius=65.0, slowdown_celsius=89.0,
        power_watts=600.0, power_limit_watts=700.0, power_default_limit_watts=700.0,
        clocks_hz={"sm": 1.98e9}, clocks_max_hz={"sm": 1.98e9},
        clocks_application_hz={"sm": 1.755e9}, clocks_application_default_hz={"sm": 1.755e9},
        throttle_reasons=frozenset(), pcie_generation=5, pcie_generation_max=5, pcie_width=16,
        pcie_width_max=16, pcie_replays=0.0, ecc_uncorrected_volatile=0.0, remap_pending=False,
        remap_failed=False, persistence_mode=True, recovery_action="none",
        fabric_state="completed", fabric_status="SUCCESS", fabric_health="healthy")
    return replace(base, **changes)


def proc(**changes: Any) -> ProcessReading:
    base = ProcessReading(gpu=0, pid=100, comm="python", memory_used_bytes=50 * GIB,
                          sm_utilization=0.9, state="R", cpu_ratio=1.2,
                          run_queue_wait_ratio=0.02, affinity_local=True, cpus_allowed="0-31",
                          wakeups_per_s=200.0)
    return replace(base, **changes)


def quiet_host(**changes: Any) -> HostSignals:
    return replace(HostSignals(iowait_ratio=0.01, io_pressure_some=0.0, cpu_pressure_some=0.02,
                               memory_pressure_full=0.0, swap_bytes_per_s=0.0), **changes)


POD = GpuOwner("ml", "train-a", "trainer")


def workload(**changes: Any) -> WorkloadSignals:
    """A container of a pod with a 4-CPU limit, its own cgroup quiet."""
    base = WorkloadSignals("6f1d3c2a-9b7e-4c1d-8e2f-0a1b2c3d4e5f", "c0ffee", "",
                           cpu_pressure_some=0.01, io_pressure_some=0.0,
                           memory_pressure_full=0.0, cpu_throttled_ratio=0.0,
                           cpu_limit_cores=4.0)
    return replace(base, **changes)


def signals(gpu: GpuReading | None = None, host: HostSignals | None = None,
            procs: list[ProcessReading] | None = None, **extra: Any) -> GpuSignals:
    sig = GpuSignals(0, "GPU-0", gpu or busy_gpu(), quiet_host() if host is None else host,
                     extra.pop("pcie", PcieKernelView(local_cpulist="0-31")))
    sig.processes = [proc()] if procs is None else procs
    sig.processes_known = True
    for key, value in extra.items():
        setattr(sig, key, value)
    return sig


def held(util: float, **gpu: Any) -> GpuReading:
    """A GPU holding 75 % of its memory at ``util``."""
    return busy_gpu(**{"utilization": util, "memory_used_bytes": 60 * GIB, **gpu})


def verdict(row: Row, sig: GpuSignals, cfg: DiagnosisConfig = CFG,
            increases: dict[str, float] | None = None, now: float = NOW) -> Verdict:
    """Row ``row``'s rule on ``sig``; a counter the signals know increased by
    ``increases[name]`` over the window (0 when not given)."""
    inc = increases or {}

    def increase(name: str, value: float | None) -> float | None:
        return None if value is None else inc.get(name, 0.0)

    return RULES[row](sig, cfg, Trend(increase, now))


def judge(row: Row, sig: GpuSignals, cfg: DiagnosisConfig = CFG,
          increases: dict[str, float] | None = None, now: float = NOW) -> bool | None:
    return verdict(row, sig, cfg, increases, now).holds
