"""One condition per row of the table (``table.ROWS``), registered on the row
object itself right below it (``rule(t.THERMAL)(_thermal)``); an import-time
check makes sure every row has exactly one. Registered by a call rather than
as a decorator because mutmut leaves decorated functions unmutated, and every
condition here is held to its tests by ``./scripts/mutation.sh``
(docs/mutation.md).

Rules judge one row each, independently; which of several holding rows is the
root cause and which are its consequences is decided afterwards from
``precedence.py``.

A rule answers True (the row's condition holds now), False, or None (it cannot
judge: the signal it needs is missing). Rules never judge what they cannot
see (no GPM, no ``utilization_inflated``), and each follows the principles of
docs/diagnosis.md: a cause judged at every load it can exist at (an idle GPU's
lower PCIe generation is its own choice, its narrower width never is; an idle
GPU far under its power limit is not "power capped"), the workload's own
evidence before the host's, process states read for what they mean, and a
cause only on its own signal. Each returns the evidence it based the answer
on, keyed by name with the unit as suffix, in base units.
"""

from __future__ import annotations

from collections.abc import Callable

# The rules of what the exporter remembers, of the Xids and of the NVLink
# links register from their own modules.
from gpu_exporter.diagnosis import (
    allocation_rules,  # noqa: F401
    fault_rules,  # noqa: F401
    link_rules,  # noqa: F401
    network_rules,  # noqa: F401
    workload_rules,  # noqa: F401
    xid_rules,  # noqa: F401
)
from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.registry import RULES as RULES
from gpu_exporter.diagnosis.registry import Evidence as Evidence
from gpu_exporter.diagnosis.registry import HostRead, rule
from gpu_exporter.diagnosis.registry import Rule as Rule
from gpu_exporter.diagnosis.registry import Trend as Trend
from gpu_exporter.diagnosis.registry import Verdict as Verdict
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.poll.readings import ProcessReading
from gpu_exporter.settings.thresholds import DiagnosisConfig

# NVML's reason bits (nvmlClocksEventReasons): hw_thermal and sw_thermal name
# heat; hw_power_brake names the external brake; hw_slowdown is the umbrella
# the driver sets for heat, the brake and its fast-trigger power protection
# alike, so on its own it names none of them.
THERMAL_REASONS = frozenset({"hw_thermal", "sw_thermal"})
SPECIFIC_SLOWDOWN_REASONS = THERMAL_REASONS | {"hw_power_brake"}



def _has_work(s: GpuSignals) -> tuple[bool | None, Evidence]:
    """Whether the GPU has work: NVML's own gpu_idle reason says it has none;
    where NVML gives no reasons, a utilization above zero says it has some.

    Never its power draw: power smoothing (Blackwell) holds an idle GPU's draw
    up to its floor, so a draw there says nothing of work. The rows that read
    draw (the power cap) count only what is above the floor."""
    reasons, util = s.gpu.throttle_reasons, s.gpu.utilization
    ev: Evidence = {} if util is None else {"gpu_utilization_ratio": util}
    if reasons is not None:
        return "gpu_idle" not in reasons, ev
    return (None if util is None else util > 0.0), ev


