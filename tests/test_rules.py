"""Each diagnosis rule on its own, signals in and verdict out: one table of cases
per rule, with the thresholds' edges on both sides, and the causal precedence
between rows as plain data in, roots out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.precedence import PRECEDENCE, Candidate, resolve
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.readings import GpuOwner, HostSignals, PcieKernelView
from gpu_exporter.thresholds import DiagnosisConfig
from tests.rule_signals import (
    GIB,
    MIB,
    NOW,
    POD,
    busy_gpu,
    held,
    judge,
    proc,
    quiet_host,
    signals,
    workload,
)

IDLE, UNDERFED, BUSY = 0.03, 0.15, 0.95
STALLED = proc(state="S", cpu_ratio=0.001, sm_utilization=0.0)

# (row, signals, expected verdict, why)
CASES: list[tuple[Row, GpuSignals, bool | None, str]] = [
    # --- storage -------------------------------------------------------------
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.35)), True,
     "iowait alone (no PSI figure) decides"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.35,
                                                             io_pressure_some=None)), True,
     "no /proc/pressure: iowait still decides"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(io_pressure_some=0.25)), True,
     "I/O pressure alone decides"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.19,
                                                             io_pressure_some=0.19)), False,
     "both just below their thresholds"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.20)), True,
     "iowait exactly at its threshold"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(BUSY), quiet_host(iowait_ratio=0.5)), False,
     "a busy GPU is not starved, whatever the host waits on"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE, memory_used_bytes=10 * GIB),
                                      quiet_host(iowait_ratio=0.5)), False,
     "no memory held: nothing is running on the GPU"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(UNDERFED), quiet_host(iowait_ratio=0.5)), False,
     "15 % is under-fed, not idle"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), HostSignals()), None,
     "no host figures at all: not judged"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(UNDERFED), quiet_host(iowait_ratio=0.35)), True,
     "under-fed and waiting on storage"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(0.49), quiet_host(iowait_ratio=0.35)), True,
     "just below busy"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(0.50), quiet_host(iowait_ratio=0.35)), False,
     "at the busy threshold the GPU is busy"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(UNDERFED), quiet_host()), False,
     "near miss: under-fed with no host-side cause"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(UNDERFED, memory_used_bytes=30 * GIB),
                                          quiet_host(iowait_ratio=0.35)), False,
     "near miss: 37.5 % memory used is not held"),
    # --- CPU -----------------------------------------------------------------
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.6),
                                    [proc(run_queue_wait_ratio=0.5)]), True,
     "pressure and the process's own run-queue wait"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.6),
                                    [proc(run_queue_wait_ratio=0.1)]), False,
     "host pressure, but the GPU's process is not waiting: not its cause"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.6),
                                    [proc(run_queue_wait_ratio=None)]), True,
     "no schedstat: pressure alone decides"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=None),
                                    [proc(run_queue_wait_ratio=0.5)]), True,
     "no PSI: the process's run-queue wait decides"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.29),
                                    [proc(run_queue_wait_ratio=0.5)]), False,
     "pressure just below its threshold"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=None),
                                    [proc(run_queue_wait_ratio=None)]), None,
     "neither PSI nor schedstat: not judged"),
    (t.UNDERFED_CPU_CONTENTION, signals(held(UNDERFED), quiet_host(cpu_pressure_some=0.6),
                                        [proc(run_queue_wait_ratio=0.5)]), True,
     "a GPU at 15 % whose process waits half the time on the run queue"),
    (t.UNDERFED_CPU_CONTENTION, signals(held(UNDERFED), quiet_host(cpu_pressure_some=0.6),
                                        [proc(run_queue_wait_ratio=0.29)]), False,
     "run-queue wait just below its threshold"),
    # --- swapping ------------------------------------------------------------
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), quiet_host(swap_bytes_per_s=2 * MIB,
                                                          memory_pressure_full=None)), True,
     "swap rate alone (no PSI) decides"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), quiet_host(swap_bytes_per_s=0.5 * MIB)), False,
     "a trickle of swap is not swapping"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), quiet_host(memory_pressure_full=0.05)), True,
     "memory pressure (full) alone decides"),
    (t.UNDERFED_HOST_SWAPPING, signals(held(0.3), quiet_host(swap_bytes_per_s=20 * MIB)), True,
     "a GPU at 30 % on a swapping host"),
    (t.UNDERFED_HOST_SWAPPING, signals(held(0.3), quiet_host(swap_bytes_per_s=0.9 * MIB)),
     False, "swap just below its threshold"),
    # --- a stalled process ---------------------------------------------------
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[STALLED]), True,
     "sleeping with no CPU while its GPU holds memory"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[proc(state="R", cpu_ratio=0.9)]), False,
     "running on the CPU: working, perhaps CPU-bound, not stalled"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[replace(STALLED, cpu_ratio=0.06)]),
     False, "6 % of a CPU is above the stalled threshold"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), quiet_host(iowait_ratio=0.5), [STALLED]), True,
     "judged on its own: the host cause is precedence's business"),
    # --- bursty input --------------------------------------------------------
    (t.BURSTY_INPUT, signals(util_samples=(0.0, 0.45, 1.0)), True, "swings 0 -> 100 %"),
    (t.BURSTY_INPUT, signals(util_samples=(0.2, 0.5, 1.0)), False, "never near idle"),
    (t.BURSTY_INPUT, signals(util_samples=None), None, "no samples: not judged"),
    # --- throttling ----------------------------------------------------------
    (t.POWER_CAP, signals(busy_gpu(throttle_reasons=frozenset({"sw_power_cap"}),
                                   power_limit_watts=450.0, clocks_hz={"sm": 1.6e9})), True,
     "busy, capped below the default limit, clocks down"),
    (t.POWER_CAP, signals(busy_gpu(throttle_reasons=frozenset({"sw_power_cap"}),
                                   clocks_hz={"sm": 1.6e9})), False,
     "at the default limit a power-bound GPU works as designed"),
    (t.POWER_CAP, signals(busy_gpu(utilization=0.0, throttle_reasons=frozenset(
        {"sw_power_cap"}), power_limit_watts=450.0, clocks_hz={"sm": 3.45e8})), False,
     "an idle GPU is never power capped"),
    (t.THERMAL, signals(busy_gpu(throttle_reasons=frozenset({"hw_slowdown", "hw_thermal"}))),
     True, "hw_thermal names heat"),
    (t.THERMAL, signals(busy_gpu(throttle_reasons=frozenset({"sw_thermal"}))), True,
     "sw_thermal names heat"),
    (t.THERMAL, signals(busy_gpu(throttle_reasons=frozenset({"hw_slowdown"}))), False,
     "hw_slowdown alone does not name heat"),
    (t.THERMAL, signals(busy_gpu(throttle_reasons=frozenset({"hw_slowdown", "hw_power_brake"}))),
     False, "the power brake with normal temperatures is not thermal"),
    (t.THERMAL, signals(busy_gpu(temperature_celsius=86.0)), True,
     "3 °C below the GPU's own slowdown threshold"),
    (t.THERMAL, signals(busy_gpu(temperature_celsius=84.0)), False,
     "5 °C below it: warm, not throttling"),
    (t.THERMAL, signals(busy_gpu(utilization=0.0, temperature_celsius=88.0)), False,
     "an idle GPU is not throttled under load"),
    (t.POWER_BRAKE, signals(busy_gpu(throttle_reasons=frozenset({"hw_slowdown",
                                                                 "hw_power_brake"}))), True,
     "hw_power_brake"),
    (t.POWER_BRAKE, signals(busy_gpu(throttle_reasons=frozenset({"hw_slowdown"}))), False,
     "hw_slowdown alone does not name the brake"),
    (t.HW_SLOWDOWN, signals(busy_gpu(throttle_reasons=frozenset({"hw_slowdown"}))), True,
     "the umbrella bit alone is its own evidence"),
    (t.HW_SLOWDOWN, signals(busy_gpu(throttle_reasons=frozenset({"sw_power_cap"}))), False,
     "a software power cap is not a hardware slowdown"),
    (t.HW_SLOWDOWN, signals(busy_gpu(throttle_reasons=None)), None,
     "reasons unknown: not judged"),
    (t.APPLICATION_CLOCKS, signals(busy_gpu(clocks_application_hz={"sm": 1.2e9})), True,
     "application clock set below the default"),
    (t.APPLICATION_CLOCKS, signals(busy_gpu(clocks_application_hz={"sm": 1.98e9})), False,
     "above the default is GPU Boost headroom, not a cap"),
    # --- PCIe ----------------------------------------------------------------
    (t.PCIE_DOWNTRAINED, signals(busy_gpu(pcie_width=8)), True, "x8 of x16 under load"),
    (t.PCIE_DOWNTRAINED, signals(busy_gpu(utilization=0.0, pcie_generation=1)), False,
     "an idle link at Gen1 saves power"),
    (t.PCIE_DOWNTRAINED, signals(pcie=PcieKernelView(upstream_width=8, upstream_width_max=16)),
     True, "the switch port above runs narrower"),
    (t.PCIE_ERRORS, signals(), False, "no replays in the window"),
    # --- memory, Xid, lost ---------------------------------------------------
    (t.ECC_UNCORRECTABLE, signals(busy_gpu(ecc_uncorrected_volatile=1.0)), True, "one DBE"),
    (t.ECC_UNCORRECTABLE, signals(busy_gpu(remap_failed=True)), True, "out of spare rows"),
    (t.ECC_UNCORRECTABLE, signals(), False, "clean"),
    (t.ROW_REMAP_PENDING, signals(busy_gpu(remap_pending=True)), True, "pending"),
    (t.ROW_REMAP_PENDING, signals(), False, "nothing pending"),
    (t.XID, signals(xids=[(NOW - 300, 79)]), True, "a hardware Xid 5 minutes ago"),
    (t.XID, signals(xids=[(NOW - 899, 48)]), True, "just inside the 15-minute hold"),
    (t.XID, signals(xids=[(NOW - 901, 48)]), False, "just outside the 15-minute hold"),
    (t.XID, signals(xids=[(NOW - 10, 31 + 1000)]), False, "a code the table does not list"),
    (t.XID, signals(xids=[(NOW - 10, 13)]), False, "an application Xid never pages"),
    (t.XID, signals(xids=[(NOW - 10, 160)]), False, "an informational Xid never pages"),
    (t.XID_APPLICATION, signals(xids=[(NOW - 10, 31)]), True, "an illegal address in the job"),
    (t.XID_APPLICATION, signals(xids=[(NOW - 899, 13)]), True, "just inside the hold"),
    (t.XID_APPLICATION, signals(xids=[(NOW - 901, 13)]), False, "just outside the hold"),
    (t.XID_APPLICATION, signals(xids=[(NOW - 10, 79)]), False, "a hardware Xid is not the job's"),
    (t.XID_INFORMATIONAL, signals(xids=[(NOW - 10, 160)]), True, "memory marked for repair"),
    (t.XID_INFORMATIONAL, signals(xids=[(NOW - 10, 1031)]), True,
     "a code the table does not list is reported, paging no one"),
    (t.XID_INFORMATIONAL, signals(xids=[(NOW - 10, 48)]), False, "a hardware Xid"),
    (t.XID_INFORMATIONAL, signals(xids=[(NOW - 10, 45)]), False, "an application Xid"),
    (t.GPU_LOST, signals(busy_gpu(up=False)), True, "NVML cannot reach it"),
    (t.GPU_LOST, signals(), False, "answers"),
    (t.MEMORY_NEAR_FULL, signals(busy_gpu(memory_used_bytes=0.96 * 80 * GIB)), True, "96 %"),
    (t.MEMORY_NEAR_FULL, signals(busy_gpu(memory_used_bytes=0.94 * 80 * GIB)), False, "94 %"),
    (t.UTILIZATION_INFLATED, signals(sm_active=0.1), True, "busy by NVML, SMs mostly idle"),
    (t.UTILIZATION_INFLATED, signals(sm_active=None), None, "no GPM: not judged"),
    (t.UTILIZATION_INFLATED, signals(sm_active=0.8), False, "busy and the SMs are busy"),
    (t.PERSISTENCE_OFF, signals(busy_gpu(persistence_mode=False)), True, "off"),
    (t.PERSISTENCE_OFF, signals(), False, "on"),
    (t.NUMA_MISPLACED, signals(procs=[proc(affinity_local=False, cpus_allowed="32-63")]), True,
     "pinned to the other socket"),
    (t.NUMA_MISPLACED, signals(), False, "local"),
    # --- the driver's verdict ------------------------------------------------
    *[case for row, action in ((t.RECOVERY_GPU_RESET, "gpu_reset"),
                               (t.RECOVERY_NODE_REBOOT, "node_reboot"),
                               (t.RECOVERY_DRAIN_P2P, "drain_p2p"),
                               (t.RECOVERY_DRAIN_AND_RESET, "drain_and_reset"))
      for case in ((row, signals(busy_gpu(recovery_action=action)), True, "the driver says so"),
                   (row, signals(), False, "the driver says none"),
                   (row, signals(busy_gpu(recovery_action="node_reboot" if action != "node_reboot"
                                          else "gpu_reset")), False, "another action"),
                   (row, signals(busy_gpu(recovery_action=None)), None,
                    "a driver before R565: not judged"))],
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_health="unhealthy")), True, "unhealthy"),
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_health="limited_capacity")), True,
     "limited capacity"),
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_state="in_progress")), True,
     "probe not completed"),
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_status="UNKNOWN", fabric_health=None)), True,
     "completed with an error, before R580"),
    (t.FABRIC_DEGRADED, signals(), False, "registered and healthy"),
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_health=None)), False,
     "registered, no health summary before R580"),
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_state=None)), None,
     "no NVSwitch fabric: not judged"),
    # --- the job's own cgroup judges before the host ---------------------------
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.01),
                                      workloads=(workload(io_pressure_some=0.45),)), True,
     "the job starves on its own reads while the host's iowait is low"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.5),
                                      workloads=(workload(io_pressure_some=0.02),)), False,
     "a neighbour's reads raise the host's iowait: not this job's cause"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), None,
                                      workloads=(workload(io_pressure_some=0.2),)), True,
     "no host view: the job's own pressure at the threshold decides"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.5),
                                      workloads=(workload(io_pressure_some=None),)), True,
     "the job's cgroup has no io.pressure: the host judges"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.05),
                                    [proc(run_queue_wait_ratio=0.5)],
                                    workloads=(workload(cpu_pressure_some=0.5),)), True,
     "the job's own CPU pressure and run-queue wait, the host's low"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.6),
                                    [proc(run_queue_wait_ratio=0.5)],
                                    workloads=(workload(cpu_pressure_some=0.05),)), False,
     "the host is busy but this job is not short of CPU"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), quiet_host(memory_pressure_full=0.0),
                                   workloads=(workload(memory_pressure_full=0.1),)), True,
     "the job stalls on its own memory (its limit), the host does not"),
    # --- the container's CPU limit ---------------------------------------------
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(cpu_throttled_ratio=0.6),)), True, "throttled in 60 % of periods, host idle"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(cpu_throttled_ratio=0.25),)), True, "at the threshold"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(cpu_throttled_ratio=0.24),)), False, "just below the threshold"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(BUSY), workloads=(
        workload(cpu_throttled_ratio=0.9),)), False, "throttled but the GPU is busy"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), quiet_host(cpu_pressure_some=0.5),
                                         workloads=(workload(cpu_throttled_ratio=0.9),)),
     False, "the host itself is short of CPUs: contention, not the limit"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(cpu_throttled_ratio=None, cpu_limit_cores=None),)), None,
     "no CPU limit: not judged"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE)), None, "no workload cgroup: not judged"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(cpu_throttled_ratio=0.0), workload(container_id="b", cpu_throttled_ratio=0.7))),
     True, "two containers on one GPU: the throttled one decides"),
    # --- an allocated GPU nobody uses --------------------------------------------
    (t.ALLOCATED_UNUSED, signals(busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[],
                                 owners=(POD,), allocations_known=True), True,
     "allocated, no process, idle, empty"),
    (t.ALLOCATED_UNUSED, signals(busy_gpu(utilization=0.0, memory_used_bytes=0.0),
                                 owners=(POD,), allocations_known=True), False,
     "a process holds a context on it"),
    (t.ALLOCATED_UNUSED, signals(busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[],
                                 owners=(), allocations_known=True), False,
     "not allocated: a free GPU idling is fine"),
    (t.ALLOCATED_UNUSED, signals(held(IDLE), procs=[], owners=(POD,), allocations_known=True),
     False, "memory held with no process listed: one the exporter cannot see"),
    (t.ALLOCATED_UNUSED, signals(busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[],
                                 owners=(POD,), allocations_known=False), None,
     "the kubelet never answered: not judged"),
    (t.ALLOCATED_UNUSED, signals(busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[],
                                 owners=(GpuOwner(slurm_job_id="4242"),),
                                 allocations_known=True), False,
     "a Slurm job is known only through its processes: never without one"),
]


@pytest.mark.parametrize(("row", "sig", "expected", "why"), CASES,
                         ids=[f"{c[0].anchor}:{c[3]}" for c in CASES])
def test_rule_verdict(row: Row, sig: GpuSignals, expected: bool | None, why: str) -> None:
    assert judge(row, sig) is expected, why


def test_every_row_has_direct_cases_both_ways() -> None:
    seen: dict[Row, set[bool | None]] = {}
    for row, _, expected, _ in CASES:
        seen.setdefault(row, set()).add(expected)
    for row in ROWS:
        if row is t.PCIE_ERRORS:
            continue  # a counter rule: see test_pcie_errors_count_within_the_window
        assert {True, False} <= seen.get(row, set()), f"{row.key} lacks a holding or a clear case"


def test_pcie_errors_count_within_the_window() -> None:
    assert judge(t.PCIE_ERRORS, signals(), increases={"pcie_replays": 1.0}) is True
    assert judge(t.PCIE_ERRORS, signals(), increases={"pcie_replays": 0.0}) is False


def test_xid_hold_follows_the_config() -> None:
    short = DiagnosisConfig(xid_hold=60)
    assert judge(t.XID, signals(xids=[(NOW - 300, 79)]), short) is False
    assert judge(t.XID, signals(xids=[(NOW - 30, 79)]), short) is True


def test_thermal_margin_follows_the_config() -> None:
    wide = DiagnosisConfig(thermal_margin_celsius=8)
    assert judge(t.THERMAL, signals(busy_gpu(temperature_celsius=84.0)), wide) is True
    assert judge(t.THERMAL, signals(busy_gpu(temperature_celsius=84.0))) is False


# --- precedence: rows that are on in, root causes out ----------------------------------
def on(*rows: Row, stale: tuple[Row, ...] = (), evidence: dict[Row, dict[str, Any]] | None
       = None) -> list[Candidate]:
    ev = evidence or {}
    return [Candidate(r, ev.get(r, {}), r not in stale) for r in rows]


def roots(cands: list[Candidate]) -> set[str]:
    return {r.key for r in resolve(cands)}


PRECEDENCE_CASES: list[tuple[list[Candidate], set[Row], str]] = [
    (on(t.IDLE_CPU_LIMIT_THROTTLED, t.IDLE_CPU_CONTENTION, t.IDLE_PROCESS_STALLED),
     {t.IDLE_CPU_LIMIT_THROTTLED}, "a container at its CPU limit is short of CPU by its "
     "limit: one cause, one fix"),
    (on(t.IDLE_CPU_LIMIT_THROTTLED, t.IDLE_DATA_PIPELINE_IO),
     {t.IDLE_CPU_LIMIT_THROTTLED, t.IDLE_DATA_PIPELINE_IO},
     "throttling does not make reads slow: two causes"),
    (on(t.IDLE_HOST_SWAPPING, t.IDLE_DATA_PIPELINE_IO), {t.IDLE_HOST_SWAPPING},
     "swapping explains iowait"),
    (on(t.IDLE_HOST_SWAPPING, t.IDLE_DATA_PIPELINE_IO, stale=(t.IDLE_HOST_SWAPPING,)),
     {t.IDLE_HOST_SWAPPING, t.IDLE_DATA_PIPELINE_IO},
     "swap stopped but iowait persists: both"),
    (on(t.IDLE_DATA_PIPELINE_IO, t.IDLE_PROCESS_STALLED), {t.IDLE_DATA_PIPELINE_IO},
     "a host cause wins over a stalled process"),
    (on(t.IDLE_CPU_CONTENTION, t.IDLE_PROCESS_STALLED), {t.IDLE_CPU_CONTENTION},
     "CPU contention wins over a stalled process"),
    (on(t.IDLE_HOST_SWAPPING, t.IDLE_PROCESS_STALLED), {t.IDLE_HOST_SWAPPING},
     "a process in D state doing swap-in is not stuck"),
    (on(t.IDLE_HOST_SWAPPING, t.IDLE_DATA_PIPELINE_IO, t.IDLE_PROCESS_STALLED),
     {t.IDLE_HOST_SWAPPING}, "a chain: swap -> iowait -> stall"),
    (on(t.IDLE_DATA_PIPELINE_IO, t.IDLE_CPU_CONTENTION), {t.IDLE_DATA_PIPELINE_IO},
     "CPU pressure beside storage stalls, the process's wait unknown"),
    (on(t.IDLE_DATA_PIPELINE_IO, t.IDLE_CPU_CONTENTION, evidence={t.IDLE_CPU_CONTENTION: {
        "process_run_queue_wait_seconds_per_second": 0.5}}),
     {t.IDLE_DATA_PIPELINE_IO, t.IDLE_CPU_CONTENTION},
     "the GPU's process itself waits on the run queue: independent"),
    (on(t.POWER_BRAKE, t.HW_SLOWDOWN), {t.POWER_BRAKE}, "the brake explains hw_slowdown"),
    (on(t.THERMAL, t.HW_SLOWDOWN), {t.THERMAL}, "heat explains hw_slowdown"),
    (on(t.THERMAL, t.POWER_BRAKE, t.HW_SLOWDOWN), {t.THERMAL, t.POWER_BRAKE},
     "two named reasons are two causes"),
    (on(t.GPU_LOST, t.XID, t.PCIE_DOWNTRAINED, stale=(t.XID, t.PCIE_DOWNTRAINED)),
     {t.GPU_LOST}, "a lost GPU explains every other row of that GPU"),
    (on(t.ECC_UNCORRECTABLE, t.XID, evidence={t.XID: {"xid": "48"}}), {t.ECC_UNCORRECTABLE},
     "Xid 48 is the ECC error itself"),
    (on(t.ECC_UNCORRECTABLE, t.XID, evidence={t.XID: {"xid": "48, 119"}}),
     {t.ECC_UNCORRECTABLE, t.XID}, "Xid 119 (GSP) is not an ECC error"),
    (on(t.IDLE_CPU_CONTENTION, t.UNDERFED_CPU_CONTENTION), {t.IDLE_CPU_CONTENTION},
     "idle and under-fed for one cause: the idle row"),
    (on(t.UNDERFED_CPU_CONTENTION, t.BURSTY_INPUT), {t.UNDERFED_CPU_CONTENTION},
     "bursty input is what a starved pipeline looks like"),
    (on(t.POWER_CAP, t.THERMAL), {t.POWER_CAP, t.THERMAL}, "independent causes stay"),
]


@pytest.mark.parametrize(("cands", "expected", "why"), PRECEDENCE_CASES,
                         ids=[c[2] for c in PRECEDENCE_CASES])
def test_precedence(cands: list[Candidate], expected: set[Row], why: str) -> None:
    assert roots(cands) == {r.key for r in expected}, why


def test_a_root_lists_what_it_explains_once() -> None:
    got = resolve(on(t.IDLE_HOST_SWAPPING, t.IDLE_DATA_PIPELINE_IO, t.UNDERFED_HOST_SWAPPING,
                     t.UNDERFED_DATA_PIPELINE_IO))
    assert list(got) == [t.IDLE_HOST_SWAPPING]
    assert [e.row for e in got[t.IDLE_HOST_SWAPPING]] == [t.IDLE_DATA_PIPELINE_IO]


def test_every_precedence_edge_joins_rows_of_the_table() -> None:
    for e in PRECEDENCE:
        assert e.cause in ROWS and e.consequence in ROWS and e.cause is not e.consequence
