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
see: no GPM, no ``utilization_inflated``; an idle GPU's PCIe link is never
"downtrained"; an idle GPU is never "power capped". Each returns the evidence
it based the answer on, keyed by name with the unit as suffix, in base units.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.thresholds import DiagnosisConfig
from gpu_exporter.xids import XidTier

Evidence = dict[str, float | str]
# NVML's reason bits (nvmlClocksEventReasons): hw_thermal and sw_thermal name
# heat; hw_power_brake names the external brake; hw_slowdown is the umbrella
# the driver sets for heat, the brake and its fast-trigger power protection
# alike, so on its own it names none of them.
THERMAL_REASONS = frozenset({"hw_thermal", "sw_thermal"})
SPECIFIC_SLOWDOWN_REASONS = THERMAL_REASONS | {"hw_power_brake"}


@dataclass
class Verdict:
    holds: bool | None
    evidence: Evidence = field(default_factory=dict)


class Trend:
    """What a rule needs beyond one poll: counter increases over the window and
    the current time, supplied by the engine."""

    def __init__(self, increase: Callable[[str, float | None], float | None],
                 now: float) -> None:
        self.increase = increase
        self.now = now  # unix time


Rule = Callable[[GpuSignals, DiagnosisConfig, Trend], Verdict]
RULES: dict[Row, Rule] = {}


def rule(row: Row) -> Callable[[Rule], Rule]:
    """Register ``fn`` as the condition of ``row`` (one per row)."""
    if row not in ROWS:
        raise ImportError(f"rule for {row.key}, which is not in the diagnosis table")

    def register(fn: Rule) -> Rule:
        if row in RULES:
            raise ImportError(f"two rules for {row.key}: {RULES[row].__name__}, {fn.__name__}")
        RULES[row] = fn
        return fn

    return register


def _busy(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool, float] | None:
    """Whether the GPU is busy, and its utilization; None when NVML did not say."""
    u = s.gpu.utilization
    return None if u is None else (u >= cfg.busy_utilization, u)


def _held_below(s: GpuSignals, cfg: DiagnosisConfig,
                below: float) -> tuple[bool | None, Evidence]:
    """GPU memory held, GPU utilization under ``below``."""
    used, util = s.memory_used_ratio, s.gpu.utilization
    if used is None or util is None:
        return None, {}
    ev: Evidence = {"gpu_memory_used_ratio": round(used, 3), "gpu_utilization_ratio": util}
    return used > cfg.memory_held_ratio and util < below, ev


