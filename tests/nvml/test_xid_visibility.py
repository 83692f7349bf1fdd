"""Xids and NVML timeouts where an on-call engineer looks for them: the Xid of
a GPU that falls off the bus in the same scrape as the loss, and first events
that ``increase()`` can see (a zero series before them)."""

from __future__ import annotations

import time

import pytest

from gpu_exporter.collectors import xid as xid_collector
from gpu_exporter.nvml.events import EventSet
from tests.exposition import values as _values
from tests.simnode import SimRun

LOST_GPU = "5"


def _scrape_until_lost(run: SimRun, polls: int = 40) -> tuple[str, float]:
    """Poll every 0.5 s of virtual time and scrape after each poll; the first
    scrape that shows the GPU lost, and the wall time that poll took."""
    run.poll()
    for _ in range(polls):
        run.clock.advance(0.5)
        started = time.monotonic()
        run.exporter.poller.poll_once()
        took = time.monotonic() - started
        text = run.scrape()
        if _values(text, "gpu_up", gpu=LOST_GPU) == [0.0]:
            return text, took
    raise AssertionError("the GPU was never reported lost")


def _deliver_late(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The driver queues each event in the set ``seconds`` (real time) after
    the GPU's state changed: the delivery latency a real driver may have,
    made long enough that the poll that finds the loss drains the set before
    the GPU's Xid is in it. The wait blocks as NVML's does meanwhile."""
    wait = EventSet.wait
    queued: list[tuple[float, tuple[int, int, int, int | None]]] = []  # (visible from, event)

    def late(self: EventSet, timeout_ms: int) -> tuple[int, int, int, int | None] | None:
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            while (event := wait(self, 0)) is not None:
                queued.append((time.monotonic() + seconds, event))
            if queued and queued[0][0] <= time.monotonic():
                return queued.pop(0)[1]
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))

    monkeypatch.setattr(EventSet, "wait", late)


@pytest.mark.parametrize("latency", [0.0, 0.2], ids=["at once", "delivered 200 ms late"])
def test_a_gpu_falling_off_the_bus_shows_its_xid_in_the_same_scrape(
        monkeypatch: pytest.MonkeyPatch, latency: float) -> None:
    # As the daemon runs (a real-time wait): the poll that finds the GPU lost
    # waits on the event set for its Xid.
    _deliver_late(monkeypatch, latency)
    with SimRun("gpu-lost-xid-79", synchronous=False) as run:
        text, took = _scrape_until_lost(run)
    assert _values(text, "gpu_xid_errors_total", gpu=LOST_GPU, xid="79") == [1.0]
    assert _values(text, "gpu_xid_errors_all_total", gpu=LOST_GPU) == [1.0]
    # The wait is bounded and ends when the Xid is counted.
    assert took < xid_collector.LOSS_XID_WAIT_S + 1.0


def test_without_the_wait_the_xid_comes_a_poll_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the wait fixes: the driver queues the Xid after the poll drained
    the set, so the loss would be exported a poll before its Xid."""
    _deliver_late(monkeypatch, 0.2)
    monkeypatch.setattr(xid_collector, "LOSS_XID_WAIT_S", 0.0)
    with SimRun("gpu-lost-xid-79", synchronous=False) as run:
        text, _ = _scrape_until_lost(run)
        assert _values(text, "gpu_xid_errors_total", gpu=LOST_GPU, xid="79") == []
        time.sleep(0.5)
        run.clock.advance(0.5)
        run.exporter.poller.poll_once()
        assert _values(run.scrape(), "gpu_xid_errors_total", gpu=LOST_GPU, xid="79") == [1.0]


def test_a_gpu_lost_without_an_xid_delays_one_poll_by_the_bound_at_most() -> None:
    with SimRun("gpu-lost-hardware", synchronous=False) as run:
        text, took = _scrape_until_lost(run)
        assert _values(text, "gpu_xid_errors_all_total", gpu=LOST_GPU) == [0.0]
        assert took >= xid_collector.LOSS_XID_WAIT_S  # it waited for an Xid ...
        assert took < xid_collector.LOSS_XID_WAIT_S + 1.0  # ... no longer than the bound
        # Only the poll that finds the loss waits; the next ones do not.
        run.clock.advance(0.5)
        started = time.monotonic()
        run.exporter.poller.poll_once()
        assert time.monotonic() - started < xid_collector.LOSS_XID_WAIT_S


def test_the_first_xid_is_an_increase_from_zero() -> None:
    with SimRun("xid-error-application-fault") as run:
        before = run.poll(4.0)
        assert before.get("gpu_xid_errors_all_total", gpu="2") == 0.0
        # Every GPU starts at 0, not only the one that will fault.
        text = run.scrape()
        assert len(_values(text, "gpu_xid_errors_all_total")) == 8
        assert set(_values(text, "gpu_xid_errors_all_total")) == {0.0}
        # The per-code series cannot start at 0 (every code is too many series).
        assert _values(text, "gpu_xid_errors_total") == []
        after = run.poll(2.0)
        assert after.get("gpu_xid_errors_all_total", gpu="2") == 1.0
        assert after.get("gpu_xid_errors_total", gpu="2", xid="31") == 1.0
        assert after.get("gpu_xid_errors_all_total", gpu="3") == 0.0


def test_nvml_timeouts_start_at_zero_for_every_gpu() -> None:
    with SimRun("healthy") as run:
        text = run.poll() and run.scrape()
    assert _values(text, "gpu_exporter_nvml_timeouts_total") == [0.0] * 8
