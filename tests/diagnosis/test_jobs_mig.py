"""MIG instances as a job's units (diagnosis/jobs.py, docs/diagnosis.md):

- a job that holds several MIG instances, on one GPU or several, is one job
  whose ranks are the instances (GPU index, GPU and compute instance ids);
- two tenants on two instances of one GPU are two jobs;
- a straggler among instances is named with its own cause (its instance's,
  or its GPU's board: heat);
- a fault of the GPU the instances are part of (an Xid after which it does
  no more work, the GPU lost) reaches every instance on it and every job
  holding one, and is each such job's cause.

Built by hand from findings and views, as a careful engineer would read the
node; the end-to-end cases run the simulator's MIG GPUs."""

from __future__ import annotations

from gpu_exporter.commands.report import render_text
from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.engine import JOBS
from gpu_exporter.diagnosis.finding import Finding
from gpu_exporter.diagnosis.jobs import GpuView, Job, judge_jobs
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.poll.readings import GpuOwner
from gpu_exporter.settings.thresholds import DiagnosisConfig
from gpu_exporter.simulator.model import Scenario
from gpu_exporter.simulator.tenants import SlurmJobSpec
from gpu_exporter.web.doctor import _jobs
from tests.simnode import DetailRun

CFG = DiagnosisConfig()
TRAIN = GpuOwner(namespace="ml", pod="train", container="trainer")
SERVE = GpuOwner(slurm_job_id="77")
INSTANCE_ROWS = tuple(r for r in ROWS if r.per_instance)


def inst(gpu: int, gi: int, owner: GpuOwner = TRAIN, sm_active: float | None = 0.8,
         processes: int = 1, up: bool = True) -> GpuView:
    """A MIG instance's view: its pace is GPM's SM activity (NVML has no
    utilization for an instance)."""
    return GpuView(gpu, f"GPU-{gpu}", up, sm_active, None, processes, (owner,),
                   INSTANCE_ROWS, gi, 0)


def found(gpu: int, row: Row, gi: int | None = None, owner: GpuOwner = TRAIN,
          **evidence: float | str) -> Finding:
    return Finding(gpu, f"GPU-{gpu}", row, dict(evidence), 0.0, owners=(owner,),
                   gpu_instance=gi)


def places(findings: list[Finding]) -> set[tuple[int, int | None, str]]:
    return {(f.gpu, f.gpu_instance, f.row.key) for f in findings}


def named(jobs: tuple[Job, ...], name: str) -> Job:
    (job,) = [j for j in jobs if j.name == name]
    return job


def test_a_job_on_several_instances_is_one_job_of_those_instances() -> None:
    views = [inst(0, 1), inst(0, 2), inst(1, 1)]
    _, jobs = judge_jobs([], views, CFG)
    (job,) = jobs
    assert job.name == "pod ml/train"
    assert [(r.gpu, r.gpu_instance, r.compute_instance) for r in job.ranks] == [
        (0, 1, 0), (0, 2, 0), (1, 1, 0)]
    assert job.gpus == (0, 1)
    shown = job.as_dict()
    assert shown["gpus"] == ["0", "1"]
    assert shown["ranks"] == [
        {"gpu": "0", "uuid": "GPU-0", "state": "working", "gpu_instance": "1",
         "compute_instance": "0", "utilization": 0.8},
        {"gpu": "0", "uuid": "GPU-0", "state": "working", "gpu_instance": "2",
         "compute_instance": "0", "utilization": 0.8},
        {"gpu": "1", "uuid": "GPU-1", "state": "working", "gpu_instance": "1",
         "compute_instance": "0", "utilization": 0.8}]


def test_two_tenants_on_two_instances_of_one_gpu_are_two_jobs() -> None:
    _, jobs = judge_jobs([], [inst(0, 1), inst(0, 2, owner=SERVE)], CFG)
    assert {j.name: [r.place for r in j.ranks] for j in jobs} == {
        "pod ml/train": [(0, 1)], "slurm job 77": [(0, 2)]}


