"""How far a GPU is from a NIC, in the words ``nvidia-smi topo -m`` uses,
told from the two devices' PCI paths in sysfs (nics.PciLocation):

- PIX: through at most one PCIe bridge: both below the same PCIe switch
  (its upstream port, then one downstream port each), or functions of one
  device;
- PXB: through several PCIe bridges, without the host bridge (nested
  switches);
- PHB: through a PCIe host bridge (the same root complex, no switch shared);
- NODE: between host bridges within one NUMA node;
- SYS: across the interconnect between NUMA nodes (sockets).

Traffic between a GPU and a NIC that are SYS apart crosses the sockets'
interconnect: GPUDirect RDMA is slow there or switched off by NCCL.
"""

from __future__ import annotations

from gpu_exporter.host.nics import PciLocation

# Nearest first: the index is the distance the metric exports.
RELATIONS: tuple[str, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS")
DISTANCE: dict[str, int] = {name: i for i, name in enumerate(RELATIONS)}


def relation(gpu: PciLocation, nic: PciLocation) -> str | None:
    """The relation of the two devices; None when it cannot be told (the
    host bridges differ and a NUMA node is known for only one of them)."""
    if gpu.host_bridge != nic.host_bridge:
        if gpu.numa_node is None and nic.numa_node is None:
            # The kernel knows no NUMA node for either: a node without NUMA,
            # where every host bridge hangs off the one CPU.
            return "NODE"
        if gpu.numa_node is None or nic.numa_node is None:
            return None
        return "NODE" if gpu.numa_node == nic.numa_node else "SYS"
    # Bridges below the host bridge, down to (not including) each device.
    gpu_bridges, nic_bridges = gpu.path[1:-1], nic.path[1:-1]
    shared = 0
    for mine, theirs in zip(gpu_bridges, nic_bridges, strict=False):
        if mine != theirs:
            break
        shared += 1
    if shared == 0:
        return "PHB"  # below different root ports: through the host bridge
    # Below the deepest shared bridge: one switch is its downstream port and
    # the device (two levels), a device on the shared bridge's own link one.
    below = max(len(gpu_bridges), len(nic_bridges)) - shared
    return "PIX" if below <= 1 else "PXB"


def nearest(gpu: PciLocation, nics: dict[str, PciLocation]) -> tuple[str, str] | None:
    """The nearest of ``nics`` (name -> location) and its relation; ties go
    to the first name."""
    best: tuple[int, str, str] | None = None
    for name in sorted(nics):
        rel = relation(gpu, nics[name])
        if rel is None:
            continue
        candidate = (DISTANCE[rel], name, rel)
        if best is None or candidate[0] < best[0]:
            best = candidate
    return None if best is None else (best[1], best[2])
