"""NVML calls that cost milliseconds on a real H100 are read on a slower
cadence, and what they feed is still exported every poll: the energy and PCIe
counters and the MIG mode every 10 polls, utilization samples every 5 s,
per-process utilization every 5 s and never on a GPU without processes."""

from __future__ import annotations

from collections import Counter

from gpu_exporter.cadence import PROCESS_SAMPLES_EVERY_S, SLOW_READ_EVERY_POLLS
from tests.simnode import SimRun

POLLS = 30
GPUS = 8


def calls_over(run: SimRun, polls: int) -> tuple[Counter[str], list[float | None]]:
    """NVML calls made by ``polls`` further polls, and GPU 0's energy counter at each."""
    run.poll()
    before = Counter(run.node.library.calls)
    energy = []
    for _ in range(polls):
        energy.append(run.poll(1).get("gpu_energy_joules_total", gpu="0"))
    return run.node.library.calls - before, energy


def test_costly_counters_are_read_every_ten_polls_and_exported_every_poll() -> None:
    with SimRun("healthy") as run:
        calls, energy = calls_over(run, POLLS)
    reads = POLLS // SLOW_READ_EVERY_POLLS
    for name in ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPcieReplayCounter",
                 "nvmlDeviceGetMigMode"):
        assert calls[name] == GPUS * reads, name
    # Memory temperature every poll, the PCIe byte counters with the slow reads.
    assert calls["nvmlDeviceGetFieldValues"] >= GPUS * POLLS
    assert all(e is not None for e in energy)  # exported every poll
    assert len(set(energy)) == reads + 1  # and moves when it is read again
    assert energy == sorted(energy)
    # Cheap reads stay on every poll.
    assert calls["nvmlDeviceGetPowerUsage"] == GPUS * POLLS
    assert calls["nvmlDeviceGetCurrentClocksEventReasons"] == GPUS * POLLS


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


def test_process_utilization_is_not_asked_of_a_gpu_without_processes() -> None:
    with SimRun("idle") as run:
        calls, _ = calls_over(run, 10)
    assert calls["nvmlDeviceGetComputeRunningProcesses_v3"] == GPUS * 10
    assert calls["nvmlDeviceGetProcessUtilization"] == 0


def test_process_utilization_every_five_seconds_while_processes_run() -> None:
    with SimRun("healthy") as run:
        calls, _ = calls_over(run, POLLS)
        snap = run.poll(1)
    reads = POLLS / PROCESS_SAMPLES_EVERY_S
    # pynvml calls it twice a read: the size, then the samples.
    assert 2 * GPUS * reads <= calls["nvmlDeviceGetProcessUtilization"] <= \
        2 * GPUS * (reads + 1)
    # Every listed process keeps its SM utilization between reads.
    ratios = snap.series("gpu_process_sm_utilization_ratio")
    assert len(ratios) == GPUS
    assert all(value == 0.91 for _, value in ratios)
