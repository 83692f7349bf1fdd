"""The built-in scenario of a pod whose code runs on the CPU beside its GPU,
run through the whole exporter (the simulated kubelet and its device-plugin
checkpoint, the pod's cgroup files, NVML), and the same node changed at the
one thing the row turns on: the pod idle, the pod at work on its GPU, the
checkpoint absent (not judged, and said why)."""

from __future__ import annotations

import json
import os

from gpu_exporter.diagnosis.coverage import COVERAGE, Kind
from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.simulator import SimulatedNode, load_scenario
from gpu_exporter.simulator.model import Scenario
from tests.simnode import DetailRun, VirtualClock

NAME = "gpu-allocated-unused-runs-on-cpu"
RUNS_ON_CPU = (7, "gpu_allocated_unused", "runs_on_cpu")
NO_PROCESS = (7, "gpu_allocated_unused", "no_process")
POD_UID = "4e5f6071-8293-4a4b-a5d6-e7f8091a2b3c"


def run(scenario: Scenario) -> Snapshot:
    with DetailRun(scenario) as r:
        return r.poll(45)


def findings(snap: Snapshot) -> set[tuple[int, str, str]]:
    return {(f.gpu, f.row.symptom, f.row.cause) for f in snap.derived(FINDINGS) or ()}


def with_process(scenario: Scenario, **changes: object) -> Scenario:
    procs = [p.model_copy(update=changes) if p.pid == 24107 else p
             for p in scenario.processes]
    return scenario.model_copy(update={"processes": procs})


def test_the_pod_busy_on_the_cpu_is_named_and_explains_the_unused_gpu() -> None:
    snap = run(load_scenario(NAME))
    found = [f for f in snap.derived(FINDINGS) or () if f.gpu == 7]
    assert {(f.gpu, f.row.symptom, f.row.cause) for f in found} == {RUNS_ON_CPU}
    finding = found[0]
    assert finding.evidence["owner"] == "research/resnet-cpu/trainer"
    # 14 CPUs' worth from the pod's cgroup, as its process burns them.
    assert 12.0 <= float(finding.evidence["owner_cpu_cores"]) <= 16.0
    assert [c.row.cause for c in finding.explains] == ["no_process"]


def test_the_simulated_files_hold_what_the_exporter_reads() -> None:
    """The checkpoint names the pod's UID for GPU 7's grant, and the pod's own
    cgroup counts its container's CPU time: the facts, in the kubelet's and
    the kernel's formats, outside the exporter."""
    clock = VirtualClock()
    node = SimulatedNode(load_scenario(NAME), clock)
    try:
        root = os.path.dirname(os.path.dirname(node.pod_resources_socket))
        with open(os.path.join(root, "device-plugins", "kubelet_internal_checkpoint")) as f:
            entries = json.load(f)["Data"]["PodDeviceEntries"]
        assert {"PodUID": POD_UID, "ContainerName": "trainer",
                "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"-1": ["7"]},
                "AllocResp": ""} in entries
        pod = node.sysfs / "fs" / "cgroup" / "kubepods.slice" / \
            "kubepods-burstable.slice" / \
            f"kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice"
        first = int((pod / "cpu.stat").read_text().split()[1])
        clock.advance(10.0)
        node.refresh()
        second = int((pod / "cpu.stat").read_text().split()[1])
        assert 12e6 * 10 <= second - first <= 16e6 * 10
    finally:
        node.close()


def test_an_idle_pod_is_only_allocated_and_unused() -> None:
    snap = run(with_process(load_scenario(NAME), cpu_ratio=0.02))
    assert {f for f in findings(snap) if f[0] == 7} == {NO_PROCESS}


def test_a_pod_at_work_on_its_gpu_is_not_it() -> None:
    scenario = with_process(load_scenario(NAME), gpus=[7], gpu_memory_ratio=0.74)
    scenario = scenario.model_copy(update={"gpus": {}})
    assert {f for f in findings(run(scenario)) if f[0] == 7} == set()


def test_without_the_checkpoint_the_row_is_not_judged_and_says_why() -> None:
    scenario = load_scenario(NAME)
    tenants = scenario.tenants
    assert tenants is not None
    scenario = scenario.model_copy(
        update={"tenants": tenants.model_copy(update={"device_checkpoint": False})})
    snap = run(scenario)
    assert {f for f in findings(snap) if f[0] == 7} == {NO_PROCESS}
    coverage = snap.derived(COVERAGE)
    assert coverage is not None
    gaps = [g for g in coverage.gaps if g.gpu == 7 and g.row.cause == "runs_on_cpu"]
    assert len(gaps) == 1 and gaps[0].kind is Kind.GAP
    assert "device-plugin checkpoint" in gaps[0].reason
