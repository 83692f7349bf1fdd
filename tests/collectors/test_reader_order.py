"""The readers of a GPU share nothing through it: run in any order, they read
the same values in the same NVML calls. The NVLink reader's per-link fields
ride in the device reader's one nvmlDeviceGetFieldValues call of each GPU
whichever of the two runs first (``nvml/values.py``), and ``Gpu`` holds who a
GPU is and how it fails, nothing one reader leaves there for another.

Checked on the simulator, every poll's exported series and the NVML calls per
function and GPU, and on NVIDIA's mock NVML (an NVML nobody on this project
wrote), the last poll's series and the C calls per function."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections import Counter
from types import FrameType
from typing import Any

import pytest

from gpu_exporter.nvml.gpu import Gpu
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.settings.config import Settings
from tests import mock_nvml
from tests.simnode import PER_GPU_READERS, SimRun, shuffle_readers

INTERVAL = Settings().poll.interval
POLLS = 31  # one more than the facts' cadence: every cadence comes due at least once
SEEDS = (1, 2, 3)
# The exporter's own timings: real CPU time, whatever the order.
TIMINGS = ("gpu_exporter_collector_duration_seconds", "gpu_exporter_poll_duration_seconds",
           "gpu_exporter_cpu_seconds_total")

# Who a GPU is and how it fails; nothing else.
GPU_FIELDS = {"index", "device", "identity", "unsupported", "denied", "static", "lost",
              "lost_since", "hung", "next_recovery_try", "errors", "warned", "missing"}


def exported(snap: Snapshot) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(name, sample.labels): sample.value for name, samples in snap.samples.items()
            if name not in TIMINGS for sample in samples}


def run(scenario: str, seed: int | None) -> tuple[list[dict[Any, float]], Counter[Any]]:
    """Every poll's series, and the NVML calls by function and GPU after the first poll."""
    with SimRun(scenario, metrics={"detail": True}) as sim:
        if seed is not None:
            order = shuffle_readers(sim.exporter, seed)
            assert sorted(order) == sorted(
                s.name for s in sim.exporter.poller.stages if s.name in PER_GPU_READERS)
        polls = [exported(sim.poll())]
        before = Counter(sim.node.library.calls_per_gpu)
        for _ in range(POLLS - 1):
            polls.append(exported(sim.poll(INTERVAL, interval=INTERVAL)))
        return polls, sim.node.library.calls_per_gpu - before


def test_a_shuffle_changes_the_order() -> None:
    with SimRun("healthy") as sim:
        before = [s.name for s in sim.exporter.poller.stages]
        orders = {tuple(shuffle_readers(sim.exporter, seed)) for seed in SEEDS}
    assert len(orders) > 1
    assert any(order.index("nvlink") < order.index("device") for order in orders), orders
    assert all(order.index("mig") < order.index("gpm") for order in orders)
    assert before[:len(PER_GPU_READERS)] == list(PER_GPU_READERS)


# No GPU goes lost here: the reader that asks it first in that poll finds it
# lost, and the readers before it export what they read of it that poll.
@pytest.mark.parametrize("scenario", [
    "healthy", "nvlink-errors-link-integrity", "nvlink-fec-errors-link-integrity",
    "mig-h100", "ecc-uncorrectable", "c2c-errors-link-integrity",
    "throttled-under-load-power-cap"])
def test_the_readers_in_any_order_export_the_same_in_the_same_calls(scenario: str) -> None:
    polls, calls = run(scenario, None)
    assert polls[-1] and calls["nvmlDeviceGetFieldValues", 0] >= POLLS - 1
    for seed in SEEDS:
        shuffled, shuffled_calls = run(scenario, seed)
        for at, (want, got) in enumerate(zip(polls, shuffled, strict=True)):
            assert got.keys() == want.keys(), (seed, at, got.keys() ^ want.keys())
            differ = {key: (want[key], got[key]) for key in want
                      if not (want[key] == got[key]
                              or (math.isnan(want[key]) and math.isnan(got[key])))}
            assert not differ, (seed, at, differ)
        assert shuffled_calls == calls, (seed, shuffled_calls - calls, calls - shuffled_calls)


