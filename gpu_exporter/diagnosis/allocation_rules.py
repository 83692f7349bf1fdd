"""The rule of a GPU allocated to a pod whose code runs on the CPU
(``allocation_rows.py``): the place is allocated, nothing runs on it, and its
pod, with no process on any GPU, keeps its CPUs busy."""

from __future__ import annotations

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.registry import Evidence, Trend, Verdict, rule
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.readings import GpuOwner
from gpu_exporter.thresholds import DiagnosisConfig


def _runs_on_cpu(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    used, load = s.memory_used_ratio, s.load
    if not s.allocations_known or not s.processes_known or used is None:
        return Verdict(None)
    ev: Evidence = {"gpu_processes": len(s.processes), "gpu_memory_used_ratio": round(used, 3)}
    if load is not None:
        ev["gpu_utilization_ratio"] = round(load, 3)
    pods = [o for o in s.owners if o.pod and not o.slurm_job_id]
    # Work on the place, seen or not (memory held with no process listed is a
    # process the exporter cannot see), is no job kept off it; a MIG instance
    # without GPM says nothing of its activity, and with no process on it
    # nothing can be running.
    idle = load is None or load < cfg.idle_utilization
    if not pods or s.processes or not idle or used >= cfg.memory_held_ratio:
        return Verdict(False, ev)
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
