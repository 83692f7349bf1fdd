"""The symptom -> cause table as live signals: every row fires in its own
scenario on the GPU the scenario breaks and nothing undeclared fires; healthy
and idle nodes and deliberate near-misses produce no finding at all."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.diagnosis.table import ROWS
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.simulator import builtin_scenarios, load_scenario
from gpu_exporter.simulator.model import Scenario
from tests.simnode import DetailRun

DECLARED = [n for n in builtin_scenarios() if load_scenario(n).expect is not None]

def findings(snap: Snapshot) -> set[tuple[int, str, str]]:
    return {(f.gpu, f.row.symptom, f.row.cause) for f in snap.derived(FINDINGS) or ()}


def run_long_enough(scenario: str | Scenario, seconds: float = 45) -> Snapshot:
    with DetailRun(scenario) as run:
        return run.poll(seconds)


def test_every_row_has_a_builtin_scenario_named_after_it() -> None:
    names = set(builtin_scenarios())
    for row in ROWS:
        assert row.anchor in names, f"no scenario {row.anchor}"
        expect = load_scenario(row.anchor).expect or []
        assert (row.symptom, row.cause) in {(e.symptom, e.cause) for e in expect}


@pytest.mark.parametrize("name", DECLARED)
def test_scenario_findings_equal_its_declaration(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.expect is not None
    expected = {(e.gpu, e.symptom, e.cause) for e in scenario.expect}
    assert findings(run_long_enough(scenario)) == expected


@pytest.mark.parametrize("name", ["healthy", "idle"])
def test_healthy_and_idle_nodes_find_nothing(name: str) -> None:
    snap = run_long_enough(name, 90)
    assert findings(snap) == set()
    values = {v for _, v in snap.series("gpu_diagnosis_active")}
    assert values == {0.0}


def test_mixed_exports_every_row_for_every_gpu_with_exactly_the_declared_ones_on() -> None:
    scenario = load_scenario("mixed")
    snap = run_long_enough(scenario)
    series = snap.series("gpu_diagnosis_active")
    assert len(series) == 8 * len(ROWS)
    on = {(int(lab["gpu"]), lab["symptom"], lab["cause"]) for lab, v in series if v == 1.0}
    assert on == {(e.gpu, e.symptom, e.cause) for e in scenario.expect or []}


def test_a_condition_must_hold_for_the_window_before_it_turns_on() -> None:
    with DetailRun("throttled-under-load-power-cap") as run:
        assert run.poll(20).get("gpu_diagnosis_active", gpu="2", symptom="throttled_under_load",
                                cause="power_cap") == 0.0
        assert run.poll(15).get("gpu_diagnosis_active", gpu="2", symptom="throttled_under_load",
                                cause="power_cap") == 1.0


def test_a_finding_clears_only_after_the_condition_stayed_clear() -> None:
    scenario = Scenario(
        name="cap-then-fixed", node={"gpus": 1}, state={"utilization": 0.95},
        gpus={0: {"power_limit_w": 450, "throttle_reasons": ["sw_power_cap"]}},
        timeline=[{"at": "60s", "set": {"power_limit_w": 700, "throttle_reasons": []}}])
    args = {"gpu": "0", "symptom": "throttled_under_load", "cause": "power_cap"}
    with DetailRun(scenario) as run:
        assert run.poll(59).get("gpu_diagnosis_active", **args) == 1.0
        assert run.poll(20).get("gpu_diagnosis_active", **args) == 1.0  # 19 s clear
        assert run.poll(15).get("gpu_diagnosis_active", **args) == 0.0  # 34 s clear


def test_an_alternating_condition_does_not_flap() -> None:
    steps = [{"at": f"{t}s", "gpus": [0], "set": {"throttle_reasons": ["sw_power_cap"]
                                                  if (t // 4) % 2 else []}}
             for t in range(0, 120, 4)]
    scenario = Scenario(name="flap", node={"gpus": 1},
                        state={"utilization": 0.95, "power_limit_w": 450}, timeline=steps)
    seen = []
    with DetailRun(scenario) as run:
        for _ in range(120):
            seen.append(run.poll(1).get("gpu_diagnosis_active", gpu="0",
                                        symptom="throttled_under_load", cause="power_cap"))
    assert set(seen) == {0.0}


# --- near-misses: look like a problem, are not -----------------------------------------
def _one_gpu(**state: object) -> Scenario:
    return Scenario(name="near-miss", node={"gpus": 2},
                    state={"utilization": 0.95, "memory_used_ratio": 0.7, **state})


@pytest.mark.parametrize("scenario", [
    # A busy GPU holding memory is working, not idle.
    _one_gpu(),
    # sw_power_cap on an idle GPU costs nothing: an idle GPU is never "power capped".
    _one_gpu(utilization=0.0, memory_used_ratio=0.0, throttle_reasons=["sw_power_cap"]),
    # A busy GPU at its default power limit with sw_power_cap on is power-bound
    # by design (a real H100 under dense tensor work always is), not capped.
    _one_gpu(throttle_reasons=["sw_power_cap"]),
    # An idle link at Gen1 is power saving, not downtraining.
    _one_gpu(utilization=0.0, memory_used_ratio=0.0, pcie_link_generation=1),
    # A 5 s dip to idle while holding memory is a checkpoint, not a stall.
    Scenario(name="dip", node={"gpus": 1}, state={"utilization": 0.95, "memory_used_ratio": 0.7},
             timeline=[{"at": "20s", "set": {"utilization": 0.02}},
                       {"at": "25s", "set": {"utilization": 0.95}}]),
    # A hot GPU still under its slowdown threshold with no thermal reason.
    _one_gpu(temperature_c=80),
    # Memory at 94 % is full-ish but not at risk.
    _one_gpu(memory_used_ratio=0.94),
], ids=["busy-holding-memory", "power-cap-idle", "power-bound-at-default-limit",
        "idle-link-gen1", "brief-dip", "warm",
        "memory-94"])
def test_near_misses_find_nothing(scenario: Scenario) -> None:
    assert findings(run_long_enough(scenario, 60)) == set()


def test_iowait_on_a_node_whose_gpus_are_busy_finds_nothing() -> None:
    scenario = Scenario(name="busy-iowait", node={"gpus": 2},
                        state={"utilization": 0.95, "memory_used_ratio": 0.7},
                        host={"iowait_ratio": 0.5, "pressure_io": {"some": 0.6, "full": 0.4}})
    assert findings(run_long_enough(scenario, 60)) == set()


def test_a_host_without_psi_is_still_diagnosed() -> None:
    """No /proc/pressure (an older or stripped kernel): iowait, the swap rate
    and the process's run-queue wait still name the cause."""
    no_psi = {"psi_available": False}
    cases = [
        ({"iowait_ratio": 0.4, **no_psi}, {}, "data_pipeline_io"),
        ({"swap_in_bytes_per_s": 50 * 2**20, **no_psi}, {}, "host_swapping"),
        ({"cpu_busy_ratio": 0.99, **no_psi}, {"run_queue_wait_ratio": 0.6, "cpu_ratio": 0.4},
         "cpu_contention"),
    ]
    for host, proc, cause in cases:
        scenario = Scenario(
            name="no-psi", node={"gpus": 1}, state={"utilization": 0.03,
                                                    "memory_used_ratio": 0.75},
            host=host, processes=[{"pid": 4100, "comm": "python", "gpus": [0],
                                   "gpu_memory_ratio": 0.7, "cpu_ratio": 0.2, "state": "S",
                                   **proc}])
        snap = run_long_enough(scenario, 60)
        assert findings(snap) == {(0, "memory_held_sm_idle", cause)}, cause
        assert not snap.series("gpu_host_pressure_ratio")


