"""The causes on the GPU itself: power, heat and clocks that hold it back,
its PCIe link, its memory and what the driver reports about it, and how
its work uses it.

A cause that produces another's signals injects them too (a narrowed link
starves its GPU; an uncorrectable ECC error kills the job and leaves its GPU
idle; a stopped fan heats the GPU until the driver slows it): the diagnosis
must report the root alone, with the rest listed under it.
"""

from __future__ import annotations

from typing import Any

from gpu_exporter.simulator.model import DeviceProfile
from scenario_generator.node import NodeBuilder
from scenario_generator.truth import Expected, at_gpu

# Usable GB/s per lane and direction by PCIe generation (after the line
# coding: 8b/10b for Gen1-2, 128b/130b from Gen3); Gen6 is 64 GT/s in FLIT
# mode, 242 payload bytes of each 256 (PCIe 6.0 base specification).
LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# NVIDIA's Xid catalog (gpu_exporter/facts/xids.py holds it as data): codes on the
# hardware or the driver, codes on the application.
HARDWARE_XIDS = (61, 62, 119, 120)
APPLICATION_XIDS = (13, 31, 43)
# The ECC Xids: a double-bit error, a contained and an uncontained one.
ECC_XIDS = (48, 94, 95)


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
    return at_gpu(b, "power_cap")


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
    return at_gpu(b, "thermal")


def fan_stopped(b: NodeBuilder) -> list[Expected]:
    """One of the board's fans stopped (it reads 0 % while the others spin up):
    the busy GPU runs hotter, on a one-fan board until the driver's thermal
    control slows it. The fan is the root; the heat is its consequence."""
    fans: list[dict[str, Any]] = [{} for _ in range(b.board.fans)]
    fans[b.rng.randrange(len(fans))] = {"stopped": True}
    b.tgt.condition["fans"] = fans
    return at_gpu(b, "fan_stopped")


def hw_slowdown(b: NodeBuilder) -> list[Expected]:
    """The hardware slowdown engaged with no named reason (hw_slowdown alone,
    the temperature normal): the power supply's fast trigger or a fault."""
    b.tgt.condition["throttle_reasons"] = ["hw_slowdown"]
    return at_gpu(b, "hw_slowdown")


def power_brake(b: NodeBuilder) -> list[Expected]:
    """The chassis pulls the external power brake (hw_power_brake, which the
    driver reports with hw_slowdown)."""
    b.tgt.condition["throttle_reasons"] = ["hw_slowdown", "hw_power_brake"]
    return at_gpu(b, "power_brake")


def application_clocks(b: NodeBuilder) -> list[Expected]:
    """Someone set the application clocks below the board's default: the GPU
    never boosts past them while it works."""
    default = b.board.clocks_application_mhz.sm
    b.tgt.condition["application_sm_clock_mhz"] = int(default * b.u(0.5, 0.85))
    return at_gpu(b, "application_clocks")


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
    return at_gpu(b, "link_degraded")


def link_integrity(b: NodeBuilder) -> list[Expected]:
    """The link retries: NVML's replay counter or the kernel's AER correctable
    counter rises every few seconds."""
    key = b.rng.choice(["pcie_replays_per_s", "aer_correctable_per_s"])
    b.tgt.condition[key] = round(b.u(0.5, 10.0), 2)
    return at_gpu(b, "link_integrity")


# --- memory and the driver's reports -----------------------------------------------
def ecc_on(board: DeviceProfile) -> bool:
    return board.ecc and "nvmlDeviceGetTotalEccErrors" not in board.unsupported_calls


def hbm(board: DeviceProfile) -> bool:
    # Row remapping: the HBM boards (Ampere and Hopper datacenter GPUs).
    return board.mig


