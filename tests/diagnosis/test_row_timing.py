"""A row's timing (diagnosis/engine.py): on after its condition held at
``hold_ratio`` of the polls of a window the polls cover, off after
``clear_after`` clear. The engine keeps each row's recent polls as bits beside
its GPU's poll times; here that is held to the plain reading of the rule, a
list of (time, held) kept for the span, on irregular polls (late ones, gaps,
a GPU that vanished for a while) and a configuration reloaded midway."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_exporter.diagnosis.engine import FINDINGS, Diagnosis
from gpu_exporter.diagnosis.place import PollTimeline, RowState
from gpu_exporter.diagnosis.rules import Verdict
from gpu_exporter.diagnosis.table import ROWS
from gpu_exporter.settings.thresholds import DiagnosisConfig
from tests.simnode import SimRun

ROW = next(r for r in ROWS if not r.immediate)


@dataclass
class Plain:
    """The rule as written: every poll's (time, held), trimmed to the span."""

    history: list[tuple[float, bool]] = field(default_factory=list)
    active: bool = False
    last_true: float = 0.0

    def update(self, cfg: DiagnosisConfig, now: float, holds: bool) -> bool:
        span = max(cfg.window, cfg.clear_after) + 1.0
        self.history = [(t, h) for t, h in [*self.history, (now, holds)] if t >= now - span]
        if holds:
            self.last_true = now
        if self.active:
            if not holds and now - self.last_true >= cfg.clear_after:
                self.active = False
            return self.active
        if not holds:
            return False
        covered = self.history[0][0] <= now - cfg.window
        recent = [h for t, h in self.history if t >= now - cfg.window]
        if not covered or sum(recent) < cfg.hold_ratio * len(recent):
            return False
        self.active = True
        return True


polls = st.lists(st.tuples(st.sampled_from([0.5, 1.0, 2.0, 2.0, 2.0, 3.0, 7.0, 45.0]),
                           st.booleans()), min_size=1, max_size=120)


@settings(max_examples=300, deadline=None)
@given(polls=polls, reload_at=st.integers(0, 120),
       window=st.sampled_from([0.0, 10.0, 30.0]), clear=st.sampled_from([0.0, 5.0, 30.0]),
       ratio=st.sampled_from([0.5, 0.9, 1.0]))
def test_rows_turn_on_and_off_as_the_rule_reads(
        polls: list[tuple[float, bool]], reload_at: int, window: float, clear: float,
        ratio: float) -> None:
    first = DiagnosisConfig()
    engine = Diagnosis(first, time.monotonic, time.time)
    now = 1000.0
    timeline, state, plain = PollTimeline(now), RowState(), Plain()
    for i, (step, holds) in enumerate(polls):
        if i == reload_at:
            engine.cfg = DiagnosisConfig(window=window, clear_after=clear, hold_ratio=ratio)
        now += step
        cfg = engine.cfg
        timeline.add(now, max(cfg.window, cfg.clear_after) + 1.0, cfg.window)
        on = engine._update(state, Verdict(holds, {}), ROW, timeline, now, now)
        assert on is plain.update(cfg, now, holds), (i, now)
        assert state.active is plain.active


def test_a_row_that_holds_turns_on_whatever_the_polls_phase() -> None:
    # Polls every 2 s, early, on time or late, and a 5 s window: a
    # condition that holds at every poll turns its row on (mixed's GPU 4
    # looks busy while its SMs idle), however the polls fall on the window.
    for step in (1.9, 2.0, 2.1, 2.4):
        with SimRun("mixed", diagnosis={"window": 5.0, "clear_after": 5.0},
                    poll={"interval": 2.0}) as run:
            snap = run.poll(40, interval=step)
            found = {(f.gpu, f.row.cause) for f in snap.derived(FINDINGS) or ()}
            assert (4, "small_kernels") in found, step
