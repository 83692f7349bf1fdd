"""The promtool unit tests (``alerts/tests/*.test.yml``): input series and the
alerts that must, and must not, fire on them.

The series and expectations are written here; the expected annotations are
rendered from the rules' own templates (templates.py), so no annotation text is
copied by hand. Every alert gets a firing case (silent just before its ``for:``
ends, firing after it, with exact labels and annotations) and near-misses, and
every alert must stay silent on a healthy and on an idle node.
"""

from __future__ import annotations

import re
from typing import Any

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter_mixin.alerting.case_model import (
    GIB,
    JOB,
    Case,
    Check,
    ExprCheck,
    Fire,
    Sample,
    Series,
    TestFile,
    busy_seconds,
    gpu,
    node,
    seconds_counter,
    steps,
)
from gpu_exporter_mixin.alerting.config import AlertConfig
from gpu_exporter_mixin.alerting.job_cases import job_straggler_case
from gpu_exporter_mixin.alerting.render import GENERATED, alert_annotations, dump
from gpu_exporter_mixin.alerting.rules import AlertRule, alert_rules
from gpu_exporter_mixin.alerting.templates import duration, render

# --- one case per table row --------------------------------------------------


def _row_case(rule: AlertRule) -> Case:
    assert rule.row is not None
    interval = 5.0
    onset = 300.0
    end = onset + rule.for_s + 600
    before, after = steps(interval, onset) - 1, steps(interval, end - onset)
    rowlabels = {"symptom": rule.row.symptom, "cause": rule.row.cause}
    series = [
        # GPU 0 holds the condition from onset on.
        Series("gpu_diagnosis_active", {**gpu("node-a", 0), **rowlabels},
               f"0x{before} 1x{after}"),
        # GPU 1 has the condition for one 5 s poll only: a dip, not a fault.
        Series("gpu_diagnosis_active", {**gpu("node-a", 1), **rowlabels},
               f"0x{before} 1 0x{after - 1}"),
        # GPU 2 holds it for a while, but less than the alert's for:.
        Series("gpu_diagnosis_active", {**gpu("node-a", 2), **rowlabels},
               f"0x{before} 1x{max(steps(interval, rule.for_s) - 3, 0)} 0x{after}"),
        # GPU 0 is shared by two pods (time-slicing): one alert names each.
        *(Series("gpu_allocation_info", {**gpu("node-a", 0), "gpu_instance": "",
                                         "compute_instance": "", "namespace": "ml",
                                         "pod": pod, "container": "trainer",
                                         "resource": "nvidia.com/gpu"}, f"1x{before + after}")
          for pod in ("train-a", "train-b")),
        # ... and runs a Slurm job's process: an owner of another kind.
        Series("gpu_job_info", {**gpu("node-a", 0), "scheduler": "slurm",
                                "slurm_job_id": "4242", "slurm_uid": "1001",
                                "slurm_step": "0"}, f"1x{before + after}"),
    ]
    fires = tuple(Fire({**gpu("node-a", 0), **rowlabels, "owner": owner}, 1, keyed=True)
                  for owner in ("ml/train-a/trainer", "ml/train-b/trainer", "slurm job 4242"))
    return Case(f"{rule.name}: fires after its for:, not on a dip or a shorter spell",
                interval, series, [
                    Check(onset + max(rule.for_s - 60, 0), rule.name),
                    Check(onset + rule.for_s + 60, rule.name, fires),
                    Check(end - 60, rule.name, fires),
                ])


# --- consequences never page on their own -----------------------------------


