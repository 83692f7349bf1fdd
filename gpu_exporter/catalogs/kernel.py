"""Metrics of the kernel log (``/dev/kmsg``): whether the exporter can read it,
what it lost, the NVSwitch driver's SXids and the NIC driver's link, PCIe and
firmware lines. The driver's Xid lines are not
a family of their own: they are counted in ``gpu_xid_errors_total`` with
NVML's events, each Xid once (docs/kernel-log.md says how)."""

from __future__ import annotations

from gpu_exporter.facts.catalog_types import Metric, declared
from gpu_exporter.facts.catalog_types import metric_spec as _m

SOURCE = "kmsg"

EXPORTER_KERNEL_LOG_STATE = _m(
    "gpu_exporter_kernel_log_state", "gauge",
    "1 for the current state of reading the kernel log, 0 for the others: ok, off "
    "(--path.kmsg empty), absent (no such device), unreadable (no CAP_SYSLOG and "
    "kernel.dmesg_restrict=1: Xids before start and each Xid's process are unknown), "
    "error.", ("state",), SOURCE)

EXPORTER_KERNEL_LOG_RECORDS_LOST_TOTAL = _m(
    "gpu_exporter_kernel_log_records_lost_total", "counter",
    "Kernel log records the kernel's ring buffer overwrote before the exporter read them "
    "(from the records' sequence numbers; those before the exporter started count too): "
    "Xids among them are not counted from the log.", (), SOURCE)

EXPORTER_KERNEL_LOG_RECORDS_MALFORMED_TOTAL = _m(
    "gpu_exporter_kernel_log_records_malformed_total", "counter",
    "Kernel log records the exporter skipped as not in /dev/kmsg's record format "
    "(\"prefix,seq,usec,flags;message\"), or longer than a record can be: an Xid line "
    "among them is not counted. Rising on a node: something other than the kernel's ring "
    "is behind --path.kmsg.", (), SOURCE)

EXPORTER_KERNEL_LOG_OVERFLOW_TOTAL = _m(
    "gpu_exporter_kernel_log_overflow_total", "counter",
    "Xid and SXid lines whose (GPU, code, process) found the exporter's table of distinct "
    "keys full (1024): still counted per GPU and code, not kept apart.", (), SOURCE)

NVSWITCH_SXID_ERRORS_TOTAL = _m(
    "gpu_nvswitch_sxid_errors_total", "counter",
    "SXid errors the NVSwitch driver logged since boot, by switch and SXid code, from the "
    "kernel log (fatal: \"true\", \"false\" or \"\" as the line says).",
    ("nvswitch", "pci_bus_id", "sxid", "fatal"), SOURCE)

NIC_KERNEL_EVENTS_TOTAL = _m(
    "gpu_nic_kernel_events_total", "counter",
    "Lines the NIC driver (mlx5_core) logged since boot, by NIC (its PCI address) and "
    "event: link_down and link_up (\"Link down\"), pcie_correctable and "
    "pcie_uncorrectable (the AER driver's \"PCIe Bus Error\" on the NIC), "
    "health_compromised (\"health compromised - reached miss count\": the firmware stopped "
    "answering) and firmware_fatal (\"Fatal error N detected\"). At most 256 (NIC, event) "
    "pairs are kept apart.", ("pci_bus_id", "event"), SOURCE)

METRICS: tuple[Metric, ...] = declared(globals())
