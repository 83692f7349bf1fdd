"""The node page's history: a ring of fixed size per GPU that keeps the last
15 minutes of polls and never grows, however long the exporter runs."""

from __future__ import annotations

import tracemalloc

import pytest

import gpu_exporter.history as history_module
from gpu_exporter.facts.cadence import DEFAULT_POLL_INTERVAL_S
from gpu_exporter.history import MAX_GPUS, SERIES, History, slots_for
from gpu_exporter.poll.readings import GpmReading, GpuReading
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.simulator.model import GpuCondition, Node, Scenario
from tests.simnode import EPOCH, SimRun

# Everything but the device and GPM readers off, and the diagnosis: the history
# reads only those, and 10,000 polls of one GPU then take seconds.
_ONLY_DEVICE = {name: False for name in ("mig", "samples", "nvlink", "xid", "processes",
                                          "host", "pcie")}


def test_ten_thousand_polls_keep_the_same_bytes_and_the_last_window() -> None:
    busy = Scenario(name="one-gpu", node=Node(gpus=1, profile="h100-sxm5-80gb"),
                    state=GpuCondition(utilization=0.9), timeline=[], noise=True)
    with SimRun(busy, collectors=_ONLY_DEVICE, diagnosis={"enabled": False}) as run:
        hist = run.exporter.history
        # 15 minutes at the default interval
        assert hist.capacity == 900 / DEFAULT_POLL_INTERVAL_S
        run.poll(hist.capacity - 1)  # the first poll and the rest: the ring is full
        full = hist.nbytes()
        # One shared timestamp ring (8 bytes a slot) and one float32 per series and slot.
        assert full == hist.capacity * 8 + hist.capacity * 4 * len(SERIES)
        run.poll(9_000 - hist.capacity)
        # Whatever the ring module still holds from the last 1,000 polls is growth.
        tracemalloc.start()
        try:
            run.poll(1_000)
            held = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(True, history_module.__file__)])
        finally:
            tracemalloc.stop()
        assert sum(stat.size for stat in held.statistics("filename")) < 1024
        assert run.exporter.poller.polls >= 10_000
        assert hist.nbytes() == full
        window = hist.window(0)
        assert window is not None
        assert len(window.times) == hist.capacity  # the polls come 1 s apart here
        now = run.clock()
        assert window.times[-1] == now and window.times[0] == now - (hist.capacity - 1)
        assert list(window.times) == sorted(window.times)
        assert all(v is not None and 0.5 < v <= 1.0 for v in window.series["utilization"])
        assert set(window.series["power_limit_watts"]) == {700.0}


def _snap(t: float, gpus: dict[int, GpuReading]) -> Snapshot:
    out = SnapshotBuilder(t)
    out.readings.gpus = gpus
    return out.build()


def test_a_gpu_not_read_has_gaps_and_one_gone_for_a_window_is_dropped() -> None:
    hist = History(4)
    hist.record(_snap(EPOCH, {0: GpuReading(0, "u0", True, utilization=0.5),
                              1: GpuReading(1, "u1", True, utilization=0.25)}))
    # GPU 1 lost: NVML lists it, reads nothing.
    hist.record(_snap(EPOCH + 1, {0: GpuReading(0, "u0", True, utilization=0.5),
                                  1: GpuReading(1, "u1", False)}))
    w1 = hist.window(1)
    assert w1 is not None and w1.series["utilization"] == (0.25, None)
    assert w1.series["sm_active"] == (None, None)  # no GPM reading at all
    # GPU 1 no longer listed for a whole window (4 polls): its ring is given back.
    for k in range(2, 6):
        hist.record(_snap(EPOCH + k, {0: GpuReading(0, "u0", True, utilization=0.5)}))
    assert hist.gpus() == [0]
    assert hist.window(1) is None
    w0 = hist.window(0)
    assert w0 is not None and w0.times == (EPOCH + 2, EPOCH + 3, EPOCH + 4, EPOCH + 5)


def test_gpu_indexes_beyond_the_bound_are_not_kept() -> None:
    hist = History(2)
    hist.record(_snap(EPOCH, {i: GpuReading(i, f"u{i}", True) for i in range(MAX_GPUS + 10)}))
    assert len(hist.gpus()) == MAX_GPUS
    assert hist.nbytes() == 2 * 8 + MAX_GPUS * 2 * 4 * len(SERIES)


@pytest.mark.parametrize(("interval", "slots"), [(1.0, 900), (15.0, 60), (60.0, 60),
                                                 (0.1, 3600), (0.5, 1800)])
def test_the_ring_size_follows_the_interval_within_bounds(interval: float, slots: int) -> None:
    assert slots_for(interval) == slots


@pytest.mark.parametrize(("filled", "points", "picked"), [
    (10, 4, [0, 3, 6, 9]),  # evenly spaced, the oldest and the newest in
    (10, 10, list(range(10))),  # as many as kept: every one
    (10, 11, list(range(10))),
    (10, 1, list(range(10))),  # one point is no line: every one
    (10, 2, [0, 9]),  # the oldest and the newest
    (7, 3, [0, 3, 6]),
    (9, 5, [0, 2, 4, 6, 8]),
])
def test_a_window_thinned_to_points_keeps_the_ends_and_spaces_the_rest(
        filled: int, points: int, picked: list[int]) -> None:
    hist = History(10)
    for k in range(filled):
        hist.record(_snap(EPOCH + k, {0: GpuReading(0, "u0", True, utilization=k / 100)}))
    window = hist.window(0, points)
    assert window is not None
    assert window.times == tuple(EPOCH + k for k in picked)
    assert window.series["utilization"] == pytest.approx([k / 100 for k in picked])


def test_a_ring_of_one_slot_keeps_the_last_poll_and_none_is_refused() -> None:
    with pytest.raises(ValueError) as err:
        History(0)
    assert str(err.value) == "the history needs at least one slot"
    hist = History(1)
    for k in range(3):
        hist.record(_snap(EPOCH + k, {0: GpuReading(0, "u0", True, utilization=k / 10)}))
    window = hist.window(0)
    assert window is not None
    assert window.times == (EPOCH + 2,) and window.series["utilization"] == (
        pytest.approx(0.2),)


def test_a_gpu_beyond_the_bound_does_not_stop_the_others_being_recorded() -> None:
    hist = History(2)
    hist.record(_snap(EPOCH, {i: GpuReading(i, f"u{i}", True) for i in range(MAX_GPUS)}))
    # A new index first in the poll: skipped, and every kept GPU still recorded.
    late = {MAX_GPUS + 5: GpuReading(MAX_GPUS + 5, "new", True, utilization=0.5)}
    late |= {i: GpuReading(i, f"u{i}", True, utilization=0.25) for i in range(MAX_GPUS)}
    hist.record(_snap(EPOCH + 1, late))
    assert MAX_GPUS + 5 not in hist.gpus()
    for i in range(MAX_GPUS):
        window = hist.window(i)
        assert window is not None and window.series["utilization"][-1] == 0.25, i


def test_sm_activity_is_kept_from_the_gpm_reading_of_the_same_gpu() -> None:
    hist = History(3)
    out = SnapshotBuilder(EPOCH)
    out.readings.gpus = {0: GpuReading(0, "u0", True), 1: GpuReading(1, "u1", True)}
    out.readings.gpm = {1: GpmReading(sm_active=0.25, sm_occupancy=None, tensor_active=None,
                                       dram_active=None)}
    hist.record(out.build())
    w0, w1 = hist.window(0), hist.window(1)
    assert w0 is not None and w1 is not None
    assert w0.series["sm_active"] == (None,) and w1.series["sm_active"] == (0.25,)
