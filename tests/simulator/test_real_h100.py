"""What a real NVIDIA H100 80GB HBM3 (driver 580.159.04) answered, replayed.

The recording was taken with ``gpu-exporter record`` while a bf16 matrix
multiply held the GPU at its 700 W limit (clocks event reason 0x4, SW power
cap; SM clock ~1.35 GHz of 1.98 GHz). Replaying it runs the real exporter on
that board's answers: every value must come out in the metric's base unit.

It also pinned down a diagnosis rule: under dense tensor work an H100 at its
default 700 W limit has sw_power_cap on and clocks below maximum all the time.
That is the board working as designed, not a cap to act on, so the power_cap
row asks for an enforced limit below the default; the same recording with the
limit lowered to 450 W (as by a rack's power policy) is reported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_exporter.simulator import load_scenario
from gpu_exporter.simulator.model import Scenario
from tests.simnode import DetailRun

RECORDING = (Path(__file__).parents[1] / "fixtures" / "recordings"
             / "h100-80gb-hbm3-power-capped.yaml")


def recorded_at(t: float) -> dict[str, Any]:
    """GPU 0's answers in effect at scenario time t (later polls carry changes only)."""
    polls = yaml.safe_load(RECORDING.read_text())["replay"]["polls"]
    state: dict[str, Any] = {}
    for i, poll in enumerate(polls):
        if i and poll["t"] > t + 1e-9:
            break
        state.update(poll["gpus"][0])
    return state


def test_a_real_h100s_answers_become_metrics_in_base_units() -> None:
    with DetailRun(load_scenario(str(RECORDING)), metrics={"detail": True}) as run:
        # GPM is sampled every 5 s: the rates of 5 to 10 s (the first interval
        # holds the recording's first poll, which had no GPM rates yet).
        snap = run.poll(10)
    rec, first = recorded_at(10.0), recorded_at(0.0)
    uuid = rec["uuid"]
    (info, _), = snap.series("gpu_info")
    assert info["name"] == "NVIDIA H100 80GB HBM3" and info["uuid"] == uuid
    assert info["architecture"] == "hopper" and info["compute_capability"] == "9.0"
    assert info["driver_version"] == "580.159.04" and info["cuda_driver_version"] == "13.0"
    assert snap.get("gpu_power_watts", gpu="0") == pytest.approx(rec["power_mw"] / 1000)
    assert snap.get("gpu_power_limit_watts", gpu="0") == 700.0
    assert snap.get("gpu_clock_hertz", gpu="0", clock="sm") == rec["clocks_mhz"][1] * 1e6
    assert snap.get("gpu_clock_max_hertz", gpu="0", clock="sm") == 1.98e9
    assert snap.get("gpu_memory_total_bytes", gpu="0") == 85520809984
    assert snap.get("gpu_memory_used_bytes", gpu="0") == rec["mem_used"]
    assert snap.get("gpu_utilization_ratio", gpu="0") == rec["util_pct"] / 100
    assert snap.get("gpu_temperature_celsius", gpu="0", sensor="memory") == rec["mem_temp_c"]
    # The energy counter is a slow read (3 ms of CPU a call on this board):
    # read at the first poll, then again ten polls later, in joules.
    assert first["energy_mj"] != rec["energy_mj"]
    assert snap.get("gpu_energy_joules_total", gpu="0") == pytest.approx(
        rec["energy_mj"] / 1000)
    assert snap.get("gpu_throttle_reason_active", gpu="0", reason="sw_power_cap") == 1.0
    assert snap.get("gpu_throttle_reason_active", gpu="0", reason="hw_slowdown") == 0.0
    assert snap.get("gpu_tensor_active_ratio", gpu="0") == pytest.approx(0.93, abs=0.02)
    assert snap.get("gpu_ecc_enabled", gpu="0") == 1.0
    assert snap.get("gpu_persistence_mode_enabled", gpu="0") == 1.0
    assert snap.get("gpu_mig_mode_enabled", gpu="0") == 0.0
    # This board reports no NVLink (passed through alone): no link series, no error.
    assert snap.series("gpu_nvlink_link_up") == []
    assert snap.get("gpu_exporter_collector_success", collector="nvlink") == 1.0


def _findings(scenario: Scenario, seconds: float) -> set[tuple[str, str]]:
    with DetailRun(scenario) as run:
        snap = run.poll(seconds)
    return {(labels["symptom"], labels["cause"])
            for labels, value in snap.series("gpu_diagnosis_active") if value == 1.0}


def test_a_real_h100_power_bound_at_its_default_limit_is_not_reported() -> None:
    assert _findings(load_scenario(str(RECORDING)), 45) == set()


def test_the_same_h100_with_its_limit_lowered_is_reported_as_power_capped() -> None:
    recording = load_scenario(str(RECORDING))
    assert recording.replay is not None
    for poll in recording.replay.polls:
        if "limit_mw" in poll.gpus[0]:
            poll.gpus[0]["limit_mw"] = 450_000
    with DetailRun(recording) as run:
        early = run.poll(10)
        assert early.get("gpu_diagnosis_active", gpu="0", symptom="throttled_under_load",
                         cause="power_cap") == 0.0  # not yet held for the 30 s window
    assert _findings(recording, 45) == {("throttled_under_load", "power_cap")}
