"""The rules of a GPU allocated and unused: allocated to a pod or claim
with nothing running on it (``ALLOCATED_UNUSED``), and allocated to a pod
whose code runs on the CPU (``allocation_rows.py``): nothing runs on the
place, and its pod, with no process on any GPU, keeps its CPUs busy.

Only the kubelet's device-plugin grants name a GPU's holder and its pod's
cgroup: a Slurm job's GPUs and a ResourceClaim's pod are named by no source
an unprivileged reader has, so on them the second row is not judged."""

from __future__ import annotations

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.registry import Evidence, Trend, Verdict, rule
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.poll.readings import GpuOwner
from gpu_exporter.settings.thresholds import DiagnosisConfig


def _place_unused(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool, Evidence] | None:
    """Whether nothing runs on the place (no process, idle, no memory held),
    with its evidence; None where allocations, processes or memory are not
    read. Memory held with no process listed is a process the exporter
    cannot see (another PID namespace, no permission), not an unused place;
    a MIG instance without GPM says nothing of its activity, and with no
    process on it nothing can be running."""
    used, load = s.memory_used_ratio, s.load
    if not s.allocations_known or not s.processes_known or used is None:
        return None
    ev: Evidence = {"gpu_processes": len(s.processes), "gpu_memory_used_ratio": round(used, 3)}
    if load is not None:
        ev["gpu_utilization_ratio"] = round(load, 3)
    idle = load is None or load < cfg.idle_utilization
    return not s.processes and idle and used < cfg.memory_held_ratio, ev


def _allocated_unused(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    place = _place_unused(s, cfg)
    if place is None:
        return Verdict(None)
    unused, ev = place
    return Verdict(unused and any(not o.slurm_job_id for o in s.owners), ev)


rule(t.ALLOCATED_UNUSED)(_allocated_unused)


def _runs_on_cpu(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    place = _place_unused(s, cfg)
    if place is None:
        return Verdict(None)
    unused, ev = place
    pods = [o for o in s.owners if o.pod and not o.slurm_job_id]
    if not unused:
        return Verdict(False, ev)
    if not pods:
        # A free GPU idling is fine; but where Slurm jobs run, an idle GPU
        # may be one's, and no unprivileged source says whose.
        return Verdict(False if s.gpu_holders_known else None, ev)
    unknown = False
    for owner in pods:
        # Keyed as the kubelet names the grant: a ResourceClaim's owner is not
        # placed (its pod UID is not in the device manager's checkpoint).
        cpu = s.owner_cpu.get(GpuOwner(owner.namespace, owner.pod, owner.container,
                                       claim=owner.claim))
        if cpu is None:
            unknown = True
        elif cpu.on_gpu:
            continue  # its work reaches a GPU: the rows of a starved GPU judge it
        elif cpu.cpu_cores is None:
            unknown = True
        elif cpu.cpu_cores >= cfg.allocated_cpu_busy_cores:
            return Verdict(True, {**ev, "owner": owner.describe(),
                                  "owner_cpu_cores": round(cpu.cpu_cores, 2)})
    return Verdict(None if unknown else False, ev)


rule(t.ALLOCATED_RUNS_ON_CPU)(_runs_on_cpu)
