"""The node's network devices beside the GPUs, from sysfs: each physical
network interface (``class/net/<if>``: operstate, carrier, speed) and each
RDMA port (``class/infiniband/<hca>/ports/<n>``: state, physical state, rate,
error counters), with the PCI path and NUMA node of the device behind it, so
each GPU's distance to each NIC can be told (nic_topology.py).

The port counters are the InfiniBand PortCounters of the kernel's
drivers/infiniband/core/sysfs.c, each as wide as its field in the PMA
attribute (4, 8, 16 or 32 bits). By the InfiniBand specification such a
counter stops at its maximum instead of wrapping: a counter at its maximum is
reported as saturated (it can rise no more, so no rate can be read from it),
never as a reset or a burst.

Every attribute is read within a small bound (files.read_small); one that
cannot be read or understood is noted in ``problems`` and left out, and the
other attributes are still read.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpu_exporter.host.files import MalformedFile, read_small
from gpu_exporter.host.network import is_counted

# The most NICs and RDMA ports read (and so exported, each a label value):
# a node has a few to a dozen; past the cap the first ones by name are kept
# and the rest counted in NetworkView.left_out.
MAX_NICS = 32
MAX_PORTS_PER_HCA = 4
MAX_NUMA_NODE = 1023

# Width in bits of each error counter's PMA field (drivers/infiniband/core/
# sysfs.c, PORT_PMA_ATTR): the value each one stops at is 2**bits - 1.
COUNTER_BITS: dict[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
    "port_xmit_wait": 32,
}
# The driver's own 64-bit counters (hw_counters/, mlx5's names) that say a
# RoCE or InfiniBand link is losing or resending traffic. A named set, so the
# label's values stay bounded whatever the driver adds.
HW_COUNTERS = ("out_of_buffer", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err",
               "rnr_nak_retry_err", "implied_nak_seq_err", "duplicate_request",
               "roce_adp_retrans", "np_cnp_sent", "rp_cnp_handled")
_MAX_COUNT = 2**64 - 1

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
# "4: ACTIVE", "5: LinkUp", "7: Phy Test"
_STATE = re.compile(r"^(\d{1,2}): ([A-Za-z_ ]{1,32})$")
# "400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)", "25 Gb/sec (1X EDR)"
_RATE = re.compile(r"^(\d{1,5}(?:\.\d{1,3})?) Gb/sec(?: \(.{0,32}\))?$")
ACTIVE = 4  # the port state IB_PORT_ACTIVE
LINK_UP = 5  # the physical state "LinkUp"
_OPERSTATES = frozenset({"up", "down", "unknown", "notpresent", "lowerlayerdown", "testing",
                         "dormant"})


@dataclass(frozen=True, slots=True)
class PciLocation:
    """Where a PCI device sits: its host bridge (``pci0000:17``), the bridges
    and switch ports from there down, then the device itself."""

    bdf: str
    path: tuple[str, ...]
    numa_node: int | None  # None: the kernel does not know (-1)

    @property
    def host_bridge(self) -> str:
        return self.path[0]


@dataclass(frozen=True, slots=True)
class NetInterface:
    name: str
    operstate: str
    carrier: bool | None  # None: not readable (the interface is administratively down)
    speed_mbps: int | None  # None: unknown (down, or the driver does not say)
    pci: PciLocation | None


@dataclass(frozen=True, slots=True)
class RdmaPort:
    hca: str
    port: int
    state: int | None  # 4: ACTIVE
    state_name: str
    phys_state: int | None  # 5: LinkUp
    phys_state_name: str
    rate_gbps: float | None
    link_layer: str  # "InfiniBand" or "Ethernet" (RoCE); "" when not said
    counters: dict[str, int]
    saturated: frozenset[str]  # the counters stopped at their maximum
    hw_counters: dict[str, int]
    pci: PciLocation | None

    @property
    def label(self) -> str:
        return f"{self.hca}/{self.port}"

    @property
    def active(self) -> bool:
        return self.state == ACTIVE


@dataclass(frozen=True, slots=True)
class NetworkView:
    interfaces: tuple[NetInterface, ...] = ()
    ports: tuple[RdmaPort, ...] = ()
    left_out: int = 0  # NICs or RDMA devices past MAX_NICS, not read
    problems: tuple[str, ...] = field(default=())


class Places:
    """Where each NIC and RDMA device sits on the PCI bus, kept between polls:
    resolving a ``device`` link walks every directory on its path (a dozen
    lstat calls per device, most of a poll's cost), and a device moves only
    when it comes or goes. What was found under a directory is forgotten
    whenever that directory's entries change (hotplug, a driver re-creating
    its devices), and by ``clear()``. A link that could not be resolved
    cleanly is not kept: its problem is noted again each poll."""

    def __init__(self) -> None:
        # A device link -> where it leads (None: no PCI device behind it).
        self.found: dict[str, PciLocation | None] = {}
        self._entries: dict[str, list[str]] = {}

    def entries(self, directory: str, names: list[str]) -> None:
        """The entries ``directory`` has this poll."""
        if self._entries.get(directory) == names:
            return
        self._entries[directory] = names
        inside = directory + "/"
        for link in [link for link in self.found if link.startswith(inside)]:
            del self.found[link]

    def clear(self) -> None:
        self.found.clear()
        self._entries.clear()


class _Notes:
    """Reads attributes, noting what cannot be read instead of raising, so one
    bad file hides nothing else."""

    def __init__(self, places: Places | None = None) -> None:
        self.problems: list[str] = []
        self.places = places

    def text(self, path: str) -> str | None:
        try:
            return read_small(path)
        except FileNotFoundError:
            return None
        except MalformedFile as exc:
            self.problems.append(str(exc))
            return None
        except OSError as exc:
            # EINVAL is how a down link answers speed and carrier: unknown, no fault.
            if exc.errno != errno.EINVAL:
                self.problems.append(f"{path}: {exc.strerror or exc}")
            return None

    def count(self, path: str, high: int = _MAX_COUNT) -> int | None:
        text = self.text(path)
        if text is None:
            return None
        if not (text.isascii() and text.isdigit()) or int(text) > high:
            self.problems.append(f"{path}: {text[:60]!r} is not a count")
            return None
        return int(text)

    def state(self, path: str) -> tuple[int | None, str]:
        text = self.text(path)
        if text is None:
            return None, ""
        match = _STATE.match(text)
        if match is None:
            self.problems.append(f"{path}: {text[:60]!r} is not a port state")
            return None, ""
        return int(match.group(1)), match.group(2)

    def rate(self, path: str) -> float | None:
        text = self.text(path)
        if text is None:
            return None
        match = _RATE.match(text)
        if match is None:
            self.problems.append(f"{path}: {text[:60]!r} is not a port rate")
            return None
        return float(match.group(1))

    def location(self, sysfs: str, link: str) -> PciLocation | None:
        """The PCI device a ``device`` link (or a bus entry) points at; None
        for one that is not a PCI device (a virtual or platform device)."""
        places = self.places
        if places is None:
            return self._resolve(sysfs, link)
        if link in places.found:
            return places.found[link]
        noted = len(self.problems)
        where = self._resolve(sysfs, link)
        if len(self.problems) == noted:
            places.found[link] = where
        return where

    def _resolve(self, sysfs: str, link: str) -> PciLocation | None:
        try:
            target = os.path.realpath(link, strict=True)
        except FileNotFoundError:
            return None
        except OSError as exc:  # a symlink loop
            self.problems.append(f"{link}: {exc.strerror or exc}")
            return None
        devices = os.path.realpath(f"{sysfs}/devices")
        if not target.startswith(devices + "/"):
            return None
        path = tuple(target[len(devices) + 1:].split("/"))
        if (len(path) < 2 or not _HOST_BRIDGE.match(path[0])
                or not all(_BDF.match(part) for part in path[1:])):
            return None  # not under a PCI host bridge: no PCIe distance to tell
        return PciLocation(path[-1], path, self._numa(target))

    def _numa(self, directory: str) -> int | None:
        text = self.text(f"{directory}/numa_node")
        if text is None or text == "-1":
            return None
        if not (text.isascii() and text.isdigit()) or int(text) > MAX_NUMA_NODE:
            self.problems.append(f"{directory}/numa_node: {text[:60]!r} is not a NUMA node")
            return None
        return int(text)


def pci_location(sysfs: Path | str, bdf: str) -> tuple[PciLocation | None, tuple[str, ...]]:
    """Where the PCI device ``bdf`` sits (a GPU, by the bus id NVML gives),
    and what could not be read; None when it is not on the bus."""
    notes = _Notes()
    where = notes.location(str(sysfs), f"{sysfs}/bus/pci/devices/{bdf}")
    return where, tuple(notes.problems)


def _names(directory: str, notes: _Notes, devices: bool = False) -> list[str] | None:
    """The entries of ``directory`` with names a device can have; ``devices``:
    the directory lists devices whose places are kept (notes.places)."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return None
    except OSError as exc:
        notes.problems.append(f"{directory}: {exc.strerror or exc}")
        return []
    if devices and notes.places is not None:
        notes.places.entries(directory, names)
    bad = [n for n in names if not _NAME.match(n)]
    if bad:
        notes.problems.append(f"{directory}: {len(bad)} entries with names no device has")
    return [n for n in names if _NAME.match(n)]


