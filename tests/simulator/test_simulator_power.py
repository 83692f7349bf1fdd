"""The simulated GPU's power follows its load and limit as a real board's does."""

from __future__ import annotations

from gpu_exporter.simulator.model import Scenario
from tests.simnode import SimRun


def _power(state: dict[str, object]) -> float:
    scenario = Scenario(name="power", node={"gpus": 1}, state=state)
    with SimRun(scenario) as run:
        value = run.poll(5).get("gpu_power_watts", gpu="0")
    assert value is not None
    return value


def test_sw_power_cap_on_an_idle_gpu_does_not_draw_the_limit() -> None:
    # An H100 idles near 70 W; the cap bit does not make it draw 450 W.
    assert _power({"utilization": 0.0, "power_limit_w": 450,
                   "throttle_reasons": ["sw_power_cap"]}) < 120


def test_a_busy_capped_gpu_draws_its_limit() -> None:
    assert 440 <= _power({"utilization": 0.95, "power_limit_w": 450,
                          "throttle_reasons": ["sw_power_cap"]}) <= 450


def test_an_uncapped_busy_gpu_draws_below_its_limit() -> None:
    assert 400 < _power({"utilization": 0.95}) < 700
