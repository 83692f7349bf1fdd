"""NVML's life cycle: init retried with backoff and logged once while the driver
is missing; library missing behaves like a node without a driver."""

from __future__ import annotations

import logging

import pytest

from gpu_exporter.simulator.model import Scenario
from tests.simnode import SimRun


@pytest.mark.parametrize("mode,hint", [
    ("driver_not_loaded", "kernel driver is not loaded"),
    ("library_missing", "libnvidia-ml.so.1 was not found"),
    ("no_permission", "no permission to open the NVIDIA device nodes"),
])
def test_nvml_unavailable_serves_own_metrics_logs_once_and_backs_off(
        mode: str, hint: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    scenario = Scenario(name=mode, node={"gpus": 2, "nvml": mode})
    with SimRun(scenario) as run:
        snap = run.poll(120)
        init_calls = run.node.library.calls["nvmlInitWithFlags"]
    assert snap.get("gpu_exporter_nvml_up") == 0.0
    assert not snap.series("gpu_info")
    assert snap.get("gpu_exporter_collector_success", collector="device") == 1.0
    errors = [r for r in caplog.records if "NVML unavailable" in r.getMessage()]
    assert len(errors) == 1 and hint in errors[0].getMessage()
    if mode != "library_missing":
        # 1, 2, 4, ... 64 s apart: 7 or 8 tries in two minutes, not 120.
        assert 5 <= init_calls <= 9


def test_a_gpu_lost_at_startup_is_reported_down_from_the_first_poll() -> None:
    scenario = Scenario(name="lost-at-start", node={"gpus": 3}, gpus={1: {"lost": True}})
    with SimRun(scenario) as run:
        snap = run.poll()
    up = {lab["gpu"]: v for lab, v in snap.series("gpu_up")}
    assert up == {"0": 1.0, "1": 0.0, "2": 1.0}


def test_a_lost_gpu_that_comes_back_reports_again() -> None:
    scenario = Scenario(name="flap", node={"gpus": 2}, state={"utilization": 0.5},
                        timeline=[{"at": "2s", "gpus": [1], "set": {"lost": True}},
                                  {"at": "10s", "gpus": [1], "set": {"lost": False}}])
    with SimRun(scenario) as run:
        assert run.poll(5).get("gpu_up", gpu="1") == 0.0
        snap = run.poll(20)
    assert snap.get("gpu_up", gpu="1") == 1.0
    assert snap.get("gpu_utilization_ratio", gpu="1") is not None
