"""The causes that starve a GPU from its host: the process that feeds it
waits on storage, on CPUs it shares or is limited to, on memory, on its
hypervisor, or on itself, and the GPU idles between its batches.

A cause that produces another's signals injects them too (a swapping host
raises iowait and I/O pressure): the diagnosis must report the root alone.
"""

from __future__ import annotations

from typing import Any

from scenario_generator.node import GIB, MIB, NodeBuilder
from scenario_generator.truth import Expected, at_gpu


def starved(b: NodeBuilder, memory: tuple[float, float] = (0.2, 0.9)) -> dict[str, Any]:
    """The target GPU works at the case's load with its memory held; its main
    process (returned) feeds it."""
    g = b.tgt
    g.condition["utilization"] = round(b.util, 4)
    mem = b.u(*memory)
    g.condition["memory_used_ratio"] = round(mem, 4)
    main = b.main()
    assert main is not None
    main.update(gpu_memory_ratio=round(mem * 0.97, 4), sm_utilization=round(b.util, 3))
    return main


def bursty(b: NodeBuilder, chance: float = 0.3) -> None:
    """A starved GPU often alternates between waiting and full speed within a
    second: its utilization a square wave whose duty cycle is its load."""
    if b.util >= 0.15 and b.rng.random() < chance:
        b.tgt.condition["burst_period_s"] = round(b.u(0.6, 2.5), 2)


def workers(b: NodeBuilder, n: int, state: str, cpu: float) -> None:
    """Data loader workers of the target's main process (no GPU context),
    in the same workload."""
    main = b.main()
    assert main is not None
    base = main["pid"] * 10 + 1
    for k in range(n):
        b.processes[base + k] = {"pid": base + k, "ppid": main["pid"], "comm": "pt_data_worker",
                                 "state": state, "cpu_ratio": round(cpu, 3),
                                 "voluntary_ctxt_switches_per_s": b.u(5, 50)}
    spec = b.container()
    if spec is not None:
        spec["pids"] = [*spec["pids"], *range(base, base + n)]


# Each leaves the GPU at most 65 % busy (idle over a third of the time: clearly
# starved); 65-85 % is left out as too close to a busy GPU's own ups and downs,
# jitter included: a fed GPU is drawn at 85 % or more (node.FED).
STARVED = (0, 65)


def _blocked_on_reads(b: NodeBuilder, main: dict[str, Any]) -> float:
    """The process that feeds the GPU blocked in the kernel (D) on its reads,
    or its loader workers while it sleeps waiting for their batches: how
    many tasks are blocked."""
    if b.util < 0.4 and (b.rng.random() < 0.5 or not b.shape.psi):
        # num_workers=0: the GPU process reads itself
        main.update(state="D", cpu_ratio=round(b.u(0.0, 0.03), 3), run_queue_wait_ratio=0.0,
                    voluntary_ctxt_switches_per_s=b.u(1, 20),
                    nonvoluntary_ctxt_switches_per_s=b.u(0, 1))
        return 1.0
    n = b.rng.randint(4, 16)
    workers(b, n, "D", b.u(0.0, 0.05))
    main.update(state="S", cpu_ratio=round(b.u(0.05, 0.4), 3),
                run_queue_wait_ratio=b.u(0.0, 0.03),
                voluntary_ctxt_switches_per_s=b.u(50, 500))
    return n * b.u(0.6, 0.95)


def data_pipeline_io(b: NodeBuilder) -> list[Expected]:
    """Reads from slow storage: the process that feeds the GPU is blocked in
    the kernel (D) on its reads, or its loader workers are while it sleeps
    waiting for their batches. The workload stalls on I/O (its own and the
    host's I/O pressure: PSI "some" is the share of time any task waited);
    iowait is the blocked tasks' share of all CPUs, small on a large host."""
    main = starved(b)
    blocked = _blocked_on_reads(b, main)
    stall = b.u(0.45, 0.95)
    b.host["iowait_ratio"] = min(0.9, blocked / b.shape.cpus + b.host["iowait_ratio"])
    b.host["pressure_io"] = {"some": stall, "full": stall * b.u(0.05, 0.4)}
    if b.cgroup_read and b.tgt.workload is not None:
        b.tgt.workload.update(io_some=stall, io_full=stall * b.u(0.2, 0.6))
    bursty(b)
    return at_gpu(b, "data_pipeline_io")


