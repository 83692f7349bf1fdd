"""What a recording rule is, and the selectors every rule builds its
expressions from: the shapes the rule modules share."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpu_exporter_mixin.alerting.config import AlertConfig

NODE_LABELS = ("instance", "job")
GPU_LABELS = (*NODE_LABELS, "gpu", "uuid")


@dataclass(frozen=True)
class RecordingRule:
    record: str
    expr: str
    help: str
    labels: dict[str, str] = field(default_factory=dict)


class Exprs:
    """Metric selectors with the configured matchers."""

    def __init__(self, config: AlertConfig) -> None:
        self.selector = config.selector.strip().strip(",")
        self.cluster = config.cluster_label
        self.node_key = ", ".join((self.cluster, *NODE_LABELS))
        self.gpu_key = ", ".join((self.cluster, *GPU_LABELS))

    def m(self, name: str, matchers: str = "") -> str:
        parts = [p for p in (self.selector, matchers) if p]
        return f"{name}{{{', '.join(parts)}}}" if parts else name

# The window the utilization recording rules take the rate of the GPUs' busy
# time over: at least four scrapes at a 30 s interval, short enough that a
# straggler shows within two minutes.
UTILIZATION_RATE_WINDOW = "2m"
UTILIZATION_RECORD = f"gpu:gpu_utilization_ratio:rate{UTILIZATION_RATE_WINDOW}"