def _interface(sysfs: str, name: str, notes: _Notes) -> NetInterface | None:
    base = f"{sysfs}/class/net/{name}"
    pci = notes.location(sysfs, f"{base}/device")
    if pci is None:
        return None  # no PCI device behind it: a virtual interface
    operstate = notes.text(f"{base}/operstate") or "unknown"
    if operstate not in _OPERSTATES:
        notes.problems.append(f"{base}/operstate: {operstate[:60]!r} is not an operstate")
        operstate = "unknown"
    carrier = notes.count(f"{base}/carrier", 1)
    speed_text = notes.text(f"{base}/speed")
    speed: int | None = None
    # A down link reads -1 (or 4294967295 from older drivers): unknown.
    if speed_text is not None and speed_text not in ("-1", "4294967295"):
        if speed_text.isascii() and speed_text.isdigit() and int(speed_text) <= 10**7:
            speed = int(speed_text) or None
        else:
            notes.problems.append(f"{base}/speed: {speed_text[:60]!r} is not a speed")
    return NetInterface(name, operstate, None if carrier is None else bool(carrier), speed, pci)


def read_interfaces(sysfs: Path | str, max_nics: int = MAX_NICS, places: Places | None = None
                    ) -> tuple[list[NetInterface], int, list[str]]:
    """The physical network interfaces (those with a PCI device behind them,
    virtual ones left out as network.py leaves them out), the count past
    ``max_nics``, and the problems met. FileNotFoundError without class/net."""
    notes = _Notes(places)
    names = _names(f"{sysfs}/class/net", notes, devices=True)
    if names is None:
        raise FileNotFoundError(f"{sysfs}/class/net")
    found = []
    for name in names:
        if not is_counted(name):
            continue
        nic = _interface(str(sysfs), name, notes)
        if nic is not None:
            found.append(nic)
    return found[:max_nics], max(0, len(found) - max_nics), notes.problems


