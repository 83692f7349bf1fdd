"""Each NVML read is taken as often as what it answers can change, and what it
feeds is still exported every poll: the costly counters (energy, PCIe replay
and byte counters, ECC aggregates) and remapped rows every 10 polls in the
GPU's one field-values call, the fabric probe every 10 polls; the states that
follow the load (PCIe link, P-state, memory clock) every 10 polls and at once
when the GPU turns busy or idle; the facts (ECC mode, persistence, MIG mode,
application clocks) every 30 polls and at once after an NVML event on the GPU
or a reload; utilization and GPM samples every 5 s; the process lists when the
GPU's used memory moves; per-process utilization every 5 s and never on a GPU
without processes."""

from __future__ import annotations

from collections import Counter

from gpu_exporter.facts.cadence import (
    FACT_READ_EVERY_POLLS,
    PROCESS_SAMPLES_EVERY_S,
    SLOW_READ_EVERY_POLLS,
)
from gpu_exporter.simulator.model import GpuCondition, Node, Scenario, Step
from tests.simnode import SimRun

GPUS = 8


def calls_over(run: SimRun, polls: int) -> tuple[Counter[str], list[float | None]]:
    """NVML calls made by ``polls`` further polls, and GPU 0's energy counter at each."""
    run.poll()
    before = Counter(run.node.library.calls)
    energy = []
    for _ in range(polls):
        energy.append(run.poll(1).get("gpu_energy_joules_total", gpu="0"))
    return run.node.library.calls - before, energy


def test_costly_counters_ride_the_one_field_call_every_ten_polls() -> None:
    polls = FACT_READ_EVERY_POLLS
    with SimRun("healthy") as run:
        calls, energy = calls_over(run, polls)
    # One nvmlDeviceGetFieldValues per GPU and poll holds power, its limit, the
    # memory temperature, the volatile ECC totals, the throttle counters, the
    # NVLink counters, and on its slow polls energy and the PCIe counters.
    assert calls["nvmlDeviceGetFieldValues"] == GPUS * polls
    for name in ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPcieReplayCounter",
                 "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
                 "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows",
                 "nvmlDeviceGetEccMode", "nvmlDeviceGetNvLinkState"):
        assert calls[name] == 0, name
    reads = polls // SLOW_READ_EVERY_POLLS
    assert all(e is not None for e in energy)  # exported every poll
    assert len(set(energy)) == reads + 1  # and moves when it is read again
    assert energy == sorted(energy)
    # Facts once in 30 polls (each GPU at its own offset), the fabric probe
    # (which completes or degrades without an event) every 10, cheap reads
    # every poll.
    for name in ("nvmlDeviceGetMigMode", "nvmlDeviceGetPersistenceMode"):
        assert calls[name] == GPUS, name
    assert calls["nvmlDeviceGetGpuFabricInfoV"] == GPUS * reads
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetUtilizationRates",
                 "nvmlDeviceGetTemperature", "nvmlDeviceGetMemoryInfo_v2"):
        assert calls[name] == GPUS * polls, name
    # The SM clock every poll, the memory clock with the link (every 10 polls),
    # the graphics clock not at all (it is detail).
    assert calls["nvmlDeviceGetClockInfo"] == GPUS * (polls + reads)
    assert calls["nvmlDeviceGetCurrPcieLinkGeneration"] == GPUS * reads


def test_the_link_and_p_state_are_read_again_when_the_gpu_turns_busy() -> None:
    """An idle GPU's link trains down and its P-state drops; both come back
    with the first work: they are read at once, not up to 10 polls later."""
    scenario = Scenario(name="turns-busy", node=Node(gpus=1, profile="h100-sxm5-80gb"),
                        state=GpuCondition(utilization=0.0), noise=False,
                        timeline=[Step(at=4.5, set=GpuCondition(utilization=0.9))])
    with SimRun(scenario) as run:
        idle = run.poll(4)
        busy = run.poll(1)
        calls = run.node.library.calls
    assert idle.get("gpu_pcie_link_generation", gpu="0") == 1.0
    assert busy.get("gpu_pcie_link_generation", gpu="0") == 5.0
    assert calls["nvmlDeviceGetCurrPcieLinkGeneration"] == 2  # the first poll, then the turn


