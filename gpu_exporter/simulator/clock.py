"""A clock that only moves when told to: a minute of scenario in milliseconds,
and the same values every run."""

from __future__ import annotations


class VirtualClock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
