"""GPM, sub-second samples, Xid events, NVLink and MIG on the simulated node."""

from __future__ import annotations

import dataclasses
import time

import pytest

from gpu_exporter.facts.cadence import SAMPLES_EVERY_S
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.errors import Return
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.simulator import SimulatedNode
from gpu_exporter.simulator.gpu_state import GpuState
from gpu_exporter.simulator.model import Scenario
from tests.simnode import SimRun, settings

GPM = ("gpu_sm_active_ratio", "gpu_sm_occupancy_ratio", "gpu_tensor_active_ratio",
       "gpu_dram_active_ratio")


def by_gpu(snap: Snapshot, name: str, **labels: str) -> dict[str, float]:
    return {lab["gpu"]: v for lab, v in snap.series(name)
            if all(lab.get(k) == w for k, w in labels.items())}


def test_healthy_h100s_export_the_four_gpm_families() -> None:
    with SimRun("healthy", metrics={"detail": True}) as run:
        snap = run.poll(5)
    for name in GPM:
        assert len(by_gpu(snap, name)) == 8, name
    assert all(0.7 < v < 0.95 for v in by_gpu(snap, "gpu_sm_active_ratio").values())
    rx = by_gpu(snap, "gpu_gpm_pcie_bytes_per_second", direction="rx")
    assert all(3.0e9 < v < 3.6e9 for v in rx.values())  # 3.4 GB/s x 0.96 busy


def test_first_poll_has_no_gpm_values_yet() -> None:
    with SimRun("healthy") as run:
        snap = run.poll()
    assert not snap.series("gpu_sm_active_ratio")  # one sample is no rate


def test_a100_exports_no_gpm_and_no_error() -> None:
    scenario = Scenario(name="a100", node={"gpus": 2, "profile": "a100-pcie-40gb"},
                        state={"utilization": 0.9})
    with SimRun(scenario) as run:
        snap = run.poll(5)
        gets = run.node.library.calls["nvmlGpmSampleGet"]
    for name in GPM:
        assert not snap.series(name)
    assert snap.get("gpu_exporter_collector_success", collector="gpm") == 1.0
    assert snap.get("gpu_exporter_collector_errors_total", collector="gpm") == 0.0
    assert gets == 0  # support is asked once; no sampling on a GPU without GPM


def test_utilization_inflated_gpu_is_busy_but_its_sms_are_not() -> None:
    with SimRun("utilization-inflated", metrics={"detail": True}) as run:
        snap = run.poll(5)
    assert by_gpu(snap, "gpu_utilization_ratio")["4"] > 0.9
    assert by_gpu(snap, "gpu_sm_active_ratio")["4"] < 0.35
    assert by_gpu(snap, "gpu_sm_active_ratio")["3"] > 0.7


def test_gpm_is_sampled_every_five_seconds_and_its_rates_held_between() -> None:
    """A sample is two NVML calls per GPU; GPM's metrics are the interval's
    averages, so a sample every SAMPLES_EVERY_S loses nothing. Between samples
    the newest rates are exported again."""
    with SimRun("healthy", metrics={"detail": True}) as run:
        run.poll()
        gets = run.node.library.calls["nvmlGpmSampleGet"]
        snaps = [run.poll(0.5, interval=0.25) for _ in range(int(2 * SAMPLES_EVERY_S))]
        taken = run.node.library.calls["nvmlGpmSampleGet"] - gets
        held = run.poll(1.0, interval=0.25)
    ratios = [s.get("gpu_sm_active_ratio", gpu="0") for s in snaps]
    assert all(r is None for r in ratios[:-1])
    assert 0.7 < ratios[-1] < 0.95  # type: ignore[operator]
    assert taken == 8  # one sample per GPU, 5 s after the first, over 20 polls
    assert held.get("gpu_sm_active_ratio", gpu="0") == ratios[-1]


