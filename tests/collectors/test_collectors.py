"""Each NVML collector on its own, table-driven, on a one-GPU simulated node:
a condition of the GPU in, the series and the typed readings out."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter import collectors
from gpu_exporter.collectors.base import Collector, NvmlCollector
from gpu_exporter.collectors.device import DeviceCollector
from gpu_exporter.collectors.gpm import GpmCollector
from gpu_exporter.collectors.mig import MigCollector
from gpu_exporter.collectors.nvlink import NvlinkCollector
from gpu_exporter.collectors.samples import SamplesCollector
from gpu_exporter.collectors.xid import XidCollector
from gpu_exporter.daemon.pipeline import COLLECTORS, DERIVATIONS, READERS, STAGES
from gpu_exporter.diagnosis.signals import INPUTS
from gpu_exporter.facts.cadence import SAMPLES_EVERY_S
from gpu_exporter.poll.catalog import BY_NAME, CATALOG
from gpu_exporter.poll.stage import Derivation, Stage
from gpu_exporter.settings.config import Settings, settings_fields
from tests.onegpu import OneGpu

READERS_BY_NAME = {c.name: c for c in READERS}

GPU0 = {"gpu": "0"}
MIG_7 = {"gpu_instance": 7, "compute_instance": 0, "memory_total_mib": 9856,
         "memory_used_ratio": 0.5, "sm_active": 0.6}
MIG_8 = {**MIG_7, "gpu_instance": 8, "sm_active": 0.3}

# condition of GPU 0 -> (metric, labels beyond gpu, expected value)
DEVICE_CASES: list[tuple[dict[str, Any], str, dict[str, str], float]] = [
    ({"utilization": 0.5}, "gpu_utilization_ratio", {}, 0.5),
    ({"power_w": 312.0}, "gpu_power_watts", {}, 312.0),
    ({"power_limit_w": 500.0}, "gpu_power_limit_watts", {}, 500.0),
    ({"temperature_c": 71.0}, "gpu_temperature_celsius", {"sensor": "gpu"}, 71.0),
    ({"utilization": 0.9, "pcie_link_generation": 3}, "gpu_pcie_link_generation", {}, 3.0),
    ({"pcie_link_width": 8}, "gpu_pcie_link_width", {}, 8.0),
    ({"throttle_reasons": ["hw_slowdown"]}, "gpu_throttle_reason_active",
     {"reason": "hw_slowdown"}, 1.0),
    ({"throttle_reasons": []}, "gpu_throttle_reason_active", {"reason": "hw_slowdown"}, 0.0),
    # A reason NVML counts the time of: the counter, from the first poll (1 s held).
    ({"throttle_reasons": ["hw_power_brake"]}, "gpu_throttle_seconds_total",
     {"reason": "hw_power_brake"}, 1.0),
    ({"throttle_reasons": []}, "gpu_throttle_seconds_total", {"reason": "hw_power_brake"}, 0.0),
    ({"ecc_uncorrected_volatile": 3}, "gpu_ecc_errors_total",
     {"type": "uncorrected", "scope": "volatile"}, 3.0),
    ({"remap_pending": True}, "gpu_row_remap_pending", {}, 1.0),
    ({"persistence_mode": False}, "gpu_persistence_mode_enabled", {}, 0.0),
    ({}, "gpu_up", {}, 1.0),
    ({"lost": True}, "gpu_up", {}, 0.0),
]


@pytest.mark.parametrize("condition,name,labels,value", DEVICE_CASES)
def test_device(condition: dict[str, Any], name: str, labels: dict[str, str],
                value: float) -> None:
    with OneGpu(**condition) as node:
        snap = node.poll(node.build(DeviceCollector))
        assert snap.get(name, **GPU0, **labels) == pytest.approx(value)
        readings = snap.readings.gpus
        assert readings is not None and list(readings) == [0]
        assert readings[0].up is (name != "gpu_up" or value == 1.0)


def test_device_readings_carry_what_the_series_say() -> None:
    with OneGpu(utilization=0.9, power_w=312.0, pcie_link_generation=3) as node:
        snap = node.poll(node.build(DeviceCollector))
        r = (snap.readings.gpus or {})[0]
        assert (r.utilization, r.power_watts, r.pcie_generation) == (0.9, 312.0, 3)
        assert snap.get("gpu_memory_total_bytes", **GPU0) == r.memory_total_bytes


# MIG instances of GPU 0 -> (mode series, instances read)
MIG_CASES: list[tuple[list[dict[str, Any]] | None, float, list[int]]] = [
    (None, 0.0, []),
    ([MIG_7], 1.0, [7]),
    ([MIG_7, MIG_8], 1.0, [7, 8]),
]


@pytest.mark.parametrize("instances,mode,read", MIG_CASES)
def test_mig(instances: list[dict[str, Any]] | None, mode: float, read: list[int]) -> None:
    with OneGpu(mig_instances=instances) as node:
        snap = node.poll(node.build(MigCollector))
        assert snap.get("gpu_mig_mode_enabled", **GPU0) == mode
        assert [m.gpu_instance for m in (snap.readings.mig or {}).get(0, [])] == read
        assert sorted(int(lab["gpu_instance"]) for lab, _ in
                      snap.series("gpu_mig_memory_total_bytes")) == read
        for m in (snap.readings.mig or {}).get(0, []):
            assert m.memory_total_bytes == 9856 * 2**20
            assert m.memory_used_bytes == pytest.approx(0.5 * m.memory_total_bytes, rel=0.01)


# GPM ratio condition -> (metric, value once two samples exist)
GPM_CASES: list[tuple[dict[str, Any], str, float]] = [
    ({"sm_active": 0.4}, "gpu_sm_active_ratio", 0.4),
    ({"sm_occupancy": 0.25}, "gpu_sm_occupancy_ratio", 0.25),
    ({"tensor_active": 0.7}, "gpu_tensor_active_ratio", 0.7),
    ({"dram_active": 0.15}, "gpu_dram_active_ratio", 0.15),
]


@pytest.mark.parametrize("condition,name,value", GPM_CASES)
def test_gpm(condition: dict[str, Any], name: str, value: float) -> None:
    with OneGpu(**condition) as node:
        gpm = node.build(GpmCollector)
        first = node.poll(gpm)
        assert first.get(name, **GPU0) is None  # one sample gives no rate yet
        # The next sample SAMPLES_EVERY_S later; a poll before it has none either.
        assert node.poll(gpm, seconds=SAMPLES_EVERY_S / 2).get(name, **GPU0) is None
        snap = node.poll(gpm, seconds=SAMPLES_EVERY_S / 2)
        assert snap.get(name, **GPU0) == pytest.approx(value, abs=0.01)
        assert (snap.readings.gpm or {})[0].sm_active is not None


def test_gpm_samples_the_instances_the_mig_reader_found() -> None:
    with OneGpu(mig_instances=[MIG_7, MIG_8]) as node:
        mig, gpm = node.build(MigCollector), node.build(GpmCollector)
        node.poll(mig, gpm)
        snap = node.poll(mig, gpm, seconds=SAMPLES_EVERY_S)
        got = {lab["gpu_instance"]: v for lab, v in snap.series("gpu_mig_sm_active_ratio")}
        assert got == pytest.approx({"7": 0.6, "8": 0.3}, abs=0.01)
        # Without the MIG reader the GPU is still sampled as a whole.
        alone = OneGpu(mig_instances=[MIG_7])
        try:
            g = alone.build(GpmCollector)
            alone.poll(g)
            assert alone.poll(g, seconds=SAMPLES_EVERY_S).series("gpu_mig_sm_active_ratio") == []
        finally:
            alone.close()


def test_gpm_absent_on_a_gpu_without_it() -> None:
    with OneGpu(profile="a100-pcie-40gb", sm_active=0.4) as node:
        gpm = node.build(GpmCollector)
        node.poll(gpm)
        snap = node.poll(gpm)
        assert snap.series("gpu_sm_active_ratio") == []
        assert snap.readings.gpm == {}
        assert gpm.errors() == 0  # unsupported is no error


# condition -> (metric, stat, value after the starting read)
SAMPLES_CASES: list[tuple[dict[str, Any], str, str, float]] = [
    ({"utilization": 0.5}, "gpu_utilization_samples_ratio", "mean", 0.5),
    ({"utilization": 0.5}, "gpu_utilization_samples_ratio", "min", 0.5),
    ({"utilization": 0.5, "burst_period_s": 1.0}, "gpu_utilization_samples_ratio", "min", 0.0),
    ({"utilization": 0.5, "burst_period_s": 1.0}, "gpu_utilization_samples_ratio", "max", 1.0),
]


@pytest.mark.parametrize("condition,name,stat,value", SAMPLES_CASES)
def test_samples(condition: dict[str, Any], name: str, stat: str, value: float) -> None:
    with OneGpu(**condition) as node:
        samples = SamplesCollector(node.session, detail=True)
        assert node.poll(samples).series(name) == []  # the first read sets the start
        snap = node.poll(samples, seconds=6.0)
        assert snap.get(name, **GPU0, stat=stat) == pytest.approx(value, abs=0.02)
        stats = (snap.readings.samples or {})[0][name]
        assert stats.count > 0 and stats.min <= stats.mean <= stats.max
        power = (snap.readings.samples or {})[0]["gpu_power_samples_watts"]
        assert 0 < power.min <= power.mean <= power.max


def test_power_and_clock_samples_are_not_read_without_detail() -> None:
    """Their summaries are detail series and nothing else reads them: without
    --metrics.detail their buffers are never asked for, the utilization
    samples (busy time, the diagnosis) still are."""
    with OneGpu(utilization=0.5) as node:
        samples = node.build(SamplesCollector)
        for _ in range(8):
            snap = node.poll(samples, seconds=1.0)
        calls = node.node.library.calls["nvmlDeviceGetSamples"]
    assert set((snap.readings.samples or {})[0]) == {"gpu_utilization_samples_ratio"}
    # Two calls a read (size, then data): the start, the first read after it,
    # one 5 s later; eight polls would have asked the power buffer eight times.
    assert calls == 2 * 3


# condition -> (metric, labels, value after 10 s)
NVLINK_CASES: list[tuple[dict[str, Any], str, dict[str, str], float]] = [
    ({}, "gpu_nvlink_link_up", {"link": "3"}, 1.0),
    ({"nvlink_down": [3]}, "gpu_nvlink_link_up", {"link": "3"}, 0.0),
    ({"nvlink_down": [3]}, "gpu_nvlink_link_up", {"link": "4"}, 1.0),
    ({"nvlink_crc_errors_per_s": 2.0}, "gpu_nvlink_errors_total",
     {"link": "0", "type": "crc"}, 20.0),
    ({"nvlink_bytes_per_s": 1024.0 * 1000}, "gpu_nvlink_bytes_total",
     {"link": "0", "direction": "tx"}, 1024.0 * 1000 * 10),
]


@pytest.mark.parametrize("condition,name,labels,value", NVLINK_CASES)
def test_nvlink(condition: dict[str, Any], name: str, labels: dict[str, str],
                value: float) -> None:
    with OneGpu(**condition) as node:
        nvlink = node.build(NvlinkCollector)
        before = node.poll(nvlink, seconds=0.0).get(name, **GPU0, **labels) or 0.0
        snap = node.poll(nvlink, seconds=10.0)
        got = snap.get(name, **GPU0, **labels)
        assert got is not None
        if name.endswith("_total"):
            assert got - before == pytest.approx(value, rel=0.05)
        else:
            assert got == value
        assert len(snap.series("gpu_nvlink_link_up")) == 18
        reading = (snap.readings.nvlink or {})[0]
        assert reading.links == 18
        assert reading.up == sum(v for _, v in snap.series("gpu_nvlink_link_up"))


def test_nvlink_absent_without_links() -> None:
    with OneGpu(profile="rtx-4090") as node:
        snap = node.poll(node.build(NvlinkCollector))
        assert [n for n in snap.samples if n.startswith("gpu_nvlink")] == []
        assert snap.readings.nvlink == {}


# Xid codes reported at 5 s -> (counted per code, in the readings)
XID_CASES: list[tuple[list[int], dict[str, float]]] = [
    ([79], {"79": 1.0}),
    ([13, 48], {"13": 1.0, "48": 1.0}),
]


@pytest.mark.parametrize("xids,counted", XID_CASES)
def test_xid(xids: list[int], counted: dict[str, float]) -> None:
    with OneGpu(later={"xid": xids}, at=5.0) as node:
        xid = node.build(XidCollector)
        quiet = node.poll(xid)
        assert quiet.series("gpu_xid_errors_total") == [] and quiet.readings.xid == []
        snap = node.poll(xid, seconds=6.0)
        got = {lab["xid"]: v for lab, v in snap.series("gpu_xid_errors_total")}
        assert got == counted
        assert sorted(e.xid for e in snap.readings.xid or []) == sorted(xids)
        # A counter: the next poll still counts them, no more.
        assert {lab["xid"]: v for lab, v in
                node.poll(xid).series("gpu_xid_errors_total")} == counted


# --- how collectors declare themselves -------------------------------------------------


def test_every_collector_declares_itself() -> None:
    keys = {key for key, _ in settings_fields()}
    for kind in COLLECTORS.values():
        assert kind.name and kind.description, kind
        # Each selector reads one setting of the model, by its dotted key.
        assert set(kind.setting_keys()) <= keys, kind.name
    assert COLLECTORS["processes"].setting_keys() == (
        "processes.max_per_gpu", "path.procfs", "path.sysfs")


def test_the_diagnosis_inputs_are_collectors() -> None:
    assert set(INPUTS) <= set(READERS_BY_NAME)


def test_the_catalog_names_real_collectors() -> None:
    known = set(STAGES) | {"exporter"}
    wrong = {m.name: m.collector for m in CATALOG if m.collector not in known}
    assert not wrong
    assert next(m for m in CATALOG if m.name == "gpu_baseline_drift").collector == "baseline"


def test_readers_run_before_derivations_and_nvml_readers_share_the_base() -> None:
    order = list(STAGES.values())
    assert order == [*READERS, *DERIVATIONS]
    assert all(issubclass(kind, Collector) for kind in READERS)
    # Derivations are no readers: no --collector.<name> switch of their own.
    assert all(issubclass(kind, Derivation) and not issubclass(kind, Collector)
               for kind in DERIVATIONS)
    assert set(COLLECTORS) == {kind.name for kind in READERS}
    assert order.index(MigCollector) < order.index(GpmCollector)
    for kind in (DeviceCollector, MigCollector, GpmCollector, SamplesCollector,
                 NvlinkCollector, XidCollector):
        assert issubclass(kind, NvmlCollector)


def test_reconfigure_hands_reloaded_settings_to_a_collector() -> None:
    from gpu_exporter.collectors.processes import ProcessesCollector
    from gpu_exporter.diagnosis.engine import Diagnosis

    with OneGpu() as node:
        procs = node.build(ProcessesCollector)
        diag = node.build(Diagnosis)
        new = Settings(processes={"max_per_gpu": 3}, diagnosis={"window": "5s"})
        c: Stage
        for c in (procs, diag):
            c.reconfigure(new)
        assert isinstance(procs, ProcessesCollector) and procs.max_per_gpu == 3
        assert isinstance(diag, Diagnosis) and diag.cfg.window == 5.0


def _metric_names_written_in(source: str) -> list[str]:
    """String constants in ``source`` that name a metric, or begin one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text in BY_NAME or (text.startswith("gpu_")
                                   and any(name.startswith(text) for name in BY_NAME)):
                found.append(text)
    return found


