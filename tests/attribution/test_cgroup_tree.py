"""Placing a cgroup path as /proc/PID/cgroup prints it to the exporter, in
trees laid out as each layout lays them out (files only: the real kernel's
own answer is tests/kernel/test_real_kernel.py): the exporter in a private
cgroup namespace, on the host, in a tree that is only its own; v2, hybrid and
v1; v1's CPU quota and memory limit read where the unified hierarchy lacks
them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.attribution import cgroup_tree
from gpu_exporter.attribution.cgroup_pressure import CgroupPaths, CpuLimit, read_signals
from gpu_exporter.attribution.cgroup_tree import (
    Hierarchy,
    Problem,
    discover,
    find_namespace_root,
    parse_self_cgroup,
)
from gpu_exporter.attribution.grouping import workload_of

PID = 4321
EXPORTER = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podee.slice/cri-x.scope"
CID = "9c" * 32
OTHER = ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda1.slice/"
         f"cri-containerd-{CID}.scope")
SEEN = f"/../../kubepods-burstable-poda1.slice/cri-containerd-{CID}.scope"
PRESSURE = "some avg10=12.00 avg60=0 avg300=0 total=500\nfull avg10=0 avg60=0 avg300=0 total=0\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def cgroup(root: Path, path: str, files: dict[str, str]) -> Path:
    directory = root / path.lstrip("/")
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write(directory / name, text)
    return directory


def v2_node(root: Path) -> Path:
    write(root / "cgroup.controllers", "cpu io memory\n")
    cgroup(root, EXPORTER, {"cgroup.procs": f"{PID}\n"})
    cgroup(root, OTHER, {"cgroup.procs": "77\n", "cpu.pressure": PRESSURE,
                         "cpu.max": "50000 100000\n", "cpu.stat": "nr_periods 10\n"})
    return root


def test_a_path_relative_to_a_private_namespace_is_placed_under_its_root(
        tmp_path: Path) -> None:
    tree = discover(v2_node(tmp_path), "0::/\n", PID)
    assert tree.layout == "v2"
    assert tree.unified is not None
    assert tree.unified.ns_root == tuple(EXPORTER.strip("/").split("/"))
    printed = SEEN
    assert tree.unified.directory(printed) == str(tmp_path / OTHER.lstrip("/"))
    s = read_signals(tree, CgroupPaths(unified=printed))
    assert s.problem is None and s.cpu_limit == CpuLimit(0.5, 0.1)


def test_the_exporters_own_path_below_its_namespace_root_is_taken_off(tmp_path: Path) -> None:
    # Moved below its namespace root after the namespace was made (systemd's
    # init.scope inside a container): its own printed path is "/init.scope".
    v2_node(tmp_path)
    cgroup(tmp_path, EXPORTER + "/init.scope", {"cgroup.procs": f"{PID}\n"})
    (tmp_path / EXPORTER.lstrip("/") / "cgroup.procs").write_text("")
    root = find_namespace_root(str(tmp_path), "/init.scope", PID)
    assert root == tuple(EXPORTER.strip("/").split("/"))


def test_on_the_host_paths_are_placed_as_printed(tmp_path: Path) -> None:
    v2_node(tmp_path)
    tree = discover(tmp_path, f"0::{EXPORTER}\n", PID)
    assert tree.unified is not None and tree.unified.ns_root == ()
    assert tree.unified.directory(OTHER) == str(tmp_path / OTHER.lstrip("/"))


def test_a_tree_that_is_only_the_exporters_own_says_outside(tmp_path: Path) -> None:
    # The pod's own /sys/fs/cgroup: its namespace root is the mount's root.
    write(tmp_path / "cgroup.controllers", "cpu\n")
    write(tmp_path / "cgroup.procs", f"{PID}\n")
    tree = discover(tmp_path, "0::/\n", PID)
    assert tree.unified is not None and tree.unified.ns_root == ()
    s = read_signals(tree, CgroupPaths(unified="/../../poda1.slice/cri-y.scope"))
    assert s.problem == Problem.OUTSIDE.say(str(tmp_path))


def test_without_its_own_cgroup_relative_paths_are_refused_and_absolute_ones_placed(
        tmp_path: Path) -> None:
    v2_node(tmp_path)
    tree = discover(tmp_path, "0::/\n", PID + 1)  # not listed anywhere
    assert tree.unified is not None and tree.unified.ns_root is None
    s = read_signals(tree, CgroupPaths(unified="/../../poda1.slice/cri-y.scope"))
    assert s.problem == Problem.NAMESPACE_ROOT_UNKNOWN.say(str(tmp_path))
    assert read_signals(tree, CgroupPaths(unified=OTHER)).problem is None


@pytest.mark.parametrize("printed", ["/../../../../../../etc", "/a/\x00", "relative"])
def test_no_path_leaves_the_mounted_hierarchy(tmp_path: Path, printed: str) -> None:
    h = Hierarchy("unified", str(tmp_path), ("a", "b"))
    assert isinstance(h.directory(printed), Problem)


def test_no_tree_at_all_is_said(tmp_path: Path) -> None:
    tree = discover(tmp_path / "absent", "0::/\n", PID)
    assert tree.layout == "none"
    s = read_signals(tree, CgroupPaths(unified=OTHER))
    assert s.problem == Problem.NO_TREE.say(str(tmp_path / "absent"))


def test_a_cgroup_gone_is_not_found(tmp_path: Path) -> None:
    tree = discover(v2_node(tmp_path), f"0::{EXPORTER}\n", PID)
    s = read_signals(tree, CgroupPaths(unified="/kubepods.slice/gone.scope"))
    assert s.problem == Problem.NOT_FOUND.say(str(tmp_path))


def hybrid_node(root: Path) -> Path:
    """v1 controllers (cpu and cpuacct mounted apart, as here), cgroup2 at
    unified/ holding only the pressure files."""
    write(root / "unified" / "cgroup.controllers", "\n")
    write(root / "cpu" / "cpu.cfs_quota_us", "-1\n")
    write(root / "memory" / "memory.limit_in_bytes", "9223372036854771712\n")
    write(root / "pids" / "pids.max", "max\n")
    for h in ("unified", "cpu", "memory"):
        cgroup(root / h, EXPORTER, {"cgroup.procs": f"{PID}\n"})
    cgroup(root / "unified", OTHER, {"cpu.pressure": PRESSURE, "cpu.stat": "usage_usec 9\n"})
    cgroup(root / "cpu", OTHER, {
        "cpu.stat": "nr_periods 200\nnr_throttled 150\nthrottled_time 3000000000\n",
        "cpu.cfs_quota_us": "5000\n", "cpu.cfs_period_us": "100000\n"})
    cgroup(root / "memory", OTHER, {
        "memory.limit_in_bytes": f"{128 << 20}\n", "memory.usage_in_bytes": f"{40 << 20}\n",
        "memory.failcnt": "7\n", "memory.oom_control": "oom_kill_disable 0\noom_kill 2\n"})
    return root


def test_a_hybrid_host_reads_pressure_from_unified_and_limits_from_v1(tmp_path: Path) -> None:
    own = f"0::/\n4:memory:/\n2:cpu:/\n3:cpuacct:/\n1:name=systemd:{EXPORTER}\n"
    tree = discover(hybrid_node(tmp_path), own, PID)
    assert tree.layout == "hybrid"
    assert tree.cpu is not None and tree.cpu.mount == str(tmp_path / "cpu")
    assert tree.memory is not None and tree.memory.mount == str(tmp_path / "memory")
    printed = SEEN
    text = f"0::{printed}\n4:memory:{printed}\n2:cpu:{printed}\n3:cpuacct:{printed}\n"
    w = workload_of(text)
    assert w is not None
    s = read_signals(tree, w.paths)
    assert s.problem is None
    assert s.cpu is not None and s.cpu.some.avg10 == pytest.approx(0.12)
    assert s.cpu_limit == CpuLimit(0.05, 0.1)
    assert s.cpu_stat is not None
    assert (s.cpu_stat.usage_seconds, s.cpu_stat.nr_periods, s.cpu_stat.nr_throttled,
            s.cpu_stat.throttled_seconds) == (9e-6, 200, 150, 3.0)
    assert s.memory_state is not None
    assert (s.memory_state.limit_bytes, s.memory_state.used_bytes,
            s.memory_state.limit_hits) == (128 << 20, 40 << 20, 7)
    assert s.oom_kills == 2


def test_v1s_no_limit_reads_as_none(tmp_path: Path) -> None:
    hybrid_node(tmp_path)
    write(tmp_path / "memory" / OTHER.lstrip("/") / "memory.limit_in_bytes",
          "9223372036854771712\n")
    write(tmp_path / "cpu" / OTHER.lstrip("/") / "cpu.cfs_quota_us", "-1\n")
    tree = discover(tmp_path, "0::/\n4:memory:/\n2:cpu:/\n", PID)
    s = read_signals(tree, CgroupPaths(SEEN,
                                       SEEN,
                                       SEEN))
    assert s.cpu_limit == CpuLimit(None, 0.1)
    assert s.memory_state is not None and s.memory_state.limit_bytes is None


def test_a_v1_only_host_is_read_from_its_controllers(tmp_path: Path) -> None:
    hybrid_node(tmp_path)
    (tmp_path / "unified" / "cgroup.controllers").unlink()
    tree = discover(tmp_path, "4:memory:/\n2:cpu:/\n", PID)
    assert tree.layout == "v1" and tree.unified is None
    job = "/../../../../slurm/uid_5/job_9/step_0/task_0"
    cgroup(tmp_path / "cpu", "/slurm/uid_5/job_9", {"cpu.cfs_quota_us": "200000\n",
                                                    "cpu.cfs_period_us": "100000\n"})
    w = workload_of(f"4:memory:{job}\n2:cpu:{job}\n")
    assert w is not None and w.kind == "slurm_job" and w.slurm_uid == 5
    assert read_signals(tree, w.paths).cpu_limit == CpuLimit(2.0, 0.1)


def test_the_exporters_own_cgroup_file_is_read_by_hierarchy() -> None:
    paths = parse_self_cgroup("12:cpu,cpuacct:/a\n4:memory:/b\n0::/c\n1:name=systemd:/d\n"
                              "garbage\n")
    assert paths == {"cpu": "/a", "cpuacct": "/a", "memory": "/b", "unified": "/c",
                     "name=systemd": "/d"}


def test_the_search_for_its_own_cgroup_is_bounded(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroup_tree, "SEARCH_MAX_DIRS", 5)
    v2_node(tmp_path)
    # Past five directories the exporter's own (seven deep) is never reached.
    assert find_namespace_root(str(tmp_path), "/", PID) is None


def test_a_root_found_in_one_hierarchy_is_tried_first_in_the_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hybrid_node(tmp_path)
    walked: list[str] = []
    real = cgroup_tree._walk

    def walk(mount: str):  # type: ignore[no-untyped-def]
        walked.append(mount)
        return real(mount)

    monkeypatch.setattr(cgroup_tree, "_walk", walk)
    tree = discover(tmp_path, "0::/\n4:memory:/\n2:cpu:/\n", PID)
    assert tree.cpu is not None and tree.memory is not None and tree.unified is not None
    assert tree.cpu.ns_root == tree.memory.ns_root == tree.unified.ns_root
    # Only the unified hierarchy was searched; the v1 ones were found at once.
    assert walked == [str(tmp_path / "unified")]
