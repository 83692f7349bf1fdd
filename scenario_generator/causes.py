"""The causes a case can inject, and the confounders: what each does to a
node, written from what the hardware and the kernel do, and what the
diagnosis must then report (a cause) or not report (a confounder).

Each injector draws its magnitudes clearly inside its cause. The bands it
stays out of are stated where it draws: a case never sits near the edge of a
cause, so a right rule cannot be wrong on it for want of a threshold.

A cause that produces another's signals injects them too (a swapping host
raises iowait; a narrowed link starves its GPU; an uncorrectable ECC error
kills the job and leaves its GPU idle; a stopped fan heats the GPU until the
driver slows it): the diagnosis must report the root alone, with the rest
listed under it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpu_exporter.simulator.model import DeviceProfile
from scenario_generator.network_causes import (
    rdma_link_integrity,
    rdma_port,
    saturated_symbol_errors,
)
from scenario_generator.node import GIB, MIB, HostShape, NodeBuilder, Tenant
from scenario_generator.truth import Expected

# How many GB/s one PCIe lane carries per direction, by generation (after the
# line coding: 8b/10b for Gen1-2, 128b/130b from Gen3).
# Usable GB/s per lane and direction by PCIe generation; Gen6 is 64 GT/s in
# FLIT mode, 242 payload bytes of each 256 (PCIe 6.0 base specification).
LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# NVIDIA's Xid catalog (gpu_exporter/xids.py holds it as data): codes on the
# hardware or the driver, codes on the application.
HARDWARE_XIDS = (61, 62, 119, 120)
APPLICATION_XIDS = (13, 31, 43)
# The ECC Xids: a double-bit error, a contained and an uncontained one.
ECC_XIDS = (48, 94, 95)

Inject = Callable[[NodeBuilder], list[Expected]]
Scope = str  # "gpu" (the target GPU), "instance" (a MIG instance), "host"


@dataclass(frozen=True)
class Cause:
    """A cause (``finding`` the row's cause name) or a confounder
    (``finding`` None: nothing may be reported for it).

    ``loads``: the target's utilization (percent, [lo, hi)) at which it can
    exist; ``touches``: what it sets, so two injections never fight over one
    value; ``fits``: the boards, tenants and hosts it can be on (what the
    hardware has and what the exporter can observe there)."""

    name: str
    finding: str | None
    loads: tuple[int, int]
    touches: frozenset[str]
    inject: Inject
    boards: Callable[[DeviceProfile], bool] = lambda b: True
    tenants: frozenset[Tenant] = frozenset({"bare", "pod", "slurm-v1", "slurm-v2"})
    host: Callable[[HostShape], bool] = lambda h: True
    # Host shape it needs (the composer draws the host so): VM, swap, NUMA, PSI.
    needs: frozenset[str] = frozenset()
    exclusive: bool = False  # nothing else on its GPU (the GPU is gone or empty)


def _at_gpu(b: NodeBuilder, cause: str) -> list[Expected]:
    return [Expected(b.target, cause, b.owners())]


def _starved(b: NodeBuilder, memory: tuple[float, float] = (0.2, 0.9)) -> dict[str, Any]:
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


def _bursty(b: NodeBuilder, chance: float = 0.3) -> None:
    """A starved GPU often alternates between waiting and full speed within a
    second: its utilization a square wave whose duty cycle is its load."""
    if b.util >= 0.15 and b.rng.random() < chance:
        b.tgt.condition["burst_period_s"] = round(b.u(0.6, 2.5), 2)


def _workers(b: NodeBuilder, n: int, state: str, cpu: float) -> None:
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


# --- starvation: the GPU waits on its host -------------------------------------------
# Each leaves the GPU at most 65 % busy (idle over a third of the time: clearly
# starved); 65-85 % is left out as too close to a busy GPU's own ups and downs,
# jitter included: a fed GPU is drawn at 85 % or more (node.FED).
STARVED = (0, 65)


def data_pipeline_io(b: NodeBuilder) -> list[Expected]:
    """Reads from slow storage: the process that feeds the GPU is blocked in
    the kernel (D) on its reads, or its loader workers are while it sleeps
    waiting for their batches. The workload stalls on I/O (its own and the
    host's I/O pressure: PSI "some" is the share of time any task waited);
    iowait is the blocked tasks' share of all CPUs, small on a large host."""
    main = _starved(b)
    in_main = b.util < 0.4 and (b.rng.random() < 0.5 or not b.shape.psi)
    cpus = b.shape.cpus
    if in_main:  # num_workers=0: the GPU process reads itself
        main.update(state="D", cpu_ratio=round(b.u(0.0, 0.03), 3), run_queue_wait_ratio=0.0,
                    voluntary_ctxt_switches_per_s=b.u(1, 20),
                    nonvoluntary_ctxt_switches_per_s=b.u(0, 1))
        blocked = 1.0
    else:
        n = b.rng.randint(4, 16)
        _workers(b, n, "D", b.u(0.0, 0.05))
        main.update(state="S", cpu_ratio=round(b.u(0.05, 0.4), 3),
                    run_queue_wait_ratio=b.u(0.0, 0.03),
                    voluntary_ctxt_switches_per_s=b.u(50, 500))
        blocked = n * b.u(0.6, 0.95)
    stall = b.u(0.45, 0.95)
    b.host["iowait_ratio"] = min(0.9, blocked / cpus + b.host["iowait_ratio"])
    b.host["pressure_io"] = {"some": stall, "full": stall * b.u(0.05, 0.4)}
    if b.cgroup_read and b.tgt.workload is not None:
        b.tgt.workload.update(io_some=stall, io_full=stall * b.u(0.2, 0.6))
    _bursty(b)
    return _at_gpu(b, "data_pipeline_io")


def cpu_contention(b: NodeBuilder) -> list[Expected]:
    """More runnable tasks than CPUs: the GPU's process waits on the run queue
    (schedstat) and the host's CPU pressure is high; the workload, which has
    no CPU limit in the way, stalls on CPU too."""
    main = _starved(b)
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
    _bursty(b)
    return _at_gpu(b, "cpu_contention")


def cpu_limit_throttled(b: NodeBuilder) -> list[Expected]:
    """The workload's CPU limit throttles it in most of its periods; its own
    cgroup stalls on CPU and its process waits (throttled time counts as run
    delay). The host has CPUs to spare, or is moderately busy with other
    work: either way the limit, not the host, holds the job back."""
    main = _starved(b)
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
    _bursty(b)
    return _at_gpu(b, "cpu_limit_throttled")


def host_swapping(b: NodeBuilder) -> list[Expected]:
    """The host is out of memory and swaps: pages go out and come back (swap
    traffic), tasks stall on memory (PSI memory), and swap I/O is disk I/O
    (iowait and I/O pressure rise with it). The job's pages are among them."""
    main = _starved(b)
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
    _bursty(b)
    return _at_gpu(b, "host_swapping")


def memory_limit_reclaim(b: NodeBuilder) -> list[Expected]:
    """The workload sits at its memory limit: the kernel reclaims its page
    cache to make room (direct reclaim, counted as scans and steals), the job
    re-reads what was evicted (refaults, extra reads), its tasks stall on
    memory, and memory.events counts each hit of the limit. Nothing swaps:
    there is no swap traffic anywhere. The host's own memory pressure shows
    some of the job's (PSI counts a cgroup's stalls in its ancestors)."""
    main = _starved(b)
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
    _bursty(b)
    return _at_gpu(b, "memory_limit_reclaim")


def cpu_steal(b: NodeBuilder) -> list[Expected]:
    """A virtual machine whose hypervisor runs others on its CPUs: a large
    share of CPU time is stolen (/proc/stat steal). Inside the guest nothing
    waits on the run queue (the stolen task looks as if it ran), so neither
    PSI nor schedstat shows it: steal alone does."""
    main = _starved(b)
    main.update(state="R", cpu_ratio=round(b.u(0.5, 1.5), 3),
                run_queue_wait_ratio=b.u(0.02, 0.15))
    b.host.update(steal_ratio=b.u(0.25, 0.6), cpu_busy_ratio=b.u(0.3, 0.6))
    _bursty(b)
    return _at_gpu(b, "cpu_steal")


def process_stalled(b: NodeBuilder) -> list[Expected]:
    """The process holding the GPU is stuck (a deadlock, a barrier that never
    completes): asleep, on no CPU, and it never wakes (no context switch in
    the whole run: blocked on a futex or a socket with no timeout). Its GPU
    holds its memory and does nothing. (An asleep process that wakes often
    with a little CPU is an idle server: ``idle_server``, not a fault.)"""
    main = _starved(b, memory=(0.25, 0.9))
    b.tgt.condition["utilization"] = round(min(b.util, 0.02), 4)
    main.update(state="S", cpu_ratio=round(b.u(0.0, 0.002), 4), run_queue_wait_ratio=0.0,
                voluntary_ctxt_switches_per_s=round(b.u(0.0, 0.05), 3),
                nonvoluntary_ctxt_switches_per_s=0.0, sm_utilization=0.0)
    return _at_gpu(b, "process_stalled")


def input_starvation(b: NodeBuilder) -> list[Expected]:
    """Too few loader workers: the GPU finishes each batch fast and waits for
    the next, nothing on the host waits on anything (no I/O, CPU or memory
    stall). Its utilization swings between 0 and 100 % within a second."""
    main = _starved(b)
    b.tgt.condition["burst_period_s"] = round(b.u(0.6, 3.0), 2)
    main.update(state="R", cpu_ratio=round(b.u(1.0, 3.0), 3))
    return _at_gpu(b, "input_starvation")


# --- the GPU held back: power, heat, clocks ------------------------------------------
def _power_wanted(board: DeviceProfile, util: float) -> float:
    """What a GPU at ``util`` draws at its default limit (the simulator's model
    of a board: idle power plus a share of 90 % of the limit)."""
    return board.power_idle_w + (0.9 * board.power_default_limit_w - board.power_idle_w) * util


def power_cap_fits(board: DeviceProfile) -> bool:
    # The cap can bind only where it can be set well below what the busy GPU
    # wants: a limit 15 % or more under the draw, and above the board's minimum.
    return board.power_min_limit_w < 0.85 * _power_wanted(board, 0.7)


def power_cap(b: NodeBuilder) -> list[Expected]:
    """The power limit was lowered below the board's default, below what the
    busy GPU wants to draw: the driver caps its clocks (sw_power_cap) and it
    draws its limit."""
    wanted = _power_wanted(b.board, b.util)
    limit = max(b.board.power_min_limit_w, wanted * b.u(0.55, 0.85))
    b.tgt.condition.update(power_limit_w=round(limit, 1), throttle_reasons=["sw_power_cap"])
    return _at_gpu(b, "power_cap")


def thermal(b: NodeBuilder) -> list[Expected]:
    """Heat slows the busy GPU: either the air at its inlet is hot (a failed
    aisle, a blocked intake) and the driver's thermal control lowers its
    clocks (sw_thermal), or the hardware slowdown engages (hw_thermal, which
    the driver reports with hw_slowdown) at the slowdown temperature."""
    board = b.board
    limits = board.temperature_thresholds_c
    need = limits.max_operating - (board.temperature_idle_c + board.temperature_load_rise_c
                                   * b.util)
    inlet = 25 + need + b.u(2, 6)
    if inlet <= 45 and b.rng.random() < 0.5:
        b.tgt.condition["inlet_temperature_c"] = round(inlet, 1)
    else:
        b.tgt.condition.update(temperature_c=round(limits.slowdown + b.u(-1, 2), 1),
                               throttle_reasons=["hw_slowdown", "hw_thermal"])
    return _at_gpu(b, "thermal")


def fan_stopped(b: NodeBuilder) -> list[Expected]:
    """One of the board's fans stopped (it reads 0 % while the others spin up):
    the busy GPU runs hotter, on a one-fan board until the driver's thermal
    control slows it. The fan is the root; the heat is its consequence."""
    fans: list[dict[str, Any]] = [{} for _ in range(b.board.fans)]
    fans[b.rng.randrange(len(fans))] = {"stopped": True}
    b.tgt.condition["fans"] = fans
    return _at_gpu(b, "fan_stopped")


def hw_slowdown(b: NodeBuilder) -> list[Expected]:
    """The hardware slowdown engaged with no named reason (hw_slowdown alone,
    the temperature normal): the power supply's fast trigger or a fault."""
    b.tgt.condition["throttle_reasons"] = ["hw_slowdown"]
    return _at_gpu(b, "hw_slowdown")


def power_brake(b: NodeBuilder) -> list[Expected]:
    """The chassis pulls the external power brake (hw_power_brake, which the
    driver reports with hw_slowdown)."""
    b.tgt.condition["throttle_reasons"] = ["hw_slowdown", "hw_power_brake"]
    return _at_gpu(b, "power_brake")


def application_clocks(b: NodeBuilder) -> list[Expected]:
    """Someone set the application clocks below the board's default: the GPU
    never boosts past them while it works."""
    default = b.board.clocks_application_mhz.sm
    b.tgt.condition["application_sm_clock_mhz"] = int(default * b.u(0.5, 0.85))
    return _at_gpu(b, "application_clocks")


def link_degraded(b: NodeBuilder) -> list[Expected]:
    """The GPU's PCIe link trained below what it can: narrower (a width never
    lowered to save power), slower (a generation the busy GPU does not
    choose), or its switch's port above it. At its worst the link carries all
    it can and the GPU waits on its transfers: its low utilization is the
    link's doing."""
    board = b.board
    gen_max, width_max = board.pcie_max_generation, board.pcie_max_width
    kind = b.rng.choice(["width", "generation", "upstream", "starving"])
    if kind == "generation" and b.util < 0.1:
        kind = "width"  # an idle GPU lowers its generation itself
    if kind == "starving" and not 0.1 <= b.util < 0.6:
        kind = "width"
    if kind == "width":
        b.tgt.condition["pcie_link_width"] = b.rng.choice([w for w in (1, 4, 8)
                                                           if w < width_max])
    elif kind == "generation":
        b.tgt.condition["pcie_link_generation"] = b.rng.randint(max(1, gen_max - 2),
                                                                gen_max - 1)
    elif kind == "upstream":
        b.tgt.condition["upstream_link_width"] = b.rng.choice([4, 8])
    else:
        width = b.rng.choice([1, 4])
        capacity = LANE_GBPS[gen_max] * width * 1e9
        b.tgt.condition.update(pcie_link_width=width,
                               pcie_rx_bytes_per_s=round(capacity * b.u(0.85, 0.97)),
                               pcie_tx_bytes_per_s=round(capacity * b.u(0.2, 0.5)))
        main = b.main()
        if main is not None:
            main.update(state="R", cpu_ratio=round(b.u(0.8, 1.0), 3))
    return _at_gpu(b, "link_degraded")


def link_integrity(b: NodeBuilder) -> list[Expected]:
    """The link retries: NVML's replay counter or the kernel's AER correctable
    counter rises every few seconds."""
    key = b.rng.choice(["pcie_replays_per_s", "aer_correctable_per_s"])
    b.tgt.condition[key] = round(b.u(0.5, 10.0), 2)
    return _at_gpu(b, "link_integrity")


# --- memory and the driver's reports -----------------------------------------------
def _ecc_on(board: DeviceProfile) -> bool:
    return board.ecc and "nvmlDeviceGetTotalEccErrors" not in board.unsupported_calls


def _hbm(board: DeviceProfile) -> bool:
    # Row remapping: the HBM boards (Ampere and Hopper datacenter GPUs).
    return board.mig


def ecc_uncorrectable(b: NodeBuilder) -> list[Expected]:
    """An uncorrectable ECC error in GPU memory (the volatile count is above
    zero); on an HBM board its row waits for remapping, which the same reset
    does: the pending remap is the error's consequence."""
    b.tgt.condition["ecc_uncorrected_volatile"] = b.rng.randint(1, 5)
    if _hbm(b.board) and b.rng.random() < 0.5:
        b.tgt.condition["remap_pending"] = True
    return _at_gpu(b, "ecc_uncorrectable")


def ecc_kills_job(b: NodeBuilder) -> list[Expected]:
    """An uncorrectable ECC error kills the job on the GPU (the driver reports
    it as an ECC Xid); the pod keeps its GPU, now with no process, its memory
    free and nothing running. The error explains the idle, allocated GPU."""
    main = b.main()
    assert main is not None
    main["exits_at"] = 6.0
    b.tgt.condition.update(utilization=0.0, memory_used_ratio=0.0)
    b.at(5.0, ecc_uncorrected_volatile=b.rng.randint(1, 3),
         xid=[b.rng.choice(ECC_XIDS)])
    spec = b.container()
    if spec is not None:  # its loader workers went with it
        spec["pids"] = [p for p in spec["pids"] if p != main["pid"]]
    return _at_gpu(b, "ecc_uncorrectable")


def row_remap_pending(b: NodeBuilder) -> list[Expected]:
    """A row waits to be remapped at the next GPU reset."""
    b.tgt.condition["remap_pending"] = True
    return _at_gpu(b, "row_remap_pending")


def driver_reported(b: NodeBuilder) -> list[Expected]:
    """The driver reports a hardware or firmware Xid for the GPU."""
    b.at(5.0, xid=[b.rng.choice(HARDWARE_XIDS)])
    return _at_gpu(b, "driver_reported")


def application_fault(b: NodeBuilder) -> list[Expected]:
    """The job on the GPU faulted (an illegal address, an engine exception):
    the driver reports an application Xid naming the job's process."""
    main = b.main()
    pid = None if main is None else main["pid"]
    b.at(5.0, xid=[{"code": b.rng.choice(APPLICATION_XIDS), "pid": pid}
                   if pid else b.rng.choice(APPLICATION_XIDS)])
    return _at_gpu(b, "application_fault")


def gpu_lost(b: NodeBuilder) -> list[Expected]:
    """The GPU falls off the bus: NVML answers GPU_IS_LOST, the kernel removes
    it, and the driver logs Xid 79 (explained by the loss)."""
    change: dict[str, Any] = {"lost": True}
    if b.rng.random() < 0.5:
        change["xid"] = [79]
    b.at(5.0, **change)
    return _at_gpu(b, "hardware")


def oom_risk(b: NodeBuilder) -> list[Expected]:
    """The GPU's memory is all but full (96.5 % or more: an allocator spike
    away from an out-of-memory error)."""
    mem = b.u(0.965, 0.995)
    b.tgt.condition["memory_used_ratio"] = round(mem, 4)
    main = b.main()
    if main is not None:
        main["gpu_memory_ratio"] = round(mem * 0.99, 4)
    return _at_gpu(b, "oom_risk")


def small_kernels(b: NodeBuilder) -> list[Expected]:
    """Tiny kernels keep one kernel running all the time while most SMs idle:
    utilization near full (90 % or more), GPM's SM activity low (at most a
    fifth; 20-40 % left out)."""
    b.tgt.condition["sm_active"] = round(b.u(0.05, 0.2), 3)
    return _at_gpu(b, "small_kernels")


def memory_bound(b: NodeBuilder) -> list[Expected]:
    """Kernels that stream memory: GPM reads the DRAM bandwidth well used (78 %
    or more; 60-78 % left out) while the SMs work (60 % or more) and the
    tensor pipes mostly wait (a quarter at most)."""
    b.tgt.condition["sm_active"] = round(b.u(0.6, 0.95), 3)
    b.tgt.condition["dram_active"] = round(b.u(0.78, 0.97), 3)
    b.tgt.condition["tensor_active"] = round(b.u(0.0, 0.25), 3)
    return _at_gpu(b, "dram_bandwidth")


def persistence_off(b: NodeBuilder) -> list[Expected]:
    b.tgt.condition["persistence_mode"] = False
    return _at_gpu(b, "configuration")


def cpu_affinity(b: NodeBuilder) -> list[Expected]:
    """The GPU's process runs on CPUs of another NUMA node than its GPU's: its
    own affinity, or its Slurm job's cpuset on the wrong socket."""
    main = b.main()
    assert main is not None
    remote = b.remote_cpus(b.target)
    spec = b.container()
    if spec is not None and "job_id" in spec:
        spec["cpus"] = remote
    else:
        main["cpus_allowed"] = remote
    return _at_gpu(b, "cpu_affinity")


def no_process(b: NodeBuilder) -> list[Expected]:
    """The kubelet gave the GPU to a pod whose container runs nothing on it:
    no process, no memory, no work, all along."""
    main = b.main()
    assert main is not None
    del b.processes[main["pid"]]
    spec = b.container()
    assert spec is not None
    spec["pids"] = []
    b.tgt.pid = None
    b.tgt.condition.update(utilization=0.0, memory_used_ratio=0.0)
    return _at_gpu(b, "no_process")


def gpu_reset(b: NodeBuilder) -> list[Expected]:
    """The driver says the GPU must be reset (its recovery action)."""
    b.at(5.0, recovery_action="gpu_reset")
    return _at_gpu(b, "gpu_reset")


def nvswitch_fabric(b: NodeBuilder) -> list[Expected]:
    b.tgt.condition["fabric_health"] = b.rng.choice(["unhealthy", "limited_capacity"])
    return _at_gpu(b, "nvswitch_fabric")


# --- a MIG instance's own causes ---------------------------------------------------
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


# --- confounders: they look like a cause and are not ------------------------------
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
    main = _starved(b, memory=(0.3, 0.9))
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
    _starved(b, memory=(0.2, 0.7))
    return []


_HOST = frozenset({"host_io", "host_cpu", "host_mem", "swap", "steal"})
# The causes of a whole GPU that need no process on it: on a MIG GPU too,
# where they concern every instance's owner.
_WHOLE_GPU: frozenset[Tenant] = frozenset({"bare", "pod", "slurm-v1", "slurm-v2", "mig"})
_V2: frozenset[Tenant] = frozenset({"pod", "slurm-v2"})
_PODS: frozenset[Tenant] = frozenset({"pod"})
_MIG: frozenset[Tenant] = frozenset({"mig"})
_GPM = "gpm"


def _has(key: str) -> Callable[[DeviceProfile], bool]:
    return {"gpm": lambda b: b.gpm, "mig": lambda b: b.mig, "fans": lambda b: b.fans > 0,
            "ecc": _ecc_on, "hbm": _hbm, "fabric": lambda b: b.fabric,
            "app_clocks": lambda b: "nvmlDeviceGetApplicationsClock" not in b.unsupported_calls,
            "power_cap": power_cap_fits}[key]


def _c(name: str, finding: str | None, loads: tuple[int, int], touches: set[str],
       inject: Inject, **kw: Any) -> Cause:
    return Cause(name, finding, loads, frozenset(touches), inject, **kw)


STARVE = {"util", "memory", "main", "starve"}
CAUSES: tuple[Cause, ...] = (
    _c("data_pipeline_io", "data_pipeline_io", STARVED, STARVE | {"host_io", "workload_io"},
       data_pipeline_io),
    _c("cpu_contention", "cpu_contention", STARVED, STARVE | {"host_cpu", "workload_cpu"},
       cpu_contention, host=lambda h: h.psi or h.schedstat),
    _c("cpu_limit_throttled", "cpu_limit_throttled", STARVED,
       STARVE | {"host_cpu", "workload_cpu"}, cpu_limit_throttled, tenants=_PODS),
    _c("host_swapping", "host_swapping", STARVED, STARVE | _HOST | {"workload_mem"},
       host_swapping, needs=frozenset({"swap"})),
    _c("memory_limit_reclaim", "memory_limit_reclaim", STARVED,
       STARVE | {"host_mem", "swap", "workload_mem"}, memory_limit_reclaim, tenants=_V2),
    _c("cpu_steal", "cpu_steal", STARVED, STARVE | {"steal", "host_cpu"}, cpu_steal,
       needs=frozenset({"vm"})),
    _c("process_stalled", "process_stalled", (0, 5), STARVE, process_stalled),
    _c("input_starvation", "input_starvation", (20, 70), STARVE | {"burst"}, input_starvation),
    _c("power_cap", "power_cap", (70, 100), {"power", "clocks"}, power_cap,
       boards=_has("power_cap")),
    _c("thermal", "thermal", (50, 100), {"temperature", "clocks"}, thermal),
    _c("fan_stopped", "fan_stopped", (40, 100), {"temperature", "clocks", "fans"}, fan_stopped,
       boards=_has("fans")),
    _c("hw_slowdown", "hw_slowdown", (50, 100), {"clocks"}, hw_slowdown),
    _c("power_brake", "power_brake", (50, 100), {"clocks", "power"}, power_brake),
    _c("application_clocks", "application_clocks", (10, 100), {"app_clocks"},
       application_clocks, boards=_has("app_clocks")),
    _c("link_degraded", "link_degraded", (0, 100), {"pcie"}, link_degraded),
    _c("link_integrity", "link_integrity", (0, 100), {"pcie_errors"}, link_integrity,
       tenants=_WHOLE_GPU),
    # An uncorrectable error on HBM queues its row for remapping: it touches
    # the remap state too (a pending remap beside it is its own, not a second cause).
    _c("ecc_uncorrectable", "ecc_uncorrectable", (0, 100), {"ecc", "remap"}, ecc_uncorrectable,
       boards=_has("ecc"), tenants=_WHOLE_GPU),
    _c("ecc_kills_job", "ecc_uncorrectable", (0, 5),
       {"ecc", "remap", "util", "memory", "main", "xid"},
       ecc_kills_job, boards=_has("ecc"), tenants=_PODS, exclusive=True),
    _c("row_remap_pending", "row_remap_pending", (0, 100), {"remap"}, row_remap_pending,
       boards=_has("hbm"), tenants=_WHOLE_GPU),
    _c("driver_reported", "driver_reported", (0, 100), {"xid"}, driver_reported,
       tenants=_WHOLE_GPU),
    _c("application_fault", "application_fault", (0, 100), {"xid"}, application_fault),
    _c("gpu_lost", "hardware", (0, 100), {"lost"}, gpu_lost, exclusive=True,
       tenants=_WHOLE_GPU),
    _c("oom_risk", "oom_risk", (0, 100), {"memory"}, oom_risk),
    _c("small_kernels", "small_kernels", (90, 100), {"gpm"}, small_kernels,
       boards=_has(_GPM)),
    _c("memory_bound", "dram_bandwidth", (70, 100), {"gpm"}, memory_bound,
       boards=_has(_GPM)),
    _c("persistence_off", "configuration", (0, 100), {"persistence"}, persistence_off,
       tenants=_WHOLE_GPU),
    _c("cpu_affinity", "cpu_affinity", (0, 100), {"affinity"}, cpu_affinity,
       needs=frozenset({"numa"})),
    _c("no_process", "no_process", (0, 5), {"util", "memory", "main"}, no_process,
       tenants=_PODS, exclusive=True),
    _c("gpu_reset", "gpu_reset", (0, 100), {"recovery"}, gpu_reset, tenants=_WHOLE_GPU),
    _c("nvswitch_fabric", "nvswitch_fabric", (0, 100), {"fabric"}, nvswitch_fabric,
       boards=_has("fabric"), tenants=_WHOLE_GPU),
    # The simulated node has an HCA beside each of its first eight GPUs.
    _c("rdma_link_integrity", "rdma_link_integrity", (0, 100), {"rdma"}, rdma_link_integrity,
       tenants=_WHOLE_GPU),
    _c("rdma_port", "rdma_port", (0, 100), {"rdma"}, rdma_port, tenants=_WHOLE_GPU),
    _c("mig_oom_risk", "oom_risk", (0, 100), {"instance"}, mig_oom_risk,
       boards=_has("mig"), tenants=_MIG),
    _c("mig_process_stalled", "process_stalled", (0, 5), {"instance"}, mig_process_stalled,
       boards=lambda b: b.mig and b.gpm, tenants=_MIG),
    _c("mig_no_process", "no_process", (0, 5), {"instance"}, mig_no_process,
       boards=_has("mig"), tenants=_MIG),
    _c("mig_cpu_limit_throttled", "cpu_limit_throttled", STARVED, {"instance"},
       mig_cpu_limit_throttled, boards=lambda b: b.mig and b.gpm, tenants=_MIG),
    _c("mig_application_fault", "application_fault", (0, 100), {"instance", "xid"},
       mig_application_fault, boards=_has("mig"), tenants=_MIG),
)

CONFOUNDERS: tuple[Cause, ...] = (
    _c("hot_full_clocks", None, (60, 100), {"temperature", "clocks"}, hot_full_clocks),
    _c("idle_server", None, (0, 5), STARVE, idle_server),
    _c("neighbour_io", None, (85, 100), {"host_io"}, neighbour_io),
    _c("neighbour_io_own_clean", None, (0, 100), {"host_io"}, neighbour_io, tenants=_V2,
       host=lambda h: h.psi),
    _c("swap_used_idle", None, (0, 100), {"swap"}, swap_used_idle),
    _c("power_at_default", None, (85, 100), {"power", "clocks"}, power_at_default),
    _c("zero_rpm_fans", None, (0, 5), {"fans", "util", "memory", "main", "temperature"},
       zero_rpm_fans, boards=lambda b: b.brand == 5, tenants=frozenset({"bare"})),
    _c("low_steal", None, (0, 100), {"steal"}, low_steal, needs=frozenset({"vm"})),
    _c("memory_near_limit", None, (0, 100), {"workload_mem"}, memory_near_limit, tenants=_V2),
    _c("neighbour_memory_pressure", None, (85, 100), {"host_mem"}, neighbour_memory_pressure),
    _c("short_spike", None, (85, 100), {"spike", "clocks", "host_io"}, short_spike),
    _c("corrected_ecc", None, (0, 100), {"ecc"}, corrected_ecc, boards=_has("ecc")),
    _c("small_throttle", None, (85, 100), {"workload_cpu"}, small_throttle, tenants=_PODS),
    _c("moderate_load", None, (15, 65), STARVE, moderate_load),
    _c("saturated_symbol_errors", None, (0, 100), {"rdma"}, saturated_symbol_errors),
)
BY_NAME = {c.name: c for c in (*CAUSES, *CONFOUNDERS)}
