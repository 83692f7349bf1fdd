"""Causal precedence beside the table: which causes produce the signals of which
other rows. Rules judge each row on its own (swapping *does* raise iowait, so
the data-pipeline rule holds too); this module decides which holding rows are
root causes and which are consequences a root explains, so the on-call engineer
gets one cause per symptom with its chain of evidence, not two contradicting
fixes.

A consequence is explained only while the evidence ties it to its cause:

- the cause is on and its own condition held within ``explained_within``
  (swap stopped but iowait persists: both are reported again), and
- the consequence's evidence does not show it independent (``independent``:
  e.g. the GPU's own process waiting on the run queue is CPU contention that no
  storage stall produces).

``gpu_diagnosis_active`` is 1 for root rows only; an explained row is 0 and
appears in its root's evidence instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.table import ROWS, Row

Evidence = Mapping[str, float | str]


@dataclass(frozen=True)
class Explains:
    cause: Row
    consequence: Row
    why: str  # how the cause produces the consequence's signals, for people
    # The consequence's evidence keys that the cause explains ...
    shows: tuple[str, ...]
    # ... and the cause's evidence keys quoted as "explained by ...".
    cites: tuple[str, ...]
    # True when the consequence's evidence shows it has a life of its own.
    independent: Callable[[Evidence], bool] | None = None
    # A stricter row of the same cause (idle vs. under-fed) explains the looser
    # one for as long as it is on, without the held-recently condition.
    while_on: bool = False

    @property
    def restates(self) -> bool:
        """The consequence is the cause itself, seen more loosely: nothing new
        to list beneath the root."""
        return self.cause.cause == self.consequence.cause and not self.shows


_HOST_CAUSES = (
    (t.IDLE_DATA_PIPELINE_IO, t.UNDERFED_DATA_PIPELINE_IO),
    (t.IDLE_CPU_CONTENTION, t.UNDERFED_CPU_CONTENTION),
    (t.IDLE_HOST_SWAPPING, t.UNDERFED_HOST_SWAPPING),
    (t.IDLE_CPU_LIMIT_THROTTLED, t.UNDERFED_CPU_LIMIT_THROTTLED),
    (t.IDLE_MEMORY_LIMIT_RECLAIM, t.UNDERFED_MEMORY_LIMIT_RECLAIM),
    (t.IDLE_CPU_STEAL, t.UNDERFED_CPU_STEAL),
    (t.IDLE_IO_LIMIT_THROTTLED, t.UNDERFED_IO_LIMIT_THROTTLED),
)
_IO_CITES = ("workload_io_pressure_some_ratio", "host_cpu_iowait_ratio",
             "host_io_pressure_some_ratio")
_CPU_CITES = ("host_cpu_pressure_some_ratio", "workload_cpu_pressure_some_ratio",
              "process_run_queue_wait_seconds_per_second")
_SWAP_CITES = ("host_swap_bytes_per_second", "host_memory_pressure_full_ratio",
               "workload_memory_pressure_full_ratio")
_LIMIT_CITES = ("workload_cpu_throttled_ratio", "workload_cpu_limit_cores")
_MEMORY_LIMIT_CITES = ("workload_memory_limit_hits_per_second",
                       "workload_memory_reclaimed_bytes_per_second",
                       "workload_memory_limit_bytes")
_STEAL_CITES = ("host_cpu_steal_ratio",)
_IO_LIMIT_CITES = ("workload_io_limit_used_ratio", "workload_io_limit_device")
_CITES = {"data_pipeline_io": _IO_CITES, "cpu_contention": _CPU_CITES,
          "host_swapping": _SWAP_CITES, "cpu_limit_throttled": _LIMIT_CITES,
          "memory_limit_reclaim": _MEMORY_LIMIT_CITES, "cpu_steal": _STEAL_CITES,
          "io_limit_throttled": _IO_LIMIT_CITES}
# The Xids that record the same event as a row: reported once, under the
# row that owns it (docs/diagnosis.md). From NVIDIA's Xid catalog (xids.py)
# and its memory error guides: 48 "an uncorrectable double bit error (DBE)
# has been detected", 94 and 95 contained and uncontained ECC errors, 63
# "Row Remapper: New row marked for remapping, reset gpu to activate" (a page
# retired, before row remapping), 64 "unable to retire page" (recording a
# remap failed, which the ECC row reads as a failed remap), 154 "GPU recovery
# action changed" (the recovery action rows read the action itself). 92, a
# high single-bit (corrected) error rate, is recorded by no row.
XIDS_RECORDED_BY: dict[Row, frozenset[int]] = {
    t.ECC_UNCORRECTABLE: frozenset({48, 63, 64, 94, 95}),
    t.ROW_REMAP_PENDING: frozenset({63, 64}),
    t.RECOVERY_GPU_RESET: frozenset({154}),
    t.RECOVERY_NODE_REBOOT: frozenset({154}),
    t.RECOVERY_DRAIN_P2P: frozenset({154}),
    t.RECOVERY_DRAIN_AND_RESET: frozenset({154}),
}
_RECORDING_CITES: dict[Row, tuple[str, ...]] = {
    t.ECC_UNCORRECTABLE: ("ecc_uncorrected_volatile_errors", "row_remap_failed"),
    t.ROW_REMAP_PENDING: ("row_remap_pending",),
}


def _run_queue_measured(ev: Evidence) -> bool:
    """The GPU's process waits on the run queue itself: CPU contention of its
    own, not workers blocked on storage (those sleep in D, off the run queue)."""
    return "process_run_queue_wait_seconds_per_second" in ev


def _xids_beyond(recorded: frozenset[int]) -> Callable[[Evidence], bool]:
    """An Xid row whose codes are not all recorded by the row: an event of
    its own besides."""
    def beyond(ev: Evidence) -> bool:
        xids = {int(x) for x in str(ev.get("xid", "")).split(",") if x.strip()}
        return bool(xids - recorded)
    return beyond


def _edges() -> tuple[Explains, ...]:
    out: list[Explains] = []
    for idle, underfed in _HOST_CAUSES:
        # The same cause at 0 % and at 15 %: report the stricter row.
        out.append(Explains(idle, underfed, "the same cause, with the GPU fully idle",
                            (), (), while_on=True))
    for swap, io in ((t.IDLE_HOST_SWAPPING, t.IDLE_DATA_PIPELINE_IO),
                     (t.IDLE_HOST_SWAPPING, t.UNDERFED_DATA_PIPELINE_IO),
                     (t.UNDERFED_HOST_SWAPPING, t.UNDERFED_DATA_PIPELINE_IO)):
        out.append(Explains(swap, io, "swap-in and swap-out are disk I/O: they raise iowait "
                            "and I/O pressure", _IO_CITES, _SWAP_CITES))
    for io, cpu in ((t.IDLE_DATA_PIPELINE_IO, t.IDLE_CPU_CONTENTION),
                    (t.IDLE_DATA_PIPELINE_IO, t.UNDERFED_CPU_CONTENTION),
                    (t.UNDERFED_DATA_PIPELINE_IO, t.UNDERFED_CPU_CONTENTION)):
        out.append(Explains(io, cpu, "dataloader workers waking from slow reads pile onto the "
                            "CPUs; without the process's own run-queue wait the CPU pressure "
                            "cannot be told apart",
                            ("host_cpu_pressure_some_ratio", "workload_cpu_pressure_some_ratio"),
                            _IO_CITES,
                            independent=_run_queue_measured))
    for cause, _ in _HOST_CAUSES:
        out.append(Explains(cause, t.IDLE_PROCESS_STALLED, "a process held back on its host "
                            "(blocked on reads or page faults, waiting for a CPU or its "
                            "limit) looks stalled", ("process_pid", "process_state",
                                                     "process_cpu_ratio"),
                            _CITES[cause.cause]))
    for pair in _HOST_CAUSES:
        for cause in pair:
            out.append(Explains(cause, t.BURSTY_INPUT, "a starved input pipeline makes the GPU "
                                "alternate between waiting and full speed",
                                ("utilization_samples_min_ratio",
                                 "utilization_samples_max_ratio"), _CITES[cause.cause]))
    # A container held at its CPU limit stalls in CPU pressure of its own, and
    # its tasks wait to run (throttled time counts as run delay).
    for limit, cpu in ((t.IDLE_CPU_LIMIT_THROTTLED, t.IDLE_CPU_CONTENTION),
                       (t.IDLE_CPU_LIMIT_THROTTLED, t.UNDERFED_CPU_CONTENTION),
                       (t.UNDERFED_CPU_LIMIT_THROTTLED, t.UNDERFED_CPU_CONTENTION)):
        out.append(Explains(limit, cpu, "a workload held at its CPU limit waits for CPU time "
                            "it is not allowed to take", ("workload_cpu_pressure_some_ratio",
                                                          "process_run_queue_wait_seconds_"
                                                          "per_second"), _LIMIT_CITES))
    # A workload at its memory limit re-reads the page cache the kernel
    # evicted, and its tasks reclaim in the kernel (D): I/O waits of its own.
    for memory, io in ((t.IDLE_MEMORY_LIMIT_RECLAIM, t.IDLE_DATA_PIPELINE_IO),
                       (t.IDLE_MEMORY_LIMIT_RECLAIM, t.UNDERFED_DATA_PIPELINE_IO),
                       (t.UNDERFED_MEMORY_LIMIT_RECLAIM, t.UNDERFED_DATA_PIPELINE_IO)):
        out.append(Explains(memory, io, "a workload at its memory limit reads again what the "
                            "kernel evicted to make room", (*_IO_CITES, "process_state"),
                            _MEMORY_LIMIT_CITES))
    # A workload held at its I/O limit stalls on I/O of its own, its reads
    # blocked in the kernel (D): the limit, not the storage, is why.
    for limit, io in ((t.IDLE_IO_LIMIT_THROTTLED, t.IDLE_DATA_PIPELINE_IO),
                      (t.IDLE_IO_LIMIT_THROTTLED, t.UNDERFED_DATA_PIPELINE_IO),
                      (t.UNDERFED_IO_LIMIT_THROTTLED, t.UNDERFED_DATA_PIPELINE_IO)):
        out.append(Explains(limit, io, "a workload held at its I/O limit waits on reads the "
                            "limit delays, not on the storage", (*_IO_CITES, "process_state"),
                            _IO_LIMIT_CITES))
    # A stolen CPU leaves runnable tasks waiting in the guest.
    for steal, cpu in ((t.IDLE_CPU_STEAL, t.IDLE_CPU_CONTENTION),
                       (t.IDLE_CPU_STEAL, t.UNDERFED_CPU_CONTENTION),
                       (t.UNDERFED_CPU_STEAL, t.UNDERFED_CPU_CONTENTION)):
        out.append(Explains(steal, cpu, "the hypervisor runs others on the VM's CPUs: the "
                            "guest's tasks wait for them", _CPU_CITES, _STEAL_CITES))
    out.append(Explains(t.FAN_STOPPED, t.THERMAL, "a stopped fan leaves its heat on the GPU "
                        "until the driver slows it", ("thermal_reasons_active",
                                                      "temperature_celsius"),
                        ("fan_0_speed_ratio", "fan_1_speed_ratio")))
    out.append(Explains(t.FAN_STOPPED, t.HW_SLOWDOWN, "a stopped fan heats the GPU until the "
                        "hardware slows it", ("hw_slowdown_active",),
                        ("fan_0_speed_ratio", "fan_1_speed_ratio")))
    out.append(Explains(t.ECC_UNCORRECTABLE, t.ALLOCATED_UNUSED, "an uncorrectable error "
                        "ended the job on the GPU: its pod keeps the GPU with nothing "
                        "running on it", ("gpu_processes",),
                        ("ecc_uncorrected_volatile_errors",)))
    out.append(Explains(t.ALLOCATED_RUNS_ON_CPU, t.ALLOCATED_UNUSED, "the pod runs its "
                        "code on the CPU: no process of it reaches the GPU",
                        ("gpu_processes",), ("owner", "owner_cpu_cores")))
    out.append(Explains(t.POWER_BRAKE, t.HW_SLOWDOWN, "the driver sets hw_slowdown with "
                        "hw_power_brake", ("hw_slowdown_active",), ("hw_power_brake_active",)))
    out.append(Explains(t.THERMAL, t.HW_SLOWDOWN, "the driver sets hw_slowdown for high "
                        "temperature", ("hw_slowdown_active",),
                        ("thermal_reasons_active", "temperature_celsius")))
    out.append(Explains(t.ECC_UNCORRECTABLE, t.ROW_REMAP_PENDING, "an uncorrectable error "
                        "queues its row for remapping; the same reset retires it",
                        ("row_remap_pending",), ("ecc_uncorrected_volatile_errors",)))
    for recording, codes in XIDS_RECORDED_BY.items():
        out.append(Explains(recording, t.XID, "the driver logs this same event as Xid "
                            + "/".join(str(x) for x in sorted(codes))
                            + " (NVIDIA's Xid catalog): one event, reported once", ("xid",),
                            _RECORDING_CITES.get(recording, ("recovery_action",)),
                            independent=_xids_beyond(codes)))
    # A lost GPU answers nothing: whatever else was on for it is stale. What
    # the exporter remembers of it (a fault back after a reset) is not read
    # from it, and is a finding of its own beside the loss.
    for other in ROWS:
        if other is not t.GPU_LOST and other is not t.FAULT_CAME_BACK:
            out.append(Explains(t.GPU_LOST, other, "NVML cannot reach the GPU", (),
                                ("gpu_up",), while_on=True))
    return tuple(out)


PRECEDENCE: tuple[Explains, ...] = _edges()


@dataclass(frozen=True)
class Candidate:
    """A row that is on for a GPU, as the engine's steady state sees it."""

    row: Row
    evidence: Evidence
    held_recently: bool  # its condition held within explained_within