def test_a_straggler_among_instances_is_named_with_its_instances_cause() -> None:
    """Three instances idle in step, each holding its process, while the
    fourth works: the fourth holds them back, and its own cause (its CPU
    limit) is the job's; the others' stalled processes are listed under it."""
    views = [inst(0, 1, sm_active=0.01), inst(0, 2, sm_active=0.01),
             inst(1, 1, sm_active=0.7), inst(1, 2, sm_active=0.01)]
    own = found(1, t.UNDERFED_CPU_LIMIT_THROTTLED, gi=1)
    waiting = [found(g, t.IDLE_PROCESS_STALLED, gi=gi) for g, gi in ((0, 1), (0, 2), (1, 2))]
    kept, jobs = judge_jobs([own, *waiting], views, CFG)
    assert places(kept) == {(1, 1, own.row.key)}
    job = named(jobs, "pod ml/train")
    assert (job.straggler, job.straggler_instance) == (1, 1)
    assert job.cause is kept[0]
    assert sorted((c.gpu, c.gpu_instance) for c in job.consequences) == [(0, 1), (0, 2), (1, 2)]
    root = job.root_cause()
    assert root is not None and (root["gpu"], root["gpu_instance"]) == ("1", "1")
    assert "GPU 1 (GI 1): " in _jobs(jobs)


def test_a_straggling_instance_can_be_slowed_by_its_gpus_board() -> None:
    """The straggler's GPU is hot: a board row, judged on the GPU, is the
    cause of the instance's pace."""
    views = [inst(0, 1, sm_active=0.01), inst(1, 1, sm_active=0.7)]
    heat = found(1, t.THERMAL)
    kept, jobs = judge_jobs([heat, found(0, t.IDLE_PROCESS_STALLED, gi=1)], views, CFG)
    assert places(kept) == {(1, None, t.THERMAL.key)}
    assert jobs[0].cause is kept[0]


def test_a_straggling_instance_without_a_cause_says_so_and_which() -> None:
    views = [inst(0, 1, sm_active=0.01), inst(0, 2, sm_active=0.7)]
    kept, jobs = judge_jobs([found(0, t.IDLE_PROCESS_STALLED, gi=1)], views, CFG)
    assert kept == []
    root = jobs[0].root_cause()
    assert root is not None and root["cause"] == "not_seen"
    assert (root["gpu"], root["gpu_instance"], root["compute_instance"]) == ("0", "2", "0")
    assert "GPU 0 (GI 2, CI 0) is the job's straggler" in str(root["summary"])
    text = render_text([], False, coverage={"complete": True},
                       jobs=[j.as_dict() for j in jobs])
    assert "pod ml/train: GPU 0 (GI 1, CI 0) idle, GPU 0 (GI 2, CI 0) working" in text
    assert "root cause: GPU 0 (GI 2, CI 0) straggler -> not_seen" in text
    assert "waiting:    GPU 0 (GI 1) memory_held_sm_idle -> process_stalled" in text


def test_no_straggler_where_an_instances_pace_is_unknown() -> None:
    """Without GPM NVML says nothing of an instance's pace: the rank not seen
    might be the one that holds the others."""
    views = [inst(0, 1, sm_active=0.01), inst(0, 2, sm_active=None), inst(0, 3, sm_active=0.7)]
    kept, jobs = judge_jobs([found(0, t.IDLE_PROCESS_STALLED, gi=1)], views, CFG)
    assert places(kept) == {(0, 1, t.IDLE_PROCESS_STALLED.key)}
    assert [r.state for r in jobs[0].ranks] == ["idle", "unknown", "working"]
    assert jobs[0].straggler is None


def test_an_xid_on_the_gpu_reaches_every_instance_and_every_job_on_it() -> None:
    """Xid 79 on GPU 0 (split in two, one instance each for two tenants; the
    pod also holds an instance of GPU 1): every instance of GPU 0 stops, and
    the pod's rank on GPU 1 waits for its lost peer. One finding, the rest
    listed under it, and it is the cause of both jobs."""
    views = [inst(0, 1, sm_active=0.0), inst(0, 2, owner=SERVE, sm_active=0.0),
             inst(1, 1, sm_active=0.0)]
    xid = found(0, t.XID, xid="79")
    waiting = [found(0, t.IDLE_PROCESS_STALLED, gi=1),
               found(0, t.ALLOCATED_UNUSED, gi=2, owner=SERVE),
               found(1, t.IDLE_PROCESS_STALLED, gi=1)]
    kept, jobs = judge_jobs([xid, *waiting], views, CFG)
    assert places(kept) == {(0, None, t.XID.key)}
    (cause,) = kept
    assert sorted((c.gpu, c.gpu_instance) for c in cause.consequences) == [
        (0, 1), (0, 2), (1, 1)]
    whys = {(c.gpu, c.gpu_instance): c.why for c in cause.consequences}
    assert "every instance of the GPU" in whys[0, 2]
    assert "its peers wait" in whys[1, 1]
    for name in ("pod ml/train", "slurm job 77"):
        assert named(jobs, name).cause is cause
    assert [c.gpu_instance for c in named(jobs, "slurm job 77").consequences] == [2]


