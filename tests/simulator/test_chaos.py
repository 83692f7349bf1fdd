"""Chaos: any NVML call may fail with any NVML error, or answer a bad value, at
any poll. The exporter never crashes, every exposition is valid, and no series
ever carries a value that belongs to another GPU, another process or an earlier
poll.

How "belongs to" is checked: the scenario gives every GPU and process at every
poll its own values, so each exported value can be decoded back to the GPU,
process and poll it came from:

- ``gpu_power_watts``: P(gpu, poll) = 100 W + 100 W * gpu + poll mW;
- ``gpu_utilization_ratio``: U(gpu, poll) = 10 % + 20 % * gpu + poll %;
- ``gpu_temperature_celsius``: T(gpu, poll) = 40 °C + 10 °C * gpu + poll °C
  (the memory sensor 7 °C above it, the H100 profile's offset);
- ``gpu_process_memory_used_bytes``: M(pid, poll) = (1000 * slot + poll) MiB,
  ``slot`` the process's own number.

A failed read must leave its series absent (or the whole GPU ``gpu_up 0``),
never repeat the previous poll's value. A value NVML answers with SUCCESS but
no GPU can report (its "not available" sentinel, an impossible reading) must
leave its series absent in that poll too; and no sample of any family in the
catalog ever carries a sentinel or a value outside its plausible range
(the bounds each metric's catalog entry carries). Facts the exporter deliberately reads
once or on a slower cadence (limits, thresholds, ECC aggregates) are not part
of the check.

A fixed seed and a small budget in CI; ``GPU_EXPORTER_LONG_TESTS=1`` runs a
longer, randomised budget.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families as parse

from gpu_exporter.nvml.constants import U8_NA, U16_NA, U32_NA, U64_NA
from gpu_exporter.nvml.errors import Return
from gpu_exporter.poll.catalog import CATALOG
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.simulator import load_profile
from gpu_exporter.simulator.clib import FUNCTIONS
from gpu_exporter.simulator.gpu_state import GpuState
from gpu_exporter.simulator.model import Scenario
from gpu_exporter.web.render import LabelCache, render
from tests.simnode import DetailRun
from tests.tools import tool

LONG = os.environ.get("GPU_EXPORTER_LONG_TESTS") == "1"
CHAOS = settings(max_examples=300 if LONG else 20, derandomize=not LONG, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

GPUS = 3
POLLS = 10
MIB = 1024 * 1024
_PROFILE = load_profile("h100-sxm5-80gb")
USABLE_MIB = _PROFILE.memory_total_mib - _PROFILE.memory_reserved_mib
PROCS_PER_GPU = 2

ERRORS = [r for r in Return if r != Return.SUCCESS]
FUNCTION_NAMES = sorted(FUNCTIONS)


def _power_w(gpu: int, poll: int) -> float:
    return 100.0 + 100.0 * gpu + poll / 1000.0


def _util(gpu: int, poll: int) -> float:
    return (10 + 20 * gpu + poll) / 100.0


def _temp_c(gpu: int, poll: int) -> float:
    return 40.0 + 10.0 * gpu + poll


MEMORY_TEMP_OFFSET_C = 7  # the H100 profile's memory_temperature_offset_c


def _pid(gpu: int, k: int) -> int:
    return 30000 + 10 * gpu + k


def _process_mib(slot: int, poll: int) -> int:
    return 1000 * slot + poll


def _processes(poll: int) -> list[dict[str, Any]]:
    out = []
    for gpu in range(GPUS):
        for k in range(PROCS_PER_GPU):
            slot = gpu * PROCS_PER_GPU + k + 1
            out.append({"pid": _pid(gpu, k), "comm": f"train{gpu}{k}", "gpus": [gpu],
                        "gpu_memory_ratio": _process_mib(slot, poll) / USABLE_MIB,
                        "sm_utilization": 0.5, "cpu_ratio": 0.5, "state": "R"})
    return out


def scenario() -> Scenario:
    timeline: list[dict[str, Any]] = []
    for poll in range(POLLS + 1):
        for gpu in range(GPUS):
            # The GPU's used memory moves with its processes' (each one's
            # memory is part of it, as on a real GPU): the process reader reads
            # its lists again when it moves.
            timeline.append({"at": float(poll), "gpus": [gpu], "set": {
                "power_w": _power_w(gpu, poll), "utilization": _util(gpu, poll),
                "temperature_c": _temp_c(gpu, poll),
                "memory_used_ratio": 0.9 + poll * PROCS_PER_GPU / USABLE_MIB}})
        timeline.append({"at": float(poll), "processes": _processes(poll)})
    return Scenario(name="chaos", node={"gpus": GPUS}, noise=False,
                    timeline=timeline)


SCENARIO = scenario()

# Bad values a sick GPU or a buggy driver can answer with SUCCESS: NVML's "not
# available" sentinels in each width NVML answers with, impossible readings.
# The simulated library answers them as the real one would (through the same
# C structures and integer widths).
BAD_VALUES: dict[str, Any] = {
    "power_mw": U32_NA,
    "limit_mw": U32_NA,
    "temp_c": U32_NA,
    "mem_temp_c": U16_NA,
    "util_pct": U8_NA,
    "mem_util_pct": 101,
    "mem_used": U64_NA,
    "mem_total": U64_NA,
    "energy_mj": U64_NA,
    "pcie_width": 0,
    "pcie_gen": 99,
    "pstate": 32,
    "reasons": U64_NA,
    "fans_pct": [250],
    "pcie_replays": U32_NA,
    "pcie_tx_bytes": U64_NA,
    "clocks_mhz": {0: 0, 1: U32_NA, 2: U16_NA},
    "app_clocks_mhz": {0: U32_NA, 1: U32_NA, 2: U32_NA},
    "remapped": (U32_NA, U32_NA, 7, 9),
    "ecc": {(0, 0): U64_NA, (1, 0): 0, (0, 1): U32_NA, (1, 1): 0},
    "processes": [],
}

# The series a bad value read in a poll must leave absent in that poll's
# snapshot (family, labels the series has). Values read on a slower cadence
# (energy, PCIe counters, ECC aggregates, remapped rows, application clocks;
# the PCIe link, P-state and memory clock, which follow the load) are read on
# some polls only: the range check below covers them.
ABSENT_WHEN_BAD: dict[str, list[tuple[str, dict[str, str]]]] = {
    "power_mw": [("gpu_power_watts", {})],
    "limit_mw": [("gpu_power_limit_watts", {})],
    "temp_c": [("gpu_temperature_celsius", {"sensor": "gpu"})],
    "mem_temp_c": [("gpu_temperature_celsius", {"sensor": "memory"})],
    "util_pct": [("gpu_utilization_ratio", {})],
    "mem_util_pct": [("gpu_memory_controller_utilization_ratio", {})],
    "mem_used": [("gpu_memory_used_bytes", {})],
    "mem_total": [("gpu_memory_total_bytes", {}), ("gpu_memory_used_bytes", {})],
    "clocks_mhz": [("gpu_clock_hertz", {"clock": "sm"})],
    "ecc": [("gpu_ecc_errors_total", {"type": "corrected", "scope": "volatile"})],
}

# Every sentinel as the exporter's base units would show it: as is, and through
# the conversions NVML's values of that width go through (percent to ratio,
# milliwatts and millijoules to watts and joules, MHz to Hz).
SENTINEL_READINGS = {U8_NA, U8_NA / 100, U16_NA, U16_NA / 100, U16_NA * 1e6,
                     U32_NA, U32_NA / 100, U32_NA / 1000, U32_NA * 1e6,
                     float(U64_NA), U64_NA / 1000}

target = st.tuples(st.sampled_from(FUNCTION_NAMES), st.one_of(st.none(), st.integers(0, GPUS - 1)))
poll_faults = st.fixed_dictionaries({
    "errors": st.dictionaries(target, st.sampled_from(ERRORS), max_size=6),
    "bad": st.lists(st.tuples(st.integers(0, GPUS - 1), st.sampled_from(sorted(BAD_VALUES))),
                    max_size=3),
})
plans = st.lists(poll_faults, min_size=POLLS, max_size=POLLS)


class Chaos:
    """Answers the fake library's injection hooks from the plan of the current poll."""

    def __init__(self, plan: list[dict[str, Any]]) -> None:
        self.plan = plan
        self.poll = 0

    def error(self, name: str, gpu: int | None) -> int | None:
        errors = self.plan[self.poll]["errors"]
        code = errors.get((name, gpu))
        if code is None and gpu is not None:
            code = errors.get((name, None))  # a function failing on every GPU
        return None if code is None else int(code)

    def state(self, name: str, state: GpuState) -> GpuState:
        bad = {field: BAD_VALUES[field] for gpu, field in self.plan[self.poll]["bad"]
               if gpu == state.index}
        return dataclasses.replace(state, **bad) if bad else state

    def tampered(self, gpu: int, field: str) -> bool:
        return (gpu, field) in self.plan[self.poll]["bad"]


