"""The attribution collector in the running exporter: allocations from a real
gRPC server speaking the kubelet's v1 proto on a unix socket, Slurm jobs and
each workload's own cgroup signals from the simulated node's files, and a
missing, unreadable or hung kubelet never holding up a poll or a scrape."""

from __future__ import annotations

import logging
import os
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_exporter.simulator import SimulatedNode, load_scenario
from gpu_exporter.simulator.kubelet import PodResourcesServer
from gpu_exporter.simulator.model import ProcessCondition, Scenario
from gpu_exporter.simulator.tenants import (
    CgroupCondition,
    Container,
    DeviceGrant,
    Pod,
    SlurmJobSpec,
    Tenants,
)
from tests.simnode import SimRun

LOGGER = "gpu_exporter.attribution.podresources"


def samples(text: str, name: str) -> list[dict[str, str]]:
    return [dict(s.labels) for fam in text_string_to_metric_families(text)
            for s in fam.samples if s.name == name]


def value(text: str, name: str, **labels: str) -> float:
    found = [s.value for fam in text_string_to_metric_families(text) for s in fam.samples
             if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def uid(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-{n:012x}"


def grant(resource: str, *ids: str) -> DeviceGrant:
    return DeviceGrant(resource=resource, ids=list(ids))


@pytest.fixture
def mig_run() -> Iterator[SimRun]:
    with SimRun("mig-h100") as run:
        os.makedirs(os.path.dirname(run.node.pod_resources_socket), exist_ok=True)
        yield run


def serve(run: SimRun, tenants: Tenants, delay: float = 0.0) -> PodResourcesServer:
    return PodResourcesServer(run.node.pod_resources_socket, tenants, delay=delay)


def test_one_allocation_series_per_gpu_and_mig_device_with_its_owner(mig_run: SimRun) -> None:
    states = mig_run.node.world.states()
    gpu = [s.uuid for s in states]
    mig = [m.uuid for m in states[0].mig]
    tenants = Tenants(pods=[
        Pod(namespace="ml", name="train-a", uid=uid(1), containers=[
            Container(name="trainer", devices=[grant("nvidia.com/gpu", gpu[1], gpu[2])]),
            Container(name="sidecar")]),
        Pod(namespace="serve", name="infer-b", uid=uid(2), containers=[
            Container(name="server", devices=[grant("nvidia.com/mig-1g.10gb", mig[0], mig[3])])]),
        # The index form: a whole GPU, and the third MIG device of GPU 0.
        Pod(namespace="research", name="sweep", uid=uid(3), containers=[
            Container(name="worker", devices=[grant("nvidia.com/gpu", "5"),
                                              grant("nvidia.com/mig-1g.10gb", "0:2")])]),
        # A GPU this node does not have: no series.
        Pod(namespace="ml", name="stale", uid=uid(4), containers=[
            Container(name="x", devices=[grant("nvidia.com/gpu", "GPU-" + "0" * 8 + "-"
                                               "0000-0000-0000-" + "0" * 12)])]),
    ])
    with serve(mig_run, tenants):
        text = (mig_run.poll(2), mig_run.scrape())[1]
    got = sorted((a["gpu"], a["uuid"], a["gpu_instance"], a["compute_instance"],
                  a["namespace"], a["pod"], a["container"], a["resource"])
                 for a in samples(text, "gpu_allocation_info"))
    gi = [str(m.gpu_instance) for m in states[0].mig]
    assert got == sorted([
        ("1", gpu[1], "", "", "ml", "train-a", "trainer", "nvidia.com/gpu"),
        ("2", gpu[2], "", "", "ml", "train-a", "trainer", "nvidia.com/gpu"),
        ("0", gpu[0], gi[0], "0", "serve", "infer-b", "server", "nvidia.com/mig-1g.10gb"),
        ("0", gpu[0], gi[3], "0", "serve", "infer-b", "server", "nvidia.com/mig-1g.10gb"),
        ("5", gpu[5], "", "", "research", "sweep", "worker", "nvidia.com/gpu"),
        ("0", gpu[0], gi[2], "0", "research", "sweep", "worker", "nvidia.com/mig-1g.10gb"),
    ])
    assert value(text, "gpu_exporter_pod_resources_state", state="ok") == 1
    assert value(text, "gpu_exporter_pod_resources_failures_total") == 0


def test_no_socket_is_off_one_log_line_and_not_a_failure(
        mig_run: SimRun, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        mig_run.poll(30)
        text = mig_run.scrape()
    assert not samples(text, "gpu_allocation_info")
    assert value(text, "gpu_exporter_pod_resources_state", state="socket_absent") == 1
    assert value(text, "gpu_exporter_pod_resources_failures_total") == 0
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1


def test_something_else_in_the_sockets_place_is_unreadable_and_counted(
        mig_run: SimRun, caplog: pytest.LogCaptureFixture) -> None:
    os.mkdir(mig_run.node.pod_resources_socket)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        mig_run.poll(30)  # three refreshes, 10 s apart
        text = mig_run.scrape()
    assert value(text, "gpu_exporter_pod_resources_state", state="unreadable") == 1
    assert value(text, "gpu_exporter_pod_resources_failures_total") == 4
    lines = [r for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING


def test_a_kubelet_hanging_10s_never_holds_up_a_poll_or_a_scrape(
        caplog: pytest.LogCaptureFixture) -> None:
    base = load_scenario("healthy")
    tenants = Tenants(pods=[Pod(namespace="ml", name="a", uid=uid(1), containers=[
        Container(name="c", devices=[grant("nvidia.com/gpu", "0")])])])

    def hang(node: SimulatedNode) -> None:
        assert node.kubelet is not None
        node.kubelet.delay = 10.0

    with caplog.at_level(logging.INFO, logger=LOGGER), SimRun(
            base.model_copy(update={"tenants": tenants}), synchronous=False,
            prepare=hang) as run:
        port = run.serve()
        slowest_poll = slowest_scrape = 0.0
        deadline = time.monotonic() + 8.0
        text = ""
        while time.monotonic() < deadline:
            started = time.monotonic()
            run.poll(1.0)
            slowest_poll = max(slowest_poll, time.monotonic() - started)
            started = time.monotonic()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                        timeout=5) as resp:
                text = resp.read().decode()
            slowest_scrape = max(slowest_scrape, time.monotonic() - started)
            if value(text, "gpu_exporter_pod_resources_state", state="timed_out") == 1:
                break
            time.sleep(0.1)
    assert value(text, "gpu_exporter_pod_resources_state", state="timed_out") == 1
    assert value(text, "gpu_exporter_pod_resources_failures_total") >= 1
    assert not samples(text, "gpu_allocation_info")
    assert slowest_poll < 1.0, slowest_poll
    assert slowest_scrape < 1.0, slowest_scrape
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


def _sixty_four_pods() -> Scenario:
    """8 GPUs shared by time-slicing among 64 pods, one process each."""
    base = load_scenario("healthy")
    pods, procs = [], []
    for n in range(64):
        gpu, pid = n % 8, 40000 + n
        pods.append(Pod(namespace="team", name=f"nb-{n}", uid=uid(100 + n), containers=[
            Container(name="jupyter", cpu_limit=2, pids=[pid],
                      cgroup=CgroupCondition(cpu_some=0.1, io_some=0.05),
                      devices=[grant("nvidia.com/gpu.shared", f"{gpu}::{n // 8}")])]))
        procs.append(ProcessCondition(pid=pid, comm="python", gpus=[gpu],
                                      gpu_memory_ratio=0.01, cpu_ratio=0.5, state="S"))
    return base.model_copy(update={"processes": procs, "tenants": Tenants(pods=pods)})


def test_series_stay_bounded_with_64_pods() -> None:
    with SimRun(_sixty_four_pods()) as run:
        run.poll(3)
        text = run.scrape()
    allocations = samples(text, "gpu_allocation_info")
    assert len(allocations) == 64
    assert len({(a["namespace"], a["pod"]) for a in allocations}) == 64
    workload_series = [s for fam in text_string_to_metric_families(text)
                       for s in fam.samples if s.name.startswith("gpu_workload_")]
    keys = {(s.labels["pod_uid"], s.labels["container_id"]) for s in workload_series}
    assert len(keys) == 64
    # One set per workload: pressure (3 resources x some/full stall totals;
    # the avg10 ratios are detail), cpu.stat (3), the limit, OOM kills, and
    # memory: its usage, the times it hit memory.max and the bytes it
    # reclaimed itself (no memory.max here: no memory limit series).
    assert len(workload_series) == 64 * (3 * 2 + 3 + 1 + 1 + 3)
    assert len(samples(text, "gpu_workload_cpu_limit_cores")) == 64
    assert value(text, "gpu_workload_cpu_limit_cores", pod_uid=uid(100)) == 2


def test_slurm_jobs_of_both_cgroup_layouts_are_named_per_gpu() -> None:
    base = load_scenario("healthy")
    procs = [ProcessCondition(pid=5000, comm="python", gpus=[0, 1], gpu_memory_ratio=0.5,
                              cpu_ratio=1.0, state="R"),
             ProcessCondition(pid=5001, comm="python", gpus=[1], gpu_memory_ratio=0.2,
                              cpu_ratio=1.0, state="R"),
             ProcessCondition(pid=5100, comm="python", gpus=[3], gpu_memory_ratio=0.5,
                              cpu_ratio=1.0, state="R")]
    tenants = Tenants(slurm_jobs=[
        SlurmJobSpec(job_id=4242, uid=1001, step="0", cgroup_version=2, pids=[5000, 5001],
                 cpu_limit=8, cgroup=CgroupCondition(io_some=0.4)),
        SlurmJobSpec(job_id=77, uid=1002, step="batch", cgroup_version=1, pids=[5100])])
    # With detail: the pressure ratio checked below is a detail series.
    with SimRun(base.model_copy(update={"processes": procs, "tenants": tenants}),
                metrics={"detail": True}) as run:
        run.poll(3)
        text = run.scrape()
    jobs = sorted((j["gpu"], j["slurm_job_id"], j["slurm_uid"], j["slurm_step"], j["scheduler"])
                  for j in samples(text, "gpu_job_info"))
    assert jobs[0][:2] == ("0", "4242") and jobs[1][:2] == ("1", "4242")
    assert jobs[2] == ("3", "77", "1002", "batch", "slurm")
    assert jobs[0][3:] == ("0", "slurm")
    # The v2 job's path names no user: its processes' real uid is its user.
    assert jobs[0][2] == jobs[1][2] == "1001"
    # One pressure set for the v2 job whatever its processes and GPUs; none
    # for the v1 job (cgroup v1 has no pressure files).
    ratios = samples(text, "gpu_workload_pressure_ratio")
    assert {r["slurm_job_id"] for r in ratios} == {"4242"}
    assert value(text, "gpu_workload_pressure_ratio", slurm_job_id="4242", resource="io",
                 kind="some") == pytest.approx(0.4)