def test_a_gpu_holds_who_it_is_and_how_it_fails_only() -> None:
    """What a reader reads on a cadence, the fields another reader asks, the
    counters' last readings: none of it lies on the GPU for another reader."""
    assert {f.name for f in dataclasses.fields(Gpu)} == GPU_FIELDS


def _by_series(answer: dict[str, Any]) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(name, tuple(labels)): value for name, labels, value in answer["exported"]}


@pytest.mark.skipif(mock_nvml.library_dir() is None,
                    reason="NVIDIA's mock NVML is not there: build it into "
                           "../shared/nvidia-mocknvml or point GPU_EXPORTER_MOCKNVML at it")
@pytest.mark.parametrize("board", ["h100", "gb200"])
def test_on_the_mock_the_readers_in_any_order_export_the_same_in_the_same_calls(
        board: str) -> None:
    """The mock moves some counters with its own (real) clock: a series whose
    value differs between two runs in the pipeline's order is compared by its
    labels only, every other by its value too."""
    want, again = mock_nvml.run(board), mock_nvml.run(board)
    series, series_again = _by_series(want), _by_series(again)
    assert series.keys() == series_again.keys()
    moving = {key for key, value in series.items() if series_again[key] != value}
    steady = {key: value for key, value in series.items() if key not in moving}
    assert len(steady) > len(moving) and want["calls"]["nvmlDeviceGetFieldValues"] > 0
    assert again["calls"] == want["calls"]
    for seed in SEEDS:
        got = mock_nvml.run(board, order_seed=seed)
        assert got["order"] != want["order"], seed
        shuffled = _by_series(got)
        assert shuffled.keys() == series.keys(), (seed, shuffled.keys() ^ series.keys())
        differ = {key: (value, shuffled[key]) for key, value in steady.items()
                  if shuffled[key] != value}
        assert not differ, (seed, differ)
        assert got["calls"] == want["calls"], seed


def _area(frame: FrameType | None) -> str | None:
    name = "" if frame is None else frame.f_globals.get("__name__", "")
    for area in ("gpu_exporter.collectors", "gpu_exporter.nvml"):
        if name == area or name.startswith(area + "."):
            return area
    return None


@pytest.mark.parametrize("scenario", ["nvlink-errors-link-integrity", "mig-h100",
                                      "ecc-uncorrectable"])
def test_the_nvml_layer_never_calls_back_into_a_reader(scenario: str) -> None:
    """A GPU's reading goes one way, from the NVML layer up to the reader:
    the readers call the layer (their requests handed as data, their GPUs
    walked in their own loops), and no function of the layer calls one of a
    reader. Traced over whole polls, every reader of every GPU."""
    crossings: Counter[tuple[str | None, str | None]] = Counter()
    back: list[str] = []

    def trace(frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        callee, caller = _area(frame), _area(frame.f_back)
        if callee is not None and caller is not None and callee != caller:
            crossings[caller, callee] += 1
            if callee == "gpu_exporter.collectors":
                back.append(f"{frame.f_back.f_code.co_qualname} -> "  # type: ignore[union-attr]
                            f"{frame.f_code.co_qualname}")

    with SimRun(scenario, metrics={"detail": True}) as sim:
        sim.poll()
        sim.poll(INTERVAL, interval=INTERVAL)
        sys.setprofile(trace)
        try:
            for _ in range(3):
                sim.poll(INTERVAL, interval=INTERVAL)
        finally:
            sys.setprofile(None)
    assert crossings["gpu_exporter.collectors", "gpu_exporter.nvml"] > 0  # the trace saw the reads
    assert not back, sorted(set(back))