def _port(sysfs: str, hca: str, number: int, pci: PciLocation | None,
          notes: _Notes) -> RdmaPort:
    base = f"{sysfs}/class/infiniband/{hca}/ports/{number}"
    state, state_name = notes.state(f"{base}/state")
    phys, phys_name = notes.state(f"{base}/phys_state")
    counters: dict[str, int] = {}
    saturated = set()
    for name, bits in COUNTER_BITS.items():
        value = notes.count(f"{base}/counters/{name}")
        if value is None:
            continue
        counters[name] = value
        if value == 2**bits - 1:
            saturated.add(name)
    hw = {}
    for name in HW_COUNTERS:
        value = notes.count(f"{base}/hw_counters/{name}")
        if value is not None:
            hw[name] = value
    layer = notes.text(f"{base}/link_layer") or ""
    if layer not in ("", "InfiniBand", "Ethernet"):
        notes.problems.append(f"{base}/link_layer: {layer[:60]!r} is not a link layer")
        layer = ""
    return RdmaPort(hca, number, state, state_name, phys, phys_name,
                    notes.rate(f"{base}/rate"), layer, counters, frozenset(saturated), hw, pci)


def read_rdma_ports(sysfs: Path | str, max_hcas: int = MAX_NICS, places: Places | None = None
                    ) -> tuple[list[RdmaPort], int, list[str]]:
    """Every port of every RDMA device (InfiniBand, RoCE), the count of devices
    past ``max_hcas``, and the problems met; an empty list on a node with no
    RDMA device (no class/infiniband)."""
    notes = _Notes(places)
    root = f"{sysfs}/class/infiniband"
    hcas = _names(root, notes, devices=True)
    if hcas is None:
        return [], 0, notes.problems
    ports = []
    for hca in hcas[:max_hcas]:
        pci = notes.location(str(sysfs), f"{root}/{hca}/device")
        numbers = _names(f"{root}/{hca}/ports", notes) or []
        valid = sorted(int(n) for n in numbers if n.isascii() and n.isdigit() and len(n) < 4)
        for number in valid[:MAX_PORTS_PER_HCA]:
            ports.append(_port(str(sysfs), hca, number, pci, notes))
    return ports, max(0, len(hcas) - max_hcas), notes.problems


def read_network(sysfs: Path | str, max_nics: int = MAX_NICS,
                 places: Places | None = None) -> NetworkView:
    """The NICs and RDMA ports of the node (FileNotFoundError without
    class/net: no sysfs there). ``places``: where the devices sit, kept
    between calls."""
    interfaces, nics_over, problems = read_interfaces(sysfs, max_nics, places)
    ports, hcas_over, port_problems = read_rdma_ports(sysfs, max_nics, places)
    return NetworkView(tuple(interfaces), tuple(ports), nics_over + hcas_over,
                       # A NIC's netdev and its RDMA device share one PCI device.
                       tuple(dict.fromkeys(problems + port_problems)))
