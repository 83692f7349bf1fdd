"""A job as a unit of diagnosis (diagnosis/jobs.py, docs/diagnosis.md):

- a consequence is listed under its cause across GPUs: the ranks waiting on
  a lost GPU, or the GPUs idle beside a fault of the node, are not findings
  of their own;
- a job's straggler is named with its own cause, and its peers' waiting is
  listed under it; without a cause of its own it is "straggler, cause not
  seen", with what was checked;
- an event is reported once, under the row that owns it (an Xid that records
  the same event as a row: NVIDIA's Xid catalog);
- an Xid's owner is the owner of the process the kernel log names for it,
  not every tenant of the GPU.

The cases are built by hand from findings and readings, each stated as a
careful engineer would read the node; the built-in scenarios
(job-*.yaml) run the same cases end to end."""

from __future__ import annotations

import json
import time
from typing import TypedDict

import pytest

from gpu_exporter.commands.report import exit_status, render_text
from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.engine import FINDINGS, JOBS, Diagnosis
from gpu_exporter.diagnosis.finding import Finding
from gpu_exporter.diagnosis.jobs import GpuView, Job, judge_jobs
from gpu_exporter.diagnosis.precedence import XIDS_RECORDED_BY, Candidate, resolve
from gpu_exporter.diagnosis.signals import GpuSignals, XidBlame
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.facts.xids import BY_CODE
from gpu_exporter.poll.readings import GpuOwner, GpuReading
from gpu_exporter.settings.thresholds import DiagnosisConfig
from gpu_exporter.simulator import load_scenario
from gpu_exporter.web.app import Request
from tests.simnode import DetailRun

CFG = DiagnosisConfig()
TRAIN = GpuOwner(namespace="ml", pod="train", container="trainer")
OTHER = GpuOwner(namespace="research", pod="notebook", container="jupyter")


class Load(TypedDict):
    utilization: float
    sm_active: float


SPINNING: Load = {"utilization": 1.0, "sm_active": 0.03}  # NCCL waiting in a collective
WORKING: Load = {"utilization": 0.95, "sm_active": 0.8}


def view(gpu: int, owners: tuple[GpuOwner, ...] = (TRAIN,), up: bool = True,
         utilization: float | None = 0.95, sm_active: float | None = 0.8,
         processes: int = 1) -> GpuView:
    return GpuView(gpu, f"GPU-{gpu}", up, utilization, sm_active, processes, owners, ROWS)


def finding(gpu: int, row: Row, **evidence: float | str) -> Finding:
    return Finding(gpu, f"GPU-{gpu}", row, dict(evidence), 0.0, owners=(TRAIN,))


def keys(findings: list[Finding]) -> set[tuple[int, str]]:
    return {(f.gpu, f.row.key) for f in findings}


def job_named(jobs: tuple[Job, ...], name: str) -> Job:
    (job,) = [j for j in jobs if j.name == name]
    return job


# --- a consequence is listed under its cause across GPUs ---------------------


def test_ranks_waiting_on_a_lost_gpu_are_listed_under_it_not_reported() -> None:
    views = [view(g, **SPINNING) if g != 5 else view(5, up=False, utilization=None,
                                                     sm_active=None) for g in range(8)]
    found = [finding(5, t.GPU_LOST, gpu_up=0)] + [
        finding(g, t.UTILIZATION_INFLATED, gpu_utilization_ratio=1.0, sm_active_ratio=0.03)
        for g in range(8) if g != 5]
    kept, jobs = judge_jobs(found, views, CFG)
    assert keys(kept) == {(5, t.GPU_LOST.key)}
    (lost,) = kept
    assert sorted(c.gpu for c in lost.consequences) == [0, 1, 2, 3, 4, 6, 7]
    assert {c.row for c in lost.consequences} == {t.UTILIZATION_INFLATED}
    job = job_named(jobs, "pod ml/train")
    assert job.straggler == 5 and job.cause is lost
    assert {r.gpu: r.state for r in job.ranks} == {**{g: "waiting" for g in range(8)},
                                                   5: "lost"}


def test_a_peers_own_fault_stays_its_own_beside_a_lost_gpu() -> None:
    views = [view(g, **SPINNING) for g in range(4)] + [view(4, up=False, utilization=None)]
    found = [finding(4, t.GPU_LOST), finding(0, t.UTILIZATION_INFLATED),
             finding(1, t.THERMAL), finding(2, t.PCIE_DOWNTRAINED)]
    kept, _ = judge_jobs(found, views, CFG)
    assert keys(kept) == {(4, t.GPU_LOST.key), (1, t.THERMAL.key),
                          (2, t.PCIE_DOWNTRAINED.key)}


