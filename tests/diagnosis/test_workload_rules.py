"""The rows of workload_rows.py held to their principles: a climb of GPU
memory is told from one step, from memory holding still and from a load that
stopped; a CPU throttle that recurs is told from a one-off; memory-bound work
is information only, and never judged without GPM. Each rule runs poll by
poll on a history kept as the engine keeps it (the window's readings)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.registry import RULES, Trend, Verdict
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import Row
from gpu_exporter.diagnosis.workload_rules import steady_climb
from gpu_exporter.settings.thresholds import DiagnosisConfig
from tests.rule_signals import CFG, GIB, NOW, POD, busy_gpu, proc, quiet_host, signals


class History:
    """What the engine keeps between polls of one GPU: each name's readings
    within the window (Trend.series) and the increase over it."""

    def __init__(self, window: float = CFG.window) -> None:
        self.window = window
        self.kept: dict[str, deque[tuple[float, float]]] = {}

    def trend(self, at: float) -> Trend:
        def increase(name: str, value: float | None) -> float | None:
            if value is None:
                return None
            series = self.kept.setdefault(name, deque())
            series.append((at, value))
            while len(series) > 1 and series[1][0] <= at - self.window:
                series.popleft()
            first = series[0][1]
            return value if value < first else value - first

        return Trend(increase, NOW + at, None, lambda name: tuple(self.kept.get(name, ())))


def run(row: Row, sig_at: Callable[[float], GpuSignals], seconds: int = 60,
        every: float = 1.0) -> list[Verdict]:
    """The row's verdict at each poll of ``seconds`` of polls."""
    history = History()
    polls = int(seconds / every)
    return [RULES[row](sig_at(k * every), CFG, history.trend(k * every)) for k in range(polls)]


def turns_on(verdicts: list[Verdict], window: float = CFG.window) -> bool:
    """Held at the share of the last window's polls the engine needs."""
    last = [v.holds is True for v in verdicts[-int(window) - 1:]]
    return sum(last) >= CFG.hold_ratio * len(last)


USABLE = 80 * GIB  # busy_gpu(): 80 GiB, no reserve


def gpu_with_memory(used: Callable[[float], float]) -> Callable[[float], GpuSignals]:
    def at(s: float) -> GpuSignals:
        return signals(busy_gpu(memory_used_bytes=used(s)),
                       procs=[proc(memory_used_bytes=used(s) - GIB)])
    return at


# --- memory_filling ------------------------------------------------------------------------

def test_a_steady_climb_toward_full_is_found_with_its_time_to_full() -> None:
    rate = 0.1 * GIB  # 100 MiB/s from 40 GiB: 80 GiB in about 400 s
    verdicts = run(t.MEMORY_FILLING, gpu_with_memory(lambda s: 40 * GIB + rate * s))
    assert turns_on(verdicts)
    ev = verdicts[-1].evidence
    assert ev["memory_growth_bytes_per_s"] == pytest.approx(rate, rel=0.01)
    used_now = 40 * GIB + rate * 59
    assert ev["memory_full_in_seconds"] == pytest.approx((USABLE - used_now) / rate, abs=1)
    assert "pid 100" in str(ev["largest_processes"])


def test_one_large_allocation_rises_as_far_and_is_no_climb() -> None:
    # From 40 to 58 GiB in one step at 30 s: the same rise as 100 MiB/s for
    # 3 minutes, and flat on both sides of it.
    # A few MiB of small allocations come and go around it.
    wobble = [0, 3, 1, 4, 2]
    verdicts = run(t.MEMORY_FILLING, gpu_with_memory(
        lambda s: (40 * GIB if s < 30 else 58 * GIB) + wobble[int(s) % 5] * 2**20),
        seconds=90)
    assert not any(v.holds for v in verdicts)


def test_memory_held_still_or_shrinking_is_no_climb() -> None:
    still = run(t.MEMORY_FILLING, gpu_with_memory(lambda s: 70 * GIB))
    shrinking = run(t.MEMORY_FILLING, gpu_with_memory(lambda s: 70 * GIB - 0.1 * GIB * s))
    assert not any(v.holds for v in still + shrinking)
    assert all(v.holds is False for v in still)  # judged, not unknown


def test_a_model_loaded_in_chunks_that_then_holds_still_is_no_climb() -> None:
    # Five chunks of 10 GiB in five seconds, then nothing more.
    # Judged over the window right after it, while the load is still in it.
    verdicts = run(t.MEMORY_FILLING, gpu_with_memory(
        lambda s: 10 * GIB + 10 * GIB * min(s, 5.0)), seconds=36)
    assert not turns_on(verdicts)


