"""Counters only rise: over hundreds of polls of a node where anything may fail
(any NVML call on any GPU, NVLink links going down and up, a GPU lost and
back, processes coming and going, /proc files vanishing), no counter series
(every family of kind counter, all named *_total) is ever exported lower than
it was before, whether it was exported at the poll before or came back after
polls without it. A rate() over a dip reads as a counter reset: the whole
value again, a spike on every dashboard.

The one exception is documented (docs/reliability.md, "GPU lost and back"): a
GPU lost and answering again was reset (a GPU off the bus comes back only
through a reset or a driver reload), and the counters NVML keeps for it
(energy, PCIe and NVLink traffic and errors, throttle time) start again from
0, as the simulator's do (checked here too). A dip in a series of that GPU is
allowed once the GPU was seen lost since the series was last exported.

A fixed seed in the default run; ``GPU_EXPORTER_LONG_TESTS=1`` runs more
plans, each longer.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_exporter.nvml import constants as k
from gpu_exporter.nvml.errors import Return
from gpu_exporter.poll.catalog import CATALOG
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.simulator.clib import FUNCTIONS
from gpu_exporter.simulator.model import Scenario
from tests.simnode import DetailRun

LONG = os.environ.get("GPU_EXPORTER_LONG_TESTS") == "1"
POLLS = 600 if LONG else 240
SEEDS = range(6) if LONG else range(1)
GPUS = 2
LINKS = 18  # the H100 SXM5 profile's NVLinks
COUNTERS = {m.name for m in CATALOG if m.kind == "counter"}
ERRORS = [r for r in Return if r not in (Return.SUCCESS, Return.GPU_IS_LOST)]
DEVICE_FUNCTIONS = sorted(FUNCTIONS)
# The per-link counter fields: one link's read may fail alone.
LINK_FIELDS = (k.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, k.FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
               k.FI_DEV_NVLINK_ERROR_DL_REPLAY, k.FI_DEV_NVLINK_ERROR_DL_RECOVERY,
               k.FI_DEV_NVLINK_ERROR_DL_CRC)

Key = tuple[str, tuple[str, ...]]


def plan(seed: int) -> tuple[Scenario, list[dict[Any, int]], set[int], range]:
    """A node of two busy GPUs whose load, NVLinks and processes change at
    random, GPU 1 lost for a while; the NVML errors of each poll (of whole
    calls, and of single fields: one link's counter); the polls
    at which /proc files vanish; the polls (seconds) GPU 1 is lost."""
    rng = random.Random(seed)
    timeline: list[dict[str, Any]] = []
    lost_from = rng.randrange(POLLS // 4, POLLS // 2)
    lost_for = rng.randrange(5, 40)
    timeline.append({"at": float(lost_from), "gpus": [1], "set": {"lost": True}})
    timeline.append({"at": float(lost_from + lost_for), "gpus": [1], "set": {"lost": False}})
    pid = 40000
    for at in range(0, POLLS, 7):
        down = sorted(rng.sample(range(LINKS), rng.randrange(0, 4)))
        for gpu in range(GPUS):
            timeline.append({"at": float(at), "gpus": [gpu], "set": {
                "utilization": rng.choice((0.0, 0.3, 0.95)),
                "nvlink_down": down if rng.random() < 0.5 else [],
                "pcie_replays_per_s": rng.choice((0.0, 2.0)),
                "throttle_reasons": rng.choice(([], ["sw_power_cap"], ["hw_slowdown"]))}})
        # Processes come and go (each PID once: a PID the kernel reuses is a
        # new process, and nothing of the old one may carry over).
        procs = []
        for gpu in range(GPUS):
            for _ in range(rng.randrange(0, 3)):
                pid += 1
                procs.append({"pid": pid, "comm": f"job{pid % 100}", "gpus": [gpu],
                              "gpu_memory_ratio": 0.1, "cpu_ratio": rng.random(),
                              "state": rng.choice("RSD")})
        timeline.append({"at": float(at), "processes": procs})
    errors: list[dict[Any, int]] = []
    for _ in range(POLLS + 1):
        poll: dict[Any, int] = {}
        if rng.random() < 0.5:
            for _ in range(rng.randrange(1, 5)):
                target = (rng.choice(DEVICE_FUNCTIONS), rng.choice((None, 0, 1)))
                poll[target] = int(rng.choice(ERRORS))
        if rng.random() < 0.3:
            for _ in range(rng.randrange(1, 4)):
                field = (rng.randrange(GPUS), rng.choice(LINK_FIELDS), rng.randrange(LINKS))
                poll[field] = int(rng.choice(ERRORS))
        errors.append(poll)
    vanish = {n for n in range(POLLS + 1) if rng.random() < 0.1}
    sc = Scenario(name="counters", node={"gpus": GPUS}, noise=True, jitter=0.05, seed=seed,
                  state={"utilization": 0.9, "memory_used_ratio": 0.5},
                  timeline=timeline)
    return sc, errors, vanish, range(lost_from, lost_from + lost_for)


def counters(snap: Snapshot) -> dict[Key, float]:
    return {(name, s.labels): s.value for name in COUNTERS for s in snap.samples.get(name, ())}


class Watch:
    """Every counter series' highest value so far, and whether the GPU the
    node lost (and reset) was lost since each was last exported. (An NVML
    error may make the exporter take a GPU for lost too: that resets nothing.)"""

    def __init__(self, reset_gpu: str = "1", lost: range = range(0)) -> None:
        self.reset_gpu = reset_gpu
        self.lost = lost
        self.high: dict[Key, float] = {}
        self.lost_since: dict[Key, bool] = {}
        self.dips: list[tuple[int, Key, float, float]] = []
        self.resets = 0

    def see(self, poll: int, snap: Snapshot) -> None:
        if poll in self.lost:
            for key in self.lost_since:
                if _gpu_of(key) == self.reset_gpu:
                    self.lost_since[key] = True
        for key, value in counters(snap).items():
            before = self.high.get(key)
            if before is not None and value < before:
                if self.lost_since.get(key):
                    self.resets += 1
                else:
                    self.dips.append((poll, key, before, value))
            self.high[key] = value
            self.lost_since[key] = False


def _gpu_of(key: Key) -> str | None:
    name, labels = key
    spec = next(m for m in CATALOG if m.name == name)
    return labels[spec.labels.index("gpu")] if "gpu" in spec.labels else None


def vanish_files(procfs: Path, rng: random.Random) -> None:
    """Delete a few of the node's /proc files, as a process exiting or a
    kernel without a source would leave them."""
    files = sorted(p for p in procfs.rglob("*") if p.is_file())
    for path in rng.sample(files, min(len(files), 5)):
        path.unlink(missing_ok=True)


def run_plan(seed: int, each_poll: Callable[[int, Snapshot], None] | None = None) -> Watch:
    sc, errors, vanish, lost = plan(seed)
    watch = Watch("1", lost)
    rng = random.Random(seed + 1000)
    poll = 0

    def error(name: str, gpu: int | None) -> int | None:
        code = errors[poll].get((name, gpu))
        return errors[poll].get((name, None)) if code is None and gpu is not None else code

    def field_error(gpu: int, field: int, link: int) -> int | None:
        return errors[poll].get((gpu, field, link))

    with DetailRun(sc) as run:
        run.node.library.inject_error = error
        run.node.library.inject_field_error = field_error
        procfs = Path(run.node.procfs)

        def maybe_vanish() -> None:
            if poll in vanish:
                vanish_files(procfs, rng)

        run.exporter.poller.before_poll.append(maybe_vanish)
        for poll in range(POLLS + 1):
            snap = run.poll(1.0) if poll else run.poll()
            watch.see(poll, snap)
            if each_poll is not None:
                each_poll(poll, snap)
    return watch


def test_no_counter_ever_goes_back_under_faults() -> None:
    for seed in SEEDS:
        watch = run_plan(seed)
        assert not watch.dips, (seed, watch.dips[:10])
        # The check saw what it is for: counters of every kind, and the lost
        # GPU's counters starting again after its reset.
        names = {name for name, _ in watch.high}
        assert {"gpu_energy_joules_total", "gpu_nvlink_bytes_all_links_total",
                "gpu_exporter_collector_errors_total"} <= names, names
        assert watch.resets > 0


def test_a_gpu_lost_and_back_starts_its_counters_again_from_0() -> None:
    """The simulator resets a GPU's counters when it answers again, as the
    driver does after the reset that brings a lost GPU back; the other GPUs'
    counters go on."""
    sc = Scenario(name="reset", node={"gpus": GPUS}, noise=False,
                  state={"utilization": 0.9},
                  timeline=[{"at": 10.0, "gpus": [1], "set": {"lost": True}},
                            {"at": 20.0, "gpus": [1], "set": {"lost": False}}])
    with DetailRun(sc) as run:
        run.poll()
        before = run.poll(9.0)
        energy = {lab["gpu"]: v for lab, v in before.series("gpu_energy_joules_total")}
        run.poll(25.0)  # asked again every 10 s: answers by 30 s
        after = run.poll(10.0)
        again = {lab["gpu"]: v for lab, v in after.series("gpu_energy_joules_total")}
    assert again["0"] > energy["0"]
    # Some 10 s at 90 % of 700 W since the reset: far below what it had.
    assert 0 < again["1"] < energy["1"] / 100, (energy, again)