def test_collectors_name_no_metric_they_add_values_through_its_handle() -> None:
    """A metric is one handle (its catalog entry): a collector adds values
    through it, so a metric is renamed, retyped or re-bounded in one place."""
    assert _metric_names_written_in('out.add("gpu_power_watts", 1)') == ["gpu_power_watts"]
    assert _metric_names_written_in('name = "gpu_pcie_" + kind') == ["gpu_pcie_"]
    assert _metric_names_written_in('labels = {"gpu_instance": "1"}') == []
    package = Path(collectors.__file__).parent
    written = {path.name: names for path in sorted(package.glob("*.py"))
               if (names := _metric_names_written_in(path.read_text()))}
    assert written == {}


def _series_written_by_string(source: str) -> list[str]:
    """Calls that write a series (``.add``/``.add_values``) naming it by a
    string rather than by its catalog handle."""
    return [node.args[0].value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("add", "add_values") and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
            and node.args[0].value in BY_NAME]


def test_no_series_is_written_by_string_anywhere_in_the_exporter() -> None:
    """Handles are the only way to write a series: the poller, the diagnosis,
    the baseline and the readers alike (the snapshot builder takes a handle,
    and this walk finds a name that slipped past the types)."""
    assert _series_written_by_string('out.add("gpu_up", 1, gpu="0")') == ["gpu_up"]
    assert _series_written_by_string('seen.add("gpu_idle")') == []  # a set, not a series
    assert _series_written_by_string("out.add_values(UP, labels, 1)") == []
    package = Path(collectors.__file__).parent.parent
    written = {str(path.relative_to(package)): names for path in sorted(package.rglob("*.py"))
               if (names := _series_written_by_string(path.read_text()))}
    assert written == {}
