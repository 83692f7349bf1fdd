"""NVML's life cycle: init retried with backoff and logged once while the driver
is missing; library missing behaves like a node without a driver."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from gpu_exporter.nvml.session import Gpu, GpuHung, Identity, NvmlSession
from gpu_exporter.simulator.model import Scenario
from tests.simnode import SimRun


@pytest.mark.parametrize("mode,hint", [
    ("driver_not_loaded", "kernel driver is not loaded"),
    ("library_missing", "libnvidia-ml.so.1 was not found"),
    ("no_permission", "no permission to open the NVIDIA device nodes"),
])
def test_nvml_unavailable_serves_own_metrics_logs_once_and_backs_off(
        mode: str, hint: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    scenario = Scenario(name=mode, node={"gpus": 2, "nvml": mode})
    with SimRun(scenario) as run:
        snap = run.poll(120)
        init_calls = run.node.library.calls["nvmlInitWithFlags"]
    assert snap.get("gpu_exporter_nvml_up") == 0.0
    assert not snap.series("gpu_info")
    assert snap.get("gpu_exporter_collector_success", collector="device") == 1.0
    errors = [r for r in caplog.records if "NVML unavailable" in r.getMessage()]
    assert len(errors) == 1 and hint in errors[0].getMessage()
    if mode != "library_missing":
        # 1, 2, 4, ... 64 s apart: 7 or 8 tries in two minutes, not 120.
        assert 5 <= init_calls <= 9


def test_a_gpu_lost_at_startup_is_reported_down_from_the_first_poll() -> None:
    scenario = Scenario(name="lost-at-start", node={"gpus": 3}, gpus={1: {"lost": True}})
    with SimRun(scenario) as run:
        snap = run.poll()
    up = {lab["gpu"]: v for lab, v in snap.series("gpu_up")}
    assert up == {"0": 1.0, "1": 0.0, "2": 1.0}


def test_a_lost_gpu_that_comes_back_reports_again() -> None:
    scenario = Scenario(name="flap", node={"gpus": 2}, state={"utilization": 0.5},
                        timeline=[{"at": "2s", "gpus": [1], "set": {"lost": True}},
                                  {"at": "10s", "gpus": [1], "set": {"lost": False}}])
    with SimRun(scenario) as run:
        assert run.poll(5).get("gpu_up", gpu="1") == 0.0
        snap = run.poll(20)
    assert snap.get("gpu_up", gpu="1") == 1.0
    assert snap.get("gpu_power_watts", gpu="1") is not None


# --- the poll guard: one hand-off per poll, a hung GPU given up on ---------------------------
def _guarded_session(timeout: float = 0.2) -> tuple[NvmlSession, Gpu]:
    session = NvmlSession(call_timeout=timeout)
    gpu = Gpu(0, None, Identity(0, uuid="GPU-0"))
    session.gpus = [gpu]
    return session, gpu


def _read(session: NvmlSession, gpu: Gpu, value: object) -> object:
    """One GPU's reads, as a reader makes them: a step the session watches."""
    with session.step(gpu):
        return value


def _is_hung(gpu: Gpu) -> bool:
    return gpu.hung


def test_a_poll_that_hangs_is_given_up_on_and_its_thread_touches_nothing_after() -> None:
    session, gpu = _guarded_session()
    release = threading.Event()
    after_the_call: list[str] = []

    def hung_poll() -> str:
        with session.step(gpu):
            release.wait()  # the driver does not answer
        after_the_call.append("ran on")  # must never happen: the poll was given up on
        return "late snapshot"

    t0 = time.monotonic()
    assert session.guarded(hung_poll) is None
    assert 0.2 <= time.monotonic() - t0 < 1.0
    assert gpu.hung and session.timeouts == {0: 1}
    # The next poll runs on a fresh thread and skips the hung GPU.
    with pytest.raises(GpuHung):
        session.guarded(lambda: _read(session, gpu, "read"))
    session.begin_poll()
    assert gpu.hung  # its call has not returned yet

    release.set()  # the stuck call returns at last
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(t.name == "nvml-poll-1"
                                              for t in threading.enumerate()):
        time.sleep(0.01)
    assert not any(t.name == "nvml-poll-1" for t in threading.enumerate())  # it ended
    assert after_the_call == []
    session.begin_poll()
    assert _is_hung(gpu) is False
    assert session.guarded(lambda: _read(session, gpu, "read")) == "read"
    session.close()


def test_guarded_polls_share_one_thread_and_hand_back_errors() -> None:
    session, gpu = _guarded_session(timeout=5.0)
    # Compare thread objects, not counts: a thread left by an earlier test may
    # end at any moment and must not change what this test sees.
    threads_before = set(threading.enumerate())
    names = {session.guarded(lambda: threading.current_thread().name) for _ in range(50)}
    assert names == {"nvml-poll-1"}
    started = set(threading.enumerate()) - threads_before
    assert [t.name for t in started] == ["nvml-poll-1"]
    (poll_thread,) = started

    def failing() -> None:
        raise ValueError("a collector bug")

    with pytest.raises(ValueError, match="a collector bug"):
        session.guarded(failing)
    assert session.guarded(lambda: _read(session, gpu, 7)) == 7  # still usable
    assert set(threading.enumerate()) - threads_before == {poll_thread}
    session.close()
    poll_thread.join(timeout=5)
    assert not poll_thread.is_alive()  # the idle thread ends on close


def test_without_a_timeout_polls_run_inline() -> None:
    session = NvmlSession(call_timeout=None)
    assert session.guarded(lambda: threading.current_thread().name) == \
        threading.current_thread().name


def test_what_the_gpus_answer_not_supported_for_is_said_once_naming_them_all(
        caplog: pytest.LogCaptureFixture) -> None:
    """On an 8-GPU node every GPU answers NOT_SUPPORTED for the temperature
    reading and two GPUs for the PCIe link width: one line for each, with the
    GPUs it applies to."""
    caplog.set_level(logging.INFO)
    no_width = {"errors": {"nvmlDeviceGetCurrPcieLinkWidth": "NOT_SUPPORTED"}}
    scenario = Scenario(name="unsupported", node={"gpus": 8},
                        state={"errors": {"nvmlDeviceGetTemperature": "NOT_SUPPORTED"}},
                        gpus={2: no_width, 5: no_width})
    with SimRun(scenario) as run:
        run.poll(10)
    said = [m for m in (r.getMessage() for r in caplog.records)
            if "NVML answers NOT_SUPPORTED" in m]
    temperature = [m for m in said if "nvmlDeviceGetTemperature" in m]
    width = [m for m in said if "nvmlDeviceGetCurrPcieLinkWidth" in m]
    assert len(temperature) == 1, said
    assert temperature[0].startswith("GPUs 0-7: NVML answers NOT_SUPPORTED"), said
    assert len(width) == 1 and width[0].startswith("GPUs 2, 5: "), said
    assert not [m for m in said if m.startswith("GPU 0:")], said