def test_a_lost_gpu_explains_its_own_job_only() -> None:
    views = [view(0, up=False, utilization=None), view(1, **SPINNING),
             view(2, owners=(OTHER,), **SPINNING)]
    found = [finding(0, t.GPU_LOST), finding(1, t.UTILIZATION_INFLATED),
             finding(2, t.UTILIZATION_INFLATED)]
    kept, _ = judge_jobs(found, views, CFG)
    assert keys(kept) == {(0, t.GPU_LOST.key), (2, t.UTILIZATION_INFLATED.key)}


@pytest.mark.parametrize("cause", [t.RECOVERY_NODE_REBOOT, t.FABRIC_DEGRADED])
def test_a_fault_of_the_node_explains_every_gpu_idle_beside_it(cause: Row) -> None:
    """Every GPU of the node, of every job: no "allocated but unused" beside
    the node's fault, on the GPU that has it or on any other."""
    views = [view(g, utilization=0.0, sm_active=0.0, processes=0,
                  owners=(TRAIN if g < 4 else OTHER,)) for g in range(8)]
    found = [finding(g, cause) for g in range(8)] + [
        finding(g, t.ALLOCATED_UNUSED, gpu_processes=0) for g in range(8)]
    kept, jobs = judge_jobs(found, views, CFG)
    assert keys(kept) == {(g, cause.key) for g in range(8)}
    assert sum(len(f.consequences) for f in kept) == 8
    for job in jobs:
        assert job.cause is not None and job.cause.row is cause


@pytest.mark.parametrize("beside", [t.IDLE_PROCESS_STALLED, t.UTILIZATION_INFLATED])
def test_on_its_own_gpu_a_fault_explains_only_the_job_it_ended(beside: Row) -> None:
    """A stalled process or busy, idle SMs beside a fault on the same GPU say
    more than the fault does: both are reported. The GPU left allocated with
    nothing on it is the job the fault ended."""
    for cause in (t.XID, t.RECOVERY_GPU_RESET, t.FABRIC_DEGRADED, t.ECC_UNCORRECTABLE):
        kept, _ = judge_jobs([finding(0, cause, xid="119"), finding(0, beside)],
                             [view(0)], CFG)
        assert keys(kept) == {(0, cause.key), (0, beside.key)}
        kept, _ = judge_jobs([finding(0, cause, xid="119"), finding(0, t.ALLOCATED_UNUSED)],
                             [view(0, utilization=0.0, processes=0)], CFG)
        assert keys(kept) == {(0, cause.key)}


def test_an_xid_that_stops_no_work_explains_no_other_gpu() -> None:
    """A row remap recorded (Xid 63) leaves the job running: a peer that is
    allocated but unused is a finding of its own."""
    views = [view(0), view(1, utilization=0.0, processes=0)]
    found = [finding(0, t.XID, xid="63"), finding(1, t.ALLOCATED_UNUSED)]
    kept, _ = judge_jobs(found, views, CFG)
    assert keys(kept) == {(0, t.XID.key), (1, t.ALLOCATED_UNUSED.key)}
    kept, _ = judge_jobs([finding(0, t.XID, xid="79"), finding(1, t.ALLOCATED_UNUSED)],
                         views, CFG)
    assert keys(kept) == {(0, t.XID.key)}


# --- a job's straggler is named with its own cause --------------------------


def straggler_node(own: list[Finding]) -> tuple[list[Finding], tuple[Job, ...]]:
    views = [view(g, **SPINNING) if g != 3 else view(3, utilization=0.3, sm_active=0.27)
             for g in range(8)]
    peers = [finding(g, t.UTILIZATION_INFLATED, gpu_utilization_ratio=1.0,
                     sm_active_ratio=0.03) for g in range(8) if g != 3]
    return judge_jobs(own + peers, views, CFG)


@pytest.mark.parametrize("cause", [t.UNDERFED_CPU_LIMIT_THROTTLED, t.UNDERFED_CPU_CONTENTION,
                                   t.NUMA_MISPLACED, t.UNDERFED_DATA_PIPELINE_IO, t.THERMAL,
                                   t.PCIE_DOWNTRAINED])
