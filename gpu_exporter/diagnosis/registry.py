"""What a rule is, and the registry of one rule per row of the table: the
rules register on their rows (``rule(t.THERMAL)(_thermal)``) in ``rules.py``,
``fault_rules.py`` and ``xid_rules.py``; ``rules.py`` checks at import that every
row has one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpu_exporter.diagnosis.memory import GpuPast
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.settings.thresholds import DiagnosisConfig

Evidence = dict[str, float | str]


@dataclass
class Verdict:
    holds: bool | None
    evidence: Evidence = field(default_factory=dict)
    # When what holds began (unix time), where the rule knows it (an Xid's
    # time, remembered from before a restart): the finding's ``since``.
    since: float | None = None
    # One finding per part, each with its own whole evidence (an application
    # Xid's processes: one finding each); empty: one finding with ``evidence``.
    # ``evidence`` stays what holds of the whole, for precedence to cite.
    parts: tuple[Evidence, ...] = ()


class Trend:
    """What a rule needs beyond one poll: counter increases over the window and
    the current time, and what the exporter remembers of the GPU from before
    (memory.py), supplied by the engine."""

    def __init__(self, increase: Callable[[str, float | None], float | None],
                 now: float, past: GpuPast | None = None,
                 series: Callable[[str], Sequence[tuple[float, float]]] | None = None) -> None:
        self.increase = increase
        self.now = now  # unix time
        self.past = past
        # The (monotonic time, value) readings ``increase`` kept of a name within
        # the window, oldest first: how a level moved, not only how far (a
        # steady climb and one step rise as far): one a poll, for a name read
        # here (the engine folds repeated readings only of names it is asked
        # the increase of alone). Empty where not kept.
        self._series = series

    def series(self, name: str) -> Sequence[tuple[float, float]]:
        return () if self._series is None else self._series(name)


Rule = Callable[[GpuSignals, DiagnosisConfig, Trend], Verdict]
RULES: dict[Row, Rule] = {}


def rule(row: Row) -> Callable[[Rule], Rule]:
    """Register ``fn`` as the condition of ``row`` (one per row)."""
    if row not in ROWS:
        raise ImportError(f"rule for {row.key}, which is not in the diagnosis table")

    def register(fn: Rule) -> Rule:
        if row in RULES:
            raise ImportError(f"two rules for {row.key}: {RULES[row].__name__}, {fn.__name__}")
        RULES[row] = fn
        return fn

    return register