def test_a_slow_climb_that_fills_nothing_soon_is_silent() -> None:
    # 1 MiB/s with 40 GiB free: full in 11 hours, beyond memory_full_within.
    verdicts = run(t.MEMORY_FILLING, gpu_with_memory(lambda s: 40 * GIB + 2**20 * s))
    assert verdicts[-1].evidence["memory_full_in_seconds"] > CFG.memory_full_within
    assert not any(v.holds for v in verdicts)
    faster = DiagnosisConfig(memory_full_within=86400.0)
    history = History()
    last = [RULES[t.MEMORY_FILLING](gpu_with_memory(lambda s: 40 * GIB + 2**20 * s)(k),
                                    faster, history.trend(k)) for k in range(60)][-1]
    assert last.holds is True  # the threshold, not the rate, kept it silent


def test_a_climb_with_allocator_steps_is_still_a_climb() -> None:
    # The caching allocator grows in 2 GiB segments every 10 s: steps, many of them.
    verdicts = run(t.MEMORY_FILLING, gpu_with_memory(
        lambda s: 40 * GIB + 2 * GIB * (s // 10)), seconds=90)
    assert turns_on(verdicts)


def test_memory_filling_without_a_memory_reading_is_not_judged() -> None:
    verdicts = run(t.MEMORY_FILLING, lambda s: signals(busy_gpu(memory_used_bytes=None)))
    assert all(v.holds is None for v in verdicts)


def test_steady_climb_needs_rises_in_both_halves() -> None:
    early = [(float(k), float(min(k, 5))) for k in range(20)]
    late = [(float(k), float(max(0, k - 15))) for k in range(20)]
    even = [(float(k), float(k)) for k in range(20)]
    assert steady_climb(early) is None
    assert steady_climb(late) is None
    assert steady_climb(even) == pytest.approx(1.0)


# --- slowing_over_time/host_cpu_thermal ----------------------------------------------------

def host_throttles(count: Callable[[float], float], seconds: Callable[[float], float] | None
                   = None, **sig: object) -> Callable[[float], GpuSignals]:
    def at(s: float) -> GpuSignals:
        host = quiet_host(cpu_thermal_kept=True, cpu_thermal_throttles=count(s),
                          cpu_thermal_throttled_seconds=None if seconds is None
                          else seconds(s))
        return signals(host=host, **sig)  # type: ignore[arg-type]
    return at


def test_cpus_throttling_again_and_again_slow_the_job() -> None:
    verdicts = run(t.HOST_CPU_THERMAL, host_throttles(lambda s: 1000 + 2 * s,
                                                      lambda s: 0.1 * s))
    assert turns_on(verdicts)
    assert verdicts[-1].evidence["cpu_thermal_throttled_ratio"] == pytest.approx(0.1, rel=0.05)


def test_one_throttle_event_is_no_slowdown() -> None:
    # Judged over the window right after it, while the event is still in it.
    verdicts = run(t.HOST_CPU_THERMAL, host_throttles(lambda s: 1000 if s < 20 else 1001),
                   seconds=51)
    assert not turns_on(verdicts)


def test_throttles_that_cost_next_to_no_time_are_no_slowdown() -> None:
    # Events every second, each a millisecond: 0.1 % of the time.
    verdicts = run(t.HOST_CPU_THERMAL, host_throttles(lambda s: s, lambda s: 0.001 * s))
    assert not any(v.holds for v in verdicts)


def test_an_idle_gpu_is_not_slowed_by_its_hosts_heat() -> None:
    idle = host_throttles(lambda s: 2 * s, procs=[],
                          gpu=busy_gpu(utilization=0.0, memory_used_bytes=0.0))
    assert not any(v.holds for v in run(t.HOST_CPU_THERMAL, idle))


def test_a_gpu_split_into_instances_is_slowed_where_its_instances_are_given() -> None:
    """A split GPU has no processes or memory of its own (they are its
    instances'): its pods' jobs are what the host's heat slows."""
    split = busy_gpu(memory_used_bytes=None)
    given = host_throttles(lambda s: 1000 + 2 * s, lambda s: 0.1 * s, procs=[], gpu=split,
                           mig=True, owners=(POD,))
    assert turns_on(run(t.HOST_CPU_THERMAL, given))
    unused = host_throttles(lambda s: 1000 + 2 * s, lambda s: 0.1 * s, procs=[], gpu=split,
                            mig=True)
    assert all(v.holds is None for v in run(t.HOST_CPU_THERMAL, unused))


def test_cpus_without_thermal_counters_leave_nothing_to_judge() -> None:
    def at(s: float) -> GpuSignals:
        return signals(host=quiet_host(cpu_thermal_kept=False))
    assert all(v.holds is None for v in run(t.HOST_CPU_THERMAL, at))


# --- slowing_over_time/host_memory_growth --------------------------------------------------

HOST_TOTAL = 1024 * GIB


def host_memory(available: Callable[[float], float | None],
                **sig: object) -> Callable[[float], GpuSignals]:
    def at(s: float) -> GpuSignals:
        host = quiet_host(memory_total_bytes=HOST_TOTAL, memory_available_bytes=available(s))
        return signals(host=host, **sig)  # type: ignore[arg-type]
    return at


def test_host_memory_in_use_climbing_toward_none_available_is_found() -> None:
    # 1 GiB a second out of 700 GiB available: none left in about 11 minutes.
    verdicts = run(t.HOST_MEMORY_GROWTH, host_memory(lambda s: 700 * GIB - s * GIB))
    assert turns_on(verdicts)
    ev = verdicts[-1].evidence
    assert ev["host_memory_growth_bytes_per_s"] == pytest.approx(GIB)
    assert ev["host_memory_none_available_in_seconds"] == pytest.approx(700 - 59, abs=1)


def test_a_climb_that_leaves_memory_for_longer_than_the_threshold_is_no_finding() -> None:
    # 10 MiB a second out of 700 GiB: none left in about 20 hours.
    verdicts = run(t.HOST_MEMORY_GROWTH,
                   host_memory(lambda s: 700 * GIB - s * 10 * 2**20))
    assert not any(v.holds for v in verdicts)
    assert verdicts[-1].evidence["host_memory_none_available_in_seconds"] > \
        CFG.host_memory_full_within


def test_one_allocation_of_host_memory_is_no_climb() -> None:
    # 300 GiB taken at once (a dataset loaded into memory), then held.
    verdicts = run(t.HOST_MEMORY_GROWTH,
                   host_memory(lambda s: 700 * GIB if s < 30 else 400 * GIB))
    assert not any(v.holds for v in verdicts)


def test_host_memory_that_holds_still_or_frees_is_no_climb() -> None:
    for available in (lambda s: 700 * GIB, lambda s: 400 * GIB + s * GIB):
        assert not any(v.holds for v in run(t.HOST_MEMORY_GROWTH, host_memory(available)))


def test_a_leaking_host_does_not_slow_a_gpu_without_a_job() -> None:
    idle = host_memory(lambda s: 700 * GIB - s * GIB, procs=[],
                       gpu=busy_gpu(utilization=0.0, memory_used_bytes=0.0))
    assert not any(v.holds for v in run(t.HOST_MEMORY_GROWTH, idle))


def test_a_kernel_without_memavailable_leaves_nothing_to_judge() -> None:
    assert all(v.holds is None for v in run(t.HOST_MEMORY_GROWTH, host_memory(lambda s: None)))


# --- memory_bound/dram_bandwidth -----------------------------------------------------------

def gpm(sm: float | None, dram: float | None, tensor: float | None = None) -> GpuSignals:
    return signals(sm_active=sm, dram_active=dram, tensor_active=tensor)


def test_memory_bound_is_information_never_a_warning() -> None:
    assert t.MEMORY_BOUND.severity == "info"


def test_dram_busy_while_the_sms_work_is_memory_bound() -> None:
    holds = RULES[t.MEMORY_BOUND](gpm(0.8, 0.9, 0.05), CFG, History().trend(0))
    assert holds.holds is True
    assert holds.evidence == {"dram_active_ratio": 0.9, "sm_active_ratio": 0.8,
                              "tensor_active_ratio": 0.05}


@pytest.mark.parametrize(("sm", "dram", "tensor", "why"), [
    (0.8, 0.5, 0.05, "DRAM bandwidth to spare"),
    (0.2, 0.9, 0.05, "SMs at rest: no work to be bound"),
    (0.8, 0.9, 0.7, "tensor pipes busy: compute keeps up with memory"),
])
def test_not_memory_bound(sm: float, dram: float, tensor: float, why: str) -> None:
    assert RULES[t.MEMORY_BOUND](gpm(sm, dram, tensor), CFG, History().trend(0)).holds is False, \
        why


def test_memory_bound_is_not_judged_without_gpm() -> None:
    assert RULES[t.MEMORY_BOUND](gpm(None, None), CFG, History().trend(0)).holds is None
    assert RULES[t.MEMORY_BOUND](gpm(0.8, None), CFG, History().trend(0)).holds is None


def test_memory_bound_reads_each_gpm_figure_it_names() -> None:
    for name in ("gpu_dram_active_ratio", "gpu_sm_active_ratio", "gpu_tensor_active_ratio"):
        assert name in {m.name for m in t.MEMORY_BOUND.reads}
        assert name not in t.NOT_READ
