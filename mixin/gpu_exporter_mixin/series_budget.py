"""How many series the exporter exports, per collector, on a simulated idle
8x H100 node with 18 NVLink links per GPU: at the defaults and with every
detail on. The README's table and the budget test both come from here.

A tool, like the documentation generators: it runs the real exporter on the
simulator's virtual clock (a few seconds of polls take well under a second).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpu_exporter.daemon.exporter import Exporter
from gpu_exporter.poll.catalog import BY_NAME
from gpu_exporter.settings.config import Settings
from gpu_exporter.simulator import SimulatedNode, load_scenario
from gpu_exporter.simulator.clock import VirtualClock
from gpu_exporter.web.reference import snapshot_registry

SCENARIO = "idle"  # 8x H100 SXM5 80GB, 18 NVLink links each, nothing running
# Budgets of the default settings (what a fleet pays per node).
PER_GPU_BUDGET = 100
HOST_BUDGET = 60
# Long enough that every reader has a value: GPM needs two samples, the
# sub-second sample buffers one read after the starting point.
_WARM_UP_S = 12.0
_EPOCH = 1_790_000_000.0


@dataclass(frozen=True)
class SeriesCount:
    gpus: int
    per_gpu: dict[str, int]  # collector -> series with a gpu label, per GPU
    node: dict[str, int]  # collector -> series without a gpu label

    def per_gpu_total(self) -> int:
        return sum(self.per_gpu.values())

    def total(self) -> int:
        return self.per_gpu_total() * self.gpus + sum(self.node.values())


def exposition(detail: bool, scenario: str = SCENARIO, seconds: float = _WARM_UP_S) -> str:
    """/metrics of the simulated node after ``seconds`` of 1 s polls."""
    clock = VirtualClock(_EPOCH)
    node = SimulatedNode(load_scenario(scenario), clock=clock)
    settings = Settings(web={"listen_address": "127.0.0.1:0"}, metrics={"detail": detail})
    exporter = Exporter(settings, node, monotonic=clock, wall_clock=clock, synchronous=True)
    try:
        exporter.poller.poll_once()
        elapsed = 0.0
        while elapsed < seconds:
            clock.advance(1.0)
            elapsed += 1.0
            exporter.poller.poll_once()
        poller = exporter.poller
        return generate_latest(snapshot_registry(lambda: poller.latest)).decode()
    finally:
        exporter.stop()


def count(text: str) -> SeriesCount:
    """Series of an exposition by collector (the catalog's column), per GPU
    (those with a ``gpu`` label, divided by the GPUs) and node-level."""
    per_gpu: Counter[str] = Counter()
    node: Counter[str] = Counter()
    gpus: set[str] = set()
    for family in text_string_to_metric_families(text):
        spec = BY_NAME.get(family.name) or BY_NAME.get(family.name + "_total")
        collector = spec.collector if spec else "other"
        for sample in family.samples:
            if "gpu" in sample.labels:
                gpus.add(sample.labels["gpu"])
                per_gpu[collector] += 1
            else:
                node[collector] += 1
    n = max(1, len(gpus))
    return SeriesCount(len(gpus), {k: -(-v // n) for k, v in per_gpu.items()}, dict(node))


def measure() -> tuple[SeriesCount, SeriesCount]:
    """(defaults, every detail on) on the idle 8x H100 node."""
    return count(exposition(False)), count(exposition(True))


def series_markdown() -> str:
    default, detail = measure()
    collectors = sorted(set(default.per_gpu) | set(default.node) | set(detail.per_gpu)
                        | set(detail.node))
    lines = ["| collector | per GPU | per node | per GPU, `--metrics.detail` | "
             "per node, `--metrics.detail` |", "|---|---|---|---|---|"]
    for c in collectors:
        lines.append(f"| {c} | {default.per_gpu.get(c, 0)} | {default.node.get(c, 0)} | "
                     f"{detail.per_gpu.get(c, 0)} | {detail.node.get(c, 0)} |")
    lines.append(f"| **all** | **{default.per_gpu_total()}** | **{sum(default.node.values())}** "
                 f"| **{detail.per_gpu_total()}** | **{sum(detail.node.values())}** |")
    lines.append("")
    lines.append(f"Whole node ({default.gpus} GPUs): **{default.total()}** series at the "
                 f"defaults, {detail.total()} with `--metrics.detail`.")
    return "\n".join(lines) + "\n"
