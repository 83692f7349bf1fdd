"""A one-GPU simulated node with the NVML session and runtime a collector needs,
to run one collector directly (without the poller or the other collectors)."""

from __future__ import annotations

from typing import Any

from gpu_exporter.nvml.session import NvmlSession
from gpu_exporter.poll.readings import GpuReading
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.poll.stage import Stage
from gpu_exporter.settings.config import Settings
from gpu_exporter.simulator import SimulatedNode
from gpu_exporter.simulator.model import GpuCondition, Node, Scenario, Step
from tests.simnode import VirtualClock


class OneGpu:
    """GPU 0 in the given condition (no noise), optionally changed at ``at`` seconds."""

    def __init__(self, profile: str = "h100-sxm5-80gb", later: dict[str, Any] | None = None,
                 at: float = 5.0, driver: str | None = None, **condition: Any) -> None:
        self.clock = VirtualClock()
        timeline = [Step(at=at, set=GpuCondition(**later))] if later else []
        scenario = Scenario(name="one-gpu", node=Node(gpus=1, profile=profile, driver=driver),
                            state=GpuCondition(**condition), timeline=timeline, noise=False)
        self.node = SimulatedNode(scenario, clock=self.clock)
        self.node.install()
        self.session = NvmlSession(clock=self.clock, call_timeout=None)
        settings = Settings(path={"procfs": self.node.procfs, "sysfs": self.node.sysfs})
        self.runtime = Runtime(settings, self.session, self.clock, self.clock,
                               synchronous=True, watch_udev=False)
        self.built: list[Stage] = []

    def build(self, kind: type[Stage]) -> Stage:
        collector = kind.build(self.runtime)
        self.built.append(collector)
        return collector

    def poll(self, *collectors: Stage, seconds: float = 1.0) -> Snapshot:
        """Advance the clock, then run the collectors, in order, into one snapshot."""
        self.clock.advance(seconds)
        self.node.refresh()
        self.session.ensure()
        self.session.begin_poll()
        out = SnapshotBuilder(self.clock())
        for collector in collectors:
            collector.collect(out)
        return out.build()

    def read_gpu(self, collector: Stage) -> tuple[Snapshot, GpuReading]:
        """One poll of a GPU reader: the snapshot, and the GPU's reading in it."""
        snap = self.poll(collector)
        assert snap.readings.gpus is not None
        return snap, snap.readings.gpus[0]

    def close(self) -> None:
        for collector in self.built:
            collector.close()
        self.session.close()
        self.node.uninstall()
        self.node.close()

    def __enter__(self) -> OneGpu:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
