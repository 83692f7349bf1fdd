"""The causes that live in one MIG instance of the target GPU: its memory,
its process, its pod's CPU limit, its job's fault. Each names the instance
and its pod alone; the GPU's other instances are not their owners' concern.
"""

from __future__ import annotations

from scenario_generator.gpu_causes import APPLICATION_XIDS
from scenario_generator.node import NodeBuilder
from scenario_generator.truth import Expected


def _instance(b: NodeBuilder) -> tuple[int, frozenset[str] | None]:
    inst = b.tgt.instances[0]
    return inst.gpu_instance, frozenset({inst.owner}) if inst.owner else None


def mig_oom_risk(b: NodeBuilder) -> list[Expected]:
    """One instance's memory is all but full; its GPU as a whole is not."""
    inst = b.tgt.instances[0]
    inst.memory_used_ratio = b.u(0.965, 0.995)
    for other in b.tgt.instances[1:]:
        other.memory_used_ratio = min(other.memory_used_ratio, 0.6)
    gi, owners = _instance(b)
    return [Expected(b.target, "oom_risk", owners, gi)]


def mig_process_stalled(b: NodeBuilder) -> list[Expected]:
    """The process on one instance is stuck: asleep, no CPU, never wakes; the
    instance holds memory and its SMs do nothing (GPM per instance)."""
    inst = b.tgt.instances[0]
    inst.sm_active, inst.memory_used_ratio = 0.0, b.u(0.3, 0.9)
    assert inst.pid is not None
    b.processes[inst.pid].update(state="S", cpu_ratio=round(b.u(0.0, 0.002), 4),
                                 run_queue_wait_ratio=0.0, sm_utilization=0.0,
                                 voluntary_ctxt_switches_per_s=round(b.u(0.0, 0.05), 3),
                                 nonvoluntary_ctxt_switches_per_s=0.0)
    gi, owners = _instance(b)
    return [Expected(b.target, "process_stalled", owners, gi)]


def mig_no_process(b: NodeBuilder) -> list[Expected]:
    """A pod holds an instance and runs nothing on it: no process, no memory."""
    inst = b.tgt.instances[0]
    assert inst.pid is not None and inst.owner is not None
    del b.processes[inst.pid]
    b.spec_of(inst.owner)["pids"] = []
    inst.pid, inst.sm_active, inst.memory_used_ratio = None, 0.0, 0.0
    gi, owners = _instance(b)
    return [Expected(b.target, "no_process", owners, gi)]


def mig_runs_on_cpu(b: NodeBuilder) -> list[Expected]:
    """A pod holds an instance, but its container sees no CUDA and runs its
    job on 2-8 CPUs: its process holds no context anywhere, the instance's
    SMs do nothing and its memory is empty."""
    inst = b.tgt.instances[0]
    assert inst.pid is not None
    proc = b.processes[inst.pid]
    proc.pop("mig", None)
    proc.update(gpus=[], gpu_memory_ratio=0.0, sm_utilization=0.0, state="R",
                cpu_ratio=round(b.u(2.0, 8.0), 3))
    inst.sm_active, inst.memory_used_ratio = 0.0, 0.0
    gi, owners = _instance(b)
    return [Expected(b.target, "runs_on_cpu", owners, gi)]


def mig_cpu_limit_throttled(b: NodeBuilder) -> list[Expected]:
    """The pod on one instance is throttled by its CPU limit: its own cgroup
    shows it, the instance's SMs wait."""
    inst = b.tgt.instances[0]
    assert inst.owner is not None and inst.pid is not None
    inst.sm_active = b.util
    spec = b.spec_of(inst.owner)
    spec["cpu_limit"] = float(b.rng.choice([1, 2]))
    spec["cgroup"].update(cpu_throttled_ratio=b.u(0.4, 0.9), cpu_some=b.u(0.3, 0.8))
    b.processes[inst.pid].update(state="R", cpu_ratio=round(spec["cpu_limit"] * 0.5, 3),
                                 run_queue_wait_ratio=b.u(0.2, 0.8),
                                 sm_utilization=round(b.util, 3))
    gi, owners = _instance(b)
    return [Expected(b.target, "cpu_limit_throttled", owners, gi)]


def mig_application_fault(b: NodeBuilder) -> list[Expected]:
    """The job on one instance faults: the Xid names its process, and NVML's
    event names its instance; the GPU's other instances are not its owners'
    concern."""
    inst = b.tgt.instances[0]
    b.at(5.0, xid=[{"code": b.rng.choice(APPLICATION_XIDS), "pid": inst.pid}])
    gi, owners = _instance(b)
    return [Expected(b.target, "application_fault", owners, gi)]