def test_the_straggler_is_named_with_its_own_cause(cause: Row) -> None:
    own = finding(3, cause)
    kept, jobs = straggler_node([own])
    assert keys(kept) == {(3, cause.key)}
    (named,) = kept
    assert sorted(c.gpu for c in named.consequences) == [0, 1, 2, 4, 5, 6, 7]
    job = job_named(jobs, "pod ml/train")
    assert job.straggler == 3 and job.cause is named
    root = job.root_cause()
    assert root is not None and (root["gpu"], root["cause"]) == ("3", cause.cause)


def test_a_straggler_without_a_cause_of_its_own_says_so_with_what_was_checked() -> None:
    kept, jobs = straggler_node([])
    assert kept == []  # no peer reported for waiting
    job = job_named(jobs, "pod ml/train")
    root = job.root_cause()
    assert root is not None and root["cause"] == "not_seen" and root["gpu"] == "3"
    checked = root["checked"]
    assert isinstance(checked, list)
    for cause in ("cpu_limit_throttled", "cpu_contention", "cpu_affinity", "thermal",
                  "link_degraded", "data_pipeline_io", "hardware"):
        assert cause in checked
    assert "small_kernels" not in checked
    assert sorted(c.gpu for c in job.consequences) == [0, 1, 2, 4, 5, 6, 7]
    # Not healthy: diagnose warns, and says which rank.
    answer = [j.as_dict() for j in jobs]
    text = render_text([], False, coverage={"complete": True}, jobs=answer)
    assert "root cause: GPU 3 straggler -> not_seen" in text
    assert "waiting:    GPUs 0-2, 4-7 utilization_inflated -> small_kernels" in text
    assert exit_status([root]) == 1


def test_ranks_idle_in_step_name_the_one_that_works() -> None:
    views = [view(g, utilization=0.02, sm_active=0.0) for g in range(4)]
    views[2] = view(2, **WORKING)
    found = [finding(2, t.THERMAL)] + [finding(g, t.IDLE_PROCESS_STALLED) for g in (0, 1, 3)]
    kept, jobs = judge_jobs(found, views, CFG)
    assert keys(kept) == {(2, t.THERMAL.key)}
    assert jobs[0].straggler == 2


@pytest.mark.parametrize("states", [
    [WORKING] * 4,  # a healthy job
    [SPINNING] * 4,  # every rank alike: no one rank holds the others back
    [SPINNING, SPINNING, WORKING, WORKING],  # two differ: no single straggler
])
def test_no_straggler_where_no_single_rank_holds_the_others(states: list[Load]
                                                             ) -> None:
    views = [view(g, **s) for g, s in enumerate(states)]
    found = [finding(g, t.UTILIZATION_INFLATED) for g, s in enumerate(states) if s is SPINNING]
    kept, jobs = judge_jobs(found, views, CFG)
    assert keys(kept) == keys(found)
    assert jobs[0].straggler is None and jobs[0].root_cause() is None


def test_a_single_gpu_job_has_no_straggler() -> None:
    kept, jobs = judge_jobs([finding(0, t.UTILIZATION_INFLATED)], [view(0, **SPINNING)], CFG)
    assert keys(kept) == {(0, t.UTILIZATION_INFLATED.key)}
    assert jobs[0].straggler is None


@pytest.mark.parametrize(("owner", "name"), [
    (GpuOwner(slurm_job_id="4242"), "slurm job 4242"),
    (GpuOwner(namespace="ml", pod="p", container="c", claim="ml/gpus"), "claim ml/gpus"),
    (GpuOwner(pod_uid="1b2c"), "pod 1b2c"),
])
def test_a_job_is_its_owners_gpus(owner: GpuOwner, name: str) -> None:
    views = [view(0, owners=(owner,)), view(1, owners=(owner,)), view(2, owners=(OTHER,))]
    _, jobs = judge_jobs([], views, CFG)
    assert {j.name: j.gpus for j in jobs} == {name: (0, 1), "pod research/notebook": (2,)}


def test_each_container_of_a_pod_is_a_rank_of_one_job() -> None:
    views = [view(g, owners=(GpuOwner("ml", "ddp", f"rank-{g}"),)) for g in range(4)]
    _, jobs = judge_jobs([], views, CFG)
    assert [(j.name, j.gpus) for j in jobs] == [("pod ml/ddp", (0, 1, 2, 3))]


# --- an event is reported once, under the row that owns it -------------------


def roots(*on: tuple[Row, dict[str, float | str]]) -> set[str]:
    return {r.key for r in resolve([Candidate(row, ev, True) for row, ev in on])}


