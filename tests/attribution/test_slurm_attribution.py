"""A GPU process's Slurm job from the cgroup slurmd put it in (v1 and v2
layouts), or from the nearest slurmstepd's process title; and hostile
/proc files never raise."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_exporter.attribution import procfiles, slurm
from gpu_exporter.attribution.slurm import SlurmJob, job_from_cgroup, read_job
from gpu_exporter.simulator.cgroupfs import slurm_placement, write_tenants
from gpu_exporter.simulator.tenants import SlurmJobSpec, Tenants

V1 = """12:pids:/system.slice/slurmd.service
11:memory:/slurm/uid_1001/job_4242/step_0/task_1
10:devices:/slurm/uid_1001/job_4242/step_0
9:freezer:/slurm/uid_1001/job_4242/step_0
7:cpuset:/slurm/uid_1001/job_4242/step_0
3:cpu,cpuacct:/system.slice/slurmd.service
1:name=systemd:/system.slice/slurmd.service
"""
V2 = "0::/system.slice/slurmstepd.scope/job_4243/step_batch/user/task_0\n"


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(("text", "expected"), [
    (V1, SlurmJob("4242", 1001, "0", None, "cgroup")),
    (V2, SlurmJob("4243", None, "batch",
                  "/system.slice/slurmstepd.scope/job_4243", "cgroup")),
    # several slurmd on one host name their cgroups after the node
    ("4:memory:/slurm_gpu-07/uid_0/job_17/step_extern/task_0\n",
     SlurmJob("17", 0, "extern", None, "cgroup")),
    ("0::/system.slice/gpu-07_slurmstepd.scope/job_18/step_3/user/task_2\n",
     SlurmJob("18", None, "3", "/system.slice/gpu-07_slurmstepd.scope/job_18", "cgroup")),
    # the step's own slurmstepd, and a process placed at the job level
    ("0::/system.slice/slurmstepd.scope/job_19/step_0/slurm\n",
     SlurmJob("19", None, "0", "/system.slice/slurmstepd.scope/job_19", "cgroup")),
    ("0::/system.slice/slurmstepd.scope/job_20\n",
     SlurmJob("20", None, None, "/system.slice/slurmstepd.scope/job_20", "cgroup")),
    # slurmd not under systemd (a container, IgnoreSystemd=yes)
    ("0::/slurmstepd.scope/job_21/step_interactive/user/task_0\n",
     SlurmJob("21", None, "interactive", "/slurmstepd.scope/job_21", "cgroup")),
    # hybrid host: the job on v1 controllers, the unified line elsewhere
    ("0::/system.slice/slurmd.service\n5:memory:/slurm/uid_7/job_22/step_1/task_0\n",
     SlurmJob("22", 7, "1", None, "cgroup")),
])
def test_cgroup_layouts_map_to_the_job(text: str, expected: SlurmJob) -> None:
    assert job_from_cgroup(text) == expected


@pytest.mark.parametrize("text", [
    "0::/user.slice/user-1000.slice/session-3.scope\n",
    "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-" + "a" * 64 + ".scope\n",
    "0::/system.slice/slurmstepd.scope/job_/step_0\n",  # no id
    "0::/system.slice/slurmstepd.scope/job_12345678901/step_0\n",  # beyond 32 bits of digits
    "0::/system.slice/slurmstepd.scope/job_12x/step_0\n",
    "0::/not-slurmstepd.scopex/job_5\n",
    "4:memory:/slurm/uid_/job_5/step_0\n",
    "4:memory:/slurmx/uid_1/job_5\n",
    "", "\x00\x00\x00", "0::", "garbage without colons",
])
def test_paths_that_name_no_job(text: str) -> None:
    assert job_from_cgroup(text) is None


@given(st.text(max_size=400))
@settings(max_examples=300, deadline=None)
def test_any_cgroup_text_is_parsed_without_raising(text: str) -> None:
    job = job_from_cgroup(text)
    if job is not None:
        assert job.job_id.isdigit()


def test_the_v2_user_comes_from_the_process_when_the_path_has_none(tmp_path: Path) -> None:
    write(tmp_path / "100" / "cgroup", V2)
    write(tmp_path / "100" / "status", "Name:\tpython\nUid:\t1005\t1005\t1005\t1005\n")
    job = read_job(tmp_path, 100)
    assert job == SlurmJob("4243", 1005, "batch", "/system.slice/slurmstepd.scope/job_4243",
                           "cgroup")


def stepd_chain(root: Path, task: int, *, title: bytes = b"slurmstepd: [777.0]\0",
                hops: int = 2) -> None:
    """A task whose ancestor ``hops`` levels up is slurmstepd with ``title``."""
    pid = task
    for level in range(hops):
        parent = 9000 + task * 10 + level
        write(root / str(pid) / "stat", f"{pid} (python x) S {parent} 1 1 0 -1\n")
        write(root / str(pid) / "comm", "python\n")
        pid = parent
    write(root / str(pid) / "stat", f"{pid} (slurmstepd) S 1 1 1 0 -1\n")
    write(root / str(pid) / "comm", "slurmstepd\n")
    write(root / str(pid) / "cmdline", title)


def test_the_nearest_slurmstepd_names_the_job_without_cgroup(tmp_path: Path) -> None:
    # proctrack/linuxproc with no task/cgroup: the path names no job.
    write(tmp_path / "200" / "cgroup", "0::/user.slice/user-1000.slice/session-1.scope\n")
    write(tmp_path / "200" / "environ", b"SLURM_JOB_ID=1\0AWS_SECRET_ACCESS_KEY=hunter2\0")
    write(tmp_path / "200" / "status", "Uid:\t1000\t1000\t1000\t1000\n")
    stepd_chain(tmp_path, 200)
    job = read_job(tmp_path, 200)
    assert job == SlurmJob("777", 1000, "0", None, "slurmstepd")


def test_the_environment_is_never_read(tmp_path: Path) -> None:
    # A job can set its own environment; another user's needs CAP_SYS_PTRACE.
    write(tmp_path / "201" / "cgroup", "0::/user.slice\n")
    write(tmp_path / "201" / "environ", b"SLURM_JOB_ID=5\0")
    write(tmp_path / "201" / "stat", "201 (python) S 1 1 1 0 -1\n")
    assert read_job(tmp_path, 201) is None


def test_the_cgroup_wins_over_the_ancestor(tmp_path: Path) -> None:
    write(tmp_path / "202" / "cgroup", V1)
    stepd_chain(tmp_path, 202, title=b"slurmstepd: [1.0]\0")
    job = read_job(tmp_path, 202)
    assert job is not None and job.job_id == "4242" and job.source == "cgroup"


@pytest.mark.parametrize("title", [
    b"slurmstepd: [12; rm -rf /]\0", b"slurmstepd: [-1.0]\0", b"slurmstepd: []\0",
    b"xslurmstepd: [5.0]\0", b"slurmstepd: [" + b"9" * 40 + b".0]\0", b"\xff\xfe\0\0",
    b"slurmstepd: [5.0]" + b"x" * (slurm.TITLE_LIMIT + 1),
])
def test_titles_that_are_not_a_job_are_ignored(tmp_path: Path, title: bytes) -> None:
    stepd_chain(tmp_path, 203, title=title)
    assert read_job(tmp_path, 203) is None


def test_a_slurmstepd_past_the_ancestor_bound_is_not_searched_for(tmp_path: Path) -> None:
    stepd_chain(tmp_path, 204, hops=slurm.ANCESTORS_MAX + 1)
    assert read_job(tmp_path, 204) is None
    stepd_chain(tmp_path, 205, hops=slurm.ANCESTORS_MAX - 1)
    assert read_job(tmp_path, 205) is not None


def test_a_parent_loop_ends(tmp_path: Path) -> None:
    write(tmp_path / "206" / "stat", "206 (a) S 207 1 1 0 -1\n")
    write(tmp_path / "207" / "stat", "207 (b) S 206 1 1 0 -1\n")
    assert read_job(tmp_path, 206) is None


def test_unreadable_missing_or_odd_files_give_none(tmp_path: Path) -> None:
    assert read_job(tmp_path, 1) is None  # no such process
    (tmp_path / "2" / "cgroup").mkdir(parents=True)  # a directory where the file was
    (tmp_path / "2" / "stat").mkdir(parents=True)
    assert read_job(tmp_path, 2) is None
    write(tmp_path / "3" / "cgroup", b"\x00" * 100 + V1.encode() + b"\x00")
    job = read_job(tmp_path, 3)
    # NULs on other lines do not hide the job's lines.
    assert job is not None and job.job_id == "4242"


def test_a_huge_cgroup_file_is_not_read_whole(tmp_path: Path) -> None:
    # Far past any real one: refused rather than half-parsed.
    write(tmp_path / "4" / "cgroup", V1 + "x" * (procfiles.SMALL_FILE + 1))
    assert read_job(tmp_path, 4) is None


@pytest.mark.parametrize("version", [1, 2])
def test_simulated_slurm_processes_map_to_their_job(tmp_path: Path, version: int) -> None:
    spec = SlurmJobSpec(job_id=31337, uid=1200, step="2", cgroup_version=version, pids=[700, 701])
    write_tenants(Tenants(slurm_jobs=[spec]), tmp_path / "proc", tmp_path / "cgroup", 60.0)
    for pid in (700, 701):
        write(tmp_path / "proc" / str(pid) / "status", "Uid:\t1200\t1200\t1200\t1200\n")
        job = read_job(tmp_path / "proc", pid)
        assert job is not None
        assert (job.job_id, job.uid, job.step) == ("31337", 1200, "2")
        assert job.cgroup == slurm_placement(spec).cgroup


@given(st.binary(max_size=600))
@settings(max_examples=300, deadline=None)
def test_any_title_bytes_are_parsed_without_raising(data: bytes) -> None:
    found = slurm.job_from_title(data)
    if found is not None:
        assert found[0].isdigit() and len(found[0]) <= 10


@pytest.mark.parametrize("text", ["0::/system.slice/slurmstepd.scope/job_\u0663\u0664/step_0\n",
                                  "4:memory:/slurm/uid_\u00b2/job_5/step_0\n"])
def test_digits_of_other_scripts_are_not_job_or_user_ids(text: str) -> None:
    assert job_from_cgroup(text) is None


def test_a_uid_in_other_digits_is_not_taken(tmp_path: Path) -> None:
    write(tmp_path / "7" / "cgroup", V2)
    write(tmp_path / "7" / "status", "Uid:\t\u00b2\t1\t1\t1\n")
    job = read_job(tmp_path, 7)
    assert job is not None and job.job_id == "4243" and job.uid is None
