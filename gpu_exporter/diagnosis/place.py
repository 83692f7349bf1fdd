"""What the engine keeps of each place (a GPU, or a MIG instance): when it
was polled (the times its rows' bits stand for, and how many of them lie
within the window), each row's state, and each group's standing verdicts."""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

from gpu_exporter.diagnosis.counters import Counter
from gpu_exporter.diagnosis.rules import Evidence
from gpu_exporter.diagnosis.standing import Standing
from gpu_exporter.diagnosis.table import Row
from gpu_exporter.facts.cadence import PROCESS_SAMPLES_EVERY_S, SAMPLES_EVERY_S

# How long after a place's first poll every reader has answered at least once
# with what needs two reads (GPM's ratios and the processes' samples every
# SAMPLES_EVERY_S; a process's CPU rate at its second poll): a row still
# unjudged then lacks its input for good, not for now.
FIRST_ANSWERS_S = max(SAMPLES_EVERY_S, PROCESS_SAMPLES_EVERY_S)


class PollTimeline:
    """When one GPU's rows were judged, oldest first: every row of a GPU is
    judged at every one of its polls, so the rows share these times."""

    __slots__ = ("_in_order", "_oldest", "answered", "in_window", "started", "times")

    def __init__(self, started: float) -> None:
        self.started = started  # the place's first poll
        # Its polls since FIRST_ANSWERS_S after the first: a reader's own clock
        # runs a little behind the diagnosis's within a poll, so its first
        # answer may come one poll after the diagnosis saw that time pass.
        self.answered = 0
        self.times: deque[float] = deque()
        self.in_window = 0  # how many of the newest times lie within the window
        # The window's start at the last poll, and whether the times kept are
        # in order: then the count goes on from the last poll's instead of
        # over every time kept (a window's polls, each poll of each place).
        self._oldest = float("-inf")
        self._in_order = True

    def add(self, now: float, span: float, window: float) -> None:
        times = self.times
        if times and now < times[-1]:
            self._in_order = False
        times.append(now)
        if now - self.started >= FIRST_ANSWERS_S:
            self.answered = min(self.answered + 1, 2)  # only "fewer than 2" is asked
        while times[0] < now - span:
            times.popleft()
        oldest = now - window
        if not self._in_order:
            self._in_order = all(a <= b for a, b in itertools.pairwise(times))
        if self._in_order and oldest >= self._oldest:
            n = min(self.in_window + 1, len(times))
            while n and times[-n] < oldest:
                n -= 1
        else:
            n = 0
            for t in reversed(times):
                if t < oldest:
                    break
                n += 1
        self._oldest = oldest
        self.in_window = n


@dataclass(slots=True)
class RowState:
    # Whether the condition held at each of this row's recent polls, newest in
    # bit 0, and how many of the GPU's polls (its PollTimeline) the bits cover:
    # two ints instead of a deque of (time, bool) tuples, a few hundred KiB on
    # an 8-GPU node with every row of the table.
    held: int = 0
    polls: int = 0
    active: bool = False
    since: float = 0.0
    last_true: float = 0.0
    # Since when (monotonic) the rule has judged at every poll; None while it
    # cannot judge. A row judged for less than the window may still turn on.
    judged_since: float | None = None
    # Since when its condition has held at every poll; None while it does not.
    holding_since: float | None = None
    evidence: Evidence = field(default_factory=dict)
    parts: tuple[Evidence, ...] = ()  # the verdict's parts: one finding each
    # gpu_diagnosis_active's label values, in catalog order (*GPU, symptom, cause),
    # built once: the collector adds one series per row and GPU every poll.
    labels: tuple[str, ...] = ()


class PlaceState:
    """One GPU's or MIG instance's rows, their timeline and standing verdicts."""

    __slots__ = ("board", "hosts", "kept_every_poll", "polls", "quiet_at", "read_since",
                 "skipped", "skipped_at", "standings", "states", "timeline", "unjudged",
                 "unjudged_at", "view_rows", "waits_first", "whens")

    def __init__(self, now: float) -> None:
        self.timeline = PollTimeline(now)
        self.states: list[RowState] = []
        self.standings: list[Standing] = []
        # How many of the timeline's polls each row's bits cover (the same
        # for every row of the place: each is judged at every one of them).
        self.polls = 0
        self.board: tuple[object, ...] | None = None  # what its rules read, last poll
        self.read_since = now  # since when that has held still
        self.hosts: tuple[object, ...] = ()  # what of the host each group read, last poll
        # The counters' series version at which every group last stood with
        # nothing to keep (-1: not so); the polls since that stood so, and
        # the last of them.
        self.quiet_at = -1
        self.skipped = 0
        self.skipped_at = 0.0
        self.kept_every_poll: list[tuple[Counter, str, float]] = []  # its groups', together
        self.waits_first = False  # a row of its groups waits for its first reading
        # Whether each group's rules read the host here (HostRead.when), as
        # of the last poll its signals moved (None: not asked yet).
        self.whens: tuple[bool, ...] | None = None
        self.unjudged: tuple[Row, ...] = ()  # as of the last poll that judged a row
        self.unjudged_at: list[int] | None = None  # their places in the table
        # The rows its job view lists as judged, and its unjudged rows then
        # (None: not listed yet).
        self.view_rows: tuple[tuple[Row, ...] | None, tuple[Row, ...]] = (None, ())
