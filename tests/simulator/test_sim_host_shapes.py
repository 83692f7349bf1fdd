"""The simulated host's shapes, read back as the kernel's files: a workload's
memory limit, usage and reclaim (cgroup v2 and v1), a Slurm job's cpuset and
its processes' allowed CPUs, a kernel without PSI, per-task delay accounting
for a process blocked in D, states that change over time with the counters
going on, and jitter on every rate that stays within its bounds."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.attribution.cgroup_pressure import CgroupPaths, read_signals
from gpu_exporter.attribution.cgroup_tree import discover
from gpu_exporter.host import cpu, procs
from gpu_exporter.simulator import SimulatedNode, load_scenario
from gpu_exporter.simulator.cgroupfs import TenantFs, pod_placement, slurm_placement
from gpu_exporter.simulator.hostfs import CLK_TCK
from gpu_exporter.simulator.model import Scenario
from gpu_exporter.simulator.tenants import CgroupCondition, Container, Pod, SlurmJobSpec, Tenants
from tests.simnode import VirtualClock

GIB = 1024**3
UID = "6f1d3c2a-9b7e-4c1d-8e2f-0a1b2c3d4e5f"


def keyed(path: str) -> dict[str, int]:
    with open(path) as f:
        return {k: int(v) for k, v in (line.split() for line in f)}


def text(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


# A container at its 16 GiB limit: the kernel reclaims its page cache (no
# swap), re-reads evicted file pages and counts each hit of memory.max.
RECLAIMING = CgroupCondition(memory_some=0.4, memory_full=0.2,
                             memory_anon_bytes=14 * GIB, memory_file_bytes=2 * GIB - 2**20,
                             reclaim_scan_bytes_per_s=400e6, reclaim_steal_bytes_per_s=300e6,
                             refault_bytes_per_s=200e6, memory_max_events_per_s=50)


def test_a_container_at_its_memory_limit_shows_reclaim_in_its_own_files(
        tmp_path: Path) -> None:
    pod = Pod(namespace="ml", name="a", uid=UID, containers=[
        Container(name="c", memory_limit_bytes=16 * GIB, pids=[10], cgroup=RECLAIMING)])
    fs = TenantFs(Tenants(pods=[pod]), tmp_path / "proc", tmp_path / "cg")
    path = pod_placement(pod, pod.containers[0]).cgroup
    assert path is not None
    base = os.path.join(tmp_path, "cg", path.lstrip("/"))
    fs.write(100.0)
    before, events_before = keyed(f"{base}/memory.stat"), keyed(f"{base}/memory.events")
    fs.write(110.0)
    after, events_after = keyed(f"{base}/memory.stat"), keyed(f"{base}/memory.events")
    assert text(f"{base}/memory.max") == str(16 * GIB)
    current = int(text(f"{base}/memory.current"))
    assert 0.95 * 16 * GIB < current <= 16 * GIB  # at its limit
    assert (after["anon"], after["file"]) == (14 * GIB, 2 * GIB - 2**20)
    # Reclaim at the cgroup's own limit is direct reclaim, in pages.
    assert after["pgscan_direct"] - before["pgscan_direct"] == pytest.approx(
        400e6 * 10 / 4096, abs=1)
    assert after["pgsteal"] - before["pgsteal"] == pytest.approx(300e6 * 10 / 4096, abs=1)
    assert after["workingset_refault_file"] - before["workingset_refault_file"] == \
        pytest.approx(200e6 * 10 / 4096, abs=1)
    assert events_after["max"] - events_before["max"] == 500
    assert text(f"{base}/memory.swap.current") == "0"
    signals = read_signals(discover(tmp_path / "cg", "0::/\n", -1), CgroupPaths(unified=path))
    assert signals.memory is not None and signals.memory.full is not None
    assert signals.memory.full.avg10 == pytest.approx(0.2)


def test_a_cgroup_v1_slurm_job_has_its_controllers_files(tmp_path: Path) -> None:
    job = SlurmJobSpec(job_id=77, uid=1200, cgroup_version=1, cpu_limit=8, cpus="16-23",
                   memory_limit_bytes=64 * GIB, pids=[500],
                   cgroup=CgroupCondition(cpu_throttled_ratio=0.5, memory_anon_bytes=60 * GIB,
                                          memory_file_bytes=4 * GIB - 2**20,
                                          memory_max_events_per_s=2))
    fs = TenantFs(Tenants(slurm_jobs=[job]), tmp_path / "proc", tmp_path / "cg")
    fs.write(60.0)
    place = slurm_placement(job)
    assert place.v1_job == "/slurm/uid_1200/job_77"
    # /proc/PID/cgroup names the task's leaf in each hierarchy; the job's files
    # sit above it, one hierarchy per controller.
    assert f"memory:{place.v1_job}/step_0/task_0" in text(f"{tmp_path}/proc/500/cgroup")
    mem = f"{tmp_path}/cg/memory{place.v1_job}"
    assert text(f"{mem}/memory.limit_in_bytes") == str(64 * GIB)
    assert int(text(f"{mem}/memory.usage_in_bytes")) == 64 * GIB - 2**20
    assert text(f"{mem}/memory.failcnt") == "120"
    assert keyed(f"{mem}/memory.stat")["cache"] == 4 * GIB - 2**20
    cpu_dir = f"{tmp_path}/cg/cpu,cpuacct{place.v1_job}"
    assert text(f"{cpu_dir}/cpu.cfs_quota_us") == "800000"
    assert text(f"{cpu_dir}/cpu.cfs_period_us") == "100000"
    assert keyed(f"{cpu_dir}/cpu.stat")["nr_throttled"] == 300  # of 600 periods in 60 s
    assert text(f"{tmp_path}/cg/cpuset{place.v1_job}/cpuset.effective_cpus") == "16-23"
    assert not os.path.exists(f"{mem}/memory.pressure")  # v1 has no PSI files


def _node(**scenario: Any) -> tuple[SimulatedNode, VirtualClock]:
    clock = VirtualClock()
    sc = Scenario(name="shape", node={"gpus": 2}, noise=False, **scenario)
    return SimulatedNode(sc, clock=clock), clock


def test_a_slurm_jobs_cpuset_confines_its_processes() -> None:
    job = {"job_id": 9, "cgroup_version": 2, "cpus": "96-127", "pids": [600, 601]}
    node, clock = _node(host={"cpus": 128, "numa_nodes": 4},
                        processes=[{"pid": 600, "comm": "python", "gpus": [0]},
                                   {"pid": 601, "comm": "worker", "cpus_allowed": "100-103"},
                                   {"pid": 602, "comm": "python", "gpus": [1]}],
                        tenants={"slurm_jobs": [job]})
    try:
        clock.advance(2.0)
        node.refresh()
        read = {pid: procs.read_process(node.procfs, pid) for pid in (600, 601, 602)}
        assert read[600] is not None and read[600].cpus_allowed_list == "96-127"
        # A process that narrows its own CPUs keeps them (within the cpuset).
        assert read[601] is not None and read[601].cpus_allowed_list == "100-103"
        # Outside any job: its GPU's local CPUs (GPU 1 on NUMA node 1), as before.
        assert read[602] is not None and read[602].cpus_allowed_list == "32-63"
        path = slurm_placement(SlurmJobSpec(**job)).cgroup
        assert path is not None
        base = node.sysfs / "fs" / "cgroup" / path.lstrip("/")
        assert text(f"{base}/cpuset.cpus.effective") == "96-127"
    finally:
        node.close()


def test_a_kernel_without_psi_has_no_pressure_files_anywhere() -> None:
    pod = {"namespace": "ml", "name": "a", "uid": UID,
           "containers": [{"name": "c", "pids": [700], "cgroup": {"io_some": 0.5}}]}
    node, clock = _node(host={"psi_available": False},
                        processes=[{"pid": 700, "comm": "python", "gpus": [0]}],
                        tenants={"pods": [pod]})
    try:
        clock.advance(2.0)
        node.refresh()
        assert not (node.procfs / "pressure").exists()
        place = pod_placement(Pod.model_validate(pod), Container.model_validate(
            pod["containers"][0]))  # type: ignore[index]
        assert place.cgroup is not None
        signals = read_signals(discover(node.sysfs / "fs" / "cgroup", "0::/\n", -1),
                               CgroupPaths(unified=place.cgroup))
        assert (signals.cpu, signals.io, signals.memory) == (None, None, None)
        assert signals.cpu_stat is not None  # the rest of the cgroup is there
    finally:
        node.close()


def _blkio_ticks(procfs: Path, pid: int) -> int:
    stat = text(f"{procfs}/{pid}/stat")
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[42 - 3])  # field 42 (proc(5)), counted from field 3 (state)


def test_a_process_blocked_in_d_counts_block_io_delay_where_the_kernel_accounts_it() -> None:
    stuck = {"pid": 800, "comm": "python", "gpus": [0], "state": "D", "cpu_ratio": 0.0}
    for accounting in (True, False):
        node, clock = _node(host={"delay_accounting": accounting}, processes=[stuck])
        try:
            clock.advance(1.0)
            node.refresh()
            before = _blkio_ticks(node.procfs, 800)
            clock.advance(10.0)
            node.refresh()
            grown = _blkio_ticks(node.procfs, 800) - before
            assert grown == (pytest.approx(10 * CLK_TCK, abs=1) if accounting else 0)
        finally:
            node.close()


def test_a_state_change_keeps_the_process_counters() -> None:
    running = {"pid": 900, "comm": "python", "gpus": [0], "state": "R", "cpu_ratio": 1.0,
               "voluntary_ctxt_switches_per_s": 20}
    asleep = {**running, "state": "S", "cpu_ratio": 0.0, "voluntary_ctxt_switches_per_s": 0}
    node, clock = _node(processes=[running], timeline=[{"at": 10, "processes": [asleep]}])
    try:
        seen = []
        for _ in range(4):
            clock.advance(5.0)
            node.refresh()
            p = procs.read_process(node.procfs, 900)
            assert p is not None
            seen.append((p.state, round(p.cpu_seconds), p.voluntary_ctxt_switches))
        # R for 10 s (10 s of CPU, 200 wake-ups), then asleep: nothing grows.
        assert seen == [("R", 5, 100), ("S", 10, 200), ("S", 10, 200), ("S", 10, 200)]
    finally:
        node.close()


def test_jitter_moves_every_rate_within_its_bounds_repeatably() -> None:
    host = {"cpus": 64, "iowait_ratio": 0.3, "steal_ratio": 0.1, "cpu_busy_ratio": 0.4}

    def iowaits(seed: int) -> list[float]:
        node, clock = _node(host=host, jitter=0.2, seed=seed)
        try:
            out = []
            before = cpu.read_cpu_times(node.procfs)
            for _ in range(12):
                clock.advance(1.0)
                node.refresh()
                after = cpu.read_cpu_times(node.procfs)
                ratios = cpu.cpu_ratios(before, after)
                assert ratios is not None
                out.append(ratios.iowait)
                before = after
            return out
        finally:
            node.close()

    first = iowaits(1)
    assert all(0.3 * 0.8 - 1e-3 <= r <= 0.3 * 1.2 + 1e-3 for r in first)
    assert max(first) - min(first) > 0.02  # it moves
    assert iowaits(1) == first  # the same seed, the same node
    assert iowaits(2) != first


def test_a_changed_cpu_time_carries_the_inherited_switches_with_it(tmp_path: Path) -> None:
    # The healthy base's trainer runs 1.2 CPUs and wakes 900 times a second;
    # asleep on 1 % of a CPU it cannot wake that often. Said switches stay.
    path = tmp_path / "asleep.yaml"
    path.write_text("name: asleep\nextends: healthy\nprocess_changes:\n"
                    "  24107: {cpu_ratio: 0.012, state: S}\n"
                    "  24106: {cpu_ratio: 0.012, state: S, voluntary_ctxt_switches_per_s: 50}\n")
    procs = {p.pid: p for p in load_scenario(str(path)).processes}
    assert procs[24107].voluntary_ctxt_switches_per_s == pytest.approx(9.0)
    assert procs[24107].nonvoluntary_ctxt_switches_per_s == pytest.approx(0.4)
    assert procs[24106].voluntary_ctxt_switches_per_s == 50