def _job(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    """Whether a job holds the place: a process has a context on it; where the
    processes cannot be read (or hide in another PID namespace), its memory
    says so."""
    used = s.memory_used_ratio
    ev: Evidence = {} if used is None else {"gpu_memory_used_ratio": round(used, 3)}
    if s.processes:
        return True, ev
    if used is None:
        return None, ev
    return used > cfg.memory_held_ratio, ev


def _starved(s: GpuSignals, cfg: DiagnosisConfig,
             below: float) -> tuple[bool | None, Evidence]:
    """A job holds the place and keeps it busy less than ``below`` of the time.
    The only load gate of the host-side causes, and physics asks for it: a GPU
    kept busy is not waiting on its host."""
    held, ev = _job(s, cfg)
    load = s.load
    if load is not None:
        ev["gpu_utilization_ratio" if s.gpu_instance is None else "mig_sm_active_ratio"] = load
    if held is None or load is None:
        return None, ev
    return held and load < below, ev


def _held_idle(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    return _starved(s, cfg, cfg.idle_utilization)


def _held_underfed(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    """Below busy; idle counts too, so a GPU whose utilization jitters around
    the idle threshold stays judged: when the idle row for the same cause is
    on, it restates this one (precedence.py)."""
    return _starved(s, cfg, cfg.busy_utilization)


def _own(s: GpuSignals, signal: str) -> float | None:
    """The highest of ``signal`` among the place's workloads that have it (their
    own cgroup's), or None when none does: then the host's counters judge."""
    values = [v for w in s.workloads if (v := getattr(w, signal)) is not None]
    return max(values) if values else None


def _blocked(s: GpuSignals) -> list[ProcessReading]:
    """The place's processes blocked in the kernel (D), waiting on I/O, or
    asleep waiting for loader workers (the children they forked) of which at
    least half are blocked in D: what feeds the GPU waits on its reads."""
    return [p for p in s.processes if p.state == "D" or (
        p.state == "S" and p.children and p.children_blocked
        and 2 * p.children_blocked >= p.children)]


def _io_bound(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    # The workload's own evidence first: its cgroup's I/O pressure (one job
    # starving on its reads raises little host-wide on a large node, and a
    # neighbour's reads must not be blamed on this GPU), then its process
    # blocked in D; the host's counters only where neither is read.
    h = s.host
    own = _own(s, "io_pressure_some")
    blocked = _blocked(s)
    ev: Evidence = {}
    if own is not None:
        ev["workload_io_pressure_some_ratio"] = round(own, 3)
    if blocked:
        first = blocked[0]
        ev.update({"process_pid": str(first.pid), "process_state": first.state or "?"})
        if first.children_blocked:
            ev["process_workers_blocked"] = f"{first.children_blocked} of {first.children}"
    if h is not None and h.iowait_ratio is not None:
        ev["host_cpu_iowait_ratio"] = round(h.iowait_ratio, 3)
    if h is not None and h.io_pressure_some is not None:
        ev["host_io_pressure_some_ratio"] = round(h.io_pressure_some, 3)
    if own is not None:
        return own >= cfg.io_pressure_high, ev
    if blocked:
        return True, ev
    if h is None or (h.iowait_ratio is None and h.io_pressure_some is None):
        return None, ev
    hit = False
    if h.iowait_ratio is not None:
        hit = h.iowait_ratio >= cfg.iowait_high
    if h.io_pressure_some is not None:
        hit |= h.io_pressure_some >= cfg.io_pressure_high
    return hit, ev


def _cpu_starved(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    h = s.host
    waits = [p.run_queue_wait_ratio for p in s.processes if p.run_queue_wait_ratio is not None]
    own = _own(s, "cpu_pressure_some")
    host = None if h is None else h.cpu_pressure_some
    ev: Evidence = {}
    if own is not None:
        ev["workload_cpu_pressure_some_ratio"] = round(own, 3)
    if waits:
        ev["process_run_queue_wait_seconds_per_second"] = round(max(waits), 3)
    if host is not None:
        ev["host_cpu_pressure_some_ratio"] = round(host, 3)
    # The job's own measures, each where the kernel keeps it, must all agree:
    # its process waiting on the run queue, its cgroup stalling on CPU. Only
    # where neither is read does the host's CPU pressure speak for it.
    if waits or own is not None:
        return ((not waits or max(waits) >= cfg.run_queue_wait_high)
                and (own is None or own >= cfg.cpu_pressure_high)), ev
    if host is None:
        return None, ev
    return host >= cfg.cpu_pressure_high, ev


def _swapping(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    h = s.host
    swap = None if h is None else h.swap_bytes_per_s
    if swap is None:
        return None, {}  # no swap counters: swapping cannot be told
    ev: Evidence = {"host_swap_bytes_per_second": round(swap)}
    own_full, own_some = _own(s, "memory_pressure_full"), _own(s, "memory_pressure_some")
    if own_full is not None:
        ev["workload_memory_pressure_full_ratio"] = round(own_full, 3)
    if own_some is not None:
        ev["workload_memory_pressure_some_ratio"] = round(own_some, 3)
    if h is not None and h.memory_pressure_full is not None:
        ev["host_memory_pressure_full_ratio"] = round(h.memory_pressure_full, 3)
    # Swapping needs swap traffic; memory pressure without it is not swapping.
    # Where the job's own memory stall is read and shows none, the host's
    # swapping is not what holds this job back.
    unaffected = own_some is not None and own_some <= cfg.memory_pressure_full
    return swap >= cfg.swap_bytes_per_s and not unaffected, ev


def _memory_limited(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    read = [w for w in s.workloads if w.memory_used_bytes is not None]
    limited = [w for w in read if w.memory_limit_bytes is not None]
    if not limited:
        # memory.max "max": no limit of its own to reclaim at (reclaim for the
        # host's want of memory is the swapping rows').
        return (False if read else None), {}
    w = max(limited, key=lambda w: (w.memory_used_bytes or 0) / (w.memory_limit_bytes or 1))
    used, limit = w.memory_used_bytes or 0.0, w.memory_limit_bytes or 1.0
    hits, reclaimed = w.memory_limit_hits_per_s, w.memory_reclaimed_bytes_per_s
    ev: Evidence = {"workload_memory_used_bytes": used, "workload_memory_limit_bytes": limit}
    if hits is not None:
        ev["workload_memory_limit_hits_per_second"] = round(hits, 2)
    if reclaimed is not None:
        ev["workload_memory_reclaimed_bytes_per_second"] = round(reclaimed)
    if w.memory_pressure_some is not None:
        ev["workload_memory_pressure_some_ratio"] = round(w.memory_pressure_some, 3)
    if hits is None and reclaimed is None:
        return None, ev  # the first read: no rates yet
    at_limit = used >= cfg.memory_limit_used_ratio * limit
    return at_limit and ((hits or 0.0) > 0 or (reclaimed or 0.0) >= cfg.reclaim_bytes_per_s), ev


def _stolen(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    steal = None if s.host is None else s.host.steal_ratio
    if steal is None:
        return None, {}
    return steal >= cfg.steal_high, {"host_cpu_steal_ratio": round(steal, 3)}


def _limit_throttled(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    limited = [w for w in s.workloads
               if w.cpu_limit_cores is not None and w.cpu_throttled_ratio is not None]
    if not limited:
        return None, {}
    worst = max(limited, key=lambda w: w.cpu_throttled_ratio or 0.0)
    throttled = worst.cpu_throttled_ratio or 0.0
    ev: Evidence = {"workload_cpu_throttled_ratio": round(throttled, 3),
                    "workload_cpu_limit_cores": round(worst.cpu_limit_cores or 0.0, 3)}
    if s.host is not None and s.host.cpu_pressure_some is not None:
        ev["host_cpu_pressure_some_ratio"] = round(s.host.cpu_pressure_some, 3)
    # The workload's own throttling is its own evidence: it names the limit
    # whatever the host's CPU pressure (a host short of CPUs as well is
    # contention on top, judged by its own row).
    return throttled >= cfg.cpu_throttled_high, ev


def _io_limited(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    read = [w for w in s.workloads if w.io_limited is not None]
    if not read:
        return None, {}  # io.max not read: coverage says why
    measured = [w for w in read if w.io_limited and w.io_limit_used_ratio is not None]
    if not measured:
        # No limit (io.max "max" everywhere): the storage rows judge its reads.
        return (None if any(w.io_limited for w in read) else False), {}
    w = max(measured, key=lambda w: w.io_limit_used_ratio or 0.0)
    used, own = w.io_limit_used_ratio or 0.0, w.io_pressure_some
    ev: Evidence = {"workload_io_limit_used_ratio": round(used, 3),
                    "workload_io_limit_device": w.io_limit_device or ""}
    if own is not None:
        ev["workload_io_pressure_some_ratio"] = round(own, 3)
    # The limit it hit is the cause, as a CPU limit is of CPU waits: storage
    # that serves others faster is not what holds this job back.
    return used >= cfg.io_limit_used_ratio and (own is None or own >= cfg.io_pressure_high), ev


def _with(base: tuple[bool | None, Evidence],
          cause: tuple[bool | None, Evidence]) -> Verdict:
    held, ev = base
    hit, cause_ev = cause
    if held is None:
        return Verdict(None)
    if not held:
        return Verdict(False, ev)
    return Verdict(hit, {**ev, **cause_ev})


_Cause = Callable[[GpuSignals, DiagnosisConfig], tuple[bool | None, Evidence]]


def _starved_rules(idle: Row, underfed: Row, cause: _Cause) -> None:
    """Register the two rows of a host-side cause of a starved GPU."""
    def at_idle(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
        return _with(_held_idle(s, cfg), cause(s, cfg))

    def below_busy(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
        return _with(_held_underfed(s, cfg), cause(s, cfg))

    at_idle.__name__ = at_idle.__qualname__ = f"_idle_{idle.cause}"
    below_busy.__name__ = below_busy.__qualname__ = f"_underfed_{underfed.cause}"
    rule(idle, reads_host=_job_holds)(at_idle)
    rule(underfed, reads_host=_job_holds)(below_busy)


def _job_is_on(s: GpuSignals, cfg: DiagnosisConfig) -> bool:
    return _job(s, cfg)[0] is True


# What the rows of a starved GPU read of the host: all of it, only where a job
# holds the place (``_with`` judges the cause only then).
_job_holds = HostRead(when=_job_is_on)


_starved_rules(t.IDLE_DATA_PIPELINE_IO, t.UNDERFED_DATA_PIPELINE_IO, _io_bound)
_starved_rules(t.IDLE_CPU_CONTENTION, t.UNDERFED_CPU_CONTENTION, _cpu_starved)
_starved_rules(t.IDLE_HOST_SWAPPING, t.UNDERFED_HOST_SWAPPING, _swapping)
_starved_rules(t.IDLE_CPU_LIMIT_THROTTLED, t.UNDERFED_CPU_LIMIT_THROTTLED, _limit_throttled)
_starved_rules(t.IDLE_MEMORY_LIMIT_RECLAIM, t.UNDERFED_MEMORY_LIMIT_RECLAIM, _memory_limited)
_starved_rules(t.IDLE_CPU_STEAL, t.UNDERFED_CPU_STEAL, _stolen)
_starved_rules(t.IDLE_IO_LIMIT_THROTTLED, t.UNDERFED_IO_LIMIT_THROTTLED, _io_limited)


def _process_stalled(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    # Read for what the states mean: S is asleep until an event, and one that
    # never wakes waits for something that does not come; D is blocked in the
    # kernel on I/O (the storage rows); a process that wakes often with a
    # little CPU waits for work (an idle server). A host-side cause holding at
    # the same time explains the stall instead (precedence.py).
    held, ev = _held_idle(s, cfg)
    if held is None or not s.processes_known:
        return Verdict(None)
    if not held:
        return Verdict(False, ev)
    procs = [p for p in s.processes if p.cpu_ratio is not None]
    if not procs:
        return Verdict(None, ev)
    top = max(procs, key=lambda p: p.memory_used_bytes or 0)
    ev.update({"process_pid": str(top.pid), "process_comm": top.comm,
               "process_state": top.state or "?",
               "process_cpu_ratio": round(top.cpu_ratio or 0.0, 3)})
    if top.wakeups_per_s is not None:
        ev["process_wakeups_per_second"] = round(top.wakeups_per_s, 2)
    if any(p.wakeups_per_s is None for p in procs):
        return Verdict(None, ev)  # the first read of a process: no rate yet
    stuck = all(p.state == "S" and (p.cpu_ratio or 0.0) < cfg.stalled_cpu_ratio
                and (p.wakeups_per_s or 0.0) < cfg.stalled_wakeups_per_s for p in procs)
    return Verdict(stuck, ev)


rule(t.IDLE_PROCESS_STALLED)(_process_stalled)


def _bursty(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    if s.util_samples is None:
        return Verdict(None)
    low, mean, high = s.util_samples
    ev: Evidence = {"utilization_samples_min_ratio": low, "utilization_samples_mean_ratio":
                    round(mean, 3), "utilization_samples_max_ratio": high}
    return Verdict(low <= cfg.burst_low and high >= cfg.burst_high, ev)


rule(t.BURSTY_INPUT)(_bursty)


def _sm_below_max(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    cur, top = s.gpu.clocks_hz.get("sm"), s.gpu.clocks_max_hz.get("sm")
    if cur is None or not top:
        return None, {}
    return cur < cfg.clock_below_max_ratio * top, {"sm_clock_hertz": cur,
                                                   "sm_clock_max_hertz": top}


def _power_cap(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    reasons = s.gpu.throttle_reasons
    if reasons is None:
        return Verdict(None)
    below, ev = _sm_below_max(s, cfg)
    ev["sw_power_cap_active"] = "yes" if "sw_power_cap" in reasons else "no"
    limit, draw = s.gpu.power_limit_watts, s.gpu.power_watts
    if limit is not None:
        ev["power_limit_watts"] = limit
    if s.gpu.power_default_limit_watts is not None:
        ev["power_default_limit_watts"] = s.gpu.power_default_limit_watts
    if draw is not None:
        ev["power_watts"] = round(draw, 1)
    # A busy GPU at its board's default limit drawing its rated power is
    # working as designed: a real H100 under dense tensor work sits at its
    # 700 W default with sw_power_cap on nearly all the time. Only a limit
    # below the default (set by an administrator, or out of band by the rack's
    # power policy: the enforced limit includes both) is a cause to act on.
    # Where the default is unknown, the cap alone decides, as before. The cap
    # binds where the GPU draws its limit, whatever its utilization; an idle
    # GPU far under its limit with the bit still set is not held back.
    lowered = _limit_lowered(s)
    ev["power_limit_lowered"] = {True: "yes", False: "no", None: "unknown"}[lowered]
    # Draw up to power smoothing's floor is the smoothing's, not work at the limit.
    floor = s.gpu.power_floor_watts if s.gpu.power_smoothing else None
    if floor is not None:
        ev["power_floor_watts"] = floor
    binding = (draw is None or limit is None or draw >= cfg.power_cap_draw_ratio * limit
               ) and (floor is None or draw is None or draw > floor)
    return Verdict(bool("sw_power_cap" in reasons and below and lowered is not False
                        and binding), ev)


rule(t.POWER_CAP)(_power_cap)


def _limit_lowered(s: GpuSignals) -> bool | None:
    limit, default = s.gpu.power_limit_watts, s.gpu.power_default_limit_watts
    if limit is None or not default:
        return None
    return limit < default - 1.0  # NVML reports milliwatts: a watt of slack


def _near_slowdown(s: GpuSignals, cfg: DiagnosisConfig) -> bool:
    temp, slowdown = s.gpu.temperature_celsius, s.gpu.slowdown_celsius
    return temp is not None and slowdown is not None and \
        temp >= slowdown - cfg.thermal_margin_celsius


def _temperature_evidence(s: GpuSignals, ev: Evidence) -> Evidence:
    if s.gpu.temperature_celsius is not None:
        ev["temperature_celsius"] = s.gpu.temperature_celsius
    if s.gpu.slowdown_celsius is not None:
        ev["slowdown_threshold_celsius"] = s.gpu.slowdown_celsius
    return ev


def _thermal(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    working, ev = _has_work(s)
    reasons = s.gpu.throttle_reasons
    temp, slowdown = s.gpu.temperature_celsius, s.gpu.slowdown_celsius
    if working is None or (reasons is None and (temp is None or slowdown is None)):
        return Verdict(None)
    active = sorted((reasons or frozenset()) & THERMAL_REASONS)
    below, clock_ev = _sm_below_max(s, cfg)
    ev = _temperature_evidence(s, {**ev, **clock_ev,
                                   "thermal_reasons_active": ", ".join(active) or "none"})
    # Heat needs its own signal: a thermal reason, or a temperature at the
    # slowdown margin with the clocks actually down (or no reasons to read).
    # A hot GPU at full clocks is not slowed.
    hot = _near_slowdown(s, cfg) and (reasons is None or below is True)
    return Verdict(bool(working and (active or hot)), ev)


rule(t.THERMAL)(_thermal)


def _fan_stopped(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    fans = s.gpu.fan_speeds
    if not fans:
        return Verdict(None)  # no fan read (fan_count 0: cooled by the chassis)
    ev: Evidence = {f"fan_{k}_speed_ratio": round(v, 3) for k, v in sorted(fans.items())}
    ev = _temperature_evidence(s, ev)
    stopped = [k for k, v in fans.items() if v <= cfg.fan_stopped_ratio]
    spinning = [k for k, v in fans.items() if v >= cfg.fan_spinning_ratio]
    temp, slowdown = s.gpu.temperature_celsius, s.gpu.slowdown_celsius
    warm = temp is not None and slowdown is not None and \
        temp >= slowdown - cfg.fan_warm_margin_celsius
    return Verdict(bool(stopped and (spinning or warm)), ev)


rule(t.FAN_STOPPED)(_fan_stopped)


def _hw_slowdown(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    working, ev = _has_work(s)
    reasons = s.gpu.throttle_reasons
    if working is None or reasons is None:
        return Verdict(None)
    _below, clock_ev = _sm_below_max(s, cfg)
    ev = _temperature_evidence(s, {**ev, **clock_ev,
                                   "hw_slowdown_active": "yes" if "hw_slowdown" in reasons
                                   else "no"})
    if s.gpu.power_watts is not None:
        ev["power_watts"] = round(s.gpu.power_watts, 1)
    if s.gpu.power_limit_watts is not None:
        ev["power_limit_watts"] = s.gpu.power_limit_watts
    # Judged on the bit alone; when a specific bit or the temperature names
    # the reason, that row (thermal, power_brake) explains this one.
    return Verdict(bool(working and "hw_slowdown" in reasons), ev)


rule(t.HW_SLOWDOWN)(_hw_slowdown)


def _power_brake(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    working, ev = _has_work(s)
    reasons = s.gpu.throttle_reasons
    if working is None or reasons is None:
        return Verdict(None)
    _below, clock_ev = _sm_below_max(s, cfg)
    ev.update(clock_ev)
    ev["hw_power_brake_active"] = "yes" if "hw_power_brake" in reasons else "no"
    return Verdict(bool(working and "hw_power_brake" in reasons), ev)


rule(t.POWER_BRAKE)(_power_brake)


def _app_clocks(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    working, ev = _has_work(s)
    app = s.gpu.clocks_application_hz.get("sm")
    default = s.gpu.clocks_application_default_hz.get("sm")
    if working is None or app is None or not default:
        return Verdict(None)
    ev.update({"application_sm_clock_hertz": app,
               "default_application_sm_clock_hertz": default})
    top = s.gpu.clocks_max_hz.get("sm")
    if top:
        ev["sm_clock_max_hertz"] = top
    # GPU Boost runs above the default application clock; only a lower setting
    # caps it, and it caps whatever work the GPU has.
    return Verdict(working and app < cfg.clock_below_max_ratio * default, ev)


rule(t.APPLICATION_CLOCKS)(_app_clocks)


def _downtrained(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    working, ev = _has_work(s)
    g = s.gpu
    width, width_max = g.pcie_width, g.pcie_width_max
    gen, gen_max = g.pcie_generation, g.pcie_generation_max
    if width is None or width_max is None or gen is None or gen_max is None:
        return Verdict(None)
    ev.update({"pcie_link_width": width, "pcie_link_width_max": width_max,
               "pcie_link_generation": gen, "pcie_link_generation_max": gen_max})
    narrow = width < width_max
    slow = gen < gen_max
    up = s.pcie
    if up is not None and up.upstream_width is not None and up.upstream_width_max is not None:
        ev["upstream_link_width"] = up.upstream_width
        ev["upstream_link_width_max"] = up.upstream_width_max
        narrow |= up.upstream_width < up.upstream_width_max
    if (up is not None and up.upstream_generation is not None
            and up.upstream_generation_max is not None):
        ev["upstream_link_generation"] = up.upstream_generation
        ev["upstream_link_generation_max"] = up.upstream_generation_max
        slow |= up.upstream_generation < up.upstream_generation_max
    # A width is never lowered to save power: narrower than it can be is a
    # fault at any load. An idle GPU lowers its generation on purpose: a lower
    # generation is judged while the GPU has work.
    return Verdict(narrow or bool(slow and working), ev)


rule(t.PCIE_DOWNTRAINED)(_downtrained)


def _pcie_errors(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    replays = trend.increase("pcie_replays", s.gpu.pcie_replays)
    aer = trend.increase("aer_correctable", s.pcie.aer_correctable if s.pcie else None)
    if replays is None and aer is None:
        return Verdict(None)
    ev: Evidence = {}
    if replays is not None:
        ev["pcie_replays_in_window"] = replays
    if aer is not None:
        ev["aer_correctable_errors_in_window"] = aer
    return Verdict(max(replays or 0.0, aer or 0.0) >= cfg.pcie_errors_per_window, ev)


rule(t.PCIE_ERRORS)(_pcie_errors)


def _ecc(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    unc, failed = s.gpu.ecc_uncorrected_volatile, s.gpu.remap_failed
    if unc is None and failed is None:
        return Verdict(None)
    ev: Evidence = {}
    if unc is not None:
        ev["ecc_uncorrected_volatile_errors"] = unc
    if failed is not None:
        ev["row_remap_failed"] = "yes" if failed else "no"
    # Memory no repair can fix (Blackwell, R590): the same verdict as a failed remap.
    if s.gpu.unrepairable_memory:
        ev["unrepairable_memory"] = "yes"
    return Verdict(bool((unc or 0) > 0 or failed or s.gpu.unrepairable_memory), ev)


rule(t.ECC_UNCORRECTABLE)(_ecc)


def _remap_pending(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    # A memory channel or TPC repair pending (Blackwell, R580) asks for the same reset.
    pending, repair = s.gpu.remap_pending, s.gpu.repair_pending
    if pending is None and repair is None:
        return Verdict(None)
    ev: Evidence = {"row_remap_pending": "yes" if pending else "no"}
    if repair:
        ev["repair_pending"] = "yes"
    return Verdict(bool(pending or repair), ev)


rule(t.ROW_REMAP_PENDING)(_remap_pending)


def _lost(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    return Verdict(not s.gpu.up, {"gpu_up": 1 if s.gpu.up else 0})


rule(t.GPU_LOST)(_lost)


def _recovery_rule(action: str) -> Callable[[GpuSignals, DiagnosisConfig, Trend], Verdict]:
    """The rule of one recovery action: the driver names it for the GPU now."""
    def judge(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
        said = s.gpu.recovery_action
        if said is None:
            return Verdict(None)  # a driver before R565 does not say
        return Verdict(said == action, {"recovery_action": said})
    judge.__name__ = judge.__qualname__ = f"_recovery_{action}"
    return judge


rule(t.RECOVERY_GPU_RESET)(_recovery_rule("gpu_reset"))
rule(t.RECOVERY_NODE_REBOOT)(_recovery_rule("node_reboot"))
rule(t.RECOVERY_DRAIN_P2P)(_recovery_rule("drain_p2p"))
rule(t.RECOVERY_DRAIN_AND_RESET)(_recovery_rule("drain_and_reset"))

# The probe's answers that mean the GPU is out of (or short in) the fabric.
_FABRIC_UNHEALTHY = frozenset({"unhealthy", "limited_capacity"})


def _fabric(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    g = s.gpu
    if g.fabric_state is None:
        return Verdict(None)  # no NVSwitch fabric, or a driver before R550
    ev: Evidence = {"fabric_state": g.fabric_state, "fabric_status": g.fabric_status or ""}
    if g.fabric_health is not None:
        ev["fabric_health"] = g.fabric_health
    degraded = (g.fabric_state != "completed" or g.fabric_status != "SUCCESS"
                or g.fabric_health in _FABRIC_UNHEALTHY)
    return Verdict(degraded, ev)


rule(t.FABRIC_DEGRADED)(_fabric)


def _near_full(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    # A MIG instance fills up on its own: its memory is its own.
    used = s.memory_used_ratio
    if used is None:
        return Verdict(None)
    return Verdict(used > cfg.memory_near_full_ratio, {"gpu_memory_used_ratio": round(used, 4)})


rule(t.MEMORY_NEAR_FULL)(_near_full)


def _inflated(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    util, active = s.gpu.utilization, s.sm_active
    if util is None or active is None:
        return Verdict(None)  # no GPM, no judgement
    return Verdict(util > cfg.inflated_utilization and active < cfg.inflated_sm_active,
                   {"gpu_utilization_ratio": util, "sm_active_ratio": round(active, 3)})


rule(t.UTILIZATION_INFLATED)(_inflated)


def _persistence(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    mode = s.gpu.persistence_mode
    if mode is None or not cfg.expect_persistence:
        return Verdict(None)
    return Verdict(not mode, {"persistence_mode": "on" if mode else "off"})


rule(t.PERSISTENCE_OFF)(_persistence)


def _numa(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    known = [p for p in s.processes if p.affinity_local is not None]
    if not known:
        return Verdict(None)
    bad = [p for p in known if not p.affinity_local]
    ev: Evidence = {}
    if s.pcie is not None and s.pcie.local_cpulist:
        ev["gpu_local_cpus"] = s.pcie.local_cpulist
    if bad:
        ev.update({"process_pid": str(bad[0].pid), "process_comm": bad[0].comm,
                   "process_cpus_allowed": bad[0].cpus_allowed or "?"})
    return Verdict(bool(bad), ev)


rule(t.NUMA_MISPLACED)(_numa)


def _check_every_row_has_a_rule() -> None:
    missing = [r.key for r in ROWS if r not in RULES]
    if missing:
        raise ImportError("diagnosis rows without a rule: " + ", ".join(missing))


_check_every_row_has_a_rule()
