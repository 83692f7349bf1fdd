"""A row is judged again when what its rule reads changes or its window moves
it; otherwise its last verdict stands (engine.py, standing.py). Whether a
verdict stood or the row was judged again must never show: an engine that
judges every row every poll and one that lets verdicts stand give the same
findings, series, coverage and jobs at every poll, on any sequence of
readings: long steady stretches, then a change; counters that step once and
then stay; the host moving under GPUs with and without a job; Xids ageing
out of their hold; polls early, late and far apart."""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field, fields
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_exporter.catalogs.diagnosis import (
    DIAGNOSIS_ACTIVE,
    DIAGNOSIS_INPUT_MISSING,
    DIAGNOSIS_NOT_JUDGED,
)
from gpu_exporter.diagnosis import coverage
from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.counters import NODE
from gpu_exporter.diagnosis.coverage import COVERAGE
from gpu_exporter.diagnosis.engine import FINDINGS, INPUTS_MISSING, JOBS, Diagnosis
from gpu_exporter.diagnosis.registry import READS_HOST, RULES, HostFields
from gpu_exporter.poll.readings import (
    GpuReading,
    HostSignals,
    NvlinkReading,
    ProcessReading,
    XidEvent,
)
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.settings.thresholds import DiagnosisConfig

EPOCH = 1_700_000_000.0
GPUS = 2
GIB = 2.0**30
# A short window and hold, so that rows turn on, clear and Xids age out
# within a run.
CFG = DiagnosisConfig(window=10.0, clear_after=6.0, hold_ratio=0.8, xid_hold=20.0)


@dataclass
class Gpu:
    """What one GPU reads; the test changes one field at a time."""

    utilization: float = 0.0
    reasons: frozenset[str] = frozenset({"gpu_idle"})
    temperature: float = 40.0
    sm_clock: float = 1.98e9
    memory_used: float = 0.0
    pcie_replays: float = 0.0
    nvlink_crc: float = 0.0
    ecc: float = 0.0
    power_limit: float = 700.0
    process: bool = False
    process_state: str = "R"
    board: str = "a"  # another board at the same index: its rows start afresh


@dataclass
class Node:
    gpus: list[Gpu] = field(default_factory=lambda: [Gpu() for _ in range(GPUS)])
    memory_available: float = 400 * GIB
    iowait: float = 0.0
    cpu_pressure: float = 0.0
    steal: float = 0.0
    swap: float = 0.0
    cpu_throttles: float = 0.0
    xids: list[tuple[int, float, int]] = field(default_factory=list)  # (gpu, at, code)


# One change to the node: (GPU or None for the host, field, how it moves).
GPU_CHANGES: dict[str, Any] = {
    "utilization": st.sampled_from([0.0, 0.03, 0.4, 0.97]),
    "reasons": st.sampled_from([frozenset({"gpu_idle"}), frozenset(),
                                frozenset({"sw_power_cap"}), frozenset({"hw_thermal"}),
                                frozenset({"hw_slowdown", "hw_power_brake"})]),
    "temperature": st.sampled_from([40.0, 86.0, 91.0]),
    "sm_clock": st.sampled_from([1.98e9, 1.2e9]),
    "memory_used": st.sampled_from([0.0, 10 * GIB, 79.5 * GIB]),
    "memory_climb": st.sampled_from([0.5 * GIB, 2 * GIB]),  # added to memory_used
    "pcie_replays": st.sampled_from([1.0, 60.0, 500.0]),  # added: a counter steps
    "nvlink_crc": st.sampled_from([1.0, 5000.0]),  # added
    "ecc": st.sampled_from([0.0, 1.0]),
    "power_limit": st.sampled_from([700.0, 450.0]),
    "process": st.booleans(),
    "process_state": st.sampled_from(["R", "S", "D"]),
    "board": st.sampled_from(["a", "b"]),
}
HOST_CHANGES: dict[str, Any] = {
    "memory_available": st.sampled_from([400 * GIB, 20 * GIB, 2 * GIB]),
    "memory_leak": st.sampled_from([0.5 * GIB, 3 * GIB]),  # taken off memory_available
    "iowait": st.sampled_from([0.0, 0.6]),
    "cpu_pressure": st.sampled_from([0.0, 0.7]),
    "steal": st.sampled_from([0.0, 0.3]),
    "swap": st.sampled_from([0.0, 5e8]),
    "cpu_throttles": st.sampled_from([1.0, 40.0]),  # added
}


Move = tuple[int | None, str, Any]