def check_exposition(text: str, openmetrics: bool) -> None:
    """What `promtool check metrics` insists on, checked with prometheus_client's
    parsers: it parses, every family is typed once, no series twice."""
    families = list(om_parse(text) if openmetrics else parse(text))
    names = [f.name for f in families]
    assert len(names) == len(set(names)), "a family appears twice"
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for family in families:
        assert family.type != "unknown", family.name
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in seen, f"series twice: {key}"
            seen.add(key)
            assert sample.value == sample.value, f"NaN exported: {key}"


def _has(series: list[tuple[dict[str, str], float]], gpu: int, want: dict[str, str]) -> bool:
    return any(lab["gpu"] == str(gpu) and want.items() <= lab.items() for lab, _ in series)


def check_plausible(snap: Snapshot) -> None:
    """No sample of any family in the catalog is a sentinel or out of its range."""
    ceilings: dict[str, dict[tuple[str, ...], float]] = {
        # metric -> (gpu, clock) -> the board's figure its bounds hold it against
        "gpu_power_watts": {(lab["gpu"],): v for lab, v in snap.series("gpu_power_limit_watts")},
        "gpu_memory_used_bytes": {(lab["gpu"],): v
                                  for lab, v in snap.series("gpu_memory_total_bytes")},
        "gpu_clock_hertz": {(lab["gpu"], lab["clock"]): v
                            for lab, v in snap.series("gpu_clock_max_hertz")},
        # the host's: one series, no labels
        "gpu_host_memory_available_bytes": dict(
            ((), v) for _, v in snap.series("gpu_host_memory_total_bytes")),
    }
    for family in CATALOG:
        bounds = family.bounds
        for labels, value in snap.series(family.name):
            where = (family.name, labels, value)
            assert value == value and abs(value) != float("inf"), where
            assert value not in SENTINEL_READINGS, where
            if bounds is None:
                continue
            assert bounds.low <= value <= bounds.high, where
            ceiling = ceilings.get(family.name, {}).get(
                tuple(labels[k] for k in ("gpu", "clock") if k in labels))
            if ceiling is not None:
                assert bounds.holds(value, ceiling), (where, ceiling)


