"""Run cases on the real exporter and hold what it reports to their truth.

A case runs a simulated minute, polled every 2 s on a virtual clock, with the
exporter's default settings; what counts is what ``/diagnosis`` would answer
at the end: the root findings, each with its GPU (and MIG instance) and its
owners.

- An expected cause is found when a root finding on its GPU (and instance)
  names its cause.
- Every other root finding is a false finding: a cause the case did not
  inject, a consequence reported beside its cause instead of under it, or the
  same cause reported twice for one place.
- An expected cause with owners is attributed right when the finding names
  exactly those owners.
"""

from __future__ import annotations

import logging
import traceback
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_exporter.daemon.exporter import Exporter
from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.settings.config import Settings
from gpu_exporter.simulator import SimulatedNode
from gpu_exporter.simulator.clock import VirtualClock
from gpu_exporter.simulator.model import Scenario
from scenario_generator.truth import Case, Expected

RUN_S, POLL_S = 64.0, 2.0
EPOCH = 1_790_000_000.0


def owner_text(owner: Mapping[str, Any]) -> str:
    if owner.get("slurm_job_id"):
        user = f" (uid {owner['slurm_uid']})" if owner.get("slurm_uid") else ""
        return f"slurm job {owner['slurm_job_id']}{user}"
    return f"{owner.get('namespace', '')}/{owner.get('pod', '')}/{owner.get('container', '')}"


def run(case: Case) -> list[dict[str, Any]]:
    """The root findings at the end of the case's minute, as /diagnosis has them."""
    scenario = Scenario.model_validate(case.scenario)
    clock = VirtualClock(EPOCH)
    node = SimulatedNode(scenario, clock=clock)
    try:
        exporter = Exporter(Settings(web={"listen_address": "127.0.0.1:0"}), node,
                            monotonic=clock, wall_clock=clock, synchronous=True)
    except BaseException:
        node.close()
        raise
    try:
        snap = exporter.poller.poll_once()
        elapsed = 0.0
        while elapsed < RUN_S - 1e-9:
            clock.advance(POLL_S)
            elapsed += POLL_S
            snap = exporter.poller.poll_once()
        return [f.as_dict() for f in snap.derived(FINDINGS) or ()]
    finally:
        exporter.stop()


def _place(f: Mapping[str, Any]) -> tuple[int, str, int | None]:
    gi = f.get("gpu_instance")
    return int(str(f["gpu"])), str(f["cause"]), None if gi in (None, "") else int(str(gi))


@dataclass
class Outcome:
    case: Case
    found: list[Expected] = field(default_factory=list)
    missed: list[Expected] = field(default_factory=list)
    false: list[str] = field(default_factory=list)  # "cause on GPU n", each a root finding
    owner_wrong: list[str] = field(default_factory=list)
    reported: list[str] = field(default_factory=list)


def judge(case: Case, findings: Iterable[Mapping[str, Any]]) -> Outcome:
    out = Outcome(case)
    unmatched = list(findings)
    out.reported = [f"{f['symptom']}/{f['cause']} on GPU {f['gpu']}"
                    + (f" instance {f['gpu_instance']}" if f.get("gpu_instance") not in
                       (None, "") else "") for f in unmatched]
    for want in case.expected:
        hit = next((f for f in unmatched
                    if _place(f) == (want.gpu, want.cause, want.gpu_instance)), None)
        if hit is None:
            out.missed.append(want)
            continue
        unmatched.remove(hit)
        out.found.append(want)
        if want.owners is not None:
            named = frozenset(owner_text(o) for o in hit.get("owners", []))
            if named != want.owners:
                out.owner_wrong.append(f"{want.describe()}: named {sorted(named)}, "
                                       f"expected {sorted(want.owners)}")
    out.false = [f"{f['symptom']}/{f['cause']} on GPU {f['gpu']}" for f in unmatched]
    return out


def outcome(case: Case) -> Outcome:
    """Run ``case`` and judge what it reported."""
    # The exporter's own log (a lost GPU, an Xid) is part of the cases here.
    logging.disable(logging.CRITICAL)
    try:
        return judge(case, run(case))
    except Exception as exc:  # name the case: a worker's traceback does not come back
        raise RuntimeError(f"case {case.name} failed:\n{traceback.format_exc()}") from exc


@dataclass
class Tally:
    cases: int = 0
    expected: int = 0
    found: int = 0
    false: int = 0
    attributed: int = 0
    owner_right: int = 0
    # (class, board, band) -> [found, expected, false]
    cells: dict[tuple[str, str, int], list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0, 0]))
    false_kinds: Counter[str] = field(default_factory=Counter)

    def add(self, o: Outcome) -> None:
        c = o.case
        self.cases += 1
        self.expected += len(c.expected)
        self.found += len(o.found)
        self.false += len(o.false)
        attributed = [e for e in o.found if e.owners is not None]
        self.attributed += len(attributed)
        self.owner_right += len(attributed) - len(o.owner_wrong)
        # Each expected cause counts in its own class's cell; the false
        # findings in the cell of the case's class.
        for e in c.expected:
            self.cells[(e.source, c.board, e.band)][1] += 1
        for e in o.found:
            self.cells[(e.source, c.board, e.band)][0] += 1
        self.cells[(c.label, c.board, c.band)][2] += len(o.false)
        for f in o.false:
            self.false_kinds[f"{f.split(' on ')[0]} (case: {c.label})"] += 1

    @property
    def recall(self) -> float:
        return self.found / self.expected if self.expected else 1.0

    @property
    def false_per_case(self) -> float:
        return self.false / self.cases if self.cases else 0.0

    @property
    def owner_accuracy(self) -> float:
        return self.owner_right / self.attributed if self.attributed else 1.0

    def summary(self) -> str:
        return (f"{self.cases} cases, {self.expected} expected root causes: recall "
                f"{self.recall:.1%} ({self.found}/{self.expected}); false findings "
                f"{self.false} ({self.false_per_case:.2%} of cases); owner right on "
                f"{self.owner_right}/{self.attributed} attributed findings "
                f"({self.owner_accuracy:.1%})")

    def by(self, axis: int) -> dict[str, dict[str, list[int]]]:
        """class -> (board or band) -> [found, expected, false]."""
        out: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(
            lambda: [0, 0, 0]))
        for key, (found, expected, false) in self.cells.items():
            col = str(key[axis]) if axis == 1 else f"{key[2]:02d}"
            cell = out[key[0]][col]
            cell[0] += found
            cell[1] += expected
            cell[2] += false
        return out