@st.composite
def change(draw: st.DrawFn) -> Move:
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(HOST_CHANGES)))
        return None, name, draw(HOST_CHANGES[name])
    if draw(st.integers(0, 9)) == 0:
        return draw(st.integers(0, GPUS - 1)), "xid", draw(st.sampled_from([13, 48, 79, 74]))
    name = draw(st.sampled_from(sorted(GPU_CHANGES)))
    return draw(st.integers(0, GPUS - 1)), name, draw(GPU_CHANGES[name])


# A change: how long after the last poll it comes, the moves (none: a poll
# like the last), and how many polls hold still after it, 2 s apart (a
# window's worth, or past it, so that verdicts stand and then move).
polls = st.lists(st.tuples(st.sampled_from([0.5, 1.0, 2.0, 2.1, 3.0, 9.0, 25.0]),
                           st.one_of(st.just([]), st.lists(change(), min_size=1, max_size=3)),
                           st.sampled_from([0, 1, 3, 6, 12])),
                 min_size=1, max_size=12)
# How the node starts: idle, or with a job on GPU 0 (its starved rows read
# the host), at a load the starved rows judge.
starts = st.sampled_from([[], [(0, "process", True)],
                          [(0, "process", True), (0, "reasons", frozenset()),
                           (0, "utilization", 0.03)]])


def apply(node: Node, at: float, moves: list[Move]) -> None:
    for gpu, name, value in moves:
        if gpu is None:
            if name == "memory_leak":
                node.memory_available = max(0.0, node.memory_available - value)
            elif name == "cpu_throttles":
                node.cpu_throttles += value
            else:
                setattr(node, name, value)
            continue
        g = node.gpus[gpu]
        if name == "xid":
            node.xids.append((gpu, EPOCH + at, value))
        elif name == "memory_climb":
            g.memory_used = min(80 * GIB, g.memory_used + value)
        elif name in ("pcie_replays", "nvlink_crc"):
            setattr(g, name, getattr(g, name) + value)
        else:
            setattr(g, name, value)


def readings(node: Node, out: SnapshotBuilder) -> None:
    """The readers' readings of ``node``: new objects every poll, as theirs are."""
    r = out.readings
    r.gpus = {i: GpuReading(
        i, f"GPU-{i}{g.board}", True, utilization=g.utilization, memory_used_bytes=g.memory_used,
        memory_total_bytes=80 * GIB, temperature_celsius=g.temperature,
        slowdown_celsius=90.0, power_watts=g.power_limit, power_limit_watts=g.power_limit,
        power_default_limit_watts=700.0, clocks_hz={"sm": g.sm_clock},
        clocks_max_hz={"sm": 1.98e9}, throttle_reasons=g.reasons, pcie_generation=5,
        pcie_generation_max=5, pcie_width=16, pcie_width_max=16, pcie_replays=g.pcie_replays,
        ecc_uncorrected_volatile=g.ecc, remap_pending=False, remap_failed=False,
        persistence_mode=True) for i, g in enumerate(node.gpus)}
    r.host_signals = HostSignals(
        iowait_ratio=node.iowait, io_pressure_some=node.iowait / 2,
        cpu_pressure_some=node.cpu_pressure, memory_pressure_full=0.0,
        swap_bytes_per_s=node.swap, steal_ratio=node.steal,
        cpu_thermal_throttles=node.cpu_throttles, cpu_thermal_kept=True,
        cpu_thermal_throttled_seconds=node.cpu_throttles / 4,
        memory_total_bytes=512 * GIB, memory_available_bytes=node.memory_available)
    r.processes = [ProcessReading(i, 4000 + i, "python3", g.memory_used, g.utilization,
                                  state=g.process_state, cpu_ratio=0.5,
                                  run_queue_wait_ratio=0.05, affinity_local=True,
                                  wakeups_per_s=20.0)
                   for i, g in enumerate(node.gpus) if g.process]
    r.nvlink = {i: NvlinkReading(4, 4, {(link, kind): (g.nvlink_crc if link == 1 and
                                                       kind == "crc" else 0.0)
                                        for link in range(4) for kind in ("crc", "replay")})
                for i, g in enumerate(node.gpus)}
    r.xid = [XidEvent(gpu, f"GPU-{gpu}", code, at) for gpu, at, code in node.xids]


