"""What each diagnosis rule tells the on-call engineer, signals in and the whole
verdict out: whether the row holds and every piece of evidence it shows, keyed
by name with the unit as suffix and rounded as people read it (``/diagnosis``,
``gpu-exporter diagnose`` and alert annotations print these). Thresholds are
probed on both sides of the configured value, every input a rule reads is
shown to change its answer, and a rule without its input does not judge."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_exporter.diagnosis import rules
from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.rules import RULES, Evidence, Trend, Verdict, rule
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.readings import (
    GpuReading,
    HostSignals,
    OwnerCpu,
    PcieKernelView,
    ProcessReading,
)
from gpu_exporter.thresholds import DiagnosisConfig
from tests.rule_signals import (
    CFG,
    GIB,
    MIB,
    NOW,
    POD,
    busy_gpu,
    held,
    proc,
    quiet_host,
    signals,
    verdict,
    workload,
)

IDLE, UNDERFED, BUSY = 0.03, 0.15, 0.95
TOTAL = 80 * GIB  # busy_gpu's memory
SM_EV: Evidence = {"sm_clock_hertz": 1.98e9, "sm_clock_max_hertz": 1.98e9}
TEMP_EV: Evidence = {"temperature_celsius": 65.0, "slowdown_threshold_celsius": 89.0}
EPS = 1e-6  # "just" inside or outside a threshold
CAPPED = {"throttle_reasons": frozenset({"sw_power_cap"}), "power_limit_watts": 450.0,
          "clocks_hz": {"sm": 1.6e9}}
# A container at its 16 GiB memory limit, hitting it and reclaiming its cache.
# A container whose reads run at its io.max limit on the NVMe, stalled on I/O.
IO_AT_LIMIT = workload(io_limited=True, io_limit_used_ratio=0.97654, io_limit_device="259:0",
                       io_pressure_some=0.6)
AT_LIMIT = workload(memory_limit_bytes=16 * GIB, memory_used_bytes=15.9 * GIB,
                    memory_limit_hits_per_s=40.0, memory_reclaimed_bytes_per_s=200 * MIB,
                    memory_pressure_some=0.5)


def held_ev(util: float, used: float = 0.75) -> Evidence:
    """What the held-memory rows show of the GPU (busy_gpu holds 60 of 80 GiB)."""
    return {"gpu_memory_used_ratio": used, "gpu_utilization_ratio": util}


def hostless(gpu: GpuReading, procs: list[ProcessReading] | None = None) -> GpuSignals:
    """Signals with no host view at all (the host collector is off)."""
    sig = signals(gpu, procs=procs)
    sig.host = None
    return sig


def with_cfg(**changes: float) -> DiagnosisConfig:
    return CFG.model_copy(update=changes)


# (row, signals, config, expected verdict, why)
Case = tuple[Row, GpuSignals, DiagnosisConfig, Verdict, str]
CASES: list[Case] = [
    # --- memory held, GPU idle or under-fed: the GPU half -------------------------------
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE, memory_used_bytes=TOTAL * 2 / 3),
                                      quiet_host(iowait_ratio=0.34567, io_pressure_some=0.12345)),
     CFG, Verdict(True, {**held_ev(IDLE, 0.667), "host_cpu_iowait_ratio": 0.346,
                         "host_io_pressure_some_ratio": 0.123}),
     "storage wait: both host figures shown, ratios to three places"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(BUSY), quiet_host(iowait_ratio=0.5)), CFG,
     Verdict(False, held_ev(BUSY)), "a busy GPU: cleared on the GPU's own figures"),
    (t.IDLE_DATA_PIPELINE_IO, signals(busy_gpu(utilization=None),
                                      quiet_host(iowait_ratio=0.5)), CFG, Verdict(None),
     "utilization unknown: not judged"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE, memory_total_bytes=None),
                                      quiet_host(iowait_ratio=0.5), procs=[]), CFG,
     Verdict(None), "no process and memory total unknown: not judged"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE, memory_used_bytes=None),
                                      quiet_host(iowait_ratio=0.5), procs=[]), CFG,
     Verdict(None), "no process and memory used unknown: not judged"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE, memory_used_bytes=None),
                                      quiet_host(iowait_ratio=0.5)), CFG,
     Verdict(True, {"gpu_utilization_ratio": IDLE, "host_cpu_iowait_ratio": 0.5,
                    "host_io_pressure_some_ratio": 0.0}),
     "a process on it is a job, whatever its memory reads"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE, memory_used_bytes=TOTAL * CFG.memory_held_ratio),
                                      quiet_host(iowait_ratio=0.5), procs=[]), CFG,
     Verdict(False, held_ev(IDLE, CFG.memory_held_ratio)),
     "no process listed: exactly the held threshold is not held"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE, memory_used_bytes=TOTAL * (
        CFG.memory_held_ratio + 0.001)), quiet_host(iowait_ratio=0.5), procs=[]), CFG,
     Verdict(True, {**held_ev(IDLE, round(CFG.memory_held_ratio + 0.001, 3)),
                    "host_cpu_iowait_ratio": 0.5, "host_io_pressure_some_ratio": 0.0}),
     "no process listed: just above the held threshold is a job it cannot see"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(CFG.idle_utilization), quiet_host(iowait_ratio=0.5)),
     CFG, Verdict(False, held_ev(CFG.idle_utilization)), "exactly the idle threshold is not idle"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(CFG.idle_utilization - EPS),
                                      quiet_host(iowait_ratio=0.5)), CFG,
     Verdict(True, {**held_ev(CFG.idle_utilization - EPS), "host_cpu_iowait_ratio": 0.5,
                    "host_io_pressure_some_ratio": 0.0}), "just below the idle threshold"),
    (t.IDLE_DATA_PIPELINE_IO, hostless(held(IDLE)), CFG,
     Verdict(None, held_ev(IDLE)), "no host view at all: the GPU half shown, not judged"),
    # --- waiting on storage --------------------------------------------------------------
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(UNDERFED), HostSignals(
        io_pressure_some=CFG.io_pressure_high)), CFG,
     Verdict(True, {**held_ev(UNDERFED), "host_io_pressure_some_ratio": CFG.io_pressure_high}),
     "I/O pressure exactly at its threshold, iowait unknown"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(UNDERFED), HostSignals(
        io_pressure_some=CFG.io_pressure_high - 0.001)), CFG,
     Verdict(False, {**held_ev(UNDERFED),
                     "host_io_pressure_some_ratio": CFG.io_pressure_high - 0.001}),
     "I/O pressure just below its threshold, iowait unknown"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(UNDERFED), HostSignals(
        iowait_ratio=CFG.iowait_high - 0.001)), CFG,
     Verdict(False, {**held_ev(UNDERFED), "host_cpu_iowait_ratio": CFG.iowait_high - 0.001}),
     "iowait just below its threshold, no PSI"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(UNDERFED), HostSignals(
        iowait_ratio=CFG.iowait_high, io_pressure_some=0.0)), CFG,
     Verdict(True, {**held_ev(UNDERFED), "host_cpu_iowait_ratio": CFG.iowait_high,
                    "host_io_pressure_some_ratio": 0.0}),
     "iowait at its threshold decides though I/O pressure reads zero"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(UNDERFED), HostSignals(cpu_pressure_some=0.9)),
     CFG, Verdict(None, held_ev(UNDERFED)), "host figures, but none about I/O: not judged"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(UNDERFED), HostSignals(cpu_pressure_some=0.9),
                                          procs=[proc(pid=3, state="D", cpu_ratio=0.0)]),
     CFG, Verdict(True, {**held_ev(UNDERFED), "process_pid": "3", "process_state": "D"}),
     "no I/O figure of the host, but its process blocked in D: its own evidence"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.5),
                                      procs=[proc(pid=3, state="D", cpu_ratio=0.0)],
                                      workloads=(workload(io_pressure_some=0.05),)), CFG,
     Verdict(False, {**held_ev(IDLE), "workload_io_pressure_some_ratio": 0.05,
                     "process_pid": "3", "process_state": "D", "host_cpu_iowait_ratio": 0.5,
                     "host_io_pressure_some_ratio": 0.0}),
     "its own cgroup shows no I/O stall: neither the host's iowait nor a D state names I/O"),
    # --- waiting for a CPU -----------------------------------------------------------------
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.61234), [
        proc(pid=1, run_queue_wait_ratio=0.12345), proc(pid=2, run_queue_wait_ratio=None),
        proc(pid=3, run_queue_wait_ratio=0.56789)]), CFG,
     Verdict(True, {**held_ev(IDLE), "host_cpu_pressure_some_ratio": 0.612,
                    "process_run_queue_wait_seconds_per_second": 0.568}),
     "the longest-waiting process is shown and decides"),
    (t.IDLE_CPU_CONTENTION, hostless(held(IDLE), [proc(run_queue_wait_ratio=0.5)]), CFG,
     Verdict(True, {**held_ev(IDLE), "process_run_queue_wait_seconds_per_second": 0.5}),
     "no host view: the process's run-queue wait decides"),
    (t.IDLE_CPU_CONTENTION, hostless(held(IDLE), [proc(run_queue_wait_ratio=0.1)]), CFG,
     Verdict(False, {**held_ev(IDLE), "process_run_queue_wait_seconds_per_second": 0.1}),
     "no host view and the process hardly waits"),
    (t.IDLE_CPU_CONTENTION, hostless(held(IDLE), []), CFG,
     Verdict(None, held_ev(IDLE)), "no host view, no process: not judged"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=CFG.cpu_pressure_high),
                                    [proc(run_queue_wait_ratio=CFG.run_queue_wait_high)]), CFG,
     Verdict(True, {**held_ev(IDLE), "host_cpu_pressure_some_ratio": CFG.cpu_pressure_high,
                    "process_run_queue_wait_seconds_per_second": CFG.run_queue_wait_high}),
     "both exactly at their thresholds"),
    (t.UNDERFED_CPU_CONTENTION, signals(held(UNDERFED), quiet_host(cpu_pressure_some=0.6),
                                        [proc(run_queue_wait_ratio=None)]), CFG,
     Verdict(True, {**held_ev(UNDERFED), "host_cpu_pressure_some_ratio": 0.6}),
     "no schedstat: pressure alone decides, no wait shown"),
    (t.UNDERFED_CPU_CONTENTION, signals(held(UNDERFED), quiet_host(
        cpu_pressure_some=CFG.cpu_pressure_high - 0.001), [proc(run_queue_wait_ratio=None)]),
     CFG, Verdict(False, {**held_ev(UNDERFED),
                          "host_cpu_pressure_some_ratio": CFG.cpu_pressure_high - 0.001}),
     "no schedstat, pressure just below its threshold"),
    # --- swapping ------------------------------------------------------------------------
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), quiet_host(swap_bytes_per_s=1.5 * MIB + 0.4,
                                                          memory_pressure_full=0.01234)), CFG,
     Verdict(True, {**held_ev(IDLE), "host_swap_bytes_per_second": 1572864,
                    "host_memory_pressure_full_ratio": 0.012}),
     "swap in whole bytes per second, memory pressure to three places"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), HostSignals(swap_bytes_per_s=CFG.swap_bytes_per_s)),
     CFG, Verdict(True, {**held_ev(IDLE), "host_swap_bytes_per_second": CFG.swap_bytes_per_s}),
     "swap exactly at its threshold, no PSI"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), HostSignals(
        swap_bytes_per_s=CFG.swap_bytes_per_s - 1)), CFG,
     Verdict(False, {**held_ev(IDLE), "host_swap_bytes_per_second": CFG.swap_bytes_per_s - 1}),
     "swap a byte per second below its threshold"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), HostSignals(memory_pressure_full=0.5)), CFG,
     Verdict(None, held_ev(IDLE)),
     "memory pressure with no swap counters: swapping cannot be told, not judged"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), HostSignals(swap_bytes_per_s=0.0,
                                                           memory_pressure_full=0.5)), CFG,
     Verdict(False, {**held_ev(IDLE), "host_swap_bytes_per_second": 0,
                     "host_memory_pressure_full_ratio": 0.5}),
     "memory pressure with no swap traffic is not swapping"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), HostSignals(swap_bytes_per_s=50 * MIB),
                                   workloads=(workload(memory_pressure_some=0.0),)), CFG,
     Verdict(False, {**held_ev(IDLE), "host_swap_bytes_per_second": 50 * MIB,
                     "workload_memory_pressure_full_ratio": 0.0,
                     "workload_memory_pressure_some_ratio": 0.0}),
     "the host swaps, but the job's own cgroup never waits on memory"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), HostSignals(swap_bytes_per_s=50 * MIB),
                                   workloads=(workload(memory_pressure_some=0.3,
                                                       memory_pressure_full=0.1),)), CFG,
     Verdict(True, {**held_ev(IDLE), "host_swap_bytes_per_second": 50 * MIB,
                    "workload_memory_pressure_full_ratio": 0.1,
                    "workload_memory_pressure_some_ratio": 0.3}),
     "the host swaps and the job's own cgroup waits on memory"),
    (t.UNDERFED_HOST_SWAPPING, signals(held(UNDERFED), quiet_host(
        swap_bytes_per_s=20 * MIB, memory_pressure_full=0.0)), CFG,
     Verdict(True, {**held_ev(UNDERFED), "host_swap_bytes_per_second": 20 * MIB,
                    "host_memory_pressure_full_ratio": 0.0}),
     "swapping decides though memory pressure reads zero"),
    (t.UNDERFED_HOST_SWAPPING, signals(held(UNDERFED), HostSignals(iowait_ratio=0.9)), CFG,
     Verdict(None, held_ev(UNDERFED)), "host figures, but none about memory: not judged"),
    (t.UNDERFED_HOST_SWAPPING, hostless(held(UNDERFED)), CFG,
     Verdict(None, held_ev(UNDERFED)), "no host view: not judged"),
    # --- a stalled process ---------------------------------------------------------------
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[
        proc(pid=7, comm="small", memory_used_bytes=1 * GIB, state="S", cpu_ratio=0.0,
             wakeups_per_s=0.0),
        proc(pid=8, comm="trainer", memory_used_bytes=50 * GIB, state="S", cpu_ratio=0.01234,
             wakeups_per_s=0.5)]),
     CFG, Verdict(True, {**held_ev(IDLE), "process_pid": "8", "process_comm": "trainer",
                         "process_state": "S", "process_cpu_ratio": 0.012,
                         "process_wakeups_per_second": 0.5}),
     "asleep, never waking, no CPU: the process holding the most memory is named"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[
        proc(pid=8, comm="trainer", state="D", cpu_ratio=0.0, wakeups_per_s=0.0)]),
     CFG, Verdict(False, {**held_ev(IDLE), "process_pid": "8", "process_comm": "trainer",
                          "process_state": "D", "process_cpu_ratio": 0.0,
                          "process_wakeups_per_second": 0.0}),
     "blocked in the kernel (D): waiting on I/O, not stuck"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[
        proc(pid=7, comm="loader", memory_used_bytes=1 * GIB, state="R", cpu_ratio=0.9),
        proc(pid=8, comm="trainer", memory_used_bytes=50 * GIB, state="S", cpu_ratio=0.0,
             wakeups_per_s=0.0)]),
     CFG, Verdict(False, {**held_ev(IDLE), "process_pid": "8", "process_comm": "trainer",
                          "process_state": "S", "process_cpu_ratio": 0.0,
                          "process_wakeups_per_second": 0.0}),
     "one of the GPU's processes still runs: not stalled"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[
        proc(pid=7, comm="unknown-mem", memory_used_bytes=None, state="S", cpu_ratio=0.0,
             wakeups_per_s=0.0),
        proc(pid=8, comm="trainer", memory_used_bytes=1.0, state="S", cpu_ratio=0.0,
             wakeups_per_s=0.0)]),
     CFG, Verdict(True, {**held_ev(IDLE), "process_pid": "8", "process_comm": "trainer",
                         "process_state": "S", "process_cpu_ratio": 0.0,
                         "process_wakeups_per_second": 0.0}),
     "a process whose memory is unknown is not named over one whose memory is known"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[
        proc(pid=9, comm="ghost", state=None, cpu_ratio=0.0, wakeups_per_s=0.0)]),
     CFG, Verdict(False, {**held_ev(IDLE), "process_pid": "9", "process_comm": "ghost",
                          "process_state": "?", "process_cpu_ratio": 0.0,
                          "process_wakeups_per_second": 0.0}),
     "state unknown: not known to be sleeping, shown as ?"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[
        proc(pid=9, comm="trainer", state="S", cpu_ratio=CFG.stalled_cpu_ratio,
             wakeups_per_s=0.0)]),
     CFG, Verdict(False, {**held_ev(IDLE), "process_pid": "9", "process_comm": "trainer",
                          "process_state": "S", "process_cpu_ratio": CFG.stalled_cpu_ratio,
                          "process_wakeups_per_second": 0.0}),
     "exactly the stalled CPU threshold is not stalled"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[
        proc(pid=9, comm="trainer", state="S", cpu_ratio=CFG.stalled_cpu_ratio - 0.001,
             wakeups_per_s=0.0)]),
     CFG, Verdict(True, {**held_ev(IDLE), "process_pid": "9", "process_comm": "trainer",
                         "process_state": "S",
                         "process_cpu_ratio": round(CFG.stalled_cpu_ratio - 0.001, 3),
                         "process_wakeups_per_second": 0.0}),
     "just below the stalled CPU threshold"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[
        proc(pid=9, state="S", cpu_ratio=0.0, wakeups_per_s=CFG.stalled_wakeups_per_s)]),
     CFG, Verdict(False, {**held_ev(IDLE), "process_pid": "9", "process_comm": "python",
                          "process_state": "S", "process_cpu_ratio": 0.0,
                          "process_wakeups_per_second": CFG.stalled_wakeups_per_s}),
     "waking exactly at the wake-up threshold: it waits for work, not stuck"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[
        proc(pid=9, state="S", cpu_ratio=0.0, wakeups_per_s=CFG.stalled_wakeups_per_s - 0.01)]),
     CFG, Verdict(True, {**held_ev(IDLE), "process_pid": "9", "process_comm": "python",
                         "process_state": "S", "process_cpu_ratio": 0.0,
                         "process_wakeups_per_second": round(CFG.stalled_wakeups_per_s - 0.01,
                                                             2)}),
     "just under the wake-up threshold"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[
        proc(pid=9, state="S", cpu_ratio=0.0, wakeups_per_s=0.0),
        proc(pid=10, state="R", cpu_ratio=None)]),
     CFG, Verdict(True, {**held_ev(IDLE), "process_pid": "9", "process_comm": "python",
                         "process_state": "S", "process_cpu_ratio": 0.0,
                         "process_wakeups_per_second": 0.0}),
     "a process whose CPU time is unknown is left out"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[
        proc(pid=9, state="S", cpu_ratio=0.0, wakeups_per_s=None)]),
     CFG, Verdict(None, {**held_ev(IDLE), "process_pid": "9", "process_comm": "python",
                         "process_state": "S", "process_cpu_ratio": 0.0}),
     "wake-ups not known yet (its first read): not judged"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[proc(cpu_ratio=None)]), CFG,
     Verdict(None, held_ev(IDLE)), "no process's CPU time known: not judged"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[], processes_known=False), CFG,
     Verdict(None), "the process collector did not run: not judged"),
    (t.IDLE_PROCESS_STALLED, signals(held(BUSY), procs=[proc(state="S", cpu_ratio=0.0)]), CFG,
     Verdict(False, held_ev(BUSY)), "a busy GPU is not stalled"),
    (t.IDLE_PROCESS_STALLED, signals(busy_gpu(utilization=None),
                                     procs=[proc(state="S", cpu_ratio=0.0)]), CFG, Verdict(None),
     "utilization unknown: not judged"),
    # --- bursty input --------------------------------------------------------------------
    (t.BURSTY_INPUT, signals(util_samples=(CFG.burst_low, 0.45678, CFG.burst_high)), CFG,
     Verdict(True, {"utilization_samples_min_ratio": CFG.burst_low,
                    "utilization_samples_mean_ratio": 0.457,
                    "utilization_samples_max_ratio": CFG.burst_high}),
     "swings exactly from the low to the high threshold"),
    (t.BURSTY_INPUT, signals(util_samples=(CFG.burst_low + EPS, 0.5, 1.0)), CFG,
     Verdict(False, {"utilization_samples_min_ratio": CFG.burst_low + EPS,
                     "utilization_samples_mean_ratio": 0.5, "utilization_samples_max_ratio": 1.0}),
     "never quite down to the low threshold"),
    (t.BURSTY_INPUT, signals(util_samples=(0.0, 0.4, CFG.burst_high - EPS)), CFG,
     Verdict(False, {"utilization_samples_min_ratio": 0.0, "utilization_samples_mean_ratio": 0.4,
                     "utilization_samples_max_ratio": CFG.burst_high - EPS}),
     "never quite up to the high threshold"),
    # --- power cap -----------------------------------------------------------------------
    (t.POWER_CAP, signals(busy_gpu(**CAPPED, power_watts=449.94)), CFG,
     Verdict(True, {"sm_clock_hertz": 1.6e9, "sm_clock_max_hertz": 1.98e9,
                    "sw_power_cap_active": "yes",
                    "power_limit_watts": 450.0, "power_default_limit_watts": 700.0,
                    "power_watts": 449.9, "power_limit_lowered": "yes"}),
     "capped below the default: clocks, limits and draw (to 0.1 W) shown"),
    (t.POWER_CAP, signals(busy_gpu(**CAPPED, power_watts=None, power_default_limit_watts=None)),
     CFG, Verdict(True, {**SM_EV, "sm_clock_hertz": 1.6e9,
                         "sw_power_cap_active": "yes", "power_limit_watts": 450.0,
                         "power_limit_lowered": "unknown"}),
     "default limit and draw unknown: the cap alone decides"),
    (t.POWER_CAP, signals(busy_gpu(**CAPPED, power_default_limit_watts=0.0)), CFG,
     Verdict(True, {**SM_EV, "sm_clock_hertz": 1.6e9,
                    "sw_power_cap_active": "yes", "power_limit_watts": 450.0,
                    "power_default_limit_watts": 0.0, "power_watts": 600.0,
                    "power_limit_lowered": "unknown"}),
     "a default limit of 0 W means unknown"),
    (t.POWER_CAP, signals(busy_gpu(**{**CAPPED, "power_limit_watts": None})), CFG,
     Verdict(True, {**SM_EV, "sm_clock_hertz": 1.6e9,
                    "sw_power_cap_active": "yes", "power_default_limit_watts": 700.0,
                    "power_watts": 600.0, "power_limit_lowered": "unknown"}),
     "enforced limit unknown: the cap alone decides"),
    (t.POWER_CAP, signals(busy_gpu(**{**CAPPED, "power_limit_watts": 699.0})), CFG,
     Verdict(False, {**SM_EV, "sm_clock_hertz": 1.6e9,
                     "sw_power_cap_active": "yes", "power_limit_watts": 699.0,
                     "power_default_limit_watts": 700.0, "power_watts": 600.0,
                     "power_limit_lowered": "no"}),
     "a watt under the default is NVML's milliwatt rounding, not a lowered limit"),
    (t.POWER_CAP, signals(busy_gpu(**{**CAPPED, "power_limit_watts": 698.5}, power_watts=698.0)),
     CFG, Verdict(True, {**SM_EV, "sm_clock_hertz": 1.6e9,
                         "sw_power_cap_active": "yes", "power_limit_watts": 698.5,
                         "power_default_limit_watts": 700.0, "power_watts": 698.0,
                         "power_limit_lowered": "yes"}),
     "a watt and a half under the default is lowered"),
    (t.POWER_CAP, signals(busy_gpu(**{**CAPPED, "throttle_reasons": frozenset()})), CFG,
     Verdict(False, {**SM_EV, "sm_clock_hertz": 1.6e9,
                     "sw_power_cap_active": "no", "power_limit_watts": 450.0,
                     "power_default_limit_watts": 700.0, "power_watts": 600.0,
                     "power_limit_lowered": "yes"}),
     "a lowered limit with clocks down but no power cap reason"),
    (t.POWER_CAP, signals(busy_gpu(**{**CAPPED, "clocks_hz": {
        "sm": CFG.clock_below_max_ratio * 1.98e9}})), CFG,
     Verdict(False, {**SM_EV, "sm_clock_hertz": CFG.clock_below_max_ratio * 1.98e9,
                     "sw_power_cap_active": "yes",
                     "power_limit_watts": 450.0, "power_default_limit_watts": 700.0,
                     "power_watts": 600.0, "power_limit_lowered": "yes"}),
     "the SM clock exactly at its below-max threshold is not held down"),
    (t.POWER_CAP, signals(busy_gpu(**{**CAPPED, "clocks_hz": {}})), CFG,
     Verdict(False, {"sw_power_cap_active": "yes",
                     "power_limit_watts": 450.0, "power_default_limit_watts": 700.0,
                     "power_watts": 600.0, "power_limit_lowered": "yes"}),
     "SM clock unknown: not shown to be held down"),
    (t.POWER_CAP, signals(busy_gpu(**CAPPED, clocks_max_hz={"sm": 0.0})), CFG,
     Verdict(False, {"sw_power_cap_active": "yes",
                     "power_limit_watts": 450.0, "power_default_limit_watts": 700.0,
                     "power_watts": 600.0, "power_limit_lowered": "yes"}),
     "a maximum SM clock of 0 Hz means unknown"),
    (t.POWER_CAP, signals(busy_gpu(**CAPPED, power_watts=CFG.power_cap_draw_ratio * 450.0)),
     CFG, Verdict(True, {**SM_EV, "sm_clock_hertz": 1.6e9, "sw_power_cap_active": "yes",
                         "power_limit_watts": 450.0, "power_default_limit_watts": 700.0,
                         "power_watts": round(CFG.power_cap_draw_ratio * 450.0, 1),
                         "power_limit_lowered": "yes"}),
     "drawing exactly the binding share of the limit: the cap binds"),
    (t.POWER_CAP, signals(busy_gpu(**CAPPED, power_watts=CFG.power_cap_draw_ratio * 450.0 - 1)),
     CFG, Verdict(False, {**SM_EV, "sm_clock_hertz": 1.6e9, "sw_power_cap_active": "yes",
                          "power_limit_watts": 450.0, "power_default_limit_watts": 700.0,
                          "power_watts": round(CFG.power_cap_draw_ratio * 450.0 - 1, 1),
                          "power_limit_lowered": "yes"}),
     "a watt under it: the limit does not hold the GPU back"),
    (t.POWER_CAP, signals(busy_gpu(**CAPPED, utilization=0.2)), CFG,
     Verdict(True, {**SM_EV, "sm_clock_hertz": 1.6e9, "sw_power_cap_active": "yes",
                    "power_limit_watts": 450.0, "power_default_limit_watts": 700.0,
                    "power_watts": 600.0, "power_limit_lowered": "yes"}),
     "at 20 % utilization, drawing all its limit: capped at any load"),
    (t.POWER_CAP, signals(busy_gpu(**{**CAPPED, "throttle_reasons": None})), CFG, Verdict(None),
     "clock reasons unknown: not judged"),
    # --- heat ----------------------------------------------------------------------------
    (t.THERMAL, signals(busy_gpu(throttle_reasons=frozenset({"sw_thermal", "hw_slowdown",
                                                             "hw_thermal"}))), CFG,
     Verdict(True, {"gpu_utilization_ratio": BUSY, **SM_EV,
                    "thermal_reasons_active": "hw_thermal, sw_thermal", **TEMP_EV}),
     "every heat reason named, in order, the umbrella bit left out"),
    (t.THERMAL, signals(busy_gpu(throttle_reasons=None,
                                 temperature_celsius=89.0 - CFG.thermal_margin_celsius)), CFG,
     Verdict(True, {"gpu_utilization_ratio": BUSY, **SM_EV, "thermal_reasons_active": "none",
                    "temperature_celsius": 89.0 - CFG.thermal_margin_celsius,
                    "slowdown_threshold_celsius": 89.0}),
     "reasons unknown: exactly the margin below slowdown decides"),
    (t.THERMAL, signals(busy_gpu(temperature_celsius=89.0 - CFG.thermal_margin_celsius)), CFG,
     Verdict(False, {"gpu_utilization_ratio": BUSY, **SM_EV, "thermal_reasons_active": "none",
                     "temperature_celsius": 89.0 - CFG.thermal_margin_celsius,
                     "slowdown_threshold_celsius": 89.0}),
     "at the margin with full clocks and no reason: hot, not slowed"),
    (t.THERMAL, signals(busy_gpu(temperature_celsius=89.0 - CFG.thermal_margin_celsius,
                                 clocks_hz={"sm": 1.2e9})), CFG,
     Verdict(True, {"gpu_utilization_ratio": BUSY, "sm_clock_hertz": 1.2e9,
                    "sm_clock_max_hertz": 1.98e9, "thermal_reasons_active": "none",
                    "temperature_celsius": 89.0 - CFG.thermal_margin_celsius,
                    "slowdown_threshold_celsius": 89.0}),
     "at the margin with the clocks down"),
    (t.THERMAL, signals(busy_gpu(temperature_celsius=89.0 - CFG.thermal_margin_celsius - 0.1,
                                 clocks_hz={"sm": 1.2e9})),
     CFG, Verdict(False, {"gpu_utilization_ratio": BUSY, "sm_clock_hertz": 1.2e9,
                          "sm_clock_max_hertz": 1.98e9, "thermal_reasons_active": "none",
                          "temperature_celsius": 89.0 - CFG.thermal_margin_celsius - 0.1,
                          "slowdown_threshold_celsius": 89.0}),
     "just outside the margin, clocks down: not heat"),
    (t.THERMAL, signals(busy_gpu(throttle_reasons=frozenset({"hw_thermal"}),
                                 temperature_celsius=None, slowdown_celsius=None)), CFG,
     Verdict(True, {"gpu_utilization_ratio": BUSY, **SM_EV,
                    "thermal_reasons_active": "hw_thermal"}),
     "temperatures unknown: the reason alone decides"),
    (t.THERMAL, signals(busy_gpu(temperature_celsius=None, slowdown_celsius=88.0)), CFG,
     Verdict(False, {"gpu_utilization_ratio": BUSY, **SM_EV, "thermal_reasons_active": "none",
                     "slowdown_threshold_celsius": 88.0}),
     "temperature unknown and no heat reason"),
    (t.THERMAL, signals(busy_gpu(temperature_celsius=88.0, slowdown_celsius=None)), CFG,
     Verdict(False, {"gpu_utilization_ratio": BUSY, **SM_EV, "thermal_reasons_active": "none",
                     "temperature_celsius": 88.0}),
     "slowdown threshold unknown and no heat reason"),
    (t.THERMAL, signals(busy_gpu(throttle_reasons=None, temperature_celsius=None)), CFG,
     Verdict(None), "reasons and temperature unknown: not judged"),
    (t.THERMAL, signals(busy_gpu(throttle_reasons=None, slowdown_celsius=None)), CFG,
     Verdict(None), "reasons and slowdown threshold unknown: not judged"),
    (t.THERMAL, signals(busy_gpu(utilization=None, throttle_reasons=None,
                                 temperature_celsius=88.0)), CFG,
     Verdict(None), "neither utilization nor reasons: whether it has work is unknown"),
    (t.THERMAL, signals(busy_gpu(utilization=0.0, throttle_reasons=frozenset(
        {"gpu_idle", "sw_thermal"}))), CFG,
     Verdict(False, {"gpu_utilization_ratio": 0.0, **SM_EV, "thermal_reasons_active":
                     "sw_thermal", **TEMP_EV}), "no work (gpu_idle): nothing to slow"),
    # --- hardware slowdown, power brake ------------------------------------------------
    (t.HW_SLOWDOWN, signals(busy_gpu(throttle_reasons=frozenset({"hw_slowdown"}),
                                     clocks_hz={"sm": 9.9e8}, power_watts=712.34)), CFG,
     Verdict(True, {**SM_EV, "sm_clock_hertz": 9.9e8, "gpu_utilization_ratio": BUSY,
                    "hw_slowdown_active": "yes", **TEMP_EV, "power_watts": 712.3,
                    "power_limit_watts": 700.0}),
     "clocks, temperatures and power draw against the limit shown"),
    (t.HW_SLOWDOWN, signals(busy_gpu(throttle_reasons=frozenset(), power_watts=None,
                                     power_limit_watts=None)), CFG,
     Verdict(False, {**SM_EV, "gpu_utilization_ratio": BUSY, "hw_slowdown_active": "no",
                     **TEMP_EV}), "no slowdown; unknown power figures left out"),
    (t.HW_SLOWDOWN, signals(busy_gpu(utilization=IDLE,
                                     throttle_reasons=frozenset({"hw_slowdown"}))), CFG,
     Verdict(True, {**SM_EV, "gpu_utilization_ratio": IDLE, "hw_slowdown_active": "yes",
                    **TEMP_EV, "power_watts": 600.0, "power_limit_watts": 700.0}),
     "at 3 % utilization it has work to slow: judged"),
    (t.HW_SLOWDOWN, signals(busy_gpu(utilization=0.0, throttle_reasons=frozenset(
        {"hw_slowdown", "gpu_idle"}))), CFG,
     Verdict(False, {**SM_EV, "gpu_utilization_ratio": 0.0, "hw_slowdown_active": "yes",
                     **TEMP_EV, "power_watts": 600.0, "power_limit_watts": 700.0}),
     "no work (gpu_idle): nothing to slow"),
    (t.HW_SLOWDOWN, signals(busy_gpu(utilization=None)), CFG,
     Verdict(False, {**SM_EV, "hw_slowdown_active": "no", **TEMP_EV, "power_watts": 600.0,
                     "power_limit_watts": 700.0}),
     "utilization unknown: the reasons say it has work"),
    (t.POWER_BRAKE, signals(busy_gpu(throttle_reasons=frozenset({"hw_power_brake"}))), CFG,
     Verdict(True, {"gpu_utilization_ratio": BUSY, **SM_EV, "hw_power_brake_active": "yes"}),
     "the brake"),
    (t.POWER_BRAKE, signals(busy_gpu()), CFG,
     Verdict(False, {"gpu_utilization_ratio": BUSY, **SM_EV, "hw_power_brake_active": "no"}),
     "no brake"),
    (t.POWER_BRAKE, signals(busy_gpu(utilization=0.0, throttle_reasons=frozenset(
        {"hw_power_brake", "gpu_idle"}))), CFG,
     Verdict(False, {"gpu_utilization_ratio": 0.0, **SM_EV, "hw_power_brake_active": "yes"}),
     "no work (gpu_idle): nothing braked"),
    (t.POWER_BRAKE, signals(busy_gpu(throttle_reasons=None)), CFG, Verdict(None),
     "clock reasons unknown: not judged"),
    # --- application clocks ------------------------------------------------------------
    (t.APPLICATION_CLOCKS, signals(busy_gpu(clocks_application_hz={"sm": 1.2e9})), CFG,
     Verdict(True, {"application_sm_clock_hertz": 1.2e9,
                    "default_application_sm_clock_hertz": 1.755e9,
                    "gpu_utilization_ratio": BUSY, "sm_clock_max_hertz": 1.98e9}),
     "set below the default: both clocks and the maximum shown"),
    (t.APPLICATION_CLOCKS, signals(busy_gpu(clocks_application_hz={
        "sm": CFG.clock_below_max_ratio * 1.755e9}, clocks_max_hz={})), CFG,
     Verdict(False, {"application_sm_clock_hertz": CFG.clock_below_max_ratio * 1.755e9,
                     "default_application_sm_clock_hertz": 1.755e9,
                     "gpu_utilization_ratio": BUSY}),
     "exactly the below-default threshold; maximum unknown, left out"),
    (t.APPLICATION_CLOCKS, signals(busy_gpu(clocks_application_hz={
        "sm": CFG.clock_below_max_ratio * 1.755e9 - 1})), CFG,
     Verdict(True, {"application_sm_clock_hertz": CFG.clock_below_max_ratio * 1.755e9 - 1,
                    "default_application_sm_clock_hertz": 1.755e9,
                    "gpu_utilization_ratio": BUSY, "sm_clock_max_hertz": 1.98e9}),
     "a hertz below the threshold"),
    (t.APPLICATION_CLOCKS, signals(busy_gpu(utilization=0.0, throttle_reasons=frozenset(
        {"gpu_idle"}), clocks_application_hz={"sm": 1.2e9})), CFG,
     Verdict(False, {"application_sm_clock_hertz": 1.2e9,
                     "default_application_sm_clock_hertz": 1.755e9,
                     "gpu_utilization_ratio": 0.0, "sm_clock_max_hertz": 1.98e9}),
     "no work (gpu_idle): nothing held back"),
    (t.APPLICATION_CLOCKS, signals(busy_gpu(utilization=IDLE,
                                            clocks_application_hz={"sm": 1.2e9})), CFG,
     Verdict(True, {"application_sm_clock_hertz": 1.2e9,
                    "default_application_sm_clock_hertz": 1.755e9,
                    "gpu_utilization_ratio": IDLE, "sm_clock_max_hertz": 1.98e9}),
     "at 3 % utilization the work it has runs capped"),
    (t.APPLICATION_CLOCKS, signals(busy_gpu(clocks_application_hz={})), CFG, Verdict(None),
     "application clock unknown: not judged"),
    (t.APPLICATION_CLOCKS, signals(busy_gpu(clocks_application_default_hz={"sm": 0.0})), CFG,
     Verdict(None), "a default of 0 Hz means unknown: not judged"),
    (t.APPLICATION_CLOCKS, signals(busy_gpu(utilization=None, throttle_reasons=None)), CFG,
     Verdict(None), "neither utilization nor reasons: whether it has work is unknown"),
    # --- PCIe link -----------------------------------------------------------------------
    (t.PCIE_DOWNTRAINED, signals(busy_gpu(pcie_generation=4), pcie=PcieKernelView(
        upstream_width=16, upstream_width_max=16, upstream_generation=5,
        upstream_generation_max=5)), CFG,
     Verdict(True, {"pcie_link_width": 16, "pcie_link_width_max": 16,
                    "pcie_link_generation": 4, "pcie_link_generation_max": 5,
                    "gpu_utilization_ratio": BUSY, "upstream_link_width": 16,
                    "upstream_link_width_max": 16, "upstream_link_generation": 5,
                    "upstream_link_generation_max": 5}),
     "Gen4 of Gen5: the GPU's link and the switch port above it shown"),
    (t.PCIE_DOWNTRAINED, signals(pcie=PcieKernelView(upstream_generation=3,
                                                     upstream_generation_max=5)), CFG,
     Verdict(True, {"pcie_link_width": 16, "pcie_link_width_max": 16,
                    "pcie_link_generation": 5, "pcie_link_generation_max": 5,
                    "gpu_utilization_ratio": BUSY, "upstream_link_generation": 3,
                    "upstream_link_generation_max": 5}),
     "the switch port above trained at a lower generation"),
    (t.PCIE_DOWNTRAINED, signals(pcie=PcieKernelView(
        upstream_width=16, upstream_width_max=16, upstream_generation=5,
        upstream_generation_max=5)), CFG,
     Verdict(False, {"pcie_link_width": 16, "pcie_link_width_max": 16,
                     "pcie_link_generation": 5, "pcie_link_generation_max": 5,
                     "gpu_utilization_ratio": BUSY, "upstream_link_width": 16,
                     "upstream_link_width_max": 16, "upstream_link_generation": 5,
                     "upstream_link_generation_max": 5}),
     "both links at full width and generation: shown, and healthy"),
    (t.PCIE_DOWNTRAINED, signals(pcie=PcieKernelView(upstream_width=8, upstream_width_max=None,
                                                     upstream_generation=None,
                                                     upstream_generation_max=5)), CFG,
     Verdict(False, {"pcie_link_width": 16, "pcie_link_width_max": 16,
                     "pcie_link_generation": 5, "pcie_link_generation_max": 5,
                     "gpu_utilization_ratio": BUSY}),
     "half of an upstream figure known: not judged on it, not shown"),
    (t.PCIE_DOWNTRAINED, signals(pcie=None), CFG,
     Verdict(False, {"pcie_link_width": 16, "pcie_link_width_max": 16,
                     "pcie_link_generation": 5, "pcie_link_generation_max": 5,
                     "gpu_utilization_ratio": BUSY}),
     "no kernel view: the GPU's own link decides"),
    (t.PCIE_DOWNTRAINED, signals(busy_gpu(utilization=0.0, pcie_width=8, throttle_reasons=
                                          frozenset({"gpu_idle"}))), CFG,
     Verdict(True, {"pcie_link_width": 8, "pcie_link_width_max": 16,
                    "pcie_link_generation": 5, "pcie_link_generation_max": 5,
                    "gpu_utilization_ratio": 0.0}),
     "an idle GPU's narrow link: a width is never lowered to save power"),
    (t.PCIE_DOWNTRAINED, signals(busy_gpu(utilization=0.0, pcie_generation=1, throttle_reasons=
                                          frozenset({"gpu_idle"}))), CFG,
     Verdict(False, {"pcie_link_width": 16, "pcie_link_width_max": 16,
                     "pcie_link_generation": 1, "pcie_link_generation_max": 5,
                     "gpu_utilization_ratio": 0.0}),
     "an idle GPU lowers its generation on purpose"),
    (t.PCIE_DOWNTRAINED, signals(busy_gpu(utilization=None, throttle_reasons=None,
                                          pcie_generation=3)), CFG,
     Verdict(False, {"pcie_link_width": 16, "pcie_link_width_max": 16,
                     "pcie_link_generation": 3, "pcie_link_generation_max": 5}),
     "whether it has work unknown: a lower generation is not judged on its own"),
    *[(t.PCIE_DOWNTRAINED, signals(busy_gpu(**{field: None})), CFG, Verdict(None),
       f"{field} unknown: not judged")
      for field in ("pcie_width", "pcie_width_max", "pcie_generation", "pcie_generation_max")],
    # --- memory errors, Xid, lost, near full -----------------------------------------
    (t.ECC_UNCORRECTABLE, signals(busy_gpu(ecc_uncorrected_volatile=2.0)), CFG,
     Verdict(True, {"ecc_uncorrected_volatile_errors": 2.0, "row_remap_failed": "no"}),
     "two uncorrectable errors"),
    (t.ECC_UNCORRECTABLE, signals(busy_gpu(ecc_uncorrected_volatile=None, remap_failed=True)),
     CFG, Verdict(True, {"row_remap_failed": "yes"}), "remap failed; counter unknown"),
    (t.ECC_UNCORRECTABLE, signals(busy_gpu(remap_failed=None)), CFG,
     Verdict(False, {"ecc_uncorrected_volatile_errors": 0.0}), "clean; remap state unknown"),
    (t.ECC_UNCORRECTABLE, signals(busy_gpu(ecc_uncorrected_volatile=None, remap_failed=None)),
     CFG, Verdict(None), "neither known: not judged"),
    (t.ROW_REMAP_PENDING, signals(busy_gpu(remap_pending=True)), CFG,
     Verdict(True, {"row_remap_pending": "yes"}), "pending"),
    (t.ROW_REMAP_PENDING, signals(), CFG, Verdict(False, {"row_remap_pending": "no"}),
     "nothing pending"),
    (t.ROW_REMAP_PENDING, signals(busy_gpu(remap_pending=None)), CFG, Verdict(None),
     "unknown: not judged"),
    (t.XID, signals(xids=[(NOW - 60, 79, None), (NOW - 10, 31 + 1000, None),
                          (NOW - 30, 48, None), (NOW - CFG.xid_hold, 79, None),
                          (NOW - CFG.xid_hold - 1, 94, None)]), CFG,
     Verdict(True, {"xid": "48, 79", "xid_events_recent": 3}),
     "hardware Xids within the hold, each listed once, events counted; "
     "exactly at the hold still counts"),
    (t.XID, signals(xids=[]), CFG, Verdict(False), "no Xid"),
    (t.XID_APPLICATION, signals(xids=[(NOW - 60, 31, None), (NOW - 10, 79, None),
                                      (NOW - 30, 13, None), (NOW - 20, 31, None),
                                      (NOW - CFG.xid_hold - 1, 43, None)]), CFG,
     Verdict(True, {"xid": "13, 31", "xid_events_recent": 3}),
     "application Xids within the hold only; the hardware one is not the job's"),
    (t.XID_APPLICATION, signals(xids=[(NOW - 10, 79, None)]), CFG, Verdict(False),
     "only a hardware Xid"),
    (t.XID_APPLICATION, signals(xids=[(NOW - 10, 31, 2), (NOW - 20, 13, None)], mig=True,
                                gpu_instance=2), CFG,
     Verdict(True, {"xid": "31", "xid_events_recent": 1}),
     "a MIG instance's own Xid is its job's; one of the whole GPU is not"),
    (t.XID_APPLICATION, signals(xids=[(NOW - 10, 31, 2), (NOW - 20, 13, None)], mig=True), CFG,
     Verdict(True, {"xid": "13", "xid_events_recent": 1}),
     "on a split GPU itself only the Xid NVML names no instance for"),
    (t.XID_INFORMATIONAL, signals(xids=[(NOW - 60, 160, None), (NOW - 10, 1031, None),
                                        (NOW - 5, 13, None)]),
     CFG, Verdict(True, {"xid": "160, 1031", "xid_events_recent": 2}),
     "a listed informational code and one the table does not know"),
    (t.GPU_LOST, signals(busy_gpu(up=False)), CFG, Verdict(True, {"gpu_up": 0}), "lost"),
    (t.GPU_LOST, signals(), CFG, Verdict(False, {"gpu_up": 1}), "answers"),
    (t.MEMORY_NEAR_FULL, signals(busy_gpu(memory_used_bytes=0.961234 * TOTAL)), CFG,
     Verdict(True, {"gpu_memory_used_ratio": 0.9612}), "96 %, to four places"),
    (t.MEMORY_NEAR_FULL, signals(busy_gpu(memory_used_bytes=CFG.memory_near_full_ratio * TOTAL)),
     CFG, Verdict(False, {"gpu_memory_used_ratio": CFG.memory_near_full_ratio}),
     "exactly the threshold is not above it"),
    (t.MEMORY_NEAR_FULL, signals(busy_gpu(memory_used_bytes=None)), CFG, Verdict(None),
     "memory unknown: not judged"),
    # --- inflated utilization, persistence, NUMA ----------------------------------------
    (t.UTILIZATION_INFLATED, signals(sm_active=0.12345), CFG,
     Verdict(True, {"gpu_utilization_ratio": BUSY, "sm_active_ratio": 0.123}),
     "NVML busy, SMs mostly idle"),
    (t.UTILIZATION_INFLATED, signals(busy_gpu(utilization=CFG.inflated_utilization),
                                     sm_active=0.1), CFG,
     Verdict(False, {"gpu_utilization_ratio": CFG.inflated_utilization, "sm_active_ratio": 0.1}),
     "utilization exactly at its threshold is not above it"),
    (t.UTILIZATION_INFLATED, signals(sm_active=CFG.inflated_sm_active), CFG,
     Verdict(False, {"gpu_utilization_ratio": BUSY, "sm_active_ratio": CFG.inflated_sm_active}),
     "SM activity exactly at its threshold is not below it"),
    (t.UTILIZATION_INFLATED, signals(busy_gpu(utilization=None), sm_active=0.1), CFG,
     Verdict(None), "utilization unknown: not judged"),
    (t.PERSISTENCE_OFF, signals(busy_gpu(persistence_mode=False)), CFG,
     Verdict(True, {"persistence_mode": "off"}), "off"),
    (t.PERSISTENCE_OFF, signals(), CFG, Verdict(False, {"persistence_mode": "on"}), "on"),
    (t.PERSISTENCE_OFF, signals(busy_gpu(persistence_mode=None)), CFG, Verdict(None),
     "unknown: not judged"),
    (t.PERSISTENCE_OFF, signals(busy_gpu(persistence_mode=False)),
     with_cfg(expect_persistence=False), Verdict(None), "not expected on this node: not judged"),
    (t.NUMA_MISPLACED, signals(procs=[
        proc(pid=5, affinity_local=True), proc(pid=6, comm="loader", affinity_local=False,
                                               cpus_allowed="32-63"),
        proc(pid=7, comm="other", affinity_local=False, cpus_allowed="64-95")]), CFG,
     Verdict(True, {"gpu_local_cpus": "0-31", "process_pid": "6", "process_comm": "loader",
                    "process_cpus_allowed": "32-63"}),
     "the first misplaced process named beside the GPU's local CPUs"),
    (t.NUMA_MISPLACED, signals(procs=[proc(pid=6, affinity_local=False, cpus_allowed=None)],
                               pcie=None), CFG,
     Verdict(True, {"process_pid": "6", "process_comm": "python",
                    "process_cpus_allowed": "?"}),
     "allowed CPUs and the GPU's local CPUs unknown"),
    (t.NUMA_MISPLACED, signals(pcie=PcieKernelView(local_cpulist="")), CFG,
     Verdict(False, {}), "local; an empty local CPU list is not shown"),
    (t.NUMA_MISPLACED, signals(), CFG, Verdict(False, {"gpu_local_cpus": "0-31"}), "local"),
    (t.NUMA_MISPLACED, signals(procs=[proc(affinity_local=None)]), CFG, Verdict(None),
     "no process's affinity known: not judged"),
    # --- the driver's verdict ----------------------------------------------------------
    (t.RECOVERY_GPU_RESET, signals(busy_gpu(recovery_action="gpu_reset")), CFG,
     Verdict(True, {"recovery_action": "gpu_reset"}), "the driver asks for a reset"),
    (t.RECOVERY_NODE_REBOOT, signals(busy_gpu(recovery_action="gpu_reset")), CFG,
     Verdict(False, {"recovery_action": "gpu_reset"}), "a reset is not a reboot"),
    (t.RECOVERY_DRAIN_P2P, signals(busy_gpu(recovery_action="drain_p2p")), CFG,
     Verdict(True, {"recovery_action": "drain_p2p"}), "drain P2P"),
    (t.RECOVERY_DRAIN_AND_RESET, signals(busy_gpu(recovery_action=None)), CFG, Verdict(None),
     "a driver before R565 does not say: not judged"),
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_health="limited_capacity")), CFG,
     Verdict(True, {"fabric_state": "completed", "fabric_status": "SUCCESS",
                    "fabric_health": "limited_capacity"}), "limited capacity"),
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_status="NOT_READY", fabric_health=None)), CFG,
     Verdict(True, {"fabric_state": "completed", "fabric_status": "NOT_READY"}),
     "probe failed, no health summary before R580"),
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_state=None)), CFG, Verdict(None),
     "no fabric: not judged"),
    # --- the job's own cgroup --------------------------------------------------------
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.04,
                                                             io_pressure_some=0.06),
                                      workloads=(workload(io_pressure_some=0.45678),)), CFG,
     Verdict(True, {**held_ev(IDLE), "workload_io_pressure_some_ratio": 0.457,
                    "host_cpu_iowait_ratio": 0.04, "host_io_pressure_some_ratio": 0.06}),
     "the job's own I/O pressure first, the host's figures beside it"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(cpu_throttled_ratio=0.7, cpu_limit_cores=2.5),)), CFG,
     Verdict(True, {**held_ev(IDLE), "workload_cpu_throttled_ratio": 0.7,
                    "workload_cpu_limit_cores": 2.5, "host_cpu_pressure_some_ratio": 0.02}),
     "the throttled share and the limit, with the host's CPU pressure"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(BUSY), workloads=(workload(),)), CFG,
     Verdict(False, held_ev(BUSY)), "a busy GPU: cleared on the GPU's own figures"),
    (t.ALLOCATED_UNUSED, signals(busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[],
                                 owners=(POD,), allocations_known=True), CFG,
     Verdict(True, {"gpu_processes": 0, "gpu_utilization_ratio": 0.0,
                    "gpu_memory_used_ratio": 0.0}), "no process, idle, empty"),
    (t.ALLOCATED_UNUSED, signals(busy_gpu(utilization=None), procs=[], owners=(POD,),
                                 allocations_known=True, mig=True, gpu_instance=3,
                                 instance_memory=(0.0, 10 * GIB)), CFG,
     Verdict(True, {"gpu_processes": 0, "gpu_memory_used_ratio": 0.0}),
     "a MIG instance with no process and no memory, its activity unknown (no GPM)"),
    (t.ALLOCATED_RUNS_ON_CPU, signals(
        busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[], owners=(POD,),
        allocations_known=True, owner_cpu={POD: OwnerCpu(on_gpu=False, cpu_cores=6.004)}), CFG,
     Verdict(True, {"gpu_processes": 0, "gpu_utilization_ratio": 0.0,
                    "gpu_memory_used_ratio": 0.0, "owner": "ml/train-a/trainer",
                    "owner_cpu_cores": 6.0}), "the pod named, with the CPUs it keeps busy"),
    (t.ALLOCATED_RUNS_ON_CPU, signals(
        busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[], owners=(POD,),
        allocations_known=True, owner_cpu={POD: OwnerCpu(on_gpu=True)}), CFG,
     Verdict(False, {"gpu_processes": 0, "gpu_utilization_ratio": 0.0,
                     "gpu_memory_used_ratio": 0.0}), "its pod works on a GPU"),
    (t.UNDERFED_CPU_LIMIT_THROTTLED, signals(held(0.4), quiet_host(cpu_pressure_some=0.4),
                                             workloads=(workload(cpu_throttled_ratio=0.6),)),
     CFG, Verdict(True, {**held_ev(0.4), "workload_cpu_throttled_ratio": 0.6,
                         "workload_cpu_limit_cores": 4.0, "host_cpu_pressure_some_ratio": 0.4}),
     "at 40 %, throttled by its limit while the host is busy too: the limit"),
    (t.UNDERFED_CPU_LIMIT_THROTTLED, signals(held(0.4), workloads=(
        workload(cpu_throttled_ratio=CFG.cpu_throttled_high - 0.001),)), CFG,
     Verdict(False, {**held_ev(0.4), "workload_cpu_throttled_ratio": round(
         CFG.cpu_throttled_high - 0.001, 3), "workload_cpu_limit_cores": 4.0,
         "host_cpu_pressure_some_ratio": 0.02}), "just below the throttling threshold"),
    (t.IDLE_MEMORY_LIMIT_RECLAIM, signals(held(IDLE), workloads=(AT_LIMIT,)), CFG,
     Verdict(True, {**held_ev(IDLE), "workload_memory_used_bytes": 15.9 * GIB,
                    "workload_memory_limit_bytes": 16 * GIB,
                    "workload_memory_limit_hits_per_second": 40.0,
                    "workload_memory_reclaimed_bytes_per_second": 200 * MIB,
                    "workload_memory_pressure_some_ratio": 0.5}),
     "at its limit, hitting it, its cache reclaimed"),
    (t.IDLE_MEMORY_LIMIT_RECLAIM, signals(held(IDLE), workloads=(replace(
        AT_LIMIT, memory_used_bytes=CFG.memory_limit_used_ratio * 16 * GIB - 1),)), CFG,
     Verdict(False, {**held_ev(IDLE),
                     "workload_memory_used_bytes": CFG.memory_limit_used_ratio * 16 * GIB - 1,
                     "workload_memory_limit_bytes": 16 * GIB,
                     "workload_memory_limit_hits_per_second": 40.0,
                     "workload_memory_reclaimed_bytes_per_second": 200 * MIB,
                     "workload_memory_pressure_some_ratio": 0.5}),
     "a byte under the share of its limit that counts as at it"),
    (t.UNDERFED_MEMORY_LIMIT_RECLAIM, signals(held(0.3), workloads=(replace(
        AT_LIMIT, memory_limit_hits_per_s=0.0, memory_reclaimed_bytes_per_s=0.5 * MIB,
        memory_pressure_some=None),)), CFG,
     Verdict(False, {**held_ev(0.3), "workload_memory_used_bytes": 15.9 * GIB,
                     "workload_memory_limit_bytes": 16 * GIB,
                     "workload_memory_limit_hits_per_second": 0.0,
                     "workload_memory_reclaimed_bytes_per_second": 524288}),
     "at its limit with a trickle of reclaim and no hit: not held back by it"),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(IO_AT_LIMIT,)), CFG,
     Verdict(True, {**held_ev(IDLE), "workload_io_limit_used_ratio": 0.977,
                    "workload_io_limit_device": "259:0",
                    "workload_io_pressure_some_ratio": 0.6}),
     "its reads at its limit on the NVMe, stalled on I/O: the share, the device"),
    (t.UNDERFED_IO_LIMIT_THROTTLED, signals(held(0.3), workloads=(replace(
        IO_AT_LIMIT, io_limit_used_ratio=CFG.io_limit_used_ratio - 0.001,
        io_pressure_some=None),)), CFG,
     Verdict(False, {**held_ev(0.3), "workload_io_limit_used_ratio": round(
         CFG.io_limit_used_ratio - 0.001, 3), "workload_io_limit_device": "259:0"}),
     "just under the share of its limit that counts as at it, its pressure not read"),
    (t.IDLE_CPU_STEAL, signals(held(IDLE), quiet_host(steal_ratio=0.34567)), CFG,
     Verdict(True, {**held_ev(IDLE), "host_cpu_steal_ratio": 0.346}), "a third stolen"),
    (t.UNDERFED_CPU_STEAL, signals(held(0.5), quiet_host(steal_ratio=CFG.steal_high - 0.001)),
     CFG, Verdict(False, {**held_ev(0.5), "host_cpu_steal_ratio": round(CFG.steal_high - 0.001,
                                                                        3)}),
     "just under the steal threshold"),
    (t.MEMORY_BOUND, signals(sm_active=0.81234, dram_active=CFG.memory_bound_dram_active,
                             tensor_active=0.0504), CFG,
     Verdict(True, {"dram_active_ratio": CFG.memory_bound_dram_active,
                    "sm_active_ratio": 0.812, "tensor_active_ratio": 0.05}),
     "DRAM at the threshold holds; figures rounded to 3 places"),
    (t.MEMORY_BOUND, signals(sm_active=0.8, dram_active=CFG.memory_bound_dram_active - 0.001),
     CFG, Verdict(False, {"dram_active_ratio": round(CFG.memory_bound_dram_active - 0.001, 3),
                          "sm_active_ratio": 0.8}),
     "just under the DRAM threshold; no tensor figure, none shown"),
    (t.FAN_STOPPED, signals(busy_gpu(fan_speeds={0: 0.8512, 1: 0.0})), CFG,
     Verdict(True, {"fan_0_speed_ratio": 0.851, "fan_1_speed_ratio": 0.0, **TEMP_EV}),
     "one fan stopped, the other spinning: each fan shown"),
    (t.FAN_STOPPED, signals(busy_gpu(fan_speeds={0: 0.0}, temperature_celsius=58.9)), CFG,
     Verdict(False, {"fan_0_speed_ratio": 0.0, "temperature_celsius": 58.9,
                     "slowdown_threshold_celsius": 89.0}),
     "the only fan stopped on a GPU just under warm: a board's fans may rest"),
    (t.FAN_STOPPED, signals(busy_gpu(fan_speeds={0: 0.0}, temperature_celsius=59.0)), CFG,
     Verdict(True, {"fan_0_speed_ratio": 0.0, "temperature_celsius": 59.0,
                    "slowdown_threshold_celsius": 89.0}),
     "the only fan stopped on a warm GPU"),
]


@pytest.mark.parametrize(("row", "sig", "cfg", "expected", "why"), CASES,
                         ids=[f"{c[0].anchor}:{c[4]}" for c in CASES])
def test_rule_verdict_and_evidence(row: Row, sig: GpuSignals, cfg: DiagnosisConfig,
                                   expected: Verdict, why: str) -> None:
    got = verdict(row, sig, cfg)
    assert got.holds is expected.holds, why
    assert got.evidence == expected.evidence, why
    # Evidence types as exporters and JSON print them: numbers or words, never None.
    assert all(isinstance(v, (int, float, str)) and not isinstance(v, bool)
               for v in got.evidence.values()), got.evidence


def test_every_row_has_evidence_cases() -> None:
    # The counter rules' cases are below, and in tests/diagnosis/test_link_rules.py; the
    # came-back row reads the fault memory, its cases are in
    # tests/diagnosis/test_fault_memory.py; the rows judged on the window's readings
    # have theirs in tests/diagnosis/test_workload_rules.py, the network rows' in
    # tests/diagnosis/test_network_rules.py.
    assert {c[0] for c in CASES} | {t.PCIE_ERRORS, t.NVLINK_ERRORS, t.C2C_ERRORS,
                                    t.FAULT_CAME_BACK, t.MEMORY_FILLING,
                                    t.HOST_CPU_THERMAL, t.HOST_MEMORY_GROWTH,
                                    t.NIC_ACROSS_SOCKETS,
                                    t.RDMA_PORT_DEGRADED, t.RDMA_ERRORS} == set(ROWS)


# --- counters over the window ------------------------------------------------------------
PCIE_CASES: list[tuple[GpuSignals, dict[str, float], Verdict, str]] = [
    (signals(busy_gpu(pcie_replays=12.0), pcie=PcieKernelView(aer_correctable=3.0)),
     {"pcie_replays": 2.0, "aer_correctable": 3.0},
     Verdict(True, {"pcie_replays_in_window": 2.0, "aer_correctable_errors_in_window": 3.0}),
     "AER errors at the threshold, replays below: the larger decides"),
    (signals(busy_gpu(pcie_replays=12.0), pcie=PcieKernelView(aer_correctable=3.0)),
     {"pcie_replays": 3.0, "aer_correctable": 0.0},
     Verdict(True, {"pcie_replays_in_window": 3.0, "aer_correctable_errors_in_window": 0.0}),
     "replays at the threshold"),
    (signals(busy_gpu(pcie_replays=12.0), pcie=PcieKernelView(aer_correctable=3.0)),
     {"pcie_replays": 2.0, "aer_correctable": 2.0},
     Verdict(False, {"pcie_replays_in_window": 2.0, "aer_correctable_errors_in_window": 2.0}),
     "both a step below the threshold"),
    (signals(busy_gpu(pcie_replays=None), pcie=PcieKernelView(aer_correctable=3.0)),
     {"aer_correctable": 3.0}, Verdict(True, {"aer_correctable_errors_in_window": 3.0}),
     "no NVML replay counter: AER alone"),
    (signals(busy_gpu(pcie_replays=12.0), pcie=None), {"pcie_replays": 5.0},
     Verdict(True, {"pcie_replays_in_window": 5.0}), "no kernel view: replays alone"),
    (signals(busy_gpu(pcie_replays=None), pcie=None), {}, Verdict(None),
     "no counter at all: not judged"),
]


@pytest.mark.parametrize(("sig", "increases", "expected", "why"), PCIE_CASES,
                         ids=[c[3] for c in PCIE_CASES])
def test_pcie_errors_verdict_and_evidence(sig: GpuSignals, increases: dict[str, float],
                                          expected: Verdict, why: str) -> None:
    got = verdict(t.PCIE_ERRORS, sig, with_cfg(pcie_errors_per_window=3.0), increases)
    assert got.holds is expected.holds, why
    assert got.evidence == expected.evidence, why


def test_the_xid_hold_is_measured_from_now() -> None:
    sig = signals(xids=[(NOW - 60, 79, None)])
    assert verdict(t.XID, sig, now=NOW).holds is True
    assert verdict(t.XID, sig, now=NOW + CFG.xid_hold).holds is False


def test_the_configured_tiers_decide_who_is_told() -> None:
    sig = signals(xids=[(NOW - 60, 13, None)])
    assert verdict(t.XID, sig).holds is False
    assert verdict(t.XID_APPLICATION, sig).holds is True
    # A site that wants Xid 13 paged moves it to the hardware tier.
    moved = DiagnosisConfig(hardware_xids=(*CFG.hardware_xids, 13),
                            application_xids=tuple(x for x in CFG.application_xids if x != 13))
    assert verdict(t.XID, sig, moved).holds is True
    assert verdict(t.XID_APPLICATION, sig, moved).holds is False
    # Taken out of every list, it is informational.
    dropped = DiagnosisConfig(application_xids=(31,))
    assert verdict(t.XID_INFORMATIONAL, sig, dropped).holds is True


def test_an_xid_in_two_tiers_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="Xid 13 is in both hardware_xids and application_xids"):
        DiagnosisConfig(hardware_xids=(13, 79))


# --- every threshold the rules read comes from the configuration -------------------------
# (row, signals, the field, a value that turns the verdict around)
CONFIG_CASES: list[tuple[Row, GpuSignals, str, float]] = [
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.5), procs=[]),
     "memory_held_ratio", 0.8),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(0.05), quiet_host(iowait_ratio=0.5)),
     "idle_utilization", 0.04),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(0.4), quiet_host(iowait_ratio=0.5)),
     "busy_utilization", 0.3),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.5)),
     "iowait_high", 0.6),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), HostSignals(io_pressure_some=0.5)),
     "io_pressure_high", 0.6),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.5),
                                    [proc(run_queue_wait_ratio=None)]), "cpu_pressure_high", 0.6),
    (t.IDLE_CPU_CONTENTION, hostless(held(IDLE), [proc(run_queue_wait_ratio=0.5)]),
     "run_queue_wait_high", 0.6),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), HostSignals(swap_bytes_per_s=2 * MIB)),
     "swap_bytes_per_s", 4 * MIB),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), HostSignals(swap_bytes_per_s=2 * MIB),
                                   workloads=(workload(memory_pressure_some=0.05),)),
     "memory_pressure_full", 0.1),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[proc(state="S", cpu_ratio=0.04,
                                                             wakeups_per_s=0.0)]),
     "stalled_cpu_ratio", 0.01),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[proc(state="S", cpu_ratio=0.0,
                                                             wakeups_per_s=2.0)]),
     "stalled_wakeups_per_s", 1.0),
    (t.IDLE_MEMORY_LIMIT_RECLAIM, signals(held(IDLE), workloads=(AT_LIMIT,)),
     "memory_limit_used_ratio", 0.999),
    (t.IDLE_MEMORY_LIMIT_RECLAIM, signals(held(IDLE), workloads=(
        replace(AT_LIMIT, memory_limit_hits_per_s=0.0),)), "reclaim_bytes_per_s", 400 * MIB),
    (t.IDLE_CPU_STEAL, signals(held(IDLE), quiet_host(steal_ratio=0.2)), "steal_high", 0.3),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(IO_AT_LIMIT,)),
     "io_limit_used_ratio", 0.99),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(IO_AT_LIMIT,)),
     "io_pressure_high", 0.7),
    (t.POWER_CAP, signals(busy_gpu(**CAPPED, power_watts=420.0)), "power_cap_draw_ratio", 0.95),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(cpu_throttled_ratio=0.5),)), "cpu_throttled_high", 0.6),
    (t.FAN_STOPPED, signals(busy_gpu(fan_speeds={0: 0.005, 1: 0.5})), "fan_stopped_ratio",
     0.001),
    (t.FAN_STOPPED, signals(busy_gpu(fan_speeds={0: 0.0, 1: 0.15}, temperature_celsius=40.0)),
     "fan_spinning_ratio", 0.2),
    (t.FAN_STOPPED, signals(busy_gpu(fan_speeds={0: 0.0}, temperature_celsius=65.0)),
     "fan_warm_margin_celsius", 20.0),
    (t.BURSTY_INPUT, signals(util_samples=(0.05, 0.5, 0.95)), "burst_low", 0.01),
    (t.BURSTY_INPUT, signals(util_samples=(0.05, 0.5, 0.95)), "burst_high", 0.99),
    (t.POWER_CAP, signals(busy_gpu(**CAPPED)), "clock_below_max_ratio", 0.5),
    (t.APPLICATION_CLOCKS, signals(busy_gpu(clocks_application_hz={"sm": 1.6e9})),
     "clock_below_max_ratio", 0.9),
    (t.MEMORY_NEAR_FULL, signals(busy_gpu(memory_used_bytes=0.96 * TOTAL)),
     "memory_near_full_ratio", 0.97),
    (t.UTILIZATION_INFLATED, signals(sm_active=0.1), "inflated_utilization", 0.96),
    (t.UTILIZATION_INFLATED, signals(sm_active=0.1), "inflated_sm_active", 0.05),
]


@pytest.mark.parametrize(("row", "sig", "name", "value"), CONFIG_CASES,
                         ids=[f"{c[0].anchor}:{c[2]}" for c in CONFIG_CASES])
def test_each_threshold_follows_the_config(row: Row, sig: GpuSignals, name: str,
                                           value: float) -> None:
    assert verdict(row, sig).holds is True
    assert verdict(row, sig, with_cfg(**{name: value})).holds is False


# --- registration: one rule per row of the table ---------------------------------------
def _never(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    return Verdict(False)


def test_a_rule_registers_on_its_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(RULES, t.THERMAL)
    assert rule(t.THERMAL)(_never) is _never
    assert RULES[t.THERMAL] is _never


def test_registration_errors_name_the_row_and_both_rules() -> None:
    stray = replace(t.THERMAL, cause="thermla")
    with pytest.raises(ImportError, match=r"^rule for throttled_under_load/thermla, which is "
                       "not in the diagnosis table$"):
        rule(stray)(_never)
    first = RULES[t.THERMAL].__name__
    with pytest.raises(ImportError, match=rf"^two rules for throttled_under_load/thermal: "
                       f"{first}, _never$"):
        rule(t.THERMAL)(_never)


def test_a_row_without_a_rule_fails_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(RULES, t.XID)
    monkeypatch.delitem(RULES, t.GPU_LOST)
    with pytest.raises(ImportError, match=r"^diagnosis rows without a rule: "
                       "xid_error/driver_reported, gpu_lost/hardware$"):
        rules._check_every_row_has_a_rule()
