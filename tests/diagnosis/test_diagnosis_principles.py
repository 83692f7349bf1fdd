"""The principles the diagnosis table is held to (docs/diagnosis.md), each as a
test that fails when a row breaks it. The rows' own cases (test_rules.py,
test_rules_evidence.py) probe each threshold; these walk every row."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.diagnosis.precedence import PRECEDENCE, Candidate, Explains, resolve
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.poll.readings import HostSignals
from gpu_exporter.simulator.model import Scenario
from tests.diagnosis.test_diagnosis import run_long_enough
from tests.diagnosis.test_rules import CASES
from tests.rule_signals import (
    CFG,
    MIB,
    busy_gpu,
    held,
    judge,
    proc,
    quiet_host,
    signals,
    workload,
)

BANDS = [round(0.05 * i, 2) for i in range(21)]  # 0 %, 5 %, ... 100 %
POSITIVE: dict[Row, list[tuple[GpuSignals, str]]] = {}
for _row, _sig, _holds, _why in CASES:
    if _holds is True:
        POSITIVE.setdefault(_row, []).append((_sig, _why))


def at_load(sig: GpuSignals, load: float) -> GpuSignals:
    """``sig`` with the GPU (and its SMs, where GPM reads them) at ``load``;
    its processes, host and workloads as they were. At 0 % NVML says gpu_idle
    among its reasons, as a real GPU does."""
    reasons = sig.gpu.throttle_reasons
    if reasons is not None and load == 0.0:
        reasons = reasons | {"gpu_idle"}
    out = replace(sig, gpu=replace(sig.gpu, utilization=load, throttle_reasons=reasons))
    if sig.sm_active is not None:
        out.sm_active = load
    return out


# --- 1. A cause is judged at every load at which it can exist ----------------------------
@pytest.mark.parametrize("row", [r for r in ROWS if r in POSITIVE], ids=lambda r: r.key)
def test_a_cause_is_judged_at_every_load_unless_its_row_says_why_not(row: Row) -> None:
    gated = False
    for sig, why in POSITIVE[row]:
        holds = {load: judge(row, at_load(sig, load)) for load in BANDS}
        gated |= any(h is not True for h in holds.values())
        if not row.load_gate:
            off = [load for load, h in holds.items() if h is not True]
            assert not off, f"{row.key} ({why}) stops holding at loads {off} with no load_gate"
    # A gate stated is a gate kept: some case of the row stops at some load.
    assert gated or not row.load_gate, f"{row.key}: its load gate never gates"


def test_a_narrow_link_is_judged_whatever_the_utilization() -> None:
    # The brief's example: a link that lost lanes starves its GPU to low
    # utilization; judged only under load, it would never be found.
    for load in BANDS:
        assert judge(t.PCIE_DOWNTRAINED, signals(busy_gpu(utilization=load, pcie_width=4))), load


# --- 2. The most specific evidence wins --------------------------------------------------
QUIET_OWN = workload(io_pressure_some=0.0, cpu_pressure_some=0.0, memory_pressure_some=0.0,
                     memory_pressure_full=0.0)
# For each host-wide cause: the host's evidence of it, and the workload's own
# cgroup saying the same thing.
HOST_WIDE: list[tuple[Row, HostSignals, dict[str, float]]] = [
    (t.IDLE_DATA_PIPELINE_IO, quiet_host(iowait_ratio=0.5, io_pressure_some=0.5),
     {"io_pressure_some": 0.5}),
    (t.IDLE_CPU_CONTENTION, quiet_host(cpu_pressure_some=0.9), {"cpu_pressure_some": 0.6}),
    (t.IDLE_HOST_SWAPPING, quiet_host(swap_bytes_per_s=80 * MIB, memory_pressure_full=0.3),
     {"memory_pressure_some": 0.4, "memory_pressure_full": 0.2}),
]


@pytest.mark.parametrize(("row", "host", "own"), HOST_WIDE, ids=lambda v: getattr(v, "key", ""))
def test_a_workloads_own_counters_beat_the_hosts(row: Row, host: HostSignals,
                                                 own: dict[str, float]) -> None:
    idle = [proc(state="S", cpu_ratio=0.3, run_queue_wait_ratio=None)]
    # The host says so and nothing of the workload's own is read: the host speaks.
    assert judge(row, signals(held(0.03), host, idle)) is True
    # The workload's own cgroup says the same: it agrees.
    assert judge(row, signals(held(0.03), host, idle,
                              workloads=(replace(QUIET_OWN, **own),))) is True
    # Its own cgroup shows no such stall: the host's figures do not name it.
    assert judge(row, signals(held(0.03), host, idle, workloads=(QUIET_OWN,))) is False


def test_a_workloads_own_stall_is_found_on_a_quiet_host() -> None:
    own = workload(io_pressure_some=0.5)
    assert judge(t.IDLE_DATA_PIPELINE_IO, signals(held(0.03), quiet_host(),
                                                  workloads=(own,))) is True
    own = workload(cpu_pressure_some=0.6)
    assert judge(t.IDLE_CPU_CONTENTION, signals(
        held(0.03), quiet_host(), [proc(run_queue_wait_ratio=None)], workloads=(own,))) is True


def test_a_cpu_limited_pod_on_a_moderately_busy_host_is_its_limit_not_the_host() -> None:
    limited = workload(cpu_throttled_ratio=0.6, cpu_pressure_some=0.5)
    sig = signals(held(0.15), quiet_host(cpu_pressure_some=0.35), workloads=(limited,))
    roots = resolve([Candidate(r, {}, True) for r in ROWS
                     if r.symptom == "memory_held_sm_underfed" and judge(r, sig)])
    assert list(roots) == [t.UNDERFED_CPU_LIMIT_THROTTLED]


# --- 3. Process states read for what they mean -------------------------------------------
def test_process_state_is_read_for_what_it_means() -> None:
    stuck = proc(state="S", cpu_ratio=0.001, sm_utilization=0.0, wakeups_per_s=0.5)
    serving = replace(stuck, wakeups_per_s=40.0)  # an idle server polls and waits for work
    blocked = replace(stuck, state="D")  # in the kernel, on I/O
    running = replace(stuck, state="R", cpu_ratio=1.0)
    idle_gpu = held(0.02)
    assert judge(t.IDLE_PROCESS_STALLED, signals(idle_gpu, procs=[stuck])) is True
    assert judge(t.IDLE_PROCESS_STALLED, signals(idle_gpu, procs=[serving])) is False
    assert judge(t.IDLE_PROCESS_STALLED, signals(idle_gpu, procs=[blocked])) is False
    assert judge(t.IDLE_PROCESS_STALLED, signals(idle_gpu, procs=[running])) is False
    # D is what the storage row reads, on a host whose own I/O figures are unread.
    assert judge(t.IDLE_DATA_PIPELINE_IO, signals(idle_gpu, HostSignals(),
                                                  procs=[blocked])) is True
    assert judge(t.IDLE_DATA_PIPELINE_IO, signals(idle_gpu, HostSignals(),
                                                  procs=[serving])) is None
    # Asleep waiting for its loader workers, most of them blocked in D: storage.
    waiting = replace(serving, children=8, children_blocked=6)
    assert judge(t.IDLE_DATA_PIPELINE_IO, signals(idle_gpu, HostSignals(),
                                                  procs=[waiting])) is True
    assert judge(t.IDLE_DATA_PIPELINE_IO, signals(idle_gpu, HostSignals(), procs=[
        replace(waiting, children_blocked=1)])) is None  # one worker reading now and then


# --- 4. A cause needs its own signal -----------------------------------------------------
def test_swapping_needs_swap_traffic() -> None:
    no_swap = HostSignals(swap_bytes_per_s=0.0, memory_pressure_full=0.6, iowait_ratio=0.01)
    assert judge(t.IDLE_HOST_SWAPPING, signals(held(0.03), no_swap)) is False


def test_heat_needs_a_thermal_reason_or_the_slowdown_margin() -> None:
    # busy_gpu slows down at 89 °C: 2 °C short of it, at full clocks, no reason.
    near = 89.0 - CFG.thermal_margin_celsius + 1.0
    hot_full_clocks = busy_gpu(temperature_celsius=near)
    assert judge(t.THERMAL, signals(hot_full_clocks)) is False
    at_margin_slowed = busy_gpu(temperature_celsius=near, clocks_hz={"sm": 1.3e9})
    assert judge(t.THERMAL, signals(at_margin_slowed)) is True


def test_a_power_cap_needs_the_draw_at_its_limit() -> None:
    idle_under_cap = busy_gpu(utilization=0.1, power_limit_watts=450.0, power_watts=90.0,
                              throttle_reasons=frozenset({"sw_power_cap"}),
                              clocks_hz={"sm": 1.2e9})
    assert judge(t.POWER_CAP, signals(idle_under_cap)) is False


def test_fans_at_rest_on_a_cool_gpu_are_no_fault() -> None:
    zero_rpm = busy_gpu(utilization=0.0, temperature_celsius=35.0, fan_speeds={0: 0.0, 1: 0.0})
    assert judge(t.FAN_STOPPED, signals(zero_rpm)) is False
    one_dead = busy_gpu(temperature_celsius=70.0, fan_speeds={0: 0.0, 1: 0.8})
    assert judge(t.FAN_STOPPED, signals(one_dead)) is True


def test_memory_near_full_is_judged_against_what_processes_can_allocate() -> None:
    # A T4: 15 GiB, of which the driver keeps 251 MiB. NVML's v2 "used" leaves
    # the reserve out: 96.5 % of the rest is an allocation away from OOM, at
    # 95 % of the board's total.
    total, reserved = 15 * 1024 * MIB, 251 * MIB
    used = 0.965 * (total - reserved)
    t4 = busy_gpu(memory_total_bytes=total, memory_reserved_bytes=reserved,
                  memory_used_bytes=used)
    assert used / total < CFG.memory_near_full_ratio
    assert judge(t.MEMORY_NEAR_FULL, signals(t4)) is True
    # Before R510 NVML gives no reserve, and its "used" counts it: the total is
    # what there is to fill.
    v1 = busy_gpu(memory_total_bytes=total, memory_used_bytes=used + reserved)
    assert judge(t.MEMORY_NEAR_FULL, signals(v1)) is True
    assert judge(t.MEMORY_NEAR_FULL, signals(replace(v1, memory_used_bytes=0.9 * total))) \
        is False


# --- 5. What a cause explains is listed under it, saying which way it runs ---------------
@pytest.mark.parametrize("edge", PRECEDENCE, ids=lambda e: f"{e.cause.key}>{e.consequence.key}")
def test_an_explained_row_is_listed_under_its_cause(edge: Explains) -> None:
    cands = [Candidate(edge.cause, {}, True), Candidate(edge.consequence, {}, True)]
    got = resolve(cands)
    if edge.consequence in got:  # an edge that asks for evidence these bare rows lack
        return
    assert list(got) == [edge.cause]
    listed = [e.row for e in got[edge.cause]]
    # The same cause seen more loosely (under-fed beside idle) adds nothing:
    # dropped, never beside it; anything else is listed beneath it.
    assert listed == ([] if edge.restates else [edge.consequence])
    # The words run from cause to consequence (explained *by*), never side by side.
    assert edge.why and not edge.why.lower().startswith(("see ", "also ", "and "))


def test_the_explained_row_is_never_beside_its_cause() -> None:
    got = resolve([Candidate(t.IDLE_HOST_SWAPPING, {}, True),
                   Candidate(t.IDLE_DATA_PIPELINE_IO, {}, True),
                   Candidate(t.IDLE_PROCESS_STALLED, {}, True)])
    assert list(got) == [t.IDLE_HOST_SWAPPING]


# --- 6. Every cause signal is read: tests/diagnosis/test_cause_signals.py -------------


# --- 7. MIG instances are judged like GPUs, with their owner -----------------------------
def test_every_row_judged_per_instance_is_one_a_workload_can_cause() -> None:
    # The rows of a job's own doing or its starvation are judged on each MIG
    # instance; the board's (heat, power, link, ECC, fans) on the physical GPU.
    board = {"throttled_under_load", "clocks_capped", "pcie_downtrained", "pcie_errors",
             "nvlink_errors", "c2c_errors", "memory_errors", "gpu_lost", "persistence_off",
             "recovery_action",
             "fabric_degraded", "cooling_degraded", "utilization_inflated",
             "utilization_bursty", "network_placement", "network_degraded",
             "network_errors"}
    for row in ROWS:
        if row.symptom in board:
            assert not row.per_instance, row.key
    for row in (t.MEMORY_NEAR_FULL, t.ALLOCATED_UNUSED, t.IDLE_PROCESS_STALLED,
                t.IDLE_DATA_PIPELINE_IO, t.IDLE_CPU_LIMIT_THROTTLED, t.XID_APPLICATION):
        assert row.per_instance, row.key


def test_a_mig_instance_is_judged_like_a_gpu_and_names_its_owner() -> None:
    """Instance 8 of a MIG GPU near full, instance 7 held by a pod with no
    process on it: each finding is about its instance and names that
    instance's pod, not the GPU's other tenants."""

    def pod(name: str, index: str, pids: list[int]) -> dict[str, object]:
        return {"namespace": "serve", "name": name,
                "uid": f"00000000-0000-0000-0000-00000000{index}",
                "containers": [{"name": "server", "pids": pids, "devices": [
                    {"resource": "nvidia.com/mig-1g.10gb", "ids": [f"0:{index[-1]}"]}]}]}

    inst = {"compute_instance": 0, "memory_total_mib": 9856, "sm_active": 0.7}
    scenario = Scenario(
        name="mig-principle", node={"gpus": 1, "profile": "h100-sxm5-80gb"},
        state={"utilization": 0.5, "memory_used_ratio": 0.0},
        gpus={0: {"mig_instances": [
            {**inst, "gpu_instance": 7, "profile_id": 19, "memory_used_ratio": 0.001,
             "sm_active": 0.0},
            {**inst, "gpu_instance": 8, "memory_used_ratio": 0.97},
            {**inst, "gpu_instance": 9, "memory_used_ratio": 0.5}]}},
        processes=[{"pid": 3101, "comm": "python", "gpus": [0], "mig": [8, 0],
                    "gpu_memory_ratio": 0.1, "sm_utilization": 0.7, "cpu_ratio": 1.0,
                    "state": "R"},
                   {"pid": 3102, "comm": "python", "gpus": [0], "mig": [9, 0],
                    "gpu_memory_ratio": 0.06, "sm_utilization": 0.7, "cpu_ratio": 1.0,
                    "state": "R"}],
        tenants={"pods": [pod("idle", "0000", []), pod("full", "0001", [3101]),
                          pod("fine", "0002", [3102])]})
    snap = run_long_enough(scenario, 200)
    got = {(f.row, f.gpu_instance, tuple(o.pod for o in f.owners))
           for f in snap.derived(FINDINGS) or ()}
    assert got == {(t.ALLOCATED_UNUSED, 7, ("idle",)), (t.MEMORY_NEAR_FULL, 8, ("full",))}


def test_every_guard_the_principles_page_names_exists() -> None:

    root = Path(__file__).resolve().parents[2]
    named = set(re.findall(r"\b(test_\w+)\b", (root / "docs" / "diagnosis.md").read_text()))
    defined = {m for f in (root / "tests").rglob("test_*.py")
               for m in re.findall(r"^def (test_\w+)", f.read_text(), re.M)}
    files = {p.stem for p in (root / "tests").rglob("test_*.py")}
    assert named - defined - files == set()


@pytest.mark.parametrize(("cpu", "expected"), [(0.02, set()), (0.0, {"process_stalled"})],
                         ids=["an idle server at night", "a process stuck at a barrier"])
def test_an_idle_server_is_not_a_stuck_process_end_to_end(cpu: float, expected: set[str]) -> None:
    """Written as anyone would write it, without wake-ups: a server asleep on
    2 % of a CPU wakes to burn it; a process on none never wakes."""

    scenario = Scenario(
        name="asleep", node={"gpus": 1}, state={"utilization": 0.0, "memory_used_ratio": 0.6},
        processes=[{"pid": 4100, "comm": "server", "gpus": [0], "gpu_memory_ratio": 0.6,
                    "cpu_ratio": cpu, "state": "S"}])
    snap = run_long_enough(scenario, 60)
    assert {f.row.cause for f in snap.derived(FINDINGS) or ()} == expected