def _consequence_cases(by: dict[str, AlertRule]) -> list[Case]:
    """The exporter files a consequence under its root cause (precedence.py):
    the host swaps, so iowait and I/O pressure are high, but only the swapping
    row is 1. Nothing may page for the iowait; likewise hw_slowdown under the
    power brake."""
    iv = 5.0
    onset, end = 300.0, 300.0 + 3600.0
    before, after = steps(iv, onset) - 1, steps(iv, end - onset)
    node_a, g0 = node("node-a"), gpu("node-a", 0)

    def diag(row: Row, on: bool) -> Series:
        return Series("gpu_diagnosis_active", {**g0, "symptom": row.symptom,
                                               "cause": row.cause},
                      f"0x{before} {1 if on else 0}x{after}")

    def fire(row: Row) -> Fire:
        return Fire({**g0, "symptom": row.symptom, "cause": row.cause}, 1)

    out = []
    for root, consequence, raw in (
        (t.IDLE_HOST_SWAPPING, t.IDLE_DATA_PIPELINE_IO, [
            # 8 CPUs: iowait 1 % of CPU time, then 35 %; I/O pressure 0, then 41 %.
            seconds_counter("gpu_host_cpu_seconds_total", node_a, iv, [(8.0, before + after + 1)]),
            seconds_counter("gpu_host_cpu_iowait_seconds_total", node_a, iv,
                            [(0.01 * 8, before), (0.35 * 8, after + 1)]),
            seconds_counter("gpu_host_pressure_stalled_seconds_total",
                            {**node_a, "resource": "io", "kind": "some"}, iv,
                            [(0.0, before), (0.41, after + 1)]),
            Series("gpu_host_swap_bytes_total", {**node_a, "direction": "in"},
                   f"0+0x{before} 0+{200 * 2**20 * iv:.0f}x{after}")]),
        (t.POWER_BRAKE, t.HW_SLOWDOWN, [
            Series("gpu_throttle_reason_active", {**g0, "reason": "hw_slowdown"},
                   f"0x{before} 1x{after}"),
            Series("gpu_throttle_reason_active", {**g0, "reason": "hw_power_brake"},
                   f"0x{before} 1x{after}")]),
    ):
        series = [diag(root, True), diag(consequence, False), *raw]
        checks = [Check(end - 60, root.alert_name, (fire(root),))]
        checks += [Check(at, consequence.alert_name) for at in (onset + 60, onset + 1800)]
        # Nothing else pages on the consequence's raw signals either.
        checks += [Check(end - 60, name) for name in sorted(by) if name != root.alert_name]
        out.append(Case(f"{consequence.alert_name} stays silent: {root.cause} explains it",
                        iv, series, checks))
    return out


# --- Xids: who is told ------------------------------------------------------


def _xid_tier_cases(config: AlertConfig, by: dict[str, AlertRule]) -> list[Case]:
    """An application Xid tells the job's owner and pages no one; a hardware
    Xid pages on-call and tells no job owner. Each GPU carries what the
    exporter exports for it: the Xid counters and its tier's diagnosis row."""
    iv = 5.0
    xid_rows = [r for r in ROWS if r.xid_tier is not None]
    onset = 300.0
    at = onset + max(by[r.alert_name].for_s for r in xid_rows) + 60
    end = at + 300
    before, after = steps(iv, onset) - 1, steps(iv, end - onset)
    d = config.diagnosis
    application, hardware = d.application_xids[0], d.hardware_xids[0]
    series: list[Series] = []
    fires: dict[str, list[Fire]] = {r.alert_name: [] for r in xid_rows}
    for index, code in ((0, application), (1, hardware)):
        g = gpu("node-a", index)
        tier = d.xid_tier(code)
        series += [
            Series("gpu_xid_errors_total", {**g, "xid": str(code)},
                   f"_x{before} 1x{after}"),
            Series("gpu_xid_errors_all_total", g, f"0x{before} 1x{after}"),
        ]
        for row in xid_rows:
            labels = {**g, "symptom": row.symptom, "cause": row.cause}
            on = row.xid_tier == tier
            series.append(Series("gpu_diagnosis_active", labels,
                                 f"0x{before} {1 if on else 0}x{after}"))
            if on:
                fires[row.alert_name].append(Fire(labels, 1))
    checks = [Check(at, name, tuple(f)) for name, f in fires.items()]
    return [Case(f"Xid {application} (application) tells the job's owner and pages no one; "
                 f"Xid {hardware} (hardware) pages on-call and tells no job owner",
                 iv, series, checks)]


