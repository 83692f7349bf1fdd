"""Per-process series: their churn when jobs restart, and the collector that
switches them off without changing what the diagnosis finds."""

from __future__ import annotations

from typing import Any

from gpu_exporter.poll.catalog import CATALOG
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.simulator.model import Scenario
from tests.simnode import SimRun

GPUS = 8
RESTART_AT = 30.0
PROCESS_FAMILIES = [m.name for m in CATALOG if m.collector == "process_series"]


def ranks(first_pid: int) -> list[dict[str, Any]]:
    """One training rank per GPU, as a job launcher starts them."""
    return [{"pid": first_pid + i, "comm": "python", "gpus": [i], "gpu_memory_ratio": 0.6,
             "sm_utilization": 0.9, "cpu_ratio": 1.0, "state": "R", "threads": 12}
            for i in range(GPUS)]


def restarting_job() -> Scenario:
    # The job restarts (a crash and requeue, a new epoch launcher): the same
    # ranks on the same GPUs, new PIDs.
    return Scenario.model_validate({
        "name": "restarting-job", "node": {"gpus": GPUS}, "state": {"utilization": 0.9},
        "processes": ranks(4000),
        "timeline": [{"at": RESTART_AT, "processes": ranks(9000)}]})


def process_series(snap: Snapshot) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {(name, tuple(sorted(labels.items())))
            for name in PROCESS_FAMILIES for labels, _ in snap.series(name)}


def test_a_job_restart_replaces_every_per_process_series() -> None:
    with SimRun(restarting_job()) as run:
        before = process_series(run.poll(RESTART_AT - 1))
        after = process_series(run.poll(10))
    per_process = len(before) // GPUS
    assert len(before) == GPUS * per_process and per_process >= 10
    # Nothing carries over: every series of the old PIDs goes stale and as many
    # new ones start. That is the churn a restart costs Prometheus.
    assert not before & after
    assert len(after) == len(before)
    assert {dict(lab)["pid"] for _, lab in after} == {str(9000 + i) for i in range(GPUS)}


def test_process_series_switched_off_keep_the_process_diagnosis() -> None:
    found = []
    exported = []
    for on in (True, False):
        with SimRun("memory-held-sm-idle-process-stalled",
                    collectors={"process_series": on}) as run:
            snap = run.poll(40)
        exported.append(process_series(snap))
        found.append(sorted((lab["gpu"], lab["symptom"], lab["cause"])
                            for lab, v in snap.series("gpu_diagnosis_active") if v == 1))
        assert snap.readings.processes, "the processes reader runs either way"
        assert snap.get("gpu_diagnosis_input_missing", input="processes") is None
    assert exported[0] and not exported[1]
    assert found[0] == found[1]
    assert any(cause == "process_stalled" for _, _, cause in found[0]), found[0]


def test_processes_reader_off_takes_the_series_and_says_the_input_is_missing() -> None:
    with SimRun("memory-held-sm-idle-process-stalled",
                collectors={"processes": False}) as run:
        snap = run.poll(5)
    assert not process_series(snap)
    assert snap.get("gpu_diagnosis_input_missing", input="processes") == 1.0
