"""Every health event type the driver offers, on the one event set the Xid
reader drains: each is registered where the GPU offers it (its branch and
board: nvmlDeviceGetSupportedEventTypes), counted in gpu_events_total by its
name, and makes the GPU's readers read again at once what it concerns (the
row that owns it judges the fresh reading, not one held for ten polls).

The branch facts (which release brought which type) are NVIDIA's NVML change
log's, kept in simulator/drivers.py; the event names and bits are nvml.h's
(pynvml's nvmlEventType* constants, checked here against our own)."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from gpu_exporter.diagnosis.coverage import answer
from gpu_exporter.diagnosis.events import EVENT_ROWS
from gpu_exporter.diagnosis.table import BY_KEY
from gpu_exporter.nvml import constants as c
from gpu_exporter.simulator.model import Scenario
from tests.exposition import values
from tests.nvml.test_driver_branches import on_branch
from tests.simnode import SimRun

NEWER = ("ecc_single_bit_storm", "dram_retirement", "dram_retirement_failure",
         "poison_non_fatal", "poison_fatal", "gpu_unavailable", "recovery_action")


def test_the_event_bits_are_nvml_h_s() -> None:
    theirs = {"nvmlEventTypeSingleBitEccError": "ecc_single_bit",
              "nvmlEventTypeDoubleBitEccError": "ecc_double_bit",
              "nvmlEventTypeXidCriticalError": "xid",
              "nvmlEventTypePowerSourceChange": "power_source_change",
              "nvmlEventTypeSingleBitEccErrorStorm": "ecc_single_bit_storm",
              "nvmlEventTypeDramRetirementEvent": "dram_retirement",
              "nvmlEventTypeDramRetirementFailure": "dram_retirement_failure",
              "nvmlEventTypeNonFatalPoisonError": "poison_non_fatal",
              "nvmlEventTypeFatalPoisonError": "poison_fatal",
              "nvmlEventTypeGpuUnavailableError": "gpu_unavailable",
              "nvmlEventTypeGpuRecoveryAction": "recovery_action"}
    assert {getattr(pynvml, name): ours for name, ours in theirs.items()} == c.EVENT_NAMES
    # Every health type nvml.h has is wanted: all of nvmlEventTypeAll but the
    # P-state, clock and MIG-reconfiguration changes.
    not_health = (pynvml.nvmlEventTypePState | pynvml.nvmlEventTypeClock
                  | pynvml.nvmlEventMigConfigChange)
    wanted = pynvml.nvmlEventTypeAll & ~not_health
    assert wanted == c.EVENT_TYPES_WANTED


def test_each_event_type_has_the_row_that_owns_it() -> None:
    assert set(EVENT_ROWS) == set(c.EVENT_NAMES.values())
    for name, row in EVENT_ROWS.items():
        assert row is None or BY_KEY[row.key] is row, name


def _with_events(branch: str | None, at: float = 3.0, **gpu0: Any) -> Scenario:
    sc = on_branch("healthy", branch)
    data = sc.model_dump(exclude_unset=True)
    data["timeline"] = [*data.get("timeline", []),
                        {"at": at, "gpus": [0], "set": {"nvml_events": list(NEWER), **gpu0}}]
    return Scenario.model_validate(data)


def _counts(text: str) -> dict[str, float]:
    return {name: sum(values(text, "gpu_events_total", gpu="0", type=name)) for name in NEWER}


def test_every_newer_event_is_counted_on_the_newest_branch() -> None:
    with SimRun(_with_events(None)) as run:
        run.poll(2)
        before = _counts(run.scrape())
        run.poll(3)
        after = _counts(run.scrape())
        other = sum(values(run.scrape(), "gpu_events_total", gpu="1"))
    assert before == dict.fromkeys(NEWER, 0.0)
    assert after == dict.fromkeys(NEWER, 1.0)
    assert other == 0  # the events were GPU 0's


@pytest.mark.parametrize(("branch", "offered"), [("R550", ()), ("R570", NEWER)])
def test_a_branch_offers_the_types_it_knows(branch: str, offered: tuple[str, ...]) -> None:
    with SimRun(_with_events(branch)) as run:
        run.poll(5)
        counted = {name for name, n in _counts(run.scrape()).items() if n}
        gpu = run.exporter.session.gpus[0]
        mask = int(gpu.static["event_types"])  # type: ignore[call-overload]
    assert counted == set(offered)
    names = {name for bit, name in c.EVENT_NAMES.items() if mask & bit}
    assert names >= {"xid", "ecc_single_bit", "ecc_double_bit"}
    assert names & set(NEWER) == set(offered)


def test_a_dram_retirement_makes_the_pending_remap_read_at_once() -> None:
    """The remap flags are read one poll in ten; the driver's retirement event
    makes the next poll read them, so the row sees the pending remap at once."""
    def pending_after(events: bool) -> list[float]:
        sc = _with_events(None, at=3.5, remap_pending=True, remapped_rows_correctable=1)
        if not events:
            data = sc.model_dump(exclude_unset=True)
            data["timeline"][-1]["set"].pop("nvml_events")
            sc = Scenario.model_validate(data)
        with SimRun(sc) as run:
            run.poll(5)
            return values(run.scrape(), "gpu_row_remap_pending", gpu="0")
    assert pending_after(events=False) == [0.0]  # held from the last slow read
    assert pending_after(events=True) == [1.0]


def test_what_a_branch_does_not_offer_is_listed_as_not_available() -> None:
    """The event types an older branch lacks are facts of the board, said in
    /diagnosis's coverage as not available, never a check left undone."""
    with SimRun(_with_events("R550")) as run:
        old = answer(run.poll(3))["not_available"]
    with SimRun(_with_events(None)) as run:
        new = answer(run.poll(3))["not_available"]
    said = {what for group in old for what in group.get("readings", [])}
    assert {f"the {name} event" for name in NEWER} <= said
    events = [g for g in old if f"the {NEWER[0]} event" in g.get("readings", [])]
    assert events and all(g["on"] == "NVIDIA H100 80GB HBM3 / driver R550" for g in events)
    assert not {f"the {name} event" for name in NEWER} & {
        what for group in new for what in group.get("readings", [])}
