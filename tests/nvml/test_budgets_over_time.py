"""The NVML call budget holds over time, not only at the first minute: on a
board of every driver branch the simulator knows (R470 to R580), with the load
turning idle -> busy -> idle -> busy, each function's calls per GPU and poll
in every settled stretch stay within the budget ``tests/nvml/test_call_budget.py``
writes out (``SIM_BUDGET``, one source of truth). The reads that follow the
load (``Every.LOAD``: the PCIe link, the P-state, the memory clock) are taken
at once when a GPU turns busy or idle and then every SLOW_READ_EVERY_POLLS
polls again: a GPU must go back to its slow cadence after each turn, however
many turns it has seen.

A driver branch without a call answers through an older one (the process
lists' _v2 where _v3 is missing): the older call counts against the newer
one's budget.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from gpu_exporter.facts.cadence import FACT_READ_EVERY_POLLS
from gpu_exporter.nvml import constants as c
from gpu_exporter.simulator.drivers import BRANCHES, DriverBranch, knows_field
from gpu_exporter.simulator.model import Scenario
from tests.nvml.test_call_budget import INTERVAL, SIM_BUDGET
from tests.simnode import SimRun

LONG = os.environ.get("GPU_EXPORTER_LONG_TESTS") == "1"
GPUS = 2
LINKS = 18  # the H100 SXM5 profile's NVLinks
# Polls in each phase of the load; the budget is counted over its last
# FACT_READ_EVERY_POLLS polls (a whole cadence of every read, the turn's own
# reads a few polls behind).
PHASE = 3 * FACT_READ_EVERY_POLLS if LONG else FACT_READ_EVERY_POLLS + 5
PHASES = ("idle", "busy", "idle", "busy") * (3 if LONG else 1)
UTILIZATION = {"idle": 0.0, "busy": 0.95}

# An older branch's call and the budget line it counts against.
SAME_READ = {
    "nvmlDeviceGetComputeRunningProcesses_v2": "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v2": "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses": "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses": "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetMemoryInfo": "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetCurrentClocksThrottleReasons": "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetGpuFabricInfo": "nvmlDeviceGetGpuFabricInfoV",
}


def budget(branch: DriverBranch) -> dict[str, float]:
    """SIM_BUDGET on this branch: where the branch's NVML does not know a field
    the one field-values call would carry (drivers.py, from NVIDIA's change
    log), the field's own call answers it, once per poll (per link for a
    link's state)."""
    out = dict(SIM_BUDGET)
    if not knows_field(branch, c.FI_DEV_POWER_AVERAGE):
        out["nvmlDeviceGetPowerUsage"] = 1.0
    if not knows_field(branch, c.FI_DEV_POWER_CURRENT_LIMIT):
        out["nvmlDeviceGetEnforcedPowerLimit"] = 1.0
    if not knows_field(branch, c.FI_DEV_NVLINK_GET_STATE):
        out["nvmlDeviceGetNvLinkState"] = float(LINKS)
    return out


def scenario(branch: str) -> Scenario:
    # Each turn half an interval before the phase's first poll: the last
    # poll of a phase still sees its load.
    timeline = [{"at": max(0.0, (n * PHASE + 0.5) * INTERVAL),
                 "set": {"utilization": UTILIZATION[phase]}}
                for n, phase in enumerate(PHASES)]
    return Scenario(
        name="load-turns", node={"gpus": GPUS, "driver": branch}, noise=False,
        state={"utilization": 0.0, "memory_used_ratio": 0.3},
        processes=[{"pid": 31000 + gpu, "comm": "train", "gpus": [gpu],
                    "gpu_memory_ratio": 0.3, "sm_utilization": 0.9, "cpu_ratio": 1.0,
                    "state": "R"} for gpu in range(GPUS)],
        timeline=timeline)


def over_budget(calls: Counter[tuple[str, int]], polls: int,
                allowed: dict[str, float]) -> dict[tuple[str, int], float]:
    per: Counter[tuple[str, int]] = Counter()
    for (name, gpu), count in calls.items():
        per[SAME_READ.get(name, name), gpu] += count
    return {key: n / polls for key, n in per.items()
            if n / polls > allowed.get(key[0], 0.0) + 1e-9}


@pytest.mark.parametrize("branch", BRANCHES, ids=lambda b: b.name)
def test_every_phase_of_a_changing_load_keeps_to_the_budget(branch: DriverBranch) -> None:
    allowed = budget(branch)
    with SimRun(scenario(branch.name), poll={"interval": INTERVAL}) as run:
        lib = run.node.library
        run.poll()
        for n, phase in enumerate(PHASES):
            run.poll((PHASE - FACT_READ_EVERY_POLLS) * INTERVAL, interval=INTERVAL)
            before = Counter(lib.calls_per_gpu)
            snap = run.poll(FACT_READ_EVERY_POLLS * INTERVAL, interval=INTERVAL)
            calls = lib.calls_per_gpu - before
            over = over_budget(calls, FACT_READ_EVERY_POLLS, allowed)
            assert not over, (branch.name, n, phase, over)
            # The phase is what the GPUs did: the check ran on a load that turned.
            assert {s.labels[0]: s.value for s in snap.samples["gpu_up"]} == {"0": 1.0, "1": 1.0}
            # An idle H100's link downshifts to Gen1 (read with the load).
            link = {lab["gpu"]: v for lab, v in snap.series("gpu_pcie_link_generation")}
            assert link == ({"0": 5.0, "1": 5.0} if phase == "busy" else {"0": 1.0, "1": 1.0})