# The node's NVMe drive as the kernel numbers it (io.max and io.stat name it).
IO_DEVICE = "259:0"


def _io_limited(b: NodeBuilder, partway: float | None) -> list[Expected]:
    """The workload's io.max read limit on the drive its dataset is on holds
    its reads: it asks for 1.5-6 times what the limit lets through, so its
    reads run at the limit, its readers block on them (D) and its own I/O
    pressure is high. The drive would serve it faster: the limit, not the
    storage, holds the job back. ``partway``: the limit is applied then (the
    GPU busy and nothing stalled before)."""
    main = starved(b)
    spec = b.container()
    assert spec is not None and b.tgt.workload is not None
    limit = b.rng.choice([25, 50, 100, 200, 400]) * MIB
    b.tgt.workload.update(io_read_bytes_per_s=round(limit * b.u(1.5, 6.0)),
                          io_device=IO_DEVICE)
    io_max = [{"device": IO_DEVICE, "rbps": limit}]
    blocked = _blocked_on_reads(b, main)
    stall = b.u(0.45, 0.9)
    held = {"io_some": stall, "io_full": stall * b.u(0.2, 0.6)}
    host = {"iowait_ratio": min(0.9, blocked / b.shape.cpus + b.host["iowait_ratio"]),
            "pressure_io": {"some": stall, "full": stall * b.u(0.05, 0.2)}}
    if partway is None:
        spec["io_max"] = io_max
        b.tgt.workload.update(held)
        b.host.update(host)
    else:
        b.tgt.condition["utilization"] = round(b.u(0.88, 0.97), 4)
        b.at(partway, utilization=round(b.util, 4))
        spec["changes"] = [{"at": partway, "io_max": io_max, "cgroup": held}]
        b.timeline.append({"at": partway, "host": host})
    bursty(b)
    return at_gpu(b, "io_limit_throttled")


def io_limit_throttled(b: NodeBuilder) -> list[Expected]:
    return _io_limited(b, None)


def io_limit_applied_partway(b: NodeBuilder) -> list[Expected]:
    """The I/O limit applied to the running job 2-16 s in (the run lasts a
    minute): the job ran fed until then."""
    return _io_limited(b, round(b.u(2, 16), 1))


def io_limit_far_slow_storage(b: NodeBuilder) -> list[Expected]:
    """Slow storage under an io.max limit far above what it delivers: the
    workload reads at 2-20 % of its limit while it stalls on I/O. The limit
    is set and not reached: the storage holds the job back, not the limit."""
    found = data_pipeline_io(b)
    spec = b.container()
    assert spec is not None and b.tgt.workload is not None
    rate = b.u(10, 80) * MIB
    b.tgt.workload.update(io_read_bytes_per_s=round(rate), io_device=IO_DEVICE)
    spec["io_max"] = [{"device": IO_DEVICE, "rbps": round(rate / b.u(0.02, 0.2)),
                       "wbps": b.rng.choice([None, 100 * MIB])}]
    return found


def cpu_contention(b: NodeBuilder) -> list[Expected]:
    """More runnable tasks than CPUs: the GPU's process waits on the run queue
    (schedstat) and the host's CPU pressure is high; the workload, which has
    no CPU limit in the way, stalls on CPU too."""
    main = starved(b)
    main.update(state="R", cpu_ratio=round(b.u(0.3, 0.9), 3),
                run_queue_wait_ratio=b.u(0.45, 1.5),
                nonvoluntary_ctxt_switches_per_s=b.u(50, 500))
    some = b.u(0.45, 0.9)
    b.host.update(cpu_busy_ratio=b.u(0.93, 0.99), load1=b.shape.cpus * b.u(1.5, 3.0),
                  pressure_cpu={"some": some, "full": some * b.u(0.1, 0.4)})
    spec = b.container()
    if spec is not None and b.tgt.workload is not None:
        spec.pop("cpu_limit", None)  # nothing holds it back but the crowd
        b.tgt.workload.update(cpu_some=b.u(0.45, 0.9), cpu_throttled_ratio=0.0)
    bursty(b)
    return at_gpu(b, "cpu_contention")


