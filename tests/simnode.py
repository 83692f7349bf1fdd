"""Test helpers: run the real exporter in-process on a simulated node with a
virtual clock, so a minute of scenario takes milliseconds and every value is
reproducible."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.exposition import generate_latest

from gpu_exporter.daemon.exporter import Exporter
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.settings.config import Settings
from gpu_exporter.simulator import SimulatedNode, load_scenario
from gpu_exporter.simulator.clock import VirtualClock as _VirtualClock
from gpu_exporter.simulator.model import Scenario
from gpu_exporter.web.reference import snapshot_registry

# Virtual time starts here: an arbitrary fixed Unix time.
EPOCH = 1_790_000_000.0


class VirtualClock(_VirtualClock):
    def __init__(self, start: float = EPOCH) -> None:
        super().__init__(start)


def settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {"web": {"listen_address": "127.0.0.1:0"}}
    for key, value in overrides.items():
        base[key] = value
    return Settings(**base)


class SimRun:
    """An exporter on a simulated node, polled by hand on a virtual clock."""

    def __init__(self, scenario: str | Scenario, clock: VirtualClock | None = None,
                 synchronous: bool = True,
                 prepare: Callable[[SimulatedNode], None] | None = None,
                 **setting_overrides: Any) -> None:
        """``synchronous=False`` runs the exporter's own threads (the NVML event
        thread, the per-GPU call deadline) as in production, on the virtual clock.
        ``prepare`` is called with the node before the exporter starts on it."""
        self.clock = clock or VirtualClock()
        sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        self.node = SimulatedNode(sc, clock=self.clock)
        if prepare is not None:
            prepare(self.node)
        self.exporter = Exporter(settings(**setting_overrides), self.node,
                                 monotonic=self.clock, wall_clock=self.clock,
                                 synchronous=synchronous)
        self.snapshot: Snapshot | None = None

    def poll(self, seconds: float = 0.0, interval: float = 1.0) -> Snapshot:
        """Advance the clock by ``seconds`` polling every ``interval``; the last snapshot."""
        snap = self.exporter.poller.poll_once() if self.snapshot is None else self.snapshot
        elapsed = 0.0
        while elapsed < seconds - 1e-9:
            step = min(interval, seconds - elapsed)
            self.clock.advance(step)
            elapsed += step
            snap = self.exporter.poller.poll_once()
        self.snapshot = snap
        return snap

    def serve(self) -> int:
        """Serve HTTP on a free port with no background poller: only the test's
        own polls (``poll()``) ever change what is served. The port."""
        self.exporter.start(background_poll=False)
        return self.exporter.port

    def scrape(self) -> str:
        """/metrics as prometheus_client renders the newest snapshot."""
        poller = self.exporter.poller
        return generate_latest(snapshot_registry(lambda: poller.latest)).decode()

    def close(self) -> None:
        self.exporter.stop()

    def __enter__(self) -> SimRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DetailRun(SimRun):
    """A SimRun with --metrics.detail: every row of the diagnosis table is
    exported for every GPU, at 0 where it does not hold (for tests of the
    rows' own timing and of what is exported where)."""

    def __init__(self, scenario: str | Scenario, clock: VirtualClock | None = None,
                 synchronous: bool = True, **setting_overrides: Any) -> None:
        setting_overrides.setdefault("metrics", {"detail": True})
        super().__init__(scenario, clock, synchronous, **setting_overrides)


def served(scenario: str, polls: int = 60) -> Iterator[str]:
    """The exporter of a simulated scenario serving on 127.0.0.1 after
    ``polls`` polls on the virtual clock: its base URL, for the commands
    that read a running exporter (diagnose, slurm-health)."""
    with SimRun(scenario) as run:
        run.exporter.bind()
        assert run.exporter.server is not None
        run.exporter.server.start()
        run.poll(polls)
        yield f"http://127.0.0.1:{run.exporter.port}"


# The readers that read each GPU through NVML and need no other reader's
# reading: the order they run in is the pipeline's choice, not a rule. MIG is
# here too, but stays before GPM, which samples each MIG instance it found.
PER_GPU_READERS = ("device", "mig", "gpm", "samples", "nvlink")


def shuffle_readers(exporter: Exporter, seed: int) -> list[str]:
    """Run the exporter's per-GPU readers in an order drawn from ``seed``
    (MIG before GPM), in the places they hold in the pipeline; the order."""
    poller = exporter.poller
    stages = list(poller.stages)
    places = [i for i, stage in enumerate(stages) if stage.name in PER_GPU_READERS]
    readers = [stages[i] for i in places]
    random.Random(seed).shuffle(readers)
    names = [r.name for r in readers]
    if "mig" in names and "gpm" in names and names.index("gpm") < names.index("mig"):
        a, b = names.index("gpm"), names.index("mig")
        readers[a], readers[b] = readers[b], readers[a]
    for place, reader in zip(places, readers, strict=True):
        stages[place] = reader
    poller.stages = stages
    return [r.name for r in readers]
