"""What a rule is, and the registry of one rule per row of the table: the
rules register on their rows (``rule(t.THERMAL)(_thermal)``) in ``rules.py``,
``fault_rules.py`` and ``xid_rules.py``; ``rules.py`` checks at import that every
row has one."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from gpu_exporter.diagnosis.memory import GpuPast
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.poll.readings import HostSignals
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

    __slots__ = ("_now", "_series", "clock_read", "increase", "past")

    def __init__(self, increase: Callable[[str, float | None], float | None],
                 now: float, past: GpuPast | None = None,
                 series: Callable[[str], Sequence[tuple[float, float]]] | None = None) -> None:
        self.increase = increase
        self._now = now
        # Whether a rule asked the time: its verdict may change with the clock
        # alone (an Xid ageing out of the hold), so the engine judges it again
        # every poll instead of letting the verdict stand (engine.py).
        self.clock_read = False
        self.past = past
        # The (monotonic time, value) readings ``increase`` kept of a name within
        # the window, oldest first: how a level moved, not only how far (a
        # steady climb and one step rise as far): one a poll, for a name read
        # here (the engine folds repeated readings only of names it is asked
        # the increase of alone). Empty where not kept.
        self._series = series

    @property
    def now(self) -> float:
        """The current unix time."""
        self.clock_read = True
        return self._now

    def series(self, name: str) -> Sequence[tuple[float, float]]:
        return () if self._series is None else self._series(name)


Rule = Callable[[GpuSignals, DiagnosisConfig, Trend], Verdict]
RULES: dict[Row, Rule] = {}
# What of the node's host signals (``GpuSignals.host``) a rule reads for a
# place now, keyed by its row; a row not here never reads them. The host's
# readings move every poll on a real node (memory in use, CPU shares), so the
# engine judges a row again on a change of the host only where its rule reads
# what changed (engine.py: a verdict stands while what its rule reads is the
# same).


@dataclass(frozen=True, slots=True)
class HostRead:
    """A rule that reads all of the host's signals where ``when`` holds
    (None: on every place), and none of them elsewhere. ``when`` reads the
    place's own signals only: while those are the same, so is its answer,
    and the engine asks it again only when they move."""

    when: Callable[[GpuSignals, DiagnosisConfig], bool] | None = field(default=None,
                                                                       kw_only=True)

    def __call__(self, s: GpuSignals, cfg: DiagnosisConfig) -> object:
        """What the rule reads of the host on place ``s`` now."""
        if s.host is None:
            return None
        return self.read(s.host, self.when is None or self.when(s, cfg))

    def read(self, host: HostSignals, when: bool) -> object:
        """What it reads of ``host`` where ``when`` is this place's answer."""
        return host if when else None


READS_HOST: dict[Row, HostRead] = {}


@dataclass(frozen=True, slots=True)
class HostFields(HostRead):
    """A rule that reads these of the host's signals: on every place, or only
    where ``when`` holds; elsewhere only whether each is absent (its verdict
    there turns on nothing else of the host)."""

    names: tuple[str, ...]
    _values: Callable[[object], object] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        get = operator.attrgetter(*self.names)
        one = len(self.names) == 1  # attrgetter gives the value itself, not a tuple
        object.__setattr__(self, "_values", (lambda h: (get(h),)) if one else get)

    def read(self, host: HostSignals, when: bool) -> object:
        values = cast("tuple[object, ...]", self._values(host))
        if when:
            return values
        return ABSENT, tuple(v is None or v is False for v in values)


# Tags a host read that says only which values are absent: never equal to
# the values themselves (0.0 == False).
ABSENT = object()
# The host's readings a rule reads over the window (Trend.increase, .series),
# by name: how each is read from the host's signals. The engine keeps them once
# per node, every poll, whichever places' rows it judges: a row that stands on
# one GPU still finds the window's readings when a job comes to it.
HOST_TRENDS: dict[str, Callable[[HostSignals], float | None]] = {}


def host_trend(name: str, of: Callable[[HostSignals], float | None]) -> None:
    if name in HOST_TRENDS:
        raise ImportError(f"two host trends named {name}")
    HOST_TRENDS[name] = of


def rule(row: Row, reads_host: HostRead | None = None) -> Callable[[Rule], Rule]:
    """Register ``fn`` as the condition of ``row`` (one per row); ``reads_host``
    says when it reads the host's signals (None: never)."""
    if row not in ROWS:
        raise ImportError(f"rule for {row.key}, which is not in the diagnosis table")

    def register(fn: Rule) -> Rule:
        if row in RULES:
            raise ImportError(f"two rules for {row.key}: {RULES[row].__name__}, {fn.__name__}")
        RULES[row] = fn
        if reads_host is not None:
            READS_HOST[row] = reads_host
        return fn

    return register
