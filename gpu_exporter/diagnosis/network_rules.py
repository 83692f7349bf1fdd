"""The rules of the network rows (network_rows.py), registered on their rows
as rules.py registers its own.

A GPU's own ports are those of the RDMA device nearest it. A port is judged
down only while the same port of another RDMA device of the node is ACTIVE:
a node whose ports are all down is one not cabled to a fabric (or a fabric
down), which no row of a GPU can blame on its NIC. An error counter stopped
at its maximum cannot show a rate: it is named in the evidence and left out
of the verdict, never read as a reset or a burst."""

from __future__ import annotations

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.registry import Evidence, Trend, Verdict, rule
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.settings.thresholds import DiagnosisConfig

# The PortCounters that say the link itself loses or retrains.
ERROR_COUNTERS = ("symbol_error", "link_downed", "link_error_recovery",
                  "local_link_integrity_errors", "port_rcv_errors")


def _placement(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    net = s.network
    if net is None or net.nearest is None:
        return Verdict(None)  # no RDMA device, or none whose distance sysfs tells
    nearest = net.nearest
    devices = ", ".join(sorted(h for h, r in net.relations.items() if r == nearest))
    ev: Evidence = {"nearest_rdma_devices": devices, "nearest_relation": nearest}
    return Verdict(nearest == "SYS", ev)


rule(t.NIC_ACROSS_SOCKETS)(_placement)


def _port(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    net = s.network
    if net is None:
        return Verdict(None)
    own = net.own_ports
    if not own:
        return Verdict(None)
    failing: list[str] = []
    judged = False
    for port in own:
        if port.state is None:
            continue
        peers = [p for p in net.ports if p.hca != port.hca and p.active
                 and p.link_layer == port.link_layer]
        if not port.active:
            if any(p.port == port.port for p in peers):
                judged = True
                failing.append(f"{port.label} {port.state_name} ({port.phys_state_name or '?'})")
            continue
        judged = True
        best = max((p.rate_gbps for p in peers if p.rate_gbps is not None), default=None)
        if port.rate_gbps is not None and best is not None and port.rate_gbps < best:
            failing.append(f"{port.label} at {port.rate_gbps:g} Gb/s, peers at {best:g} Gb/s")
    if not judged:
        return Verdict(None, {"rdma_ports": "no port of the node is ACTIVE to compare with"})
    return Verdict(bool(failing), {"rdma_ports_degraded": "; ".join(failing) or "none"})


rule(t.RDMA_PORT_DEGRADED)(_port)


def _errors(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    net = s.network
    if net is None:
        return Verdict(None)
    own = net.own_ports
    if not own:
        return Verdict(None)
    ev: Evidence = {}
    failing: list[str] = []
    pinned: list[str] = []
    judged = False
    for port in own:
        rises: dict[str, float] = {}
        for kind in ERROR_COUNTERS:
            value = port.counters.get(kind)
            if value is None:
                continue
            if kind in port.saturated:
                pinned.append(f"{port.label} ({kind})")
                continue
            rise = trend.increase(f"rdma_{port.hca}_{port.port}_{kind}", float(value))
            if rise is not None:
                rises[kind] = rise
        if not rises:
            continue
        judged = True
        total = sum(rises.values())
        # An error-free port never fails, whatever the threshold says.
        if total and total >= cfg.rdma_errors_per_window:
            failing.append(f"{port.label} (" + ", ".join(
                f"{kind} {rise:g}" for kind, rise in rises.items() if rise) + ")")
    if pinned:
        ev["rdma_counters_at_maximum"] = ", ".join(pinned)
    if not judged:
        return Verdict(None, ev)
    ev["rdma_failing_ports"] = ", ".join(failing) or "none"
    return Verdict(bool(failing), ev)


rule(t.RDMA_ERRORS)(_errors)
