"""The network rows: a GPU whose nearest RDMA device is across the sockets,
its nearest device's ports down or trained below their peers, and errors
climbing on them; counters stopped at their maximum named and not read; all
silent on a node with no RDMA. The rows on the collector's own reading of
a two-socket node (tests/nic_tree.py) as well as on hand-built ports."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpu_exporter.collectors.network import NetworkCollector
from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.coverage import KIND_OF, Kind, Why, answer
from gpu_exporter.diagnosis.registry import Trend, Verdict
from gpu_exporter.diagnosis.rules import RULES
from gpu_exporter.host.nics import PciLocation, RdmaPort
from gpu_exporter.nvml.session import Gpu, Identity, NvmlSession
from gpu_exporter.poll.readings import GpuNetwork
from gpu_exporter.poll.snapshot import SnapshotBuilder
from gpu_exporter.settings.thresholds import DiagnosisConfig
from gpu_exporter.simulator.model import Scenario
from tests import nic_tree
from tests.rule_signals import CFG, signals, verdict
from tests.simnode import SimRun


def _port(hca: str, state: int = 4, rate: float = 400.0, number: int = 1,
          counters: dict[str, int] | None = None, saturated: frozenset[str] = frozenset(),
          layer: str = "InfiniBand") -> RdmaPort:
    names = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE"}
    return RdmaPort(hca, number, state, names[state], 5 if state == 4 else 3,
                    "LinkUp" if state == 4 else "Disabled", rate, layer,
                    counters or {}, saturated, {}, PciLocation("0000:1a:00.0",
                                                               ("pci0000:17", "0000:1a:00.0"),
                                                               0))


def _net(*ports: RdmaPort, relations: dict[str, str] | None = None) -> GpuNetwork:
    rel = relations or {"mlx5_0": "PIX", **{p.hca: "SYS" for p in ports if p.hca != "mlx5_0"}}
    return GpuNetwork(ports, rel)


def _judge(row: t.Row, net: GpuNetwork | None, increases: dict[str, float] | None = None,
           cfg: DiagnosisConfig = CFG) -> Verdict:
    return verdict(row, signals(network=net), cfg, increases)


# --- placement -----------------------------------------------------------------
def test_nearest_rdma_across_the_sockets_holds() -> None:
    net = _net(_port("mlx5_2"), _port("mlx5_3"), relations={"mlx5_2": "SYS", "mlx5_3": "SYS"})
    got = _judge(t.NIC_ACROSS_SOCKETS, net)
    assert got.holds is True
    assert got.evidence == {"nearest_rdma_devices": "mlx5_2, mlx5_3", "nearest_relation": "SYS"}


@pytest.mark.parametrize("nearest", ["PIX", "PXB", "PHB", "NODE"])
def test_a_nic_on_the_gpus_socket_clears_it(nearest: str) -> None:
    net = _net(_port("mlx5_0"), _port("mlx5_2"), relations={"mlx5_0": nearest, "mlx5_2": "SYS"})
    assert _judge(t.NIC_ACROSS_SOCKETS, net).holds is False


@pytest.mark.parametrize("row", [t.NIC_ACROSS_SOCKETS, t.RDMA_PORT_DEGRADED, t.RDMA_ERRORS])
def test_silent_without_rdma(row: t.Row) -> None:
    assert _judge(row, None).holds is None  # the reader did not run
    assert _judge(row, GpuNetwork((), {})).holds is None  # no RDMA device on the node
    assert KIND_OF[Why.NO_RDMA] is Kind.NO_SUBJECT


# --- ports down or slow ----------------------------------------------------------
def test_own_port_down_while_its_peers_are_up_holds() -> None:
    net = _net(_port("mlx5_0", state=1), _port("mlx5_1"), _port("mlx5_2"))
    got = _judge(t.RDMA_PORT_DEGRADED, net)
    assert got.holds is True
    assert got.evidence == {"rdma_ports_degraded": "mlx5_0/1 DOWN (Disabled)"}


def test_another_gpus_port_down_is_not_this_gpus() -> None:
    net = _net(_port("mlx5_0"), _port("mlx5_1", state=1))
    assert _judge(t.RDMA_PORT_DEGRADED, net).holds is False


def test_every_port_down_is_no_fabric_not_a_nic_to_blame() -> None:
    net = _net(_port("mlx5_0", state=1), _port("mlx5_1", state=1))
    assert _judge(t.RDMA_PORT_DEGRADED, net).holds is None


def test_an_unused_second_port_is_not_down_for_want_of_a_peer() -> None:
    # Port 2 of a dual-port HCA with no cable, while no other device's port 2 is up.
    net = _net(_port("mlx5_0"), _port("mlx5_0", state=1, number=2), _port("mlx5_1"))
    assert _judge(t.RDMA_PORT_DEGRADED, net).holds is False


def test_own_port_trained_below_its_peers_holds() -> None:
    net = _net(_port("mlx5_0", rate=200.0), _port("mlx5_1"), _port("mlx5_2"))
    got = _judge(t.RDMA_PORT_DEGRADED, net)
    assert got.holds is True
    assert got.evidence == {"rdma_ports_degraded": "mlx5_0/1 at 200 Gb/s, peers at 400 Gb/s"}


def test_a_slower_port_of_another_link_layer_is_no_peer() -> None:
    # A 100 Gb/s RoCE port beside 400 Gb/s InfiniBand ones is a different network.
    net = _net(_port("mlx5_0", rate=100.0, layer="Ethernet"), _port("mlx5_1"),
               _port("mlx5_4", rate=100.0, layer="Ethernet"))
    assert _judge(t.RDMA_PORT_DEGRADED, net).holds is False


# --- errors climbing -------------------------------------------------------------
_COUNTS = {"symbol_error": 40, "link_downed": 2, "port_rcv_errors": 7}


def test_errors_climbing_over_the_window_hold_and_are_named() -> None:
    net = _net(_port("mlx5_0", counters=_COUNTS), _port("mlx5_1", counters=_COUNTS))
    got = _judge(t.RDMA_ERRORS, net, {"rdma_mlx5_0_1_symbol_error": 8.0,
                                      "rdma_mlx5_0_1_link_downed": 2.0,
                                      # the other GPU's port: not this GPU's
                                      "rdma_mlx5_1_1_symbol_error": 500.0})
    assert got.holds is True
    assert got.evidence == {"rdma_failing_ports": "mlx5_0/1 (symbol_error 8, link_downed 2)"}


def test_errors_below_the_threshold_or_standing_still_clear() -> None:
    net = _net(_port("mlx5_0", counters=_COUNTS))
    assert _judge(t.RDMA_ERRORS, net, {"rdma_mlx5_0_1_symbol_error": 9.0}).holds is False
    # Counts since the driver loaded are history, not errors climbing now.
    assert _judge(t.RDMA_ERRORS, net).evidence == {"rdma_failing_ports": "none"}


def test_the_threshold_is_the_configured_one_and_zero_errors_never_fail() -> None:
    net = _net(_port("mlx5_0", counters=_COUNTS))
    strict = CFG.model_copy(update={"rdma_errors_per_window": 0.0})
    assert _judge(t.RDMA_ERRORS, net, cfg=strict).holds is False
    assert _judge(t.RDMA_ERRORS, net, {"rdma_mlx5_0_1_port_rcv_errors": 1.0},
                  cfg=strict).holds is True


def test_a_saturated_counter_is_named_and_not_read_as_a_rate() -> None:
    # symbol_error stands at 65535: it rises no more, so no increase is asked of it.
    port = _port("mlx5_0", counters={"symbol_error": 65535, "link_downed": 2},
                 saturated=frozenset({"symbol_error"}))
    asked: list[str] = []
    sig = signals(network=_net(port))

    def increase(name: str, value: float | None) -> float | None:
        asked.append(name)
        return 0.0

    got = RULES[t.RDMA_ERRORS](sig, CFG, Trend(increase, 0.0))
    assert asked == ["rdma_mlx5_0_1_link_downed"]
    assert got.holds is False
    assert got.evidence["rdma_counters_at_maximum"] == "mlx5_0/1 (symbol_error)"
    # Every counter saturated: nothing to judge, and said.
    only = replace(port, counters={"symbol_error": 65535})
    got = _judge(t.RDMA_ERRORS, _net(only))
    assert got.holds is None and "symbol_error" in str(got.evidence["rdma_counters_at_maximum"])


# --- on the collector's reading of a two-socket node ------------------------------------
def _reading(sys: Path, gpus: list[str]) -> dict[int, GpuNetwork]:
    s = NvmlSession()
    s.gpus = [Gpu(i, None, Identity(i, uuid=f"GPU-{i}", pci_bus_id="0000" + bdf.upper()))
              for i, bdf in enumerate(gpus)]
    out = SnapshotBuilder(0.0)
    NetworkCollector(s, sys).collect(out)
    assert out.readings.network is not None
    return out.readings.network.gpus


def test_on_the_node_a_gpu_whose_socket_lost_its_hcas(tmp_path: Path) -> None:
    sys = nic_tree.build(tmp_path / "sys")
    # Socket 0's HCAs unbound from their driver: gone from class/infiniband.
    for hca in ("mlx5_0", "mlx5_1"):
        (sys / "class" / "infiniband" / hca / "device").unlink()
        for f in sorted((sys / "class" / "infiniband" / hca).rglob("*"), reverse=True):
            f.rmdir() if f.is_dir() else f.unlink()
        (sys / "class" / "infiniband" / hca).rmdir()
    gpus = _reading(sys, nic_tree.GPUS)
    assert _judge(t.NIC_ACROSS_SOCKETS, gpus[0]).holds is True
    assert _judge(t.NIC_ACROSS_SOCKETS, gpus[7]).holds is False


def test_on_the_node_a_port_down_blames_its_own_gpus_only(tmp_path: Path) -> None:
    sys = nic_tree.build(tmp_path / "sys")
    nic_tree.port(sys, "mlx5_2", state="1: DOWN", phys="3: Disabled")
    gpus = _reading(sys, nic_tree.GPUS)
    held = [i for i in range(8) if _judge(t.RDMA_PORT_DEGRADED, gpus[i]).holds]
    assert held == [4, 5]


# --- on the simulated node -------------------------------------------------------
def _coverage(rdma: list[dict[str, object]]) -> dict[str, list[tuple[str, ...]]]:
    sc = Scenario(name="rdma-coverage", node={"gpus": 2},
                  state={"utilization": 0.9, "memory_used_ratio": 0.5},
                  host={"cpus": 32, "numa_nodes": 1, "uptime_s": 86400, "rdma": rdma})
    with SimRun(sc) as run:
        cov = answer(run.poll(40.0, interval=2.0))
    rows = {t.NIC_ACROSS_SOCKETS.key, t.RDMA_PORT_DEGRADED.key, t.RDMA_ERRORS.key}
    return {section: [(g["reason"], *sorted(rows & set(g["checks"]))) for g in cov[section]
                      if rows & set(g["checks"])]
            for section in ("not_checked", "not_available", "nothing_to_check")}


def test_a_node_without_rdma_has_nothing_to_check_and_says_nccl_is_not_read() -> None:
    got = _coverage([])
    assert got["not_checked"] == [] and got["not_available"] == []
    [(reason, *rows)] = got["nothing_to_check"]
    assert len(rows) == 3
    assert "no RDMA port near this GPU" in reason
    assert "NCCL_IB_HCA" in reason and "not read" in reason


def test_a_node_with_its_rails_judges_every_row() -> None:
    got = _coverage([{"name": "mlx5_0", "beside_gpu": 0}, {"name": "mlx5_1", "beside_gpu": 1}])
    assert got == {"not_checked": [], "not_available": [], "nothing_to_check": []}


def test_a_simulated_counter_stops_at_the_top_of_its_field() -> None:
    sc = Scenario(name="rdma-saturates", node={"gpus": 1},
                  host={"rdma": [{"name": "mlx5_0", "beside_gpu": 0,
                                  "counters": {"symbol_error": 65500, "link_downed": 250},
                                  "errors_per_s": {"symbol_error": 10.0, "link_downed": 1.0}}]})
    with SimRun(sc) as run:
        snap = run.poll(20.0)
    errors = {lb["counter"]: v for lb, v in snap.series("gpu_rdma_port_errors_total")}
    saturated = {lb["counter"]: v for lb, v in snap.series("gpu_rdma_port_errors_saturated")}
    assert errors["symbol_error"] == 65535 and saturated["symbol_error"] == 1.0
    assert errors["link_downed"] == 255 and saturated["link_downed"] == 1.0
    assert saturated["port_rcv_errors"] == 0.0
