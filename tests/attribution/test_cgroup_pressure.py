"""Each workload's own cgroup signals: pressure, CPU-limit throttling, OOM
kills and the limit itself, read from cgroup v2 files (written by the
simulator, or garbled, or missing); and processes grouped so that there is
one set per container or job, not per process."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_exporter.attribution import cgroup_pressure, grouping, procfiles
from gpu_exporter.attribution.cgroup_pressure import (
    CgroupPaths,
    CpuLimit,
    CpuStat,
    parse_cpu_max,
    parse_cpu_stat,
    parse_oom_kills,
    parse_pressure,
    read_signals,
)
from gpu_exporter.attribution.cgroup_tree import CgroupTree, discover
from gpu_exporter.attribution.grouping import (
    Workload,
    group_by_workload,
    read_cgroups,
    workload_of,
    workload_signals,
)
from gpu_exporter.host.pressure import Pressure, Stall
from gpu_exporter.simulator.cgroupfs import pod_placement, slurm_placement, write_tenants
from gpu_exporter.simulator.tenants import CgroupCondition, Container, Pod, SlurmJobSpec, Tenants

CID = "4b2f9e1c" * 8


def v2_tree(root: Path) -> CgroupTree:
    """The cgroup v2 tree at ``root``, read as a host process would (its own
    cgroup is not in this tree: paths are placed as printed)."""
    write(root / "cgroup.controllers", "cpu io memory\n")
    return discover(root, "0::/\n", pid=-1)


def signals_at(root: Path, path: str) -> cgroup_pressure.CgroupSignals:
    return read_signals(v2_tree(root), CgroupPaths(unified=path))


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def pod(n: int, *containers: Container, qos: str = "burstable") -> Pod:
    return Pod.model_validate({"namespace": "ml", "name": f"job-{n}",
                               "uid": f"{n:08x}-0000-4000-8000-{n:012x}", "qos": qos,
                               "containers": [c.model_dump() for c in containers]})


# --- parsing -------------------------------------------------------------------
def test_pressure_lines_become_shares_and_seconds() -> None:
    text = ("some avg10=12.50 avg60=3.00 avg300=1.00 total=4000000\n"
            "full avg10=2.00 avg60=0.50 avg300=0.10 total=500000\n")
    assert parse_pressure(text) == Pressure(Stall(0.125, 4.0), Stall(0.02, 0.5))
    # cpu.pressure before kernel 5.13 has no "full" line
    assert parse_pressure("some avg10=1.00 avg60=0 avg300=0 total=10\n") == Pressure(
        Stall(0.01, 0.00001), None)


@pytest.mark.parametrize("text", [
    "", "\x00\x00", "full avg10=1 total=1\n",  # no "some"
    "some avg10=abc total=1\n", "some avg10=1.0 total=-5\n", "some avg10=nan total=1\n",
    "some avg10=101 total=1\n", "some avg10=1.0\n", "some total=1\n", "some avg10=inf total=1",
])
def test_pressure_files_that_make_no_sense_give_none(text: str) -> None:
    assert parse_pressure(text) is None


def test_cpu_stat_throttling_and_usage() -> None:
    text = ("usage_usec 9000000\nuser_usec 8000000\nsystem_usec 1000000\nnr_periods 600\n"
            "nr_throttled 150\nthrottled_usec 7500000\nnr_bursts 0\nburst_usec 0\n")
    assert parse_cpu_stat(text) == CpuStat(9.0, 600, 150, 7.5)
    # no cpu controller enabled: only the usage lines
    assert parse_cpu_stat("usage_usec 5\nuser_usec 3\nsystem_usec 2\n") == CpuStat(
        0.000005, None, None, None)
    assert parse_cpu_stat("nr_periods lots\n") is None
    assert parse_cpu_stat("") is None


@pytest.mark.parametrize(("text", "limit"), [
    ("400000 100000\n", CpuLimit(4.0, 0.1)),
    ("50000 100000", CpuLimit(0.5, 0.1)),
    ("max 100000\n", CpuLimit(None, 0.1)),
    ("max\n", None), ("1 0\n", None), ("-1 100000", None), ("x y", None), ("", None),
])
def test_cpu_max(text: str, limit: CpuLimit | None) -> None:
    assert parse_cpu_max(text) == limit


def test_oom_kills() -> None:
    assert parse_oom_kills("low 0\nhigh 0\nmax 4\noom 3\noom_kill 2\noom_group_kill 0\n") == 2
    assert parse_oom_kills("low 0\n") is None
    assert parse_oom_kills("oom_kill many\n") is None


@given(st.text(max_size=300))
@settings(max_examples=200, deadline=None)
def test_no_text_makes_a_parser_raise(text: str) -> None:
    parse_pressure(text)
    parse_cpu_stat(text)
    parse_cpu_max(text)
    parse_oom_kills(text)


# --- reading a cgroup ------------------------------------------------------------
def test_a_cgroup_written_by_the_simulator_reads_back(tmp_path: Path) -> None:
    cond = CgroupCondition(io_some=0.4, io_full=0.25, cpu_some=0.1, memory_some=0.05,
                           cpu_throttled_ratio=0.3, oom_kills=2)
    container = Container(name="trainer", cpu_limit=4.0, pids=[10], cgroup=cond)
    p = pod(1, container)
    write_tenants(Tenants(pods=[p]), tmp_path / "proc", tmp_path / "cg", elapsed=100.0)
    path = pod_placement(p, p.containers[0]).cgroup
    assert path is not None
    s = signals_at(tmp_path / "cg", path)
    assert s.io == Pressure(Stall(0.4, 40.0), Stall(0.25, 25.0))
    assert s.cpu is not None and s.cpu.some == Stall(0.1, 10.0)
    assert s.memory is not None and s.memory.some.avg10 == 0.05
    assert s.cpu_limit == CpuLimit(4.0, 0.1)
    assert s.cpu_stat is not None
    assert (s.cpu_stat.nr_periods, s.cpu_stat.nr_throttled) == (1000, 300)
    assert s.oom_kills == 2


def test_totals_grow_with_time_so_rates_are_the_condition(tmp_path: Path) -> None:
    cond = CgroupCondition(io_some=0.4, cpu_throttled_ratio=0.5)
    p = pod(2, Container(name="c", cpu_limit=2.0, cgroup=cond))
    path = pod_placement(p, p.containers[0]).cgroup
    assert path is not None
    write_tenants(Tenants(pods=[p]), tmp_path / "proc", tmp_path / "cg", elapsed=100.0)
    before = signals_at(tmp_path / "cg", path)
    write_tenants(Tenants(pods=[p]), tmp_path / "proc", tmp_path / "cg", elapsed=110.0)
    after = signals_at(tmp_path / "cg", path)
    assert before.io is not None and after.io is not None
    assert after.io.some.total_seconds - before.io.some.total_seconds == pytest.approx(4.0)
    assert before.cpu_stat is not None and after.cpu_stat is not None
    assert before.cpu_stat.nr_throttled is not None and after.cpu_stat.nr_throttled is not None
    assert after.cpu_stat.nr_throttled - before.cpu_stat.nr_throttled == 50


def test_a_cgroup_v1_host_or_a_kernel_without_psi_gives_nones(tmp_path: Path) -> None:
    # nothing under the path at all: said why
    s = signals_at(tmp_path, "/slurm/uid_1/job_2")
    assert (s.cpu, s.io, s.memory, s.cpu_stat, s.cpu_limit, s.oom_kills) == (None,) * 6
    assert s.problem is not None and "is not in the tree" in s.problem
    # psi=0: no pressure files; limits and events still there
    write(tmp_path / "a" / "cpu.max", "max 100000\n")
    write(tmp_path / "a" / "memory.events", "oom_kill 0\n")
    s = signals_at(tmp_path, "/a")
    assert (s.cpu, s.io, s.memory) == (None, None, None)
    assert s.cpu_limit == CpuLimit(None, 0.1) and s.oom_kills == 0


def test_garbage_files_give_none_for_that_signal_only(tmp_path: Path) -> None:
    write(tmp_path / "g" / "cpu.pressure", "\x00\xff garbage")
    write(tmp_path / "g" / "io.pressure", "some avg10=5.00 avg60=0 avg300=0 total=7\n")
    write(tmp_path / "g" / "memory.pressure", "x" * (procfiles.SMALL_FILE + 10))
    write(tmp_path / "g" / "cpu.stat", "nr_periods\n")
    write(tmp_path / "g" / "cpu.max", "lots 100000")
    (tmp_path / "g" / "memory.events").mkdir()
    s = signals_at(tmp_path, "/g")
    assert s.io == Pressure(Stall(0.05, 0.000007), None)
    assert (s.cpu, s.memory, s.cpu_stat, s.cpu_limit, s.oom_kills) == (None,) * 5


@pytest.mark.parametrize("path", ["/../cpu", "/a/../../cpu", "relative", "/a/\x00b"])
def test_paths_that_could_leave_the_cgroup_root_are_not_followed(tmp_path: Path,
                                                                 path: str) -> None:
    root = tmp_path / "cgroup"
    write(tmp_path / "cpu" / "cpu.max", "100000 100000\n")
    s = signals_at(root, path)
    assert s.cpu_limit is None and s.problem is not None


# --- grouping ------------------------------------------------------------------
def test_a_container_and_a_process_below_it_are_one_workload() -> None:
    scope = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_0000_4000_8000_00000000abcd.slice/cri-containerd-{CID}.scope"  # noqa: E501
    top = workload_of(f"0::{scope}\n")
    nested = workload_of(f"0::{scope}/init.scope\n")
    assert top == nested == Workload("container", CID, CgroupPaths(unified=scope),
                                     pod_uid="1234abcd-0000-4000-8000-00000000abcd")


def test_a_slurm_jobs_tasks_in_different_steps_are_one_workload() -> None:
    a = workload_of("0::/system.slice/slurmstepd.scope/job_9/step_0/user/task_0\n")
    b = workload_of("0::/system.slice/slurmstepd.scope/job_9/step_1/user/task_3\n")
    assert a == b == Workload("slurm_job", "9",
                              CgroupPaths(unified="/system.slice/slurmstepd.scope/job_9"))
    v1 = workload_of("4:memory:/slurm/uid_5/job_9/step_0/task_0\n")
    assert v1 == Workload("slurm_job", "9", CgroupPaths(memory="/slurm/uid_5/job_9"),
                          slurm_uid=5)


def test_host_processes_are_in_no_workload() -> None:
    assert workload_of("0::/user.slice/user-1000.slice/session-2.scope\n") is None
    assert workload_of("") is None


def test_64_pods_give_64_signal_sets_not_one_per_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pods = [pod(i, Container(name="main", cpu_limit=1.0 + i, pids=[1000 + 4 * i + k for k in
                                                                    range(3)],
                             cgroup=CgroupCondition(io_some=i / 100)),
                Container(name="sidecar", pids=[1000 + 4 * i + 3]),
                qos="guaranteed" if i % 2 else "burstable")
            for i in range(64)]
    job = SlurmJobSpec(job_id=5150, cgroup_version=2, pids=[9000, 9001, 9002],
                   cgroup=CgroupCondition(io_some=0.9))
    tenants = Tenants(pods=pods, slurm_jobs=[job])
    write_tenants(tenants, tmp_path / "proc", tmp_path / "cg", elapsed=50.0)
    # GPU processes: the main containers' and the job's; sidecars hold no GPU.
    gpu_pids = [p for x in pods for p in x.containers[0].pids] + job.pids
    assert len(gpu_pids) == 64 * 3 + 3

    reads: list[str] = []
    real = grouping.read_signals

    def counting(tree: CgroupTree, paths: CgroupPaths) -> cgroup_pressure.CgroupSignals:
        reads.append(paths.key())
        return real(tree, paths)

    monkeypatch.setattr(grouping, "read_signals", counting)
    groups = group_by_workload(read_cgroups(tmp_path / "proc", gpu_pids))
    signals = workload_signals(v2_tree(tmp_path / "cg"), groups)
    assert len(groups) == len(signals) == len(reads) == 65
    assert sorted(len(pids) for pids in groups.values()) == [3] * 65
    for i, p in enumerate(pods):
        path = pod_placement(p, p.containers[0]).cgroup
        [(w, s)] = [(w, s) for w, s in signals.items() if w.paths.unified == path]
        assert w.pod_uid == p.uid
        assert s.io is not None and s.io.some.avg10 == pytest.approx(i / 100)
        assert s.cpu_limit == CpuLimit(1.0 + i, 0.1)
    # The job's own cgroup, not the tasks' leaf (whose files the simulator
    # leaves at zero).
    [(w, s)] = [(w, s) for w, s in signals.items() if w.kind == "slurm_job"]
    assert w.paths.unified == slurm_placement(job).cgroup
    assert s.io is not None and s.io.some.avg10 == pytest.approx(0.9)


def test_unreadable_or_vanished_processes_are_left_out(tmp_path: Path) -> None:
    write(tmp_path / "1" / "cgroup", f"0::/kubepods/burstable/pod1/{CID}\n")
    (tmp_path / "2" / "cgroup").mkdir(parents=True)
    assert read_cgroups(tmp_path, [1, 2, 3]) == {1: f"0::/kubepods/burstable/pod1/{CID}\n"}


@pytest.mark.parametrize("text", ["nr_periods \u00b2\n", "oom_kill \u0663\n"])
def test_counters_in_other_scripts_digits_are_refused(text: str) -> None:
    assert parse_cpu_stat(text) is None
    assert parse_oom_kills(text) is None
    assert parse_pressure("some avg10=\uff11 total=\u00b2\n") is None
    assert parse_cpu_max("\u00b2 100000") is None


@pytest.mark.parametrize(("path", "workload_path"), [
    # cgroupfs driver: the bare container id
    (f"/kubepods/burstable/pod6f1d3c2a-9b7e-4c1d-8e2f-0a1b2c3d4e5f/{CID}",
     f"/kubepods/burstable/pod6f1d3c2a-9b7e-4c1d-8e2f-0a1b2c3d4e5f/{CID}"),
    # CRI-O and Docker scopes, with a process below the scope
    (f"/kubepods.slice/kubepods-pod6f1d3c2a_9b7e_4c1d_8e2f_0a1b2c3d4e5f.slice/crio-{CID}.scope/x",
     f"/kubepods.slice/kubepods-pod6f1d3c2a_9b7e_4c1d_8e2f_0a1b2c3d4e5f.slice/crio-{CID}.scope"),
    (f"/system.slice/docker-{CID}.scope", f"/system.slice/docker-{CID}.scope"),
])
def test_container_cgroups_of_each_runtime_are_cut_at_the_container(
        path: str, workload_path: str) -> None:
    w = workload_of(f"0::{path}\n")
    assert w is not None and w.kind == "container" and w.id == CID
    assert w.paths.unified == workload_path