def check_values(snap: Snapshot, poll: int, chaos: Chaos) -> None:
    check_plausible(snap)
    for gpu, field in chaos.plan[poll]["bad"]:
        for name, want in ABSENT_WHEN_BAD.get(field, []):
            assert not _has(snap.series(name), gpu, want), (field, name, gpu, poll)
    up = {lab["gpu"]: v for lab, v in snap.series("gpu_up")}
    for labels, value in snap.series("gpu_power_watts"):
        gpu = int(labels["gpu"])
        assert up.get(labels["gpu"]) == 1.0
        if chaos.tampered(gpu, "power_mw"):
            continue
        assert value == _power_w(gpu, poll), (labels, value, poll)
    for labels, value in snap.series("gpu_utilization_ratio"):
        gpu = int(labels["gpu"])
        assert up.get(labels["gpu"]) == 1.0
        if chaos.tampered(gpu, "util_pct"):
            continue
        assert value == round(_util(gpu, poll) * 100) / 100, (labels, value, poll)
    for labels, value in snap.series("gpu_temperature_celsius"):
        # Read every poll: never the previous poll's value.
        gpu = int(labels["gpu"])
        assert up.get(labels["gpu"]) == 1.0
        offset = MEMORY_TEMP_OFFSET_C if labels["sensor"] == "memory" else 0
        assert value == _temp_c(gpu, poll) + offset, (labels, value, poll)
    for labels, value in snap.series("gpu_process_memory_used_bytes"):
        gpu, pid = int(labels["gpu"]), int(labels["pid"])
        k = pid - _pid(gpu, 0)
        assert 0 <= k < PROCS_PER_GPU, f"pid {pid} is not a process of GPU {gpu}"
        slot = gpu * PROCS_PER_GPU + k + 1
        assert round(value / MIB) == _process_mib(slot, poll), (labels, value, poll)
        assert labels["comm"] == f"train{gpu}{k}"
    uuids = {lab["gpu"]: lab["uuid"] for lab, _ in snap.series("gpu_info")}
    for name in ("gpu_up", "gpu_power_watts", "gpu_utilization_ratio",
                 "gpu_temperature_celsius", "gpu_process_memory_used_bytes"):
        for labels, _ in snap.series(name):
            # A GPU's series carry that GPU's identity, never another's.
            assert labels["uuid"] == uuids.get(labels["gpu"], labels["uuid"])
    assert snap.get("gpu_exporter_polls_total") == poll + 1
    # NVML errors are the collectors' daily bread: they are counted, never fail one.
    failed = [lab["collector"] for lab, v in snap.series("gpu_exporter_collector_success")
              if v != 1.0]
    assert not failed, failed


