"""GPU processes: NVML's per-GPU list joined with the host's view of each PID."""

from __future__ import annotations

from gpu_exporter.collectors.processes import ProcessesCollector
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.simulator.model import Scenario
from tests.simnode import SimRun


def procs(snap: Snapshot, name: str) -> dict[tuple[str, str], tuple[dict[str, str], float]]:
    return {(lab["gpu"], lab["pid"]): (lab, v) for lab, v in snap.series(name)}


def test_healthy_shows_each_gpus_training_process_with_host_side() -> None:
    with SimRun("healthy") as run:
        snap = run.poll(10)
    mem = procs(snap, "gpu_process_memory_used_bytes")
    assert sorted(mem) == [(str(i), str(24100 + i)) for i in range(8)]
    for lab, value in mem.values():
        assert lab["comm"] == "python"
        assert value > 50e9  # 74 % of an 80 GB H100
    sm = procs(snap, "gpu_process_sm_utilization_ratio")
    assert {v for _, v in sm.values()} == {0.91}
    cpu = procs(snap, "gpu_process_cpu_seconds_total")
    assert all(10 < v < 14 for _, v in cpu.values())  # 1.2 CPUs for 10 s
    wait = procs(snap, "gpu_process_run_queue_wait_seconds_total")
    assert all(0.1 < v < 0.3 for _, v in wait.values())  # 0.02 s/s for 10 s
    info = procs(snap, "gpu_process_info")
    lab = info[("0", "24100")][0]
    assert lab["pod_uid"] == "6f1d3c2a-9b7e-4c1d-8e2f-0a1b2c3d4e5f"
    assert len(lab["container_id"]) == 64 and lab["type"] == "compute"
    assert {v for _, v in procs(snap, "gpu_process_cpu_affinity_local").values()} == {1.0}
    # Dataloader workers hold no GPU context: they are not GPU processes.
    assert not [k for k in mem if k[1].startswith("25")]
    readings = snap.readings.processes
    assert all(r.cpu_ratio is not None and 1.1 < r.cpu_ratio < 1.3 for r in readings)


def _one_exits(pid: int, at: str) -> Scenario:
    """Two processes on one GPU: ``pid`` exits at ``at``, ``pid + 1`` stays."""
    return Scenario(name="exit", node={"gpus": 1}, state={"utilization": 0.9},
                    processes=[{"pid": pid, "comm": "short", "gpus": [0],
                                "gpu_memory_ratio": 0.2, "exits_at": at},
                               {"pid": pid + 1, "comm": "long", "gpus": [0],
                                "gpu_memory_ratio": 0.1}])


def test_a_process_that_exits_is_gone_from_the_next_poll() -> None:
    scenario = _one_exits(500, "5s")
    with SimRun(scenario) as run:
        assert ("0", "500") in procs(run.poll(4), "gpu_process_memory_used_bytes")
        snap = run.poll(1)
        assert not [lab for lab, _ in snap.series("gpu_process_info") if lab["pid"] == "500"]
        assert ("0", "501") in procs(snap, "gpu_process_info")


def test_processes_per_gpu_are_capped_largest_memory_first() -> None:
    scenario = Scenario(name="many", node={"gpus": 1}, state={"utilization": 0.9},
                        processes=[{"pid": 600 + k, "comm": f"w{k}", "gpus": [0],
                                    "gpu_memory_ratio": 0.01 * (k + 1)} for k in range(5)])
    with SimRun(scenario, processes={"max_per_gpu": 2}) as run:
        snap = run.poll(2)  # three polls
    assert sorted(pid for _, pid in procs(snap, "gpu_process_info")) == ["603", "604"]
    assert snap.get("gpu_process_series_dropped_total", gpu="0") == 9.0


def test_process_without_schedstat_has_no_run_queue_series() -> None:
    scenario = Scenario(name="nosched", node={"gpus": 1}, state={"utilization": 0.9},
                        host={"schedstat_available": False},
                        processes=[{"pid": 700, "comm": "python", "gpus": [0],
                                    "gpu_memory_ratio": 0.3}])
    with SimRun(scenario) as run:
        snap = run.poll(3)
    assert procs(snap, "gpu_process_cpu_seconds_total")
    assert not snap.series("gpu_process_run_queue_wait_seconds_total")


def test_mig_processes_carry_their_instance() -> None:
    with SimRun("mig-h100") as run:
        snap = run.poll(3)
    mem = procs(snap, "gpu_process_memory_used_bytes")
    instances = sorted(int(lab["gpu_instance"]) for (gpu, _), (lab, _) in mem.items()
                       if gpu == "0")
    assert instances == [7, 8, 9, 10, 11, 12, 13]


def test_process_gone_between_nvml_and_proc_is_skipped_silently() -> None:
    scenario = Scenario(name="ghost", node={"gpus": 1}, state={"utilization": 0.9},
                        processes=[{"pid": 800, "comm": "python", "gpus": [0],
                                    "gpu_memory_ratio": 0.3}])
    with SimRun(scenario) as run:
        run.poll()
        for name in ("stat", "status", "schedstat", "cgroup", "comm"):
            (run.node.procfs / "800" / name).unlink(missing_ok=True)
        # Poll without re-rendering the simulated /proc, as if the PID exited
        # between NVML's list and the read.
        run.exporter.poller.before_poll.clear()
        snap = run.poll(1)
    assert not snap.series("gpu_process_info")
    assert snap.get("gpu_exporter_collector_success", collector="processes") == 1.0
    assert snap.get("gpu_exporter_collector_errors_total", collector="processes") == 0.0


def _collector(run: SimRun) -> ProcessesCollector:
    return next(c for c in run.exporter.poller.stages if isinstance(c, ProcessesCollector))


def test_a_reused_pid_in_another_container_gets_its_own_container_id() -> None:
    first, second = "1" * 64, "2" * 64
    scenario = Scenario(name="reuse", node={"gpus": 1}, state={"utilization": 0.9},
                        processes=[{"pid": 810, "comm": "python", "gpus": [0],
                                    "gpu_memory_ratio": 0.3,
                                    "cgroup": f"0::/system.slice/docker-{first}.scope"}])
    with SimRun(scenario) as run:
        info = procs(run.poll(), "gpu_process_info")
        assert info[("0", "810")][0]["container_id"] == first
        # Freeze the simulated /proc and give PID 810 to another process: a
        # later start time (stat field 22) and another container.
        run.exporter.poller.before_poll.clear()
        base = run.node.procfs / "810"
        fields = (base / "stat").read_text().split(" ")
        fields[21] = str(int(fields[21]) + 500)
        (base / "stat").write_text(" ".join(fields))
        (base / "cgroup").write_text(f"0::/system.slice/docker-{second}.scope\n")
        info = procs(run.poll(1), "gpu_process_info")
    assert info[("0", "810")][0]["container_id"] == second


def test_what_is_remembered_of_an_exited_process_goes() -> None:
    scenario = _one_exits(820, "3s")
    with SimRun(scenario) as run:
        run.poll(2)
        collector = _collector(run)
        assert {key[1] for key in collector._labels} == {820, 821}
        assert set(collector._reader._cgroups) == {820, 821}
        run.poll(2)
    assert {key[1] for key in collector._labels} == {821}
    assert set(collector._reader._cgroups) == {821}
