"""A reload ends where a start would have: for random pairs of valid settings
A and B, an exporter started with B and one started with A and reloaded to B
(SIGHUP's path, ``Exporter.reload``) export the same families with the same
label sets, make the same NVML calls per GPU once settled, and report the same
findings.

Both run on the same simulated node and virtual clock: the node's state is a
function of time alone, so from the same moment on the two must agree. "Once
settled" is what a start takes too: the diagnosis windows of B filled (a row
turns on after ``window`` and off after ``clear_after``) and one whole fact
period of polls (``FACT_READ_EVERY_POLLS``) counted, so every cadence's reads
fall into the window whatever its phase. The settings drawn are every one a
reload applies (``RESTART_SETTINGS`` are the rest): the poll interval, the
processes per GPU, the diagnosis switch, window and thresholds, each collector
on or off, and ``metrics.detail``.

A fixed seed and a few pairs in the default run; ``GPU_EXPORTER_LONG_TESTS=1``
draws many more.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_exporter.daemon import pipeline
from gpu_exporter.daemon.exporter import RESTART_SETTINGS
from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.facts.cadence import FACT_READ_EVERY_POLLS
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.settings.config import Settings
from gpu_exporter.simulator import load_scenario
from gpu_exporter.simulator.model import GpuCondition, Scenario, Step
from tests.simnode import SimRun
from tests.simnode import settings as exporter_settings

LONG = os.environ.get("GPU_EXPORTER_LONG_TESTS") == "1"
PAIRS = settings(max_examples=60 if LONG else 4, derandomize=not LONG, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Every interval drawn divides the moment of the reload: both exporters then
# poll at the same virtual times from it on.
INTERVALS = (1.0, 2.0, 4.0)
RELOAD_AT = 8.0
# The readers a reload may switch on and off (mig and attribution have
# nothing to read on this node, but are switched all the same).
SWITCHABLE = sorted(pipeline.COLLECTORS)
# Functions whose reads follow the clock, not the poll count (a sample every
# SAMPLES_EVERY_S): over the same span the two runs may differ by one read's
# calls at each end of it.
TIMED = {"nvmlDeviceGetSamples", "nvmlDeviceGetProcessUtilization", "nvmlGpmSampleGet",
         "nvmlGpmMetricsGet"}


# When the node's GPUs drop from busy to under-fed: after the reload, so a
# row turns on in both runs after it, each on its own history of polls.
SLOWS_DOWN_AT = 2 * RELOAD_AT


def node() -> Scenario:
    """Two GPUs of an under-fed node (memory held, CPU contention), busy at
    first and 15 % busy from SLOWS_DOWN_AT on: which row holds then depends on
    the thresholds drawn."""
    sc = load_scenario("memory-held-sm-underfed-cpu-contention")
    return sc.model_copy(update={
        "node": sc.node.model_copy(update={"gpus": 2}),
        "state": sc.state.model_copy(update={"utilization": 0.9}),
        "timeline": [Step(at=SLOWS_DOWN_AT, set=GpuCondition(utilization=0.15))],
        "processes": [p for p in sc.processes if set(p.gpus) <= {0, 1}]})


NODE = node()

settings_drawn = st.fixed_dictionaries({
    "poll": st.fixed_dictionaries({"interval": st.sampled_from(INTERVALS)}),
    "processes": st.fixed_dictionaries({"max_per_gpu": st.sampled_from((0, 1, 32))}),
    "metrics": st.fixed_dictionaries({"detail": st.booleans()}),
    "diagnosis": st.fixed_dictionaries({
        "enabled": st.booleans(),
        "window": st.sampled_from((4.0, 10.0, 20.0)),
        "clear_after": st.sampled_from((4.0, 10.0, 20.0)),
        # 15 % busy: idle below 0.2, busy at or above 0.1, under-fed between.
        "idle_utilization": st.sampled_from((0.05, 0.10, 0.20)),
        "busy_utilization": st.sampled_from((0.12, 0.75)),
        "cpu_pressure_high": st.sampled_from((0.30, 0.90)),
        "run_queue_wait_high": st.sampled_from((0.30, 0.90)),
    }),
    "collectors": st.dictionaries(st.sampled_from(SWITCHABLE), st.booleans(), max_size=5),
})


def _settings(drawn: dict[str, Any]) -> Settings:
    return exporter_settings(**drawn)


def exported(snap: Snapshot) -> set[tuple[str, tuple[str, ...]]]:
    """Every series of the snapshot: its family and its labels."""
    return {(name, s.labels) for name, samples in snap.samples.items() for s in samples}


def findings(snap: Snapshot) -> set[tuple[int, str, str, int | None]] | None:
    found = snap.derived(FINDINGS)
    if found is None:
        return None
    return {(f.gpu, f.row.symptom, f.row.cause, f.gpu_instance) for f in found}


def settle_polls(b: Settings) -> int:
    """Polls after the reload until both must agree: the diagnosis' window and
    clear_after of B passed (plus a poll each way for the hold ratio)."""
    d = b.diagnosis
    return math.ceil((d.window + d.clear_after) / b.poll.interval) + 2


def late(n: int, interval: float) -> float:
    """How late poll ``n`` after the reload starts: a fifth of the interval at
    first, less at each poll after, as a poll loop catching up after a slow
    poll (its schedule stays fixed-rate, so lateness never adds up). Each poll
    then comes a little less than an interval after the one before: a row's
    window is covered only where the diagnosis keeps enough of its poll times
    (``_span_slack``, which follows the interval). The same for both runs."""
    return 0.2 * interval * max(0.0, 1.0 - n / 128)


def run_to(run: SimRun, polls: int, interval: float) -> Counter[tuple[str, int]]:
    """Poll ``polls`` times at ``interval`` (each a little late); the NVML
    calls of the last FACT_READ_EVERY_POLLS of them, by function and GPU."""
    lib = run.node.library
    before: Counter[tuple[str, int]] = Counter()
    start = run.clock()
    for n in range(1, polls + 1):
        if n == polls - FACT_READ_EVERY_POLLS + 1:
            before = Counter(lib.calls_per_gpu)
        run.clock.advance(start + n * interval + late(n, interval) - run.clock())
        run.snapshot = run.exporter.poller.poll_once()
    return lib.calls_per_gpu - before


def compare(a_drawn: dict[str, Any], b_drawn: dict[str, Any]) -> None:
    a, b = _settings(a_drawn), _settings(b_drawn)
    settle = max(settle_polls(b), 2) + FACT_READ_EVERY_POLLS
    with SimRun(NODE, **b_drawn) as started:
        started.poll()
        started.poll(RELOAD_AT, interval=b.poll.interval)
        started_calls = run_to(started, settle, b.poll.interval)
        fresh = started.snapshot
    with SimRun(NODE, **a_drawn) as reloaded:
        reloaded.poll()
        reloaded.poll(RELOAD_AT, interval=a.poll.interval)
        assert reloaded.exporter.reload(lambda: b)
        reloaded_calls = run_to(reloaded, settle, b.poll.interval)
        after = reloaded.snapshot
    assert fresh is not None and after is not None
    assert fresh.timestamp == after.timestamp
    # The reload's own report differs by design (its timestamp's value, not
    # its labels); the polls counted differ with A's interval.
    missing = exported(fresh) - exported(after)
    extra = exported(after) - exported(fresh)
    assert not missing and not extra, (a_drawn, b_drawn, sorted(missing)[:8],
                                       sorted(extra)[:8])
    assert findings(after) == findings(fresh), (a_drawn, b_drawn)
    for key in started_calls.keys() | reloaded_calls.keys():
        if key[1] < 0:
            # A call through a handle this node never gave is not this run's:
            # under load, the first run's threads may still be ending while
            # the second runs (seen once in a full run, INVALID_ARGUMENT).
            continue
        slack = 4 if key[0] in TIMED else 0
        assert abs(started_calls[key] - reloaded_calls[key]) <= slack, (
            key, started_calls[key], reloaded_calls[key], a_drawn, b_drawn)


def test_the_settings_drawn_are_every_one_a_reload_applies() -> None:
    """The pairs cover what a reload can change: a section it applies that
    the draw never changes would go untested."""
    applied = set(Settings.model_fields) - set(RESTART_SETTINGS)
    drawn = {"poll", "processes", "metrics", "diagnosis", "collectors"}
    # log changes only the log's level and format, never what is exported.
    assert applied - {"log"} == drawn, applied


@PAIRS
@given(a=settings_drawn, b=settings_drawn)
def test_a_reload_to_b_exports_reads_and_finds_what_a_start_with_b_does(
        a: dict[str, Any], b: dict[str, Any]) -> None:
    compare(a, b)


def test_turning_detail_on_starts_the_rows_it_adds() -> None:
    """The pair the draw may take long to find: detail on by a reload, and
    every other setting the default's."""
    compare({}, {"metrics": {"detail": True}})
    compare({"metrics": {"detail": True}}, {})


def test_a_new_interval_and_window_match_a_start_with_them() -> None:
    compare({"poll": {"interval": 1.0}, "diagnosis": {"window": 20.0}},
            {"poll": {"interval": 4.0}, "diagnosis": {"window": 4.0, "clear_after": 4.0}})
    # The row turns on after the reload, on polls 4 s apart.
    compare({"poll": {"interval": 1.0}},
            {"poll": {"interval": 4.0}, "diagnosis": {"window": 4.0, "clear_after": 4.0}})
    compare({"poll": {"interval": 4.0}, "collectors": {"gpm": False, "samples": False}},
            {"poll": {"interval": 1.0}, "diagnosis": {"busy_utilization": 0.12}})
