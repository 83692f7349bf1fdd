"""The classes a case can be drawn from: every cause and confounder with
where it can exist (its load band, boards, tenant shapes and hosts) and what
it sets on the node, so two injections never fight over one value.

What each does to a node is written from what the hardware and the kernel
do, in the modules by where the cause lives: ``host_causes`` (the GPU starved
by its host), ``gpu_causes`` (the GPU itself), ``mig_causes`` (one MIG
instance), ``network_causes`` (its RDMA rail) and ``confounders`` (what looks
like a cause and is not).

Each injector draws its magnitudes clearly inside its cause. The bands it
stays out of are stated where it draws: a case never sits near the edge of a
cause, so a right rule cannot be wrong on it for want of a threshold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpu_exporter.simulator.model import DeviceProfile
from scenario_generator.confounders import (
    corrected_ecc,
    host_memory_one_step,
    hot_full_clocks,
    idle_server,
    low_steal,
    memory_near_limit,
    memory_one_step,
    moderate_load,
    neighbour_io,
    neighbour_memory_pressure,
    power_at_default,
    short_spike,
    small_throttle,
    swap_used_idle,
    zero_rpm_fans,
)
from scenario_generator.gpu_causes import (
    application_clocks,
    application_fault,
    cpu_affinity,
    driver_reported,
    ecc_kills_job,
    ecc_on,
    ecc_uncorrectable,
    fan_stopped,
    gpu_lost,
    gpu_reset,
    hbm,
    hw_slowdown,
    link_degraded,
    link_integrity,
    memory_bound,
    memory_growth,
    no_process,
    no_process_cpu_idle,
    nvswitch_fabric,
    oom_risk,
    persistence_off,
    power_brake,
    power_cap,
    power_cap_fits,
    row_remap_pending,
    runs_on_cpu,
    small_kernels,
    thermal,
)
from scenario_generator.host_causes import (
    STARVED,
    cpu_contention,
    cpu_limit_throttled,
    cpu_steal,
    data_pipeline_io,
    host_cpu_thermal,
    host_memory_growth,
    host_swapping,
    input_starvation,
    io_limit_applied_partway,
    io_limit_far_slow_storage,
    io_limit_throttled,
    memory_limit_reclaim,
    process_stalled,
)
from scenario_generator.job_causes import straggler
from scenario_generator.mig_causes import (
    mig_application_fault,
    mig_cpu_limit_throttled,
    mig_no_process,
    mig_oom_risk,
    mig_process_stalled,
    mig_runs_on_cpu,
)
from scenario_generator.network_causes import (
    rdma_link_integrity,
    rdma_port,
    saturated_symbol_errors,
)
from scenario_generator.node import HostShape, NodeBuilder, Tenant
from scenario_generator.truth import Expected

Inject = Callable[[NodeBuilder], list[Expected]]


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
    # A multi-GPU job's straggler: drawn on a node of two GPUs or more, and
    # only as a case's first cause (it regroups the GPUs' owners into one job).
    job: bool = False


_HOST = frozenset({"host_io", "host_cpu", "host_mem", "swap", "steal"})
# The causes of a whole GPU that need no process on it: on a MIG GPU too,
# where they concern every instance's owner.
_WHOLE_GPU: frozenset[Tenant] = frozenset({"bare", "pod", "slurm-v1", "slurm-v2", "mig"})
_V2: frozenset[Tenant] = frozenset({"pod", "slurm-v2"})
_PODS: frozenset[Tenant] = frozenset({"pod"})
_MIG: frozenset[Tenant] = frozenset({"mig"})
_JOBS: frozenset[Tenant] = frozenset({"pod", "slurm-v1", "slurm-v2"})
_GPM = "gpm"


def _has(key: str) -> Callable[[DeviceProfile], bool]:
    return {"gpm": lambda b: b.gpm, "mig": lambda b: b.mig, "fans": lambda b: b.fans > 0,
            "ecc": ecc_on, "hbm": hbm, "fabric": lambda b: b.fabric,
            "app_clocks": lambda b: "nvmlDeviceGetApplicationsClock" not in b.unsupported_calls,
            "power_cap": power_cap_fits}[key]


def _c(name: str, finding: str | None, loads: tuple[int, int], touches: set[str],
       inject: Inject, **kw: Any) -> Cause:
    return Cause(name, finding, loads, frozenset(touches), inject, **kw)


def _straggler(own: Cause) -> Cause:
    """A job's straggler slowed by ``own``: where ``own`` can be, in a job
    (a pod of a container per rank, or a Slurm job) of two GPUs or more."""
    # Its SM activity too: a second cause setting it (small kernels) would
    # make the slow rank read like one of its waiting peers.
    return Cause(f"straggler_{own.name}", own.finding, own.loads,
                 own.touches | {"job", _GPM},
                 straggler(own.inject), boards=own.boards,
                 tenants=own.tenants & _JOBS, host=own.host, needs=own.needs, job=True)


STARVE = {"util", "memory", "main", "starve"}
# A host cause that concerns every GPU of the node (none may be emptied).
EVERY_GPU = "every_gpu"
# The straggler's own causes: each slows one rank alone.
CPU_LIMIT = _c("cpu_limit_throttled", "cpu_limit_throttled", STARVED,
               STARVE | {"host_cpu", "workload_cpu"}, cpu_limit_throttled, tenants=_PODS)
THERMAL = _c("thermal", "thermal", (50, 100), {"temperature", "clocks"}, thermal)
LINK = _c("link_degraded", "link_degraded", (0, 100), {"pcie"}, link_degraded)
# A pod's rank process alone on the wrong socket (a Slurm job's cpuset is
# every rank's: not one rank's cause).
AFFINITY = _c("cpu_affinity", "cpu_affinity", (0, 100), {"affinity"}, cpu_affinity,
              needs=frozenset({"numa"}), tenants=_PODS)
CAUSES: tuple[Cause, ...] = (
    _c("data_pipeline_io", "data_pipeline_io", STARVED, STARVE | {"host_io", "workload_io"},
       data_pipeline_io),
    _c("cpu_contention", "cpu_contention", STARVED, STARVE | {"host_cpu", "workload_cpu"},
       cpu_contention, host=lambda h: h.psi or h.schedstat),
    CPU_LIMIT,
    _c("host_swapping", "host_swapping", STARVED, STARVE | _HOST | {"workload_mem"},
       host_swapping, needs=frozenset({"swap"})),
    _c("memory_limit_reclaim", "memory_limit_reclaim", STARVED,
       STARVE | {"host_mem", "swap", "workload_mem"}, memory_limit_reclaim, tenants=_V2),
    _c("cpu_steal", "cpu_steal", STARVED, STARVE | {"steal", "host_cpu"}, cpu_steal,
       needs=frozenset({"vm"})),
    # io.max is cgroup v2's: a pod's container or a Slurm job on v2.
    _c("io_limit_throttled", "io_limit_throttled", STARVED,
       STARVE | {"host_io", "workload_io"}, io_limit_throttled, tenants=_V2),
    _c("io_limit_applied_partway", "io_limit_throttled", STARVED,
       STARVE | {"host_io", "workload_io"}, io_limit_applied_partway, tenants=_V2),
    # A look-alike: a limit set and far from reached while the storage is slow.
    _c("io_limit_far_slow_storage", "data_pipeline_io", STARVED,
       STARVE | {"host_io", "workload_io"}, io_limit_far_slow_storage, tenants=_V2),
    _c("process_stalled", "process_stalled", (0, 5), STARVE, process_stalled),
    _c("input_starvation", "input_starvation", (20, 70), STARVE | {"burst"}, input_starvation),
    _c("power_cap", "power_cap", (70, 100), {"power", "clocks"}, power_cap,
       boards=_has("power_cap")),
    THERMAL,
    _c("fan_stopped", "fan_stopped", (40, 100), {"temperature", "clocks", "fans"}, fan_stopped,
       boards=_has("fans")),
    _c("hw_slowdown", "hw_slowdown", (50, 100), {"clocks"}, hw_slowdown),
    _c("power_brake", "power_brake", (50, 100), {"clocks", "power"}, power_brake),
    _c("application_clocks", "application_clocks", (10, 100), {"app_clocks"},
       application_clocks, boards=_has("app_clocks")),
    LINK,
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
    # The pod's container runs its job on the CPU (a MIG instance's below).
    _c("runs_on_cpu", "runs_on_cpu", (0, 5), {"util", "memory", "main"}, runs_on_cpu,
       tenants=_PODS, exclusive=True),
    _c("no_process_cpu_idle", "no_process", (0, 5), {"util", "memory", "main"},
       no_process_cpu_idle, tenants=_PODS, exclusive=True),
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
    _c("mig_runs_on_cpu", "runs_on_cpu", (0, 5), {"instance"}, mig_runs_on_cpu,
       boards=_has("mig"), tenants=_MIG),
    _c("mig_cpu_limit_throttled", "cpu_limit_throttled", STARVED, {"instance"},
       mig_cpu_limit_throttled, boards=lambda b: b.mig and b.gpm, tenants=_MIG),
    _c("mig_application_fault", "application_fault", (0, 100), {"instance", "xid"},
       mig_application_fault, boards=_has("mig"), tenants=_MIG),
    # Where the kernel keeps CPU thermal counters (bare metal: a VM's CPUs
    # keep none). It concerns every GPU holding a job: none may be emptied.
    _c("host_cpu_thermal", "host_cpu_thermal", (0, 100), {"host_heat", EVERY_GPU},
       host_cpu_thermal, tenants=_WHOLE_GPU, host=lambda h: not h.vm),
    # Every job shares the host's memory: it concerns every GPU holding one.
    _c("host_memory_growth", "host_memory_growth", (0, 100), {"host_mem", EVERY_GPU},
       host_memory_growth, tenants=_WHOLE_GPU),
    _c("memory_growth", "memory_growth", (0, 100), {"memory"}, memory_growth),
    *(_straggler(c) for c in (CPU_LIMIT, THERMAL, LINK, AFFINITY)),
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
    _c("host_memory_one_step", None, (0, 100), {"host_mem"}, host_memory_one_step,
       tenants=_WHOLE_GPU),
    _c("memory_one_step", None, (0, 100), {"memory"}, memory_one_step),
)
BY_NAME = {c.name: c for c in (*CAUSES, *CONFOUNDERS)}
