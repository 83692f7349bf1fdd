"""Each diagnosis rule on its own, signals in and verdict out: one table of cases
per rule, with the thresholds' edges on both sides, and the causal precedence
between rows as plain data in, roots out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.precedence import PRECEDENCE, Candidate, resolve
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.poll.readings import GpuOwner, HostSignals, OwnerCpu, PcieKernelView
from gpu_exporter.settings.thresholds import DiagnosisConfig
from tests.rule_signals import (
    GIB,
    MIB,
    NOW,
    POD,
    busy_gpu,
    held,
    judge,
    proc,
    quiet_host,
    signals,
    workload,
)

IDLE, UNDERFED, BUSY = 0.03, 0.15, 0.95
# A container at its 16 GiB memory limit, hitting it and reclaiming its cache.
AT_LIMIT = workload(memory_limit_bytes=16 * GIB, memory_used_bytes=15.9 * GIB,
                    memory_limit_hits_per_s=40.0, memory_reclaimed_bytes_per_s=200 * MIB,
                    memory_pressure_some=0.5)
# A container whose reads run at its io.max limit on a device, stalled on I/O.
IO_AT_LIMIT = workload(io_limited=True, io_limit_used_ratio=0.98, io_limit_device="259:0",
                       io_pressure_some=0.6)
# Asleep, on no CPU, never waking: stuck.
STALLED = proc(state="S", cpu_ratio=0.001, sm_utilization=0.0, wakeups_per_s=0.0)

# (row, signals, expected verdict, why)
CASES: list[tuple[Row, GpuSignals, bool | None, str]] = [
    # --- storage -------------------------------------------------------------
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.35)), True,
     "iowait alone (no PSI figure) decides"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.35,
                                                             io_pressure_some=None)), True,
     "no /proc/pressure: iowait still decides"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(io_pressure_some=0.25)), True,
     "I/O pressure alone decides"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.19,
                                                             io_pressure_some=0.19)), False,
     "both just below their thresholds"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.20)), True,
     "iowait exactly at its threshold"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(BUSY), quiet_host(iowait_ratio=0.5)), False,
     "a busy GPU is not starved, whatever the host waits on"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE, memory_used_bytes=10 * GIB),
                                      quiet_host(iowait_ratio=0.5), procs=[]), False,
     "no process and little memory: nothing is running on the GPU"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE, memory_used_bytes=10 * GIB),
                                      quiet_host(iowait_ratio=0.5)), True,
     "a job holding little memory is a job all the same: judged"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), procs=[proc(state="D", cpu_ratio=0.0)]),
     True, "its process blocked in D on its reads: its own evidence, on a quiet host"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), procs=[proc(state="D", cpu_ratio=0.0)],
                                      workloads=(workload(io_pressure_some=0.01),)), False,
     "in D while its own cgroup shows no I/O stall: blocked on something else"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(UNDERFED), quiet_host(iowait_ratio=0.5)), False,
     "15 % is under-fed, not idle"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), HostSignals()), None,
     "no host figures at all: not judged"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(UNDERFED), quiet_host(iowait_ratio=0.35)), True,
     "under-fed and waiting on storage"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(0.74), quiet_host(iowait_ratio=0.35)), True,
     "just below busy: a starved GPU may work most of the time"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(0.75), quiet_host(iowait_ratio=0.35)), False,
     "at the busy threshold the GPU is fed"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(UNDERFED), quiet_host()), False,
     "near miss: under-fed with no host-side cause"),
    (t.UNDERFED_DATA_PIPELINE_IO, signals(held(UNDERFED, memory_used_bytes=30 * GIB),
                                          quiet_host(iowait_ratio=0.35), procs=[]), False,
     "near miss: no process and 37.5 % memory used is not held"),
    # --- CPU -----------------------------------------------------------------
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.6),
                                    [proc(run_queue_wait_ratio=0.5)]), True,
     "pressure and the process's own run-queue wait"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.6),
                                    [proc(run_queue_wait_ratio=0.1)]), False,
     "host pressure, but the GPU's process is not waiting: not its cause"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.6),
                                    [proc(run_queue_wait_ratio=None)]), True,
     "no schedstat: pressure alone decides"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=None),
                                    [proc(run_queue_wait_ratio=0.5)]), True,
     "no PSI: the process's run-queue wait decides"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.29),
                                    [proc(run_queue_wait_ratio=0.5)]), True,
     "its own run-queue wait decides: the host's pressure is not needed"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.29),
                                    [proc(run_queue_wait_ratio=None)]), False,
     "no own measure: the host's pressure just below its threshold"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=None),
                                    [proc(run_queue_wait_ratio=None)]), None,
     "neither PSI nor schedstat: not judged"),
    (t.UNDERFED_CPU_CONTENTION, signals(held(UNDERFED), quiet_host(cpu_pressure_some=0.6),
                                        [proc(run_queue_wait_ratio=0.5)]), True,
     "a GPU at 15 % whose process waits half the time on the run queue"),
    (t.UNDERFED_CPU_CONTENTION, signals(held(UNDERFED), quiet_host(cpu_pressure_some=0.6),
                                        [proc(run_queue_wait_ratio=0.29)]), False,
     "run-queue wait just below its threshold"),
    # --- swapping ------------------------------------------------------------
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), quiet_host(swap_bytes_per_s=2 * MIB,
                                                          memory_pressure_full=None)), True,
     "swap rate alone (no PSI) decides"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), quiet_host(swap_bytes_per_s=0.5 * MIB)), False,
     "a trickle of swap is not swapping"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), quiet_host(memory_pressure_full=0.05)), False,
     "memory pressure without swap traffic is not swapping"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), quiet_host(swap_bytes_per_s=None)), None,
     "no swap counters: swapping cannot be told"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), quiet_host(swap_bytes_per_s=50 * MIB),
                                   workloads=(workload(memory_pressure_some=0.0),)), False,
     "the host swaps but the job's own cgroup never waits on memory"),
    (t.UNDERFED_HOST_SWAPPING, signals(held(0.3), quiet_host(swap_bytes_per_s=20 * MIB)), True,
     "a GPU at 30 % on a swapping host"),
    (t.UNDERFED_HOST_SWAPPING, signals(held(0.3), quiet_host(swap_bytes_per_s=0.9 * MIB)),
     False, "swap just below its threshold"),
    # --- a stalled process ---------------------------------------------------
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[STALLED]), True,
     "sleeping with no CPU while its GPU holds memory"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[proc(state="R", cpu_ratio=0.9)]), False,
     "running on the CPU: working, perhaps CPU-bound, not stalled"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[replace(STALLED, cpu_ratio=0.06)]),
     False, "6 % of a CPU is above the stalled threshold"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), quiet_host(iowait_ratio=0.5), [STALLED]), True,
     "judged on its own: the host cause is precedence's business"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[replace(STALLED, cpu_ratio=0.02,
                                                               wakeups_per_s=20.0)]), False,
     "asleep but waking 20 times a second: an idle server waits for work"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[replace(STALLED, wakeups_per_s=2.9)]),
     True, "waking under 3 times a second, on no CPU: stuck"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[replace(STALLED, state="D")]), False,
     "blocked in the kernel (D): waiting on I/O, the storage rows' business"),
    (t.IDLE_PROCESS_STALLED, signals(held(IDLE), procs=[replace(STALLED, wakeups_per_s=None)]),
     None, "the first read of a process: its wake-ups are not known yet"),
    # --- bursty input --------------------------------------------------------
    (t.BURSTY_INPUT, signals(util_samples=(0.0, 0.45, 1.0)), True, "swings 0 -> 100 %"),
    (t.BURSTY_INPUT, signals(util_samples=(0.2, 0.5, 1.0)), False, "never near idle"),
    (t.BURSTY_INPUT, signals(util_samples=None), None, "no samples: not judged"),
    # --- throttling ----------------------------------------------------------
    (t.POWER_CAP, signals(busy_gpu(throttle_reasons=frozenset({"sw_power_cap"}),
                                   power_limit_watts=450.0, clocks_hz={"sm": 1.6e9})), True,
     "busy, capped below the default limit, clocks down"),
    (t.POWER_CAP, signals(busy_gpu(throttle_reasons=frozenset({"sw_power_cap"}),
                                   clocks_hz={"sm": 1.6e9})), False,
     "at the default limit a power-bound GPU works as designed"),
    (t.POWER_CAP, signals(busy_gpu(utilization=0.0, throttle_reasons=frozenset(
        {"sw_power_cap", "gpu_idle"}), power_limit_watts=450.0, power_watts=72.0,
        clocks_hz={"sm": 3.45e8})), False,
     "an idle GPU far under its limit is not held back by it"),
    (t.POWER_CAP, signals(busy_gpu(utilization=0.3, throttle_reasons=frozenset(
        {"sw_power_cap"}), power_limit_watts=250.0, power_watts=249.0,
        clocks_hz={"sm": 1.2e9})), True,
     "at 30 % utilization a GPU drawing all of a lowered limit is capped"),
    (t.THERMAL, signals(busy_gpu(throttle_reasons=frozenset({"hw_slowdown", "hw_thermal"}))),
     True, "hw_thermal names heat"),
    (t.THERMAL, signals(busy_gpu(throttle_reasons=frozenset({"sw_thermal"}))), True,
     "sw_thermal names heat"),
    (t.THERMAL, signals(busy_gpu(throttle_reasons=frozenset({"hw_slowdown"}))), False,
     "hw_slowdown alone does not name heat"),
    (t.THERMAL, signals(busy_gpu(throttle_reasons=frozenset({"hw_slowdown", "hw_power_brake"}))),
     False, "the power brake with normal temperatures is not thermal"),
    (t.THERMAL, signals(busy_gpu(temperature_celsius=86.0)), False,
     "3 °C below its slowdown threshold but at full clocks, no reason: hot, not slowed"),
    (t.THERMAL, signals(busy_gpu(temperature_celsius=86.0, clocks_hz={"sm": 1.3e9})), True,
     "3 °C below its slowdown threshold with the clocks down"),
    (t.THERMAL, signals(busy_gpu(temperature_celsius=86.0, throttle_reasons=None)), True,
     "no reasons to read: the temperature at the margin speaks"),
    (t.THERMAL, signals(busy_gpu(utilization=0.2, throttle_reasons=frozenset({"sw_thermal"}))),
     True, "a thermal reason at 20 % utilization: heat slows what work there is"),
    (t.THERMAL, signals(busy_gpu(temperature_celsius=84.0)), False,
     "5 °C below it: warm, not throttling"),
    (t.THERMAL, signals(busy_gpu(utilization=0.0, temperature_celsius=88.0,
                                 throttle_reasons=frozenset({"gpu_idle", "sw_thermal"}))),
     False, "an idle GPU has no work for heat to slow"),
    (t.POWER_BRAKE, signals(busy_gpu(throttle_reasons=frozenset({"hw_slowdown",
                                                                 "hw_power_brake"}))), True,
     "hw_power_brake"),
    (t.POWER_BRAKE, signals(busy_gpu(throttle_reasons=frozenset({"hw_slowdown"}))), False,
     "hw_slowdown alone does not name the brake"),
    (t.HW_SLOWDOWN, signals(busy_gpu(throttle_reasons=frozenset({"hw_slowdown"}))), True,
     "the umbrella bit alone is its own evidence"),
    (t.HW_SLOWDOWN, signals(busy_gpu(throttle_reasons=frozenset({"sw_power_cap"}))), False,
     "a software power cap is not a hardware slowdown"),
    (t.HW_SLOWDOWN, signals(busy_gpu(throttle_reasons=None)), None,
     "reasons unknown: not judged"),
    (t.APPLICATION_CLOCKS, signals(busy_gpu(clocks_application_hz={"sm": 1.2e9})), True,
     "application clock set below the default"),
    (t.APPLICATION_CLOCKS, signals(busy_gpu(clocks_application_hz={"sm": 1.98e9})), False,
     "above the default is GPU Boost headroom, not a cap"),
    # --- PCIe ----------------------------------------------------------------
    (t.PCIE_DOWNTRAINED, signals(busy_gpu(pcie_width=8)), True, "x8 of x16 under load"),
    (t.PCIE_DOWNTRAINED, signals(busy_gpu(utilization=0.0, pcie_generation=1,
                                          throttle_reasons=frozenset({"gpu_idle"})),), False,
     "an idle link at Gen1 saves power"),
    (t.PCIE_DOWNTRAINED, signals(busy_gpu(utilization=0.0, pcie_generation=1, pcie_width=4,
                                          throttle_reasons=frozenset({"gpu_idle"})),), True,
     "an idle GPU's link at x4: a width is never lowered to save power"),
    (t.PCIE_DOWNTRAINED, signals(busy_gpu(utilization=0.3, pcie_generation=3)), True,
     "Gen3 of Gen5 at 30 % utilization: judged whenever the GPU has work"),
    (t.PCIE_DOWNTRAINED, signals(pcie=PcieKernelView(upstream_width=8, upstream_width_max=16)),
     True, "the switch port above runs narrower"),
    (t.PCIE_ERRORS, signals(), False, "no replays in the window"),
    # --- memory, Xid, lost ---------------------------------------------------
    (t.ECC_UNCORRECTABLE, signals(busy_gpu(ecc_uncorrected_volatile=1.0)), True, "one DBE"),
    (t.ECC_UNCORRECTABLE, signals(busy_gpu(remap_failed=True)), True, "out of spare rows"),
    (t.ECC_UNCORRECTABLE, signals(), False, "clean"),
    (t.ROW_REMAP_PENDING, signals(busy_gpu(remap_pending=True)), True, "pending"),
    (t.ROW_REMAP_PENDING, signals(), False, "nothing pending"),
    (t.XID, signals(xids=[(NOW - 300, 79, None)]), True, "a hardware Xid 5 minutes ago"),
    (t.XID, signals(xids=[(NOW - 899, 48, None)]), True, "just inside the 15-minute hold"),
    (t.XID, signals(xids=[(NOW - 901, 48, None)]), False, "just outside the 15-minute hold"),
    (t.XID, signals(xids=[(NOW - 10, 31 + 1000, None)]), False, "a code the table does not list"),
    (t.XID, signals(xids=[(NOW - 10, 13, None)]), False, "an application Xid never pages"),
    (t.XID, signals(xids=[(NOW - 10, 160, None)]), False, "an informational Xid never pages"),
    (t.XID_APPLICATION, signals(xids=[(NOW - 10, 31, None)]), True,
     "an illegal address in the job"),
    (t.XID_APPLICATION, signals(xids=[(NOW - 899, 13, None)]), True, "just inside the hold"),
    (t.XID_APPLICATION, signals(xids=[(NOW - 901, 13, None)]), False, "just outside the hold"),
    (t.XID_APPLICATION, signals(xids=[(NOW - 10, 79, None)]), False,
     "a hardware Xid is not the job's"),
    (t.XID_INFORMATIONAL, signals(xids=[(NOW - 10, 160, None)]), True,
     "a channel retirement event"),
    (t.XID_INFORMATIONAL, signals(xids=[(NOW - 10, 1031, None)]), True,
     "a code the table does not list is reported, paging no one"),
    (t.XID_INFORMATIONAL, signals(xids=[(NOW - 10, 48, None)]), False, "a hardware Xid"),
    (t.XID_INFORMATIONAL, signals(xids=[(NOW - 10, 45, None)]), False, "an application Xid"),
    (t.GPU_LOST, signals(busy_gpu(up=False)), True, "NVML cannot reach it"),
    (t.GPU_LOST, signals(), False, "answers"),
    (t.MEMORY_NEAR_FULL, signals(busy_gpu(memory_used_bytes=0.96 * 80 * GIB)), True, "96 %"),
    (t.MEMORY_NEAR_FULL, signals(busy_gpu(memory_used_bytes=0.94 * 80 * GIB)), False, "94 %"),
    (t.UTILIZATION_INFLATED, signals(sm_active=0.1), True, "busy by NVML, SMs mostly idle"),
    (t.UTILIZATION_INFLATED, signals(sm_active=None), None, "no GPM: not judged"),
    (t.UTILIZATION_INFLATED, signals(sm_active=0.8), False, "busy and the SMs are busy"),
    (t.MEMORY_BOUND, signals(sm_active=0.8, dram_active=0.9, tensor_active=0.05), True,
     "DRAM near saturation while the SMs work and the tensor pipes wait"),
    (t.MEMORY_BOUND, signals(sm_active=0.8, dram_active=0.9), True,
     "no tensor figure: DRAM and SMs decide"),
    (t.MEMORY_BOUND, signals(sm_active=0.8, dram_active=0.4, tensor_active=0.05), False,
     "DRAM bandwidth to spare"),
    (t.MEMORY_BOUND, signals(sm_active=None, dram_active=None), None, "no GPM: not judged"),
    (t.PERSISTENCE_OFF, signals(busy_gpu(persistence_mode=False)), True, "off"),
    (t.PERSISTENCE_OFF, signals(), False, "on"),
    (t.NUMA_MISPLACED, signals(procs=[proc(affinity_local=False, cpus_allowed="32-63")]), True,
     "pinned to the other socket"),
    (t.NUMA_MISPLACED, signals(), False, "local"),
    # --- the driver's verdict ------------------------------------------------
    *[case for row, action in ((t.RECOVERY_GPU_RESET, "gpu_reset"),
                               (t.RECOVERY_NODE_REBOOT, "node_reboot"),
                               (t.RECOVERY_DRAIN_P2P, "drain_p2p"),
                               (t.RECOVERY_DRAIN_AND_RESET, "drain_and_reset"))
      for case in ((row, signals(busy_gpu(recovery_action=action)), True, "the driver says so"),
                   (row, signals(), False, "the driver says none"),
                   (row, signals(busy_gpu(recovery_action="node_reboot" if action != "node_reboot"
                                          else "gpu_reset")), False, "another action"),
                   (row, signals(busy_gpu(recovery_action=None)), None,
                    "a driver before R565: not judged"))],
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_health="unhealthy")), True, "unhealthy"),
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_health="limited_capacity")), True,
     "limited capacity"),
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_state="in_progress")), True,
     "probe not completed"),
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_status="UNKNOWN", fabric_health=None)), True,
     "completed with an error, before R580"),
    (t.FABRIC_DEGRADED, signals(), False, "registered and healthy"),
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_health=None)), False,
     "registered, no health summary before R580"),
    (t.FABRIC_DEGRADED, signals(busy_gpu(fabric_state=None)), None,
     "no NVSwitch fabric: not judged"),
    # --- the job's own cgroup judges before the host ---------------------------
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.01),
                                      workloads=(workload(io_pressure_some=0.45),)), True,
     "the job starves on its own reads while the host's iowait is low"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.5),
                                      workloads=(workload(io_pressure_some=0.02),)), False,
     "a neighbour's reads raise the host's iowait: not this job's cause"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), None,
                                      workloads=(workload(io_pressure_some=0.2),)), True,
     "no host view: the job's own pressure at the threshold decides"),
    (t.IDLE_DATA_PIPELINE_IO, signals(held(IDLE), quiet_host(iowait_ratio=0.5),
                                      workloads=(workload(io_pressure_some=None),)), True,
     "the job's cgroup has no io.pressure: the host judges"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.05),
                                    [proc(run_queue_wait_ratio=0.5)],
                                    workloads=(workload(cpu_pressure_some=0.5),)), True,
     "the job's own CPU pressure and run-queue wait, the host's low"),
    (t.IDLE_CPU_CONTENTION, signals(held(IDLE), quiet_host(cpu_pressure_some=0.6),
                                    [proc(run_queue_wait_ratio=0.5)],
                                    workloads=(workload(cpu_pressure_some=0.05),)), False,
     "the host is busy but this job is not short of CPU"),
    (t.IDLE_HOST_SWAPPING, signals(held(IDLE), quiet_host(memory_pressure_full=0.0),
                                   workloads=(workload(memory_pressure_full=0.1),)), False,
     "the job stalls on its own memory with no swap traffic: its limit, not swapping "
     "(the memory limit rows judge it)"),
    # --- the container's CPU limit ---------------------------------------------
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(cpu_throttled_ratio=0.6),)), True, "throttled in 60 % of periods, host idle"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(cpu_throttled_ratio=0.25),)), True, "at the threshold"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(cpu_throttled_ratio=0.24),)), False, "just below the threshold"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(BUSY), workloads=(
        workload(cpu_throttled_ratio=0.9),)), False, "throttled but the GPU is busy"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), quiet_host(cpu_pressure_some=0.5),
                                         workloads=(workload(cpu_throttled_ratio=0.9),)),
     True, "throttled by its own limit: the limit names the cause whatever the host's "
     "pressure (a short host is contention on top)"),
    (t.UNDERFED_CPU_LIMIT_THROTTLED, signals(held(0.2), workloads=(
        workload(cpu_throttled_ratio=0.6),)), True, "at 20 % the limit still holds it back"),
    (t.UNDERFED_CPU_LIMIT_THROTTLED, signals(held(0.2), workloads=(
        workload(cpu_throttled_ratio=0.1),)), False, "touching its limit now and then"),
    # --- the workload's I/O limit (io.max) ----------------------------------------
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(IO_AT_LIMIT,)), True,
     "its reads run at its io.max limit and it stalls on I/O"),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        replace(IO_AT_LIMIT, io_limit_used_ratio=0.9),)), True, "at the threshold"),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        replace(IO_AT_LIMIT, io_limit_used_ratio=0.89),)), False, "just below the threshold"),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        replace(IO_AT_LIMIT, io_limit_used_ratio=0.1),)), False,
     "a limit far from reached while it stalls on I/O: slow storage, not the limit"),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        replace(IO_AT_LIMIT, io_pressure_some=0.05),)), False,
     "at its limit but not stalled on I/O: the limit does not hold it back"),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(BUSY), workloads=(IO_AT_LIMIT,)), False,
     "at its limit but the GPU is busy"),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(io_limited=False, io_pressure_some=0.8),)), False,
     "io.max \"max\" everywhere: no limit to hit, the storage rows judge"),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(io_pressure_some=0.8),)), None, "io.max not read: not judged"),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        replace(IO_AT_LIMIT, io_limit_used_ratio=None),)), None,
     "limited, but its I/O is read once: not judged yet"),
    (t.IDLE_IO_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(io_limited=False), replace(IO_AT_LIMIT, container_id="b"))), True,
     "two containers on one GPU: the one at its limit decides"),
    (t.UNDERFED_IO_LIMIT_THROTTLED, signals(held(0.2), workloads=(IO_AT_LIMIT,)), True,
     "at 20 % the limit still holds it back"),
    (t.UNDERFED_IO_LIMIT_THROTTLED, signals(held(0.2), workloads=(
        replace(IO_AT_LIMIT, io_limit_used_ratio=0.3),)), False, "far from its limit"),
    # --- the workload's memory limit ---------------------------------------------
    (t.IDLE_MEMORY_LIMIT_RECLAIM, signals(held(IDLE), workloads=(AT_LIMIT,)), True,
     "at its limit, hitting it and reclaiming its page cache; nothing swaps"),
    (t.IDLE_MEMORY_LIMIT_RECLAIM, signals(held(IDLE), workloads=(
        replace(AT_LIMIT, memory_used_bytes=14 * GIB, memory_limit_hits_per_s=0.0,
                memory_reclaimed_bytes_per_s=0.0),)), False,
     "87.5 % of its limit, no reclaim: full, not short"),
    (t.IDLE_MEMORY_LIMIT_RECLAIM, signals(held(IDLE), workloads=(
        replace(AT_LIMIT, memory_limit_hits_per_s=None, memory_reclaimed_bytes_per_s=None),)),
     None, "the first read: no rates yet"),
    (t.IDLE_MEMORY_LIMIT_RECLAIM, signals(held(IDLE)), None, "no memory limit read"),
    (t.UNDERFED_MEMORY_LIMIT_RECLAIM, signals(held(0.4), workloads=(
        replace(AT_LIMIT, memory_limit_hits_per_s=0.0),)), True,
     "reclaiming at its limit without a counted hit"),
    (t.UNDERFED_MEMORY_LIMIT_RECLAIM, signals(held(0.9), workloads=(AT_LIMIT,)), False,
     "a busy GPU is not starved"),
    # --- a VM's stolen CPUs ---------------------------------------------------------
    (t.IDLE_CPU_STEAL, signals(held(IDLE), quiet_host(steal_ratio=0.4)), True,
     "the hypervisor takes 40 % of the CPU time"),
    (t.IDLE_CPU_STEAL, signals(held(IDLE), quiet_host(steal_ratio=0.03)), False,
     "a little steal"),
    (t.IDLE_CPU_STEAL, signals(held(IDLE), quiet_host(steal_ratio=None)), None,
     "no steal figure"),
    (t.UNDERFED_CPU_STEAL, signals(held(0.4), quiet_host(steal_ratio=0.3)), True,
     "at 40 % with 30 % stolen"),
    (t.UNDERFED_CPU_STEAL, signals(held(0.9), quiet_host(steal_ratio=0.3)), False,
     "busy: fed despite the steal"),
    # --- fans -------------------------------------------------------------------------
    (t.FAN_STOPPED, signals(busy_gpu(fan_speeds={0: 0.85, 1: 0.0})), True,
     "one fan at 0 % while the other spins"),
    (t.FAN_STOPPED, signals(busy_gpu(fan_speeds={0: 0.0}, temperature_celsius=84.0)), True,
     "the only fan at 0 % on a hot GPU"),
    (t.FAN_STOPPED, signals(busy_gpu(utilization=0.0, fan_speeds={0: 0.0, 1: 0.0},
                                     temperature_celsius=35.0)), False,
     "a cool idle board's fans stopped on purpose (zero-RPM)"),
    (t.FAN_STOPPED, signals(busy_gpu(fan_speeds={0: 0.6, 1: 0.6})), False, "both turning"),
    (t.FAN_STOPPED, signals(busy_gpu(fan_speeds={})), None, "no fan: cooled by the chassis"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(cpu_throttled_ratio=None, cpu_limit_cores=None),)), None,
     "no CPU limit: not judged"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE)), None, "no workload cgroup: not judged"),
    (t.IDLE_CPU_LIMIT_THROTTLED, signals(held(IDLE), workloads=(
        workload(cpu_throttled_ratio=0.0), workload(container_id="b", cpu_throttled_ratio=0.7))),
     True, "two containers on one GPU: the throttled one decides"),
    # --- an allocated GPU nobody uses --------------------------------------------
    (t.ALLOCATED_UNUSED, signals(busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[],
                                 owners=(POD,), allocations_known=True), True,
     "allocated, no process, idle, empty"),
    (t.ALLOCATED_UNUSED, signals(busy_gpu(utilization=0.0, memory_used_bytes=0.0),
                                 owners=(POD,), allocations_known=True), False,
     "a process holds a context on it"),
    (t.ALLOCATED_UNUSED, signals(busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[],
                                 owners=(), allocations_known=True), False,
     "not allocated: a free GPU idling is fine"),
    (t.ALLOCATED_UNUSED, signals(held(IDLE), procs=[], owners=(POD,), allocations_known=True),
     False, "memory held with no process listed: one the exporter cannot see"),
    (t.ALLOCATED_UNUSED, signals(busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[],
                                 owners=(POD,), allocations_known=False), None,
     "the kubelet never answered: not judged"),
    (t.ALLOCATED_UNUSED, signals(busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[],
                                 owners=(GpuOwner(slurm_job_id="4242"),),
                                 allocations_known=True), False,
     "a Slurm job is known only through its processes: never without one"),
    # --- an allocated GPU whose pod runs its code on the CPU ---------------------
    (t.ALLOCATED_RUNS_ON_CPU, signals(
        busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[], owners=(POD,),
        allocations_known=True, owner_cpu={POD: OwnerCpu(on_gpu=False, cpu_cores=6.0)}), True,
     "allocated, nothing on it, its pod busy on the CPU"),
    (t.ALLOCATED_RUNS_ON_CPU, signals(
        busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[], owners=(POD,),
        allocations_known=True, owner_cpu={POD: OwnerCpu(on_gpu=False, cpu_cores=0.02)}),
     False, "its pod idle: only allocated and unused"),
    (t.ALLOCATED_RUNS_ON_CPU, signals(
        busy_gpu(utilization=0.0, memory_used_bytes=0.0), procs=[], owners=(POD,),
        allocations_known=True), None, "its pod not placed: not judged"),
]


@pytest.mark.parametrize(("row", "sig", "expected", "why"), CASES,
                         ids=[f"{c[0].anchor}:{c[3]}" for c in CASES])
def test_rule_verdict(row: Row, sig: GpuSignals, expected: bool | None, why: str) -> None:
    assert judge(row, sig) is expected, why


def test_every_row_has_direct_cases_both_ways() -> None:
    seen: dict[Row, set[bool | None]] = {}
    for row, _, expected, _ in CASES:
        seen.setdefault(row, set()).add(expected)
    for row in ROWS:
        if row is t.PCIE_ERRORS:
            continue  # a counter rule: see test_pcie_errors_count_within_the_window
        if row in (t.NVLINK_ERRORS, t.C2C_ERRORS):
            continue  # counter rules: tests/diagnosis/test_link_rules.py
        if row is t.FAULT_CAME_BACK:
            continue  # judged on the fault memory: tests/diagnosis/test_fault_memory.py
        if row in (t.MEMORY_FILLING, t.HOST_CPU_THERMAL, t.HOST_MEMORY_GROWTH):
            continue  # judged on the window's readings: tests/diagnosis/test_workload_rules.py
        if row in (t.NIC_ACROSS_SOCKETS, t.RDMA_PORT_DEGRADED, t.RDMA_ERRORS):
            continue  # judged on the RDMA ports: tests/diagnosis/test_network_rules.py
        assert {True, False} <= seen.get(row, set()), f"{row.key} lacks a holding or a clear case"


def test_pcie_errors_count_within_the_window() -> None:
    assert judge(t.PCIE_ERRORS, signals(), increases={"pcie_replays": 1.0}) is True
    assert judge(t.PCIE_ERRORS, signals(), increases={"pcie_replays": 0.0}) is False


def test_xid_hold_follows_the_config() -> None:
    short = DiagnosisConfig(xid_hold=60)
    assert judge(t.XID, signals(xids=[(NOW - 300, 79, None)]), short) is False
    assert judge(t.XID, signals(xids=[(NOW - 30, 79, None)]), short) is True


def test_thermal_margin_follows_the_config() -> None:
    wide = DiagnosisConfig(thermal_margin_celsius=8)
    slowed = busy_gpu(temperature_celsius=84.0, clocks_hz={"sm": 1.3e9})
    assert judge(t.THERMAL, signals(slowed), wide) is True
    assert judge(t.THERMAL, signals(slowed)) is False


# --- precedence: rows that are on in, root causes out ----------------------------------
def on(*rows: Row, stale: tuple[Row, ...] = (), evidence: dict[Row, dict[str, Any]] | None
       = None) -> list[Candidate]:
    ev = evidence or {}
    return [Candidate(r, ev.get(r, {}), r not in stale) for r in rows]


def roots(cands: list[Candidate]) -> set[str]:
    return {r.key for r in resolve(cands)}


PRECEDENCE_CASES: list[tuple[list[Candidate], set[Row], str]] = [
    (on(t.IDLE_CPU_LIMIT_THROTTLED, t.IDLE_CPU_CONTENTION, t.IDLE_PROCESS_STALLED),
     {t.IDLE_CPU_LIMIT_THROTTLED}, "a container at its CPU limit is short of CPU by its "
     "limit: one cause, one fix"),
    (on(t.IDLE_CPU_LIMIT_THROTTLED, t.IDLE_DATA_PIPELINE_IO),
     {t.IDLE_CPU_LIMIT_THROTTLED, t.IDLE_DATA_PIPELINE_IO},
     "throttling does not make reads slow: two causes"),
    (on(t.IDLE_IO_LIMIT_THROTTLED, t.IDLE_DATA_PIPELINE_IO, t.IDLE_PROCESS_STALLED),
     {t.IDLE_IO_LIMIT_THROTTLED}, "a container at its I/O limit waits on reads its limit "
     "delays: the limit, not the storage"),
    (on(t.UNDERFED_IO_LIMIT_THROTTLED, t.UNDERFED_DATA_PIPELINE_IO),
     {t.UNDERFED_IO_LIMIT_THROTTLED}, "the limit, at any starved load"),
    (on(t.IDLE_HOST_SWAPPING, t.IDLE_DATA_PIPELINE_IO), {t.IDLE_HOST_SWAPPING},
     "swapping explains iowait"),
    (on(t.IDLE_HOST_SWAPPING, t.IDLE_DATA_PIPELINE_IO, stale=(t.IDLE_HOST_SWAPPING,)),
     {t.IDLE_HOST_SWAPPING, t.IDLE_DATA_PIPELINE_IO},
     "swap stopped but iowait persists: both"),
    (on(t.IDLE_DATA_PIPELINE_IO, t.IDLE_PROCESS_STALLED), {t.IDLE_DATA_PIPELINE_IO},
     "a host cause wins over a stalled process"),
    (on(t.IDLE_CPU_CONTENTION, t.IDLE_PROCESS_STALLED), {t.IDLE_CPU_CONTENTION},
     "CPU contention wins over a stalled process"),
    (on(t.IDLE_HOST_SWAPPING, t.IDLE_PROCESS_STALLED), {t.IDLE_HOST_SWAPPING},
     "a process in D state doing swap-in is not stuck"),
    (on(t.IDLE_HOST_SWAPPING, t.IDLE_DATA_PIPELINE_IO, t.IDLE_PROCESS_STALLED),
     {t.IDLE_HOST_SWAPPING}, "a chain: swap -> iowait -> stall"),
    (on(t.IDLE_DATA_PIPELINE_IO, t.IDLE_CPU_CONTENTION), {t.IDLE_DATA_PIPELINE_IO},
     "CPU pressure beside storage stalls, the process's wait unknown"),
    (on(t.IDLE_DATA_PIPELINE_IO, t.IDLE_CPU_CONTENTION, evidence={t.IDLE_CPU_CONTENTION: {
        "process_run_queue_wait_seconds_per_second": 0.5}}),
     {t.IDLE_DATA_PIPELINE_IO, t.IDLE_CPU_CONTENTION},
     "the GPU's process itself waits on the run queue: independent"),
    (on(t.POWER_BRAKE, t.HW_SLOWDOWN), {t.POWER_BRAKE}, "the brake explains hw_slowdown"),
    (on(t.THERMAL, t.HW_SLOWDOWN), {t.THERMAL}, "heat explains hw_slowdown"),
    (on(t.THERMAL, t.POWER_BRAKE, t.HW_SLOWDOWN), {t.THERMAL, t.POWER_BRAKE},
     "two named reasons are two causes"),
    (on(t.GPU_LOST, t.XID, t.PCIE_DOWNTRAINED, stale=(t.XID, t.PCIE_DOWNTRAINED)),
     {t.GPU_LOST}, "a lost GPU explains every other row of that GPU"),
    (on(t.ECC_UNCORRECTABLE, t.XID, evidence={t.XID: {"xid": "48"}}), {t.ECC_UNCORRECTABLE},
     "Xid 48 is the ECC error itself"),
    (on(t.ECC_UNCORRECTABLE, t.XID, evidence={t.XID: {"xid": "48, 119"}}),
     {t.ECC_UNCORRECTABLE, t.XID}, "Xid 119 (GSP) is not an ECC error"),
    (on(t.IDLE_CPU_CONTENTION, t.UNDERFED_CPU_CONTENTION), {t.IDLE_CPU_CONTENTION},
     "idle and under-fed for one cause: the idle row"),
    (on(t.UNDERFED_CPU_CONTENTION, t.BURSTY_INPUT), {t.UNDERFED_CPU_CONTENTION},
     "bursty input is what a starved pipeline looks like"),
    (on(t.POWER_CAP, t.THERMAL), {t.POWER_CAP, t.THERMAL}, "independent causes stay"),
    (on(t.FAN_STOPPED, t.THERMAL, t.HW_SLOWDOWN), {t.FAN_STOPPED},
     "a stopped fan explains the heat and the slowdown it brings"),
    (on(t.ECC_UNCORRECTABLE, t.ALLOCATED_UNUSED), {t.ECC_UNCORRECTABLE},
     "the error that ended the job explains its pod's idle GPU"),
    (on(t.IDLE_MEMORY_LIMIT_RECLAIM, t.IDLE_DATA_PIPELINE_IO, t.BURSTY_INPUT),
     {t.IDLE_MEMORY_LIMIT_RECLAIM}, "a workload at its memory limit re-reads its evicted cache"),
    (on(t.UNDERFED_CPU_LIMIT_THROTTLED, t.UNDERFED_CPU_CONTENTION),
     {t.UNDERFED_CPU_LIMIT_THROTTLED}, "the limit, at any starved load"),
    (on(t.IDLE_CPU_STEAL, t.IDLE_CPU_CONTENTION), {t.IDLE_CPU_STEAL},
     "stolen CPUs leave the guest's tasks waiting"),
]


@pytest.mark.parametrize(("cands", "expected", "why"), PRECEDENCE_CASES,
                         ids=[c[2] for c in PRECEDENCE_CASES])
def test_precedence(cands: list[Candidate], expected: set[Row], why: str) -> None:
    assert roots(cands) == {r.key for r in expected}, why


def test_a_root_lists_what_it_explains_once() -> None:
    got = resolve(on(t.IDLE_HOST_SWAPPING, t.IDLE_DATA_PIPELINE_IO, t.UNDERFED_HOST_SWAPPING,
                     t.UNDERFED_DATA_PIPELINE_IO))
    assert list(got) == [t.IDLE_HOST_SWAPPING]
    assert [e.row for e in got[t.IDLE_HOST_SWAPPING]] == [t.IDLE_DATA_PIPELINE_IO]


def test_every_precedence_edge_joins_rows_of_the_table() -> None:
    for e in PRECEDENCE:
        assert e.cause in ROWS and e.consequence in ROWS and e.cause is not e.consequence
