"""Run-time boundaries, on the virtual clock: what must stay true across a
reload, a wrapped history ring, a baseline compared value by value, and a
fleet whose nodes do not divide evenly among its clusters.

Each test states the boundary as a user meets it: the liveness probe that
must not restart a pod whose exporter polls slower since a reload, the node
page that must not show a GPU's 15-minute-old reading as its current one, the
power limit cut by 50 W that must be reported, the error counter that must not
read as a reset to rate(), the node that must not be left out of the fleet."""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_exporter.baseline import RESOLUTION, compare
from gpu_exporter.commands.fleet import DEFAULT_MIX, KINDS, parse_mix, plan
from gpu_exporter.facts.cadence import stale_after
from gpu_exporter.history import SERIES, History
from gpu_exporter.poll.readings import GpuReading
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.settings.config import Settings
from gpu_exporter.simulator.model import Scenario
from tests.simnode import EPOCH, SimRun
from tests.simnode import settings as sim_settings

# --- /-/healthy across a reload of the poll interval --------------------------------------


def _health(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/healthy", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


_QUIET = {"processes": False, "host": False}


def _interval(seconds: float) -> Settings:
    return sim_settings(poll={"interval": f"{seconds:g}s"}, collectors=_QUIET)


@pytest.mark.parametrize(("before", "after"), [(5.0, 60.0), (60.0, 5.0)])
def test_health_follows_the_interval_the_poller_waits_with(before: float, after: float) -> None:
    """Polled on the schedule the poll loop keeps, /-/healthy answers 200 at
    every second between polls, before the reload, between the reload and the
    first poll at the new interval (the loop still waits out the old one), and
    after; once polls stop it turns 503 at the new interval's limit, not the
    old one's."""
    with SimRun("healthy", collectors=_QUIET, poll={"interval": f"{before:g}s"}) as run:
        port = run.serve()
        poller = run.exporter.poller

        def wait_for_next_poll(step: float = 1.0) -> None:
            """Every second until the next poll is due (as the loop schedules
            it: the interval in force when the last poll began), then poll."""
            due = poller.interval
            waited = 0.0
            while waited + step <= due:
                run.clock.advance(step)
                waited += step
                assert _health(port) == 200, f"503 {waited:g}s after a poll"
            run.clock.advance(due - waited)
            poller.poll_once()

        poller.poll_once()
        wait_for_next_poll()
        assert run.exporter.reload(lambda: _interval(after))
        run.clock.advance(1.0)
        assert _health(port) == 200
        wait_for_next_poll()  # the first poll applies the new interval
        assert poller.interval == after
        for _ in range(3):
            wait_for_next_poll()
        # Polls stop: unhealthy just past the new interval's limit.
        limit = stale_after(after)
        run.clock.advance(limit - 0.5)
        assert _health(port) == 200
        run.clock.advance(1.0)
        assert _health(port) == 503


# --- the error counter across a reload ------------------------------------------------------


def test_the_collector_error_counter_never_goes_back_on_reload() -> None:
    """gpu_exporter_collector_errors_total is a counter: a reload that changes
    the interval, the collectors and their settings must not restart it (rate()
    would read the drop as a reset and count the whole total again)."""
    with SimRun("healthy", collectors={"processes": False}) as run:
        poller = run.exporter.poller
        # The host collector counts an error every poll: a file it cannot read.
        meminfo = run.node.procfs / "meminfo"
        run.poll()
        poller.before_poll.remove(run.node.refresh)  # keep the broken file
        meminfo.unlink()
        meminfo.mkdir()
        totals: dict[str, list[float]] = {"host": []}

        def record(snap: Snapshot) -> None:
            for name, seen in totals.items():
                value = snap.get("gpu_exporter_collector_errors_total", collector=name)
                assert value is not None, name
                seen.append(value)

        for _ in range(3):
            record(run.poll(1))
        changed = sim_settings(poll={"interval": "2s"}, collectors={"processes": True},
                               diagnosis={"window": "5s"})
        assert run.exporter.reload(lambda: changed)
        for _ in range(3):
            record(run.poll(2, interval=2))
        assert run.exporter.reload(lambda: sim_settings(collectors={"processes": False}))
        for _ in range(3):
            record(run.poll(1))
    for name, seen in totals.items():
        assert seen == sorted(seen), f"{name}: {seen}"
        assert seen[-1] >= 8, f"{name}: {seen}"  # it counted every poll, nothing lost


# --- the node page's history once the ring has wrapped --------------------------------------


def _snap(t: float, gpus: dict[int, GpuReading]) -> Snapshot:
    out = SnapshotBuilder(t)
    out.readings.gpus = gpus
    return out.build()


def _reading(index: int, poll: int) -> GpuReading:
    """A reading whose every kept value says which poll it came from."""
    return GpuReading(index, f"GPU-{index}", True, utilization=(poll % 100) / 100,
                      power_watts=100.0 + poll, power_limit_watts=700.0 - poll,
                      clocks_hz={"sm": 1e9 + poll}, temperature_celsius=30.0 + poll % 50,
                      pcie_generation=1 + poll % 5, pcie_width=1 + poll % 16)


@pytest.mark.parametrize("gone", ["not listed", "lost"])
@pytest.mark.parametrize("wraps", [0, 1, 3])
def test_a_gpu_gone_from_a_poll_never_shows_an_old_value_as_current(gone: str,
                                                                    wraps: int) -> None:
    """GPU 1 is read for ``wraps`` whole rings and a little more, then is gone
    (no longer listed, or listed but lost): from that poll on, every kept
    series of it ends in "not read", and what the window holds before that is
    exactly what each poll read, in order; GPU 0 keeps its values."""
    cap = 7
    hist = History(cap)
    read_polls = wraps * cap + 3
    for poll in range(read_polls):
        hist.record(_snap(EPOCH + poll, {0: _reading(0, poll), 1: _reading(1, poll)}))
    for k in range(1, cap):  # gone for up to a whole ring but one poll
        poll = read_polls + k - 1
        gpus = {0: _reading(0, poll)}
        if gone == "lost":
            gpus[1] = GpuReading(1, "GPU-1", False)
        hist.record(_snap(EPOCH + poll, gpus))
        window = hist.window(1)
        assert window is not None
        first = max(0, poll + 1 - cap)
        assert window.times == tuple(EPOCH + p for p in range(first, poll + 1))
        for name in SERIES:
            values = window.series[name]
            assert values[-k:] == (None,) * k, (name, k, values)
            read = [p for p in range(first, poll + 1) if p < read_polls]
            for p, got in zip(read, values, strict=False):
                want = _value(name, _reading(1, p))
                assert (got is None) == (want is None), (name, p, got)
                if want is not None:
                    assert got == pytest.approx(want, rel=1e-6), (name, p)
        w0 = hist.window(0)
        assert w0 is not None and w0.series["power_watts"][-1] == 100.0 + poll


def _value(name: str, r: GpuReading) -> float | None:
    return {"utilization": r.utilization, "sm_active": None, "power_watts": r.power_watts,
            "power_limit_watts": r.power_limit_watts, "sm_clock_hz": r.clocks_hz.get("sm"),
            "temperature_celsius": r.temperature_celsius,
            "pcie_generation": r.pcie_generation, "pcie_width": r.pcie_width}[name]


def test_the_node_page_says_a_lost_gpu_is_not_read_after_the_ring_wrapped() -> None:
    """The real exporter at a 15 s interval (a ring of 60 polls): GPU 1 is
    lost after 20 minutes; the node page's legend says its values are not
    read now, and names its last reading as such, not as the current one."""
    lost_at = 20 * 60.0
    node = Scenario(name="lost-after-wrap", node={"gpus": 2, "profile": "h100-sxm5-80gb"},
                    state={"utilization": 0.9},
                    timeline=[{"at": lost_at, "gpus": [1], "set": {"lost": True}}])
    with SimRun(node, poll={"interval": "15s"},
                collectors={"processes": False, "host": False}) as run:
        hist = run.exporter.history
        assert hist.capacity == 60
        run.poll(lost_at + 30, interval=15)
        window = hist.window(1)
        assert window is not None and len(window.times) == hist.capacity
        for name in ("utilization", "power_watts", "temperature_celsius", "sm_clock_hz"):
            assert window.series[name][-1] is None, name
            assert window.series[name][0] is not None, name  # read before it was lost
        port = run.serve()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as resp:
            page = resp.read().decode()
    gpu1 = page[page.index('id="gpu-1"'):]
    assert "power: not read now (last" in gpu1
    assert "utilization: not read now (last" in gpu1


# --- baseline drift, exact to NVML's resolution -----------------------------------------------


def _baseline(**fields: Any) -> dict[str, Any]:
    return {"gpus": [{"index": 0, "uuid": "GPU-0", **fields}]}


# Each float field of the baseline, a value NVML reports, and NVML's step for it:
# power limits are unsigned ints of milliwatts (nvmlDeviceGetEnforcedPowerLimit,
# nvmlDeviceGetPowerManagementDefaultLimit), application clocks unsigned ints of
# MHz (nvmlDeviceGetApplicationsClock).
STEPS = {"power_limit_watts": (700.0, 0.001), "power_default_limit_watts": (700.0, 0.001),
         "application_sm_clock_hertz": (1_980e6, 1e6),
         "application_memory_clock_hertz": (2_619e6, 1e6)}


def test_every_float_field_has_its_resolution() -> None:
    assert set(RESOLUTION) == set(STEPS)
    for name, (_, step) in STEPS.items():
        # Half a step: the smallest change NVML can report is always drift, and
        # a float's rounding of the same reading never is.
        assert RESOLUTION[name] == step / 2, name


@pytest.mark.parametrize("field", list(STEPS))
def test_a_change_of_one_nvml_step_is_drift_and_rounding_is_not(field: str) -> None:
    value, step = STEPS[field]
    for found in (value - step, value + step, value * 0.9, value * 1.1, 0.0):
        (drift,) = compare(_baseline(**{field: value}), {0: {"uuid": "GPU-0", field: found}})
        assert (drift.field, drift.expected, drift.found) == (field, value, found)
    # The same reading through JSON and a unit conversion: never drift.
    for found in (value * (1 + 1e-12), value / 1000 * 1000, math.nextafter(value, 0)):
        assert compare(_baseline(**{field: value}), {0: {"uuid": "GPU-0", field: found}}) == []


def test_a_power_limit_cut_from_700_to_650_watts_is_reported() -> None:
    (drift,) = compare(_baseline(power_limit_watts=700.0),
                       {0: {"uuid": "GPU-0", "power_limit_watts": 650.0}})
    assert drift.as_dict() == {"gpu": "0", "uuid": "GPU-0", "field": "power_limit_watts",
                               "expected": 700.0, "found": 650.0}


# --- the fleet's nodes among its clusters ------------------------------------------------------


@settings(max_examples=200, deadline=None, derandomize=True)
@given(nodes=st.integers(1, 97), clusters=st.integers(1, 9),
       weights=st.lists(st.integers(0, 5), min_size=len(KINDS), max_size=len(KINDS)))
def test_the_fleet_plans_every_node_it_is_asked_for(nodes: int, clusters: int,
                                                    weights: list[int]) -> None:
    """However the nodes divide among the clusters: exactly ``nodes`` nodes, no
    name twice, cluster sizes within one of each other, and each cluster's
    kinds in proportion to the weights (every weighted kind once it has as
    many nodes as kinds)."""
    if not any(weights):
        weights[0] = 1
    mix = dict(zip(KINDS, weights, strict=True))
    names = [f"c{i}" for i in range(clusters)]
    out = plan(nodes, names, mix)
    assert len(out) == nodes
    assert len({n.name for n in out}) == nodes
    sizes = [sum(1 for n in out if n.cluster == c) for c in names]
    assert sum(sizes) == nodes and max(sizes) - min(sizes) <= 1, sizes
    weighted = [k for k, w in mix.items() if w > 0]
    for cluster, size in zip(names, sizes, strict=True):
        kinds = [n.kind.name for n in out if n.cluster == cluster]
        assert set(kinds) <= set(weighted)
        if size >= len(weighted):
            assert set(kinds) == set(weighted), (cluster, size, kinds)


def test_the_default_mix_over_three_clusters_keeps_the_remainder() -> None:
    out = plan(17, ["a", "b", "c"], parse_mix(DEFAULT_MIX))
    assert [sum(1 for n in out if n.cluster == c) for c in "abc"] == [6, 6, 5]