def _first_event_cases() -> list[Case]:
    """A counter the exporter starts at 0 shows its first event to
    increase() over any range that covers it; a series that appears at 1 does
    not (why gpu_xid_errors_all_total and the timeouts start at 0)."""
    iv = 60.0
    g = gpu("node-a", 0)
    series = [
        # The first Xid at 6 min: the total was 0 from the first scrape on ...
        Series("gpu_xid_errors_all_total", g, "0x5 1x10"),
        # ... the code's own series appears with it, at 1.
        Series("gpu_xid_errors_total", {**g, "xid": "79"}, "_ _ _ _ _ _ 1x9"),
        Series("gpu_exporter_nvml_timeouts_total", {**node("node-a"), "gpu": "0"},
               "0x5 1x10"),
    ]
    one = (Sample({"gpu": "0"}, 1),)
    exprs = []
    for at, window in ((600.0, "10m"), (480.0, "5m"), (900.0, "15m")):
        exprs += [
            ExprCheck(at, f"sum by (gpu) (increase(gpu_xid_errors_all_total[{window}]))", one),
            ExprCheck(at, f"sum by (gpu) (increase(gpu_exporter_nvml_timeouts_total"
                          f"[{window}]))", one),
            ExprCheck(at, f"sum by (gpu) (increase(gpu_xid_errors_total[{window}]))",
                      (Sample({"gpu": "0"}, 0),)),
        ]
    return [Case("the first Xid and the first NVML timeout are an increase of 1 over any "
                 "range that covers them; a series that appears at 1 shows none",
                 iv, series, [], exprs)]


# --- energy per owner ----------------------------------------------------------