@dataclass(frozen=True)
class Explained:
    row: Row
    evidence: Evidence
    by: Explains


def resolve(on: Iterable[Candidate],
            edges: tuple[Explains, ...] = PRECEDENCE) -> dict[Row, list[Explained]]:
    """The root rows among ``on``, each with the rows it explains (directly or
    through a chain: swapping -> iowait -> a stalled process). Rows that only
    restate their root more loosely (under-fed beside idle, same cause) are
    suppressed without being listed."""
    cands = {c.row: c for c in on}
    if not cands:  # the usual poll: nothing is on
        return {}
    by_consequence = _index(edges)

    def explainer(row: Row) -> Explains | None:
        for e in by_consequence.get(row, ()):
            cause = cands.get(e.cause)
            if cause is None or not (e.while_on or cause.held_recently):
                continue
            if e.independent is not None and e.independent(cands[row].evidence):
                continue
            return e
        return None

    parent = {row: explainer(row) for row in cands}

    def root_of(row: Row) -> Row:
        seen = {row}
        while (e := parent[row]) is not None:
            row = e.cause
            if row in seen:  # pragma: no cover - _check_acyclic forbids it
                break
            seen.add(row)
        return row

    roots: dict[Row, list[Explained]] = {r: [] for r in cands if parent[r] is None}
    for row, edge in parent.items():
        if edge is not None and not edge.restates:
            roots[root_of(row)].append(Explained(row, cands[row].evidence, edge))
    # Beneath one root, list a consequence once: the under-fed row restates
    # the idle row of the same cause when both are there.
    restating = {(e.cause, e.consequence) for e in edges if e.restates}
    for root, items in roots.items():
        listed = {i.row for i in items}
        roots[root] = [i for i in items
                       if not any((other, i.row) in restating for other in listed)]
    return roots


@cache
def _index(edges: tuple[Explains, ...]) -> dict[Row, tuple[Explains, ...]]:
    """Consequence -> the edges that can explain it, an edge that says why
    (not a mere restatement) first."""
    out: dict[Row, list[Explains]] = {}
    for e in edges:
        out.setdefault(e.consequence, []).append(e)
    return {row: tuple(sorted(es, key=lambda e: e.restates)) for row, es in out.items()}


def _check_acyclic() -> None:
    graph: dict[Row, set[Row]] = {}
    for e in PRECEDENCE:
        graph.setdefault(e.cause, set()).add(e.consequence)
    state: dict[Row, int] = {}

    def visit(r: Row) -> None:
        if state.get(r) == 1:
            raise ImportError(f"diagnosis precedence has a cycle through {r.key}")
        if state.get(r) == 2:
            return
        state[r] = 1
        for n in graph.get(r, ()):
            visit(n)
        state[r] = 2

    for r in list(graph):
        visit(r)


_check_acyclic()
