"""Metrics of the network beside the GPUs (sysfs): the node's NICs and RDMA
ports, their state, rate and error counters, and each GPU's distance to each
RDMA device. The NIC and RDMA device labels are bounded: at most
host/nics.MAX_NICS of each (the first by name), the rest counted in
gpu_network_devices_left_out."""

from __future__ import annotations

from gpu_exporter.facts.catalog_types import GPU, Bounds, Metric, declared
from gpu_exporter.facts.catalog_types import metric_spec as _m

_PORT = ("nic", "port")
_COUNT = Bounds(0.0, 2.0**64)

NIC_INFO = _m(
    "gpu_nic_info", "gauge",
    "A physical network interface (nic: its name) or RDMA device (nic: the HCA, mlx5_0) "
    "with the PCI device behind it and that device's NUMA node (-1: the kernel does not "
    "know), from sysfs (value 1). Virtual interfaces (containers, bridges, bonds) are left "
    "out.", ("nic", "kind", "pci_bus_id", "numa_node"), "network")

NIC_UP = _m(
    "gpu_nic_up", "gauge",
    "1 when the network interface is up with a carrier (operstate up in sysfs), 0 "
    "otherwise.", ("nic", "operstate"), "network")

NIC_SPEED_BYTES = _m(
    "gpu_nic_speed_bytes_per_second", "gauge",
    "Speed the network interface's link runs at (speed in sysfs, in bytes per second); "
    "absent while the link is down.", ("nic",), "network",
    bounds=Bounds(0.0, 2.0**50))

RDMA_PORT_STATE = _m(
    "gpu_rdma_port_state", "gauge",
    "The RDMA port's logical state as the kernel numbers it (state in sysfs: 1 DOWN, 2 "
    "INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER), with its name and its physical state's "
    "(phys_state: LinkUp, Polling, Disabled).",
    (*_PORT, "state", "phys_state", "link_layer"), "network")

RDMA_PORT_RATE_BYTES = _m(
    "gpu_rdma_port_rate_bytes_per_second", "gauge",
    "Rate the RDMA port's link trained to (rate in sysfs, 400 Gb/sec (4X NDR)), in bytes "
    "per second.", _PORT, "network",
    bounds=Bounds(0.0, 2.0**50))

RDMA_PORT_ERRORS_TOTAL = _m(
    "gpu_rdma_port_errors_total", "counter",
    "The RDMA port's InfiniBand PortCounters (counters/ in sysfs: symbol_error, link_downed, "
    "link_error_recovery, port_rcv_errors, port_xmit_discards, port_xmit_wait...) since the "
    "driver loaded. Each is 4 to 32 bits wide and stops at its maximum instead of wrapping: "
    "see gpu_rdma_port_errors_saturated.", (*_PORT, "counter"), "network",
    bounds=_COUNT)

RDMA_PORT_ERRORS_SATURATED = _m(
    "gpu_rdma_port_errors_saturated", "gauge",
    "1 when the port counter stands at the maximum of its field (65535 for a 16-bit one) "
    "and can rise no more: its rate reads 0 whatever happens on the link until the counter "
    "is cleared (perfquery -x -R); 0 while it still counts.", (*_PORT, "counter"),
    "network")

RDMA_PORT_HW_COUNTER_TOTAL = _m(
    "gpu_rdma_port_hw_counter_total", "counter",
    "The driver's own 64-bit counters of the RDMA port (hw_counters/ in sysfs) that say a "
    "link loses or resends traffic: out_of_buffer, out_of_sequence, packet_seq_err, "
    "local_ack_timeout_err, rnr_nak_retry_err, implied_nak_seq_err, duplicate_request, "
    "roce_adp_retrans, np_cnp_sent, rp_cnp_handled; only those the driver has.",
    (*_PORT, "counter"), "network",
    bounds=_COUNT)

GPU_NIC_DISTANCE = _m(
    "gpu_nic_distance", "gauge",
    "How far the GPU is from the RDMA device, as nvidia-smi topo -m names it (relation) "
    "and as a number, nearest first: 0 PIX (one PCIe switch), 1 PXB (several bridges), 2 "
    "PHB (the host bridge), 3 NODE (another host bridge of the NUMA node), 4 SYS (across "
    "the sockets). Told from the PCI paths in sysfs.", (*GPU, "nic", "relation"), "network")

NETWORK_DEVICES_LEFT_OUT = _m(
    "gpu_network_devices_left_out", "gauge",
    "Network interfaces and RDMA devices past the exporter's cap (32 of each, the first "
    "by name), neither read nor exported.", (), "network")

METRICS: tuple[Metric, ...] = declared(globals())