def _energy_cases() -> list[Case]:
    """Joules per owner. The expected values are worked out by hand from the
    input counters (a counter growing by J joules a minute has a rate of J/60
    J/s), not taken from the rule."""
    iv = 60.0
    g0, g1, g2, g3 = (gpu("node-a", i) for i in range(4))
    series = [
        # GPU 0: one owner; 600 J a minute -> 10 J/s, all of it the owner's.
        Series("gpu_energy_joules_total", g0, "0+600x30"),
        Series("gpu_allocation_info", {**g0, "namespace": "ml", "pod": "train-a",
                                       "container": "trainer"}, "1x30"),
        # GPU 1: two Slurm jobs; 1200 J a minute -> 20 J/s, split 3:1 by their
        # SM shares -> 15 J/s and 5 J/s.
        Series("gpu_energy_joules_total", g1, "0+1200x30"),
        Series("gpu_job_info", {**g1, "slurm_job_id": "4242"}, "1x30"),
        Series("gpu_job_info", {**g1, "slurm_job_id": "4243"}, "1x30"),
        Series("gpu_owner_sm_share_ratio", {**g1, "owner": "slurm job 4242"}, "0.75x30"),
        Series("gpu_owner_sm_share_ratio", {**g1, "owner": "slurm job 4243"}, "0.25x30"),
        # GPU 2: two pods time-slicing it, no per-process samples; 480 J a
        # minute -> 8 J/s that cannot be split: reported whole, split unknown.
        Series("gpu_energy_joules_total", g2, "0+480x30"),
        Series("gpu_allocation_info", {**g2, "namespace": "team-x", "pod": "notebook-1",
                                       "container": "jupyter"}, "1x30"),
        Series("gpu_allocation_info", {**g2, "namespace": "team-y", "pod": "notebook-2",
                                       "container": "jupyter"}, "1x30"),
        # GPU 3: no owner; 300 J a minute -> 5 J/s, reported as no one's.
        Series("gpu_energy_joules_total", g3, "0+300x30"),
    ]
    per_owner = "sum by (gpu, owner, split) (gpu_owner:gpu_energy_joules:rate5m)"
    rates: tuple[Sample, ...] = (
        Sample({"gpu": "0", "owner": "ml/train-a/trainer", "split": "whole"}, 10),
        Sample({"gpu": "1", "owner": "slurm job 4242", "split": "sm_share"}, 15),
        Sample({"gpu": "1", "owner": "slurm job 4243", "split": "sm_share"}, 5),
        Sample({"gpu": "2", "split": "unknown"}, 8),
        Sample({"gpu": "3", "split": "unowned"}, 5))
    # Over a range, joules = the rate's average times the seconds: over the
    # 10 minutes to 20 min, GPU 0's owner used 10 J/s x 600 s = 6000 J, the
    # counter's own increase (6000 - 0 ... 12000 - 6000).
    joules = ("sum by (owner, split) "
              "(avg_over_time(gpu_owner:gpu_energy_joules:rate5m[10m]) * 600)")
    # Power smoothing on GPUs 4 and 5 (floor 800 W): GPU 4 draws 800 J/s, at its
    # floor, so all of it may be the floor's; GPU 5 draws 1200 J/s, above it:
    # nothing held. GPU 6 draws 800 J/s with smoothing off: no floor.
    g4, g5, g6 = (gpu("node-a", i) for i in range(4, 7))
    for g, per_minute, smoothing in ((g4, 48000, 1), (g5, 72000, 1), (g6, 48000, 0)):
        series += [Series("gpu_energy_joules_total", g, f"0+{per_minute}x30"),
                   Series("gpu_power_smoothing_enabled", g, f"{smoothing}x30"),
                   Series("gpu_power_floor_watts", g, "800x30")]
    at_floor = ExprCheck(600.0, "sum by (gpu) (gpu:gpu_energy_joules:rate5m_at_floor)",
                         (Sample({"gpu": "4"}, 800),))
    rates = (*rates, Sample({"gpu": "4", "split": "unowned"}, 800),
             Sample({"gpu": "5", "split": "unowned"}, 1200),
             Sample({"gpu": "6", "split": "unowned"}, 800))
    return [Case("energy per owner: a GPU's one owner takes it whole, several owners split it "
                 "by SM share, without shares it is reported unsplit, and a GPU no one holds "
                 "as no one's",
                 iv, series, [],
                 [at_floor, ExprCheck(600.0, per_owner, rates),
                  ExprCheck(1200.0, per_owner, rates),
                  ExprCheck(1200.0, joules, (
                      Sample({"owner": "ml/train-a/trainer", "split": "whole"}, 6000),
                      Sample({"owner": "slurm job 4242", "split": "sm_share"}, 9000),
                      Sample({"owner": "slurm job 4243", "split": "sm_share"}, 3000),
                      Sample({"split": "unknown"}, 4800),
                      Sample({"split": "unowned"}, 3000 + (800 + 1200 + 800) * 600)))])]


# --- the exporter's health ---------------------------------------------------