def cpu_limit_throttled(b: NodeBuilder) -> list[Expected]:
    """The workload's CPU limit throttles it in most of its periods; its own
    cgroup stalls on CPU and its process waits (throttled time counts as run
    delay). The host has CPUs to spare, or is moderately busy with other
    work: either way the limit, not the host, holds the job back."""
    main = starved(b)
    spec = b.container()
    assert spec is not None and b.tgt.workload is not None
    limit = float(b.rng.choice([1, 2, 3, 4, 6]))
    spec["cpu_limit"] = limit
    b.tgt.workload.update(cpu_throttled_ratio=b.u(0.4, 0.9), cpu_some=b.u(0.3, 0.8),
                          cpu_full=b.u(0.1, 0.3))
    main.update(state="R", cpu_ratio=round(limit * b.u(0.3, 0.6), 3),
                run_queue_wait_ratio=b.u(0.2, 0.8))
    moderate = b.rng.random() < 0.5  # a confounder: the host is busy, not short
    some = b.u(0.15, 0.45) if moderate else b.u(0.01, 0.08)
    b.host["pressure_cpu"] = {"some": some, "full": some * 0.1}
    b.host["cpu_busy_ratio"] = b.u(0.5, 0.8) if moderate else b.host["cpu_busy_ratio"]
    bursty(b)
    return at_gpu(b, "cpu_limit_throttled")


def host_swapping(b: NodeBuilder) -> list[Expected]:
    """The host is out of memory and swaps: pages go out and come back (swap
    traffic), tasks stall on memory (PSI memory), and swap I/O is disk I/O
    (iowait and I/O pressure rise with it). The job's pages are among them."""
    main = starved(b)
    main.update(state=b.rng.choice(["S", "D"]), cpu_ratio=round(b.u(0.02, 0.3), 3))
    some = b.u(0.25, 0.6)
    io = b.u(0.2, 0.6)
    b.host.update(swap_used_ratio=b.u(0.3, 0.9), memory_available_ratio=b.u(0.005, 0.03),
                  swap_in_bytes_per_s=b.u(5, 150) * MIB, swap_out_bytes_per_s=b.u(5, 150) * MIB,
                  pressure_memory={"some": some, "full": some * b.u(0.2, 0.7)},
                  pressure_io={"some": io, "full": io * 0.3},
                  iowait_ratio=b.host["iowait_ratio"] + b.u(0.05, 0.25))
    if b.cgroup_read and b.tgt.workload is not None:
        b.tgt.workload.update(memory_some=some, memory_full=some * b.u(0.3, 0.7),
                              io_some=io * b.u(0.5, 1.0))
    bursty(b)
    return at_gpu(b, "host_swapping")


def memory_limit_reclaim(b: NodeBuilder) -> list[Expected]:
    """The workload sits at its memory limit: the kernel reclaims its page
    cache to make room (direct reclaim, counted as scans and steals), the job
    re-reads what was evicted (refaults, extra reads), its tasks stall on
    memory, and memory.events counts each hit of the limit. Nothing swaps:
    there is no swap traffic anywhere. The host's own memory pressure shows
    some of the job's (PSI counts a cgroup's stalls in its ancestors)."""
    main = starved(b)
    spec = b.container()
    assert spec is not None and b.tgt.workload is not None
    limit = b.rng.choice([8, 16, 32, 64, 96]) * GIB
    spec["memory_limit_bytes"] = limit
    anon = int(limit * b.u(0.7, 0.9))
    file = int(limit * 0.99) - anon
    scan = b.u(50, 600) * MIB
    some = b.u(0.3, 0.8)
    b.tgt.workload.update(
        memory_anon_bytes=anon, memory_file_bytes=file, reclaim_scan_bytes_per_s=scan,
        reclaim_steal_bytes_per_s=scan * b.u(0.5, 0.9),
        refault_bytes_per_s=b.u(30, 400) * MIB, memory_max_events_per_s=b.u(5, 200),
        memory_some=some, memory_full=some * b.u(0.3, 0.6), io_some=b.u(0.05, 0.3))
    main.update(state=b.rng.choice(["S", "D", "R"]), cpu_ratio=round(b.u(0.05, 0.5), 3))
    host_some = some * b.u(0.1, 0.5)
    b.host.update(swap_in_bytes_per_s=0.0, swap_out_bytes_per_s=0.0,
                  pressure_memory={"some": host_some, "full": host_some * 0.4})
    bursty(b)
    return at_gpu(b, "memory_limit_reclaim")


