"""Each built-in fault scenario, run through the real exporter, shows its fault
in the metrics — and only on the GPU it breaks."""

from __future__ import annotations

import pytest

from gpu_exporter.diagnosis.table import BY_KEY
from gpu_exporter.simulator import builtin_scenarios, load_scenario
from gpu_exporter.simulator.model import Scenario
from tests.simnode import DetailRun, SimRun

REQUIRED = [
    "gpu_info", "gpu_up", "gpu_memory_controller_utilization_ratio",
    "gpu_memory_used_bytes", "gpu_memory_total_bytes", "gpu_memory_reserved_bytes",
    "gpu_temperature_celsius", "gpu_temperature_threshold_celsius", "gpu_power_watts",
    "gpu_power_limit_watts", "gpu_power_default_limit_watts", "gpu_energy_joules_total",
    "gpu_clock_hertz", "gpu_clock_max_hertz", "gpu_throttle_seconds_total",
    "gpu_busy_seconds_total", "gpu_nvlink_links_active", "gpu_nvlink_bytes_all_links_total",
    "gpu_performance_state", "gpu_throttle_reason_active", "gpu_pcie_link_generation",
    "gpu_pcie_link_generation_max", "gpu_pcie_link_width", "gpu_pcie_link_width_max",
    "gpu_pcie_replays_total", "gpu_pcie_bytes_total", "gpu_ecc_enabled", "gpu_ecc_errors_total",
    "gpu_remapped_rows_total", "gpu_row_remap_pending", "gpu_row_remap_failed",
    "gpu_persistence_mode_enabled", "gpu_exporter_build_info", "gpu_exporter_collector_success",
    "gpu_exporter_collector_duration_seconds", "gpu_exporter_poll_duration_seconds",
    "gpu_exporter_last_poll_timestamp_seconds", "gpu_exporter_nvml_up",
]


