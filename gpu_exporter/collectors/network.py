"""The network beside the GPUs, from sysfs: the node's NICs and RDMA ports
(state, rate, error counters, saturated counters) and each GPU's distance to
each RDMA device as ``nvidia-smi topo -m`` names it. The diagnosis reads
``readings.network``: a GPU far from its nearest RDMA device, its ports
down, trained low or counting errors.

What NCCL was told to use (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) is not read: it
is in the job's environment, and reading another process's environment
(/proc/<pid>/environ) needs privilege the exporter does not take.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Self

from gpu_exporter.catalogs import network as m
from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.host.nic_topology import DISTANCE, relation
from gpu_exporter.host.nics import NetworkView, PciLocation, Places, pci_location, read_network
from gpu_exporter.nvml.session import NvmlSession, normalize_bus_id
from gpu_exporter.poll.readings import GpuNetwork, NetworkReading
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import SnapshotBuilder

log = logging.getLogger(__name__)

# Where a GPU sits moves only when it is re-enumerated: read again this often.
PLACEMENT_REFRESH_POLLS = 60
_BITS_PER_BYTE = 8
# Files whose problem was said: the NICs' and ports' attribute files, a few
# dozen per device, within the caps of host/nics.py.
MAX_WARNED = 4096


class NetworkCollector(NvmlCollector):
    name = "network"
    description = ("NICs and RDMA ports from sysfs (state, rate, error counters) and each "
                   "GPU's PCIe distance to each RDMA device")
    settings = (lambda s: s.path.sysfs,)

    def __init__(self, session: NvmlSession, sysfs: Path) -> None:
        super().__init__(session)
        self.sysfs = sysfs
        self._root = str(sysfs)
        self._warned: set[str] = set()
        self._places: dict[str, PciLocation | None] = {}
        # The NICs' own places: kept until their set changes, and refreshed
        # with the GPUs' (a device re-created under the same name).
        self._nic_places = Places()
        self._polls = 0

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        return cls(rt.session, rt.settings.path.sysfs)

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        self._polls += 1
        if self._polls % PLACEMENT_REFRESH_POLLS == 0:
            self._places.clear()
            self._nic_places.clear()
        view = read_network(self._root, places=self._nic_places)
        self._note(view.problems)
        self._export(out, view)
        hcas = {p.hca: p.pci for p in view.ports if p.pci is not None}
        gpus: dict[int, GpuNetwork] = {}
        for gpu in self.session.gpus:
            if not gpu.identity.pci_bus_id:
                continue
            where = self._place(normalize_bus_id(gpu.identity.pci_bus_id))
            if where is None:
                continue
            relations = {}
            for hca, nic in hcas.items():
                rel = relation(where, nic)
                if rel is None:
                    continue
                relations[hca] = rel
                out.add(m.GPU_NIC_DISTANCE, DISTANCE[rel], gpu=str(gpu.index),
                        uuid=gpu.identity.uuid, nic=hca, relation=rel)
            gpus[gpu.index] = GpuNetwork(view.ports, relations)
        out.readings.network = NetworkReading(view, gpus)

    def _place(self, bdf: str) -> PciLocation | None:
        """Where the GPU sits, kept until the next refresh; a GPU not on the
        bus (a VM's passthrough, another root) is kept as such, unless what
        was in the way was a problem, which is noted again each poll."""
        if bdf in self._places:
            return self._places[bdf]
        where, problems = pci_location(self._root, bdf)
        self._note(problems)
        if not problems:
            self._places[bdf] = where
        return where

    def _export(self, out: SnapshotBuilder, view: NetworkView) -> None:
        for nic in view.interfaces:
            if nic.pci is not None:
                out.add(m.NIC_INFO, 1, nic=nic.name, kind="interface", pci_bus_id=nic.pci.bdf,
                        numa_node=_numa(nic.pci))
            out.add(m.NIC_UP, nic.operstate == "up" and nic.carrier is not False,
                    nic=nic.name, operstate=nic.operstate)
            if nic.speed_mbps is not None:
                out.add(m.NIC_SPEED_BYTES, nic.speed_mbps * 1e6 / _BITS_PER_BYTE, nic=nic.name)
        seen: set[str] = set()
        for port in view.ports:
            if port.pci is not None and port.hca not in seen:
                seen.add(port.hca)
                out.add(m.NIC_INFO, 1, nic=port.hca, kind="rdma", pci_bus_id=port.pci.bdf,
                        numa_node=_numa(port.pci))
            labels = {"nic": port.hca, "port": str(port.port)}
            if port.state is not None:
                out.add(m.RDMA_PORT_STATE, port.state, **labels, state=port.state_name,
                        phys_state=port.phys_state_name, link_layer=port.link_layer)
            if port.rate_gbps is not None:
                out.add(m.RDMA_PORT_RATE_BYTES, port.rate_gbps * 1e9 / _BITS_PER_BYTE, **labels)
            for counter, value in port.counters.items():
                out.add(m.RDMA_PORT_ERRORS_TOTAL, value, **labels, counter=counter)
                out.add(m.RDMA_PORT_ERRORS_SATURATED, counter in port.saturated, **labels,
                        counter=counter)
            for counter, value in port.hw_counters.items():
                out.add(m.RDMA_PORT_HW_COUNTER_TOTAL, value, **labels, counter=counter)
        out.add(m.NETWORK_DEVICES_LEFT_OUT, view.left_out)

    def _note(self, problems: tuple[str, ...]) -> None:
        """Count each problem; say it once per file (a problem begins with its
        file's path, and what follows can change every poll)."""
        self._errors += len(problems)
        for problem in problems:
            path = problem.split(": ", 1)[0]
            if path not in self._warned:
                if len(self._warned) >= MAX_WARNED:
                    self._warned.clear()  # said again, at worst, never grown without bound
                self._warned.add(path)
                log.warning("sysfs: %s", problem)


def _numa(where: PciLocation) -> str:
    return "-1" if where.numa_node is None else str(where.numa_node)
