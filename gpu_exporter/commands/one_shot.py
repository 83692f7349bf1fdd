"""One-shot commands (diagnose, record, baseline capture) on a simulated node:
the exporter on a virtual clock the command advances. Kept out of the daemon's
module so a daemon on real GPUs never loads the simulator."""

from __future__ import annotations

import time

from gpu_exporter.daemon.exporter import Exporter
from gpu_exporter.settings.config import Settings
from gpu_exporter.simulator import SimulatedNode
from gpu_exporter.simulator.clock import VirtualClock
from gpu_exporter.simulator.model import Scenario


def one_shot_on_simulated_node(settings: Settings,
                                scenario: Scenario) -> tuple[Exporter, VirtualClock]:
    """An exporter for a one-shot command (diagnose, record, baseline capture) on
    a simulated node, on a virtual clock that starts now: the command advances
    it, so a minute of scenario takes milliseconds. Each poll is watched as in
    the daemon: a call that hangs (in real time, as a sick GPU's does) costs
    --poll.timeout once, then the GPU is skipped until it returns, so a hung-call
    scenario still ends in seconds."""
    clock = VirtualClock(time.time())
    node = SimulatedNode(scenario, clock=clock)
    try:
        exporter = Exporter(settings, node, monotonic=clock, wall_clock=clock,
                            synchronous=True)
    except BaseException:
        node.close()
        raise
    exporter.session.call_timeout = settings.poll.timeout
    return exporter, clock
