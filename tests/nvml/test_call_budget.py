"""The NVML call budget: every NVML call is a round trip into the driver, and
on a real H100 the calls are what a poll costs. At default settings a GPU is
read in at most 8 calls per poll on average, counted two ways:

- on NVIDIA's own mock libnvidia-ml (an NVML nobody on this project wrote),
  H100 x8, the exporter in a process of its own as shipped, every C call into
  the library counted (``nvml.binding.count_calls``);
- on the simulator, by its own per-function and per-GPU counter
  (``FakeNvmlLibrary.calls_per_gpu``), per function against the cadence each
  read is taken at (``gpu_exporter/facts/cadence.py``).

Utilization is never missing: on the mock, which keeps no utilization samples,
gpu_busy_seconds_total comes from the 1-second rate on every board file.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from typing import Any

import pytest

from gpu_exporter.facts.cadence import (
    FACT_READ_EVERY_POLLS,
    SAMPLES_EVERY_S,
    SLOW_READ_EVERY_POLLS,
)
from gpu_exporter.settings.config import Settings
from tests import mock_nvml
from tests.simnode import SimRun

BUDGET = 8.0  # NVML calls per GPU and poll, on average, at default settings
INTERVAL = Settings().poll.interval

mock_missing = pytest.mark.skipif(
    mock_nvml.library_dir() is None,
    reason="NVIDIA's mock NVML is not there: build it into ../shared/nvidia-mocknvml (its "
           "README says how) or point GPU_EXPORTER_MOCKNVML at it")


@cache
def on_mock(board: str) -> dict[str, Any]:
    return mock_nvml.run(board)


def per_gpu_poll(calls: dict[str, int], gpus: int, polls: int) -> dict[str, float]:
    return {name: count / (gpus * polls) for name, count in calls.items()}


@mock_missing
def test_the_mock_h100_node_is_read_within_the_budget() -> None:
    answer = on_mock("h100")
    assert answer["gpus"] == 8
    calls = per_gpu_poll(answer["calls"], answer["gpus"], answer["polls"])
    assert sum(calls.values()) <= BUDGET, calls
    # One field-values call per GPU and poll holds power, its limit, the
    # memory temperature, the ECC totals, NVLink's 108 fields and, on their
    # polls, the costly counters.
    assert calls["nvmlDeviceGetFieldValues"] == 1.0
    for name in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
                 "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetTotalEccErrors",
                 "nvmlDeviceGetEccMode", "nvmlDeviceGetRemappedRows",
                 "nvmlDeviceGetPcieReplayCounter"):
        assert name not in calls, name
    assert answer["read_errors"] == 0


@mock_missing
@pytest.mark.parametrize("board", mock_nvml.BOARDS)
def test_utilization_is_there_on_every_board_of_the_mock(board: str) -> None:
    """The mock keeps no utilization samples (nvmlDeviceGetSamples is
    NOT_SUPPORTED): the busy counter comes from the 1-second rate, and says so."""
    answer = on_mock(board)
    busy = answer["series"]["gpu_busy_seconds_total"]
    sources = {labels["source"] for labels, _ in answer["series"]["gpu_busy_source_info"]}
    assert len(busy) == answer["gpus"] > 0
    assert sources == {"utilization_rate"}
    assert all(value >= 0 for _, value in busy)
    calls = per_gpu_poll(answer["calls"], answer["gpus"], answer["polls"])
    assert sum(calls.values()) <= BUDGET, (board, calls)
    assert answer["read_errors"] == 0


# What a GPU of the simulated healthy H100 node (R580, every GPU training, one
# process each) may cost per poll, by function: the budget written out
# against the cadences. Two C calls for a sample read and a process list with
# processes on it (the size, then the answer).
_EVERY_POLL = 1.0
_SAMPLES = 2 / max(1.0, SAMPLES_EVERY_S / INTERVAL)
SIM_BUDGET: dict[str, float] = {
    "nvmlDeviceGetFieldValues": _EVERY_POLL,
    "nvmlDeviceGetUtilizationRates": _EVERY_POLL,
    "nvmlDeviceGetMemoryInfo_v2": _EVERY_POLL,
    "nvmlDeviceGetTemperature": _EVERY_POLL,
    "nvmlDeviceGetCurrentClocksEventReasons": _EVERY_POLL,
    # The SM clock every poll, the memory clock with the link.
    "nvmlDeviceGetClockInfo": _EVERY_POLL + 1 / SLOW_READ_EVERY_POLLS,
    "nvmlDeviceGetSamples": _SAMPLES,
    "nvmlDeviceGetProcessUtilization": _SAMPLES,
    "nvmlGpmSampleGet": _SAMPLES / 2,
    "nvmlGpmMetricsGet": _SAMPLES / 2,
    "nvmlDeviceGetComputeRunningProcesses_v3": 2 / SLOW_READ_EVERY_POLLS,
    "nvmlDeviceGetGraphicsRunningProcesses_v3": 1 / SLOW_READ_EVERY_POLLS,
    "nvmlDeviceGetPerformanceState": 1 / SLOW_READ_EVERY_POLLS,
    "nvmlDeviceGetCurrPcieLinkGeneration": 1 / SLOW_READ_EVERY_POLLS,
    "nvmlDeviceGetCurrPcieLinkWidth": 1 / SLOW_READ_EVERY_POLLS,
    "nvmlDeviceGetApplicationsClock": 3 / FACT_READ_EVERY_POLLS,
    "nvmlDeviceGetPersistenceMode": 1 / FACT_READ_EVERY_POLLS,
    "nvmlDeviceGetGpuFabricInfoV": 1 / SLOW_READ_EVERY_POLLS,
    "nvmlDeviceGetMigMode": 1 / FACT_READ_EVERY_POLLS,
}


def test_the_simulated_h100_node_keeps_to_its_budget_per_function_and_gpu() -> None:
    polls = FACT_READ_EVERY_POLLS
    with SimRun("healthy") as run:
        run.poll()  # discovery and the facts read once
        before = Counter(run.node.library.calls_per_gpu)
        run.poll(INTERVAL * polls, interval=INTERVAL)
        calls = run.node.library.calls_per_gpu - before
    gpus = 8
    for gpu in range(gpus):
        mine = {name: count / polls for (name, index), count in calls.items() if index == gpu}
        over = {name: (n, SIM_BUDGET.get(name, 0.0)) for name, n in mine.items()
                if n > SIM_BUDGET.get(name, 0.0) + 1e-9}
        assert not over, (gpu, over)
    total = sum(calls.values()) / (gpus * polls)
    # Utilization samples and per-process samples (the mock has neither)
    # are what this node reads beyond the mock's budget.
    assert total <= BUDGET + 2 * _SAMPLES, total


def test_the_counter_attributes_each_call_to_its_gpu() -> None:
    with SimRun("healthy") as run:
        run.poll()
        before = Counter(run.node.library.calls_per_gpu)
        run.poll(INTERVAL, interval=INTERVAL)
        calls = run.node.library.calls_per_gpu - before
    assert {index for _, index in calls} == set(range(8))
    assert all(calls["nvmlDeviceGetTemperature", gpu] == 1 for gpu in range(8))
