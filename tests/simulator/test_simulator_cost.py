"""What a simulated node costs: on the real clock a GPU's state is computed
once per driver tick, not at every NVML call, and conditions once per timeline
step; a virtual clock still sees every move. The 60 s figure is printed by
``python -m benchmarks.simulate_cost``; the test here runs it shorter and
asserts only with a wide margin."""

from __future__ import annotations

import gc
import time
from typing import Any

import pytest

from benchmarks.simulate_cost import measure
from gpu_exporter.simulator import REAL_CLOCK_TICK_S, SimulatedNode, load_profile
from gpu_exporter.simulator.clock import VirtualClock
from gpu_exporter.simulator.model import Scenario
from gpu_exporter.simulator.world import World

# SPEC §8: one simulated 8-GPU node at most 5 % of a core. The test allows
# half as much again for a loaded machine; it fails on the old cost (14 %).
SIMULATOR_CORE_PCT_LIMIT = 7.5


def _scenario() -> Scenario:
    return Scenario(name="cost", node={"gpus": 8}, noise=False,
                    state={"utilization": 0.9, "memory_used_ratio": 0.5},
                    timeline=[{"at": "10s", "gpus": [3], "set": {"utilization": 0.0}},
                              {"at": "20s", "host": {"iowait_ratio": 0.4}}])


def _counting(world: World) -> list[int]:
    computed: list[int] = []
    compute = world._state

    def counted(i: int, t: float) -> Any:
        computed.append(i)
        return compute(i, t)

    world._state = counted  # type: ignore[method-assign]
    return computed


def test_on_a_tick_the_state_is_computed_once_per_tick_not_per_call() -> None:
    clock = VirtualClock(0.0)
    sc = _scenario()
    world = World(sc, load_profile(sc.node.profile), clock, tick_s=0.05)
    computed = _counting(world)
    for _ in range(40):  # 40 calls, 1 ms apart: within one tick
        world.state(2)
        clock.advance(0.001)
    assert len(computed) == 8  # every GPU once
    energy = world.state(0).energy_mj
    clock.advance(0.02)  # past the tick: computed again, counters advanced
    assert world.state(0).energy_mj > energy
    assert len(computed) == 16


def test_without_a_tick_every_move_of_the_clock_is_seen() -> None:
    clock = VirtualClock(0.0)
    sc = _scenario()
    world = World(sc, load_profile(sc.node.profile), clock)
    computed = _counting(world)
    world.state(0)
    world.state(1)  # same instant: no new computation
    clock.advance(0.001)
    world.state(0)
    assert len(computed) == 16


def test_the_real_clock_gets_the_driver_tick_and_a_virtual_one_none() -> None:
    real = SimulatedNode(_scenario())
    virtual = SimulatedNode(_scenario(), clock=VirtualClock(0.0))
    try:
        assert real.world.tick_s == REAL_CLOCK_TICK_S > 0
        assert virtual.world.tick_s == 0.0
    finally:
        real.close()
        virtual.close()


def test_cached_conditions_follow_the_timeline_and_hand_out_copies() -> None:
    sc = _scenario()
    world = World(sc, load_profile(sc.node.profile), VirtualClock(0.0))
    assert world.condition(3, 9.9)["utilization"] == 0.9
    assert world.condition(3, 10.0)["utilization"] == 0.0
    assert world.condition(2, 10.0)["utilization"] == 0.9  # the step is GPU 3's only
    world.condition(3, 12.0)["utilization"] = 0.5  # a caller's change stays its own
    assert world.condition(3, 12.0)["utilization"] == 0.0
    assert world.host_condition(19.0)["iowait_ratio"] != 0.4
    assert world.host_condition(20.0)["iowait_ratio"] == 0.4
    world.host_condition(25.0)["iowait_ratio"] = 0.9
    assert world.host_condition(25.0)["iowait_ratio"] == 0.4


@pytest.mark.timeout(120)
def test_simulate_healthy_costs_a_few_percent_of_a_core() -> None:
    started = time.monotonic()
    cost = measure("healthy", seconds=20.0, scrape_every=5.0)
    print(f"\n--simulate healthy over {cost.seconds} s: process {cost.process_core_pct} % of a "
          f"core, simulator {cost.simulator_core_pct} %, exporter {cost.exporter_core_pct} %")
    assert cost.polls >= 20.0 / cost.poll_interval_s * 0.5, cost  # it did poll throughout
    assert cost.scrapes >= 4
    assert 0 < cost.simulator_core_pct < SIMULATOR_CORE_PCT_LIMIT, cost
    assert time.monotonic() - started < 60


def test_after_the_first_poll_the_daemon_freezes_what_lives_and_collects_less_often() -> None:
    from gpu_exporter.daemon.exporter import YOUNG_GC_THRESHOLD, Exporter
    from gpu_exporter.settings.config import Settings

    threshold = gc.get_threshold()
    node = SimulatedNode(_scenario(), clock=VirtualClock(0.0))
    exporter = Exporter(Settings(), node, monotonic=node.world.clock,
                        wall_clock=node.world.clock, synchronous=True)
    try:
        exporter.freeze_after_first_poll()
        gc.unfreeze()
        assert gc.get_freeze_count() == 0
        exporter.poller.poll_once()
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # modules, settings, collectors: all that lives on
        assert gc.get_threshold()[0] == YOUNG_GC_THRESHOLD
        exporter.poller.poll_once()
        # Once, not at every poll (frozen objects freed since only lower the count).
        assert gc.get_freeze_count() <= frozen
    finally:
        exporter.stop()
        gc.unfreeze()
        gc.set_threshold(*threshold)
