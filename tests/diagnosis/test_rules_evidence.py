"""What each diagnosis rule tells the on-call engineer, signals in and the whole
verdict out: whether the row holds and every piece of evidence it shows, keyed
by name with the unit as suffix and rounded as people read it (``/diagnosis``,
``gpu-exporter diagnose`` and alert annotations print these). Thresholds are
probed on both sides of the configured value, every input a rule reads is
shown to change its answer, and a rule without its input does not judge."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_exporter.diagnosis import rules
from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.rules import RULES, Trend, Verdict, rule
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.poll.readings import (
    HostSignals,
    PcieKernelView,
)
from gpu_exporter.settings.thresholds import DiagnosisConfig
from tests.diagnosis.evidence_cases import (
    AT_LIMIT,
    CAPPED,
    IDLE,
    IO_AT_LIMIT,
    TOTAL,
    hostless,
    with_cfg,
)
from tests.diagnosis.evidence_cases_gpu import GPU_CASES
from tests.diagnosis.evidence_cases_host import HOST_CASES
from tests.rule_signals import (
    CFG,
    MIB,
    NOW,
    busy_gpu,
    held,
    proc,
    quiet_host,
    signals,
    verdict,
    workload,
)

CASES = HOST_CASES + GPU_CASES



@pytest.mark.parametrize(("row", "sig", "cfg", "expected", "why"), CASES,
                         ids=[f"{c[0].anchor}:{c[4]}" for c in CASES])
def test_rule_verdict_and_evidence(row: Row, sig: GpuSignals, cfg: DiagnosisConfig,
                                   expected: Verdict, why: str) -> None:
    got = verdict(row, sig, cfg)
    assert got.holds is expected.holds, why
    assert got.evidence == expected.evidence, why
    # Evidence types as exporters and JSON print them: numbers or words, never None.
    assert all(isinstance(v, (int, float, str)) and not isinstance(v, bool)
               for v in got.evidence.values()), got.evidence


def test_every_row_has_evidence_cases() -> None:
    # The counter rules' cases are below, and in tests/diagnosis/test_link_rules.py; the
    # came-back row reads the fault memory, its cases are in
    # tests/diagnosis/test_fault_memory.py; the rows judged on the window's readings
    # have theirs in tests/diagnosis/test_workload_rules.py, the network rows' in
    # tests/diagnosis/test_network_rules.py.
    assert {c[0] for c in CASES} | {t.PCIE_ERRORS, t.NVLINK_ERRORS, t.C2C_ERRORS,
                                    t.FAULT_CAME_BACK, t.MEMORY_FILLING,
                                    t.HOST_CPU_THERMAL, t.HOST_MEMORY_GROWTH,
                                    t.NIC_ACROSS_SOCKETS,
                                    t.RDMA_PORT_DEGRADED, t.RDMA_ERRORS} == set(ROWS)


# --- counters over the window ------------------------------------------------------------
PCIE_CASES: list[tuple[GpuSignals, dict[str, float], Verdict, str]] = [
    (signals(busy_gpu(pcie_replays=12.0), pcie=PcieKernelView(aer_correctable=3.0)),
     {"pcie_replays": 2.0, "aer_correctable": 3.0},
     Verdict(True, {"pcie_replays_in_window": 2.0, "aer_correctable_errors_in_window": 3.0}),
     "AER errors at the threshold, replays below: the larger decides"),
    (signals(busy_gpu(pcie_replays=12.0), pcie=PcieKernelView(aer_correctable=3.0)),
     {"pcie_replays": 3.0, "aer_correctable": 0.0},
     Verdict(True, {"pcie_replays_in_window": 3.0, "aer_correctable_errors_in_window": 0.0}),
     "replays at the threshold"),
    (signals(busy_gpu(pcie_replays=12.0), pcie=PcieKernelView(aer_correctable=3.0)),
     {"pcie_replays": 2.0, "aer_correctable": 2.0},
     Verdict(False, {"pcie_replays_in_window": 2.0, "aer_correctable_errors_in_window": 2.0}),
     "both a step below the threshold"),
    (signals(busy_gpu(pcie_replays=None), pcie=PcieKernelView(aer_correctable=3.0)),
     {"aer_correctable": 3.0}, Verdict(True, {"aer_correctable_errors_in_window": 3.0}),
     "no NVML replay counter: AER alone"),
    (signals(busy_gpu(pcie_replays=12.0), pcie=None), {"pcie_replays": 5.0},
     Verdict(True, {"pcie_replays_in_window": 5.0}), "no kernel view: replays alone"),
    (signals(busy_gpu(pcie_replays=None), pcie=None), {}, Verdict(None),
     "no counter at all: not judged"),
]


@pytest.mark.parametrize(("sig", "increases", "expected", "why"), PCIE_CASES,
                         ids=[c[3] for c in PCIE_CASES])
def test_pcie_errors_verdict_and_evidence(sig: GpuSignals, increases: dict[str, float],
                                          expected: Verdict, why: str) -> None:
    got = verdict(t.PCIE_ERRORS, sig, with_cfg(pcie_errors_per_window=3.0), increases)
    assert got.holds is expected.holds, why
    assert got.evidence == expected.evidence, why


def test_the_xid_hold_is_measured_from_now() -> None:
    sig = signals(xids=[(NOW - 60, 79, None)])
    assert verdict(t.XID, sig, now=NOW).holds is True
    assert verdict(t.XID, sig, now=NOW + CFG.xid_hold).holds is False


def test_the_configured_tiers_decide_who_is_told() -> None:
    sig = signals(xids=[(NOW - 60, 13, None)])
    assert verdict(t.XID, sig).holds is False
    assert verdict(t.XID_APPLICATION, sig).holds is True
    # A site that wants Xid 13 paged moves it to the hardware tier.
    moved = DiagnosisConfig(hardware_xids=(*CFG.hardware_xids, 13),
                            application_xids=tuple(x for x in CFG.application_xids if x != 13))
    assert verdict(t.XID, sig, moved).holds is True
    assert verdict(t.XID_APPLICATION, sig, moved).holds is False
    # Taken out of every list, it is informational.
    dropped = DiagnosisConfig(application_xids=(31,))
    assert verdict(t.XID_INFORMATIONAL, sig, dropped).holds is True


def test_an_xid_in_two_tiers_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="Xid 13 is in both hardware_xids and application_xids"):
        DiagnosisConfig(hardware_xids=(13, 79))


# --- every threshold the rules read comes from the configuration -------------------------
# (row, signals, the field, a value that turns the verdict around)
CONFIG_CASES: list[tuple[Row, GpuSignals, str, float]] = [
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.5), procs=[]),
     "memory_held_ratio", 0.8),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(0.05), quiet_host(iowait_ratio=0.5)),
     "idle_utilization", 0.04),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(0.4), quiet_host(iowait_ratio=0.5)),
     "busy_utilization", 0.3),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.5)),
     "iowait_high", 0.6),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), HostSignals(io_pressure_some=0.5)),
     "io_pressure_high", 0.6),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.5),
                                    [proc(run_queue_wait_ratio=None)]), "cpu_pressure_high", 0.6),
    (t.IDLE_CPU_CONTENTION, hostless(held(IDLE), [proc(run_queue_wait_ratio=0.5)]),
     "run_queue_wait_high", 0.6),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), HostSignals(swap_bytes_per_s=2 * MIB)),
     "swap_bytes_per_s", 4 * MIB),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), HostSignals(swap_bytes_per_s=2 * MIB),
                                   workloads=(workload(memory_pressure_some=0.05),)),
     "memory_pressure_full", 0.1),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[proc(state="S", cpu_ratio=0.04,
                                                             wakeups_per_s=0.0)]),
     "stalled_cpu_ratio", 0.01),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[proc(state="S", cpu_ratio=0.0,
                                                             wakeups_per_s=2.0)]),
     "stalled_wakeups_per_s", 1.0),
    (t.IDLE_MEMORY_LIMIT_RECLAIM, signals(held(IDLE), workloads=(AT_LIMIT,)),
     "memory_limit_used_ratio", 0.999),
    (t.IDLE_MEMORY_LIMIT_RECLAIM, signals(held(IDLE), workloads=(
        replace(AT_LIMIT, memory_limit_hits_per_s=0.0),)), "reclaim_bytes_per_s", 400 * MIB),
    (t.IDLE_CPU_STEAL, signals(held(IDLE), quiet_host(steal_ratio=0.2)), "steal_high", 0.3),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(IO_AT_LIMIT,)),
     "io_limit_used_ratio", 0.99),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(IO_AT_LIMIT,)),
     "io_pressure_high", 0.7),
    (t.POWER_CAP, signals(busy_gpu(**CAPPED, power_watts=420.0)), "power_cap_draw_ratio", 0.95),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(cpu_throttled_ratio=0.5),)), "cpu_throttled_high", 0.6),
    (t.FAN_STOPPED, signals(busy_gpu(fan_speeds={0: 0.005, 1: 0.5})), "fan_stopped_ratio",
     0.001),
    (t.FAN_STOPPED, signals(busy_gpu(fan_speeds={0: 0.0, 1: 0.15}, temperature_celsius=40.0)),
     "fan_spinning_ratio", 0.2),
    (t.FAN_STOPPED, signals(busy_gpu(fan_speeds={0: 0.0}, temperature_celsius=65.0)),
     "fan_warm_margin_celsius", 20.0),
    (t.BURSTY_INPUT, signals(util_samples=(0.05, 0.5, 0.95)), "burst_low", 0.01),
    (t.BURSTY_INPUT, signals(util_samples=(0.05, 0.5, 0.95)), "burst_high", 0.99),
    (t.POWER_CAP, signals(busy_gpu(**CAPPED)), "clock_below_max_ratio", 0.5),
    (t.APPLICATION_CLOCKS, signals(busy_gpu(clocks_application_hz={"sm": 1.6e9})),
     "clock_below_max_ratio", 0.9),
    (t.MEMORY_NEAR_FULL, signals(busy_gpu(memory_used_bytes=0.96 * TOTAL)),
     "memory_near_full_ratio", 0.97),
    (t.UTILIZATION_INFLATED, signals(sm_active=0.1), "inflated_utilization", 0.96),
    (t.UTILIZATION_INFLATED, signals(sm_active=0.1), "inflated_sm_active", 0.05),
]


@pytest.mark.parametrize(("row", "sig", "name", "value"), CONFIG_CASES,
                         ids=[f"{c[0].anchor}:{c[2]}" for c in CONFIG_CASES])
def test_each_threshold_follows_the_config(row: Row, sig: GpuSignals, name: str,
                                           value: float) -> None:
    assert verdict(row, sig).holds is True
    assert verdict(row, sig, with_cfg(**{name: value})).holds is False


# --- registration: one rule per row of the table ---------------------------------------
def _never(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    return Verdict(False)


def test_a_rule_registers_on_its_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(RULES, t.THERMAL)
    assert rule(t.THERMAL)(_never) is _never
    assert RULES[t.THERMAL] is _never


def test_registration_errors_name_the_row_and_both_rules() -> None:
    stray = replace(t.THERMAL, cause="thermla")
    with pytest.raises(ImportError, match=r"^rule for throttled_under_load/thermla, which is "
                       "not in the diagnosis table$"):
        rule(stray)(_never)
    first = RULES[t.THERMAL].__name__
    with pytest.raises(ImportError, match=rf"^two rules for throttled_under_load/thermal: "
                       f"{first}, _never$"):
        rule(t.THERMAL)(_never)


def test_a_row_without_a_rule_fails_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(RULES, t.XID)
    monkeypatch.delitem(RULES, t.GPU_LOST)
    with pytest.raises(ImportError, match=r"^diagnosis rows without a rule: "
                       "xid_error/driver_reported, gpu_lost/hardware$"):
        rules._check_every_row_has_a_rule()