def values(snap, name: str, **labels: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """GPU index -> value of ``name`` (filtered by labels)."""
    out = {}
    for lab, v in snap.series(name):
        if all(lab.get(k) == want for k, want in labels.items()):
            out[lab["gpu"]] = v
    return out


def test_healthy_exports_every_required_family_in_base_units() -> None:
    with SimRun("healthy") as run:
        snap = run.poll(5)
    for name in REQUIRED:
        assert snap.series(name), f"{name} missing"
    assert len(snap.series("gpu_info")) == 8
    assert set(values(snap, "gpu_up").values()) == {1.0}
    assert snap.get("gpu_exporter_nvml_up") == 1.0
    # The last poll's utilization is detail: rate(gpu_busy_seconds_total) carries it.
    assert not snap.series("gpu_utilization_ratio")
    with DetailRun("healthy") as run:
        util = values(run.poll(5), "gpu_utilization_ratio")
    assert len(util) == 8 and all(0.9 <= u <= 1.0 for u in util.values())
    # 81559 MiB in bytes, as a real H100 80GB HBM3 reports.
    assert set(values(snap, "gpu_memory_total_bytes").values()) == {81559 * 2**20}
    assert all(550 < w <= 700 for w in values(snap, "gpu_power_watts").values())
    assert set(values(snap, "gpu_power_limit_watts").values()) == {700.0}
    assert set(values(snap, "gpu_clock_max_hertz", clock="sm").values()) == {1.98e9}
    assert set(values(snap, "gpu_temperature_threshold_celsius",
                      threshold="slowdown").values()) == {89.0}
    assert set(values(snap, "gpu_pcie_link_width").values()) == {16.0}
    assert set(values(snap, "gpu_pcie_link_generation").values()) == {5.0}
    # No throttle reason is active on a healthy busy GPU.
    assert set(values(snap, "gpu_throttle_reason_active").values()) == {0.0}
    # SXM boards have no fan: the series is absent, never 0.
    assert not snap.series("gpu_fan_speed_ratio")


def test_energy_counter_grows_with_power() -> None:
    with SimRun("healthy") as run:
        first = run.poll(1).get("gpu_energy_joules_total", gpu="0")
        power = run.snapshot.get("gpu_power_watts", gpu="0")  # type: ignore[union-attr]
        later = run.poll(10).get("gpu_energy_joules_total", gpu="0")
    assert first is not None and later is not None and power is not None
    assert later - first == pytest.approx(10 * power, rel=0.05)


def test_pcie_downtrained_shows_one_gpu_at_x8_of_x16() -> None:
    with SimRun("pcie-downtrained") as run:
        snap = run.poll(5)
    width = values(snap, "gpu_pcie_link_width")
    assert width["3"] == 8.0
    assert values(snap, "gpu_pcie_link_width_max")["3"] == 16.0
    assert [g for g, w in width.items() if w != 16.0] == ["3"]


def test_gpu_lost_turns_one_gpu_down_and_the_rest_keep_reporting() -> None:
    with DetailRun("gpu-lost") as run:
        before = values(run.poll(2), "gpu_up")
        assert set(before.values()) == {1.0}
        snap = run.poll(10)
        scrape = run.scrape()
    up = values(snap, "gpu_up")
    assert up["5"] == 0.0
    assert [g for g, v in up.items() if v == 1.0] == ["0", "1", "2", "3", "4", "6", "7"]
    # The lost GPU keeps its identity but reports no stale values.
    assert "5" in values(snap, "gpu_info")
    assert "5" not in values(snap, "gpu_utilization_ratio")
    assert len(values(snap, "gpu_utilization_ratio")) == 7
    assert 'gpu_up{gpu="5"' in scrape


def test_power_capped_gpu_shows_sw_power_cap_and_lower_limit() -> None:
    with SimRun("power-capped", metrics={"detail": True}) as run:
        snap = run.poll(5)
    cap = values(snap, "gpu_throttle_reason_active", reason="sw_power_cap")
    assert cap["2"] == 1.0 and sum(cap.values()) == 1.0
    # The time counter: the whole 5 s on GPU 2, none on the others.
    held = values(snap, "gpu_throttle_seconds_total", reason="sw_power_cap")
    assert held["2"] == pytest.approx(5.0) and sum(held.values()) == pytest.approx(5.0)
    assert values(snap, "gpu_power_limit_watts")["2"] == 450.0
    assert values(snap, "gpu_power_default_limit_watts")["2"] == 700.0
    assert values(snap, "gpu_clock_hertz", clock="sm")["2"] < 0.9 * 1.98e9


def test_thermal_throttle_gpu_is_over_its_slowdown_threshold() -> None:
    with SimRun("thermal-throttle", metrics={"detail": True}) as run:
        snap = run.poll(5)
    temps = values(snap, "gpu_temperature_celsius", sensor="gpu")
    assert temps["6"] >= 89.0
    assert values(snap, "gpu_throttle_reason_active", reason="hw_thermal")["6"] == 1.0
    assert values(snap, "gpu_throttle_reason_active", reason="hw_slowdown")["6"] == 1.0
    assert max(v for g, v in temps.items() if g != "6") < 80


def test_ecc_uncorrectable_appears_on_one_gpu_after_it_happens() -> None:
    with SimRun("ecc-uncorrectable") as run:
        early = run.poll(1)
        assert values(early, "gpu_ecc_errors_total", type="uncorrected",
                      scope="volatile")["1"] == 0.0
        snap = run.poll(5)
    unc = values(snap, "gpu_ecc_errors_total", type="uncorrected", scope="volatile")
    assert unc["1"] == 2.0 and sum(unc.values()) == 2.0
    assert values(snap, "gpu_row_remap_pending")["1"] == 1.0
    assert values(snap, "gpu_remapped_rows_total", type="uncorrectable")["1"] == 1.0


def test_idle_gpus_downshift_their_links() -> None:
    with DetailRun("idle") as run:
        snap = run.poll(3)
    assert set(values(snap, "gpu_pcie_link_generation").values()) == {1.0}
    assert set(values(snap, "gpu_pcie_link_generation_max").values()) == {5.0}
    assert set(values(snap, "gpu_throttle_reason_active", reason="gpu_idle").values()) == {1.0}
    assert set(values(snap, "gpu_utilization_ratio").values()) == {0.0}


@pytest.mark.parametrize("name", builtin_scenarios())
def test_every_builtin_scenario_loads_and_runs(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.description.strip(), f"{name} has no description"
    with SimRun(scenario) as run:
        snap = run.poll(3)
    assert snap.get("gpu_exporter_collector_success", collector="device") == 1.0


def _node(profile: str, gpus: int = 2, **state: object) -> Scenario:
    return Scenario(name=f"{profile}-test", node={"gpus": gpus, "profile": profile},
                    state={"utilization": 0.9, "memory_used_ratio": 0.5, **state})


def test_rtx_4090_has_fans_but_no_ecc_memory_sensor_or_pcie_counters() -> None:
    with SimRun(_node("rtx-4090")) as run:
        snap = run.poll(3)
    assert values(snap, "gpu_fan_speed_ratio", fan="0")
    assert values(snap, "gpu_fan_speed_ratio", fan="1")
    for absent in ("gpu_ecc_enabled", "gpu_ecc_errors_total", "gpu_remapped_rows_total",
                   "gpu_row_remap_pending", "gpu_clock_application_hertz",
                   "gpu_pcie_bytes_total"):
        assert not snap.series(absent), f"{absent} must be absent on an RTX 4090"
    assert not values(snap, "gpu_temperature_celsius", sensor="memory")
    assert values(snap, "gpu_temperature_celsius", sensor="gpu")
    # A consumer board's serial is not exported by NVML: the label is empty, not made up.
    assert {lab["serial"] for lab, _ in snap.series("gpu_info")} == {""}
    names = {lab["name"] for lab, _ in snap.series("gpu_info")}
    assert names == {"NVIDIA GeForce RTX 4090"}
    assert not values(snap, "gpu_throttle_reason_active", reason="sync_boost")


def test_unsupported_calls_are_asked_once_not_every_poll() -> None:
    with SimRun(_node("rtx-4090")) as run:
        run.poll(10)
        calls = run.node.library.calls
    assert calls["nvmlDeviceGetEccMode"] == 2  # once per GPU
    assert calls["nvmlDeviceGetRemappedRows"] == 2
    assert calls["nvmlDeviceGetTemperature"] == 2 * 11  # every poll


def test_a100_pcie_has_no_pcie_byte_counters_but_memory_temperature() -> None:
    with SimRun(_node("a100-pcie-40gb")) as run:
        snap = run.poll(3)
    assert not snap.series("gpu_pcie_bytes_total")
    assert values(snap, "gpu_temperature_celsius", sensor="memory")
    assert set(values(snap, "gpu_pcie_link_generation_max").values()) == {4.0}
    assert set(values(snap, "gpu_memory_total_bytes").values()) == {40960 * 2**20}


def test_one_failing_call_leaves_the_rest_of_the_gpu_reporting() -> None:
    scenario = _node("h100-sxm5-80gb", errors={"nvmlDeviceGetTemperature": "UNKNOWN"})
    with DetailRun(scenario) as run:
        snap = run.poll(3)
    assert not values(snap, "gpu_temperature_celsius", sensor="gpu")
    assert set(values(snap, "gpu_up").values()) == {1.0}
    assert values(snap, "gpu_utilization_ratio")
    assert snap.get("gpu_exporter_collector_errors_total", collector="device") > 0


def test_driver_upgraded_underneath_drops_gpu_series_and_recovers() -> None:
    scenario = Scenario(
        name="driver-upgrade", node={"gpus": 2},
        state={"utilization": 0.9},
        timeline=[{"at": "3s", "set": {"errors": {
            "nvmlDeviceGetUtilizationRates": "LIB_RM_VERSION_MISMATCH"}}}])
    with SimRun(scenario) as run:
        assert run.poll(2).get("gpu_exporter_nvml_up") == 1.0
        snap = run.poll(3)
    assert snap.get("gpu_exporter_nvml_up") == 0.0
    assert not snap.series("gpu_up")


def test_every_expected_finding_names_a_row_of_the_table() -> None:
    # The scenario format does not know the diagnosis (the simulator imitates
    # NVML and the host only): the link between the two is checked here.
    for name in builtin_scenarios():
        for e in load_scenario(name).expect or []:
            assert f"{e.symptom}/{e.cause}" in BY_KEY, (name, e)
