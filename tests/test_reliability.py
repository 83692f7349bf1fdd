"""The exporter keeps serving the truth when the node is sick: a hung NVML call
on one GPU, a GPU lost and coming back, NO_PERMISSION on process queries."""

from __future__ import annotations

import logging
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_exporter.daemon.exporter import Exporter
from gpu_exporter.facts.cadence import DEFAULT_POLL_INTERVAL_S
from gpu_exporter.nvml.errors import Return
from gpu_exporter.poll.catalog import metric
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.settings.config import Settings, load
from gpu_exporter.simulator import SimulatedNode, load_scenario
from gpu_exporter.simulator.model import Scenario
from tests.procs import free_port, start, wait_http
from tests.simnode import SimRun, settings

# The hung-call tests wait for what they look at (the GPU marked hung) rather
# than sleeping a fixed time: on a loaded 2-core CI machine the first poll alone
# took 4 s. The poll timeout is one a loaded machine's ordinary reads stay well
# within (with 0.3 s, CPU-starved polls of healthy GPUs were given up on too).
HUNG_POLL = {"interval": "0.5s", "timeout": "1s"}
# What "answers while a GPU hangs" means in wall time: wide, for loaded machines,
# and still well below the hangs (10 s where the test waits for the GPU to come
# back, 20 s otherwise), which a scrape or poll loop that waited for the stuck
# call would show.
WHILE_HUNG_S = 5.0
HANG_S = 20
HANG_AND_RECOVER_S = 10