def ecc_uncorrectable(b: NodeBuilder) -> list[Expected]:
    """An uncorrectable ECC error in GPU memory (the volatile count is above
    zero); on an HBM board its row waits for remapping, which the same reset
    does: the pending remap is the error's consequence."""
    b.tgt.condition["ecc_uncorrected_volatile"] = b.rng.randint(1, 5)
    if hbm(b.board) and b.rng.random() < 0.5:
        b.tgt.condition["remap_pending"] = True
    return at_gpu(b, "ecc_uncorrectable")


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
    return at_gpu(b, "ecc_uncorrectable")


def row_remap_pending(b: NodeBuilder) -> list[Expected]:
    """A row waits to be remapped at the next GPU reset."""
    b.tgt.condition["remap_pending"] = True
    return at_gpu(b, "row_remap_pending")


def driver_reported(b: NodeBuilder) -> list[Expected]:
    """The driver reports a hardware or firmware Xid for the GPU."""
    b.at(5.0, xid=[b.rng.choice(HARDWARE_XIDS)])
    return at_gpu(b, "driver_reported")


def application_fault(b: NodeBuilder) -> list[Expected]:
    """The job on the GPU faulted (an illegal address, an engine exception):
    the driver reports an application Xid naming the job's process."""
    main = b.main()
    pid = None if main is None else main["pid"]
    b.at(5.0, xid=[{"code": b.rng.choice(APPLICATION_XIDS), "pid": pid}
                   if pid else b.rng.choice(APPLICATION_XIDS)])
    return at_gpu(b, "application_fault")


def gpu_lost(b: NodeBuilder) -> list[Expected]:
    """The GPU falls off the bus: NVML answers GPU_IS_LOST, the kernel removes
    it, and the driver logs Xid 79 (explained by the loss)."""
    change: dict[str, Any] = {"lost": True}
    if b.rng.random() < 0.5:
        change["xid"] = [79]
    b.at(5.0, **change)
    return at_gpu(b, "hardware")


def oom_risk(b: NodeBuilder) -> list[Expected]:
    """The GPU's memory is all but full (96.5 % or more: an allocator spike
    away from an out-of-memory error)."""
    mem = b.u(0.965, 0.995)
    b.tgt.condition["memory_used_ratio"] = round(mem, 4)
    main = b.main()
    if main is not None:
        main["gpu_memory_ratio"] = round(mem * 0.99, 4)
    return at_gpu(b, "oom_risk")


def small_kernels(b: NodeBuilder) -> list[Expected]:
    """Tiny kernels keep one kernel running all the time while most SMs idle:
    utilization near full (90 % or more), GPM's SM activity low (at most a
    fifth; 20-40 % left out)."""
    b.tgt.condition["sm_active"] = round(b.u(0.05, 0.2), 3)
    return at_gpu(b, "small_kernels")


def memory_bound(b: NodeBuilder) -> list[Expected]:
    """Kernels that stream memory: GPM reads the DRAM bandwidth well used (78 %
    or more; 60-78 % left out) while the SMs work (60 % or more) and the
    tensor pipes mostly wait (a quarter at most)."""
    b.tgt.condition["sm_active"] = round(b.u(0.6, 0.95), 3)
    b.tgt.condition["dram_active"] = round(b.u(0.78, 0.97), 3)
    b.tgt.condition["tensor_active"] = round(b.u(0.0, 0.25), 3)
    return at_gpu(b, "dram_bandwidth")


def persistence_off(b: NodeBuilder) -> list[Expected]:
    b.tgt.condition["persistence_mode"] = False
    return at_gpu(b, "configuration")


def cpu_affinity(b: NodeBuilder) -> list[Expected]:
    """The GPU's process runs on CPUs of another NUMA node than its GPU's: its
    own affinity, or its Slurm job's cpuset on the wrong socket (a job of one
    GPU; a rank of a job of several is bound to its CPUs by srun, and the
    binding is what goes wrong)."""
    main = b.main()
    assert main is not None
    remote = b.remote_cpus(b.target)
    spec = b.container()
    if spec is not None and "job_id" in spec and "cpus_allowed" not in main:
        spec["cpus"] = remote
    else:
        main["cpus_allowed"] = remote
    return at_gpu(b, "cpu_affinity")


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
    return at_gpu(b, "no_process")


