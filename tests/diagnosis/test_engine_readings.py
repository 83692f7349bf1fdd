"""The readings the engine keeps of each counter it takes increases of: only
where the value changed, with one more at the latest poll, so an idle counter
costs two readings however long the window. The increase a rule gets is the
one a reading kept every poll gives; a name a rule reads the readings of
(a steady climb, a count that rose in both halves) keeps every poll."""

from __future__ import annotations

import time
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_exporter.diagnosis.engine import Diagnosis
from gpu_exporter.diagnosis.workload_rules import _recurring, steady_climb
from gpu_exporter.settings.thresholds import DiagnosisConfig

CFG = DiagnosisConfig()
INTERVAL = 2.0


def every_poll(values: list[float], window: float) -> list[tuple[float | None, list]]:
    """What the engine answered when it kept a reading every poll: the
    increase and the readings left in the window, poll by poll."""
    series: deque[tuple[float, float]] = deque()
    out = []
    for i, value in enumerate(values):
        now = i * INTERVAL
        series.append((now, value))
        while len(series) > 1 and series[1][0] <= now - window:
            series.popleft()
        first = series[0][1]
        out.append((value if value < first else value - first, list(series)))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.0, 0.0, 1.0, 2.0, 5.0]), min_size=1, max_size=120)
       .map(lambda steps: [float(sum(steps[:i + 1])) for i in range(len(steps))]),
       st.booleans())
def test_the_increase_is_the_one_a_reading_a_poll_gives(values: list[float],
                                                        reset: bool) -> None:
    if reset and len(values) > 4:  # a counter reset halfway (a driver reload)
        half = len(values) // 2
        values = values[:half] + [v - values[half] for v in values[half:]]
    engine = Diagnosis(CFG, time.monotonic, time.time)
    reference = every_poll(values, CFG.window)
    for i, value in enumerate(values):
        now = i * INTERVAL
        increase = engine._increase_fn(0, now)("counter", value)
        level = engine._increase_fn(0, now)("level", value)
        read = engine._readings(0, "level")  # as Trend.series reads it, each poll
        expected_increase, polls = reference[i]
        assert increase == level == expected_increase
        kept = list(engine._counters[(0, "counter")])
        assert kept[-1] == polls[-1] and kept[0][1] == polls[0][1]
        assert list(read) == polls
        assert steady_climb(read) == steady_climb(polls)
        assert _recurring(read) == _recurring(polls)


def test_an_idle_counter_keeps_two_readings_however_long_it_runs() -> None:
    engine = Diagnosis(CFG, time.monotonic, time.time)
    polls = int(10 * CFG.window / INTERVAL)
    for i in range(polls):
        engine._increase_fn(3, i * INTERVAL)("nvlink_0_crc", 7.0)
    assert len(engine._counters[(3, "nvlink_0_crc")]) == 2
    # One that moves every poll keeps the window's polls, as before.
    for i in range(polls):
        engine._increase_fn(3, i * INTERVAL)("busy", float(i))
    assert len(engine._counters[(3, "busy")]) <= CFG.window / INTERVAL + 2
