"""What each dashboard panel must show for one simulated node, derived from
the node's scenario (what is true of each GPU: its load, limits, faults,
processes, and the findings it is built to produce) and its board's profile
(memory, limits, clocks, thresholds, link), never from the generator.

``CHECKS`` holds one check per panel, keyed by (title, panel type): a panel
without one fails the live test, so a new panel needs its expected values
here. A check returns the problems it finds (empty: the panel is right)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import mean

from gpu_exporter.diagnosis.table import BY_KEY
from gpu_exporter.simulator import load_profile
from gpu_exporter.simulator.model import GpuCondition, ProcessCondition, Scenario
from gpu_exporter_mixin.alerting.config import AlertConfig

# Rates over a minute of 1 s scrapes of a 2 s poll: a few per cent of jitter.
RATE = 0.04
LEVELS = {"critical": 3, "warning": 2, "info": 1}
# Throttle reasons that hold a busy GPU's clocks down (not gpu_idle, which an
# idle GPU reports, nor the settings ones).
SLOWING = {"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"}

Sample = tuple[dict[str, str], float]
Results = dict[str, list[Sample]]  # refId -> what the query returned
Panels = dict[tuple[str, str], Results]  # (title, type) -> its queries' results


@dataclass
class NodeFacts:
    """What is true of a simulated node, per GPU."""

    gpus: list[int]
    cond: dict[int, GpuCondition]
    processes: list[ProcessCondition]
    expect: list[tuple[int, str, str]]  # (gpu, symptom, cause)
    driver_version: str
    memory_total_bytes: float
    memory_usable_bytes: float
    default_limit_w: float
    clocks_max_hz: dict[str, float]
    slowdown_c: float
    shutdown_c: float
    memory_offset_c: float
    width_max: int
    generation_max: int
    generation_idle: int
    config: AlertConfig
    owners: bool  # whether any GPU is allocated to a pod or a Slurm job
    not_judged: set[tuple[int, str, str]] = field(default_factory=set)

    def util(self, g: int) -> float:
        u = self.cond[g].utilization
        assert u is not None, f"GPU {g}: the scenario states no utilization"
        return u

    def reasons(self, g: int) -> set[str]:
        return set(self.cond[g].throttle_reasons or ())

    def limit(self, g: int) -> float:
        return self.cond[g].power_limit_w or self.default_limit_w

    def width(self, g: int) -> int:
        return self.cond[g].pcie_link_width or self.width_max

    def busy(self, g: int) -> bool:
        return self.util(g) >= self.config.diagnosis.busy_utilization

    def severity(self, g: int) -> int:
        """The worst severity of the findings the scenario expects on GPU g."""
        keys = [f"{s}/{c}" for gpu, s, c in self.expect if gpu == g]
        return max((LEVELS[self.config.severity_overrides.get(k, BY_KEY[k].severity)]
                    for k in keys), default=0)

    def throttled(self) -> set[int]:
        """Busy GPUs whose clocks a slowing reason holds down."""
        return {g for g in self.gpus if self.busy(g) and self.reasons(g) & SLOWING}

    def downtrained(self) -> set[int]:
        """Busy GPUs whose link runs below its width or generation."""
        return {g for g in self.gpus if self.busy(g) and (
            self.width(g) < self.width_max
            or (self.cond[g].pcie_link_generation or self.generation_max) < self.generation_max)}

    def stragglers(self) -> set[int]:
        s = self.config.fleet.straggler
        out = set()
        for g in self.gpus:
            others = mean(self.util(o) for o in self.gpus if o != g)
            if others > s.siblings_busy and self.util(g) < s.below_ratio * others:
                out.add(g)
        return out


def facts_of(sc: Scenario, config: AlertConfig) -> NodeFacts:
    assert not sc.timeline, "the facts are the scenario's steady state"
    profile = load_profile(sc.node.profile)
    gpus = list(range(sc.node.gpus))
    cond = {g: sc.state.model_copy(update=sc.gpus[g].model_dump(exclude_none=True))
            if g in sc.gpus else sc.state for g in gpus}
    mib = 1024 * 1024
    return NodeFacts(
        gpus=gpus, cond=cond, processes=[p for p in sc.processes if p.gpus],
        expect=[(e.gpu, e.symptom, e.cause) for e in sc.expect or []],
        driver_version=sc.node.driver_version,
        memory_total_bytes=profile.memory_total_mib * mib,
        memory_usable_bytes=(profile.memory_total_mib - profile.memory_reserved_mib) * mib,
        default_limit_w=profile.power_default_limit_w,
        clocks_max_hz={k: v * 1e6 for k, v in profile.clocks_max_mhz.model_dump().items()},
        slowdown_c=profile.temperature_thresholds_c.slowdown,
        shutdown_c=profile.temperature_thresholds_c.shutdown,
        memory_offset_c=profile.memory_temperature_offset_c,
        width_max=profile.pcie_max_width, generation_max=profile.pcie_max_generation,
        generation_idle=profile.pcie_idle_generation, config=config,
        owners=sc.tenants is not None)


# --- helpers ---------------------------------------------------------------------------------


def by(results: list[Sample], *labels: str) -> dict[tuple[str, ...], float]:
    out = {}
    for metric, value in results:
        key = tuple(metric.get(label, "") for label in labels)
        assert key not in out, f"two samples for {dict(zip(labels, key, strict=True))}"
        out[key] = value
    return out


def per_gpu(results: list[Sample]) -> dict[int, float]:
    return {int(k[0]): v for k, v in by(results, "gpu").items()}


def near(got: float | None, want: float, tol: float, what: str) -> list[str]:
    if got is None:
        return [f"{what}: absent, want {want:g}"]
    return [] if abs(got - want) <= tol else [f"{what}: {got:g}, want {want:g} ± {tol:g}"]


def equal(got: object, want: object, what: str) -> list[str]:
    return [] if got == want else [f"{what}: {got!r}, want {want!r}"]


def single(results: list[Sample]) -> float | None:
    return results[0][1] if len(results) == 1 else None


def each_gpu(f: NodeFacts, got: dict[int, float], want: Callable[[int], float], tol: float,
             what: str) -> list[str]:
    problems = equal(sorted(got), f.gpus, f"{what}: GPUs")
    for g in f.gpus:
        problems += near(got.get(g), want(g), tol, f"{what} of GPU {g}")
    return problems


# --- the node dashboard ---------------------------------------------------------------------


def _active_count(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    return equal(single(r["A"]), float(len(f.expect)), "active diagnoses")


def _nvml(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    return equal(single(r["A"]), 1.0, "NVML up")


def _not_judged_count(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    return equal(single(r["A"]), float(len(f.not_judged)), "rows not judged")


def _diagnosis_table(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    rows = {(m.get("state"), int(m["gpu"]), m["symptom"], m["cause"]) for m, _ in r["A"]}
    want = ({("active", *e) for e in f.expect}
            | {("not judged", *n) for n in f.not_judged})
    return equal(rows, want, "rows of the table")


def _utilization(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    problems = each_gpu(f, per_gpu(r["A"]), f.util, RATE, "utilization")
    sm = per_gpu(r["B"])
    occupancy = per_gpu(r["C"])
    for g in f.gpus:
        stated = f.cond[g].sm_active
        if stated is not None:
            problems += near(sm.get(g), stated, RATE, f"SM active of GPU {g}")
        elif g in sm and sm[g] > f.util(g) + RATE:  # SMs work only while a kernel runs
            problems.append(f"SM active of GPU {g}: {sm[g]:g} above its utilization")
        if f.cond[g].sm_occupancy is not None:
            problems += near(occupancy.get(g), f.cond[g].sm_occupancy or 0.0, RATE,
                             f"SM occupancy of GPU {g}")
    return problems + equal(sorted(sm), f.gpus, "SM active: GPUs")


def _memory(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    def used(g: int) -> float:
        ratio = f.cond[g].memory_used_ratio or 0.0  # of the memory a job can use
        return ratio * f.memory_usable_bytes / f.memory_total_bytes

    return each_gpu(f, per_gpu(r["A"]), used, 0.005, "memory used")


def _power(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    draw = per_gpu(r["A"])
    problems = each_gpu(f, per_gpu(r["B"]), f.limit, 0.001, "power limit")
    problems += each_gpu(f, per_gpu(r["C"]), lambda g: f.default_limit_w, 0.001,
                         "default limit")
    for g in f.gpus:
        if not 0 < draw.get(g, -1) <= f.limit(g):
            problems.append(f"draw of GPU {g}: {draw.get(g)} outside (0, {f.limit(g)}]")
        if "sw_power_cap" in f.reasons(g) and draw.get(g, 0) < 0.95 * f.limit(g):
            problems.append(f"GPU {g} is capped but draws {draw.get(g)} W of {f.limit(g)}")
    return problems


def _clocks(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    problems = []
    for ref, clock, maximum in (("A", "sm", False), ("B", "sm", True),
                                ("C", "memory", False), ("D", "memory", True)):
        got = {int(g): v for (g, c), v in by(r[ref], "gpu", "clock").items() if c == clock}
        top = f.clocks_max_hz[clock]
        if maximum:
            problems += each_gpu(f, got, lambda g, t=top: t, 0.5, f"{clock} max clock")
            continue
        problems += equal(sorted(got), f.gpus, f"{clock} clock: GPUs")
        for g, v in got.items():
            if v > top:
                problems.append(f"{clock} clock of GPU {g}: {v:g} above its max {top:g}")
            if clock == "sm" and f.reasons(g) & SLOWING and v >= top:
                problems.append(f"GPU {g} is slowed ({f.reasons(g)}) yet at its max clock")
    return problems


def _throttle_reasons(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    problems = []
    for (g, reason), v in by(r["A"], "gpu", "reason").items():
        gpu = int(g)
        stated = reason in f.reasons(gpu)
        if reason == "gpu_idle":
            if f.busy(gpu) and v:
                problems.append(f"GPU {gpu} is busy, yet gpu_idle")
            continue
        problems += equal(v, float(stated), f"reason {reason} of GPU {gpu}")
    # Every stated reason is shown as held, here or in the time it held.
    timed = by(p[("Time throttled per reason", "timeseries")]["A"], "gpu", "reason")
    held = {(int(g), x) for (g, x), v in by(r["A"], "gpu", "reason").items() if v}
    held |= {(int(g), x) for (g, x), v in timed.items() if v > 0.5}
    want = {(g, x) for g in f.gpus for x in f.reasons(g)}
    return problems + equal(want - held, set(), "stated reasons shown by neither panel")


def _throttle_time(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    problems = []
    for (g, reason), v in by(r["A"], "gpu", "reason").items():
        problems += near(v, float(reason in f.reasons(int(g))), RATE,
                         f"time {reason} held GPU {g}")
    return problems


def _temperature(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    gpu_temp = per_gpu(r["A"])
    problems = each_gpu(f, per_gpu(r["C"]), lambda g: f.slowdown_c, 0, "slowdown threshold")
    problems += each_gpu(f, per_gpu(r["D"]), lambda g: f.shutdown_c, 0, "shutdown threshold")
    problems += each_gpu(f, per_gpu(r["B"]), lambda g: gpu_temp.get(g, 0) + f.memory_offset_c,
                         1, "memory temperature")
    for g in f.gpus:
        stated = f.cond[g].temperature_c
        if stated is not None:
            problems += near(gpu_temp.get(g), stated, 0.5, f"temperature of GPU {g}")
        elif not 0 < gpu_temp.get(g, -1) < f.slowdown_c:
            problems.append(f"temperature of GPU {g}: {gpu_temp.get(g)} (not stated: below "
                            "its slowdown)")
    return problems


def _link(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    problems = each_gpu(f, per_gpu(r["A"]), f.width, 0, "link width")
    problems += each_gpu(f, per_gpu(r["B"]), lambda g: f.width_max, 0, "max width")
    problems += each_gpu(f, per_gpu(r["D"]), lambda g: f.generation_max, 0, "max generation")
    for g, v in per_gpu(r["C"]).items():
        # An idle GPU's link downshifts to save power.
        allowed = {f.generation_max} if f.busy(g) else {f.generation_max, f.generation_idle}
        if v not in allowed:
            problems.append(f"generation of GPU {g}: {v:g}, want one of {sorted(allowed)}")
    return problems


def _traffic(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    problems = []
    got = by(r["A"], "gpu", "direction")
    problems += equal({d for _, d in got}, {"rx", "tx"}, "directions")
    for (g, d), v in got.items():
        # What the link can carry each way: lanes x GT/s (PCIe 5: 32) x 128/130, in bytes.
        lanes = f.width(int(g))
        top = lanes * 32e9 * 128 / 130 / 8
        if not 0 <= v <= top:
            problems.append(f"PCIe {d} of GPU {g}: {v:g} B/s beyond x{lanes} Gen5's {top:g}")
    return problems


def _zero_everywhere(what: str) -> Callable[[NodeFacts, Panels, Results], list[str]]:
    def check(f: NodeFacts, p: Panels, r: Results) -> list[str]:
        problems = []
        for ref, results in r.items():
            problems += equal(sorted({int(m["gpu"]) for m, _ in results}), f.gpus,
                              f"{what} {ref}: GPUs")
            problems += [f"{what} {ref} {m}: {v:g}" for m, v in results if v != 0]
        return problems
    return check


def _ecc(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    c = f.cond
    problems = []
    ecc = by(r["A"], "gpu", "type")
    for g in f.gpus:
        problems += equal(ecc.get((str(g), "uncorrected")),
                          float(c[g].ecc_uncorrected_volatile or 0), f"uncorrected ECC of {g}")
        problems += equal(ecc.get((str(g), "corrected")),
                          float(c[g].ecc_corrected_volatile or 0), f"corrected ECC of {g}")
    rows = by(r["B"], "gpu", "type")
    for g in f.gpus:
        problems += equal(rows.get((str(g), "uncorrectable")),
                          float(c[g].remapped_rows_uncorrectable or 0), f"remapped rows of {g}")
        problems += equal(rows.get((str(g), "correctable")),
                          float(c[g].remapped_rows_correctable or 0), f"remapped rows of {g}")
    problems += each_gpu(f, per_gpu(r["C"]), lambda g: float(bool(c[g].remap_pending)), 0,
                         "remap pending")
    problems += each_gpu(f, per_gpu(r["D"]), lambda g: float(bool(c[g].remap_failed)), 0,
                         "remap failed")
    return problems


def _xids(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    # The scenario reports no Xid: the all-codes total of the range is 0.
    return equal(by(r["A"], "xid"), {("all codes",): 0.0}, "Xids in the range")


def _processes(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    problems = []
    memory, sm = by(r["A"], "pid"), by(r["B"], "pid")
    cpu, wait = by(r["C"], "pid"), by(r["D"], "pid")
    info = by(r["E"], "pid", "gpu")
    problems += equal(set(info), {(str(q.pid), str(g)) for q in f.processes for g in q.gpus},
                      "processes on the GPUs")
    for q in f.processes:
        k = (str(q.pid),)
        problems += near(memory.get(k), q.gpu_memory_ratio * f.memory_usable_bytes,
                         0.001 * f.memory_usable_bytes, f"GPU memory of {q.pid}")
        problems += near(sm.get(k), q.sm_utilization or 0.0, 0.005, f"SM of {q.pid}")
        problems += near(cpu.get(k), q.cpu_ratio, RATE * max(q.cpu_ratio, 0.1), f"CPU of {q.pid}")
        problems += near(wait.get(k), q.run_queue_wait_ratio, 0.005, f"run-queue wait of {q.pid}")
    return problems


# The panel sums each GPU's energy rate over the range in steps of this many
# seconds (``[$__range:60s]``): a GPU whose rate began a step later (its first
# energy reads fall on other polls: slow reads are spread over the GPUs) has
# one step less in its sum, however exact each step is.
ENERGY_STEP_S = 60.0


def _energy_by_gpu(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    """No one holds a GPU of this node: each GPU's energy is one unowned row,
    and the GPUs' energies stand as their power draws do (the same time
    range, so joules over it are proportional to watts), to within one of
    the panel's steps of the range the sums cover."""
    assert not f.owners, "the expected rows are those of a node no workload holds"
    rows = by(r["A"], "gpu", "owner", "split")
    problems = equal({(g, o, s) for g, o, s in rows}, {(str(g), "", "unowned") for g in f.gpus},
                     "energy rows")
    energy = {int(g): v for (g, _, _), v in rows.items()}
    draw = per_gpu(p[("Power against its limit", "timeseries")]["A"])
    top = max(f.gpus, key=lambda g: draw.get(g, 0.0))
    # The seconds the top GPU's sum covers (joules over watts).
    covered = energy.get(top, 0.0) / draw[top] if draw.get(top) else 0.0
    step = ENERGY_STEP_S / covered if covered > 0 else 1.0
    for g in f.gpus:
        if energy.get(g, 0) <= 0 or g not in draw:
            problems.append(f"energy of GPU {g}: {energy.get(g)}")
            continue
        problems += near(energy[g] / energy[top], draw[g] / draw[top], 0.1 + step,
                         f"energy of GPU {g} against GPU {top}'s, as their draws")
    return problems