def _exporter_cases(by: dict[str, AlertRule]) -> list[Case]:
    iv = 5.0
    onset = 300.0
    pre = steps(iv, onset) - 1
    cases = []
    for name, metric, extra in (
            ("GpuExporterDown", "up", {}),
            ("GpuExporterNvmlDown", "gpu_exporter_nvml_up", {}),
            ("GpuExporterCollectorFailing", "gpu_exporter_collector_success",
             {"collector": "device"})):
        rule = by[name]
        end = onset + rule.for_s + 600
        post = steps(iv, end - onset)
        series = [
            Series(metric, {**node("node-a"), **extra}, f"1x{pre} 0x{post}"),
            # A single failed scrape or poll on node-b: no alert.
            Series(metric, {**node("node-b"), **extra}, f"1x{pre} 0 1x{post - 1}"),
            # Down for less than the for: on node-c: no alert.
            Series(metric, {**node("node-c"), **extra},
                   f"1x{pre} 0x{steps(iv, rule.for_s) - 3} 1x{post}"),
        ]
        fire = Fire({**node("node-a"), **extra}, 0)
        cases.append(Case(f"{name}: fires after its for:, not on a blip or a shorter outage",
                          iv, series, [Check(onset + rule.for_s - 30, name),
                                       Check(onset + rule.for_s + 60, name, (fire,))]))
    rule = by["GpuExporterPollsStale"]
    end = onset + rule.for_s + 600
    total = steps(iv, end)
    # node-a's polls stop at `onset`; node-b's lag 30 s behind (slow but alive).
    series = [
        Series("gpu_exporter_last_poll_timestamp_seconds", node("node-a"),
               f"0+{iv:g}x{pre} {onset:g}x{total - pre}"),
        Series("gpu_exporter_last_poll_timestamp_seconds", node("node-b"),
               f"-30+{iv:g}x{total}"),
    ]
    # stale from the first evaluation where time() - onset > threshold
    stale_at = onset + (steps(iv, 60) + 1) * iv
    fire_at = stale_at + rule.for_s + 60
    cases.append(Case("GpuExporterPollsStale: fires when polls stop, not when they lag",
                      iv, series, [
                          Check(stale_at + rule.for_s - 30, rule.name),
                          Check(fire_at, rule.name, (Fire(node("node-a"), fire_at - onset),)),
                      ]))
    return cases


# --- fleet rules -------------------------------------------------------------


def _straggler_case(rule: AlertRule, config: AlertConfig) -> Case:
    iv = 5.0
    onset = 300.0
    end = onset + rule.for_s + 600
    pre, post = steps(iv, onset) - 1, steps(iv, end - onset)
    series: list[Series] = []

    def four(name: str, siblings: float, last: list[tuple[float, int]]) -> None:
        for i in range(3):
            series.append(busy_seconds(gpu(name, i), iv, [(siblings, pre + post + 1)]))
        series.append(busy_seconds(gpu(name, 3), iv, last))

    four("node-a", 0.95, [(0.95, pre), (0.2, post)])  # the straggler
    four("node-b", 0.95, [(0.95, pre), (0.6, post)])  # lower, but not far below
    four("node-c", 0.6, [(0.6, pre), (0.1, post)])  # siblings not busy
    four("node-d", 0.95, [(0.95, pre), (0.1, 1), (0.95, post - 1)])  # a 5 s dip
    for i in range(2):  # an idle node: nothing to straggle behind
        series.append(busy_seconds(gpu("node-e", i), iv, [(0.0, pre + post + 1)]))
    fire = Fire(gpu("node-a", 3), 0.2)
    return Case("GpuStraggler: a GPU far below its busy siblings; not a milder gap, idle "
                "siblings or a dip", iv, series, [
                    Check(onset + rule.for_s - 60, rule.name),
                    Check(onset + rule.for_s + 120, rule.name, (fire,)),
                ])


def _drift_case(rule: AlertRule) -> Case:
    iv = 60.0
    end = rule.for_s + 1800
    n = steps(iv, end)
    series = []
    for name, version in (("node-a", "580.159.04"), ("node-b", "580.159.04"),
                          ("node-c", "580.159.04"), ("node-d", "570.86.15")):
        for i in range(2):
            series.append(Series("gpu_info", {**gpu(name, i), "driver_version": version,
                                              "name": "NVIDIA H100 80GB HBM3"}, f"1x{n}"))
    # Another cluster runs node-d's driver on every node: drift is judged
    # within a cluster, so neither it nor its version counts against cluster-a.
    for name in ("node-e", "node-f", "node-g"):
        for i in range(2):
            series.append(Series("gpu_info", {**gpu(name, i), "cluster": "cluster-b",
                                              "driver_version": "570.86.15",
                                              "name": "NVIDIA H100 80GB HBM3"}, f"1x{n}"))
    fire = Fire({**node("node-d"), "driver_version": "570.86.15"}, 2, keyed=True)
    return Case("GpuDriverVersionDrift: the node off its cluster's common driver; not a "
                "cluster whose common driver differs", iv, series, [
        Check(rule.for_s - 120, rule.name),
        Check(rule.for_s + 300, rule.name, (fire,)),
    ])


