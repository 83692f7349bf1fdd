"""A GPU process's Slurm job from the cgroup slurmd put it in (v1 and v2
layouts), or from SLURM_JOB_ID where the environment can be read; and hostile
/proc files never raise."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_exporter.attribution import procfiles, slurm
from gpu_exporter.attribution.slurm import SlurmJob, job_from_cgroup, read_job
from gpu_exporter.simulator.cgroupfs import slurm_placement, write_tenants
from gpu_exporter.simulator.tenants import SlurmJob as JobSpec
from gpu_exporter.simulator.tenants import Tenants

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


def test_the_environment_is_the_fallback_and_only_slurm_job_id_is_taken(
        tmp_path: Path) -> None:
    write(tmp_path / "200" / "cgroup", "0::/user.slice/user-1000.slice/session-1.scope\n")
    write(tmp_path / "200" / "environ",
          b"HOME=/home/a\0AWS_SECRET_ACCESS_KEY=hunter2\0SLURM_JOB_ID=777\0SLURM_STEP_ID=0\0")
    write(tmp_path / "200" / "status", "Uid:\t1000\t1000\t1000\t1000\n")
    job = read_job(tmp_path, 200)
    assert job == SlurmJob("777", 1000, None, None, "environ")
    assert "hunter2" not in repr(job)


def test_the_cgroup_wins_over_the_environment(tmp_path: Path) -> None:
    # A job can set its own environment; it cannot move its cgroup.
    write(tmp_path / "201" / "cgroup", V1)
    write(tmp_path / "201" / "environ", b"SLURM_JOB_ID=1\0")
    job = read_job(tmp_path, 201)
    assert job is not None and job.job_id == "4242" and job.source == "cgroup"


@pytest.mark.parametrize("environ", [
    b"SLURM_JOB_ID=\0", b"SLURM_JOB_ID=12; rm -rf /\0", b"SLURM_JOB_ID=-1\0",
    b"XSLURM_JOB_ID=5\0", b"SLURM_JOB_ID=" + b"9" * 40 + b"\0", b"\xff\xfe\0\0\0",
])
def test_environment_values_that_are_not_job_ids_are_ignored(tmp_path: Path,
                                                              environ: bytes) -> None:
    write(tmp_path / "202" / "environ", environ)
    assert read_job(tmp_path, 202) is None


def test_unreadable_missing_or_odd_files_give_none(tmp_path: Path) -> None:
    assert read_job(tmp_path, 1) is None  # no such process
    (tmp_path / "2" / "cgroup").mkdir(parents=True)  # a directory where the file was
    (tmp_path / "2" / "environ").mkdir(parents=True)
    assert read_job(tmp_path, 2) is None
    write(tmp_path / "3" / "cgroup", b"\x00" * 100 + V1.encode() + b"\x00")
    job = read_job(tmp_path, 3)
    # NULs on other lines do not hide the job's lines.
    assert job is not None and job.job_id == "4242"


def test_a_huge_cgroup_file_is_not_read_whole(tmp_path: Path) -> None:
    # Far past any real one: refused rather than half-parsed.
    write(tmp_path / "4" / "cgroup", V1 + "x" * (procfiles.SMALL_FILE + 1))
    assert read_job(tmp_path, 4) is None


def test_a_job_id_past_the_environment_limit_is_not_searched_for(tmp_path: Path) -> None:
    write(tmp_path / "5" / "environ",
          b"A=" + b"x" * slurm.ENVIRON_LIMIT + b"\0SLURM_JOB_ID=9\0")
    assert read_job(tmp_path, 5) is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads whatever the file's mode")
def test_an_environment_without_permission_is_skipped(tmp_path: Path) -> None:
    path = write(tmp_path / "6" / "environ", b"SLURM_JOB_ID=9\0")
    path.chmod(0)
    assert read_job(tmp_path, 6) is None


@pytest.mark.parametrize("version", [1, 2])
def test_simulated_slurm_processes_map_to_their_job(tmp_path: Path, version: int) -> None:
    spec = JobSpec(job_id=31337, uid=1200, step="2", cgroup_version=version, pids=[700, 701])
    write_tenants(Tenants(slurm_jobs=[spec]), tmp_path / "proc", tmp_path / "cgroup", 60.0)
    for pid in (700, 701):
        write(tmp_path / "proc" / str(pid) / "status", "Uid:\t1200\t1200\t1200\t1200\n")
        job = read_job(tmp_path / "proc", pid)
        assert job is not None
        assert (job.job_id, job.uid, job.step) == ("31337", 1200, "2")
        assert job.cgroup == slurm_placement(spec).cgroup


@given(st.binary(max_size=600))
@settings(max_examples=300, deadline=None)
def test_any_environment_bytes_are_parsed_without_raising(data: bytes) -> None:
    job_id = slurm.job_from_environ(data)
    if job_id is not None:
        assert job_id.isdigit() and len(job_id) <= 10


@pytest.mark.parametrize("text", ["0::/system.slice/slurmstepd.scope/job_\u0663\u0664/step_0\n",
                                  "4:memory:/slurm/uid_\u00b2/job_5/step_0\n"])
def test_digits_of_other_scripts_are_not_job_or_user_ids(text: str) -> None:
    assert job_from_cgroup(text) is None


def test_a_uid_in_other_digits_is_not_taken(tmp_path: Path) -> None:
    write(tmp_path / "7" / "cgroup", V2)
    write(tmp_path / "7" / "status", "Uid:\t\u00b2\t1\t1\t1\n")
    job = read_job(tmp_path, 7)
    assert job is not None and job.job_id == "4243" and job.uid is None