@pytest.mark.parametrize(("row", "codes"), [
    (t.ROW_REMAP_PENDING, "63"), (t.ROW_REMAP_PENDING, "64"),
    (t.ECC_UNCORRECTABLE, "48"), (t.ECC_UNCORRECTABLE, "94"), (t.ECC_UNCORRECTABLE, "95"),
    (t.ECC_UNCORRECTABLE, "48, 94"), (t.RECOVERY_NODE_REBOOT, "154"),
    (t.RECOVERY_GPU_RESET, "154"),
])
def test_an_xid_that_records_a_rows_event_is_reported_under_that_row(row: Row,
                                                                      codes: str) -> None:
    assert roots((row, {}), (t.XID, {"xid": codes})) == {row.key}


@pytest.mark.parametrize(("row", "codes"), [
    (t.ROW_REMAP_PENDING, "48"),  # a double-bit error is the ECC row's, not the remap's
    (t.ROW_REMAP_PENDING, "63, 79"),  # the GPU off the bus is an event of its own
    (t.ECC_UNCORRECTABLE, "119"),
    (t.RECOVERY_NODE_REBOOT, "79"),
])
def test_an_xid_of_another_event_is_reported_on_its_own(row: Row, codes: str) -> None:
    assert roots((row, {}), (t.XID, {"xid": codes})) == {row.key, t.XID.key}


def test_the_xid_rows_mapping_follows_the_catalogs_text() -> None:
    """Each code tied to a row is one whose catalog meaning names that row's
    event; every uncorrectable or contained ECC code is the ECC row's."""
    for code in XIDS_RECORDED_BY[t.ROW_REMAP_PENDING]:
        assert "remap" in BY_CODE[code].meaning
    for code in XIDS_RECORDED_BY[t.ECC_UNCORRECTABLE]:
        meaning = BY_CODE[code].meaning
        assert "ECC" in meaning or "remap" in meaning
    for row in (t.RECOVERY_GPU_RESET, t.RECOVERY_NODE_REBOOT, t.RECOVERY_DRAIN_P2P,
                t.RECOVERY_DRAIN_AND_RESET):
        assert all("recovery action" in BY_CODE[c].meaning for c in XIDS_RECORDED_BY[row])
    uncorrectable = {x.code for x in BY_CODE.values() if "ECC" in x.meaning
                     and "single-bit" not in x.meaning}
    assert uncorrectable == {48, 94, 95}
    assert uncorrectable <= XIDS_RECORDED_BY[t.ECC_UNCORRECTABLE]


# --- an Xid's owner is the owner of the process that raised it --------------


NOW = time.time()


def xid_findings(blames: list[XidBlame], code: int = 79) -> list[Finding]:
    now = NOW
    engine = Diagnosis(CFG, time.monotonic, time.time)
    sig = GpuSignals(0, "GPU-0", GpuReading(0, "GPU-0", True), None, None,
                     xids=[(now, code, None)], xid_blames=blames, owners=(TRAIN, OTHER))
    found = engine._evaluate(sig, time.monotonic(), now, None,  # type: ignore[arg-type]
                             [], {}, None, False)
    return [f for f in found if f.row.xid_tier is not None]


@pytest.mark.parametrize("code", [79, 13])
def test_an_xids_owner_is_the_owner_of_the_process_that_raised_it(code: int) -> None:
    blame = XidBlame(NOW, code, "python (pid 4242)", OTHER, 4242)
    (xid,) = xid_findings([blame], code)
    assert xid.owners == (OTHER,)


def test_an_xid_whose_process_could_not_be_read_keeps_the_gpus_owners() -> None:
    """The process had exited (or its PID was another's) before its owner
    was read: whose it was is not known, and no tenant is ruled out."""
    (xid,) = xid_findings([XidBlame(NOW, 79, "python (pid 7)", None, 7)])
    assert xid.owners == (TRAIN, OTHER)


def test_an_xid_no_line_names_a_process_for_belongs_to_every_tenant() -> None:
    (xid,) = xid_findings([])
    assert xid.owners == (TRAIN, OTHER)


# --- a cause of the host is reported once, for the node ----------------------


