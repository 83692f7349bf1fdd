"""A reader switched off leaves the diagnosis rows it feeds unjudged, and says
so: in gpu_diagnosis_input_missing and in /diagnosis's inputs_missing, never by
silently reporting "nothing wrong"."""

from __future__ import annotations

from dataclasses import fields

import pytest

from gpu_exporter.diagnosis.engine import FINDINGS, INPUTS_MISSING
from gpu_exporter.diagnosis.signals import INPUTS
from gpu_exporter.poll.readings import PollReadings
from gpu_exporter.web.diagnosis import report
from tests.simnode import DetailRun


def test_every_input_read_nothing_missing() -> None:
    run = DetailRun("healthy")
    snap = run.poll(3)
    assert snap.derived(INPUTS_MISSING) == ()
    assert snap.series("gpu_diagnosis_input_missing") == []
    assert report(snap, snap.timestamp, 1.0)["inputs_missing"] == []
    assert snap.series("gpu_diagnosis_active")  # every row judged for every GPU


def test_device_off_is_visible_not_silent() -> None:
    # The scenario has a finding with every reader on; with the device reader
    # off the diagnosis cannot see any GPU, and must say so instead of "healthy".
    on = DetailRun("thermal-throttle")
    assert on.poll(60).derived(FINDINGS)
    run = DetailRun("thermal-throttle", collectors={"device": False})
    snap = run.poll(60)
    assert snap.readings.gpus is None
    assert snap.get("gpu_diagnosis_input_missing", input="device") == 1.0
    assert snap.series("gpu_diagnosis_active") == []
    assert snap.derived(FINDINGS) == ()
    assert report(snap, snap.timestamp, 1.0)["inputs_missing"] == ["device"]


@pytest.mark.parametrize("reader", ["processes", "host", "pcie", "gpm", "samples", "xid",
                                    "attribution", "nvlink"])
def test_each_reader_off_is_named(reader: str) -> None:
    run = DetailRun("healthy", collectors={reader: False})
    snap = run.poll(2)
    assert [labels["input"] for labels, _ in
            snap.series("gpu_diagnosis_input_missing")] == [reader]
    assert snap.derived(INPUTS_MISSING) == (reader,)
    # The readings field the rules take from that reader is the one left unread.
    unread = {f.name for f in fields(PollReadings) if getattr(snap.readings, f.name) is None}
    assert set(INPUTS[reader]) <= unread
    assert not unread & {name for other in INPUTS if other != reader for name in INPUTS[other]}
    # The GPUs are still judged on what was read.
    assert snap.series("gpu_diagnosis_active")


def test_process_rows_not_judged_without_the_process_reader() -> None:
    # The stalled-process row needs the processes' states: with the process
    # reader off it yields no verdict, so the row stays off.
    scenario = "memory-held-sm-idle-process-stalled"
    snap = DetailRun(scenario, collectors={"processes": False}).poll(60)
    assert "processes" in (snap.derived(INPUTS_MISSING) or ())
    on = {(f.gpu, f.row.key) for f in DetailRun(scenario).poll(60).derived(FINDINGS) or ()}
    off = {(f.gpu, f.row.key) for f in snap.derived(FINDINGS) or ()}
    assert off < on