SAMPLES: list[str] = []


@CHAOS
@given(plan=plans)
def test_any_nvml_call_failing_at_any_poll(plan: list[dict[str, Any]]) -> None:
    chaos = Chaos(plan)
    # With detail: the utilization gauge it decodes is a detail series.
    with DetailRun(SCENARIO) as run:
        lib = run.node.library
        lib.inject_error = chaos.error
        lib.inject_state = chaos.state
        for poll in range(POLLS):
            chaos.poll = poll
            snap = run.poll(1.0) if poll else run.poll()
            check_values(snap, poll, chaos)
            cache = LabelCache()
            check_exposition(render(snap, False, cache).decode(), openmetrics=False)
            check_exposition(render(snap, True, cache).decode(), openmetrics=True)
            assert run.scrape() == render(snap, False, LabelCache()).decode()
        SAMPLES.append(run.scrape())


def test_chaos_expositions_pass_promtool() -> None:
    """A sample of the chaos runs' expositions through the real promtool."""
    promtool = tool("promtool")
    texts = SAMPLES[:: max(1, len(SAMPLES) // 5)] or []
    if not texts:  # run alone: make one
        test_any_nvml_call_failing_at_any_poll()
        texts = SAMPLES[-1:]
    for text in texts:
        result = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                                capture_output=True, check=False, timeout=30)
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_values_decode_back_without_faults() -> None:
    """The check itself: on a fault-free run every checked series is present."""
    chaos = Chaos([{"errors": {}, "bad": []}] * POLLS)
    with DetailRun(SCENARIO) as run:
        for poll in range(POLLS):
            snap = run.poll(1.0) if poll else run.poll()
            check_values(snap, poll, chaos)
    assert len(snap.series("gpu_power_watts")) == GPUS
    assert len(snap.series("gpu_utilization_ratio")) == GPUS
    assert len(snap.series("gpu_temperature_celsius")) == 2 * GPUS
    assert len(snap.series("gpu_process_memory_used_bytes")) == GPUS * PROCS_PER_GPU