def test_bursty_input_shows_in_sub_second_samples() -> None:
    with SimRun("bursty-input", metrics={"detail": True}) as run:
        snap = run.poll(5)
    stats = {lab["stat"]: v for lab, v in snap.series("gpu_utilization_samples_ratio")
             if lab["gpu"] == "2"}
    assert stats["min"] == 0.0 and stats["max"] == 1.0
    assert 0.3 < stats["mean"] < 0.7
    steady = {lab["stat"]: v for lab, v in snap.series("gpu_utilization_samples_ratio")
              if lab["gpu"] == "0"}
    assert steady["min"] > 0.9
    power = {lab["stat"]: v for lab, v in snap.series("gpu_power_samples_watts")
             if lab["gpu"] == "2"}
    assert power["min"] < 100 < 500 < power["max"]


def test_first_poll_reads_no_old_samples() -> None:
    with SimRun("bursty-input") as run:
        snap = run.poll()
    assert not snap.series("gpu_utilization_samples_ratio")


def test_xid_79_is_counted_for_the_failing_gpu_and_the_gpu_is_lost() -> None:
    with SimRun("xid-79") as run:
        assert not run.poll(5).series("gpu_xid_errors_total")
        snap = run.poll(10)
    xids = {(lab["gpu"], lab["xid"]): v for lab, v in snap.series("gpu_xid_errors_total")}
    assert xids == {("4", "79"): 1.0}
    assert snap.get("gpu_up", gpu="4") == 0.0
    assert snap.get("gpu_up", gpu="3") == 1.0


def test_xid_counter_counts_repeats_and_survives_reinit() -> None:
    scenario = Scenario(
        name="xids", node={"gpus": 2}, state={"utilization": 0.9},
        timeline=[{"at": "2s", "gpus": [1], "set": {"xid": [31]}},
                  {"at": "4s", "gpus": [1], "set": {"xid": [31]}},
                  {"at": "6s", "gpus": [0], "set": {"xid": [94]}}])
    with SimRun(scenario) as run:
        snap = run.poll(8)
    xids = {(lab["gpu"], lab["xid"]): v for lab, v in snap.series("gpu_xid_errors_total")}
    assert xids == {("1", "31"): 2.0, ("0", "94"): 1.0}


def test_xid_before_registration_is_lost_to_nvml_and_found_in_the_kernel_log() -> None:
    """NVML's event API drops what happened before the event set existed, as the
    real library does; only the kernel log still has it."""
    scenario = Scenario(name="early", node={"gpus": 1}, state={"xid": [79]})
    with SimRun(scenario, path={"kmsg": ""}) as run:
        snap = run.poll(3)
    assert not snap.series("gpu_xid_errors_total")
    with SimRun(scenario) as run:
        snap = run.poll(3)
    assert snap.get("gpu_xid_errors_total", gpu="0", xid="79") == 1.0


def test_xid_counted_by_the_daemon_in_real_time() -> None:
    """The daemon as it runs (real time, not the tests' virtual clock) counts
    an Xid the simulated driver queues a second after start."""
    scenario = Scenario(name="rt", node={"gpus": 2}, state={"utilization": 0.9},
                        timeline=[{"at": "1s", "gpus": [1], "set": {"xid": [48]}}])
    from gpu_exporter.daemon.exporter import Exporter

    node = SimulatedNode(scenario)
    exporter = Exporter(settings(), node)
    try:
        exporter.poller.poll_once()  # registers the event set; the thread starts
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            snap = exporter.poller.poll_once()
            if snap.series("gpu_xid_errors_total"):
                break
            time.sleep(0.05)
        assert snap.get("gpu_xid_errors_total", gpu="1", xid="48") == 1.0
    finally:
        exporter.stop()


def test_nvlink_links_errors_and_traffic_on_h100() -> None:
    scenario = Scenario(name="nvl", node={"gpus": 2}, state={"utilization": 0.9},
                        gpus={1: {"nvlink_down": [3], "nvlink_crc_errors_per_s": 2.0}})
    with SimRun(scenario, metrics={"detail": True}) as run:
        snap = run.poll(10)
    up = {(lab["gpu"], lab["link"]): v for lab, v in snap.series("gpu_nvlink_link_up")}
    assert len(up) == 36 and up[("1", "3")] == 0.0 and sum(up.values()) == 35
    crc = {(lab["gpu"], lab["link"]): v for lab, v in snap.series("gpu_nvlink_errors_total")
           if lab["type"] == "crc"}
    assert crc[("1", "0")] == 20.0 and crc[("0", "0")] == 0.0
    tx = {(lab["gpu"], lab["link"]): v for lab, v in snap.series("gpu_nvlink_bytes_total")
          if lab["direction"] == "tx"}
    assert tx[("1", "3")] == 0.0 and tx[("0", "0")] > 1e10


