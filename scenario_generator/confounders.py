"""The confounders: things on a node that look like a cause and are not (a
warm GPU at full clocks, a server waiting for requests, a neighbour's I/O,
old pages in swap). Each is drawn clearly outside every cause it resembles;
nothing may be reported for it.
"""

from __future__ import annotations

from scenario_generator.host_causes import starved
from scenario_generator.node import GIB, NodeBuilder
from scenario_generator.truth import Expected


def hot_full_clocks(b: NodeBuilder) -> list[Expected]:
    """A busy GPU runs warm, 1-10 C under the temperature where the driver's
    thermal control starts: no thermal reason, full clocks. Not slowed."""
    limit = b.board.temperature_thresholds_c.max_operating
    b.tgt.condition["temperature_c"] = round(b.u(limit - 10, limit - 1), 1)
    return []


def idle_server(b: NodeBuilder) -> list[Expected]:
    """An inference server at night: it holds its model in GPU memory, gets no
    requests, and sleeps between the timers and health checks that wake it
    many times a second (a little CPU). Waiting for work is not a fault."""
    main = starved(b, memory=(0.3, 0.9))
    b.tgt.condition["utilization"] = round(min(b.util, 0.02), 4)
    main.update(state="S", cpu_ratio=round(b.u(0.01, 0.04), 3), run_queue_wait_ratio=0.0,
                voluntary_ctxt_switches_per_s=b.u(5, 60),
                nonvoluntary_ctxt_switches_per_s=b.u(0, 2), sm_utilization=0.0, comm="server")
    return []


def neighbour_io(b: NodeBuilder) -> list[Expected]:
    """Another job (no GPU) hammers storage: the host's I/O pressure and
    iowait are high, the GPU's own job does not wait on I/O (it is busy, or
    its own cgroup shows no I/O stall)."""
    stall = b.u(0.35, 0.85)
    b.host.update(pressure_io={"some": stall, "full": stall * 0.3},
                  iowait_ratio=b.host["iowait_ratio"] + b.u(0.1, 0.3))
    pid = 9900
    b.processes[pid] = {"pid": pid, "comm": "rsync", "state": "D", "cpu_ratio": 0.05}
    return []


def swap_used_idle(b: NodeBuilder) -> list[Expected]:
    """Swap holds old pages (used) but nothing moves in or out, no memory
    pressure: the host is not swapping now."""
    b.host.update(swap_total_bytes=b.host["swap_total_bytes"] or 32 * GIB,
                  swap_used_ratio=b.u(0.2, 0.7))
    return []


def power_at_default(b: NodeBuilder) -> list[Expected]:
    """Dense work holds a busy GPU at its default power limit (sw_power_cap
    on, the limit untouched): the board working as designed."""
    b.tgt.condition["throttle_reasons"] = ["sw_power_cap"]
    return []


def zero_rpm_fans(b: NodeBuilder) -> list[Expected]:
    """A consumer board idles with its fans stopped (its zero-RPM mode): cool,
    nothing to blow away."""
    b.tgt.condition.update(fan_ratio=0.0, utilization=0.0, memory_used_ratio=0.0)
    main = b.main()
    if main is not None:
        main.update(sm_utilization=0.0, gpu_memory_ratio=0.0, state="S", cpu_ratio=0.01,
                    voluntary_ctxt_switches_per_s=10.0)
    return []


def low_steal(b: NodeBuilder) -> list[Expected]:
    """A virtual machine loses a little CPU to its hypervisor (under 5 %)."""
    b.host["steal_ratio"] = b.u(0.005, 0.05)
    return []


def memory_near_limit(b: NodeBuilder) -> list[Expected]:
    """The workload uses 80-92 % of its memory limit, without reclaim or
    memory stalls: full, not short."""
    spec = b.container()
    assert spec is not None and b.tgt.workload is not None
    limit = b.rng.choice([32, 64, 128]) * GIB
    spec["memory_limit_bytes"] = limit
    b.tgt.workload.update(memory_anon_bytes=int(limit * b.u(0.7, 0.8)),
                          memory_file_bytes=int(limit * b.u(0.1, 0.12)))
    return []


def neighbour_memory_pressure(b: NodeBuilder) -> list[Expected]:
    """Another cgroup on the node stalls on memory (the host's PSI memory
    shows it); the GPU's own workload does not, and nothing swaps."""
    some = b.u(0.1, 0.4)
    b.host["pressure_memory"] = {"some": some, "full": some * b.u(0.1, 0.4)}
    return []


def short_spike(b: NodeBuilder) -> list[Expected]:
    """A few seconds of something that would be a cause if it lasted: an
    iowait spike, a thermal blip, a checkpoint's dip to idle."""
    start = b.u(20, 40)
    kind = b.rng.choice(["io", "thermal", "dip"])
    if kind == "io":
        b.timeline.append({"at": round(start, 1), "host": {
            "iowait_ratio": 0.5, "pressure_io": {"some": 0.7, "full": 0.4}}})
        b.timeline.append({"at": round(start + b.u(3, 5), 1), "host": {
            "iowait_ratio": b.host["iowait_ratio"], "pressure_io": b.host["pressure_io"]}})
    elif kind == "thermal":
        b.at(round(start, 1), throttle_reasons=["hw_slowdown", "hw_thermal"])
        b.at(round(start + b.u(2, 4), 1), throttle_reasons=[])
    else:
        b.at(round(start, 1), utilization=0.0)
        b.at(round(start + b.u(3, 5), 1), utilization=round(b.util, 4))
    return []


def corrected_ecc(b: NodeBuilder) -> list[Expected]:
    """Single-bit ECC errors the memory corrected: no data lost."""
    b.tgt.condition["ecc_corrected_volatile"] = b.rng.randint(10, 500)
    return []


def small_throttle(b: NodeBuilder) -> list[Expected]:
    """The workload touches its CPU limit now and then (3-10 % of periods)
    while its GPU is busy."""
    assert b.tgt.workload is not None
    b.tgt.workload["cpu_throttled_ratio"] = b.u(0.03, 0.1)
    return []


def moderate_load(b: NodeBuilder) -> list[Expected]:
    """A job that keeps its GPU at a moderate load by its nature (a small
    model, latency-bound inference): it runs, nothing waits on the host."""
    starved(b, memory=(0.2, 0.7))
    return []


def memory_one_step(b: NodeBuilder) -> list[Expected]:
    """The GPU's process takes one large allocation partway through (a
    bigger batch, a second model loaded) and then holds still: a step up of
    10-25 % of the GPU's memory, never a climb, and not near full."""
    before = float(b.tgt.condition.get("memory_used_ratio", 0.5))
    before = min(before, 0.6)
    b.tgt.condition["memory_used_ratio"] = round(before, 4)
    main = b.main()
    if main is not None:
        main["gpu_memory_ratio"] = round(before * 0.97, 4)
    b.at(round(b.u(15, 50), 1), memory_used_ratio=round(before + b.u(0.1, 0.25), 4))
    return []


def host_memory_one_step(b: NodeBuilder) -> list[Expected]:
    """The host's memory in use steps up once partway through (a job loads a
    dataset into memory, a second job starts) and then holds still: 10-25 %
    of MemTotal in one go, never a climb, and plenty left available."""
    start = b.u(0.4, 0.8)
    b.host["memory_available_ratio"] = round(start, 4)
    b.timeline.append({"at": round(b.u(15, 50), 1), "host": {
        "memory_available_ratio": round(start - b.u(0.1, min(0.25, start - 0.15)), 4)}})
    return []
