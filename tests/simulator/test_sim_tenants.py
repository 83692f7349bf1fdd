"""The simulator's tenants schema refuses what no kubelet or slurmd would
make, and its cgroup layouts are the ones the readers parse."""

from __future__ import annotations

import re

import pytest
import yaml

from gpu_exporter.host.procs import cgroup_ids
from gpu_exporter.settings.sections import ValidationError
from gpu_exporter.simulator import load_scenario
from gpu_exporter.simulator.cgroupfs import pod_placement, slurm_placement
from gpu_exporter.simulator.model import ProcessCondition
from gpu_exporter.simulator.tenants import Container, Pod, SlurmJobSpec, Tenants
from tests.simnode import SimRun
from tests.tools import ROOT

UID = "6f1d3c2a-9b7e-4c1d-8e2f-0a1b2c3d4e5f"


def test_a_pod_with_two_containers_of_one_name_is_refused() -> None:
    with pytest.raises(ValidationError, match="container names repeat"):
        Pod(namespace="ml", name="a", uid=UID,
            containers=[Container(name="c"), Container(name="c")])


def test_a_process_in_two_workloads_is_refused() -> None:
    pod = Pod(namespace="ml", name="a", uid=UID, containers=[Container(name="c", pids=[5])])
    with pytest.raises(ValidationError, match="more than one"):
        Tenants(pods=[pod], slurm_jobs=[SlurmJobSpec(job_id=1, pids=[5])])


@pytest.mark.parametrize("fields", [
    {"namespace": "ML", "name": "a"}, {"namespace": "ml", "name": "a b"},
    {"namespace": "ml", "name": "a", "uid": "not-a-uid"},
    {"namespace": "ml", "name": 'a"}'},
])
def test_names_kubernetes_would_refuse_are_refused(fields: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        Pod.model_validate({"uid": UID, "containers": [{"name": "c"}], **fields})


@pytest.mark.parametrize("qos", ["guaranteed", "burstable", "besteffort"])
def test_pod_cgroups_carry_the_pod_uid_and_container_id(qos: str) -> None:
    pod = Pod(namespace="ml", name="a", uid=UID, qos=qos, containers=[Container(name="c")])
    placement = pod_placement(pod, pod.containers[0])
    assert placement.cgroup is not None
    assert cgroup_ids(placement.proc_cgroup) == (pod.containers[0].container_id(pod), UID)
    assert placement.cgroup.endswith(".scope")


def test_slurm_layouts() -> None:
    v2 = slurm_placement(SlurmJobSpec(job_id=7, step="batch"))
    assert v2.proc_cgroup == "0::/system.slice/slurmstepd.scope/job_7/step_batch/user/task_0\n"
    assert v2.cgroup == "/system.slice/slurmstepd.scope/job_7"
    v1 = slurm_placement(SlurmJobSpec(job_id=7, uid=42, cgroup_version=1))
    assert "memory:/slurm/uid_42/job_7/step_0/task_0" in v1.proc_cgroup
    assert v1.cgroup is None


def test_the_design_notes_example_is_a_valid_tenants_section() -> None:
    text = (ROOT / "docs" / "attribution.md").read_text()
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "tenants:" in b]
    tenants = Tenants.model_validate(yaml.safe_load(block)["tenants"])
    assert [p.name for p in tenants.pods] == ["train-a", "infer-b"]
    assert tenants.slurm_jobs[0].gpus == [6, 7]


def test_each_process_runs_as_its_tenants_user() -> None:
    """/proc/PID/status's Uid: the Slurm job's user, the container's
    run_as_uid, a process's own where it names one, 1000 for the rest."""
    procs = [ProcessCondition(pid=pid, comm="python", gpus=[0], gpu_memory_ratio=0.1,
                              **({"uid": 0} if pid == 7003 else {}))
             for pid in (7001, 7002, 7003, 7004)]
    tenants = Tenants(
        pods=[Pod(namespace="ml", name="a", uid=UID,
                  containers=[Container(name="c", pids=[7001], run_as_uid=4242)])],
        slurm_jobs=[SlurmJobSpec(job_id=9, uid=2001, pids=[7002, 7003])])
    scenario = load_scenario("healthy").model_copy(
        update={"processes": procs, "tenants": tenants})
    with SimRun(scenario) as run:
        run.poll(1)
        procfs = run.node.procfs

        def uid_of(pid: int) -> list[str]:
            line = next(x for x in (procfs / str(pid) / "status").read_text().splitlines()
                        if x.startswith("Uid:"))
            return line.split()[1:]

        assert uid_of(7001) == ["4242"] * 4
        assert uid_of(7002) == ["2001"] * 4
        assert uid_of(7003) == ["0"] * 4  # its own, though in the job
        assert uid_of(7004) == ["1000"] * 4
