"""The row of a GPU allocated to a pod whose code runs on the CPU: it fires
only where the GPU is allocated, nothing runs on it, the pod has no process on
any GPU and its own cgroup keeps CPUs busy; an idle pod, a pod at work on a
GPU and an unallocated GPU are not it, and a pod whose CPU use cannot be read
is not judged (never healthy). Each place a pod can be given: a whole GPU, a
MIG instance with GPM, one without."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.coverage import Gap, Kind, Reasons
from gpu_exporter.diagnosis.precedence import Candidate, resolve
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.poll.readings import GpuOwner, OwnerCpu
from gpu_exporter.settings.thresholds import DiagnosisConfig
from tests.rule_signals import CFG, GIB, POD, busy_gpu, proc, signals, verdict

ROW = t.ALLOCATED_RUNS_ON_CPU
CLAIMED = GpuOwner("ml", "train-b", "trainer", claim="ml/gpus")
JOB = GpuOwner(slurm_job_id="4242")


def allocated(cores: float | None = 6.0, *, owners: tuple[GpuOwner, ...] = (POD,),
              cpu: dict[GpuOwner, OwnerCpu] | None = None, **extra: Any) -> GpuSignals:
    """A whole H100 allocated to ``owners``, idle, empty, nothing on it; the
    pod's cgroup uses ``cores`` CPUs' worth of time and no process of it is
    on a GPU."""
    gpu = extra.pop("gpu", busy_gpu(utilization=0.0, memory_used_bytes=0.0,
                                    throttle_reasons=frozenset({"gpu_idle"})))
    placed = {POD: OwnerCpu(on_gpu=False, cpu_cores=cores)} if cpu is None else cpu
    return signals(gpu, procs=extra.pop("procs", []), **{
        "owners": owners, "allocations_known": True, "owner_cpu": placed, **extra})


def instance(sm_active: float | None, cores: float = 6.0) -> GpuSignals:
    """MIG instance 3 of a split GPU, allocated to the pod; ``sm_active`` its
    GPM activity (None: a board without GPM)."""
    return allocated(cores, gpu=busy_gpu(utilization=None, memory_used_bytes=0.0),
                     mig=True, gpu_instance=3, instance_memory=(0.0, 10 * GIB),
                     sm_active=sm_active)


def holds(sig: GpuSignals, cfg: DiagnosisConfig = CFG) -> bool | None:
    return verdict(ROW, sig, cfg).holds


def test_a_pod_busy_on_the_cpu_beside_its_idle_gpu_is_named() -> None:
    v = verdict(ROW, allocated(6.0))
    assert v.holds is True
    assert v.evidence["owner"] == "ml/train-a/trainer"
    assert v.evidence["owner_cpu_cores"] == 6.0
    assert v.evidence["gpu_processes"] == 0
    # The allocated-and-unused row holds on the same signals: this row is the
    # more specific, and explains it.
    assert verdict(t.ALLOCATED_UNUSED, allocated(6.0)).holds is True


@pytest.mark.parametrize(("cores", "expected"), [
    (CFG.allocated_cpu_busy_cores, True),
    (CFG.allocated_cpu_busy_cores - 0.01, False),
    (0.02, False),  # an idle notebook: merely allocated and unused
    (0.0, False),
])
def test_the_pods_cpu_use_decides_at_the_threshold(cores: float, expected: bool) -> None:
    assert holds(allocated(cores)) is expected


def test_the_threshold_is_the_configured_one() -> None:
    assert holds(allocated(2.0), DiagnosisConfig(allocated_cpu_busy_cores=4.0)) is False
    assert holds(allocated(4.0), DiagnosisConfig(allocated_cpu_busy_cores=4.0)) is True


def test_a_pod_with_a_process_on_any_gpu_is_not_it() -> None:
    """Its CPU work feeds a GPU: a host-bound job, for the starved-GPU rows."""
    sig = allocated(cpu={POD: OwnerCpu(on_gpu=True)})
    assert holds(sig) is False


def test_a_process_on_this_gpu_is_not_it() -> None:
    sig = allocated(procs=[proc(memory_used_bytes=1 * GIB, sm_utilization=0.0)])
    assert holds(sig) is False


def test_an_unallocated_gpu_is_not_it_and_is_judged() -> None:
    assert holds(allocated(owners=())) is False
    # A Slurm job is an owner only through its processes: no pod, not this row.
    assert holds(allocated(owners=(JOB,))) is False


@pytest.mark.parametrize(("gpu", "why"), [
    (busy_gpu(utilization=CFG.idle_utilization, memory_used_bytes=0.0), "at the idle line"),
    (busy_gpu(utilization=0.9, memory_used_bytes=0.0), "busy"),
    (busy_gpu(utilization=0.0, memory_used_bytes=60 * GIB), "memory held: an unseen process"),
])
def test_a_gpu_at_work_or_holding_memory_is_not_it(gpu: Any, why: str) -> None:
    assert holds(allocated(gpu=gpu)) is False, why


def test_just_below_the_idle_line_is_idle() -> None:
    gpu = busy_gpu(utilization=CFG.idle_utilization - 0.01, memory_used_bytes=0.0)
    assert holds(allocated(gpu=gpu)) is True


@pytest.mark.parametrize(("sig", "why"), [
    (allocated(cpu={}), "the pod is not placed (no device-plugin checkpoint)"),
    (allocated(None), "its cgroup read once: no rate yet"),
    (allocated(cpu={POD: OwnerCpu(on_gpu=False, problem="not in the tree")}),
     "its cgroup could not be read"),
    (allocated(allocations_known=False), "the kubelet never answered"),
    (allocated(processes_known=False), "the processes are not read"),
    (allocated(gpu=busy_gpu(utilization=0.0, memory_used_bytes=None)), "no memory reading"),
])
def test_what_cannot_be_read_is_not_judged(sig: GpuSignals, why: str) -> None:
    assert holds(sig) is None, why


def test_one_placed_pod_at_work_on_the_cpu_is_enough() -> None:
    other = GpuOwner("ml", "train-c", "trainer")
    sig = allocated(owners=(other, POD), cpu={POD: OwnerCpu(on_gpu=False, cpu_cores=8.0)})
    v = verdict(ROW, sig)
    assert v.holds is True and v.evidence["owner"] == "ml/train-a/trainer"
    # Neither placed pod busy, one not placed: not judged rather than healthy.
    idle = allocated(owners=(other, POD), cpu={POD: OwnerCpu(on_gpu=False, cpu_cores=0.1)})
    assert holds(idle) is None


@pytest.mark.parametrize(("sm_active", "cores", "expected"), [
    (0.0, 6.0, True),
    (None, 6.0, True),  # no GPM: with no process on it nothing runs there
    (0.6, 6.0, False),
    (0.0, 0.05, False),
])
def test_a_mig_instance_is_judged_like_a_gpu(sm_active: float | None, cores: float,
                                             expected: bool) -> None:
    assert holds(instance(sm_active, cores)) is expected


@pytest.mark.parametrize(("gpu", "expected", "why"), [
    (busy_gpu(utilization=None, memory_used_bytes=0.0, throttle_reasons=None), True,
     "a board whose NVML gives no utilization: with no process on it nothing runs"),
    (busy_gpu(utilization=0.0, memory_used_bytes=0.0, throttle_reasons=None), True,
     "a board that gives no throttle reasons"),
    (busy_gpu(utilization=0.0, memory_used_bytes=0.0, memory_reserved_bytes=512 * 2**20),
     True, "a board whose driver reserves memory (v2 used): empty is empty"),
])
def test_boards_that_say_less_are_judged_on_what_they_say(gpu: Any, expected: bool,
                                                         why: str) -> None:
    assert holds(allocated(gpu=gpu)) is expected, why


def test_the_row_is_judged_per_instance() -> None:
    assert ROW.per_instance


def test_it_explains_the_allocated_and_unused_row() -> None:
    kept = resolve([Candidate(ROW, {"owner": "ml/train-a/trainer", "owner_cpu_cores": 6.0},
                              True),
                    Candidate(t.ALLOCATED_UNUSED, {"gpu_processes": 0}, True)])
    assert {r.key for r in kept} == {ROW.key}


def test_the_prose_quotes_the_threshold() -> None:
    text = ROW.evidence_text(DiagnosisConfig(allocated_cpu_busy_cores=3.0))
    assert "kept CPUs busy, at least 3 of them on average" in text


# --- the owners no unprivileged source places: one reason each ---------------


def reason(sig: GpuSignals) -> Gap:
    (gap,) = Reasons().of(sig, [ROW], CFG, (), (), 0.0)
    return gap


def test_a_claims_gpu_is_not_judged_and_says_no_source_places_its_pod() -> None:
    sig = allocated(owners=(CLAIMED,), cpu={})
    assert holds(sig) is None
    gap = reason(sig)
    assert "ResourceClaim" in gap.reason and "no unprivileged source" in gap.reason
    assert gap.kind is Kind.UNAVAILABLE and gap.on == ""  # not the board's doing
    # A device-plugin pod that is not placed keeps its own reason: the checkpoint.
    unplaced = reason(allocated(cpu={}))
    assert "checkpoint" in unplaced.reason and "ResourceClaim" not in unplaced.reason
    assert unplaced.kind is Kind.GAP


@pytest.mark.parametrize("kubelet", [True, False])
def test_an_idle_gpu_where_slurm_jobs_run_is_not_judged_and_says_why(kubelet: bool) -> None:
    """A Slurm job's GPUs are named by no unprivileged source: an idle GPU
    with no pod on a node running Slurm jobs may be one's, its code on the
    CPU, unseen. With a kubelet or without, the reason says so."""
    sig = allocated(owners=(), allocations_known=kubelet, gpu_holders_known=False)
    assert holds(sig) is None
    gap = reason(sig)
    assert "Slurm" in gap.reason and "no unprivileged source" in gap.reason
    assert gap.kind is Kind.UNAVAILABLE and gap.on == ""
    # Where no Slurm job runs, a free GPU idling is judged, and fine.
    assert holds(allocated(owners=())) is False
    assert "kubelet" in reason(allocated(owners=(), allocations_known=False)).reason
