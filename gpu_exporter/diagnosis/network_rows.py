"""The rows of the network beside the GPU: a GPU whose nearest RDMA device is
across the sockets, the ports of its nearest RDMA device down or trained low,
and errors climbing on them. ``table.py`` lists them in the table; their
rules are in ``network_rules.py``. A GPU's own ports are those of the RDMA
device nearest it (its rail: NCCL pairs each GPU with its nearest NIC). On a
node with no RDMA device the rows have nothing to judge and stay silent."""

from __future__ import annotations

from gpu_exporter.catalogs import network
from gpu_exporter.diagnosis.row import Row

_OWNER = "Owner: the platform and network team."

NIC_ACROSS_SOCKETS = Row(
    "network_placement", "nic_across_sockets", "warning",
    "The GPU's nearest RDMA NIC is on the other socket",
    "The node has RDMA devices (InfiniBand or RoCE), and the nearest of them to the GPU is "
    "across the sockets (SYS in nvidia-smi topo -m, told from the PCI paths in sysfs): its "
    "GPUDirect RDMA traffic crosses the CPUs' interconnect, slower than through a NIC "
    "behind the GPU's own PCIe switch, and NCCL may switch GPUDirect off for it.",
    "Put a NIC in a slot of the GPU's socket (or the GPU in a slot beside a NIC), or check "
    "that the NIC near it is not disabled in the BIOS or unbound from its driver; until "
    "then schedule jobs on the GPUs near a NIC. " + _OWNER,
    ("nvidia-smi topo -m", "ls -l /sys/class/infiniband/*/device"),
    "Escalate to the platform team: the slot layout is the hardware's.",
    reads=(network.GPU_NIC_DISTANCE,))

RDMA_PORT_DEGRADED = Row(
    "network_degraded", "rdma_port", "warning",
    "A port of the GPU's nearest RDMA NIC is down or trained below its peers",
    "A port of the RDMA device nearest the GPU is not ACTIVE while the same port of "
    "another RDMA device of the node is, or is ACTIVE at a rate below the fastest active "
    "port of its link layer on the node (a cable or transceiver trained at a lower speed, "
    "lanes lost). The GPU's collectives then go out through a far NIC, or at the slow "
    "port's rate.",
    "Check the named port's cable and transceiver (reseat, then replace) and the switch "
    "port it lands on; a port the subnet manager left in INIT or ARMED needs the fabric's "
    "subnet manager. " + _OWNER,
    ("ibstat", "ibv_devinfo -v", "cat /sys/class/infiniband/*/ports/*/rate"),
    "Escalate to the network team when the port stays down or slow after a reseat.",
    reads=(network.RDMA_PORT_STATE, network.RDMA_PORT_RATE_BYTES), boot_grace=True)

RDMA_ERRORS = Row(
    "network_errors", "rdma_link_integrity", "warning",
    "Errors are climbing on a port of the GPU's nearest RDMA NIC",
    "On a port of the RDMA device nearest the GPU, {rdma_errors_per_window} or more symbol "
    "errors, link-downed events, link error recoveries, local link integrity errors or "
    "receive errors within the diagnosis window ({window}): traffic lost and resent, or "
    "the link retrained. These counters are 4 to 16 bits wide and stop at their maximum: "
    "one stopped there is named, not read as a rate.",
    "Reseat or replace the cable and transceiver of the named port and check the switch "
    "port; clear the counters (perfquery -x -R) to see whether they climb again. " + _OWNER,
    ("perfquery -x", "ibqueryerrors", "mlxlink -d <device> -c"),
    "Escalate to the network team when the errors climb again after a reseat.",
    reads=(network.RDMA_PORT_ERRORS_TOTAL, network.RDMA_PORT_ERRORS_SATURATED), boot_grace=True)
