"""Readings checked against what a GPU or host can report: the bounds each
metric's catalog entry carries (``catalog_types.Bounds``), applied by
``collectors/values.py``. NVML's "not available" sentinels and impossible
values leave the series absent for that poll, count a read error and are
logged once per GPU and series; counters that go backwards are dropped unless
their metric says NVML (or the kernel) documents their resets.

Table-driven and fast: mutation testing (``./scripts/mutation.sh``) runs these
for every edit of the bounds and the device collector's conversions."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from gpu_exporter.collectors import values as v
from gpu_exporter.collectors.device import DeviceCollector
from gpu_exporter.facts.cadence import SLOW_READ_EVERY_POLLS
from gpu_exporter.facts.catalog_types import Metric
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.session import Gpu, Identity
from gpu_exporter.poll.catalog import BY_NAME, CATALOG
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.simulator.gpu_state import GpuState
from tests.onegpu import OneGpu

U32, U64 = c.U32_NA, c.U64_NA


def gpu() -> Gpu:
    return Gpu(index=3, device=None, identity=Identity(3))


def metric(name: str) -> Metric:
    return BY_NAME[name]


# --- the bounds ------------------------------------------------------------------

# Device metrics whose value is a flag or a label carrier (NVML answers them
# as booleans the binding converts): nothing to range-check.
FLAGS = {"gpu_info", "gpu_up", "gpu_throttle_reason_active", "gpu_ecc_enabled",
         "gpu_row_remap_pending", "gpu_row_remap_failed", "gpu_persistence_mode_enabled",
         # value 1, the reading is the label (an unknown code is named code_N)
         "gpu_recovery_action", "gpu_fabric_state"}
BOUNDED = sorted(m.name for m in CATALOG if m.bounds is not None)


def test_every_device_and_host_reading_has_bounds() -> None:
    unbounded = {m.name for m in CATALOG if m.collector in ("device", "host")
                 and m.bounds is None}
    assert unbounded == FLAGS, "a device or host reading without bounds"
    for name in BOUNDED:
        bounds = BY_NAME[name].bounds
        assert bounds is not None and bounds.low < bounds.high


@pytest.mark.parametrize("name", BOUNDED)
def test_a_range_is_inclusive_at_both_ends(name: str) -> None:
    bounds = BY_NAME[name].bounds
    assert bounds is not None
    low, high = bounds.low, bounds.high
    assert v.plausible(metric(name), low)
    assert v.plausible(metric(name), high)
    assert v.plausible(metric(name), (low + high) / 2)
    assert not v.plausible(metric(name), low - 1e-9 * max(1.0, abs(low)) - 1e-12)
    assert not v.plausible(metric(name), high + 1e-9 * high)


# What NVML's sentinels become after the binding's unit conversion, each of
# which a dashboard once showed.
SENTINELS = [
    ("gpu_power_watts", U32 / 1000),            # 4,294,967 W
    ("gpu_power_limit_watts", U32 / 1000),
    ("gpu_temperature_celsius", float(U32)),    # 4.29e9 °C
    ("gpu_temperature_celsius", float(0xFFFF)),
    ("gpu_utilization_ratio", 0xFF / 100),      # 2.55
    ("gpu_memory_controller_utilization_ratio", 0xFF / 100),
    ("gpu_memory_used_bytes", float(U64)),      # 1.8e19 bytes
    ("gpu_memory_total_bytes", float(U64)),
    ("gpu_energy_joules_total", U64 / 1000),
    ("gpu_clock_hertz", U32 * 1e6),
    ("gpu_clock_hertz", 0xFFFF * 1e6),
    ("gpu_clock_max_hertz", 0xFFFF * 1e6),
    ("gpu_pcie_replays_total", float(U32)),
    ("gpu_pcie_bytes_total", float(U64)),
    ("gpu_ecc_errors_total", float(U32)),
    ("gpu_ecc_errors_total", float(U64)),
    ("gpu_remapped_rows_total", float(U32)),
    ("gpu_fan_speed_ratio", 2.5),
    ("gpu_performance_state", 32.0),
    ("gpu_pcie_link_generation", 99.0),
    ("gpu_pcie_link_width", 0.0),
]


@pytest.mark.parametrize(("name", "value"), SENTINELS)
def test_sentinels_are_not_readings(name: str, value: float) -> None:
    assert not v.plausible(metric(name), value)


@pytest.mark.parametrize(("name", "value", "ceiling", "ok"), [
    ("gpu_power_watts", 700.0, 700.0, True),
    ("gpu_power_watts", 1750.0, 700.0, True),    # 2.5 x the limit: a transient
    ("gpu_power_watts", 1750.5, 700.0, False),
    ("gpu_power_watts", 1750.5, None, True),     # no limit known: the bounds alone
    ("gpu_memory_used_bytes", 80e9, 80e9, True),
    ("gpu_memory_used_bytes", 80e9 + 1, 80e9, False),
    ("gpu_memory_reserved_bytes", 80e9 + 1, 80e9, False),
    ("gpu_clock_hertz", 2.97e9, 1.98e9, True),
    ("gpu_clock_hertz", 2.98e9, 1.98e9, False),
    ("gpu_clock_application_hertz", 2.98e9, 1.98e9, False),
    ("gpu_power_watts", 6000.0, 10000.0, False),  # the metric's own bound still holds
])
def test_a_reading_is_held_against_the_boards_own_figure(name: str, value: float,
                                                         ceiling: float | None,
                                                         ok: bool) -> None:
    assert v.plausible(metric(name), value, ceiling) is ok


def test_a_ceiling_for_a_metric_not_held_against_one_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="ceiling"):
        v.plausible(metric("gpu_temperature_celsius"), 50.0, 100.0)


# --- counters --------------------------------------------------------------------

@pytest.mark.parametrize(("name", "series", "values", "backwards"), [
    ("gpu_pcie_replays_total", (), [5, 5, 6], [False, False, False]),
    ("gpu_pcie_replays_total", (), [5, 4, 6], [False, True, False]),
    ("gpu_pcie_replays_total", (), [5, 4, 4, 5], [False, True, True, False]),
    # NVML documents these resets: a lower value is the counter's new start.
    ("gpu_energy_joules_total", (), [900.0, 10.0, 20.0], [False, False, False]),
    ("gpu_ecc_errors_total", ("corrected", "volatile"), [7, 0, 1], [False, False, False]),
    # ...and no others: the aggregate ECC counts persist in the InfoROM.
    ("gpu_ecc_errors_total", ("corrected", "aggregate"), [7, 0, 8], [False, True, False]),
])
def test_a_counter_that_goes_backwards(name: str, series: tuple[str, ...], values: list[float],
                                       backwards: list[bool]) -> None:
    last: v.Counters = {}
    assert [v.went_backwards(last, metric(name), series, x) for x in values] == backwards


def test_a_dropped_counter_keeps_the_last_accepted_reading() -> None:
    last: v.Counters = {}
    replays, energy = metric("gpu_pcie_replays_total"), metric("gpu_energy_joules_total")
    v.went_backwards(last, replays, (), 10)
    v.went_backwards(last, replays, (), 3)
    assert last == {"gpu_pcie_replays_total": 10}
    v.went_backwards(last, energy, (), 10)
    v.went_backwards(last, energy, (), 3)
    assert last["gpu_energy_joules_total"] == 3


def test_counters_of_other_series_do_not_mix() -> None:
    last: v.Counters = {}
    assert not v.went_backwards(last, metric("gpu_pcie_bytes_total"), ("tx",), 100)
    assert not v.went_backwards(last, metric("gpu_pcie_bytes_total"), ("rx",), 50)


@pytest.mark.parametrize(("name", "series", "resets"), [
    ("gpu_host_network_receive_drops_total", ("eth0",), True),
    ("gpu_energy_joules_total", (), True),
    ("gpu_ecc_errors_total", ("corrected", "volatile"), True),
    ("gpu_ecc_errors_total", ("uncorrected", "volatile"), True),
    ("gpu_ecc_errors_total", ("corrected", "aggregate"), False),
    ("gpu_pcie_replays_total", (), False),
    ("gpu_host_cpu_seconds_total", (), False),
])
def test_a_documented_reset_is_told_by_the_metric_and_its_labels(
        name: str, series: tuple[str, ...], resets: bool) -> None:
    last: v.Counters = {}
    assert not v.went_backwards(last, metric(name), series, 10.0)
    assert v.went_backwards(last, metric(name), series, 1.0) is not resets
    assert last[v.series_key(metric(name), series)] == (1.0 if resets else 10.0)


def test_a_reset_by_a_label_the_metric_lacks_is_refused() -> None:
    from gpu_exporter.facts.catalog_types import Bounds, metric_spec

    with pytest.raises(ValueError, match="resets by a label"):
        metric_spec("gpu_x_total", "counter", "x", ("gpu",), "device",
                    bounds=Bounds(0.0, 1.0, resets=("scope", "volatile")))
    with pytest.raises(ValueError, match="cannot reset"):
        metric_spec("gpu_x", "gauge", "x", ("gpu",), "device", bounds=Bounds(0.0, 1.0, resets=True))


# --- accept: counted and logged ------------------------------------------------------

def test_accept_passes_a_reading_without_a_trace(caplog: pytest.LogCaptureFixture) -> None:
    g = gpu()
    last: v.Counters = {}
    with caplog.at_level(logging.WARNING):
        assert v.accept(g, metric("gpu_power_watts"), 300.0, ceiling=700.0)
        assert v.accept_counter(g, last, metric("gpu_pcie_replays_total"), 3)
    assert g.errors == 0 and not caplog.records and not g.warned


def test_a_rejected_reading_counts_an_error_and_logs_once_per_series(
        caplog: pytest.LogCaptureFixture) -> None:
    g = gpu()
    temperature = metric("gpu_temperature_celsius")
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert not v.accept(g, temperature, float(U32), "gpu")
        assert not v.accept(g, temperature, float(U32), "memory")
        assert not v.accept(g, metric("gpu_power_watts"), 800.0, ceiling=300.0)
    assert g.errors == 5
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3
    assert messages[0] == ("GPU 3: gpu_temperature_celsius:gpu reads 4294967295.0, which no GPU "
                           "can report (a 'not available' value or a faulty reading); left out "
                           "while it does")
    assert "gpu_temperature_celsius:memory" in messages[1]
    assert "gpu_power_watts reads 800.0" in messages[2]
    other = Gpu(index=4, device=None, identity=Identity(4))
    with caplog.at_level(logging.WARNING):
        v.accept(other, temperature, float(U32), "gpu")
    assert caplog.records[-1].getMessage().startswith("GPU 4:")  # once per GPU, not globally


def test_a_counter_is_remembered_by_its_series() -> None:
    g = gpu()
    last: v.Counters = {}
    assert v.accept_counter(g, last, metric("gpu_pcie_replays_total"), 3)
    assert v.accept_counter(g, last, metric("gpu_pcie_bytes_total"), 7.0, "rx")
    assert last == {"gpu_pcie_replays_total": 3, "gpu_pcie_bytes_total:rx": 7.0}


def test_a_counter_going_backwards_is_rejected_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    g = gpu()
    last: v.Counters = {}
    pcie_bytes = metric("gpu_pcie_bytes_total")
    assert v.accept_counter(g, last, pcie_bytes, 1000.0, "tx")
    with caplog.at_level(logging.WARNING):
        assert not v.accept_counter(g, last, pcie_bytes, 10.0, "tx")
    assert g.errors == 1
    assert "gpu_pcie_bytes_total:tx reads 10.0" in caplog.records[0].getMessage()
    assert v.accept_counter(g, last, pcie_bytes, 1001.0, "tx")


def test_the_energy_counter_is_exported_after_the_driver_resets_it() -> None:
    g = gpu()
    last: v.Counters = {}
    energy = metric("gpu_energy_joules_total")
    assert v.accept_counter(g, last, energy, 100.0)
    assert v.accept_counter(g, last, energy, 5.0)
    assert last == {"gpu_energy_joules_total": 5.0}
    assert g.errors == 0


# --- the device collector -------------------------------------------------------------

@dataclasses.dataclass
class Tamper:
    """Answers GPU 0's state with ``bad`` replacing its fields while set."""

    bad: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __call__(self, name: str, state: GpuState) -> GpuState:
        return dataclasses.replace(state, **self.bad) if self.bad else state


