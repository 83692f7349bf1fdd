"""A job as a unit of diagnosis: the GPUs of one owner (a pod, a Slurm job,
a DRA claim), judged together after each GPU has been judged alone. A job's
unit is what its owner holds: a whole GPU, or a MIG instance (a GPU index
with its GPU and compute instance ids); a job of several instances, on one
GPU or several, is judged like a job of several GPUs.

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
- A fault of a GPU split into instances (the GPU lost, an Xid on the GPU)
  stops every instance on it: it explains the waiting rows of each of them,
  and is the cause of every job that holds one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.finding import Consequence, Finding
from gpu_exporter.diagnosis.table import SEVERITY_ORDER, Row
from gpu_exporter.poll.readings import GpuOwner
from gpu_exporter.settings.thresholds import DiagnosisConfig

# "unknown": a MIG instance without GPM, whose pace NVML does not say.
RankState = Literal["working", "waiting", "lost", "idle", "unknown"]
# A job's unit: (GPU index, MIG GPU instance or None for the whole GPU).
Place = tuple[int, int | None]

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
    """One whole GPU, or one MIG instance of a GPU split into instances, as
    this poll reads it, for its job. An instance's ``utilization`` is GPM's
    SM activity (NVML has no utilization for an instance; None without GPM)
    and its ``sm_active`` None."""

    gpu: int
    uuid: str
    up: bool
    utilization: float | None
    sm_active: float | None  # GPM's; None without GPM
    processes: int
    owners: tuple[GpuOwner, ...]
    # The rows that could be judged on it (for "cause not seen").
    judged: tuple[Row, ...] = ()
    # The MIG instance it is (None: a whole GPU).
    gpu_instance: int | None = None
    compute_instance: int | None = None

    @property
    def place(self) -> Place:
        return self.gpu, self.gpu_instance


@dataclass(frozen=True, slots=True)
class Rank:
    gpu: int
    uuid: str
    state: RankState
    utilization: float | None
    sm_active: float | None
    gpu_instance: int | None = None
    compute_instance: int | None = None

    @property
    def place(self) -> Place:
        return self.gpu, self.gpu_instance

    @property
    def label(self) -> str:
        """``GPU 3``, or ``GPU 0 (GI 1, CI 0)`` for a MIG instance."""
        return unit_label(self.gpu, self.gpu_instance, self.compute_instance)

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"gpu": str(self.gpu), "uuid": self.uuid, "state": self.state}
        if self.gpu_instance is not None:
            out["gpu_instance"] = str(self.gpu_instance)
            out["compute_instance"] = str(self.compute_instance)
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
    # The straggler's MIG instance, where the straggling rank is one (None:
    # the whole GPU).
    straggler_instance: int | None = None

    @property
    def gpus(self) -> tuple[int, ...]:
        """The GPUs the job's units are on, each once."""
        return tuple(dict.fromkeys(r.gpu for r in self.ranks))

    @property
    def straggler_rank(self) -> Rank | None:
        return next((r for r in self.ranks
                     if r.place == (self.straggler, self.straggler_instance)), None)

    def root_cause(self) -> dict[str, object] | None:
        if self.cause is not None:
            f = self.cause
            place = {} if f.gpu_instance is None else {"gpu_instance": str(f.gpu_instance)}
            return {"gpu": str(f.gpu), **place, "symptom": f.row.symptom, "cause": f.row.cause,
                    "severity": f.row.severity, "summary": f.row.summary,
                    "evidence": dict(f.evidence), "fix": f.row.fix}
        rank = self.straggler_rank
        if rank is not None:
            place = {} if rank.gpu_instance is None else {
                "gpu_instance": str(rank.gpu_instance),
                "compute_instance": str(rank.compute_instance)}
            return {"gpu": str(rank.gpu), **place, "symptom": "straggler",
                    "cause": "not_seen", "severity": "warning",
                    "summary": f"{rank.label} is the job's straggler, cause not seen: "
                               "no check on it found why it works less than its peers",
                    "checked": list(self.checked)}
        return None

    def as_dict(self) -> dict[str, object]:
        return {"job": self.name, "owner": dict(self.owner),
                "gpus": [str(g) for g in self.gpus],
                "ranks": [r.as_dict() for r in self.ranks],
                "straggler": None if self.straggler is None else str(self.straggler),
                **({} if self.straggler_instance is None
                   else {"straggler_gpu_instance": str(self.straggler_instance)}),
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


def unit_label(gpu: int, gpu_instance: int | None, compute_instance: int | None = None) -> str:
    """A job's unit for people: ``GPU 3``; a MIG instance as its GPU index
    with its GPU instance (and compute instance) id, the ``gpu_instance`` and
    ``compute_instance`` labels of the MIG series."""
    if gpu_instance is None:
        return f"GPU {gpu}"
    ci = "" if compute_instance is None else f", CI {compute_instance}"
    return f"GPU {gpu} (GI {gpu_instance}{ci})"


def rank_state(view: GpuView, cfg: DiagnosisConfig) -> RankState:
    """Lost: NVML cannot reach it (or the GPU it is an instance of). Waiting:
    NVML reads it busy while GPM reads its SMs idle (a kernel spinning in a
    collective). Idle: below the idle utilization. Working: the rest. A MIG
    instance without GPM is unknown: NVML has no utilization for it."""
    if not view.up:
        return "lost"
    util = view.utilization
    if util is None and view.gpu_instance is not None:
        return "unknown"
    if util is None or util < cfg.idle_utilization:
        return "idle"
    if (view.sm_active is not None and util > cfg.inflated_utilization
            and view.sm_active < cfg.inflated_sm_active):
        return "waiting"
    return "working"


def straggler_of(ranks: Sequence[Rank], views: dict[Place, GpuView]) -> Rank | None:
    """The one rank that does not wait while every peer does: peers spinning
    while it works, idles or is lost; peers idle in step (each still holding
    its process) while it works or is lost. Not where a rank's pace is
    unknown: the one not seen may be the straggler."""
    if len(ranks) < 2 or any(r.state == "unknown" for r in ranks):
        return None
    for rank in ranks:
        peers = [p for p in ranks if p is not rank]
        states = {p.state for p in peers}
        if len(states) != 1:
            continue
        (peer_state,) = states
        if peer_state == "waiting" and rank.state != "waiting":
            return rank
        if (peer_state == "idle" and rank.state in ("working", "lost")
                and all(views[p.place].processes for p in peers)):
            return rank
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


# The causes of the host itself, judged on every GPU that holds a job: one
# host, one cause, reported once for the node (on its first GPU), with the
# other GPUs it slows listed under it and every job it slows among its owners.
HOST_WIDE: frozenset[Row] = frozenset({t.HOST_CPU_THERMAL, t.HOST_MEMORY_GROWTH})
_HOST_WIDE_WHY = ("the same cause of the host, reported once for the node: it slows the "
                  "job on this GPU too")

# Rows that say nothing of a rank's pace: not a straggler's cause. A cause of
# the whole host slows every rank alike.
PACE_NEUTRAL: frozenset[Row] = frozenset({t.PERSISTENCE_OFF, t.XID_INFORMATIONAL}) | HOST_WIDE


def once_for_the_node(findings: Sequence[Finding]) -> list[Finding]:
    """Each host-wide cause once: the finding on its first GPU, the others'
    listed under it as consequences and their owners named among its own."""
    first: dict[Row, Finding] = {}
    rest: dict[Row, list[Finding]] = {}
    for f in sorted((f for f in findings if f.row in HOST_WIDE), key=_place_order_of):
        if f.row in first:
            rest[f.row].append(f)
        else:
            first[f.row], rest[f.row] = f, []
    out: list[Finding] = []
    for f in findings:
        if f.row not in HOST_WIDE:
            out.append(f)
        elif first[f.row] is f:
            others = rest[f.row]
            if not others:
                out.append(f)
                continue
            owners = tuple(dict.fromkeys(o for g in (f, *others) for o in g.owners))
            under = tuple(Consequence(g.gpu, g.row, g.evidence, _HOST_WIDE_WHY, g.gpu_instance)
                          for g in others)
            out.append(replace(f, owners=owners, since=min(g.since for g in (f, *others)),
                               consequences=f.consequences + under))
    return out


def _own_cause(findings: Iterable[Finding]) -> Finding | None:
    """The straggler's own cause: its most severe finding that is not itself
    waiting (an under-fed GPU's host cause is info: the job runs, slowed)."""
    own = [f for f in findings if f.row not in WAITING_ROWS and f.row not in PACE_NEUTRAL]
    if not own:
        return None
    return min(own, key=lambda f: (SEVERITY_ORDER[f.row.severity], f.row.key))


_STRAGGLER_WHY = "waits in its collectives for the job's straggling rank"
_SAME_GPU_WHY = ("the fault is on the GPU this MIG instance is part of: every instance of "
                 "the GPU stops with it, and the job holding each")


def _place(f: Finding | Consequence) -> Place:
    return f.gpu, f.gpu_instance


def judge_jobs(findings: Sequence[Finding], views: Sequence[GpuView],
               cfg: DiagnosisConfig) -> tuple[list[Finding], tuple[Job, ...]]:
    """The findings less those a cause on another GPU (or a fault across
    GPUs) explains, each cause with its consequences; and the node's jobs.
    A job's units are its whole GPUs and its MIG instances (``views`` holds
    one per whole GPU and one per instance of a GPU split into instances)."""
    findings = once_for_the_node(findings)
    by_place = {v.place: v for v in views}
    members: dict[str, tuple[dict[str, str], list[Place]]] = {}
    for v in views:
        for owner in v.owners:
            named = job_of(owner)
            if named is not None:
                places = members.setdefault(named[0], (named[1], []))[1]
                if v.place not in places:
                    places.append(v.place)
    jobs_of_gpu: dict[int, list[str]] = {}
    for name, (_, places) in members.items():
        for g in dict.fromkeys(g for g, _ in places):
            jobs_of_gpu.setdefault(g, []).append(name)
    # A waiting row listed under a cause (by the row's id): (that cause, why).
    under: dict[int, tuple[Finding, str]] = {}
    ids = {id(f): f for f in findings}

    def waiting_on(places: Iterable[Place]) -> list[Finding]:
        wanted = set(places)
        return [f for f in findings if _place(f) in wanted
                and f.row in WAITING_ROWS and id(f) not in under]

    # Causes across GPUs, node-wide ones first, then the most severe.
    crossing = sorted((f for f in findings if _crossing(f) is not None), key=_first_cause)
    for f in crossing:
        scope, why = CROSSING[f.row]
        # Every unit on the faulted GPU (the whole GPU and each of its MIG
        # instances), or on every GPU for a fault of the node; and the units
        # of every job that holds one of them.
        gpus = {g for g, _ in by_place} if scope == "node" else {f.gpu}
        reach = ({p for p in by_place if p[0] in gpus} | {(g, None) for g in gpus}
                 | {_place(w) for w in findings if w.gpu in gpus})
        if scope == "job":
            for name in jobs_of_gpu.get(f.gpu, ()):
                reach.update(members[name][1])
        for w in waiting_on(reach):
            if w.gpu != f.gpu:
                under[id(w)] = (f, why)
            elif w.gpu_instance is not None:
                under[id(w)] = (f, _SAME_GPU_WHY)
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
    for name, (identity, places) in sorted(members.items()):
        ranks = tuple(_rank(by_place[p], cfg) for p in sorted(places, key=_place_order))
        held = set(places)
        straggler = straggler_of(ranks, by_place)
        cause: Finding | None = None
        checked: tuple[str, ...] = ()
        consequences: list[Consequence] = []
        if straggler is not None:
            # Its own cause: a finding on its unit, or on the board of the GPU
            # a MIG instance is part of (its heat, its link).
            cause = _own_cause(f for f in findings if id(f) not in under and (
                _place(f) == straggler.place or (f.gpu == straggler.gpu
                                                 and f.gpu_instance is None)))
            for w in waiting_on(r.place for r in ranks if r is not straggler):
                if cause is not None:
                    under[id(w)] = (cause, _STRAGGLER_WHY)
                else:
                    silenced.add(id(w))
                    consequences.append(Consequence(w.gpu, w.row, w.evidence, _STRAGGLER_WHY,
                                                    w.gpu_instance))
            if cause is None:
                checked = tuple(dict.fromkeys(
                    r.cause for r in by_place[straggler.place].judged
                    if r not in WAITING_ROWS and r not in PACE_NEUTRAL))
        else:
            # Without a straggler, the job's cause is a fault across its GPUs.
            job_gpus = {g for g, _ in places}
            cause = min((f for f in crossing
                         if f.gpu in job_gpus or CROSSING[f.row][0] == "node"),
                        key=_first_cause, default=None)
        if cause is not None:
            consequences += [Consequence(f.gpu, f.row, f.evidence, under[id(f)][1],
                                         f.gpu_instance)
                             for f in findings if _place(f) in held and id(f) in under
                             and under[id(f)][0] is cause]
        if straggler is not None:
            listed = {_place(c) for c in consequences}
            for r in ranks:
                if r.state == "waiting" and r is not straggler and r.place not in listed:
                    seen = Consequence(r.gpu, None, _rank_evidence(r), _STRAGGLER_WHY,
                                       r.gpu_instance)
                    consequences.append(seen)
                    if cause is not None:
                        seen_waiting.setdefault(id(cause), []).append(seen)
        jobs.append(Job(name, identity, ranks,
                        None if straggler is None else straggler.gpu, cause, checked,
                        tuple(sorted(consequences, key=_order)),
                        None if straggler is None else straggler.gpu_instance))
    explained: dict[int, list[Consequence]] = {}
    for fid, (cause_f, why) in under.items():
        f = ids[fid]
        explained.setdefault(id(cause_f), []).append(
            Consequence(f.gpu, f.row, f.evidence, why, f.gpu_instance))
    kept: list[Finding] = []
    # Each cause as reported, with its consequences: the job names the same.
    reported: dict[int, Finding] = {}
    for f in findings:
        if id(f) in under or id(f) in silenced:
            continue
        more = explained.get(id(f), []) + seen_waiting.get(id(f), [])
        reported[id(f)] = (replace(f, consequences=tuple(sorted((*f.consequences, *more),
                                                                key=_order)))
                           if more else f)
        kept.append(reported[id(f)])
    return kept, tuple(j if j.cause is None else replace(j, cause=reported[id(j.cause)])
                       for j in jobs)


def _rank(view: GpuView, cfg: DiagnosisConfig) -> Rank:
    return Rank(view.gpu, view.uuid, rank_state(view, cfg), view.utilization, view.sm_active,
                view.gpu_instance, view.compute_instance)


def _place_order(place: Place) -> tuple[int, int]:
    return place[0], -1 if place[1] is None else place[1]


def _place_order_of(f: Finding) -> tuple[int, int]:
    return _place_order(_place(f))


def _first_cause(f: Finding) -> tuple[bool, int, int]:
    """Node-wide causes first, then the most severe, then the lowest GPU."""
    return CROSSING[f.row][0] != "node", SEVERITY_ORDER[f.row.severity], f.gpu


def _order(c: Consequence) -> tuple[tuple[int, int], str]:
    return _place_order(_place(c)), "" if c.row is None else c.row.key


def _rank_evidence(rank: Rank) -> dict[str, float | str]:
    ev: dict[str, float | str] = {"rank_state": rank.state}
    if rank.utilization is not None:
        ev["gpu_utilization_ratio"] = round(rank.utilization, 3)
    if rank.sm_active is not None:
        ev["sm_active_ratio"] = round(rank.sm_active, 3)
    return ev
