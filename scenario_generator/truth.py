"""What a case is and what it must produce."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scenario_generator.node import NodeBuilder


@dataclass(frozen=True)
class Expected:
    """A root cause the diagnosis must report: on GPU ``gpu`` (and its MIG
    instance ``gpu_instance`` where the cause lives in one), by the row's cause
    name, naming ``owners`` (``ns/pod/container`` or ``slurm job N``) where the
    GPU or instance belongs to someone the exporter can know."""

    gpu: int
    cause: str
    owners: frozenset[str] | None = None
    gpu_instance: int | None = None
    # The injection it came from and the load band (percent) of the GPU or
    # instance it is on: its cell in the tables.
    source: str = ""
    band: int = 0

    def describe(self) -> str:
        where = f"GPU {self.gpu}" + (f" instance {self.gpu_instance}"
                                     if self.gpu_instance is not None else "")
        return f"{self.cause} on {where}"


@dataclass(frozen=True)
class Case:
    name: str
    scenario: dict[str, Any]  # a scenario's data (gpu_exporter.simulator.model.Scenario)
    expected: tuple[Expected, ...]
    causes: tuple[str, ...]  # the root causes injected (classes of the tables)
    confounders: tuple[str, ...]
    board: str
    band: int  # the load band of the GPU the first cause is on: 0, 5, ... 95 (percent)
    tenant: str
    host: str  # the host's shape, for people
    notes: tuple[str, ...] = field(default=())

    @property
    def label(self) -> str:
        """The case's class in the tables (where its false findings count):
        its first cause, else its confounder, in parentheses."""
        return self.causes[0] if self.causes else f"({self.confounders[0]})"


def at_gpu(b: NodeBuilder, cause: str) -> list[Expected]:
    """``cause`` on the target GPU, naming who holds it."""
    return [Expected(b.target, cause, b.owners())]
