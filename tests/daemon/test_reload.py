"""A reload reaches the collectors through Poller.reconfigure: between two polls,
each running collector gets the new settings, those switched off are closed,
and reloads that follow each other before a poll build nothing twice."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gpu_exporter.baseline import capture
from gpu_exporter.collectors.processes import ProcessesCollector
from gpu_exporter.daemon import pipeline
from gpu_exporter.daemon.logs import JsonFormatter, LogfmtFormatter
from gpu_exporter.daemon.poller import Poller
from gpu_exporter.diagnosis.engine import FINDINGS, Diagnosis
from gpu_exporter.nvml.session import NvmlSession
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import SnapshotBuilder
from gpu_exporter.poll.stage import Derivation, Stage
from gpu_exporter.settings.config import ConfigError, Settings
from tests.simnode import EPOCH, SimRun, VirtualClock, settings


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


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gpu_exporter.daemon.exporter"]


def _poller_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gpu_exporter.daemon.poller"]


def test_what_a_reload_says_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    """One line per reload, as an operator reads it: what was applied, what
    waits for the next start, that nothing changed, or why it failed and that
    the running configuration is kept."""
    caplog.set_level(logging.INFO, logger="gpu_exporter.daemon.exporter")
    with SimRun("healthy", collectors={"processes": False}) as run:
        run.poll()
        poller = run.exporter.poller
        same = settings(collectors={"processes": False})
        assert run.exporter.reload(lambda: same)
        assert _messages(caplog) == ["configuration reloaded: nothing changed"]
        caplog.clear()
        assert run.exporter.reload(lambda: settings(collectors={"processes": False},
                                                    poll={"interval": "3s"},
                                                    diagnosis={"window": "5s"},
                                                    web={"listen_address": "127.0.0.1:1"}))
        assert _messages(caplog) == [
            "configuration reloaded: applied poll, diagnosis",
            "configuration reload: web changed and takes effect at the next start"]
        caplog.clear()
        assert run.exporter.reload(lambda: settings(collectors={"processes": False},
                                                    poll={"interval": "3s"},
                                                    diagnosis={"window": "5s"},
                                                    web={"listen_address": "127.0.0.1:2"},
                                                    baseline_file="/nowhere.json"))
        assert _messages(caplog) == [
            "configuration reloaded: applied nothing",
            "configuration reload: web, baseline_file changed and takes effect at the next "
            "start"]
        assert poller.reload_success
        caplog.clear()

        def bad() -> Settings:
            raise ConfigError("poll.interval: not a duration")

        def broken() -> Settings:
            raise RuntimeError("the disk went away")

        for load, why in ((bad, "poll.interval: not a duration"),
                          (broken, "RuntimeError: the disk went away")):
            assert not run.exporter.reload(load)
            assert _messages(caplog) == ["configuration reload failed, keeping the running "
                                         f"configuration: {why}"]
            assert poller.reload_success is False
            assert run.poll(3, interval=3).get("gpu_exporter_config_last_reload_success") == 0.0
            caplog.clear()
        assert run.exporter.settings.poll.interval == 3.0  # the last good one runs on
        assert run.exporter.settings.baseline_file == Path("/nowhere.json")
        assert run.exporter.reload(lambda: same)
        assert poller.reload_success


class _Stage(Derivation):
    """A stage that records what the poller does with it."""

    name = "recorder"
    description = "records its calls"

    def __init__(self, name: str, fail: str = "") -> None:
        self.name = name  # type: ignore[misc]
        self.fail = fail
        self.calls: list[str] = []

    @classmethod
    def build(cls, rt: Runtime) -> _Stage:  # pragma: no cover - built by hand here
        raise NotImplementedError

    @classmethod
    def wanted(cls, settings: Settings) -> bool:  # pragma: no cover
        return True

    def collect(self, out: SnapshotBuilder) -> None:
        self.calls.append("collect")

    def reconfigure(self, settings: Settings) -> None:
        self.calls.append(f"reconfigure {settings.poll.interval:g}")
        if self.fail == "reconfigure":
            raise RuntimeError("bad settings")

    def close(self) -> None:
        self.calls.append("close")
        if self.fail == "close":
            raise RuntimeError("stuck")


def test_the_poller_swaps_stages_between_polls_closing_each_dropped_one_once(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpu_exporter.daemon.poller")
    clock = VirtualClock()
    kept, dropped, added = _Stage("kept"), _Stage("dropped", fail="close"), _Stage("added")
    poller = Poller([kept, dropped], 1.0, None, wall_clock=clock, monotonic=clock)
    poller.poll_once()
    poller.reconfigure([kept, added], settings(poll={"interval": "4s"}))
    assert poller.planned() == [kept, added] and poller.stages == [kept, dropped]
    assert dropped.calls == ["collect"]  # nothing changes under a poll
    snap = poller.poll_once()
    assert poller.stages == [kept, added] and poller.interval == 4.0
    assert kept.calls == ["collect", "reconfigure 4", "collect"]
    assert dropped.calls == ["collect", "close"]  # closed once, though it raised
    assert added.calls == ["reconfigure 4", "collect"]
    assert _poller_messages(caplog) == ["closing derivation dropped failed"]
    # A stage that appears starts counting its errors from 0.
    assert snap.get("gpu_exporter_collector_errors_total", collector="added") == 0.0
    poller.stop()
    assert kept.calls[-1] == "close" and added.calls[-1] == "close"
    assert dropped.calls == ["collect", "close"]


def test_a_reload_replaced_before_the_poll_closes_only_what_it_built(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = VirtualClock()
    running, first, second = _Stage("running"), _Stage("first", fail="close"), _Stage("second")
    poller = Poller([running], 1.0, None, wall_clock=clock, monotonic=clock)
    poller.reconfigure([running, first], settings())
    poller.reconfigure([running, second], settings())
    assert first.calls == ["close"]  # built for the first reload, never ran
    assert running.calls == [] and second.calls == []
    assert _poller_messages(caplog) == ["closing derivation first failed"]
    # A third reload drops the running stage: it runs until the next poll, and
    # is closed then, once; the second reload's own stage was never run.
    poller.reconfigure([first], settings())
    assert running.calls == [] and second.calls == ["close"]
    poller.poll_once()
    assert running.calls == ["close"] and poller.stages == [first]


def test_a_stage_that_refuses_new_settings_is_logged_and_keeps_running(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = VirtualClock()
    stubborn, other = _Stage("stubborn", fail="reconfigure"), _Stage("other")
    poller = Poller([stubborn, other], 1.0, None, wall_clock=clock, monotonic=clock)
    poller.reconfigure([stubborn, other], settings(poll={"interval": "2s"}))
    poller.poll_once()
    assert _poller_messages(caplog) == ["reconfiguring derivation stubborn failed"]
    assert other.calls == ["reconfigure 2", "collect"]
    assert stubborn.calls == ["reconfigure 2", "collect"] and poller.interval == 2.0


def test_a_reload_applies_the_detail_setting_and_the_call_timeout() -> None:
    clock = VirtualClock()
    session = NvmlSession(clock=clock, call_timeout=2.0)
    poller = Poller([], 1.0, session, wall_clock=clock, monotonic=clock)
    poller.reconfigure([], settings(metrics={"detail": True}, poll={"timeout": "0.5s"}))
    poller.poll_once()
    assert poller.detail is True and session.call_timeout == 0.5
    poller.reconfigure([], settings())
    poller.poll_once()
    assert poller.detail is False and session.call_timeout == 2.0
    # Without a per-call deadline (polls run inline) a reload sets none.
    inline = NvmlSession(clock=clock, call_timeout=None)
    poller = Poller([], 1.0, inline, wall_clock=clock, monotonic=clock)
    poller.reconfigure([], settings(poll={"timeout": "0.5s"}))
    poller.poll_once()
    assert inline.call_timeout is None


def test_collectors_switched_on_and_off_by_a_reload_are_said_and_run_on_the_clock(
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """A stage a reload switches on is built with the exporter's own clocks
    (here the virtual ones: a finding's start is the virtual time); one whose
    input is read at start (the baseline file) is not started by a reload,
    and keeps running through one."""
    caplog.set_level(logging.INFO, logger="gpu_exporter.daemon.exporter")
    with SimRun("ecc-uncorrectable", diagnosis={"enabled": False}) as run:
        run.poll()
        assert run.exporter.reload(lambda: settings())
        assert "derivation diagnosis switched on" in _messages(caplog)
        snap = run.poll(5)
        (finding, *_) = snap.derived(FINDINGS) or ()
        assert EPOCH <= finding.since <= run.clock()
        caplog.clear()
        assert run.exporter.reload(lambda: settings(collectors={"gpm": False}))
        assert "reader gpm switched off" in _messages(caplog)
    baseline = tmp_path / "baseline.json"
    with SimRun("healthy", collectors={"processes": False}) as run:
        baseline.write_text(json.dumps(capture([run.poll()])))
    with SimRun("healthy", collectors={"processes": False}, baseline_file=str(baseline)) as run:
        run.poll()
        assert run.exporter.reload(lambda: settings(collectors={"processes": False},
                                                    baseline_file=str(baseline),
                                                    poll={"interval": "2s"}))
        snap = run.poll(2, interval=2)
        assert snap.series("gpu_baseline_drift"), "the baseline check stopped on a reload"
    with SimRun("healthy", collectors={"processes": False}) as run:
        run.poll()
        assert run.exporter.reload(lambda: settings(collectors={"processes": False},
                                                    baseline_file=str(baseline)))
        assert not run.poll(1).series("gpu_baseline_drift")  # read at the next start


def test_a_reload_applies_the_log_format_and_level() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        with SimRun("healthy", collectors={"processes": False}) as run:
            run.poll()
            assert run.exporter.reload(lambda: settings(collectors={"processes": False},
                                                        log={"level": "debug",
                                                             "format": "json"}))
            (handler,) = root.handlers
            assert isinstance(handler.formatter, JsonFormatter)
            assert root.level == logging.DEBUG
            assert run.exporter.reload(lambda: settings(collectors={"processes": False},
                                                        log={"level": "warn"}))
            (handler,) = root.handlers
            assert isinstance(handler.formatter, LogfmtFormatter)
            assert root.level == logging.WARNING
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_a_stage_a_reload_switches_on_gets_the_exporters_runtime(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its clocks, whether polls run inline and whether udev is watched are the
    exporter's (a simulated node on a virtual clock keeps them all), with the
    new settings."""
    built: list[Runtime] = []
    kind = pipeline.STAGES["xid"]
    original = kind.build.__func__  # type: ignore[attr-defined]

    def build(cls: type[Stage], rt: Runtime) -> Stage:
        built.append(rt)
        return original(cls, rt)  # type: ignore[no-any-return]

    monkeypatch.setattr(kind, "build", classmethod(build))
    with SimRun("healthy", collectors={"processes": False, "xid": False}) as run:
        run.poll()
        new = settings(collectors={"processes": False}, poll={"interval": "3s"})
        assert run.exporter.reload(lambda: new)
        (rt,) = built
        mine = run.exporter.runtime
        assert (rt.session, rt.monotonic, rt.wall_clock, rt.synchronous, rt.watch_udev) == (
            mine.session, mine.monotonic, mine.wall_clock, True, False)
        assert rt.settings.poll.interval == 3.0