def test_a_host_cause_wins_over_a_stalled_process() -> None:
    """The process blocks in D state on reads: storage, not a stuck job. D is
    read for what it means (blocked in the kernel on I/O): it is the storage
    finding's evidence, and the stalled-process row, which reads a sleep in S
    that never wakes, does not hold at all."""
    scenario = Scenario(
        name="io-stall", node={"gpus": 1}, state={"utilization": 0.02, "memory_used_ratio": 0.75},
        host={"iowait_ratio": 0.45, "pressure_io": {"some": 0.5, "full": 0.3}},
        processes=[{"pid": 4100, "comm": "python", "gpus": [0], "gpu_memory_ratio": 0.7,
                    "cpu_ratio": 0.001, "state": "D"}])
    snap = run_long_enough(scenario, 60)
    assert findings(snap) == {(0, "memory_held_sm_idle", "data_pipeline_io")}
    (finding,) = snap.derived(FINDINGS) or ()
    assert finding.evidence["process_state"] == "D"
    assert finding.explains == ()
    assert snap.get("gpu_diagnosis_active", gpu="0", symptom="memory_held_sm_idle",
                    cause="process_stalled") == 0.0


def test_swap_stopped_but_iowait_persists_reports_both() -> None:
    swap = {"swap_in_bytes_per_s": 80 * 2**20, "iowait_ratio": 0.35}
    scenario = Scenario(
        name="swap-then-io", node={"gpus": 1},
        state={"utilization": 0.03, "memory_used_ratio": 0.75}, host=swap,
        timeline=[{"at": "60s", "host": {"swap_in_bytes_per_s": 0}}])
    with DetailRun(scenario) as run:
        assert findings(run.poll(59)) == {(0, "memory_held_sm_idle", "host_swapping")}
        # Swap stopped 15 s ago: it no longer explains the iowait, which is
        # reported on its own while the swapping row clears.
        assert findings(run.poll(15)) == {(0, "memory_held_sm_idle", "host_swapping"),
                                          (0, "memory_held_sm_idle", "data_pipeline_io")}
        assert findings(run.poll(30)) == {(0, "memory_held_sm_idle", "data_pipeline_io")}


