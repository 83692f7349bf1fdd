"""Metrics of the kernel's view of each GPU's PCI device (sysfs) and of udev's
add/remove events."""

from __future__ import annotations

from gpu_exporter.facts.catalog_types import GPU, Metric, declared
from gpu_exporter.facts.catalog_types import metric_spec as _m

NUMA_INFO = _m(
    "gpu_numa_info", "gauge",
    "The GPU's NUMA node (-1 when the kernel does not know) and the CPUs local to it, from "
    "sysfs (value 1). Processes feeding the GPU run best on these CPUs.",
    (*GPU, "numa_node", "local_cpulist"), "pcie")

PCIE_SYSFS_LINK_GENERATION = _m(
    "gpu_pcie_sysfs_link_generation", "gauge",
    "PCIe generation the link runs at as the kernel reports it (current_link_speed in "
    "sysfs), for the GPU (port=gpu) and for the bridge or switch port above it "
    "(port=upstream).", (*GPU, "port"), "pcie",
    detail=True)

PCIE_SYSFS_LINK_GENERATION_MAX = _m(
    "gpu_pcie_sysfs_link_generation_max", "gauge",
    "Highest PCIe generation the port supports (max_link_speed in sysfs), for the GPU and "
    "the port above it.", (*GPU, "port"), "pcie",
    detail=True)

PCIE_SYSFS_LINK_WIDTH = _m(
    "gpu_pcie_sysfs_link_width", "gauge",
    "PCIe lanes the link runs with as the kernel reports it (current_link_width in sysfs), "
    "for the GPU and the port above it.", (*GPU, "port"), "pcie",
    detail=True)

PCIE_SYSFS_LINK_WIDTH_MAX = _m(
    "gpu_pcie_sysfs_link_width_max", "gauge",
    "Most PCIe lanes the port supports (max_link_width in sysfs), for the GPU and the port "
    "above it.", (*GPU, "port"), "pcie",
    detail=True)

PCIE_AER_ERRORS_TOTAL = _m(
    "gpu_pcie_aer_errors_total", "counter",
    "PCIe Advanced Error Reporting errors the kernel counted for the GPU since boot, by "
    "severity (correctable, nonfatal, fatal), from aer_dev_* in sysfs.",
    (*GPU, "severity"), "pcie")

UDEV_EVENTS_TOTAL = _m(
    "gpu_udev_events_total", "counter",
    "udev add and remove events for the GPUs' PCI devices since the exporter started; a "
    "remove marks the GPU lost at once.", ("action",), "pcie")

METRICS: tuple[Metric, ...] = declared(globals())