def _count_case(rule: AlertRule) -> Case:
    iv = 15.0
    vanish = 1800.0
    end = vanish + 300 + rule.for_s + 900
    n = steps(iv, end)
    k = steps(iv, vanish) - 1
    series = []
    for i in range(4):
        series.append(Series("gpu_info", gpu("node-a", i),
                             f"1x{k} stale" if i == 3 else f"1x{n}"))
        # node-b's GPU 3 misses one scrape: it does not vanish.
        series.append(Series("gpu_info", gpu("node-b", i),
                             f"1x{k} _ 1x{n - k - 1}" if i == 3 else f"1x{n}"))
    fire = Fire(node("node-a"), 3, keyed=True)
    return Case("GpuCountDropped: a GPU vanishes from a node; a missed scrape is not that",
                iv, series, [
                    Check(vanish + rule.for_s - 60, rule.name),
                    Check(vanish + rule.for_s + 120, rule.name, (fire,)),
                ])


def _temperature_case(rule: AlertRule, config: AlertConfig) -> Case:
    iv = 15.0
    onset = 300.0
    end = onset + rule.for_s + 600
    pre, post = steps(iv, onset) - 1, steps(iv, end - onset)
    n = pre + post + 1
    series = []
    # (GPU, slowdown threshold or None, temperature after onset)
    for i, slowdown, hot in ((0, 87, 84), (1, 95, 83), (2, 87, 81), (3, None, 84)):
        series.append(Series("gpu_temperature_celsius", {**gpu("node-a", i), "sensor": "gpu"},
                             f"60x{pre} {hot}x{post}"))
        series.append(Series("gpu_temperature_celsius",
                             {**gpu("node-a", i), "sensor": "memory"}, f"70x{n}"))
        if slowdown is not None:
            for kind, value in (("slowdown", slowdown), ("shutdown", slowdown + 5),
                                ("max_operating", slowdown - 2)):
                series.append(Series("gpu_temperature_threshold_celsius",
                                     {**gpu("node-a", i), "threshold": kind}, f"{value}x{n}"))
    fire = Fire(gpu("node-a", 0), 84, keyed=True)
    return Case("GpuTemperatureNearSlowdown: judged against each GPU's own slowdown threshold "
                "(84 C of 87 fires; 83 C of 95, 81 C of 87 and a GPU without thresholds do "
                "not)", iv, series, [
                    Check(onset + rule.for_s - 60, rule.name),
                    Check(onset + rule.for_s + 120, rule.name, (fire,)),
                ])


def _leak_case(rule: AlertRule, config: AlertConfig) -> Case:
    iv = 300.0
    end = rule.for_s + 4 * 3600
    n = steps(iv, end)
    total = 80 * GIB
    per_step = GIB  # 12 GiB per hour
    sawtooth = " ".join(str((20 + 20 * (k % 2)) * GIB) for k in range(n + 1))
    series = [
        Series("gpu_memory_used_bytes", gpu("node-a", 0), f"{20 * GIB}+{per_step}x{n}"),
        # alloc/free every step: busy, not leaking
        Series("gpu_memory_used_bytes", gpu("node-a", 1), sawtooth),
        # grows, but slower than the configured minimum rate
        Series("gpu_memory_used_bytes", gpu("node-a", 2), f"{20 * GIB}+{GIB // 25}x{n}"),
        # nearly full, but flat
        Series("gpu_memory_used_bytes", gpu("node-a", 3), f"{79 * GIB}x{n}"),
    ]
    for i in range(4):
        series.append(Series("gpu_memory_total_bytes", gpu("node-a", i), f"{total}x{n}"))
    fire = Fire(gpu("node-a", 0), per_step * 3600 / iv)
    return Case("GpuMemoryGrowingSteadily: steady growth toward full; not a sawtooth, a slow "
                "creep or a flat full GPU", iv, series, [
                    Check(rule.for_s - 2 * iv, rule.name),
                    Check(rule.for_s + 2 * iv, rule.name, (fire,)),
                ])