@pytest.mark.parametrize("row", [t.HOST_CPU_THERMAL, t.HOST_MEMORY_GROWTH])
def test_a_cause_of_the_host_is_reported_once_naming_every_gpu_and_job_it_slows(
        row: Row) -> None:
    """Eight GPUs, two jobs, one host whose CPUs throttle: one finding, on the
    first GPU, the seven others listed under it, both jobs among its owners."""
    owner = {g: TRAIN if g < 4 else OTHER for g in range(8)}
    views = [view(g, owners=(owner[g],)) for g in range(8)]
    found = [Finding(g, f"GPU-{g}", row, {"host": 1.0}, float(10 - g), owners=(owner[g],))
             for g in (3, 0, 7, 1, 2, 4, 5, 6)]
    kept, _ = judge_jobs(found, views, CFG)
    (once,) = kept
    assert (once.gpu, once.row) == (0, row)
    assert sorted(c.gpu for c in once.consequences) == [1, 2, 3, 4, 5, 6, 7]
    assert set(once.owners) == {TRAIN, OTHER}
    assert once.since == 3.0  # since the first GPU it held on
    text = render_text([once.as_dict()], False, coverage={"complete": True})
    assert f"explains: GPUs 1-7 slowing_over_time -> {row.cause}" in text


def test_a_cause_of_the_host_is_no_stragglers_own() -> None:
    """The host's heat slows every rank alike: the straggler's own cause is
    its CPU limit, and the host's heat stays one finding of the node."""
    heat = [finding(g, t.HOST_CPU_THERMAL) for g in range(8)]
    kept, jobs = straggler_node([finding(3, t.UNDERFED_CPU_LIMIT_THROTTLED), *heat])
    assert keys(kept) == {(3, t.UNDERFED_CPU_LIMIT_THROTTLED.key), (0, t.HOST_CPU_THERMAL.key)}
    assert job_named(jobs, "pod ml/train").cause is not None
    assert job_named(jobs, "pod ml/train").cause.row is t.UNDERFED_CPU_LIMIT_THROTTLED


def test_a_hot_host_pages_once_for_its_eight_gpus() -> None:
    with DetailRun(load_scenario("slowing-over-time-host-cpu-thermal")) as run:
        snap = run.poll(80)
        page = run.exporter.app.handle(Request("/", "", {})).body.decode()
    findings = snap.derived(FINDINGS) or ()
    (once,) = [f for f in findings if f.row is t.HOST_CPU_THERMAL]
    assert once.gpu == 0 and sorted(c.gpu for c in once.consequences) == list(range(1, 8))
    active = {g: snap.get("gpu_diagnosis_active", gpu=str(g), symptom="slowing_over_time",
                          cause="host_cpu_thermal") for g in range(8)}
    assert active == {0: 1.0, **{g: 0.0 for g in range(1, 8)}}
    assert "slowed by a cause of the host, reported once on GPU 0" in page


# --- end to end, on the built-in scenarios ----------------------------------


def test_the_straggler_scenario_reports_the_throttled_rank_only() -> None:
    with DetailRun(load_scenario("job-straggler-cpu-limit-throttled")) as run:
        snap = run.poll(45)
        answer = json.loads(run.exporter.app.handle(Request("/diagnosis", "", {})).body)
        page = run.exporter.app.handle(Request("/", "", {})).body.decode()
    (shown,) = answer["jobs"]
    assert shown["job"] == "pod ml/ddp" and shown["straggler"] == "3"
    assert shown["root_cause"]["cause"] == "cpu_limit_throttled"
    assert [(f["gpu"], f["cause"]) for f in answer["findings"]] == [("3", "cpu_limit_throttled")]
    assert {c["gpu"] for c in answer["findings"][0]["consequences"]} == {
        "0", "1", "2", "4", "5", "6", "7"}
    assert 'id="jobs"' in page and "This GPU waits on GPU 3" in page
    (job,) = snap.derived(JOBS) or ()
    assert job.straggler == 3 and job.cause is not None
    assert job.cause.row is t.UNDERFED_CPU_LIMIT_THROTTLED
    waiting = {c.gpu for c in job.consequences}
    assert waiting == {0, 1, 2, 4, 5, 6, 7}
    # Each peer's series is 0: no alert fires for a rank that only waits.
    for gpu in waiting:
        assert snap.get("gpu_diagnosis_active", gpu=str(gpu), symptom="utilization_inflated",
                        cause="small_kernels") == 0.0
    text = render_text([f.as_dict() for f in (job.cause,)], False,
                       coverage={"complete": True}, jobs=[job.as_dict()])
    assert "root cause: GPU 3 memory_held_sm_underfed -> cpu_limit_throttled" in text
