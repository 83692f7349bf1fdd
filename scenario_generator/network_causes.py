"""The causes of the network beside the GPU a case can inject, and a
confounder: the target GPU's nearest RDMA device (its rail) losing traffic,
down or trained slow, or a counter that stopped at its maximum long ago.
``causes.py`` lists them with the others."""

from __future__ import annotations

from typing import Any

from scenario_generator.node import NodeBuilder
from scenario_generator.truth import Expected


def _rails(b: NodeBuilder) -> list[dict[str, Any]]:
    """One InfiniBand HCA behind each GPU's PCIe switch (the simulator's
    default node), written out so a cause can change one of them, and a
    spare on a host bridge of its own: a port is judged against its peers,
    and a one-GPU node has one rail."""
    rails = b.host.get("rdma")
    if rails is None:
        rails = b.host["rdma"] = [{"name": f"mlx5_{i}", "beside_gpu": i}
                                  for i in range(min(b.count, 8))]
        rails.append({"name": "mlx5_9", "numa_node": 0})
    return rails


def rdma_link_integrity(b: NodeBuilder) -> list[Expected]:
    """The target's nearest HCA counts symbol errors (and sometimes receive
    errors or link downs) every few seconds: a dirty fibre."""
    rail = _rails(b)[b.target]
    rail["errors_per_s"] = {"symbol_error": round(b.u(1.0, 20.0), 2)}
    if b.rng.random() < 0.5:
        rail["errors_per_s"]["port_rcv_errors"] = round(b.u(0.5, 5.0), 2)
    return [Expected(b.target, "rdma_link_integrity", b.owners())]


def rdma_port(b: NodeBuilder) -> list[Expected]:
    """The target's nearest HCA's port is down, or trained at half its peers'
    rate."""
    rail = _rails(b)[b.target]
    if b.rng.random() < 0.5:
        rail["state"] = "DOWN"
    else:
        rail["rate_gbps"] = b.rng.choice([100.0, 200.0])
    return [Expected(b.target, "rdma_port", b.owners())]


def saturated_symbol_errors(b: NodeBuilder) -> list[Expected]:
    """A confounder: the target's HCA counted symbol errors long ago until its
    16-bit counter stopped at 65535; it rises no more, so nothing climbs."""
    _rails(b)[b.target]["counters"] = {"symbol_error": 65535}
    return []