@pytest.fixture()
def node() -> Iterator[tuple[OneGpu, DeviceCollector, Tamper]]:
    with OneGpu(utilization=0.5, temperature_c=55.0, power_w=400.0) as one:
        tamper = Tamper()
        one.node.library.inject_state = tamper
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        collector.detail = True  # every series, the detail ones included
        yield one, collector, tamper


def _values(snap: Snapshot, name: str, **want: str) -> list[float]:
    return [v for lab, v in snap.series(name) if want.items() <= lab.items()]


# (the state field, the bad value, the series it must leave absent, the
# series it must leave alone)
BAD_READS = [
    ("power_mw", U32, ("gpu_power_watts", {}), ("gpu_power_limit_watts", {})),
    ("power_mw", 1_800_000, ("gpu_power_watts", {}), ("gpu_power_limit_watts", {})),
    ("limit_mw", U32, ("gpu_power_limit_watts", {}), ("gpu_power_watts", {})),
    ("temp_c", U32, ("gpu_temperature_celsius", {"sensor": "gpu"}),
     ("gpu_temperature_celsius", {"sensor": "memory"})),
    ("mem_temp_c", 0xFFFF, ("gpu_temperature_celsius", {"sensor": "memory"}),
     ("gpu_temperature_celsius", {"sensor": "gpu"})),
    ("util_pct", 0xFF, ("gpu_utilization_ratio", {}),
     ("gpu_memory_controller_utilization_ratio", {})),
    ("mem_util_pct", 0xFF, ("gpu_memory_controller_utilization_ratio", {}),
     ("gpu_utilization_ratio", {})),
    ("mem_used", U64, ("gpu_memory_used_bytes", {}), ("gpu_memory_total_bytes", {})),
    ("mem_reserved", U64, ("gpu_memory_reserved_bytes", {}), ("gpu_memory_used_bytes", {})),
    ("mem_total", U64, ("gpu_memory_total_bytes", {}), ("gpu_power_watts", {})),
    ("mem_total", U64, ("gpu_memory_used_bytes", {}), ("gpu_power_watts", {})),
    ("clocks_mhz", {0: 1500, 1: U32, 2: 2619}, ("gpu_clock_hertz", {"clock": "sm"}),
     ("gpu_clock_hertz", {"clock": "graphics"})),
    ("clocks_mhz", {0: 1500, 1: 1500, 2: 0xFFFF}, ("gpu_clock_hertz", {"clock": "memory"}),
     ("gpu_clock_hertz", {"clock": "sm"})),
    ("clocks_mhz", {0: 3000, 1: 1500, 2: 2619}, ("gpu_clock_hertz", {"clock": "graphics"}),
     ("gpu_clock_hertz", {"clock": "sm"})),  # 3 GHz over a 1.98 GHz maximum
    ("pstate", 16, ("gpu_performance_state", {}), ("gpu_power_watts", {})),
    ("pcie_gen", 99, ("gpu_pcie_link_generation", {}), ("gpu_pcie_link_width", {})),
    ("pcie_width", 0, ("gpu_pcie_link_width", {}), ("gpu_pcie_link_generation", {})),
    ("ecc", {(0, 0): U64, (1, 0): 0, (0, 1): 0, (1, 1): 0},
     ("gpu_ecc_errors_total", {"type": "corrected", "scope": "volatile"}),
     ("gpu_ecc_errors_total", {"type": "uncorrected", "scope": "volatile"})),
]