def _held_idle(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    """GPU memory held, GPU doing almost nothing."""
    return _held_below(s, cfg, cfg.idle_utilization)


def _held_underfed(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    """GPU memory held, GPU below busy. Idle counts too, so a GPU whose
    utilization jitters around the idle threshold stays judged; when the idle
    row for the same cause is on, it explains this one (precedence.py)."""
    return _held_below(s, cfg, cfg.busy_utilization)


def _own(s: GpuSignals, signal: str) -> float | None:
    """The highest of ``signal`` among the GPU's workloads that have it (their
    own cgroup's), or None when none does: then the host's counters judge."""
    values = [v for w in s.workloads if (v := getattr(w, signal)) is not None]
    return max(values) if values else None


def _io_bound(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    # The workload's own I/O pressure, where it has one, judges: one job
    # starving on its reads raises little host-wide on a large node, and a
    # neighbour's reads must not be blamed on this GPU.
    h = s.host
    own = _own(s, "io_pressure_some")
    ev: Evidence = {}
    if own is not None:
        ev["workload_io_pressure_some_ratio"] = round(own, 3)
    if h is not None and h.iowait_ratio is not None:
        ev["host_cpu_iowait_ratio"] = round(h.iowait_ratio, 3)
    if h is not None and h.io_pressure_some is not None:
        ev["host_io_pressure_some_ratio"] = round(h.io_pressure_some, 3)
    if own is not None:
        return own >= cfg.io_pressure_high, ev
    if h is None or (h.iowait_ratio is None and h.io_pressure_some is None):
        return None, {}
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
    pressure = own if own is not None else None if h is None else h.cpu_pressure_some
    if pressure is None and not waits:
        return None, {}
    ev: Evidence = {}
    if own is not None:
        ev["workload_cpu_pressure_some_ratio"] = round(own, 3)
    elif pressure is not None:
        ev["host_cpu_pressure_some_ratio"] = round(pressure, 3)
    if waits:
        ev["process_run_queue_wait_seconds_per_second"] = round(max(waits), 3)
    # Each measure that the kernel offers must agree: CPU pressure (the
    # workload's own where known, else the host's) where it has PSI, and where
    # it keeps schedstat the GPU's own process must be waiting.
    pressure_hit = pressure >= cfg.cpu_pressure_high if pressure is not None else True
    wait_hit = max(waits) >= cfg.run_queue_wait_high if waits else True
    return pressure_hit and wait_hit, ev


def _swapping(s: GpuSignals, cfg: DiagnosisConfig) -> tuple[bool | None, Evidence]:
    h = s.host
    own = _own(s, "memory_pressure_full")
    full = own if own is not None else None if h is None else h.memory_pressure_full
    swap = None if h is None else h.swap_bytes_per_s
    if swap is None and full is None:
        return None, {}
    ev: Evidence = {}
    hit = False
    if swap is not None:
        ev["host_swap_bytes_per_second"] = round(swap)
        hit = swap >= cfg.swap_bytes_per_s
    if full is not None:
        key = "workload" if own is not None else "host"
        ev[f"{key}_memory_pressure_full_ratio"] = round(full, 3)
        hit |= full > cfg.memory_pressure_full
    return hit, ev


def _with(base: tuple[bool | None, Evidence],
          cause: tuple[bool | None, Evidence]) -> Verdict:
    held, ev = base
    hit, cause_ev = cause
    if held is None:
        return Verdict(None)
    if not held:
        return Verdict(False, ev)
    return Verdict(hit, {**ev, **cause_ev})


def _data_pipeline(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    return _with(_held_idle(s, cfg), _io_bound(s, cfg))


rule(t.IDLE_DATA_PIPELINE_IO)(_data_pipeline)


def _cpu_contention(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    return _with(_held_idle(s, cfg), _cpu_starved(s, cfg))


rule(t.IDLE_CPU_CONTENTION)(_cpu_contention)


def _host_swapping(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    return _with(_held_idle(s, cfg), _swapping(s, cfg))


rule(t.IDLE_HOST_SWAPPING)(_host_swapping)


def _underfed_data_pipeline(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    return _with(_held_underfed(s, cfg), _io_bound(s, cfg))


rule(t.UNDERFED_DATA_PIPELINE_IO)(_underfed_data_pipeline)


def _underfed_cpu_contention(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    return _with(_held_underfed(s, cfg), _cpu_starved(s, cfg))


rule(t.UNDERFED_CPU_CONTENTION)(_underfed_cpu_contention)


def _underfed_host_swapping(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    return _with(_held_underfed(s, cfg), _swapping(s, cfg))


rule(t.UNDERFED_HOST_SWAPPING)(_underfed_host_swapping)


def _process_stalled(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    # Judged on its own; a host-side cause holding at the same time explains
    # the stall instead (precedence.py), and the stall is listed beneath it.
    held, ev = _held_idle(s, cfg)
    if held is None or not s.processes_known:
        return Verdict(None)
    if not held:
        return Verdict(False, ev)
    procs = [p for p in s.processes if p.cpu_ratio is not None]
    if not procs:
        return Verdict(None, ev)
    stalled = all(p.cpu_ratio is not None and p.cpu_ratio < cfg.stalled_cpu_ratio
                  and p.state in ("S", "D") for p in procs)
    top = max(procs, key=lambda p: p.memory_used_bytes or 0)
    ev.update({"process_pid": str(top.pid), "process_comm": top.comm,
               "process_state": top.state or "?",
               "process_cpu_ratio": round(top.cpu_ratio or 0.0, 3)})
    return Verdict(stalled, ev)


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
    load, reasons = _busy(s, cfg), s.gpu.throttle_reasons
    if load is None or reasons is None:
        return Verdict(None)
    busy, util = load
    below, ev = _sm_below_max(s, cfg)
    ev = {**ev, "gpu_utilization_ratio": util,
          "sw_power_cap_active": "yes" if "sw_power_cap" in reasons else "no"}
    if s.gpu.power_limit_watts is not None:
        ev["power_limit_watts"] = s.gpu.power_limit_watts
    if s.gpu.power_default_limit_watts is not None:
        ev["power_default_limit_watts"] = s.gpu.power_default_limit_watts
    if s.gpu.power_watts is not None:
        ev["power_watts"] = round(s.gpu.power_watts, 1)
    # A busy GPU at its board's default limit drawing its rated power is
    # working as designed: a real H100 under dense tensor work sits at its
    # 700 W default with sw_power_cap on nearly all the time. Only a limit
    # below the default (set by an administrator, or out of band by the rack's
    # power policy: the enforced limit includes both) is a cause to act on.
    # Where the default is unknown, the cap alone decides, as before.
    lowered = _limit_lowered(s)
    ev["power_limit_lowered"] = {True: "yes", False: "no", None: "unknown"}[lowered]
    return Verdict(bool(busy and "sw_power_cap" in reasons and below and lowered is not False),
                   ev)


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
    load, reasons = _busy(s, cfg), s.gpu.throttle_reasons
    temp, slowdown = s.gpu.temperature_celsius, s.gpu.slowdown_celsius
    if load is None or (reasons is None and (temp is None or slowdown is None)):
        return Verdict(None)
    busy, util = load
    active = sorted((reasons or frozenset()) & THERMAL_REASONS)
    ev = _temperature_evidence(s, {"gpu_utilization_ratio": util,
                                   "thermal_reasons_active": ", ".join(active) or "none"})
    return Verdict(bool(busy and (active or _near_slowdown(s, cfg))), ev)


rule(t.THERMAL)(_thermal)


def _hw_slowdown(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    load, reasons = _busy(s, cfg), s.gpu.throttle_reasons
    if load is None or reasons is None:
        return Verdict(None)
    busy, util = load
    _below, ev = _sm_below_max(s, cfg)
    ev = _temperature_evidence(s, {**ev, "gpu_utilization_ratio": util,
                                   "hw_slowdown_active": "yes" if "hw_slowdown" in reasons
                                   else "no"})
    if s.gpu.power_watts is not None:
        ev["power_watts"] = round(s.gpu.power_watts, 1)
    if s.gpu.power_limit_watts is not None:
        ev["power_limit_watts"] = s.gpu.power_limit_watts
    # Judged on the bit alone; when a specific bit or the temperature names
    # the reason, that row (thermal, power_brake) explains this one.
    return Verdict(bool(busy and "hw_slowdown" in reasons), ev)


rule(t.HW_SLOWDOWN)(_hw_slowdown)


def _power_brake(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    load, reasons = _busy(s, cfg), s.gpu.throttle_reasons
    if load is None or reasons is None:
        return Verdict(None)
    busy, _util = load
    _below, ev = _sm_below_max(s, cfg)
    ev["hw_power_brake_active"] = "yes" if "hw_power_brake" in reasons else "no"
    return Verdict(bool(busy and "hw_power_brake" in reasons), ev)


rule(t.POWER_BRAKE)(_power_brake)


def _app_clocks(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    load = _busy(s, cfg)
    app = s.gpu.clocks_application_hz.get("sm")
    default = s.gpu.clocks_application_default_hz.get("sm")
    if load is None or app is None or not default:
        return Verdict(None)
    busy, util = load
    ev: Evidence = {"application_sm_clock_hertz": app,
                    "default_application_sm_clock_hertz": default,
                    "gpu_utilization_ratio": util}
    top = s.gpu.clocks_max_hz.get("sm")
    if top:
        ev["sm_clock_max_hertz"] = top
    # GPU Boost runs above the default application clock; only a lower setting caps it.
    return Verdict(busy and app < cfg.clock_below_max_ratio * default, ev)


rule(t.APPLICATION_CLOCKS)(_app_clocks)


def _downtrained(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    load = _busy(s, cfg)
    g = s.gpu
    width, width_max = g.pcie_width, g.pcie_width_max
    gen, gen_max = g.pcie_generation, g.pcie_generation_max
    if load is None or width is None or width_max is None or gen is None or gen_max is None:
        return Verdict(None)
    busy, util = load
    ev: Evidence = {"pcie_link_width": width, "pcie_link_width_max": width_max,
                    "pcie_link_generation": gen, "pcie_link_generation_max": gen_max,
                    "gpu_utilization_ratio": util}
    degraded = width < width_max or gen < gen_max
    up = s.pcie
    if up is not None and up.upstream_width is not None and up.upstream_width_max is not None:
        ev["upstream_link_width"] = up.upstream_width
        ev["upstream_link_width_max"] = up.upstream_width_max
        degraded |= up.upstream_width < up.upstream_width_max
    if (up is not None and up.upstream_generation is not None
            and up.upstream_generation_max is not None):
        ev["upstream_link_generation"] = up.upstream_generation
        ev["upstream_link_generation_max"] = up.upstream_generation_max
        degraded |= up.upstream_generation < up.upstream_generation_max
    # Idle links downshift to save power: only a busy GPU's link is judged.
    return Verdict(busy and degraded, ev)


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
    return Verdict(bool((unc or 0) > 0 or failed), ev)


rule(t.ECC_UNCORRECTABLE)(_ecc)


def _remap_pending(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    if s.gpu.remap_pending is None:
        return Verdict(None)
    return Verdict(s.gpu.remap_pending, {"row_remap_pending": "yes" if s.gpu.remap_pending
                                         else "no"})


rule(t.ROW_REMAP_PENDING)(_remap_pending)


def _xid_rule(tier: XidTier) -> Callable[[GpuSignals, DiagnosisConfig, Trend], Verdict]:
    """The rule of one Xid tier: an Xid of that tier (xids.py, as the
    configuration places it) within the hold."""
    def judge(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
        recent = [(at, x) for at, x in s.xids
                  if cfg.xid_tier(x) == tier and trend.now - at <= cfg.xid_hold]
        if not recent:
            return Verdict(False)
        evidence: Evidence = {"xid": ", ".join(str(x) for x in sorted({x for _, x in recent})),
                              "xid_events_recent": len(recent)}
        # The kernel log's line names the process of the newest one, where it does.
        blamed = [b for b in s.xid_blames
                  if cfg.xid_tier(b.xid) == tier and trend.now - b.at <= cfg.xid_hold]
        if blamed:
            newest = max(blamed, key=lambda b: b.at)
            evidence["xid_process"] = newest.process
            if newest.owner is not None:
                evidence["xid_owner"] = newest.owner.describe()
        return Verdict(True, evidence)
    judge.__name__ = judge.__qualname__ = f"_xid_{tier}"
    return judge


rule(t.XID)(_xid_rule("hardware"))
rule(t.XID_APPLICATION)(_xid_rule("application"))
rule(t.XID_INFORMATIONAL)(_xid_rule("informational"))


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


def _cpu_limit_throttled(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    held, ev = _held_idle(s, cfg)
    limited = [w for w in s.workloads
               if w.cpu_limit_cores is not None and w.cpu_throttled_ratio is not None]
    if held is None or not limited:
        return Verdict(None)
    if not held:
        return Verdict(False, ev)
    worst = max(limited, key=lambda w: w.cpu_throttled_ratio or 0.0)
    throttled = worst.cpu_throttled_ratio or 0.0
    ev["workload_cpu_throttled_ratio"] = round(throttled, 3)
    ev["workload_cpu_limit_cores"] = round(worst.cpu_limit_cores or 0.0, 3)
    host = None if s.host is None else s.host.cpu_pressure_some
    if host is not None:
        ev["host_cpu_pressure_some_ratio"] = round(host, 3)
    # The limit is the cause only while the node has CPUs to give: a host
    # short of CPUs is contention, whatever the limit says.
    spare = host is None or host < cfg.cpu_pressure_high
    return Verdict(throttled >= cfg.cpu_throttled_high and spare, ev)


rule(t.IDLE_CPU_LIMIT_THROTTLED)(_cpu_limit_throttled)


def _allocated_unused(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    pods = [o for o in s.owners if not o.slurm_job_id]
    used, util = s.memory_used_ratio, s.gpu.utilization
    if not s.allocations_known or not s.processes_known or used is None or util is None:
        return Verdict(None)
    ev: Evidence = {"gpu_processes": len(s.processes), "gpu_utilization_ratio": util,
                    "gpu_memory_used_ratio": round(used, 3)}
    # Memory held with no process listed is a process the exporter cannot
    # see (another PID namespace, no permission), not an unused GPU.
    return Verdict(bool(pods) and not s.processes and util < cfg.idle_utilization
                   and used < cfg.memory_held_ratio, ev)


rule(t.ALLOCATED_UNUSED)(_allocated_unused)


def _check_every_row_has_a_rule() -> None:
    missing = [r.key for r in ROWS if r not in RULES]
    if missing:
        raise ImportError("diagnosis rows without a rule: " + ", ".join(missing))


_check_every_row_has_a_rule()