def _wait_until(what: str, holds: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not holds():
        if time.monotonic() > deadline:
            pytest.fail(f"not seen within {timeout:g}s: {what}")
        time.sleep(0.05)


def _marked_hung(exporter: Exporter, gpu: int) -> Callable[[], bool]:
    def check() -> bool:
        snap = exporter.poller.latest
        return snap is not None and snap.get("gpu_up", gpu=str(gpu)) == 0.0
    return check


def _poll_threads() -> int:
    """Threads polling NVML; HTTP request threads come and go and are not counted."""
    return sum(t.name.startswith("nvml-poll") for t in threading.enumerate())


def test_a_hung_call_on_one_gpu_does_not_stop_the_others_or_metrics() -> None:
    scenario = Scenario(
        name="hang", node={"gpus": 3}, state={"utilization": 0.9},
        timeline=[{"at": "1s", "gpus": [1],
                   "set": {"hangs": {"nvmlDeviceGetTemperature": HANG_AND_RECOVER_S}}},
                  {"at": "3s", "gpus": [1], "set": {"hangs": {"nvmlDeviceGetTemperature": 0}}}])
    node = SimulatedNode(scenario)
    exporter = Exporter(settings(poll=HUNG_POLL), node)
    exporter.start()
    url = f"http://127.0.0.1:{exporter.port}/metrics"
    try:
        _wait_until("GPU 1 marked hung", _marked_hung(exporter, 1))
        threads_before = _poll_threads()
        latencies, texts = [], []
        for _ in range(20):
            t0 = time.monotonic()
            with urllib.request.urlopen(url, timeout=5) as resp:
                texts.append(resp.read().decode())
            latencies.append(time.monotonic() - t0)
            time.sleep(0.1)
        threads_after = _poll_threads()
        snap = exporter.poller.latest
        assert snap is not None
        assert max(latencies) < WHILE_HUNG_S
        assert snap.get("gpu_up", gpu="1") == 0.0
        assert snap.get("gpu_up", gpu="0") == 1.0 and snap.get("gpu_up", gpu="2") == 1.0
        assert snap.get("gpu_power_watts", gpu="1") is None
        assert snap.get("gpu_exporter_nvml_timeouts_total", gpu="1") == 1.0
        # Polls go on (fresh timestamps) and no threads pile up behind the stuck call.
        assert time.time() - snap.get("gpu_exporter_last_poll_timestamp_seconds") < WHILE_HUNG_S
        assert threads_after <= threads_before + 1
        # Once the stuck call returns, the GPU reports again.
        deadline = time.monotonic() + HANG_AND_RECOVER_S + 20
        while time.monotonic() < deadline:
            snap = exporter.poller.latest
            if snap is not None and snap.get("gpu_up", gpu="1") == 1.0:
                break
            time.sleep(0.2)
        assert snap is not None and snap.get("gpu_up", gpu="1") == 1.0
        assert snap.get("gpu_power_watts", gpu="1") is not None
    finally:
        exporter.stop()


def test_no_permission_on_one_call_degrades_only_that_series() -> None:
    scenario = Scenario(name="noperm", node={"gpus": 2}, state={
        "utilization": 0.9, "errors": {"nvmlDeviceGetTemperature": "NO_PERMISSION"}})
    with SimRun(scenario) as run:
        snap = run.poll(3)
        calls = run.node.library.calls["nvmlDeviceGetTemperature"]
    assert [lab["sensor"] for lab, _ in snap.series("gpu_temperature_celsius")] == ["memory"] * 2
    assert snap.get("gpu_up", gpu="0") == 1.0 and snap.series("gpu_power_watts")
    assert calls == 2  # documented degrade: asked once per GPU, not every poll


# --- NVML faults, one built-in scenario each ------------------------------------------------
def _messages(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def _own_metrics_only(snap: Snapshot) -> None:
    """NVML is down: no series read through NVML; the exporter's, the host's and
    the kernel's view of the GPUs' PCIe links (sysfs) are still there."""
    assert snap.get("gpu_exporter_nvml_up") == 0.0
    from_nvml = [n for n, samples in snap.samples.items() if samples and metric(n).collector
                 in ("device", "mig", "gpm", "samples", "nvlink", "xid", "processes")]
    assert not from_nvml
    assert snap.get("gpu_exporter_collector_success", collector="device") == 1.0
    assert snap.get("gpu_exporter_collector_success", collector="host") == 1.0
    assert snap.series("gpu_host_cpu_seconds_total")


@pytest.mark.parametrize("scenario,hint", [
    ("fault-library-missing", "libnvidia-ml.so.1 was not found"),
    ("fault-driver-not-loaded", "kernel driver is not loaded"),
])
def test_nvml_missing_serves_own_and_host_metrics_and_says_why_once(
        scenario: str, hint: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with SimRun(scenario) as run:
        snap = run.poll(120)
        inits = run.node.library.calls["nvmlInitWithFlags"]
    _own_metrics_only(snap)
    lines = _messages(caplog, "NVML unavailable")
    assert len(lines) == 1 and hint in lines[0]
    if scenario == "fault-driver-not-loaded":
        assert 5 <= inits <= 9  # 1, 2, 4 ... 60 s apart: not once a second


def test_init_failing_then_succeeding_comes_up_without_a_restart(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with SimRun("fault-init-fails-then-succeeds") as run:
        early = run.poll(15)
        assert early.get("gpu_exporter_nvml_up") == 0.0
        # The driver loads at 20 s; the next try (31 s on the 1, 2, 4, 8, 16 s
        # backoff) brings NVML up.
        snap = run.poll(20)
    assert snap.get("gpu_exporter_nvml_up") == 1.0
    assert {v for _, v in snap.series("gpu_up")} == {1.0}
    assert len(snap.series("gpu_up")) == 8
    assert len(_messages(caplog, "NVML unavailable")) == 1
    assert _messages(caplog, "NVML is available again")


def test_driver_upgraded_underneath_logs_clearly_and_retries_periodically(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with SimRun("fault-driver-upgraded") as run:
        before = run.poll(8)
        assert before.get("gpu_exporter_nvml_up") == 1.0 and before.series("gpu_power_watts")
        inits_before = run.node.library.calls["nvmlInitWithFlags"]
        during = run.poll(50)  # t = 58 s: mismatch since 10 s
        inits_during = run.node.library.calls["nvmlInitWithFlags"] - inits_before
        after = run.poll(40)  # t = 98 s: agreed again since 60 s
    _own_metrics_only(during)
    # Retried periodically with backoff (11, 13, 17, 25, 41 s), not every poll.
    assert 3 <= inits_during <= 7
    lines = _messages(caplog, "differ in version")
    assert len(lines) == 1, lines  # one clear line, not one per retry
    assert "LIB_RM_VERSION_MISMATCH" in lines[0]
    assert after.get("gpu_exporter_nvml_up") == 1.0
    assert len(after.series("gpu_up")) == 8 and {v for _, v in after.series("gpu_up")} == {1.0}


def test_a_library_that_inits_but_fails_every_read_is_not_retried_every_poll(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with SimRun("fault-nvml-flapping") as run:
        snap = run.poll(300)
        inits = run.node.library.calls["nvmlInitWithFlags"]
    assert snap.get("gpu_exporter_nvml_up") == 0.0
    assert not snap.series("gpu_up")
    # 0, 1, 3, 7, 15, 31, 63, 123, 183, 243 s: ten inits in five minutes, not 300.
    assert inits <= 11
    assert len(_messages(caplog, "NVML stopped answering")) == 1


def test_the_backoff_starts_afresh_after_nvml_worked_for_a_poll() -> None:
    scenario = Scenario(name="twice", node={"gpus": 1}, state={"utilization": 0.5}, timeline=[
        {"at": "5s", "nvml": "lib_rm_version_mismatch"}, {"at": "40s", "nvml": "ok"},
        {"at": "200s", "nvml": "lib_rm_version_mismatch"}, {"at": "202s", "nvml": "ok"}])
    with SimRun(scenario) as run:
        run.poll(150)
        assert run.snapshot is not None and run.snapshot.get("gpu_exporter_nvml_up") == 1.0
        # A fresh fault starts at 1 s again: back within seconds of the fix.
        snap = run.poll(55)  # t = 205 s
    assert snap.get("gpu_exporter_nvml_up") == 1.0


def test_one_gpu_lost_mid_run_and_coming_back(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with SimRun("fault-gpu-lost-and-back") as run:
        before = run.poll(5)
        lost = run.poll(10)  # t = 15 s
        back = run.poll(30)  # t = 45 s
    assert before.get("gpu_up", gpu="3") == 1.0
    assert lost.get("gpu_up", gpu="3") == 0.0
    assert lost.get("gpu_power_watts", gpu="3") is None
    assert lost.get("gpu_memory_used_bytes", gpu="3") is None
    assert not [lab for lab, _ in lost.series("gpu_process_info") if lab["gpu"] == "3"]
    assert all(lost.get("gpu_up", gpu=str(i)) == 1.0 for i in range(8) if i != 3)
    assert lost.get("gpu_exporter_collector_success", collector="device") == 1.0
    assert back.get("gpu_up", gpu="3") == 1.0
    assert back.get("gpu_power_watts", gpu="3") is not None
    assert [lab for lab, _ in back.series("gpu_process_info") if lab["gpu"] == "3"]
    assert len(_messages(caplog, "is lost")) == 1
    assert _messages(caplog, "answers again")


def test_no_permission_on_process_queries_degrades_to_no_process_series(
        caplog: pytest.LogCaptureFixture) -> None:
    with SimRun("fault-process-no-permission") as run:
        snap = run.poll(10)
        calls = run.node.library.calls
        listed = calls["nvmlDeviceGetComputeRunningProcesses_v3"]
    assert not snap.series("gpu_process_info")
    assert not snap.series("gpu_process_memory_used_bytes")
    assert snap.get("gpu_exporter_collector_success", collector="processes") == 1.0
    # Everything else is still exported.
    assert {v for _, v in snap.series("gpu_up")} == {1.0}
    for name in ("gpu_power_watts", "gpu_busy_seconds_total", "gpu_memory_used_bytes",
                 "gpu_clock_hertz", "gpu_host_cpu_seconds_total"):
        assert snap.series(name), name
    assert listed == 8  # asked once per GPU, not every poll
    warnings = _messages(caplog, "no permission to read processes_compute")
    assert len(warnings) == 8


def test_the_hung_call_scenario_keeps_metrics_answering() -> None:
    """fault-hung-call, its timeline brought forward: GPU 2's temperature reads block."""
    scenario = load_scenario("fault-hung-call")
    assert scenario.timeline[0].set.hangs == {"nvmlDeviceGetTemperature": HANG_S}
    early = scenario.model_copy(update={"timeline": [
        scenario.timeline[0].model_copy(update={"at": 0.5}),
        scenario.timeline[1].model_copy(update={"at": 3.0})]})
    exporter = Exporter(settings(poll=HUNG_POLL), SimulatedNode(early))
    exporter.start()
    url = f"http://127.0.0.1:{exporter.port}/metrics"
    try:
        _wait_until("GPU 2 marked hung", _marked_hung(exporter, 2))
        threads = []
        for _ in range(10):
            t0 = time.monotonic()
            with urllib.request.urlopen(url, timeout=5) as resp:
                text = resp.read().decode()
            assert time.monotonic() - t0 < WHILE_HUNG_S  # answers while GPU 2 hangs
            threads.append(_poll_threads())
            time.sleep(0.1)
        snap = exporter.poller.latest
        assert snap is not None
        assert snap.get("gpu_up", gpu="2") == 0.0
        assert all(snap.get("gpu_up", gpu=str(i)) == 1.0 for i in range(8) if i != 2)
        assert 'gpu_exporter_nvml_timeouts_total{gpu="2"} 1.0' in text
        assert max(threads) - min(threads) <= 1  # no thread piles up behind the stuck call
        assert time.time() - snap.get("gpu_exporter_last_poll_timestamp_seconds") < WHILE_HUNG_S
    finally:
        exporter.stop()


# --- lifecycle: SIGHUP reloads the configuration; SIGTERM is not held up by a hung call ----
def _loader(path: Path) -> Callable[[], Settings]:
    return lambda: load({"web": {"listen_address": "127.0.0.1:0"}}, path)


def test_reload_applies_what_can_change_at_run_time(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    path = tmp_path / "gpu-exporter.yaml"
    path.write_text("poll: {interval: 1s}\n")
    try:
        _reload_in_process(path, caplog)
    finally:  # the reload set up the process's logging: put the test's back
        root.handlers[:] = handlers
        root.setLevel(level)


def _reload_in_process(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with SimRun("healthy", **_loader(path)().model_dump(exclude_defaults=True)) as run:
        exporter = run.exporter
        first = run.poll(3)
        assert first.get("gpu_exporter_config_last_reload_success") == 1.0
        started = first.get("gpu_exporter_config_last_reload_success_timestamp_seconds")
        assert first.get("gpu_exporter_collector_success", collector="gpm") == 1.0
        assert len(first.series("gpu_process_info")) == 8
        path.write_text("poll: {interval: 3s, timeout: 1s}\nlog: {level: debug}\n"
                        "processes: {max_per_gpu: 0}\ndiagnosis: {window: 5s}\n"
                        "collectors: {gpm: false}\nweb: {max_requests: 4}\n")
        assert exporter.reload(_loader(path))
        reloaded_at = run.clock()
        snap = run.poll(2, interval=3)
        assert snap.get("gpu_exporter_config_last_reload_success") == 1.0
        assert snap.get("gpu_exporter_config_last_reload_success_timestamp_seconds") == \
            reloaded_at > started  # type: ignore[operator]
        assert exporter.poller.interval == 3.0
        assert logging.getLogger().level == logging.DEBUG
        logging.getLogger().addHandler(caplog.handler)
        assert snap.get("gpu_exporter_collector_success", collector="gpm") is None
        assert not snap.series("gpu_sm_active_ratio")
        assert not snap.series("gpu_process_info")
        assert len(snap.series("gpu_process_series_dropped_total")) == 8
        diag = next(c for c in exporter.poller.stages if c.name == "diagnosis")
        assert diag.cfg.window == 5.0  # type: ignore[attr-defined]
        assert exporter.settings.web.max_requests == 4  # recorded; applied at the next start
        restart = _messages(caplog, "takes effect at the next start")
        assert len(restart) == 1 and "web" in restart[0]

        # A bad file: one line, the running configuration kept, the metric says so.
        caplog.clear()
        path.write_text("poll: {interval: never}\n")
        assert not exporter.reload(_loader(path))
        snap = run.poll(2, interval=3)
        assert snap.get("gpu_exporter_config_last_reload_success") == 0.0
        assert snap.get("gpu_exporter_config_last_reload_success_timestamp_seconds") == \
            reloaded_at
        assert exporter.poller.interval == 3.0  # the running configuration kept
        failed = _messages(caplog, "configuration reload failed")
        assert len(failed) == 1 and "poll.interval" in failed[0] and "\n" not in failed[0]

        # Switched back on: the collector is built again and reports.
        path.write_text("collectors: {gpm: true}\n")
        assert exporter.reload(_loader(path))
        snap = run.poll(2)
        assert snap.get("gpu_exporter_config_last_reload_success") == 1.0
        assert snap.get("gpu_exporter_collector_success", collector="gpm") == 1.0
        assert len(snap.series("gpu_process_info")) == 8
        assert exporter.poller.interval == DEFAULT_POLL_INTERVAL_S


def test_sighup_reloads_the_config_file_of_a_running_process(tmp_path: Path) -> None:
    path = tmp_path / "gpu-exporter.yaml"
    path.write_text("poll: {interval: 0.2s}\n")
    port = free_port()
    proc = start(["--simulate", "healthy", "--config.file", str(path),
                  "--web.listen-address", f"127.0.0.1:{port}"])
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        _wait_metrics(url, lambda t: 'gpu_exporter_collector_success{collector="gpm"} 1.0' in t)
        path.write_text("poll: {interval: 0.2s}\ncollectors: {gpm: false}\n")
        proc.send_signal(signal.SIGHUP)
        text = _wait_metrics(url, lambda t: 'collector="gpm"' not in t)
        assert "gpu_exporter_config_last_reload_success 1.0" in text
        path.write_text("poll: [\n")  # broken YAML
        proc.send_signal(signal.SIGHUP)
        text = _wait_metrics(url, lambda t: "gpu_exporter_config_last_reload_success 0.0" in t)
        assert 'collector="gpm"' not in text  # the running configuration is kept
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
    log = proc.stderr.read()  # type: ignore[union-attr]
    assert code == 0
    assert "Traceback" not in log
    failed = [line for line in log.splitlines() if "configuration reload failed" in line]
    assert len(failed) == 1 and "line 2" in failed[0]


def _wait_metrics(url: str, done: Callable[[str], bool], timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = wait_http(url)
        if done(text) or time.monotonic() > deadline:
            assert done(text), text[-2000:]
            return text
        time.sleep(0.1)


def test_sigterm_stops_within_5s_even_while_an_nvml_call_hangs(tmp_path: Path) -> None:
    path = tmp_path / "hang.yaml"
    path.write_text("name: hang\nextends: healthy\ntimeline:\n  - at: 0.5s\n    gpus: [2]\n"
                    "    set: {hangs: {nvmlDeviceGetTemperature: 60}}\n")
    port = free_port()
    proc = start(["--simulate", str(path), "--web.listen-address", f"127.0.0.1:{port}",
                  "--poll.interval", "0.2s", "--poll.timeout", "0.3s"])
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        # The series is there (at 0) from the first poll: wait for the timeout itself.
        _wait_metrics(url, lambda t: 'gpu_exporter_nvml_timeouts_total{gpu="2"} 1.0' in t)
    finally:
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        try:
            code = proc.wait(timeout=15)
        finally:
            proc.kill()
        stopped_in = time.monotonic() - t0
    assert code == 0
    assert stopped_in < 5
    assert "leaving 1 NVML call(s) that have not returned" in proc.stderr.read()  # type: ignore[union-attr]


def test_the_xid_reader_survives_nvml_failing_while_it_registers() -> None:
    """Found by the chaos test: an error that means "NVML is gone" or "GPU lost"
    while the Xid reader registered GPUs again (after a re-init) ended the
    event thread it had then, and with it every later Xid."""
    scenario = Scenario(name="xid-late", node={"gpus": 2}, state={"utilization": 0.9},
                        timeline=[{"at": "1s", "nvml": "lib_rm_version_mismatch"},
                                  {"at": "1.2s", "nvml": "ok"},
                                  {"at": "6s", "gpus": [1], "set": {"xid": [79]}}])
    node = SimulatedNode(scenario)
    failures = {"nvmlDeviceGetSupportedEventTypes": 4}

    def flaky(name: str, gpu: int | None) -> int | None:
        # After NVML came back: the Xid reader registers the GPUs again.
        if node.library.calls["nvmlInitWithFlags"] >= 2 and failures.get(name, 0) > 0:
            failures[name] -= 1
            return int(Return.LIB_RM_VERSION_MISMATCH if failures[name] % 2
                       else Return.GPU_IS_LOST)
        return None

    node.library.inject_error = flaky
    exporter = Exporter(settings(poll={"interval": "0.2s"}), node)
    exporter.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            snap = exporter.poller.latest
            if snap is not None and snap.get("gpu_xid_errors_total", gpu="1", xid="79"):
                break
            time.sleep(0.2)
        assert failures["nvmlDeviceGetSupportedEventTypes"] == 0
        assert snap is not None and snap.get("gpu_xid_errors_total", gpu="1", xid="79") == 1.0
    finally:
        exporter.stop()
