"""The device collector exports what NVML answered, converted to base units:
every series and every field of the reading the diagnosis gets, computed here
independently from the simulated GPU's state (in NVML's own units), on boards
with different capabilities; a failed read is named in one warning and leaves
only its own series absent; a capability NVML lacks is not asked again.

Fast (one simulated GPU): mutation testing runs these for every edit of the
device collector."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from gpu_exporter.collectors.device import DeviceCollector
from gpu_exporter.facts.cadence import FACT_READ_EVERY_POLLS
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.errors import Return
from gpu_exporter.poll.readings import GpuReading
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.simulator.gpu_state import GpuState
from tests.onegpu import OneGpu

Key = tuple[str, tuple[tuple[str, str], ...]]

# The functions behind each family: a family is absent where the board lacks them.
NEEDS = {
    "gpu_ecc_enabled": "nvmlDeviceGetEccMode",
    "gpu_ecc_errors_total": "nvmlDeviceGetTotalEccErrors",
    "gpu_remapped_rows_total": "nvmlDeviceGetRemappedRows",
    "gpu_row_remap_pending": "nvmlDeviceGetRemappedRows",
    "gpu_row_remap_failed": "nvmlDeviceGetRemappedRows",
    "gpu_clock_application_hertz": "nvmlDeviceGetApplicationsClock",
    # NVML has both application clock calls or neither (so does the simulator)
    "gpu_clock_application_default_hertz": "nvmlDeviceGetApplicationsClock",
    "gpu_fan_speed_ratio": "nvmlDeviceGetFanSpeed_v2",
}
SLOW_COUNTERS = {"gpu_energy_joules_total", "gpu_pcie_bytes_total", "gpu_pcie_replays_total"}
U32 = 0xFFFFFFFF
CLOCKS = {"graphics": c.CLOCK_GRAPHICS, "sm": c.CLOCK_SM, "memory": c.CLOCK_MEM}


def expected(st: GpuState, one: OneGpu) -> dict[Key, float]:
    """Every device series the state must give, in base units."""
    profile = one.node.world.profile
    rows: list[tuple[str, dict[str, str], float]] = [
        ("gpu_up", {}, 1.0),
        ("gpu_utilization_ratio", {}, st.util_pct / 100),
        ("gpu_memory_controller_utilization_ratio", {}, st.mem_util_pct / 100),
        ("gpu_memory_total_bytes", {}, st.mem_total),
        ("gpu_memory_used_bytes", {}, st.mem_used),
        ("gpu_memory_reserved_bytes", {}, st.mem_reserved),
        ("gpu_temperature_celsius", {"sensor": "gpu"}, st.temp_c),
        ("gpu_power_watts", {}, st.power_mw / 1000),
        ("gpu_power_limit_watts", {}, st.limit_mw / 1000),
        ("gpu_power_default_limit_watts", {}, st.default_limit_mw / 1000),
        ("gpu_energy_joules_total", {}, st.energy_mj / 1000),
        ("gpu_performance_state", {}, st.pstate),
        ("gpu_pcie_link_generation", {}, st.pcie_gen),
        ("gpu_pcie_link_generation_max", {}, st.pcie_max_gen),
        ("gpu_pcie_link_width", {}, st.pcie_width),
        ("gpu_pcie_link_width_max", {}, st.pcie_max_width),
        ("gpu_pcie_replays_total", {}, st.pcie_replays),
        ("gpu_persistence_mode_enabled", {}, float(st.persistence)),
    ]
    if st.mem_temp_c is not None:
        rows.append(("gpu_temperature_celsius", {"sensor": "memory"}, st.mem_temp_c))
    if c.FI_DEV_PCIE_COUNT_TX_BYTES not in profile.unsupported_fields:
        rows.append(("gpu_pcie_bytes_total", {"direction": "tx"}, st.pcie_tx_bytes))
        rows.append(("gpu_pcie_bytes_total", {"direction": "rx"}, st.pcie_rx_bytes))
    for name, value in profile.temperature_thresholds_c.model_dump().items():
        if value and name in c.TEMPERATURE_THRESHOLDS:
            rows.append(("gpu_temperature_threshold_celsius", {"threshold": name}, value))
    for name, code in CLOCKS.items():
        if name != "graphics":  # the graphics clock's series are detail
            rows.append(("gpu_clock_hertz", {"clock": name}, st.clocks_mhz[code] * 1e6))
            rows.append(("gpu_clock_max_hertz", {"clock": name}, st.max_clocks_mhz[code] * 1e6))
        rows.append(("gpu_clock_application_hertz", {"clock": name},
                     st.app_clocks_mhz[code] * 1e6))
        rows.append(("gpu_clock_application_default_hertz", {"clock": name},
                     st.default_app_clocks_mhz[code] * 1e6))
    for fan, pct in enumerate(st.fans_pct):
        rows.append(("gpu_fan_speed_ratio", {"fan": str(fan)}, pct / 100))
    counted = set()
    for fid, reason in c.THROTTLE_TIME_FIELDS.items():
        if reason in st.throttle_ns and fid not in profile.unsupported_fields:
            counted.add(reason)
            rows.append(("gpu_throttle_seconds_total", {"reason": reason},
                         st.throttle_ns[reason] * 1e-9))
    for bit, reason in c.CLOCK_EVENT_REASONS.items():
        # A counted reason's state gauge is exported with --metrics.detail only.
        if st.supported_reasons & bit and reason not in counted:
            rows.append(("gpu_throttle_reason_active", {"reason": reason},
                         float(bool(st.reasons & bit))))
    rows.append(("gpu_ecc_enabled", {}, float(st.ecc_enabled)))
    if st.ecc_enabled:
        for tname, tcode in (("corrected", c.ECC_CORRECTED),
                             ("uncorrected", c.ECC_UNCORRECTED)):
            for sname, scode in (("volatile", c.ECC_VOLATILE), ("aggregate", c.ECC_AGGREGATE)):
                rows.append(("gpu_ecc_errors_total", {"type": tname, "scope": sname},
                             st.ecc[(tcode, scode)]))
    corr, unc, pending, failed = st.remapped
    rows += [("gpu_remapped_rows_total", {"type": "correctable"}, corr),
             ("gpu_remapped_rows_total", {"type": "uncorrectable"}, unc),
             ("gpu_row_remap_pending", {}, float(bool(pending))),
             ("gpu_row_remap_failed", {}, float(bool(failed)))]
    action = st.condition.get("recovery_action") or "none"
    rows.append(("gpu_recovery_action", {"action": action}, 1.0))
    if profile.fabric:
        rows.append(("gpu_fabric_state", {"state": st.condition.get("fabric_state") or
                                          "completed",
                                          "status": (st.condition.get("fabric_status") or
                                                     "SUCCESS").lower(),
                                          "health": st.condition.get("fabric_health") or
                                          "healthy"}, 1.0))
    out = {}
    for name, labels, value in rows:
        if NEEDS.get(name) not in profile.unsupported_calls:
            out[(name, tuple(sorted(labels.items())))] = float(value)
    return out


def exported(snap: Snapshot) -> dict[Key, float]:
    out = {}
    for name in snap.samples:
        if name == "gpu_info":
            continue
        for labels, value in snap.series(name):
            assert labels.pop("gpu") == "0"
            labels.pop("uuid")
            out[(name, tuple(sorted(labels.items())))] = value
    return out


def expected_reading(st: GpuState, one: OneGpu) -> GpuReading:
    profile = one.node.world.profile
    lacks = profile.unsupported_calls
    # The graphics clock and its maximum are read with --metrics.detail only.
    clocks = {name: st.clocks_mhz[code] * 1e6 for name, code in CLOCKS.items()
              if name != "graphics"}
    ecc = "nvmlDeviceGetEccMode" not in lacks
    remap = "nvmlDeviceGetRemappedRows" not in lacks
    return GpuReading(
        0, st.uuid, up=True, name=profile.name, pci_bus_id=st.bus_id,
        driver_version=one.session.driver_version,
        vbios_version=one.node.world.profile.vbios_version,
        utilization=st.util_pct / 100, memory_utilization=st.mem_util_pct / 100,
        memory_used_bytes=st.mem_used, memory_total_bytes=st.mem_total,
        memory_reserved_bytes=st.mem_reserved,
        temperature_celsius=st.temp_c,
        fan_speeds={fan: pct / 100 for fan, pct in enumerate(st.fans_pct)},
        fan_count=profile.fans,
        slowdown_celsius=profile.temperature_thresholds_c.slowdown,
        power_watts=st.power_mw / 1000, power_limit_watts=st.limit_mw / 1000,
        power_default_limit_watts=st.default_limit_mw / 1000,
        clocks_hz=clocks,
        clocks_max_hz={name: st.max_clocks_mhz[code] * 1e6 for name, code in CLOCKS.items()
                       if name != "graphics"},
        clocks_application_hz={} if "nvmlDeviceGetApplicationsClock" in lacks else
        {name: st.app_clocks_mhz[code] * 1e6 for name, code in CLOCKS.items()},
        clocks_application_default_hz={} if "nvmlDeviceGetApplicationsClock" in lacks else
        {name: st.default_app_clocks_mhz[code] * 1e6 for name, code in CLOCKS.items()},
        throttle_reasons=frozenset(reason for bit, reason in c.CLOCK_EVENT_REASONS.items()
                                   if st.supported_reasons & bit and st.reasons & bit),
        pcie_generation=st.pcie_gen, pcie_generation_max=st.pcie_max_gen,
        pcie_width=st.pcie_width, pcie_width_max=st.pcie_max_width,
        pcie_replays=st.pcie_replays,
        ecc_enabled=st.ecc_enabled if ecc else None,
        ecc_uncorrected_volatile=st.ecc[(c.ECC_UNCORRECTED, c.ECC_VOLATILE)]
        if ecc and st.ecc_enabled else None,
        remap_pending=bool(st.remapped[2]) if remap else None,
        remap_failed=bool(st.remapped[3]) if remap else None,
        persistence_mode=st.persistence,
        recovery_action=st.condition.get("recovery_action") or "none",
        fabric_state="completed" if profile.fabric else None,
        fabric_status="SUCCESS" if profile.fabric else None,
        fabric_health="healthy" if profile.fabric else None)




CASES = [
    ("h100-sxm5-80gb", {"utilization": 0.7, "power_w": 450.0}),
    ("h100-sxm5-80gb", {"utilization": 1.0, "throttle_reasons": ["sw_power_cap"],
                        "ecc_corrected_volatile": 3, "remap_pending": True}),
    ("a100-pcie-40gb", {"utilization": 0.3}),
    ("rtx-4090", {"utilization": 0.5}),
]


@pytest.fixture(params=CASES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(CASES)])
def board(request: pytest.FixtureRequest) -> Iterator[tuple[OneGpu, DeviceCollector]]:
    profile, condition = request.param
    with OneGpu(profile=profile, **condition) as one:
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        yield one, collector


def test_every_series_and_reading_is_the_state_in_base_units(
        board: tuple[OneGpu, DeviceCollector]) -> None:
    one, collector = board
    first: dict[Key, float] = {}
    for _ in range(2):  # the first poll reads everything, the second the slow reads' cache
        snap, reading = one.read_gpu(collector)
        st = one.node.world.state(0)
        want = expected(st, one)
        for key in want:
            if first and key[0] in SLOW_COUNTERS:
                want[key] = first[key]  # read every 10 polls: the first poll's
        got = exported(snap)
        # The fabric's health flags: each one the driver reports, and none
        # raised on a healthy fabric (their names are the driver branch's).
        flags = {k: v for k, v in got.items() if k[0] == "gpu_fabric_health_issue"}
        assert set(flags.values()) <= {0.0}
        assert bool(flags) == bool(one.node.world.profile.fabric)
        assert {k: v for k, v in got.items() if k not in flags} == want
        first = first or want
        # What the board or driver does not offer is the coverage's to check
        # (tests/diagnosis/test_coverage.py, tests/diagnosis/test_health_events.py); here, that a
        # board without a fabric says so.
        assert ("fabric_state" in reading.unavailable) == (not one.node.world.profile.fabric)
        assert dataclasses.replace(reading, unavailable=frozenset(), board_lacks=()) == \
            expected_reading(st, one)
        assert collector.errors() == 0


# (the C function made to fail, the read key the warning names, the series
# it leaves absent). Facts read once at discovery (maxima, default limit and
# clocks, supported reasons) are not asked again after the first answer. On
# R525 power and its limit have no fields yet: their calls answer.
FAILING = [
    ("nvmlDeviceGetUtilizationRates", "utilization", "gpu_utilization_ratio"),
    ("nvmlDeviceGetMemoryInfo_v2", "memory", "gpu_memory_used_bytes"),
    ("nvmlDeviceGetTemperature", "temperature", "gpu_temperature_celsius"),
    ("nvmlDeviceGetFieldValues", "field_values", "gpu_temperature_celsius"),
    ("nvmlDeviceGetPowerUsage", "power_watts", "gpu_power_watts"),
    ("nvmlDeviceGetEnforcedPowerLimit", "power_limit_watts", "gpu_power_limit_watts"),
    ("nvmlDeviceGetClockInfo", "clock_hz(1)", "gpu_clock_hertz"),
    ("nvmlDeviceGetApplicationsClock", "application_clock_hz(0)", "gpu_clock_application_hertz"),
    ("nvmlDeviceGetPerformanceState", "performance_state", "gpu_performance_state"),
    ("nvmlDeviceGetCurrentClocksThrottleReasons", "clock_throttle_reasons",
     "gpu_throttle_reason_active"),
    ("nvmlDeviceGetCurrPcieLinkGeneration", "pcie_link_generation", "gpu_pcie_link_generation"),
    ("nvmlDeviceGetCurrPcieLinkWidth", "pcie_link_width", "gpu_pcie_link_width"),
    ("nvmlDeviceGetPersistenceMode", "persistence_mode", "gpu_persistence_mode_enabled"),
]
# Values every branch answers as a field: the field made to fail, the read
# key, the series it leaves absent.
FAILING_FIELDS = [
    (c.FI_DEV_TOTAL_ENERGY_CONSUMPTION, "energy", "gpu_energy_joules_total"),
    (c.FI_DEV_PCIE_REPLAY_COUNTER, "pcie_replays", "gpu_pcie_replays_total"),
    (c.FI_DEV_ECC_CURRENT, "ecc_mode", "gpu_ecc_enabled"),
    (c.FI_DEV_ECC_SBE_AGG_TOTAL, "ecc_corrected_aggregate", "gpu_ecc_errors_total"),
    (c.FI_DEV_REMAPPED_COR, "remapped_correctable", "gpu_remapped_rows_total"),
]
# Series that go with a failing call or field besides the one it names.
_GO_ALONG = {"gpu_temperature_celsius", "gpu_throttle_seconds_total",
             "gpu_memory_controller_utilization_ratio", "gpu_memory_total_bytes",
             "gpu_memory_used_bytes", "gpu_memory_reserved_bytes", "gpu_ecc_errors_total",
             "gpu_remapped_rows_total", "gpu_row_remap_pending", "gpu_row_remap_failed",
             "gpu_throttle_reason_active", "gpu_power_watts", "gpu_power_limit_watts",
             "gpu_energy_joules_total", "gpu_pcie_replays_total", "gpu_pcie_bytes_total",
             "gpu_ecc_enabled", "gpu_recovery_action"}


def _fails_once_named(one: OneGpu, collector: DeviceCollector, good: Snapshot, key: str,
                      call: str, absent: str, caplog: pytest.LogCaptureFixture) -> None:
    for _ in range(2):
        with caplog.at_level(logging.WARNING):
            # values read on a cadence are asked again on the poll after a failure
            for _ in range(FACT_READ_EVERY_POLLS + 1):
                snap, _reading = one.read_gpu(collector)
                if absent not in snap.samples or len(snap.samples[absent]) < len(
                        good.samples[absent]):
                    break
        assert collector.errors() >= 1
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failed[0].startswith(f"GPU 0: reading {key} failed: {call}")
    assert len([m for m in failed if f"reading {key} failed" in m]) == 1
    assert len(snap.samples.get(absent, ())) < len(good.samples[absent])
    assert set(snap.samples) >= set(good.samples) - {absent} - _GO_ALONG


# The throttle reasons under the names R535 introduced, on the newest branch.
FAILING_CASES = [(*f, "R525") for f in FAILING] + [
    ("nvmlDeviceGetCurrentClocksEventReasons", "clock_event_reasons",
     "gpu_throttle_reason_active", "R580")]


@pytest.mark.parametrize(("function", "key", "absent", "driver"), FAILING_CASES,
                         ids=[f"{f[0]}-{f[3]}" for f in FAILING_CASES])
def test_a_failing_read_is_named_once_and_only_its_series_go(
        function: str, key: str, absent: str, driver: str,
        caplog: pytest.LogCaptureFixture) -> None:
    with OneGpu(utilization=0.5, driver=driver) as one:
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        good, _ = one.read_gpu(collector)
        one.node.library.inject_error = lambda name, gpu: (
            int(Return.INSUFFICIENT_RESOURCES) if name == function else None)
        _fails_once_named(one, collector, good, key, function, absent, caplog)


@pytest.mark.parametrize(("fid", "key", "absent"), FAILING_FIELDS,
                         ids=[f[1] for f in FAILING_FIELDS])
def test_a_failing_field_is_named_once_and_only_its_series_go(
        fid: int, key: str, absent: str, caplog: pytest.LogCaptureFixture) -> None:
    with OneGpu(utilization=0.5) as one:
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        good, _ = one.read_gpu(collector)
        one.node.library.inject_state = lambda name, st: dataclasses.replace(
            st, field_errors={fid: int(Return.INSUFFICIENT_RESOURCES)})
        _fails_once_named(one, collector, good, key, f"nvmlDeviceGetFieldValues({key})", absent,
                          caplog)


@pytest.mark.parametrize(("function", "code"), [
    ("nvmlDeviceGetTemperature", Return.NOT_SUPPORTED),
    ("nvmlDeviceGetCurrPcieLinkWidth", Return.NOT_SUPPORTED),
    ("nvmlDeviceGetPersistenceMode", Return.NO_PERMISSION),
])
def test_a_capability_nvml_lacks_is_not_asked_again(function: str, code: Return) -> None:
    with OneGpu() as one:
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        one.node.library.inject_error = lambda name, gpu: int(code) if name == function else None
        one.read_gpu(collector)
        calls = one.node.library.calls[function]
        assert calls >= 1
        for _ in range(FACT_READ_EVERY_POLLS + 2):
            one.read_gpu(collector)
        assert one.node.library.calls[function] == calls
        assert collector.errors() == 0


def test_without_the_v2_memory_call_v1_answers_and_reserved_is_unknown() -> None:
    with OneGpu(utilization=0.5) as one:
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        one.node.library.inject_error = lambda name, gpu: (
            int(Return.FUNCTION_NOT_FOUND) if name == "nvmlDeviceGetMemoryInfo_v2" else None)
        for _ in range(2):
            snap, reading = one.read_gpu(collector)
            st = one.node.world.state(0)
            assert snap.get("gpu_memory_total_bytes", gpu="0", uuid=st.uuid) == st.mem_total
            assert reading.memory_total_bytes == st.mem_total
            assert reading.memory_used_bytes is not None
            assert "gpu_memory_reserved_bytes" not in snap.samples
            assert collector.errors() == 0


# Facts read once at discovery (and slow reads), answered bad from the first
# poll: (state field, bad value, the series left absent, the series the log
# line names)
BAD_FROM_THE_START = [
    ("max_clocks_mhz", {0: 1980, 1: 0xFFFF, 2: 2619}, ("gpu_clock_max_hertz", "sm"),
     "gpu_clock_max_hertz:sm"),
    ("default_limit_mw", U32, ("gpu_power_default_limit_watts", None),
     "gpu_power_default_limit_watts"),
    ("default_app_clocks_mhz", {0: U32, 1: 1980, 2: 2619},
     ("gpu_clock_application_default_hertz", "graphics"),
     "gpu_clock_application_default_hertz:graphics"),
    ("app_clocks_mhz", {0: 1980, 1: 3000, 2: 2619},  # 3 GHz over a 1.98 GHz maximum
     ("gpu_clock_application_hertz", "sm"), "gpu_clock_application_hertz:sm"),
    ("clocks_mhz", {0: 1980, 1: 1980, 2: 3929},  # 1.5 x the 2619 MHz maximum, and over
     ("gpu_clock_hertz", "memory"), "gpu_clock_hertz:memory"),
    ("pcie_max_gen", 99, ("gpu_pcie_link_generation_max", None), "gpu_pcie_link_generation_max"),
    ("pcie_max_width", 0, ("gpu_pcie_link_width_max", None), "gpu_pcie_link_width_max"),
    ("mem_used", 80 * 1024**3 + 1, ("gpu_memory_used_bytes", None), "gpu_memory_used_bytes"),
    ("mem_reserved", 80 * 1024**3 + 1, ("gpu_memory_reserved_bytes", None),
     "gpu_memory_reserved_bytes"),
    ("temp_c", 0xFFFF, ("gpu_temperature_celsius", "gpu"), "gpu_temperature_celsius:gpu"),
    ("mem_temp_c", 0xFFFF, ("gpu_temperature_celsius", "memory"),
     "gpu_temperature_celsius:memory"),
    ("pcie_tx_bytes", 0xFFFFFFFFFFFFFFFF, ("gpu_pcie_bytes_total", "tx"),
     "gpu_pcie_bytes_total:tx"),
]


@pytest.mark.parametrize(("field", "bad", "absent", "logged"), BAD_FROM_THE_START,
                         ids=[b[3] for b in BAD_FROM_THE_START])
def test_a_bad_fact_is_absent_counted_and_named(
        field: str, bad: Any, absent: tuple[str, str | None], logged: str,
        caplog: pytest.LogCaptureFixture) -> None:
    with OneGpu(profile="h100-sxm5-80gb", utilization=0.5) as one:
        one.node.library.inject_state = lambda name, st: dataclasses.replace(st, **{field: bad})
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        with caplog.at_level(logging.WARNING):
            snap, _ = one.read_gpu(collector)
        name, label = absent
        assert not [lab for lab, _ in snap.series(name)
                    if label is None or label in lab.values()]
        assert collector.errors() == 1
        assert [r.getMessage().split(" reads ")[0] for r in caplog.records] == [
            f"GPU 0: {logged}"]


def test_fans_beyond_any_speed_are_absent_and_named(caplog: pytest.LogCaptureFixture) -> None:
    with OneGpu(profile="rtx-4090", utilization=0.5) as one:
        one.node.library.inject_state = lambda name, st: dataclasses.replace(
            st, fans_pct=[30, 250])
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        with caplog.at_level(logging.WARNING):
            snap, _ = one.read_gpu(collector)
        assert snap.series("gpu_fan_speed_ratio")[0][1] == 0.3
        assert len(snap.series("gpu_fan_speed_ratio")) == 1
        assert collector.errors() == 1
        assert caplog.records[0].getMessage().startswith("GPU 0: gpu_fan_speed_ratio:1 reads 2.5")


STATIC = [
    ("nvmlDeviceGetPowerManagementDefaultLimit", "power_default_limit_watts",
     "gpu_power_default_limit_watts"),
    ("nvmlDeviceGetMaxClockInfo", "max_clock_hz(1)", "gpu_clock_max_hertz"),
    ("nvmlDeviceGetSupportedClocksThrottleReasons", "supported_clock_throttle_reasons",
     "gpu_throttle_reason_active"),
    ("nvmlDeviceGetMaxPcieLinkGeneration", "pcie_link_generation_max",
     "gpu_pcie_link_generation_max"),
    ("nvmlDeviceGetNumFans", "fan_count", "gpu_fan_speed_ratio"),
]


@pytest.mark.parametrize(("function", "key", "absent"), STATIC, ids=[s[0] for s in STATIC])
def test_a_fact_that_fails_at_discovery_is_named_and_asked_again(
        function: str, key: str, absent: str, caplog: pytest.LogCaptureFixture) -> None:
    # R525: the default power limit has no field yet, its call answers.
    with OneGpu(profile="rtx-4090", utilization=0.5, driver="R525") as one:
        one.node.library.inject_error = lambda name, gpu: (
            int(Return.INSUFFICIENT_RESOURCES) if name == function else None)
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        with caplog.at_level(logging.WARNING):
            snap, _ = one.read_gpu(collector)
        assert absent not in snap.samples
        assert caplog.records[0].getMessage().startswith(
            f"GPU 0: reading {key} failed: {function}")
        one.node.library.inject_error = None
        snap, _ = one.read_gpu(collector)
        assert snap.series(absent)


def test_a_rejected_energy_reading_is_asked_again_next_poll() -> None:
    with OneGpu(utilization=0.5) as one:
        one.node.library.inject_state = lambda name, st: dataclasses.replace(
            st, energy_mj=0xFFFFFFFFFFFFFFFF)
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        snap, _ = one.read_gpu(collector)
        assert "gpu_energy_joules_total" not in snap.samples
        one.node.library.inject_state = None
        snap, _ = one.read_gpu(collector)
        assert snap.series("gpu_energy_joules_total")


@pytest.mark.parametrize(("code", "errors", "asked_again"), [
    (Return.INSUFFICIENT_RESOURCES, 1, True),  # counted, asked again
    (Return.NOT_SUPPORTED, 0, False),           # the board lacks it: never again
])
def test_one_field_failing_hides_no_other(code: Return, errors: int, asked_again: bool) -> None:
    with OneGpu(utilization=0.5) as one:
        one.node.library.inject_state = lambda name, st: dataclasses.replace(
            st, field_errors={c.FI_DEV_PCIE_COUNT_TX_BYTES: int(code),
                              c.FI_DEV_MEMORY_TEMP: int(code)})
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        snap, _ = one.read_gpu(collector)
        assert [lab["direction"] for lab, _ in snap.series("gpu_pcie_bytes_total")] == ["rx"]
        assert [lab["sensor"] for lab, _ in snap.series("gpu_temperature_celsius")] == ["gpu"]
        assert collector.errors() == 2 * errors
        one.node.library.inject_state = None
        snap, _ = one.read_gpu(collector)
        sensors = [lab["sensor"] for lab, _ in snap.series("gpu_temperature_celsius")]
        assert sensors == (["gpu", "memory"] if asked_again else ["gpu"])


def test_a_field_answering_gpu_lost_takes_the_gpu_down() -> None:
    with OneGpu(utilization=0.5) as one:
        one.node.library.inject_state = lambda name, st: dataclasses.replace(
            st, field_errors={c.FI_DEV_MEMORY_TEMP: int(Return.GPU_IS_LOST)})
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        snap, reading = one.read_gpu(collector)
        assert snap.series("gpu_up")[0][1] == 0.0 and not reading.up
        assert "gpu_power_watts" not in snap.samples


def _ecc_series(snap: Snapshot) -> dict[tuple[str, str], float]:
    return {(lab["scope"], lab["type"]): v for lab, v in snap.series("gpu_ecc_errors_total")}


def test_volatile_ecc_totals_come_with_the_field_values_not_a_call_each() -> None:
    with OneGpu(utilization=0.5, ecc_corrected_volatile=7, ecc_uncorrected_volatile=2) as one:
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        one.read_gpu(collector)  # the first poll also takes the slow (aggregate) reads
        before = one.node.library.calls["nvmlDeviceGetTotalEccErrors"]
        snap, reading = one.read_gpu(collector)
        assert one.node.library.calls["nvmlDeviceGetTotalEccErrors"] == before
        ecc = _ecc_series(snap)
        assert ecc[("volatile", "corrected")] == 7 and ecc[("volatile", "uncorrected")] == 2
        assert reading.ecc_uncorrected_volatile == 2


def test_without_the_ecc_fields_the_volatile_totals_are_asked_for_one_by_one() -> None:
    # A driver without these field ids answers NOT_SUPPORTED for them alone.
    with OneGpu(utilization=0.5, ecc_corrected_volatile=7, ecc_uncorrected_volatile=2) as one:
        one.node.library.inject_state = lambda name, st: dataclasses.replace(
            st, field_errors={c.FI_DEV_ECC_SBE_VOL_TOTAL: int(Return.NOT_SUPPORTED),
                              c.FI_DEV_ECC_DBE_VOL_TOTAL: int(Return.NOT_SUPPORTED)})
        collector = one.build(DeviceCollector)
        assert isinstance(collector, DeviceCollector)
        for _ in range(2):
            before = one.node.library.calls["nvmlDeviceGetTotalEccErrors"]
            snap, _ = one.read_gpu(collector)
            assert one.node.library.calls["nvmlDeviceGetTotalEccErrors"] >= before + 2
            ecc = _ecc_series(snap)
            assert ecc[("volatile", "corrected")] == 7
            assert ecc[("volatile", "uncorrected")] == 2
        assert collector.errors() == 0
        assert [lab["sensor"] for lab, _ in snap.series("gpu_temperature_celsius")] == \
            ["gpu", "memory"]