def test_a_fault_of_another_gpu_of_a_tenant_does_not_reach_its_neighbours() -> None:
    """The pod holds instances of GPUs 0 and 1; GPU 1 falls off the bus. The
    Slurm job beside the pod on GPU 0 does not wait for GPU 1."""
    views = [inst(0, 1, sm_active=0.0), inst(0, 2, owner=SERVE, sm_active=0.0),
             inst(1, 1, up=False, sm_active=None)]
    lost = found(1, t.GPU_LOST, gpu_up=0)
    neighbour = found(0, t.ALLOCATED_UNUSED, gi=2, owner=SERVE)
    kept, jobs = judge_jobs([lost, neighbour, found(0, t.IDLE_PROCESS_STALLED, gi=1)],
                            views, CFG)
    assert places(kept) == {(1, None, t.GPU_LOST.key), (0, 2, t.ALLOCATED_UNUSED.key)}
    assert named(jobs, "slurm job 77").cause is None
    assert named(jobs, "pod ml/train").cause is not None


def _split(lost_at: str | None) -> Scenario:
    """One H100 split in three instances: the pod's two, the other pod's one."""
    def pod(name: str, uid: str, ids: list[str], pids: list[int]) -> dict[str, object]:
        return {"namespace": "ml", "name": name, "uid": uid,
                "containers": [{"name": "worker", "pids": pids, "devices": [
                    {"resource": "nvidia.com/mig-1g.10gb", "ids": ids}]}]}

    inst_ = {"compute_instance": 0, "memory_total_mib": 9856, "sm_active": 0.7,
             "memory_used_ratio": 0.3}
    procs = [{"pid": pid, "comm": "python", "gpus": [0], "mig": [gi, 0],
              "gpu_memory_ratio": 0.1, "sm_utilization": 0.7, "cpu_ratio": 1.0, "state": "R"}
             for pid, gi in ((4101, 7), (4102, 8), (4103, 9))]
    timeline = [] if lost_at is None else [
        {"at": lost_at, "gpus": [0], "set": {"lost": True, "xid": [79]}}]
    return Scenario(
        name="mig-jobs", node={"gpus": 1, "profile": "h100-sxm5-80gb"},
        state={"utilization": 0.5, "memory_used_ratio": 0.0},
        gpus={0: {"mig_instances": [{**inst_, "gpu_instance": gi} for gi in (7, 8, 9)]}},
        processes=procs, timeline=timeline,
        tenants={"pods": [
            pod("train", "00000000-0000-0000-0000-000000000001", ["0:0", "0:1"], [4101, 4102]),
            pod("serve", "00000000-0000-0000-0000-000000000002", ["0:2"], [4103])]})


def test_instances_are_grouped_into_their_owners_jobs_end_to_end() -> None:
    with DetailRun(_split(None)) as run:
        jobs = run.poll(30).derived(JOBS) or ()
    assert {j.name: [(r.gpu, r.gpu_instance, r.compute_instance) for r in j.ranks]
            for j in jobs} == {"pod ml/train": [(0, 7, 0), (0, 8, 0)],
                               "pod ml/serve": [(0, 9, 0)]}


def test_a_gpu_lost_while_split_loses_every_instance_and_job_on_it() -> None:
    with DetailRun(_split("10s")) as run:
        snap = run.poll(80)
    jobs = snap.derived(JOBS) or ()
    assert {j.name: [r.state for r in j.ranks] for j in jobs} == {
        "pod ml/train": ["lost", "lost"], "pod ml/serve": ["lost"]}
    for j in jobs:
        assert j.cause is not None and j.cause.row is t.GPU_LOST, j.name


def test_a_slurm_job_on_two_instances_is_one_job_end_to_end() -> None:
    """A Slurm job's processes on two instances make it their owner; the
    third instance's pod is a job of its own."""
    scenario = _split(None)
    assert scenario.tenants is not None
    tenants = scenario.tenants.model_copy(update={
        "pods": [p for p in scenario.tenants.pods if p.name == "serve"],
        "slurm_jobs": [SlurmJobSpec(job_id=88, uid=2345, pids=[4101, 4102])]})
    with DetailRun(scenario.model_copy(update={"tenants": tenants})) as run:
        jobs = run.poll(30).derived(JOBS) or ()
    assert {j.name: [r.place for r in j.ranks] for j in jobs} == {
        "slurm job 88": [(0, 7), (0, 8)], "pod ml/serve": [(0, 9)]}
