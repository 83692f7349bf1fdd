"""The rules of the rows in workload_rows.py, registered on their rows as
rules.py registers its own.

Growth is judged by how a level moved across the window, not only by how far
it rose: the engine keeps each reading of the window (``Trend.series``), and
a steady climb is one that rose in many steps, none of them most of the rise,
in both halves of what was read, and barely fell back. One allocation (a
step) rises as far as an hour of leaking does, and is no leak; a model loaded
in a few chunks that then holds still stops climbing in the second half. The
engine holds the row to the whole window (the condition must hold at nearly
every poll of it), so a climb is one that went on for the window. Likewise a counter of
events that rose once is a one-off; one that rose in both halves of the
window is recurring."""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Sequence
from operator import itemgetter

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.registry import (
    Evidence,
    HostFields,
    Trend,
    Verdict,
    host_trend,
    rule,
)
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.settings.thresholds import DiagnosisConfig

# A climb needs at least this many rises in the window, no single rise above
# this share of the net rise, and falls back of at most this share of it.
MIN_RISES = 3
LARGEST_STEP_SHARE = 0.5
FALLBACK_SHARE = 0.25
# Each half of the readings climbs by at least this share of the net rise.
HALF_SHARE = 0.25
# Memory-bound work keeps the SMs at least this busy, and its tensor pipes
# (where GPM reads them) below this: the row's prose says "half" and "a third".
BOUND_SM_ACTIVE = 0.5
BOUND_TENSOR_ACTIVE = 1 / 3
# The processes a memory finding names, largest first.
NAMED_PROCESSES = 3


# The last readings steady_climb was asked about, and its answer: every GPU
# keeps the host's memory in use as its own readings, the same ones on each
# GPU polled as long, and the same question is answered once a poll.
_last_climb: list[tuple[Sequence[tuple[float, float]], float | None]] = []


def steady_climb(samples: Sequence[tuple[float, float]]) -> float | None:
    """The rate per second of a level that climbed steadily across the
    readings (as (time, value), oldest first); None otherwise."""
    if len(samples) < MIN_RISES + 1:
        return None
    if _last_climb and _last_climb[0][0] == samples:
        return _last_climb[0][1]
    rate = _climb(samples)
    _last_climb[:] = [(tuple(samples), rate)]
    return rate


def _climb(samples: Sequence[tuple[float, float]]) -> float | None:
    (t0, v0), (t1, v1) = samples[0], samples[-1]
    span = t1 - t0
    net = v1 - v0
    if span <= 0 or net <= 0:
        return None
    middle = t0 + span / 2
    v_mid = _level_at(samples, middle, (t0, v0))
    if min(v_mid - v0, v1 - v_mid) < HALF_SHARE * net:
        return None
    moves = [b - a for (_, a), (_, b) in itertools.pairwise(samples)]
    rises = [m for m in moves if m > 0]
    fallen = -sum(m for m in moves if m < 0)
    if (len(rises) < MIN_RISES or max(rises) > LARGEST_STEP_SHARE * net
            or fallen > FALLBACK_SHARE * net):
        return None
    return net / span


def _level_at(samples: Sequence[tuple[float, float]], at: float,
              before: tuple[float, float]) -> float:
    """The value of the latest reading at or before ``at`` (of several at
    that time, the highest); ``before``'s where none is. Readings kept in
    time order are searched, not walked: the window holds a reading a poll."""
    times = list(map(itemgetter(0), samples))
    if not all(map(operator.le, times, itertools.islice(times, 1, None))):
        return max(((t, v) for t, v in samples if t <= at), default=before)[1]
    end = bisect.bisect_right(times, at)
    if not end:
        return before[1]
    start = bisect.bisect_left(times, times[end - 1], 0, end)
    return max(v for _, v in itertools.islice(samples, start, end))


def _memory(s: GpuSignals) -> tuple[float, float] | None:
    """(used, what processes can allocate) of the place, in bytes."""
    if s.instance_memory is not None:
        return s.instance_memory
    if s.mig:
        return None  # a split GPU's memory is its instances'
    g = s.gpu
    if g.memory_used_bytes is None or not g.memory_total_bytes:
        return None
    usable = g.memory_total_bytes - (g.memory_reserved_bytes or 0.0)
    return (g.memory_used_bytes, usable) if usable > 0 else None


