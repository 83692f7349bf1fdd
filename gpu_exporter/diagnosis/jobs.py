"""A job as a unit of diagnosis: the GPUs of one owner (a pod, a Slurm job,
a DRA claim), judged together after each GPU has been judged alone.

A multi-GPU job moves at the pace of its slowest rank: while one rank is
held back, the others wait for it in their collectives (NCCL spins a kernel
that keeps NVML's utilization high while the SMs idle) or idle in step at a
barrier. Judged alone, each waiting GPU looks like a fault of its own (small
kernels, a stalled process, a GPU allocated but unused) and gets the wrong
fix. Judged as a job, three principles hold (docs/diagnosis.md):

- A consequence is listed under its cause across GPUs. A cause that stops a
  GPU's work (the GPU lost, a driver or memory fault that ends the job on
  it) explains the waiting rows of the other GPUs of its job; one of the
  node (the fabric not up, the driver asking for a reboot) explains those of
  every other GPU of the node. On its own GPU it explains the job it ended
  (allocated but unused) only. The waiting rows are listed under the cause,
  not reported.
- A job's straggler is named with its own cause. In a job of two or more
  GPUs, the one rank that does not wait while all its peers do (it works,
  idles or is lost while they spin; it works or is lost while they idle in
  step) is the straggler. Its cause is the finding on its own GPU (CPU
  contention or throttling, NUMA, storage, heat, a narrow link, the GPU
  lost); the peers' waiting is listed beneath it. Without a finding on it,
  the job says "straggler, cause not seen" and which checks were judged.
- Every GPU keeps the findings of its own: only rows that say a GPU waits
  (``WAITING_ROWS``) become consequences; a peer's own fault stays its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.finding import Consequence, Finding
from gpu_exporter.diagnosis.table import SEVERITY_ORDER, Row
from gpu_exporter.readings import GpuOwner
from gpu_exporter.thresholds import DiagnosisConfig

RankState = Literal["working", "waiting", "lost", "idle"]

# The rows that say a GPU waits for work: what a rank shows while its job
# waits on another rank, or after a fault ended the job's work.
WAITING_ROWS: frozenset[Row] = frozenset({
    t.UTILIZATION_INFLATED, t.IDLE_PROCESS_STALLED, t.ALLOCATED_UNUSED, t.BURSTY_INPUT})

Scope = Literal["job", "node"]

# The causes that stop a GPU's work, and how far the waiting they cause
# reaches: the GPU's job (its peers wait on it), or the whole node (every
# GPU depends on it).
CROSSING: dict[Row, tuple[Scope, str]] = {
    t.GPU_LOST: ("job", "a rank of the job lost its GPU: the other ranks wait for it in "
                 "their collectives, or their job has stopped"),
    t.ECC_UNCORRECTABLE: ("job", "an uncorrectable memory error ended the job's work on "
                          "one GPU: its peers wait for that rank"),
    t.RECOVERY_GPU_RESET: ("job", "the driver stopped a GPU of the job until it is reset: "
                           "its peers wait for that rank"),
    t.XID: ("job", "a driver or hardware fault stopped a GPU of the job: its peers wait "
            "for that rank"),
    t.FABRIC_DEGRADED: ("node", "the NVSwitch fabric is not up: GPUs that talk over it "
                        "cannot run their multi-GPU work"),
    t.RECOVERY_NODE_REBOOT: ("node", "the driver needs the node rebooted: the node's GPUs "
                             "do no work until it is"),
}

# The Xids after which the GPU does no more work for its job (NVIDIA's Xid
# catalog, xids.py): uncorrectable and uncontained ECC errors, a halted
# micro-controller, an NVLink error, the GPU off the bus, the GPU's firmware
# not answering. Others (a row remap recorded, a single-bit error rate) leave
# the job running.
WORK_STOPPING_XIDS = frozenset({48, 62, 74, 79, 94, 95, 119, 120})


@dataclass(frozen=True, slots=True)
class GpuView:
    """One whole GPU as this poll reads it, for its job."""

    gpu: int
    uuid: str
    up: bool
    utilization: float | None
    sm_active: float | None  # GPM's; None without GPM
    processes: int
    owners: tuple[GpuOwner, ...]
    # The rows that could be judged on it (for "cause not seen").
    judged: tuple[Row, ...] = ()


@dataclass(frozen=True, slots=True)
class Rank:
    gpu: int
    uuid: str
    state: RankState
    utilization: float | None
    sm_active: float | None

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"gpu": str(self.gpu), "uuid": self.uuid, "state": self.state}
        if self.utilization is not None:
            out["utilization"] = round(self.utilization, 3)
        if self.sm_active is not None:
            out["sm_active"] = round(self.sm_active, 3)
        return out


@dataclass(frozen=True)
class Job:
    """The GPUs of one owner, their ranks' states, and the one root cause
    that explains the rest where there is one."""

    name: str  # "pod ml/train", "slurm job 4242", "claim ml/gpus"
    owner: dict[str, str]
    ranks: tuple[Rank, ...]
    straggler: int | None = None  # the GPU of the straggling rank
    cause: Finding | None = None
    # With a straggler and no finding on its GPU: the checks judged on it.
    checked: tuple[str, ...] = ()
    consequences: tuple[Consequence, ...] = ()

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(r.gpu for r in self.ranks)

    def root_cause(self) -> dict[str, object] | None:
        if self.cause is not None:
            f = self.cause
            return {"gpu": str(f.gpu), "symptom": f.row.symptom, "cause": f.row.cause,
                    "severity": f.row.severity, "summary": f.row.summary,
                    "evidence": dict(f.evidence), "fix": f.row.fix}
        if self.straggler is not None:
            return {"gpu": str(self.straggler), "symptom": "straggler",
                    "cause": "not_seen", "severity": "warning",
                    "summary": f"GPU {self.straggler} is the job's straggler, cause not seen: "
                               "no check on its GPU found why it works less than its peers",
                    "checked": list(self.checked)}
        return None

    def as_dict(self) -> dict[str, object]:
        return {"job": self.name, "owner": dict(self.owner),
                "gpus": [str(g) for g in self.gpus],
                "ranks": [r.as_dict() for r in self.ranks],
                "straggler": None if self.straggler is None else str(self.straggler),
                "root_cause": self.root_cause(),
                "consequences": [c.as_dict() for c in self.consequences]}


def job_of(owner: GpuOwner) -> tuple[str, dict[str, str]] | None:
    """The job an owner's GPU belongs to, by the attribution's identity: its
    Slurm job, its DRA claim, its pod (every container of a pod is one job:
    a pod with a container per rank is one job of many GPUs)."""
    if owner.slurm_job_id:
        return f"slurm job {owner.slurm_job_id}", {"slurm_job_id": owner.slurm_job_id}
    if owner.claim:
        return f"claim {owner.claim}", {"claim": owner.claim}
    if owner.pod:
        return (f"pod {owner.namespace}/{owner.pod}",
                {"namespace": owner.namespace, "pod": owner.pod})
    if owner.pod_uid:
        return f"pod {owner.pod_uid}", {"pod_uid": owner.pod_uid}
    return None


def rank_state(view: GpuView, cfg: DiagnosisConfig) -> RankState:
    """Lost: NVML cannot reach it. Waiting: NVML reads it busy while GPM reads
    its SMs idle (a kernel spinning in a collective). Idle: below the idle
    utilization. Working: the rest."""
    if not view.up:
        return "lost"
    util = view.utilization
    if util is None or util < cfg.idle_utilization:
        return "idle"
    if (view.sm_active is not None and util > cfg.inflated_utilization
            and view.sm_active < cfg.inflated_sm_active):
        return "waiting"
    return "working"


def straggler_of(ranks: Sequence[Rank], views: dict[int, GpuView]) -> int | None:
    """The one rank that does not wait while every peer does: peers spinning
    while it works, idles or is lost; peers idle in step (each still holding
    its process) while it works or is lost."""
    if len(ranks) < 2:
        return None
    for rank in ranks:
        peers = [p for p in ranks if p is not rank]
        states = {p.state for p in peers}
        if len(states) != 1:
            continue
        (peer_state,) = states
        if peer_state == "waiting" and rank.state != "waiting":
            return rank.gpu
        if (peer_state == "idle" and rank.state in ("working", "lost")
                and all(views[p.gpu].processes for p in peers)):
            return rank.gpu
    return None


def _crossing(f: Finding) -> tuple[Scope, str] | None:
    if f.gpu_instance is not None:
        return None
    crossing = CROSSING.get(f.row)
    if crossing is None:
        return None
    if f.row is t.XID:
        codes = {int(x) for x in str(f.evidence.get("xid", "")).split(",") if x.strip()}
        if not codes & WORK_STOPPING_XIDS:
            return None
    return crossing


# Rows that say nothing of a rank's pace: not a straggler's cause.
PACE_NEUTRAL: frozenset[Row] = frozenset({t.PERSISTENCE_OFF, t.XID_INFORMATIONAL})


def _own_cause(findings: Iterable[Finding]) -> Finding | None:
    """The straggler's own cause: its most severe finding that is not itself
    waiting (an under-fed GPU's host cause is info: the job runs, slowed)."""
    own = [f for f in findings if f.row not in WAITING_ROWS and f.row not in PACE_NEUTRAL]
    if not own:
        return None
    return min(own, key=lambda f: (SEVERITY_ORDER[f.row.severity], f.row.key))


_STRAGGLER_WHY = "waits in its collectives for the job's straggling rank"


def judge_jobs(findings: Sequence[Finding], views: Sequence[GpuView],
               cfg: DiagnosisConfig) -> tuple[list[Finding], tuple[Job, ...]]:
    """The findings less those a cause on another GPU (or a fault across
    GPUs) explains, each cause with its consequences; and the node's jobs."""
    by_gpu = {v.gpu: v for v in views}
    members: dict[str, tuple[dict[str, str], list[int]]] = {}
    for v in views:
        for owner in v.owners:
            named = job_of(owner)
            if named is not None:
                gpus = members.setdefault(named[0], (named[1], []))[1]
                if v.gpu not in gpus:
                    gpus.append(v.gpu)
    jobs_of_gpu: dict[int, list[str]] = {}
    for name, (_, gpus) in members.items():
        for g in gpus:
            jobs_of_gpu.setdefault(g, []).append(name)
    # A waiting row listed under a cause (by the row's id): (that cause, why).
    under: dict[int, tuple[Finding, str]] = {}
    ids = {id(f): f for f in findings}

    def waiting_on(gpus: Iterable[int]) -> list[Finding]:
        wanted = set(gpus)
        return [f for f in findings if f.gpu in wanted and f.gpu_instance is None
                and f.row in WAITING_ROWS and id(f) not in under]

    # Causes across GPUs, node-wide ones first, then the most severe.
    crossing = sorted((f for f in findings if _crossing(f) is not None), key=_first_cause)
    for f in crossing:
        scope, why = CROSSING[f.row]
        if scope == "node":
            reach: set[int] = set(by_gpu)
        else:
            reach = {f.gpu}
            for name in jobs_of_gpu.get(f.gpu, ()):
                reach.update(members[name][1])
        for w in waiting_on(reach):
            if w.gpu != f.gpu:
                under[id(w)] = (f, why)
            elif w.row is t.ALLOCATED_UNUSED:
                # On its own GPU a fault explains only the job it ended: a
                # stalled process or busy, idle SMs beside it say more than it.
                under[id(w)] = (f, "the fault ended the job on the GPU: its pod keeps the "
                                   "GPU with nothing running on it")
    jobs: list[Job] = []
    # A straggler's waiting peers when its own cause is not seen: reported
    # under the job's straggler, not as findings of their own.
    silenced: set[int] = set()
    seen_waiting: dict[int, list[Consequence]] = {}  # cause id -> ranks waiting with no row
    for name, (identity, gpus) in sorted(members.items()):
        ranks = tuple(Rank(g, by_gpu[g].uuid, rank_state(by_gpu[g], cfg),
                           by_gpu[g].utilization, by_gpu[g].sm_active) for g in sorted(gpus))
        straggler = straggler_of(ranks, by_gpu)
        cause: Finding | None = None
        checked: tuple[str, ...] = ()
        consequences: list[Consequence] = []
        if straggler is not None:
            cause = _own_cause(f for f in findings if f.gpu == straggler
                               and f.gpu_instance is None and id(f) not in under)
            for w in waiting_on(r.gpu for r in ranks if r.gpu != straggler):
                if cause is not None:
                    under[id(w)] = (cause, _STRAGGLER_WHY)
                else:
                    silenced.add(id(w))
                    consequences.append(Consequence(w.gpu, w.row, w.evidence, _STRAGGLER_WHY))
            if cause is None:
                checked = tuple(dict.fromkeys(
                    r.cause for r in by_gpu[straggler].judged
                    if r not in WAITING_ROWS and r not in PACE_NEUTRAL))
        else:
            # Without a straggler, the job's cause is a fault across its GPUs.
            cause = min((f for f in crossing
                         if f.gpu in gpus or CROSSING[f.row][0] == "node"),
                        key=_first_cause, default=None)
        if cause is not None:
            consequences += [Consequence(f.gpu, f.row, f.evidence, under[id(f)][1])
                             for f in findings if f.gpu in gpus and id(f) in under
                             and under[id(f)][0] is cause]
        if straggler is not None:
            listed = {c.gpu for c in consequences}
            for r in ranks:
                if r.state == "waiting" and r.gpu != straggler and r.gpu not in listed:
                    seen = Consequence(r.gpu, None, _rank_evidence(r), _STRAGGLER_WHY)
                    consequences.append(seen)
                    if cause is not None:
                        seen_waiting.setdefault(id(cause), []).append(seen)
        jobs.append(Job(name, identity, ranks, straggler, cause, checked,
                        tuple(sorted(consequences, key=_order))))
    explained: dict[int, list[Consequence]] = {}
    for fid, (cause_f, why) in under.items():
        f = ids[fid]
        explained.setdefault(id(cause_f), []).append(Consequence(f.gpu, f.row, f.evidence, why))
    kept: list[Finding] = []
    # Each cause as reported, with its consequences: the job names the same.
    reported: dict[int, Finding] = {}
    for f in findings:
        if id(f) in under or id(f) in silenced:
            continue
        more = explained.get(id(f), []) + seen_waiting.get(id(f), [])
        reported[id(f)] = replace(f, consequences=tuple(sorted(more, key=_order))) if more else f
        kept.append(reported[id(f)])
    return kept, tuple(j if j.cause is None else replace(j, cause=reported[id(j.cause)])
                       for j in jobs)


def _first_cause(f: Finding) -> tuple[bool, int, int]:
    """Node-wide causes first, then the most severe, then the lowest GPU."""
    return CROSSING[f.row][0] != "node", SEVERITY_ORDER[f.row.severity], f.gpu


def _order(c: Consequence) -> tuple[int, str]:
    return c.gpu, "" if c.row is None else c.row.key


def _rank_evidence(rank: Rank) -> dict[str, float | str]:
    ev: dict[str, float | str] = {"rank_state": rank.state}
    if rank.utilization is not None:
        ev["gpu_utilization_ratio"] = round(rank.utilization, 3)
    if rank.sm_active is not None:
        ev["sm_active_ratio"] = round(rank.sm_active, 3)
    return ev
