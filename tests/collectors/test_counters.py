"""Counters for what accumulates over time: rate() over any window is the
window's share, whatever the scrape interval, where a 1-second gauge scraped
every 15 s keeps one second in fifteen.

The node runs on the virtual clock: two minutes of scenario take a moment."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_exporter.simulator.model import Scenario
from tests.simnode import SimRun

WINDOW_S = 120.0
FLIP_S = 2.0  # the condition alternates this often


def alternating(every_s: float = FLIP_S, until_s: float = 200.0) -> list[dict[str, object]]:
    """Timeline steps that throttle GPU 1 by the power cap half the time and by
    the thermal slowdown a quarter of the time, flipping every ``every_s``."""
    steps: list[dict[str, object]] = []
    k = 0
    while k * every_s < until_s:
        reasons = ["sw_power_cap"] if k % 2 == 0 else []
        if k % 4 == 0:
            reasons.append("hw_thermal")
        steps.append({"at": k * every_s, "gpus": [1], "set": {"throttle_reasons": reasons}})
        k += 1
    return steps


def scenario() -> Scenario:
    # GPU 0: utilization a square wave, 2 s at 100 %, 2 s at 0 %. GPU 1: busy,
    # throttled on and off. GPU 2: idle, for the zero case.
    return Scenario.model_validate({
        "name": "alternating", "node": {"gpus": 3, "profile": "h100-sxm5-80gb"},
        "state": {"utilization": 0.0},
        "gpus": {0: {"utilization": 0.5, "burst_period_s": 2 * FLIP_S},
                 1: {"utilization": 0.9}},
        "timeline": alternating(),
    })


Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Scrape:
    out: Scrape = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrapes(run: SimRun, every_s: float, window_s: float = WINDOW_S,
            start_s: float = 30.0) -> list[tuple[float, Scrape]]:
    """Poll every second (the default interval); scrape every ``every_s`` over
    ``window_s`` after ``start_s`` of warm-up, at the virtual time of each."""
    run.poll(start_s)
    t = start_s
    out = [(t, parse(run.scrape()))]
    while t < start_s + window_s - 1e-9:
        run.poll(every_s)
        t += every_s
        out.append((t, parse(run.scrape())))
    return out


def rate(points: list[tuple[float, Scrape]], name: str, **labels: str) -> float:
    """Increase per second between the first and last scrape of the window, as
    Prometheus's rate() computes it when the window's ends are scraped."""
    def value(scrape: Scrape) -> float:
        found = [v for (n, lab), v in scrape.items()
                 if n == name and all(dict(lab).get(k) == w for k, w in labels.items())]
        assert len(found) == 1, (name, labels, found)
        return found[0]

    (t0, first), (t1, last) = points[0], points[-1]
    return (value(last) - value(first)) / (t1 - t0)


@pytest.fixture(scope="module")
def at_15s() -> list[tuple[float, Scrape]]:
    with SimRun(scenario()) as run:
        return scrapes(run, 15.0)


def near(expected: float, within: float = 0.05) -> Callable[[float], bool]:
    return lambda got: abs(got - expected) <= within * expected


def test_busy_time_rate_is_the_windows_utilization_at_15s_scrapes(
        at_15s: list[tuple[float, Scrape]]) -> None:
    got = rate(at_15s, "gpu_busy_seconds_total", gpu="0")
    assert near(0.5)(got), got


def test_throttle_time_rate_is_the_share_of_the_window_each_reason_held(
        at_15s: list[tuple[float, Scrape]]) -> None:
    cap = rate(at_15s, "gpu_throttle_seconds_total", gpu="1", reason="sw_power_cap")
    thermal = rate(at_15s, "gpu_throttle_seconds_total", gpu="1", reason="hw_thermal")
    assert near(0.5)(cap), cap
    assert near(0.25)(thermal), thermal
    # A reason that never held, and a GPU never throttled, count nothing.
    assert rate(at_15s, "gpu_throttle_seconds_total", gpu="1", reason="sync_boost") == 0.0
    assert rate(at_15s, "gpu_throttle_seconds_total", gpu="2", reason="sw_power_cap") == 0.0


def test_gpm_active_time_rates_are_the_windows_mean_activity(
        at_15s: list[tuple[float, Scrape]]) -> None:
    # The simulated GPU 0's SMs are active 0.85 of its utilization, tensor
    # cores 0.6 of it, DRAM 0.45 of it; GPU 2 is idle.
    for name, share in (("gpu_sm_active_seconds_total", 0.85),
                        ("gpu_tensor_active_seconds_total", 0.6),
                        ("gpu_dram_active_seconds_total", 0.45)):
        got = rate(at_15s, name, gpu="0")
        assert near(0.5 * share)(got), (name, got)
        assert rate(at_15s, name, gpu="2") == 0.0


def test_board_without_a_reason_has_no_counter_for_it(
        at_15s: list[tuple[float, Scrape]]) -> None:
    # The H100 profile lacks board_limit and reliability: NVML answers
    # NOT_SUPPORTED for their fields, and no series stands in for them.
    last = at_15s[-1][1]
    reasons = {dict(lab)["reason"] for (n, lab) in last if n == "gpu_throttle_seconds_total"}
    assert reasons == {"sw_power_cap", "sync_boost", "sw_thermal", "hw_thermal",
                       "hw_power_brake"}


@pytest.mark.parametrize("every_s", [5.0, 30.0, 60.0])
def test_rates_hold_at_other_scrape_intervals(every_s: float) -> None:
    with SimRun(scenario()) as run:
        points = scrapes(run, every_s)
    assert near(0.5)(rate(points, "gpu_busy_seconds_total", gpu="0"))
    assert near(0.5)(rate(points, "gpu_throttle_seconds_total", gpu="1",
                          reason="sw_power_cap"))


def test_host_counters_rate_to_the_host_shares() -> None:
    host = {"iowait_ratio": 0.2, "steal_ratio": 0.05, "disks": {"nvme0n1": 0.3}}
    sc = Scenario.model_validate({"name": "host", "node": {"gpus": 1}, "host": host})
    with SimRun(sc) as run:
        points = scrapes(run, 15.0, start_s=5.0)
    total = rate(points, "gpu_host_cpu_seconds_total")
    cpus = 128  # the simulated host's default
    assert near(cpus, 0.01)(total)
    assert near(0.2)(rate(points, "gpu_host_cpu_iowait_seconds_total") / total)
    assert near(0.05)(rate(points, "gpu_host_cpu_steal_seconds_total") / total)
    assert near(0.3)(rate(points, "gpu_host_disk_busy_seconds_total", device="nvme0n1"))


def test_busy_time_skips_gaps_and_impossible_samples() -> None:
    from gpu_exporter.collectors.samples import SamplesCollector
    from gpu_exporter.nvml.session import NvmlSession

    collector = SamplesCollector(NvmlSession())
    uuid = "GPU-x"
    collector._integrate_samples(uuid, None, [(1_000_000, 100.0)])  # the starting point
    assert collector._busy_s[uuid] == 0.0
    # 0.2 s at 100 %, 0.2 s at 50 %; a 255 % sentinel and a 20 s gap count nothing.
    collector._integrate_samples(uuid, 1_000_000, [(1_200_000, 100.0), (1_400_000, 50.0),
                                                (1_600_000, 255.0), (21_600_000, 100.0)])
    assert collector._busy_s[uuid] == pytest.approx(0.3)