def runs_on_cpu(b: NodeBuilder) -> list[Expected]:
    """The kubelet gave the GPU to a pod whose container sees no CUDA (no
    runtime hook, CUDA_VISIBLE_DEVICES emptied), so its framework runs the
    job on the CPU: its process holds no context on any GPU and keeps 2-12
    cores busy, alone or with loader workers; the GPU idles, memory empty."""
    main = _off_gpu(b)
    main.update(state="R", cpu_ratio=round(b.u(2.0, 12.0), 3),
                run_queue_wait_ratio=b.u(0.0, 0.04))
    if b.rng.random() < 0.4:
        _workers(b, main, "R", (0.3, 1.0))
    return at_gpu(b, "runs_on_cpu")


def no_process_cpu_idle(b: NodeBuilder) -> list[Expected]:
    """The kubelet gave the GPU to a pod whose container runs nothing on any
    GPU and waits (a server that never got its model, a shell left open):
    its processes sleep on a few hundredths of a CPU, 0.5 at most in all.
    Nothing computes anywhere: the GPU is unused, not worked around."""
    main = _off_gpu(b)
    main.update(state="S", cpu_ratio=round(b.u(0.0, 0.2), 3), run_queue_wait_ratio=0.0,
                voluntary_ctxt_switches_per_s=b.u(1, 50))
    if b.rng.random() < 0.4:
        _workers(b, main, "S", (0.0, 0.05))
    return at_gpu(b, "no_process")


def _off_gpu(b: NodeBuilder) -> dict[str, Any]:
    """The target's main process, kept in its container with no context on
    any GPU; the GPU idle with its memory empty."""
    main = b.main()
    assert main is not None
    main.update(gpus=[], gpu_memory_ratio=0.0, sm_utilization=0.0)
    b.tgt.pid = None
    b.tgt.condition.update(utilization=0.0, memory_used_ratio=0.0)
    return main


def _workers(b: NodeBuilder, main: dict[str, Any], state: str,
             cpu: tuple[float, float]) -> None:
    """Two to four helpers of ``main`` in its container, on no GPU either."""
    spec = b.container()
    assert spec is not None
    base = main["pid"] * 10 + 1
    n = b.rng.randint(2, 4)
    for k in range(n):
        b.processes[base + k] = {"pid": base + k, "ppid": main["pid"], "comm": "pt_worker",
                                 "gpus": [], "state": state, "cpu_ratio": round(b.u(*cpu), 3)}
    spec["pids"] = [*spec["pids"], *range(base, base + n)]


def gpu_reset(b: NodeBuilder) -> list[Expected]:
    """The driver says the GPU must be reset (its recovery action)."""
    b.at(5.0, recovery_action="gpu_reset")
    return at_gpu(b, "gpu_reset")


def nvswitch_fabric(b: NodeBuilder) -> list[Expected]:
    b.tgt.condition["fabric_health"] = b.rng.choice(["unhealthy", "limited_capacity"])
    return at_gpu(b, "nvswitch_fabric")


def memory_growth(b: NodeBuilder) -> list[Expected]:
    """The GPU's process keeps what it should let go (losses kept with their
    graphs, a cache without bound): its memory climbs steadily from 30-75 %
    of what processes can allocate, at a rate that fills it in 5-30 minutes
    (the minute's climb ends well short of full)."""
    main = b.main()
    assert main is not None
    start = b.u(0.3, 0.75)
    to_full = b.u(300, 1800)
    b.tgt.condition["memory_used_ratio"] = round(start * 0.97, 4)
    main.update(gpu_memory_ratio=round(start, 4),
                gpu_memory_growth_ratio_per_s=round((1 - start) / to_full, 6))
    return at_gpu(b, "memory_growth")