def test_nvlink_field_errors_skip_absent_count_others_and_lost_means_gone() -> None:
    # Each (field, link) has its own return code in the one field-values call.
    scenario = Scenario(name="nvl", node={"gpus": 2}, state={"utilization": 0.9})
    errors: dict[int, int] = {}

    def tamper(name: str, st: GpuState) -> GpuState:
        if name == "nvmlDeviceGetFieldValues" and st.index == 1:
            return dataclasses.replace(st, field_errors=dict(errors))
        return st

    with SimRun(scenario, metrics={"detail": True}) as run:
        run.poll(2)
        run.node.library.inject_state = tamper
        errors.update({c.FI_DEV_NVLINK_ERROR_DL_CRC: int(Return.NOT_SUPPORTED),
                       c.FI_DEV_NVLINK_THROUGHPUT_DATA_RX: int(Return.UNKNOWN)})
        before = run.snapshot.get("gpu_exporter_collector_errors_total",  # type: ignore[union-attr]
                                  collector="nvlink")
        snap = run.poll(1)
        after = snap.get("gpu_exporter_collector_errors_total", collector="nvlink")
        kinds = {(lab["gpu"], lab["type"]) for lab, _ in snap.series("gpu_nvlink_errors_total")}
        rx = {lab["gpu"] for lab, _ in snap.series("gpu_nvlink_bytes_total")
              if lab["direction"] == "rx"}
        assert ("0", "crc") in kinds and ("1", "crc") not in kinds and ("1", "replay") in kinds
        assert rx == {"0"}
        assert before is not None and after == before + 18  # the 18 failed rx reads
        assert snap.get("gpu_nvlink_bytes_total", gpu="1", link="17", direction="tx") is not None

        errors[c.FI_DEV_NVLINK_GET_STATE] = int(Return.GPU_IS_LOST)
        snap = run.poll(1)
        assert {lab["gpu"] for lab, _ in snap.series("gpu_nvlink_link_up")} == {"0"}
        session = run.exporter.poller.session
        assert session is not None and session.gpus[1].lost  # GpuGone, not a counted error


def test_no_nvlink_series_on_pcie_boards() -> None:
    scenario = Scenario(name="pcie", node={"gpus": 1, "profile": "a100-pcie-40gb"})
    with SimRun(scenario) as run:
        snap = run.poll(3)
    assert not snap.series("gpu_nvlink_link_up")
    assert snap.get("gpu_exporter_collector_errors_total", collector="nvlink") == 0.0


def test_mig_instances_have_their_own_memory_and_gpm() -> None:
    with SimRun("mig-h100") as run:
        snap = run.poll(5)
    mem = {lab["gpu_instance"]: v for lab, v in snap.series("gpu_mig_memory_total_bytes")
           if lab["gpu"] == "0"}
    assert sorted(mem) == ["10", "11", "12", "13", "7", "8", "9"]
    assert set(mem.values()) == {9856 * 2**20}
    assert snap.get("gpu_mig_mode_enabled", gpu="0") == 1.0
    assert snap.get("gpu_mig_mode_enabled", gpu="1") == 0.0
    active = {lab["gpu_instance"]: v for lab, v in snap.series("gpu_mig_sm_active_ratio")}
    assert active["7"] == pytest.approx(0.60, abs=0.01)
    assert active["13"] == pytest.approx(0.90, abs=0.01)
    # The parent keeps its device-level series.
    assert snap.get("gpu_memory_total_bytes", gpu="0") == 81559 * 2**20
    assert snap.get("gpu_power_watts", gpu="0") is not None
    infos = [lab for lab, _ in snap.series("gpu_mig_info")]
    assert all(lab["mig_uuid"].startswith("MIG-") for lab in infos)