def _diagnose_json(scenario: str) -> list[dict[str, object]]:
    result = subprocess.run([sys.executable, "-m", "gpu_exporter", "diagnose", "--simulate",
                             scenario, "--json"], capture_output=True, text=True, timeout=120,
                            check=False)
    findings: list[dict[str, object]] = json.loads(result.stdout)["findings"]
    return findings


def test_the_swap_case_reports_swapping_only_with_iowait_explained() -> None:
    (f,) = _diagnose_json("memory-held-sm-idle-host-swapping")
    assert (f["symptom"], f["cause"]) == ("memory_held_sm_idle", "host_swapping")
    evidence = f["evidence"]
    assert isinstance(evidence, dict)
    line = evidence["explains_memory_held_sm_idle_data_pipeline_io"]
    assert "iowait 35 %" in line and "explained by host swap" in line
    assert [(e["symptom"], e["cause"]) for e in f["explained"]] == [  # type: ignore[attr-defined]
        ("memory_held_sm_idle", "data_pipeline_io")]


def test_the_power_brake_case_reports_the_power_brake_only() -> None:
    (f,) = _diagnose_json("throttled-under-load-power-brake")
    assert (f["gpu"], f["symptom"], f["cause"]) == ("1", "throttled_under_load", "power_brake")


def test_a_node_at_15_percent_waiting_on_the_run_queue_is_cpu_contention() -> None:
    got = _diagnose_json("memory-held-sm-underfed-cpu-contention")
    assert {(f["gpu"], f["symptom"], f["cause"]) for f in got} == {
        (str(i), "memory_held_sm_underfed", "cpu_contention") for i in range(8)}
    assert {f["severity"] for f in got} == {"info"}


def test_no_gpm_means_no_utilization_inflated_judgement() -> None:
    scenario = Scenario(name="a100-inflated", node={"gpus": 1, "profile": "a100-pcie-40gb"},
                        state={"utilization": 0.97, "sm_active": 0.1})
    assert findings(run_long_enough(scenario)) == set()


# --- the diagnose command ---------------------------------------------------------------
@pytest.mark.parametrize("row", ROWS, ids=[r.anchor for r in ROWS])
def test_diagnose_json_reports_the_row_named_by_the_scenario(row) -> None:  # type: ignore[no-untyped-def]
    result = subprocess.run([sys.executable, "-m", "gpu_exporter", "diagnose", "--simulate",
                             row.anchor, "--json"], capture_output=True, text=True, timeout=60,
                            check=False)
    data = json.loads(result.stdout)
    got = {(f["gpu"], f["symptom"], f["cause"]) for f in data["findings"]}
    expect = load_scenario(row.anchor).expect or []
    assert got == {(str(e.gpu), e.symptom, e.cause) for e in expect}
    severities = {f["severity"] for f in data["findings"]}
    assert result.returncode == (2 if "critical" in severities else 1)
    for f in data["findings"]:
        assert f["evidence"] and f["fix"] and f["runbook"].endswith("#" + ROWS[
            [r.key for r in ROWS].index(f"{f['symptom']}/{f['cause']}")].anchor)


def test_diagnose_healthy_exits_0_and_says_so() -> None:
    result = subprocess.run([sys.executable, "-m", "gpu_exporter", "diagnose", "--simulate",
                             "healthy"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0
    assert "No problems found" in result.stdout
    assert "\033[" not in result.stdout  # no colour when piped


def test_diagnose_without_an_exporter_exits_3() -> None:
    result = subprocess.run([sys.executable, "-m", "gpu_exporter", "diagnose", "--url",
                             "http://127.0.0.1:9"], capture_output=True, text=True, timeout=30,
                            check=False)
    assert result.returncode == 3
    assert "cannot reach the exporter" in result.stderr
