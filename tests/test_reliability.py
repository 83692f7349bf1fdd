"""The exporter keeps serving the truth when the node is sick: a hung NVML call
on one GPU, a GPU lost and coming back, NO_PERMISSION on process queries."""

from __future__ import annotations

import logging
import threading
import time
import urllib.request

import pytest

from gpu_exporter.catalog import metric
from gpu_exporter.daemon import Exporter
from gpu_exporter.simulator import SimulatedNode, load_scenario
from gpu_exporter.simulator.model import Scenario
from gpu_exporter.snapshot import Snapshot
from tests.simnode import SimRun, settings


def test_a_hung_call_on_one_gpu_does_not_stop_the_others_or_metrics() -> None:
    scenario = Scenario(
        name="hang", node={"gpus": 3}, state={"utilization": 0.9},
        timeline=[{"at": "1s", "gpus": [1], "set": {"hangs": {"nvmlDeviceGetPowerUsage": 6}}},
                  {"at": "3s", "gpus": [1], "set": {"hangs": {"nvmlDeviceGetPowerUsage": 0}}}])
    node = SimulatedNode(scenario)
    exporter = Exporter(settings(poll={"interval": "0.2s", "timeout": "0.3s"}), node)
    exporter.start()
    url = f"http://127.0.0.1:{exporter.port}/metrics"
    try:
        time.sleep(1.5)  # the hang has begun
        threads_before = threading.active_count()
        latencies, texts = [], []
        for _ in range(20):
            t0 = time.monotonic()
            with urllib.request.urlopen(url, timeout=5) as resp:
                texts.append(resp.read().decode())
            latencies.append(time.monotonic() - t0)
            time.sleep(0.1)
        threads_after = threading.active_count()
        snap = exporter.poller.latest
        assert snap is not None
        assert max(latencies) < 1.0
        assert snap.get("gpu_up", gpu="1") == 0.0
        assert snap.get("gpu_up", gpu="0") == 1.0 and snap.get("gpu_up", gpu="2") == 1.0
        assert snap.get("gpu_power_watts", gpu="1") is None
        assert snap.get("gpu_exporter_nvml_timeouts_total", gpu="1") == 1.0
        # Polls go on (fresh timestamps) and no threads pile up behind the stuck call.
        assert time.time() - snap.get("gpu_exporter_last_poll_timestamp_seconds") < 1.0
        assert threads_after <= threads_before + 1
        # Once the stuck call returns, the GPU reports again.
        deadline = time.monotonic() + 10
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
        "utilization": 0.9, "errors": {"nvmlDeviceGetTotalEnergyConsumption": "NO_PERMISSION"}})
    with SimRun(scenario) as run:
        snap = run.poll(3)
        calls = run.node.library.calls["nvmlDeviceGetTotalEnergyConsumption"]
    assert not snap.series("gpu_energy_joules_total")
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
    assert snap.series("gpu_host_memory_total_bytes")


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
    assert lost.get("gpu_utilization_ratio", gpu="3") is None
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
    for name in ("gpu_power_watts", "gpu_utilization_ratio", "gpu_memory_used_bytes",
                 "gpu_clock_hertz", "gpu_host_memory_total_bytes"):
        assert snap.series(name), name
    assert listed == 8  # asked once per GPU, not every poll
    warnings = _messages(caplog, "no permission to read processes_compute")
    assert len(warnings) == 8


def test_the_hung_call_scenario_keeps_metrics_answering() -> None:
    """fault-hung-call, its timeline brought forward: GPU 2's power reads block."""
    scenario = load_scenario("fault-hung-call")
    assert scenario.timeline[0].set.hangs == {"nvmlDeviceGetPowerUsage": 20}
    early = scenario.model_copy(update={"timeline": [
        scenario.timeline[0].model_copy(update={"at": 0.5, "set": scenario.timeline[0].set
                                                .model_copy(update={"hangs": {
                                                    "nvmlDeviceGetPowerUsage": 4}})}),
        scenario.timeline[1].model_copy(update={"at": 3.0})]})
    exporter = Exporter(settings(poll={"interval": "0.2s", "timeout": "0.3s"}),
                        SimulatedNode(early))
    exporter.start()
    url = f"http://127.0.0.1:{exporter.port}/metrics"
    try:
        time.sleep(1.2)
        threads = []
        for _ in range(10):
            t0 = time.monotonic()
            with urllib.request.urlopen(url, timeout=5) as resp:
                text = resp.read().decode()
            assert time.monotonic() - t0 < 1.0  # answers within 1 s while GPU 2 hangs
            threads.append(threading.active_count())
            time.sleep(0.1)
        snap = exporter.poller.latest
        assert snap is not None
        assert snap.get("gpu_up", gpu="2") == 0.0
        assert all(snap.get("gpu_up", gpu=str(i)) == 1.0 for i in range(8) if i != 2)
        assert 'gpu_exporter_nvml_timeouts_total{gpu="2"} 1.0' in text
        assert max(threads) - min(threads) <= 1  # no thread piles up behind the stuck call
        assert time.time() - snap.get("gpu_exporter_last_poll_timestamp_seconds") < 1.0
    finally:
        exporter.stop()
