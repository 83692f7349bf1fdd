"""The network collector on a two-socket node's sysfs (tests/nic_tree.py):
what it exports for the NICs and RDMA ports, each GPU's distance to each
HCA, saturated counters, and what it hands the diagnosis."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpu_exporter.collectors.network import NetworkCollector
from gpu_exporter.nvml.session import Gpu, Identity, NvmlSession
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from tests import nic_tree


def _session() -> NvmlSession:
    s = NvmlSession()
    # NVML's spelling: an eight-digit domain, upper case.
    s.gpus = [Gpu(i, None, Identity(i, uuid=f"GPU-{i}",
                                    pci_bus_id="0000" + bdf.upper()))
              for i, bdf in enumerate(nic_tree.GPUS)]
    return s


def _collect(c: NetworkCollector) -> tuple[Snapshot, SnapshotBuilder]:
    out = SnapshotBuilder(0.0)
    c.collect(out)
    return out.build(), out


def test_distances_as_topo_m_prints_them(tmp_path: Path) -> None:
    sys = nic_tree.build(tmp_path / "sys")
    snap, out = _collect(NetworkCollector(_session(), sys))
    distance = {(lb["gpu"], lb["nic"]): (lb["relation"], v)
                for lb, v in snap.series("gpu_nic_distance")}
    assert distance[("0", "mlx5_0")] == ("PIX", 0.0)
    assert distance[("0", "mlx5_1")] == ("NODE", 3.0)
    assert distance[("0", "mlx5_3")] == ("SYS", 4.0)
    assert distance[("7", "mlx5_3")] == ("PIX", 0.0)
    assert len(distance) == 8 * 4
    reading = out.readings.network
    assert reading is not None
    assert reading.gpus[5].nearest == "PIX"
    assert [p.hca for p in reading.gpus[5].own_ports] == ["mlx5_2"]
    assert snap.series("gpu_network_devices_left_out") == [({}, 0.0)]


def test_ports_rate_and_saturation_exported(tmp_path: Path) -> None:
    sys = nic_tree.build(tmp_path / "sys")
    nic_tree.port(sys, "mlx5_1", rate="200 Gb/sec (4X HDR)", state="1: DOWN",
                  phys="2: Polling", counters={"symbol_error": 65535, "link_downed": 3})
    snap, _ = _collect(NetworkCollector(_session(), sys))
    rate = {lb["nic"]: v for lb, v in snap.series("gpu_rdma_port_rate_bytes_per_second")}
    assert rate["mlx5_0"] == 400e9 / 8 and rate["mlx5_1"] == 200e9 / 8
    state = {lb["nic"]: (lb["state"], lb["phys_state"], v)
             for lb, v in snap.series("gpu_rdma_port_state")}
    assert state["mlx5_1"] == ("DOWN", "Polling", 1.0)
    saturated = {(lb["nic"], lb["counter"]): v
                 for lb, v in snap.series("gpu_rdma_port_errors_saturated")}
    assert saturated[("mlx5_1", "symbol_error")] == 1.0
    assert saturated[("mlx5_1", "link_downed")] == 0.0
    assert saturated[("mlx5_0", "symbol_error")] == 0.0
    info = {lb["nic"]: (lb["kind"], lb["pci_bus_id"], lb["numa_node"])
            for lb, _ in snap.series("gpu_nic_info")}
    assert info["mlx5_2"] == ("rdma", "0000:9a:00.0", "1")
    assert info["eno1"] == ("interface", "0000:01:00.0", "0")
    assert "veth1a2b3c" not in info and "bond0" not in info


def test_a_garbled_file_counts_one_error_and_warns_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sys = nic_tree.build(tmp_path / "sys")
    (sys / "class/infiniband/mlx5_0/ports/1/counters/symbol_error").write_text("x\n")
    bad = sys / "class/infiniband/mlx5_0/ports/1/counters/symbol_error"
    c = NetworkCollector(_session(), sys)
    _collect(c)
    assert c.errors() == 1
    # Another garbage each poll is the same file's problem: said once.
    for garbage in ("y\n", "z\n", "-5\n"):
        bad.write_text(garbage)
        _collect(c)
        assert c.errors() == 1
    assert sum("symbol_error" in r.message for r in caplog.records) == 1
    bad.write_text("7\n")
    _collect(c)
    assert c.errors() == 0


def test_a_node_without_rdma_exports_no_distance(tmp_path: Path) -> None:
    sys = nic_tree.build(tmp_path / "sys")
    shutil.rmtree(sys / "class" / "infiniband")
    snap, out = _collect(NetworkCollector(_session(), sys))
    assert snap.series("gpu_nic_distance") == []
    assert out.readings.network is not None
    assert out.readings.network.gpus[0].nearest is None
