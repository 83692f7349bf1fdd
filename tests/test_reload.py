"""A reload reaches the collectors through Poller.reconfigure: between two polls,
each running collector gets the new settings, those switched off are closed,
and reloads that follow each other before a poll build nothing twice."""

from __future__ import annotations

from gpu_exporter.collectors.processes import ProcessesCollector
from gpu_exporter.diagnosis.engine import Diagnosis
from tests.simnode import SimRun, settings


def _by_name(run: SimRun) -> dict[str, object]:
    return {c.name: c for c in run.exporter.poller.stages}


def test_reload_reconfigures_running_collectors_between_polls() -> None:
    run = SimRun("healthy")
    run.poll()
    before = _by_name(run)
    assert run.exporter.reload(lambda: settings(processes={"max_per_gpu": 1},
                                                diagnosis={"window": "5s"},
                                                poll={"interval": "3s"}))
    # Nothing changes under a poll: only the next one applies it.
    procs = before["processes"]
    assert isinstance(procs, ProcessesCollector) and procs.max_per_gpu == 32
    snap = run.poll(1)
    after = _by_name(run)
    assert after == before  # the same objects, reconfigured, not rebuilt
    diag = after["diagnosis"]
    assert isinstance(diag, Diagnosis) and diag.cfg.window == 5.0
    assert procs.max_per_gpu == 1
    assert run.exporter.poller.interval == 3.0
    assert len(snap.series("gpu_process_info")) == 8  # one process per GPU, 8 GPUs


def test_reloads_before_a_poll_build_once_and_close_what_they_drop() -> None:
    run = SimRun("healthy", collectors={"gpm": False})
    run.poll()
    assert run.exporter.reload(lambda: settings(collectors={"gpm": True}))
    first = {c.name: c for c in run.exporter.poller.planned()}["gpm"]
    closed: list[str] = []
    original = first.close

    def close() -> None:
        closed.append("gpm")
        original()

    first.close = close  # type: ignore[method-assign]
    # The same settings again: the pending collector is reused, not built twice.
    assert run.exporter.reload(lambda: settings(collectors={"gpm": True},
                                                poll={"interval": "3s"}))
    assert {c.name: c for c in run.exporter.poller.planned()}["gpm"] is first
    assert closed == []
    # Switched off before it ever ran: closed at once.
    assert run.exporter.reload(lambda: settings(collectors={"gpm": False}))
    assert closed == ["gpm"]
    run.poll(1)
    assert "gpm" not in _by_name(run)