def test_facts_are_read_again_at_once_after_an_xid() -> None:
    with SimRun("xid-error-application-fault") as run:
        run.poll(3)
        before = Counter(run.node.library.calls_per_gpu)
        run.poll(3)  # the Xid on GPU 2 at 5 s
        calls = run.node.library.calls_per_gpu - before
    assert calls["nvmlDeviceGetPersistenceMode", 2] == 1
    assert calls["nvmlDeviceGetMigMode", 2] == 1
    assert calls["nvmlDeviceGetPersistenceMode", 1] == 0


def test_a_reload_reads_every_fact_again() -> None:
    with SimRun("healthy") as run:
        run.poll(3)
        before = Counter(run.node.library.calls)
        run.exporter.poller.reconfigure(run.exporter.poller.stages, run.exporter.settings)
        run.poll(1)
        calls = run.node.library.calls - before
    assert calls["nvmlDeviceGetPersistenceMode"] == GPUS
    assert calls["nvmlDeviceGetGpuFabricInfoV"] == GPUS


def test_utilization_samples_every_five_seconds_power_samples_every_poll() -> None:
    with SimRun("utilization-bursty-input-starvation", metrics={"detail": True}) as run:
        run.poll()
        before = Counter(run.node.library.calls)
        snaps = [run.poll(1) for _ in range(20)]
        calls = run.node.library.calls - before
    gpus = len(snaps[-1].series("gpu_up"))
    # nvmlDeviceGetSamples is called twice a read (size, then data): power
    # every poll, utilization and SM clock (never filled on an H100: one
    # NOT_FOUND call) every 5 polls, after a second read to start from.
    per_gpu = calls["nvmlDeviceGetSamples"] / gpus
    assert 2 * 20 <= per_gpu <= 2 * 20 + 2 * 5 + 2
    # The summaries are there on every poll, held between reads.
    for snap in snaps[2:]:
        assert snap.get("gpu_utilization_samples_ratio", gpu="2", stat="max") == 1.0
        assert snap.get("gpu_utilization_samples_ratio", gpu="2", stat="min") == 0.0
        assert snap.get("gpu_power_samples_watts", gpu="2", stat="mean") is not None


def test_process_lists_are_read_when_memory_moves_or_every_ten_polls() -> None:
    with SimRun("idle") as run:
        calls, _ = calls_over(run, 2 * SLOW_READ_EVERY_POLLS)
    assert calls["nvmlDeviceGetComputeRunningProcesses_v3"] == GPUS * 2
    assert calls["nvmlDeviceGetProcessUtilization"] == 0
    scenario = Scenario(name="starts", node=Node(gpus=1, profile="h100-sxm5-80gb"),
                        state=GpuCondition(utilization=0.0, memory_used_ratio=0.0),
                        noise=False, processes=[], timeline=[
                            Step(at=3.5, set=GpuCondition(utilization=0.9,
                                                          memory_used_ratio=0.5))])
    with SimRun(scenario) as run:
        run.poll(3)
        before = run.node.library.calls["nvmlDeviceGetComputeRunningProcesses_v3"]
        run.poll(1)
        assert run.node.library.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == before + 1


def test_process_utilization_every_five_seconds_while_processes_run() -> None:
    polls = 30
    with SimRun("healthy") as run:
        calls, _ = calls_over(run, polls)
        snap = run.poll(1)
    reads = polls / PROCESS_SAMPLES_EVERY_S
    # pynvml calls it twice a read: the size, then the samples.
    assert 2 * GPUS * reads <= calls["nvmlDeviceGetProcessUtilization"] <= \
        2 * GPUS * (reads + 1)
    # Every listed process keeps its SM utilization between reads.
    ratios = snap.series("gpu_process_sm_utilization_ratio")
    assert len(ratios) == GPUS
    assert all(value == 0.91 for _, value in ratios)
