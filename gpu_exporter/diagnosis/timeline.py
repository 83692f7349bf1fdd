"""When each place (a GPU, or a MIG instance) was polled: the times its
rows' bits stand for, and how many of them lie within the window (engine.py)."""

from __future__ import annotations

import itertools
from collections import deque

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
