"""Counters across a GPU lost and back, on the shipped scenario
``fault-gpu-lost-and-back`` (GPU 3 off the bus at 10 s, answering again at
40 s), held to what docs/reliability.md says ("One GPU lost mid-run"): the
reset that brings the GPU back starts the counters NVML keeps for it (the
families the page names: energy, PCIe and NVLink traffic and errors, throttle
time) again from 0, so its counter series go back to a lower value once;
"that is the only time a counter series goes back".

So, poll by poll over the whole scenario: every counter series exported lower
than before is the lost GPU's, at the first poll it answers again (gpu_up back
to 1: so each goes back once at most), of a family the page names; nothing of the other GPUs
and nothing of the exporter's own goes back. And the reset the page promises
shows: the lost GPU's energy, PCIe and NVLink traffic counters do go back.

Bugs tried, each failing this file: the simulator not resetting a returning
GPU's counters (``world.py``'s ``_Counters(t, energy_mj=0.0)`` on its return
removed: the promised reset does not show); every GPU's counters reset when
one returns (the same line applied to all GPUs: the other GPUs' series go
back).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import NamedTuple

import pytest

from gpu_exporter.poll.catalog import CATALOG
from gpu_exporter.simulator import load_scenario
from tests.simnode import DetailRun
from tests.tools import ROOT

COUNTERS = sorted(m.name for m in CATALOG if m.kind == "counter")
SCENARIO = "fault-gpu-lost-and-back"
POLLS = 90


class Dip(NamedTuple):
    poll: int
    family: str
    gpu: str | None


class Run(NamedTuple):
    lost_gpu: str
    back_at: int  # the first poll at which it answers again
    dips: list[Dip]
    seen: set[str]  # counter families exported for the lost GPU before and after


def _documented_words() -> list[str]:
    """The families the reliability page says restart, as words of its text."""
    text = (ROOT / "docs" / "reliability.md").read_text()
    said = re.search(r"start the counters NVML keeps for it \(([^)]*)\)", text)
    assert said, "docs/reliability.md no longer says which counters a GPU reset restarts"
    words = re.findall(r"energy|PCIe|NVLink|throttle", said.group(1))
    assert {"energy", "PCIe", "NVLink", "throttle"} <= set(words), said.group(1)
    return [w.lower() for w in words]


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    sc = load_scenario(SCENARIO).model_copy(update={"noise": False})
    lost = {str(g) for step in sc.timeline if step.set.lost for g in step.gpus}
    assert len(lost) == 1, lost
    (gpu,) = lost
    last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    dips: list[Dip] = []
    was_lost = False
    back_at = -1
    before: set[str] = set()
    after: set[str] = set()
    logging.disable(logging.ERROR)
    try:
        with DetailRun(sc) as r:
            for poll in range(POLLS):
                snap = r.poll(0.0 if poll == 0 else 1.0)
                up = {labels["gpu"]: value for labels, value in snap.series("gpu_up")}
                if up.get(gpu) == 0:
                    was_lost = True
                elif was_lost and back_at < 0:
                    back_at = poll
                for name in COUNTERS:
                    for labels, value in snap.series(name):
                        key = (name, tuple(sorted(labels.items())))
                        if key in last and value < last[key]:
                            dips.append(Dip(poll, name, labels.get("gpu")))
                        last[key] = value
                        if labels.get("gpu") == gpu:
                            (before if back_at < 0 else after).add(name)
    finally:
        logging.disable(logging.NOTSET)
    assert back_at > 0, "the lost GPU never answered again"
    yield Run(gpu, back_at, dips, before & after)


def test_only_the_lost_gpus_counters_go_back_and_only_at_its_return(run: Run) -> None:
    strays = [d for d in run.dips if d.gpu != run.lost_gpu or d.poll != run.back_at]
    assert not strays, strays[:10]


def test_only_the_families_the_page_names_go_back(run: Run) -> None:
    words = _documented_words()
    undocumented = {d.family for d in run.dips
                    if not any(w in d.family for w in words)}
    assert not undocumented, undocumented


def test_the_promised_reset_shows(run: Run) -> None:
    """The lost GPU's energy, PCIe and NVLink traffic were read before and
    after, and each went back at its return, as the page says."""
    went_back = {d.family for d in run.dips}
    for family in ("gpu_energy_joules_total", "gpu_pcie_bytes_total",
                   "gpu_nvlink_bytes_total"):
        assert family in run.seen, family
        assert family in went_back, family