def _memory_filling(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    memory = _memory(s)
    if memory is None:
        return Verdict(None)
    used, usable = memory
    name = f"memory_used_bytes_{s.gpu_instance}"
    trend.increase(name, used)
    ev: Evidence = {"gpu_memory_used_bytes": used, "gpu_memory_usable_bytes": usable}
    rate = steady_climb(trend.series(name))
    if rate is None:
        return Verdict(False, ev)
    to_full = max(0.0, usable - used) / rate
    ev["memory_growth_bytes_per_s"] = round(rate, 1)
    ev["memory_full_in_seconds"] = round(to_full)
    largest = sorted((p for p in s.processes if p.memory_used_bytes),
                     key=lambda p: -(p.memory_used_bytes or 0.0))[:NAMED_PROCESSES]
    if largest:
        ev["largest_processes"] = ", ".join(
            f"{p.comm} (pid {p.pid}) {(p.memory_used_bytes or 0.0) / 2**30:.1f} GiB"
            for p in largest)
    return Verdict(to_full <= cfg.memory_full_within, ev)


rule(t.MEMORY_FILLING)(_memory_filling)


def _recurring(samples: Sequence[tuple[float, float]]) -> bool:
    """The count rose in the first half of the readings and in the second."""
    if len(samples) < 3:
        return False
    (t0, v0), (t1, v1) = samples[0], samples[-1]
    if t1 <= t0:
        return False
    middle = t0 + (t1 - t0) / 2
    vm = max((v for at, v in samples if at <= middle), default=v0)
    return v0 < vm < v1


def _holds_job(s: GpuSignals, cfg: DiagnosisConfig) -> bool | None:
    """A process has a context on the GPU; where none is listed, its memory says.
    A GPU split into MIG instances holds the jobs of its instances: it has no
    processes or memory of its own, and is held where its instances are
    given to someone."""
    if s.processes:
        return True
    if s.mig and s.gpu_instance is None:
        return True if s.owners else None
    used = s.memory_used_ratio
    return None if used is None else used > cfg.memory_held_ratio


def _cpu_thermal(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    host = s.host
    if host is None or host.cpu_thermal_kept is False:
        return Verdict(None)  # CPUs that keep no counters: nothing to check
    count = host.cpu_thermal_throttles
    if count is None:
        return Verdict(None)
    job = _holds_job(s, cfg)
    if not job:
        return Verdict(job)  # no job to slow (None: not known whether one holds it)
    trend.increase("cpu_thermal_throttles", count)
    throttled = trend.increase("cpu_thermal_throttled_seconds",
                               host.cpu_thermal_throttled_seconds)
    samples = trend.series("cpu_thermal_throttles")
    ev: Evidence = {}
    if len(samples) > 1:
        ev["cpu_thermal_throttles_in_window"] = samples[-1][1] - samples[0][1]
    holds = _recurring(samples)
    span = samples[-1][0] - samples[0][0] if samples else 0.0
    if holds and throttled is not None and span > 0:
        # The time summed over the cores: one core throttled counts its own.
        share = throttled / span
        ev["cpu_thermal_throttled_ratio"] = round(share, 4)
        holds = share >= cfg.cpu_thermal_throttled_ratio
    return Verdict(holds, ev)


def _job_is_held(s: GpuSignals, cfg: DiagnosisConfig) -> bool:
    return _holds_job(s, cfg) is True


# The host's trends the two rows read, kept once per node (registry.HOST_TRENDS).
host_trend("cpu_thermal_throttles", operator.attrgetter("cpu_thermal_throttles"))
host_trend("cpu_thermal_throttled_seconds", operator.attrgetter("cpu_thermal_throttled_seconds"))
host_trend("host_memory_used_bytes", lambda h: None if h.memory_total_bytes is None
           or h.memory_available_bytes is None
           else h.memory_total_bytes - h.memory_available_bytes)
# Each reads the host only where a job holds the place: elsewhere its verdict
# is the job's absence, whatever the host does.
rule(t.HOST_CPU_THERMAL, reads_host=HostFields((
    "cpu_thermal_kept", "cpu_thermal_throttles", "cpu_thermal_throttled_seconds"),
    when=_job_is_held))(_cpu_thermal)


def _host_memory(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    """The same climb as the GPU's memory, of the host's memory in use."""
    host = s.host
    if host is None or host.memory_total_bytes is None or host.memory_available_bytes is None:
        return Verdict(None)  # no MemAvailable (before Linux 3.14): nothing to judge
    job = _holds_job(s, cfg)
    if not job:
        return Verdict(job)
    available = host.memory_available_bytes
    trend.increase("host_memory_used_bytes", host.memory_total_bytes - available)
    ev: Evidence = {"host_memory_available_bytes": available}
    rate = steady_climb(trend.series("host_memory_used_bytes"))
    if rate is None:
        return Verdict(False, ev)
    to_none = max(0.0, available) / rate
    ev["host_memory_growth_bytes_per_s"] = round(rate, 1)
    ev["host_memory_none_available_in_seconds"] = round(to_none)
    return Verdict(to_none <= cfg.host_memory_full_within, ev)


rule(t.HOST_MEMORY_GROWTH, reads_host=HostFields((
    "memory_total_bytes", "memory_available_bytes"), when=_job_is_held))(_host_memory)


def _memory_bound(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    active = s.sm_active
    if active is None:
        return Verdict(None)  # no GPM (before Hopper): not judged, said in coverage
    dram = s.dram_active
    if dram is None:
        return Verdict(None)
    tensor = s.tensor_active
    ev: Evidence = {"dram_active_ratio": round(dram, 3), "sm_active_ratio": round(active, 3)}
    if tensor is not None:
        ev["tensor_active_ratio"] = round(tensor, 3)
    return Verdict(dram >= cfg.memory_bound_dram_active and active >= BOUND_SM_ACTIVE
                   and (tensor is None or tensor < BOUND_TENSOR_ACTIVE), ev)


rule(t.MEMORY_BOUND)(_memory_bound)