# --- healthy and idle nodes: nothing fires -----------------------------------


def _quiet_case(name: str, rules: list[AlertRule], busy: bool) -> Case:
    iv = 60.0
    end = 5 * 3600.0
    n = steps(iv, end)
    series = [
        Series("up", node("node-a"), f"1x{n}"),
        Series("gpu_exporter_nvml_up", node("node-a"), f"1x{n}"),
        Series("gpu_exporter_last_poll_timestamp_seconds", node("node-a"), f"0+{iv:g}x{n}"),
    ]
    for collector in ("device", "host", "processes"):
        series.append(Series("gpu_exporter_collector_success",
                             {**node("node-a"), "collector": collector}, f"1x{n}"))
    for i in range(4):
        g = gpu("node-a", i)
        series += [
            Series("gpu_info", {**g, "driver_version": "580.159.04"}, f"1x{n}"),
            busy_seconds(g, iv, [(0.96 if busy else 0.0, n)]),
            Series("gpu_memory_used_bytes", g,
                   f"{62 * GIB}x{n}" if busy else f"{GIB // 2}x{n}"),
            Series("gpu_memory_total_bytes", g, f"{80 * GIB}x{n}"),
            Series("gpu_temperature_celsius", {**g, "sensor": "gpu"},
                   f"71x{n}" if busy else f"32x{n}"),
            Series("gpu_temperature_threshold_celsius", {**g, "threshold": "slowdown"},
                   f"87x{n}"),
            # An idle link downshifts to Gen1 to save power: that is not a fault.
            Series("gpu_pcie_link_generation", g, f"5x{n}" if busy else f"1x{n}"),
            Series("gpu_pcie_link_generation_max", g, f"5x{n}"),
            Series("gpu_pcie_link_width", g, f"16x{n}"),
            Series("gpu_pcie_link_width_max", g, f"16x{n}"),
            Series("gpu_throttle_reason_active", {**g, "reason": "gpu_idle"},
                   f"0x{n}" if busy else f"1x{n}"),
            # sw_power_cap on an idle GPU: the driver's normal state, never a page.
            Series("gpu_throttle_reason_active", {**g, "reason": "sw_power_cap"},
                   f"0x{n}" if busy else f"1x{n}"),
        ]
        for row in ROWS:
            series.append(Series("gpu_diagnosis_active",
                                 {**g, "symptom": row.symptom, "cause": row.cause}, f"0x{n}"))
    checks = [Check(at, r.name) for at in (1800.0, end - 300) for r in rules]
    return Case(name, iv, series, checks)


# --- files -------------------------------------------------------------------


def test_files(config: AlertConfig) -> list[TestFile]:
    rules = alert_rules(config)
    by = {r.name: r for r in rules}
    return [
        # Each row's alert, judged at a 15 s evaluation (a common Prometheus
        # setting): the cases' 5 s samples still show the one-poll dip and the
        # spell 15 s short of the for:, and the file evaluates every rule a
        # third as often as at 5 s (the largest file; its promtool run was
        # minutes). When each alert pages at 5 s is test_alert_promises'.
        TestFile("diagnosis.test.yml", 15.0, [_row_case(r) for r in rules if r.row is not None]),
        TestFile("consequences.test.yml", 5.0, _consequence_cases(by)),
        TestFile("xids.test.yml", 5.0, _xid_tier_cases(config, by)),
        TestFile("first-events.test.yml", 60.0, _first_event_cases()),
        TestFile("energy.test.yml", 60.0, _energy_cases()),
        TestFile("exporter.test.yml", 5.0, _exporter_cases(by)),
        TestFile("fleet.test.yml", 5.0, [_straggler_case(by["GpuStraggler"], config)]),
        TestFile("jobs.test.yml", 5.0, [job_straggler_case(by["GpuJobStragglerNode"], config)]),
        TestFile("fleet-slow.test.yml", 15.0, [
            _count_case(by["GpuCountDropped"]),
            _temperature_case(by["GpuTemperatureNearSlowdown"], config)]),
        TestFile("fleet-hours.test.yml", 60.0, [
            _drift_case(by["GpuDriverVersionDrift"]),
            _leak_case(by["GpuMemoryGrowingSteadily"], config)]),
        TestFile("quiet.test.yml", 60.0, [
            _quiet_case("a healthy busy node: nothing fires", rules, busy=True),
            _quiet_case("an idle node (links at Gen1, gpu_idle and sw_power_cap active): "
                        "nothing fires", rules, busy=False)]),
    ]