def cpu_steal(b: NodeBuilder) -> list[Expected]:
    """A virtual machine whose hypervisor runs others on its CPUs: a large
    share of CPU time is stolen (/proc/stat steal). Inside the guest nothing
    waits on the run queue (the stolen task looks as if it ran), so neither
    PSI nor schedstat shows it: steal alone does."""
    main = starved(b)
    main.update(state="R", cpu_ratio=round(b.u(0.5, 1.5), 3),
                run_queue_wait_ratio=b.u(0.02, 0.15))
    b.host.update(steal_ratio=b.u(0.25, 0.6), cpu_busy_ratio=b.u(0.3, 0.6))
    bursty(b)
    return at_gpu(b, "cpu_steal")


def process_stalled(b: NodeBuilder) -> list[Expected]:
    """The process holding the GPU is stuck (a deadlock, a barrier that never
    completes): asleep, on no CPU, and it never wakes (no context switch in
    the whole run: blocked on a futex or a socket with no timeout). Its GPU
    holds its memory and does nothing. (An asleep process that wakes often
    with a little CPU is an idle server: ``idle_server``, not a fault.)"""
    main = starved(b, memory=(0.25, 0.9))
    b.tgt.condition["utilization"] = round(min(b.util, 0.02), 4)
    main.update(state="S", cpu_ratio=round(b.u(0.0, 0.002), 4), run_queue_wait_ratio=0.0,
                voluntary_ctxt_switches_per_s=round(b.u(0.0, 0.05), 3),
                nonvoluntary_ctxt_switches_per_s=0.0, sm_utilization=0.0)
    return at_gpu(b, "process_stalled")


def input_starvation(b: NodeBuilder) -> list[Expected]:
    """Too few loader workers: the GPU finishes each batch fast and waits for
    the next, nothing on the host waits on anything (no I/O, CPU or memory
    stall). Its utilization swings between 0 and 100 % within a second."""
    main = starved(b)
    b.tgt.condition["burst_period_s"] = round(b.u(0.6, 3.0), 2)
    main.update(state="R", cpu_ratio=round(b.u(1.0, 3.0), 3))
    return at_gpu(b, "input_starvation")


def once_for_the_node(b: NodeBuilder, cause: str, held: list[int]) -> list[Expected]:
    """A cause of the host is one cause of the node: reported once, on the
    first GPU that holds a job, naming the owners of every GPU it slows."""
    if not held:
        return []
    named = frozenset(n for i in held for n in b.owners(i) or ())
    return [Expected(held[0], cause, named or None)]


def host_cpu_thermal(b: NodeBuilder) -> list[Expected]:
    """The host's CPUs run hot (a blocked intake, a failed fan, dried thermal
    paste): every core and package goes over its temperature limit again and
    again (0.5-5 times a second) and spends 5-40 % of its time throttled.
    Every job on the node runs slower at each CPU-side step; the GPUs
    themselves are as they were. It concerns every GPU that holds a job."""
    b.host.update(cpu_thermal_counters=True,
                  cpu_thermal_throttles_per_s=round(b.u(0.5, 5.0), 2),
                  cpu_thermal_throttled_ratio=round(b.u(0.05, 0.4), 3))
    held = sorted({i for p in b.processes.values() for i in p.get("gpus", [])})
    return once_for_the_node(b, "host_cpu_thermal", held)


def host_memory_growth(b: NodeBuilder) -> list[Expected]:
    """The jobs leak host memory (loader workers that keep a copy of every
    batch, a cache without bound): the host's memory in use climbs steadily
    from 20-60 % of MemTotal, at a rate that leaves none available within
    5-40 minutes, so well within the minute judged the kernel still has
    plenty left (it never reaches its last reserves). The GPUs work on as
    they were; every job on the node shares the one host's memory, so it
    concerns every GPU that holds a job."""
    start = b.u(0.4, 0.8)
    to_empty = b.u(300, 2400)
    b.host.update(memory_available_ratio=round(start, 4),
                  memory_available_drop_ratio_per_s=round(start / to_empty, 7))
    held = sorted({i for p in b.processes.values() for i in p.get("gpus", [])})
    return once_for_the_node(b, "host_memory_growth", held)