def seen(snap: Snapshot, engine: Diagnosis) -> tuple[Any, ...]:
    """Everything the diagnosis said at one poll."""
    findings = snap.derived(FINDINGS) or ()
    return (
        [(f.gpu, f.row.key, f.evidence, f.since, f.explains, f.owners) for f in findings],
        {name: snap.series(name) for name in (DIAGNOSIS_ACTIVE.name, DIAGNOSIS_NOT_JUDGED.name,
                                              DIAGNOSIS_INPUT_MISSING.name)},
        snap.derived(COVERAGE), snap.derived(JOBS), snap.derived(INPUTS_MISSING),
        engine.errors())


def run(start: list[Move], steps: list[tuple[float, list[Move], int]],
        stand: bool) -> list[tuple[Any, ...]]:
    clock = [0.0]
    engine = Diagnosis(CFG, lambda: clock[0], lambda: EPOCH + clock[0], detail=True,
                       interval=2.0)
    engine.verdicts_stand = stand
    node = Node()
    apply(node, 0.0, start)
    said = []
    for dt, moves, hold in steps:
        for i in range(1 + hold):
            clock[0] += 2.0 if i else dt
            apply(node, clock[0], [] if i else moves)
            out = SnapshotBuilder(EPOCH + clock[0])
            readings(node, out)
            engine.collect(out)
            said.append(seen(out.build(), engine))
    return said


@settings(max_examples=150, deadline=None)
@given(start=starts, steps=polls)
def test_standing_verdicts_say_what_judging_every_poll_says(
        start: list[Move], steps: list[tuple[float, list[Move], int]]) -> None:
    every_poll = run(start, steps, stand=False)
    standing = run(start, steps, stand=True)
    for i, (judged, stood) in enumerate(zip(every_poll, standing, strict=True)):
        assert stood == judged, i


def test_a_node_that_holds_still_is_not_judged_again() -> None:
    # What the standing saves: on an idle node whose readings hold still, no
    # rule runs once the rows have had their window; a move of the host has
    # the rows that read it judged again, one of a GPU that GPU's rows.
    calls: list[str] = []
    clock = [0.0]
    engine = Diagnosis(CFG, lambda: clock[0], lambda: EPOCH + clock[0], interval=2.0)
    for j in engine._gpu_rows:
        object.__setattr__(j, "rule", _counting(j.rule, j.key, calls))
    node = Node()

    def poll() -> None:
        clock[0] += 2.0
        calls.clear()
        out = SnapshotBuilder(EPOCH + clock[0])
        readings(node, out)
        engine.collect(out)

    def settle() -> None:
        # Until a moved reading has left the window (5 polls), the rows that
        # read it are judged again at each poll; then nothing is.
        for _ in range(8):
            poll()
        assert calls == []

    for _ in range(40):
        poll()
    assert calls == []
    every = sorted(j.key for j in engine._gpu_rows)
    starved = sorted(j.key for j in engine._gpu_rows if j.row in READS_HOST
                     and j.row not in (t.HOST_CPU_THERMAL, t.HOST_MEMORY_GROWTH))
    leak = [t.HOST_MEMORY_GROWTH.key]
    node.memory_available -= GIB  # the host's memory in use moves, as it does every poll
    poll()
    # The rows that read the host read it only where a job holds the GPU
    # (a starved GPU's, the host's memory growth and CPU throttling: with no
    # job their verdict is the job's absence), and none does.
    assert calls == []
    node.cpu_throttles += 3.0
    poll()
    assert calls == []
    node.gpus[1].temperature = 91.0
    poll()
    assert sorted(calls) == every  # that GPU's rows, the other's none
    settle()
    node.gpus[0].process = True  # a job: now its rows that read the host read it
    poll()
    assert sorted(calls) == every
    settle()
    node.memory_available -= GIB
    poll()
    # That GPU's rows that read the host's memory or all of it; the CPUs'
    # thermal row reads their throttle counters, which held still.
    assert sorted(calls) == sorted(starved + leak)
    settle()
    node.cpu_throttles += 3.0
    poll()
    assert sorted(calls) == sorted([*starved, t.HOST_CPU_THERMAL.key])


def _counting(rule: Any, key: str, calls: list[str]) -> Any:
    def counted(*args: Any) -> Any:
        calls.append(key)
        return rule(*args)
    return counted