@pytest.mark.parametrize(("field", "bad", "absent", "kept"), BAD_READS,
                         ids=[f"{b[0]}->{b[2][0]}{b[2][1]}" for b in BAD_READS])
def test_a_bad_reading_leaves_its_series_absent_for_that_poll(
        node: tuple[OneGpu, DeviceCollector, Tamper], field: str, bad: Any,
        absent: tuple[str, dict[str, str]], kept: tuple[str, dict[str, str]]) -> None:
    one, collector, tamper = node
    good = one.poll(collector)
    assert _values(good, *absent[:1], **absent[1]), "present while the reading is good"
    assert collector.errors() == 0
    tamper.bad = {field: bad}
    # A value read on a cadence (the link, the P-state, the memory clock) is
    # rejected at its next read.
    for _ in range(SLOW_READ_EVERY_POLLS + 1):
        snap = one.poll(collector)
        if not _values(snap, absent[0], **absent[1]):
            break
    assert _values(snap, absent[0], **absent[1]) == []
    assert _values(snap, kept[0], **kept[1]), "a bad reading took another series with it"
    assert collector.errors() >= 1
    assert _values(snap, "gpu_up") == [1.0]
    tamper.bad = {}
    again = one.poll(collector)
    assert _values(again, absent[0], **absent[1]) == _values(good, absent[0], **absent[1])
    assert collector.errors() == 0


