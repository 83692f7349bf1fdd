"""The node baseline in-process, field by field: what a poll records of each
GPU, how several polls merge, how a baseline compares with a node, what a
baseline file may hold, and the drift series the daemon exports. (The
commands on a simulated node are tests/test_baseline.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter import __version__
from gpu_exporter.baseline import (
    DRIFTS,
    FIELDS,
    FORMAT,
    LOADED,
    UNDER_LOAD,
    BaselineCheck,
    Drift,
    capture,
    compare,
    gpu_fields,
    load,
    readings_fields,
)
from gpu_exporter.poll.readings import GpuReading, PcieKernelView
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.settings.config import ConfigError
from tests.simnode import EPOCH, settings


def _reading(index: int = 0, utilization: float | None = 0.9, up: bool = True,
             **changes: Any) -> GpuReading:
    values: dict[str, Any] = {
        "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0", "driver_version": "580.159.04",
        "vbios_version": "96.00.99.00.01", "utilization": utilization,
        "power_limit_watts": 700.0, "power_default_limit_watts": 700.0,
        "clocks_application_hz": {"sm": 1980e6, "memory": 2619e6},
        "pcie_generation": 5, "pcie_generation_max": 5, "pcie_width": 16,
        "pcie_width_max": 16, "persistence_mode": True, "ecc_enabled": True}
    values.update(changes)
    return GpuReading(index, f"GPU-{index}", up, **values)


VIEW = PcieKernelView(numa_node=1, local_cpulist="32-63")


def test_a_poll_records_every_field_of_a_gpu() -> None:
    assert gpu_fields(_reading(), VIEW) == {
        "present": True, "uuid": "GPU-0", "pci_bus_id": "00000000:18:00.0",
        "pcie_generation_max": 5, "pcie_width_max": 16, "pcie_generation_under_load": 5,
        "pcie_width_under_load": 16, "numa_node": 1, "local_cpulist": "32-63",
        "driver_version": "580.159.04", "vbios_version": "96.00.99.00.01",
        "power_limit_watts": 700.0, "power_default_limit_watts": 700.0,
        "application_sm_clock_hertz": 1980e6, "application_memory_clock_hertz": 2619e6,
        "persistence_mode": True, "ecc_enabled": True}
    assert set(gpu_fields(_reading(), VIEW)) == set(FIELDS)


@pytest.mark.parametrize(("utilization", "loaded"), [(LOADED, True), (LOADED - 0.01, False),
                                                     (1.0, True), (0.0, False), (None, False)])
def test_the_trained_link_is_recorded_only_under_load(utilization: float | None,
                                                      loaded: bool) -> None:
    fields = gpu_fields(_reading(utilization=utilization, pcie_generation=1, pcie_width=4),
                        None)
    assert (fields["pcie_generation_under_load"], fields["pcie_width_under_load"]) == (
        (1, 4) if loaded else (None, None))


def test_what_a_poll_did_not_read_is_not_known() -> None:
    fields = gpu_fields(_reading(pci_bus_id="", driver_version="", vbios_version="",
                                 clocks_application_hz={}), None)
    for name in ("pci_bus_id", "driver_version", "vbios_version", "numa_node",
                 "local_cpulist", "application_sm_clock_hertz",
                 "application_memory_clock_hertz"):
        assert fields[name] is None, name


def _snap(gpus: dict[int, GpuReading] | None,
          views: dict[int, PcieKernelView] | None = None) -> Snapshot:
    out = SnapshotBuilder(EPOCH)
    out.readings.gpus = gpus
    out.readings.pcie_view = views
    return out.build()


def test_only_gpus_that_are_up_are_recorded() -> None:
    snap = _snap({0: _reading(0), 1: _reading(1, up=False), 2: _reading(2)}, {2: VIEW})
    fields = readings_fields(snap.readings)
    assert sorted(fields) == [0, 2]
    assert fields[0]["numa_node"] is None and fields[2]["numa_node"] == 1
    assert readings_fields(_snap(None).readings) == {}


def test_capture_keeps_the_newest_value_and_the_best_link_seen_under_load() -> None:
    polls = [
        _snap({0: _reading(0, pcie_width=8, pcie_generation=4, power_limit_watts=600.0)}),
        _snap({0: _reading(0, pcie_width=16, pcie_generation=3, power_limit_watts=650.0,
                           driver_version="")}),
        # idle: the link is not recorded, and does not erase what was seen
        _snap({0: _reading(0, utilization=0.0, pcie_width=1, pcie_generation=1),
               1: _reading(1, up=False)}),
    ]
    data = capture(polls)
    assert data["format"] == FORMAT and data["exporter_version"] == __version__
    assert data["gpu_count"] == 1
    (gpu,) = data["gpus"]
    assert gpu["index"] == 0
    assert (gpu["pcie_width_under_load"], gpu["pcie_generation_under_load"]) == (16, 4)
    assert gpu["power_limit_watts"] == 700.0  # the newest poll's
    assert gpu["driver_version"] == "580.159.04"  # not known in the second: kept
    assert list(gpu) == ["index", *FIELDS]


def test_capture_lists_gpus_in_index_order_with_unknown_fields_null() -> None:
    data = capture([_snap({3: _reading(3, driver_version=""), 1: _reading(1)})])
    assert [g["index"] for g in data["gpus"]] == [1, 3]
    assert data["gpus"][1]["driver_version"] is None
    assert data["gpu_count"] == 2


def _baseline(*gpus: dict[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, "gpus": list(gpus)}


def test_compare_names_each_drift() -> None:
    want = {"index": 0, "uuid": "GPU-0", **gpu_fields(_reading(), VIEW)}
    now = gpu_fields(_reading(pcie_width_max=8, driver_version="570.86.15",
                              persistence_mode=False), VIEW)
    drifts = compare(_baseline(want), {0: now})
    assert [(d.field, d.expected, d.found) for d in drifts] == [
        ("pcie_width_max", 16, 8), ("driver_version", "580.159.04", "570.86.15"),
        ("persistence_mode", True, False)]
    assert drifts[0].as_dict() == {"gpu": "0", "uuid": "GPU-0", "field": "pcie_width_max",
                                   "expected": 16, "found": 8}


def test_a_field_not_known_on_either_side_is_no_drift() -> None:
    want = {"index": 0, "uuid": "GPU-0", "numa_node": None, "driver_version": "580.159.04",
            "present": True}
    assert compare(_baseline(want), {0: {"numa_node": 1, "driver_version": None,
                                         "present": True}}) == []


def test_bus_ids_compare_without_case() -> None:
    want = {"index": 0, "uuid": "GPU-0", "pci_bus_id": "00000000:2a:00.0"}
    assert compare(_baseline(want), {0: {"pci_bus_id": "00000000:2A:00.0"}}) == []
    (drift,) = compare(_baseline(want), {0: {"pci_bus_id": "00000000:2B:00.0"}})
    assert drift.field == "pci_bus_id"
    # Other text compares exactly.
    want = {"index": 0, "uuid": "GPU-0", "vbios_version": "96.00.99.00.01"}
    (drift,) = compare(_baseline(want), {0: {"vbios_version": "96.00.99.00.0A"}})
    assert drift.field == "vbios_version"


def test_a_missing_gpu_and_a_new_one_are_drifts_of_present() -> None:
    drifts = compare(_baseline({"index": 0, "uuid": "GPU-0"}, {"index": 1}),
                     {1: {"uuid": "GPU-1"}, 4: {"uuid": "GPU-4"}, 5: {}})
    assert [(d.gpu, d.uuid, d.field, d.expected, d.found) for d in drifts] == [
        (0, "GPU-0", "present", True, False), (4, "GPU-4", "present", False, True),
        (5, "", "present", False, True)]


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(data))
    return path


def test_a_baseline_file_loads_as_capture_wrote_it(tmp_path: Path) -> None:
    data = capture([_snap({0: _reading(0), 1: _reading(1)}, {0: VIEW})])
    loaded = load(_write(tmp_path, data))
    assert [g["index"] for g in loaded["gpus"]] == [0, 1]
    assert loaded["gpus"][0]["numa_node"] == 1 and loaded["gpu_count"] == 2
    assert compare(loaded, readings_fields(_snap({0: _reading(0), 1: _reading(1)},
                                                 {0: VIEW}).readings)) == []


@pytest.mark.parametrize(("data", "message"), [
    ([], "not a gpu-exporter baseline"),
    ({"format": "something-else/1", "gpus": []}, "not a gpu-exporter baseline"),
    ({"gpus": []}, "not a gpu-exporter baseline"),
    ({"format": FORMAT, "gpus": [{"index": 0}, {"index": 0}]}, "gpus: a GPU index appears twice"),
    ({"format": FORMAT, "gpus": [{"index": 0, "colour": "red"}]}, "gpus.0.colour: unknown field"),
    ({"format": FORMAT, "gpus": [{"index": -1}]}, "gpus.0.index"),
    ({"format": FORMAT, "gpus": [{"index": 0, "pcie_width_max": "16"}]},
     "gpus.0.pcie_width_max"),
])
def test_a_bad_baseline_file_is_one_line_naming_the_file(tmp_path: Path, data: object,
                                                         message: str) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        load(path)
    text = str(err.value)
    assert text.startswith(f"baseline file {path}: "), text
    assert message in text and "\n" not in text


def test_an_unreadable_baseline_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load(tmp_path / "nowhere.json")


def test_the_check_exports_each_field_of_each_gpu_and_publishes_the_drifts(
        tmp_path: Path) -> None:
    data = capture([_snap({0: _reading(0), 1: _reading(1), 2: _reading(2)})])
    path = _write(tmp_path, data)
    check = BaselineCheck(path)
    assert check.path == path and check.baseline["gpu_count"] == 3
    assert BaselineCheck.wanted(settings(baseline_file=str(path)))
    assert not BaselineCheck.wanted(settings())
    # GPU 1 lost (the gpu_lost finding's, not a drift), GPU 2 capped to 650 W.
    out = SnapshotBuilder(EPOCH)
    out.readings.gpus = {0: _reading(0), 1: _reading(1, up=False),
                         2: _reading(2, power_limit_watts=650.0)}
    check.collect(out)
    snap = out.build()
    assert snap.derived(DRIFTS) == (Drift(2, "GPU-2", "power_limit_watts", 700.0, 650.0),)
    series = {(lab["gpu"], lab["uuid"], lab["field"]): v
              for lab, v in snap.series("gpu_baseline_drift")}
    assert set(series) == {(str(i), f"GPU-{i}", f) for i in range(3) for f in FIELDS}
    assert {k for k, v in series.items() if v == 1.0} == {("2", "GPU-2", "power_limit_watts")}


def test_a_gpu_gone_from_the_list_is_a_drift_and_a_device_reader_off_is_nothing(
        tmp_path: Path) -> None:
    check = BaselineCheck(_write(tmp_path, capture([_snap({0: _reading(0), 1: _reading(1)})])))
    out = SnapshotBuilder(EPOCH)
    out.readings.gpus = {0: _reading(0)}
    check.collect(out)
    snap = out.build()
    assert snap.derived(DRIFTS) == (Drift(1, "GPU-1", "present", True, False),)
    assert snap.get("gpu_baseline_drift", gpu="1", uuid="GPU-1", field="present") == 1.0
    off = SnapshotBuilder(EPOCH)
    check.collect(off)  # the device reader is off: nothing to compare
    assert off.build().series("gpu_baseline_drift") == []
    assert UNDER_LOAD == ("pcie_generation_under_load", "pcie_width_under_load")


def test_a_baseline_gpu_without_a_uuid_is_named_by_an_empty_one(tmp_path: Path) -> None:
    """A hand-written baseline may leave the UUID out: its drifts and series
    carry an empty uuid label, never an invented one."""
    (drift,) = compare(_baseline({"index": 2}), {})
    assert (drift.gpu, drift.uuid, drift.field) == (2, "", "present")
    check = BaselineCheck(_write(tmp_path, {"format": FORMAT, "gpus": [{"index": 0}]}))
    out = SnapshotBuilder(EPOCH)
    out.readings.gpus = {}
    check.collect(out)
    labels = {lab["uuid"] for lab, _ in out.build().series("gpu_baseline_drift")}
    assert labels == {""}


def test_present_is_judged_by_the_gpu_list_not_compared_as_a_field() -> None:
    # A baseline written with the GPU marked absent, and the GPU there now:
    # the list decides (index 0 is known), the field is not a drift of its own.
    want = {"index": 0, "uuid": "GPU-0", "present": False}
    assert compare(_baseline(want), {0: {"present": True}}) == []


def test_a_refused_file_is_the_loaders_one_line(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value) == (f"baseline file {path}: line 1, column 2: not JSON (Expecting "
                              "property name enclosed in double quotes)")


def test_a_file_that_is_not_a_baseline_says_how_to_write_one(tmp_path: Path) -> None:
    path = _write(tmp_path, {"format": "x"})
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value) == (f"baseline file {path}: not a gpu-exporter baseline (write one "
                              "with `gpu-exporter baseline capture`)")
