"""Which rows of a place are judged again together, and what lets their
last verdicts stand (engine.py): a row is judged again when what its rule
reads changes or its window moves it; otherwise its last verdict stands.

A group's rules read the place's signals but the host's (``board_of``), the
engine's counters, the clock and what the exporter remembers of the GPU;
its rows that read the host say what of it they read, and when
(``registry.READS_HOST``), so a host reading that moves every poll (memory in
use, CPU shares) has the rows that read it judged again, and no other."""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields

from gpu_exporter.diagnosis.counters import Counter
from gpu_exporter.diagnosis.registry import READS_HOST, HostRead
from gpu_exporter.diagnosis.rules import RULES, Rule
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import Row
from gpu_exporter.poll.readings import HostSignals


@dataclass(frozen=True, slots=True)
class Judged:
    """A row with what judging it every poll needs, looked up once: its rule
    and key (a Row hashes every field of it, and its key is built anew on
    each read; 38 rows a GPU every poll)."""

    row: Row
    rule: Rule
    key: str
    immediate: bool


def judged_rows(rows: tuple[Row, ...]) -> tuple[Judged, ...]:
    return tuple(Judged(row, RULES[row], row.key, row.immediate) for row in rows)


# What of a place's signals every rule may read but the host's (the rows
# that read the host say so: registry.READS_HOST), taken in one call.
BOARD_FIELDS = tuple(f.name for f in fields(GpuSignals) if f.name != "host")
board_of = operator.attrgetter(*BOARD_FIELDS)
_HOST_FIELDS = operator.attrgetter(*(f.name for f in fields(HostSignals)))


def host_absent(host: HostSignals | None) -> tuple[bool, ...] | None:
    """Which of the host's values are absent (None: no host reading): what of
    the host a row's reason can name. Its values move every poll; a reason
    names only what is missing (coverage.py)."""
    if host is None:
        return None
    return tuple(v is None or v is False for v in _HOST_FIELDS(host))


@dataclass(frozen=True, slots=True)
class Group:
    """Rows of a place judged again together: those whose rules read the same
    of its signals (``reads_host``: what of the host's they read; None: none)."""

    reads_host: HostRead | None
    at: tuple[int, ...]  # the rows' places in the table the place judges


def groups(judged: tuple[Judged, ...]) -> tuple[Group, ...]:
    by_read: dict[HostRead | None, list[int]] = {}
    for i, j in enumerate(judged):
        by_read.setdefault(READS_HOST.get(j.row), []).append(i)
    return tuple(Group(read, tuple(at)) for read, at in by_read.items())


@dataclass(slots=True)
class Standing:
    """A group's verdicts as last judged, and whether they stand: they do
    while what its rules read is the same and none of its rows is in a timed
    change (holding but not yet on, on but clearing, settling, a counter's
    older reading about to leave the window, a rule that read the clock)."""

    steady: bool = False
    host: object = None  # what of the host's signals its rules read (None: none)
    series_version: int = -1
    consulted: tuple[tuple[Counter, str, float], ...] = ()
    kept_every_poll: tuple[tuple[Counter, str, float], ...] = ()
    unjudged: tuple[int, ...] = ()
    on: tuple[int, ...] = ()
    # What settling its rows say while they stand: the latest time since when
    # a row off has been judged (None: none for less than the window), and
    # whether a row of the GPU's own went unjudged (its readings may be on
    # their way until every reader has answered).
    settle_since: float | None = None
    waits_first: bool = False
    # Polls its verdicts stood since its rows' bits were brought up to date,
    # and the last of them.
    lag: int = 0
    last_stood: float = 0.0