# --- the configured selector and cluster label --------------------------------

_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!=|!~|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


def selector_labels(selector: str) -> dict[str, str]:
    """Labels a series needs to match ``selector``: each ``name="value"``
    matcher's, and for ``name=~"a|b"`` its first alternative when the regex
    matches that. Other matchers (``!=``, ``!~``) need no label."""
    out: dict[str, str] = {}
    for name, op, value in _MATCHER.findall(selector):
        value = value.replace('\\"', '"').replace("\\\\", "\\")
        if op == "=":
            out[name] = value
        elif op == "=~":
            # "gpu-exporter|dcgm" -> "gpu-exporter": a value the regex matches
            first = value.split("|")[0]
            try:
                if re.fullmatch(value, first):
                    out[name] = first
            except re.error:
                pass
    return out


def _relabel(config: AlertConfig, labels: dict[str, str],
             keyed: bool = False) -> dict[str, str]:
    """The cases' labels in the configured world: ``job="gpu-exporter"`` becomes
    the selector's labels (only its job where ``keyed``: an aggregation's key),
    ``cluster`` the configured cluster label."""
    out = dict(labels)
    if out.get("job") == JOB:
        del out["job"]
        wanted = selector_labels(config.selector)
        out.update({k: v for k, v in wanted.items() if k == "job" or not keyed})
    if "cluster" in out and config.cluster_label != "cluster":
        out[config.cluster_label] = out.pop("cluster")
    return out


def _check(config: AlertConfig, by: dict[str, AlertRule], check: Check) -> dict[str, Any]:
    rule = by[check.alert]
    templates = alert_annotations(config, rule)
    exp = []
    for fire in check.fires:
        labels = _relabel(config, fire.labels, fire.keyed)
        exp.append({
            "exp_labels": {**labels, "severity": rule.severity, **rule.labels},
            "exp_annotations": {k: render(v, labels, fire.value)
                                for k, v in templates.items()},
        })
    return {"eval_time": duration(check.at), "alertname": check.alert, "exp_alerts": exp}


def _expr(config: AlertConfig, check: ExprCheck) -> dict[str, Any]:
    def text(labels: dict[str, str]) -> str:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"

    return {"expr": check.expr, "eval_time": duration(check.at), "exp_samples": [
        {"labels": text(_relabel(config, x.labels)), "value": x.value}
        for x in check.samples]}


def render_test_file(config: AlertConfig, tf: TestFile) -> str:
    by = {r.name: r for r in alert_rules(config)}
    doc = {
        "rule_files": ["../gpu-exporter.rules.yml"],
        "evaluation_interval": duration(tf.evaluation_interval),
        "tests": [{
            "name": case.name,
            "interval": duration(case.interval),
            "input_series": [
                {"series": Series(s.metric, _relabel(config, s.labels), s.values).text(),
                 "values": s.values} for s in case.series],
            **({"alert_rule_test": [_check(config, by, c) for c in case.checks]}
               if case.checks else {}),
            **({"promql_expr_test": [_expr(config, e) for e in case.exprs]} if case.exprs else {}),
        } for case in tf.cases],
    }

    return dump(doc, f"{GENERATED}\nThe series and expectations are in "
                     "mixin/gpu_exporter_mixin/alerting/cases.py.")