def test_the_diagnosis_never_sees_a_rejected_reading(
        node: tuple[OneGpu, DeviceCollector, Tamper]) -> None:
    one, collector, tamper = node
    tamper.bad = {"temp_c": U32, "util_pct": 0xFF, "power_mw": U32, "mem_used": U64,
                  "pcie_width": 0, "pcie_gen": 99, "clocks_mhz": {0: U32, 1: U32, 2: U32}}
    one.clock.advance(1.0)
    one.node.refresh()
    out = SnapshotBuilder(one.clock())
    collector.collect(out)
    assert out.readings.gpus is not None
    reading = out.readings.gpus[0]
    assert reading.up
    assert collector.errors() == 9
    assert reading.temperature_celsius is None and reading.utilization is None
    assert reading.power_watts is None and reading.memory_used_bytes is None
    assert reading.pcie_width is None and reading.pcie_generation is None
    assert reading.clocks_hz == {}
    # the readings beside them are there
    assert reading.memory_utilization is not None and reading.memory_total_bytes
    assert reading.power_limit_watts == 700.0 and reading.pcie_width_max == 16


def test_a_bad_temperature_is_absent_then_fresh_never_the_previous_value(
        node: tuple[OneGpu, DeviceCollector, Tamper]) -> None:
    """The stale-temperature failure: a read that fails (or answers a sentinel)
    must not repeat the last good value, and the next good read is exported."""
    one, collector, tamper = node
    assert _values(one.poll(collector), "gpu_temperature_celsius", sensor="gpu") == [55.0]
    tamper.bad = {"temp_c": 0xFFFF}
    assert _values(one.poll(collector), "gpu_temperature_celsius", sensor="gpu") == []
    tamper.bad = {"temp_c": 61}
    assert _values(one.poll(collector), "gpu_temperature_celsius", sensor="gpu") == [61.0]
    one.node.library.inject_error = lambda name, gpu: (
        999 if name == "nvmlDeviceGetTemperature" else None)
    assert _values(one.poll(collector), "gpu_temperature_celsius", sensor="gpu") == []
    one.node.library.inject_error = None
    tamper.bad = {"temp_c": 62}
    assert _values(one.poll(collector), "gpu_temperature_celsius", sensor="gpu") == [62.0]