def _energy_by_workload(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    assert not f.owners, "the expected rows are those of a node no workload holds"
    rows = by(r["A"], "owner", "split")
    problems = equal(set(rows), {("", "unowned")}, "energy rows")
    return problems + [f"energy: {v}" for v in rows.values() if not v > 0]


def _idle_time(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    return each_gpu(f, per_gpu(r["A"]), lambda g: 1 - f.util(g), RATE, "idle time")


def _host_quiet(what: str, threshold: Callable[[NodeFacts], float]
                ) -> Callable[[NodeFacts, Panels, Results], list[str]]:
    """A host the scenario says has capacity to spare: present, and below the
    threshold at which the diagnosis would blame it."""

    def check(f: NodeFacts, p: Panels, r: Results) -> list[str]:
        problems = []
        for ref, results in r.items():
            if not results:
                problems.append(f"{what} {ref}: no data")
            for m, v in results:
                if not 0 <= v < threshold(f):
                    problems.append(f"{what} {ref} {m}: {v:g}, want in [0, {threshold(f):g})")
        return problems
    return check


# --- the fleet dashboard, over the one node ----------------------------------------------------


def _states(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    names = {3: "critical", 2: "warning", 1: "info"}
    want: Counter[str] = Counter()
    for g in f.gpus:
        level = f.severity(g)
        if level:
            want[names[level]] += 1
        else:
            want["ok" if f.util(g) >= f.config.fleet.idle_utilization else "idle"] += 1
    got = {k[0]: v for k, v in by(r["A"], "state").items() if v}
    return equal(got, {k: float(v) for k, v in want.items()}, "GPUs by state")


def _count(what: str, want: Callable[[NodeFacts], int]
           ) -> Callable[[NodeFacts, Panels, Results], list[str]]:
    def check(f: NodeFacts, p: Panels, r: Results) -> list[str]:
        return equal(single(r["A"]), float(want(f)), what)
    return check


def _nodes(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    return (equal(single(r["A"]), float(len(f.gpus)), "GPUs of the node")
            + equal(single(r["B"]), float(len({g for g, _, _ in f.expect})),
                    "GPUs with a diagnosis")
            + near(single(r["C"]), mean(f.util(g) for g in f.gpus), RATE, "utilization"))


def _jobs(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    assert not f.owners, "the expected rows are those of a node no workload holds"
    held = "nobody"
    return (equal(by(r["A"], "held_by"), {(held,): float(len(f.gpus))}, "GPUs held")
            + near(by(r["B"], "held_by").get((held,)), mean(f.util(g) for g in f.gpus), RATE,
                   "their utilization")
            + equal(by(r["C"], "held_by"), {(held,): float(len(f.expect))}, "diagnoses"))


def _throttled_table(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    rows = {(int(m["gpu"]), m["symptom"], m["cause"]) for m, _ in r["A"]}
    want = {e for e in f.expect if e[0] in f.throttled()}
    return equal(rows, want, "throttled GPUs and their causes") + equal(
        {g for g, _, _ in rows}, f.throttled(), "throttled GPUs")


def _downtrained_table(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    down = f.downtrained()
    problems = []
    for ref, want in (("A", f.width), ("B", lambda g: f.width_max),
                      ("C", lambda g: f.generation_max), ("D", lambda g: f.generation_max)):
        got = per_gpu(r[ref])
        problems += equal(set(got), down, f"downtrained GPUs ({ref})")
        problems += [f"{ref} of GPU {g}: {got[g]:g}, want {want(g)}" for g in set(got) & down
                     if got[g] != want(g)]
    return problems


def _stragglers_table(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    util, siblings = per_gpu(r["A"]), per_gpu(r["B"])
    problems = equal(set(util), f.stragglers(), "stragglers") + equal(set(siblings),
                                                                      f.stragglers(), "siblings")
    for g in f.stragglers() & set(util):
        problems += near(util[g], f.util(g), RATE, f"utilization of straggler {g}")
        problems += near(siblings.get(g), mean(f.util(o) for o in f.gpus if o != g), RATE,
                         "its siblings' average")
    return problems


def _no_job_over_nodes(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    """The node's jobs hold GPUs on it alone: no job over nodes, no straggler
    node (tests/mixin/test_fleet_jobs.py shows the panels with jobs over nodes)."""
    return equal({ref: len(found) for ref, found in r.items()}, dict.fromkeys(r, 0),
                 "rows of jobs over nodes")


def _drivers(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    return equal(by(r["A"], "driver_version"), {(f.driver_version,): float(len(f.gpus))},
                 "GPUs per driver")


def _node_utilization(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    return near(single(r["A"]), mean(f.util(g) for g in f.gpus), RATE, "node utilization")


def _by_row(f: NodeFacts, p: Panels, r: Results) -> list[str]:
    want = Counter((s, c) for _, s, c in f.expect)
    return equal(by(r["A"], "symptom", "cause"), {k: float(v) for k, v in want.items()},
                 "GPUs per row")


Check = Callable[[NodeFacts, Panels, Results], list[str]]

CHECKS: dict[str, dict[tuple[str, str], Check]] = {
    "node": {
        ("Active diagnoses", "stat"): _active_count,
        ("NVML", "stat"): _nvml,
        ("Not judged here", "stat"): _not_judged_count,
        ("Active diagnoses: what is wrong and why, and what is not judged", "table"):
            _diagnosis_table,
        ("Utilization beside SM activity", "timeseries"): _utilization,
        ("Memory used", "timeseries"): _memory,
        ("Power against its limit", "timeseries"): _power,
        ("Clocks against max", "timeseries"): _clocks,
        ("Throttle reasons", "state-timeline"): _throttle_reasons,
        ("Time throttled per reason", "timeseries"): _throttle_time,
        ("Temperature against its slowdown threshold", "timeseries"): _temperature,
        ("PCIe link width and generation against max", "timeseries"): _link,
        ("PCIe traffic", "timeseries"): _traffic,
        ("PCIe replays and AER errors", "timeseries"): _zero_everywhere("PCIe errors"),
        ("ECC errors and row remapping", "timeseries"): _ecc,
        ("Xid errors in the time range", "stat"): _xids,
        ("GPU processes", "table"): _processes,
        ("Energy by workload in the time range", "table"): _energy_by_gpu,
        ("GPU idle time", "timeseries"): _idle_time,
        ("Host CPU iowait", "timeseries"): _host_quiet("iowait",
                                                       lambda f: f.config.diagnosis.iowait_high),
        ("Host pressure (PSI)", "timeseries"): _host_quiet(
            "pressure", lambda f: f.config.diagnosis.io_pressure_high),
        ("Host swap", "timeseries"): _host_quiet(
            "swap", lambda f: f.config.diagnosis.swap_bytes_per_s),
    },
    "fleet": {
        ("GPUs by state", "bargauge"): _states,
        ("GPUs", "stat"): _count("GPUs", lambda f: len(f.gpus)),
        ("Throttled GPUs", "stat"): _count("throttled GPUs", lambda f: len(f.throttled())),
        ("Downtrained links", "stat"): _count("downtrained links",
                                              lambda f: len(f.downtrained())),
        ("Stragglers", "stat"): _count("stragglers", lambda f: len(f.stragglers())),
        ("Nodes by cluster", "table"): _nodes,
        ("Which jobs", "table"): _jobs,
        ("Energy by workload", "table"): _energy_by_workload,
        ("Throttled GPUs", "table"): _throttled_table,
        ("Downtrained links", "table"): _downtrained_table,
        ("Stragglers", "table"): _stragglers_table,
        ("Driver versions", "table"): _drivers,
        ("Utilization by node", "timeseries"): _node_utilization,
        ("Active diagnoses by row", "table"): _by_row,
        ("Jobs over nodes", "table"): _no_job_over_nodes,
        ("Straggler nodes of jobs", "table"): _no_job_over_nodes,
    },
}


def check_panels(f: NodeFacts, which: str, got: Panels) -> list[str]:
    """Every panel of a dashboard against its check; a panel with no check,
    or a check with no panel, is a problem too."""
    checks = CHECKS[which]
    problems = [f"{which}: no check for panel {k}" for k in got.keys() - checks.keys()]
    problems += [f"{which}: no panel {k}" for k in checks.keys() - got.keys()]
    for key in checks.keys() & got.keys():
        try:
            problems += [f"{which}: {key[0]} ({key[1]}): {p}"
                         for p in checks[key](f, got, got[key])]
        except (KeyError, AssertionError, TypeError) as exc:
            problems.append(f"{which}: {key[0]} ({key[1]}): {type(exc).__name__}: {exc}")
    return problems