def _host_reads(fn: Any) -> set[str]:
    """The host fields a rule's source reads: attributes of ``s.host``, or of
    a name bound to it."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    bound = {node.targets[0].id for node in ast.walk(tree)
             if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
             and isinstance(node.value, ast.Attribute) and node.value.attr == "host"}

    def is_host(value: ast.expr) -> bool:
        return ((isinstance(value, ast.Name) and value.id in bound)
                or (isinstance(value, ast.Attribute) and value.attr == "host"))

    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and is_host(node.value)}


def test_a_row_that_names_its_host_fields_reads_those_and_no_other() -> None:
    # Its verdict stands while the fields it names hold still: a field its
    # rule read but did not name would leave a verdict standing that judging
    # again would change.
    named = {row: read for row, read in READS_HOST.items() if isinstance(read, HostFields)}
    assert {t.HOST_CPU_THERMAL, t.HOST_MEMORY_GROWTH} <= named.keys()
    for row, read in named.items():
        assert _host_reads(RULES[row]) == set(read.names), row.key
        assert set(read.names) <= {f.name for f in fields(HostSignals)}, row.key


def test_a_gpu_whose_readings_hold_still_keeps_its_reasons(monkeypatch: Any) -> None:
    # Why a row went unjudged is worked out by running its rule once more,
    # traced: on a GPU whose readings held still since, that would find the
    # same, however long ago it was. A GPU whose readings moved has them
    # worked out again within REASONS_KEPT_S, and only that GPU.
    traced: list[int] = []
    real = coverage._absent_reads

    def tracing(row: Any, sig: Any, cfg: Any) -> Any:
        traced.append(sig.index)
        return real(row, sig, cfg)

    monkeypatch.setattr(coverage, "_absent_reads", tracing)
    clock = [0.0]
    engine = Diagnosis(CFG, lambda: clock[0], lambda: EPOCH + clock[0], interval=2.0)
    node = Node()

    def poll() -> None:
        clock[0] += 2.0
        out = SnapshotBuilder(EPOCH + clock[0])
        readings(node, out)
        engine.collect(out)

    for _ in range(10):
        poll()
    assert set(traced) == set(range(GPUS))  # each GPU has rows it cannot judge
    traced.clear()
    for _ in range(4 * int(coverage.REASONS_KEPT_S / 2)):
        poll()
    assert traced == []
    node.memory_available -= GIB  # the host moves: no reason names a value it has
    poll()
    assert traced == []
    node.gpus[1].temperature = 41.0
    poll()
    assert set(traced) == {1}
    traced.clear()
    for _ in range(4 * int(coverage.REASONS_KEPT_S / 2)):
        poll()
    assert traced == []


def test_the_hosts_trend_is_kept_once_and_read_by_a_job_that_comes_later() -> None:
    # The host leaks while no job holds a GPU: its rows stand, and the host's
    # memory in use is kept once for the node, not once a GPU. A job that
    # comes reads the window's climb, kept all along.
    clock = [0.0]
    engine = Diagnosis(CFG, lambda: clock[0], lambda: EPOCH + clock[0], interval=2.0)
    node = Node()
    leak = 5 * GIB  # a poll, 2 s apart: none left within minutes

    def poll() -> list[Any]:
        clock[0] += 2.0
        node.memory_available -= leak
        out = SnapshotBuilder(EPOCH + clock[0])
        readings(node, out)
        engine.collect(out)
        return [f for f in out.build().derived(FINDINGS) or ()
                if f.row == t.HOST_MEMORY_GROWTH]

    for _ in range(12):
        assert poll() == []
    kept = [key for key in engine._counters._kept if key[1] == "host_memory_used_bytes"]
    assert kept == [(NODE, "host_memory_used_bytes")]
    node.gpus[1].process = True
    found = []
    for _ in range(int(CFG.window / 2) + 2):
        found = poll()
        if found:
            break
    assert [f.gpu for f in found] == [1]
    assert found[0].evidence["host_memory_growth_bytes_per_s"] == leak / 2


def test_a_row_that_held_before_a_long_stand_needs_its_window_again() -> None:
    # A row held for 4 polls of its window's 6, not enough to turn on, then
    # its condition cleared and every row of the node stood for 24 s. When it
    # holds again, the polls it held before are out of the window: one poll
    # holding is 1 in 6, and the row stays off. Counting the polls the node
    # stood (each skipped as a whole) must age those bits as judging every
    # poll does; a count lost would leave them recent and turn the row on.
    thermal = [(0, "reasons", frozenset({"hw_thermal"}))]
    start: list[Move] = [(0, "utilization", 0.97), (0, "reasons", frozenset())]
    steps = [(2.0, thermal, 4), (2.0, [(0, "reasons", frozenset())], 12), (2.0, thermal, 2)]
    every_poll = run(start, steps, stand=False)
    standing = run(start, steps, stand=True)
    assert standing == every_poll
    again = 5 + 13  # the first poll holding again
    assert every_poll[again][0] == [], "held once in the window: not on yet"
