"""The promtool unit tests' model: input series, the alerts that must fire
on them, and the helpers that write the nodes' and GPUs' labels and counters
(cases.py and job_cases.py write the cases with them)."""

from __future__ import annotations

from dataclasses import dataclass, field

JOB = "gpu-exporter"
CLUSTER = "cluster-a"
GIB = 1024**3


@dataclass(frozen=True)
class Series:
    metric: str
    labels: dict[str, str]
    values: str

    def text(self) -> str:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(self.labels.items()))
        return f"{self.metric}{{{inner}}}"


@dataclass(frozen=True)
class Fire:
    labels: dict[str, str]
    value: float
    # The alert's labels are its ``by``/``on`` key only: labels of the
    # selector beyond job (a namespace, say) do not reach it.
    keyed: bool = False


@dataclass(frozen=True)
class Check:
    at: float
    alert: str
    fires: tuple[Fire, ...] = ()


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class ExprCheck:
    """A PromQL expression and the samples it must return (promql_expr_test)."""
    at: float
    expr: str
    samples: tuple[Sample, ...]


@dataclass(frozen=True)
class Case:
    name: str
    interval: float
    series: list[Series]
    checks: list[Check]
    exprs: list[ExprCheck] = field(default_factory=list)


@dataclass(frozen=True)
class TestFile:
    name: str
    evaluation_interval: float
    cases: list[Case] = field(default_factory=list)


def node(name: str) -> dict[str, str]:
    """A node's labels as the cases write them; ``_relabel`` turns them into
    the configured selector's and cluster label's when the file is rendered."""
    return {"cluster": CLUSTER, "instance": f"{name}:9835", "job": JOB}


def gpu(name: str, index: int) -> dict[str, str]:
    return {**node(name), "gpu": str(index), "uuid": f"GPU-{name}-{index:04d}"}


def steps(interval: float, seconds: float) -> int:
    """The ``xN`` that makes a series cover ``seconds`` after its first sample."""
    return int(seconds // interval)


def busy_seconds(labels: dict[str, str], iv: float,
                 shares: list[tuple[float, int]]) -> Series:
    """gpu_busy_seconds_total of a GPU busy ``share`` of each of ``count``
    scrape intervals of ``iv`` seconds, piece by piece: the counter the
    exporter exports, so the rules take its rate as they would in Prometheus."""
    return seconds_counter("gpu_busy_seconds_total", labels, iv, shares)


def seconds_counter(name: str, labels: dict[str, str], iv: float,
                    shares: list[tuple[float, int]]) -> Series:
    """A time counter (``name``) that grows ``share`` seconds per second in
    each of ``count`` scrape intervals of ``iv`` seconds, piece by piece."""
    values = ["0"]
    total = 0.0
    for share, count in shares:
        for _ in range(count):
            total += share * iv
            values.append(f"{total:.10g}")
    return Series(name, labels, " ".join(values))
