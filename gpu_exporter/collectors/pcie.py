"""PCIe and NUMA from the kernel: for each GPU, matched by PCI bus id in sysfs,
its NUMA node and local CPUs, the link generation and width of the GPU and of
the bridge or switch port above it, and AER error counters. On a host with udev
a watcher thread turns a GPU's ``remove`` event into ``gpu_up 0`` at once."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Self

from gpu_exporter.catalogs import pcie as m
from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.collectors.udev import EventSource, UdevWatcher, open_source
from gpu_exporter.host.pci import PciDevice, PcieLink, PciPlacement, read_pci_device
from gpu_exporter.nvml.session import NvmlSession, normalize_bus_id
from gpu_exporter.poll.readings import PcieKernelView
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import SnapshotBuilder

log = logging.getLogger(__name__)

# Where a GPU sits (topology, NUMA node, CPUs, link maxima) is read again this
# often, and at once after it left the bus or a udev event: it changes only
# when the device is re-enumerated, and reading it costs half the collector.
PLACEMENT_REFRESH_POLLS = 60


def _add_link(out: SnapshotBuilder, labels: dict[str, str], port: str, link: PcieLink) -> None:
    for metric, value in ((m.PCIE_SYSFS_LINK_GENERATION, link.generation),
                          (m.PCIE_SYSFS_LINK_GENERATION_MAX, link.generation_max),
                          (m.PCIE_SYSFS_LINK_WIDTH, link.width),
                          (m.PCIE_SYSFS_LINK_WIDTH_MAX, link.width_max)):
        if value is not None:
            out.add(metric, value, **labels, port=port)


def kernel_view(dev: PciDevice) -> PcieKernelView:
    """The figures the diagnosis rules and the baseline read."""
    up = dev.upstream
    return PcieKernelView(
        numa_node=dev.numa_node, local_cpulist=dev.local_cpulist,
        upstream_generation=up.generation if up else None,
        upstream_generation_max=up.generation_max if up else None,
        upstream_width=up.width if up else None,
        upstream_width_max=up.width_max if up else None,
        aer_correctable=dev.aer.get("correctable"))


class PcieCollector(NvmlCollector):
    name = "pcie"
    description = ("PCIe links (GPU and upstream port), AER errors and NUMA from sysfs; udev "
                   "remove events")
    settings = (lambda s: s.path.sysfs,)

    def __init__(self, session: NvmlSession, sysfs: Path,
                 udev: EventSource | None = None) -> None:
        super().__init__(session)
        self.sysfs = sysfs
        self.watcher: UdevWatcher | None = None
        if udev is not None:
            self.watcher = UdevWatcher(session, udev)
            self.watcher.start()
        self._warned: set[str] = set()
        self._placements: dict[str, PciPlacement] = {}
        self._polls = 0
        self._udev_seen = 0

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        sysfs = rt.settings.path.sysfs
        return cls(rt.session, sysfs, open_source(sysfs) if rt.watch_udev else None)

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        self._polls += 1
        events = sum(self.watcher.counts().values()) if self.watcher is not None else 0
        if self._polls % PLACEMENT_REFRESH_POLLS == 0 or events != self._udev_seen:
            self._placements.clear()
            self._udev_seen = events
        devices: dict[int, PciDevice] = {}
        for gpu in self.session.gpus:
            if not gpu.identity.pci_bus_id:
                continue  # identity never read: nothing to match in sysfs
            bdf = normalize_bus_id(gpu.identity.pci_bus_id)
            dev = read_pci_device(self.sysfs, bdf, self._placements.get(bdf))
            if dev is None:
                self._placements.pop(bdf, None)
                continue  # not on the bus (removed); gpu_up says the rest
            if dev.placement is not None:
                self._placements[bdf] = dev.placement
            devices[gpu.index] = dev
            self._note_problems(dev)
            labels = {"gpu": str(gpu.index), "uuid": gpu.identity.uuid}
            out.add(m.NUMA_INFO, 1, **labels,
                    numa_node="-1" if dev.numa_node is None else str(dev.numa_node),
                    local_cpulist=dev.local_cpulist or "")
            if dev.link is not None:
                _add_link(out, labels, "gpu", dev.link)
            if dev.upstream is not None:
                _add_link(out, labels, "upstream", dev.upstream)
            for severity, total in dev.aer.items():
                out.add(m.PCIE_AER_ERRORS_TOTAL, total, **labels, severity=severity)
        if self.watcher is not None:
            for action, count in self.watcher.counts().items():
                out.add(m.UDEV_EVENTS_TOTAL, count, action=action)
        out.readings.pcie = devices
        out.readings.pcie_view = {i: kernel_view(d) for i, d in devices.items()}

    def _note_problems(self, dev: PciDevice) -> None:
        self._errors += len(dev.problems)
        for problem in dev.problems:
            if problem not in self._warned:
                self._warned.add(problem)
                log.warning("sysfs: %s", problem)