def test_a_slow_counter_that_goes_backwards_is_dropped_and_asked_again(
        node: tuple[OneGpu, DeviceCollector, Tamper]) -> None:
    one, collector, tamper = node
    first = one.poll(collector)
    tx = _values(first, "gpu_pcie_bytes_total", direction="tx")
    replays = _values(first, "gpu_pcie_replays_total")
    assert tx and replays == [0.0]
    tamper.bad = {"pcie_replays": 40}
    polls = 0
    while _values(one.poll(collector), "gpu_pcie_replays_total") != [40.0]:
        polls += 1
        assert polls <= SLOW_READ_EVERY_POLLS, "the slow read never came"
    tamper.bad = {"pcie_replays": 3, "pcie_tx_bytes": 1}
    polls = 0
    while _values(snap := one.poll(collector), "gpu_pcie_replays_total") == [40.0]:
        polls += 1  # the held value until the next slow read
        assert polls <= SLOW_READ_EVERY_POLLS, "the slow read never came"
    assert _values(snap, "gpu_pcie_replays_total") == []
    assert _values(snap, "gpu_pcie_bytes_total", direction="tx") == []
    assert _values(snap, "gpu_pcie_bytes_total", direction="rx")
    assert collector.errors() == 2
    tamper.bad = {"pcie_replays": 41}
    snap = one.poll(collector)  # asked again at once, not ten polls later
    assert _values(snap, "gpu_pcie_replays_total") == [41.0]
    assert _values(snap, "gpu_pcie_bytes_total", direction="tx")[0] > tx[0]


def test_volatile_ecc_counts_reset_and_are_exported(
        node: tuple[OneGpu, DeviceCollector, Tamper]) -> None:
    """NVML resets the volatile counts when the driver loads: not an error."""
    one, collector, tamper = node
    tamper.bad = {"ecc": {(0, 0): 9, (1, 0): 0, (0, 1): 9, (1, 1): 0}}
    one.poll(collector)
    tamper.bad = {"ecc": {(0, 0): 1, (1, 0): 0, (0, 1): 9, (1, 1): 0}}
    snap = one.poll(collector)
    assert _values(snap, "gpu_ecc_errors_total", type="corrected", scope="volatile") == [1.0]
    assert collector.errors() == 0
