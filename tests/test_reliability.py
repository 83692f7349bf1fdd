"""The exporter keeps serving the truth when the node is sick: a hung NVML call
on one GPU, a GPU lost and coming back, NO_PERMISSION on process queries."""

from __future__ import annotations

import threading
import time
import urllib.request

from gpu_exporter.daemon import Exporter
from gpu_exporter.simulator import SimulatedNode
from gpu_exporter.simulator.model import Scenario
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
