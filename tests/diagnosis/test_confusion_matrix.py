"""The diagnosis against generated fault combinations, on the virtual clock.

Every pair of faults that can co-occur on one GPU and its host is built from a
catalogue of single faults (not written one by one), plus near misses just
inside and just outside every threshold, plus noise (the simulator's jitter,
short dips and spikes). Each case states the root causes a careful engineer
would name; which cause explains which is written here independently of
``gpu_exporter/diagnosis/precedence.py``, so the two check each other.

The test prints the confusion matrix (expected root -> what was reported) and
fails on any reported finding that was not expected (a wrong root, or anything
on a near miss) and on recall below 95 %. docs/runbook.md quotes the result
(``gpu_exporter_mixin.alerting.runbook.DIAGNOSIS_MATRIX``); the test holds it to that.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.simulator.model import Scenario
from gpu_exporter_mixin.alerting.runbook import DIAGNOSIS_MATRIX
from tests.simnode import SimRun

IDLE_UTIL, UNDERFED_UTIL, BUSY_UTIL = 0.03, 0.2, 0.95
MIB = 1024 * 1024
RUN_S, POLL_S = 64.0, 2.0


@dataclass(frozen=True)
class Fault:
    name: str
    load: str  # "starved": needs a held, low-utilization GPU; "busy"; "any"
    gpu: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    proc: dict[str, Any] = field(default_factory=dict)  # the training process
    timeline: tuple[dict[str, Any], ...] = ()
    # The row it produces, by load ("idle"/"underfed" for starved faults).
    row: str = ""


HOST_FAULTS = {
    "io": Fault("io", "starved", host={"iowait_ratio": 0.4,
                                       "pressure_io": {"some": 0.5, "full": 0.3}},
                proc={"state": "D", "cpu_ratio": 0.2}, row="data_pipeline_io"),
    "cpu": Fault("cpu", "starved", host={"pressure_cpu": {"some": 0.6, "full": 0.0},
                                         "cpu_busy_ratio": 0.99},
                 proc={"run_queue_wait_ratio": 0.5, "cpu_ratio": 0.4}, row="cpu_contention"),
    "swap": Fault("swap", "starved", host={"swap_in_bytes_per_s": 60 * MIB,
                                           "swap_out_bytes_per_s": 40 * MIB,
                                           "pressure_memory": {"some": 0.4, "full": 0.2},
                                           "memory_available_ratio": 0.01},
                  row="host_swapping"),
    "stalled": Fault("stalled", "starved", proc={"state": "S", "cpu_ratio": 0.002},
                     row="process_stalled"),
}
GPU_FAULTS = {
    "power_cap": Fault("power_cap", "busy", gpu={"power_limit_w": 450,
                                                 "throttle_reasons": ["sw_power_cap"]},
                       row="throttled_under_load/power_cap"),
    "thermal": Fault("thermal", "busy", gpu={"temperature_c": 88,
                                             "throttle_reasons": ["hw_slowdown", "hw_thermal"]},
                     row="throttled_under_load/thermal"),
    "power_brake": Fault("power_brake", "busy",
                         gpu={"throttle_reasons": ["hw_slowdown", "hw_power_brake"]},
                         row="throttled_under_load/power_brake"),
    "hw_slowdown": Fault("hw_slowdown", "busy", gpu={"throttle_reasons": ["hw_slowdown"]},
                         row="throttled_under_load/hw_slowdown"),
    "app_clocks": Fault("app_clocks", "busy", gpu={"application_sm_clock_mhz": 1200},
                        row="clocks_capped/application_clocks"),
    "pcie_down": Fault("pcie_down", "busy", gpu={"pcie_link_width": 8},
                       row="pcie_downtrained/link_degraded"),
    "inflated": Fault("inflated", "busy", gpu={"utilization": 0.97, "sm_active": 0.1},
                      row="utilization_inflated/small_kernels"),
    "pcie_errors": Fault("pcie_errors", "any", gpu={"pcie_replays_per_s": 2.0},
                         row="pcie_errors/link_integrity"),
    "ecc": Fault("ecc", "any", gpu={"ecc_uncorrected_volatile": 2, "remap_pending": True},
                 row="memory_errors/ecc_uncorrectable"),
    "remap": Fault("remap", "any", gpu={"remap_pending": True},
                   row="memory_errors/row_remap_pending"),
    "xid": Fault("xid", "any", timeline=({"at": "5s", "set": {"xid": [119]}},),
                 row="xid_error/driver_reported"),
    "xid_app": Fault("xid_app", "any", timeline=({"at": "5s", "set": {"xid": [31]}},),
                     row="xid_error/application_fault"),
    "lost": Fault("lost", "any", timeline=({"at": "5s", "set": {"lost": True}},),
                  row="gpu_lost/hardware"),
    "near_full": Fault("near_full", "any", gpu={"memory_used_ratio": 0.97},
                       row="memory_near_full/oom_risk"),
    "persistence": Fault("persistence", "any", gpu={"persistence_mode": False},
                         row="persistence_off/configuration"),
    "numa": Fault("numa", "any", proc={"cpus_allowed": "32-63"},
                  row="numa_misplaced/cpu_affinity"),
    "recovery": Fault("recovery", "any", timeline=({"at": "5s",
                                                     "set": {"recovery_action": "gpu_reset"}},),
                      row="recovery_action/gpu_reset"),
    "fabric": Fault("fabric", "any", gpu={"fabric_health": "limited_capacity"},
                    row="fabric_degraded/nvswitch_fabric"),
}

# Which faults' signals another fault produces: (cause, consequence). Written
# from what the hardware and kernel do, not copied from the exporter.
DOMINATES = {
    ("swap", "io"), ("swap", "stalled"), ("io", "stalled"), ("cpu", "stalled"),
    ("thermal", "hw_slowdown"), ("power_brake", "hw_slowdown"), ("ecc", "remap"),
    *(("lost", other) for other in [*HOST_FAULTS, *GPU_FAULTS] if other != "lost"),
}


@dataclass
class Case:
    name: str
    kind: str  # pair, near miss, noise
    scenario: Scenario
    expected: set[str]


def _row(fault: Fault, load: str) -> str:
    if fault.load != "starved":
        return fault.row
    symptom = "memory_held_sm_idle" if load == "idle" else "memory_held_sm_underfed"
    return f"{symptom}/{fault.row}"


def _scenario(name: str, faults: list[Fault], load: str, extra_timeline: tuple[
        dict[str, Any], ...] = (), **overrides: Any) -> Scenario:
    util = {"idle": IDLE_UTIL, "underfed": UNDERFED_UTIL, "busy": BUSY_UTIL}[load]
    gpu: dict[str, Any] = {"utilization": util, "memory_used_ratio": 0.75}
    host: dict[str, Any] = {"iowait_ratio": 0.01, "cpu_busy_ratio": 0.3}
    proc: dict[str, Any] = {"pid": 4100, "comm": "python", "gpus": [0],
                            "gpu_memory_ratio": 0.7, "cpu_ratio": 1.2, "state": "R",
                            "run_queue_wait_ratio": 0.02, "cpus_allowed": "0-31"}
    timeline: list[dict[str, Any]] = []
    reasons: set[str] = set()  # two faults' clock reasons are both set
    for f in faults:
        gpu.update(f.gpu)
        reasons |= set(f.gpu.get("throttle_reasons", ()))
        host.update(f.host)
        proc.update(f.proc)
        timeline += f.timeline
    if reasons:
        gpu["throttle_reasons"] = sorted(reasons)
    gpu.update(overrides.pop("gpu", {}))
    host.update(overrides.pop("host", {}))
    proc.update(overrides.pop("proc", {}))
    # No process NVML lists (none, or in another PID namespace): only the
    # GPU's memory says whether a job holds it.
    procs = [] if overrides.pop("unlisted", False) else [proc]
    return Scenario(name=name, node={"gpus": 1, "profile": "h100-sxm5-80gb"}, state=gpu,
                    host={"cpus": 64, "numa_nodes": 2, **host}, processes=procs,
                    timeline=[*timeline, *extra_timeline])


def _expected(names: list[str], load: str) -> set[str]:
    faults = {n: HOST_FAULTS.get(n) or GPU_FAULTS[n] for n in names}
    roots = {n for n in names if not any((o, n) in DOMINATES for o in names if o != n)}
    return {_row(faults[n], load) for n in roots}


def _compatible(a: Fault, b: Fault) -> list[str]:
    """The loads under which both faults can be on one GPU."""
    loads = {"starved": ["idle", "underfed"], "busy": ["busy"],
             "any": ["idle", "underfed", "busy"]}
    both = [x for x in loads[a.load] if x in loads[b.load]]
    if a.load == b.load == "any":
        both = ["idle", "busy"]  # no host cause: under-fed is the same as idle here
    if "stalled" in (a.name, b.name):
        both = [x for x in both if x == "idle"]  # a stalled process leaves its GPU idle
    return both


def pair_cases() -> list[Case]:
    faults = [*HOST_FAULTS.values(), *GPU_FAULTS.values()]
    out = []
    for a, b in itertools.combinations(faults, 2):
        for load in _compatible(a, b):
            name = f"{a.name}+{b.name}@{load}"
            out.append(Case(name, "pair", _scenario(name, [a, b], load),
                            _expected([a.name, b.name], load)))
    return out


def near_miss_cases() -> list[Case]:
    """(name, load, overrides, expected row or None): one pair per threshold."""
    io_idle = "memory_held_sm_idle/data_pipeline_io"
    table: list[tuple[str, str, dict[str, Any], str | None]] = [
        ("iowait 21 %", "idle", {"host": {"iowait_ratio": 0.21}}, io_idle),
        ("iowait 19 %", "idle", {"host": {"iowait_ratio": 0.19}}, None),
        ("io pressure 21 %", "idle", {"host": {"pressure_io": {"some": 0.21}}}, io_idle),
        ("io pressure 19 %", "idle", {"host": {"pressure_io": {"some": 0.19}}}, None),
        # The host's CPU pressure speaks for the job only where its process's
        # run-queue wait is not read (a kernel without schedstats).
        ("cpu pressure 31 %", "underfed", {"host": {"pressure_cpu": {"some": 0.31},
                                                    "schedstat_available": False}},
         "memory_held_sm_underfed/cpu_contention"),
        ("cpu pressure 29 %", "underfed", {"host": {"pressure_cpu": {"some": 0.29},
                                                    "schedstat_available": False}}, None),
        ("run-queue wait 0.31", "idle", {"host": {"pressure_cpu": {"some": 0.6}},
                                         "proc": {"run_queue_wait_ratio": 0.31}},
         "memory_held_sm_idle/cpu_contention"),
        ("run-queue wait 0.29", "idle", {"host": {"pressure_cpu": {"some": 0.6}},
                                         "proc": {"run_queue_wait_ratio": 0.29}}, None),
        ("swap 1.2 MiB/s", "idle", {"host": {"swap_in_bytes_per_s": 1.2 * MIB}},
         "memory_held_sm_idle/host_swapping"),
        ("swap 0.8 MiB/s", "idle", {"host": {"swap_in_bytes_per_s": 0.8 * MIB}}, None),
        # Memory held says a job is there only where NVML lists no process.
        ("memory held 53 %, no process listed", "underfed",
         {"gpu": {"memory_used_ratio": 0.53}, "unlisted": True, "host": {"iowait_ratio": 0.4}},
         "memory_held_sm_underfed/data_pipeline_io"),
        ("memory held 47 %, no process listed", "underfed",
         {"gpu": {"memory_used_ratio": 0.47}, "unlisted": True, "host": {"iowait_ratio": 0.4}},
         None),
        ("utilization 70 % with iowait", "underfed", {"gpu": {"utilization": 0.70},
                                                      "host": {"iowait_ratio": 0.4}},
         "memory_held_sm_underfed/data_pipeline_io"),
        ("utilization 80 % with iowait", "underfed", {"gpu": {"utilization": 0.80},
                                                      "host": {"iowait_ratio": 0.4}}, None),
        ("utilization 7 % with iowait", "idle", {"gpu": {"utilization": 0.07},
                                                 "host": {"iowait_ratio": 0.4}}, io_idle),
        ("utilization 13 % with iowait", "idle", {"gpu": {"utilization": 0.13},
                                                  "host": {"iowait_ratio": 0.4}},
         "memory_held_sm_underfed/data_pipeline_io"),
        ("under-fed, no host cause", "underfed", {}, None),
        ("idle, no job, host busy", "idle", {"gpu": {"memory_used_ratio": 0.0},
                                             "unlisted": True,
                                             "host": {"iowait_ratio": 0.5}}, None),
        # Asleep and waking once a second: stuck, not a server waiting for work.
        ("stalled at 3 % of a CPU", "idle", {"proc": {"state": "S", "cpu_ratio": 0.03,
                                                      "voluntary_ctxt_switches_per_s": 1}},
         "memory_held_sm_idle/process_stalled"),
        ("stalled at 7 % of a CPU", "idle", {"proc": {"state": "S", "cpu_ratio": 0.07,
                                                      "voluntary_ctxt_switches_per_s": 1}},
         None),
        # Heat with the SM clock down (1500 of 1980 MHz) and no reason set.
        ("2 °C below slowdown", "busy", {"gpu": {"temperature_c": 87, "sm_clock_mhz": 1500}},
         "throttled_under_load/thermal"),
        ("5 °C below slowdown", "busy", {"gpu": {"temperature_c": 84, "sm_clock_mhz": 1500}},
         None),
        ("limit 10 W under default, capped", "busy",
         {"gpu": {"power_limit_w": 690, "throttle_reasons": ["sw_power_cap"]}},
         "throttled_under_load/power_cap"),
        ("at the default limit, capped", "busy", {"gpu": {"throttle_reasons": ["sw_power_cap"]}},
         None),
        ("idle, capped", "idle", {"gpu": {"throttle_reasons": ["sw_power_cap"],
                                          "power_limit_w": 450}}, None),
        ("memory 96 %", "busy", {"gpu": {"memory_used_ratio": 0.96}},
         "memory_near_full/oom_risk"),
        ("memory 94 %", "busy", {"gpu": {"memory_used_ratio": 0.94}}, None),
        ("SM activity 25 %", "busy", {"gpu": {"utilization": 0.9, "sm_active": 0.25}},
         "utilization_inflated/small_kernels"),
        ("SM activity 35 %", "busy", {"gpu": {"utilization": 0.9, "sm_active": 0.35}}, None),
        # 95 % of the H100's default application clock (1980 MHz) is 1881 MHz.
        ("application clock 1860 MHz", "busy", {"gpu": {"application_sm_clock_mhz": 1860}},
         "clocks_capped/application_clocks"),
        ("application clock 1900 MHz", "busy", {"gpu": {"application_sm_clock_mhz": 1900}},
         None),
        ("idle link at Gen1", "idle", {"gpu": {"memory_used_ratio": 0.0},
                                       "proc": {"gpu_memory_ratio": 0.0}}, None),
        ("busy, iowait high", "busy", {"host": {"iowait_ratio": 0.5}}, None),
        ("busy, host swapping", "busy", {"host": {"swap_in_bytes_per_s": 50 * MIB}}, None),
    ]
    return [Case(f"near miss: {name}", "near miss", _scenario(name, [], load, **ov),
                 {want} if want else set()) for name, load, ov, want in table]


def noise_cases() -> list[Case]:
    h, g = HOST_FAULTS, GPU_FAULTS
    dip = ({"at": "40s", "host": {"swap_in_bytes_per_s": 0, "swap_out_bytes_per_s": 0}},
           {"at": "44s", "host": {"swap_in_bytes_per_s": 60 * MIB,
                                  "swap_out_bytes_per_s": 40 * MIB}})
    flicker = tuple({"at": f"{t}s", "set": {"utilization": 0.08 if (t // 2) % 2 else 0.12}}
                    for t in range(0, 64, 2))
    spike_io = ({"at": "30s", "host": {"iowait_ratio": 0.6}},
                {"at": "36s", "host": {"iowait_ratio": 0.01}})
    spike_thermal = ({"at": "40s", "set": {"throttle_reasons": ["hw_slowdown", "hw_thermal"]}},
                     {"at": "45s", "set": {"throttle_reasons": []}})
    dip_util = ({"at": "40s", "set": {"utilization": 0.02}},
                {"at": "46s", "set": {"utilization": 0.95}})
    io_dip = ({"at": "50s", "host": {"iowait_ratio": 0.05,
                                     "pressure_io": {"some": 0.05, "full": 0.0}}},
              {"at": "52s", "host": {"iowait_ratio": 0.4,
                                     "pressure_io": {"some": 0.5, "full": 0.3}}})
    probing = ({"at": "0s", "set": {"fabric_state": "in_progress"}},
               {"at": "10s", "set": {"fabric_state": "completed"}})
    table: list[tuple[str, list[Fault], str, tuple[dict[str, Any], ...], set[str]]] = [
        ("swap dips 4 s beside its iowait", [h["swap"], h["io"]], "idle", dip,
         {"memory_held_sm_idle/host_swapping"}),
        ("utilization flickers 8-12 % under CPU contention", [h["cpu"]], "underfed", flicker,
         {"memory_held_sm_underfed/cpu_contention"}),
        ("a 6 s iowait spike on an idle GPU holding memory", [], "idle", spike_io, set()),
        ("a 5 s thermal blip", [], "busy", spike_thermal, set()),
        ("a 6 s checkpoint dip to idle", [], "busy", dip_util, set()),
        ("iowait dips for one poll", [h["io"]], "idle", io_dip,
         {"memory_held_sm_idle/data_pipeline_io"}),
        ("power brake beside a capped limit", [g["power_brake"], g["power_cap"]], "busy", (),
         {"throttled_under_load/power_brake", "throttled_under_load/power_cap"}),
        ("the fabric probe takes 10 s at start", [], "busy", probing, set()),
    ]
    return [Case(f"noise: {name}", "noise", _scenario(name, faults, load, tl),
                 want) for name, faults, load, tl, want in table]


def all_cases() -> list[Case]:
    return [*pair_cases(), *near_miss_cases(), *noise_cases()]


def reported(case: Case) -> set[str]:
    with SimRun(case.scenario) as run:
        snap = run.poll(RUN_S, interval=POLL_S)
    return {f"{f.row.symptom}/{f.row.cause}" for f in snap.derived(FINDINGS) or ()}


# Over 300 cases of a simulated minute each: minutes of CPU on a shared 2-core
# machine, beyond the suite's per-test limit meant for hangs.
@pytest.mark.timeout(900)
def test_confusion_matrix() -> None:
    cases = all_cases()
    matrix: Counter[tuple[str, str]] = Counter()
    wrong: list[str] = []
    found = expected_total = 0
    for case in cases:
        got = reported(case)
        expected_total += len(case.expected)
        found += len(got & case.expected)
        for want in case.expected:
            matrix[(want, want if want in got else "(missed)")] += 1
        for extra in sorted(got - case.expected):
            matrix[("(none)" if not case.expected else "(other)", extra)] += 1
            wrong.append(f"{case.name}: reported {extra}, expected "
                         f"{sorted(case.expected) or 'nothing'}")
    recall = found / expected_total
    lines = [f"{len(cases)} cases ({Counter(c.kind for c in cases)}), "
             f"{expected_total} expected roots, {found} found (recall {recall:.1%}), "
             f"{len(wrong)} false findings", "expected root -> reported: count"]
    lines += [f"  {want} -> {got}: {n}" for (want, got), n in sorted(matrix.items())]
    print("\n".join(lines))
    assert not wrong, "\n".join(wrong)
    assert recall >= 0.95
    measured = (len(cases), expected_total, found, len(wrong))
    assert measured == DIAGNOSIS_MATRIX, (
        f"docs/runbook.md quotes {DIAGNOSIS_MATRIX}, measured {measured}: update "
        "DIAGNOSIS_MATRIX in mixin/gpu_exporter_mixin/alerting/runbook.py and regenerate")
