"""A GPU's PCI device as the kernel sees it (``<sysfs>/bus/pci/devices/<bdf>``):
its NUMA node and local CPUs, the PCIe link of the GPU and of the bridge or
switch port above it (downtraining often sits upstream), and its AER error
counters."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpu_exporter.host.files import MalformedFile, read_text
from gpu_exporter.host.procs import parse_cpulist

# Transfer rate per lane -> PCIe generation.
_GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}
# The widest PCIe link (x32; a link that is down reads 0), and the highest
# NUMA node id Linux allows (CONFIG_NODES_SHIFT is at most 10; -1: none).
MAX_LANES = 32
MAX_NUMA_NODE = 1023
# What the kernel writes for the speed of a link that is down.
_LINK_DOWN = "Unknown"
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
AER_SEVERITIES = (("correctable", "COR"), ("nonfatal", "NONFATAL"), ("fatal", "FATAL"))


@dataclass(frozen=True, slots=True)
class PcieLink:
    generation: int | None  # None: the kernel says "Unknown" (link down) or has no file
    generation_max: int | None
    width: int | None
    width_max: int | None


@dataclass(frozen=True, slots=True)
class PciPlacement:
    """What stays put while the device is on the bus: where it sits (its sysfs
    directory and the port above), its NUMA node and CPUs, the links' maxima.
    Read once and handed back to read_pci_device(), so a poll reads only what
    moves (current link speed and width, AER counters)."""

    directory: str
    upstream_bdf: str | None
    numa_node: int | None
    local_cpulist: str | None
    local_cpus: frozenset[int] | None
    link_max: tuple[str | None, int | None]  # (max_link_speed text, max_link_width)
    upstream_max: tuple[str | None, int | None]
    problems: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PciDevice:
    bdf: str
    numa_node: int | None  # None: the kernel does not know (-1) or has no NUMA
    local_cpulist: str | None
    local_cpus: frozenset[int] | None
    link: PcieLink | None  # None: no PCIe link attributes (not a PCIe device)
    upstream_bdf: str | None  # the bridge or switch port above; None under a root complex
    upstream: PcieLink | None
    aer: dict[str, int]  # severity -> errors since boot; absent without AER reporting
    # Attributes that exist but could not be read or understood.
    problems: tuple[str, ...] = field(default=())
    placement: PciPlacement | None = None


def link_generation(speed: str) -> int | None:
    """``32.0 GT/s PCIe`` (or ``8 GT/s`` on older kernels) -> 5; None for
    ``Unknown`` or a rate no generation has."""
    value = speed.strip().split(" ", 1)[0]
    try:
        return _GENERATIONS.get(float(value))
    except ValueError:
        return None


class _Reader:
    """Reads one device's attributes, noting problems instead of raising so one
    bad attribute does not hide the others."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def text(self, path: str) -> str | None:
        try:
            return read_text(path).strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.problems.append(f"{path}: {exc.strerror or exc}")
            return None

    def integer(self, path: str, low: int, high: int) -> int | None:
        """An integer attribute within what the kernel can write there."""
        text = self.text(path)
        if text is None:
            return None
        try:
            value = int(text)
        except ValueError:
            self.problems.append(f"{path}: {text[:60]!r} is not an integer")
            return None
        if not low <= value <= high:
            self.problems.append(f"{path}: {value} is outside {low}..{high}")
            return None
        return value

    def maxima(self, directory: str) -> tuple[str | None, int | None]:
        return (self.speed(f"{directory}/max_link_speed"),
                self.integer(f"{directory}/max_link_width", 0, MAX_LANES))

    def speed(self, path: str) -> str | None:
        """A link speed attribute: the kernel's "Unknown" for a link that is
        down, or a rate of a PCIe generation; anything else is a problem."""
        text = self.text(path)
        if text is not None and text != _LINK_DOWN and link_generation(text) is None:
            self.problems.append(f"{path}: {text[:60]!r} is not a PCIe link speed")
            return None
        return text

    def link(self, directory: str, maxima: tuple[str | None, int | None]) -> PcieLink | None:
        speed = self.speed(f"{directory}/current_link_speed")
        width = self.integer(f"{directory}/current_link_width", 0, MAX_LANES)
        speed_max, width_max = maxima
        if speed is None and speed_max is None and width is None and width_max is None:
            return None
        return PcieLink(None if speed is None else link_generation(speed),
                        None if speed_max is None else link_generation(speed_max),
                        width, width_max)

    def aer(self, path: str, tag: str) -> int | None:
        text = self.text(path)
        if text is None:
            return None
        try:
            return aer_total(path, text, tag)
        except MalformedFile as exc:
            self.problems.append(str(exc))
            return None


def aer_total(path: Path | str, text: str, tag: str) -> int:
    """The ``TOTAL_ERR_<tag>`` line of an aer_dev_* file."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == f"TOTAL_ERR_{tag}":
            if not (parts[1].isascii() and parts[1].isdigit()):  # a count: never negative
                raise MalformedFile(path, f"TOTAL_ERR_{tag} {parts[1][:60]!r} is not a count")
            return int(parts[1])
    raise MalformedFile(path, f"no TOTAL_ERR_{tag} count")


def read_placement(sysfs: Path | str, bdf: str) -> PciPlacement | None:
    """Where the device at ``bdf`` sits; None when it is not on the bus."""
    entry = f"{sysfs}/bus/pci/devices/{bdf}"
    if not os.path.exists(entry):
        return None
    # The entry is a symlink into the device tree, whose path holds the
    # bridges and switch ports between the root complex and the device.
    directory = os.path.realpath(entry)
    r = _Reader()
    numa = r.integer(f"{directory}/numa_node", -1, MAX_NUMA_NODE)
    cpulist = r.text(f"{directory}/local_cpulist")
    cpus: frozenset[int] | None = None
    if cpulist is not None:
        try:
            cpus = parse_cpulist(cpulist)
        except ValueError:
            r.problems.append(f"{directory}/local_cpulist: {cpulist!r} is not a CPU list")
            cpulist = None
    parent, _ = os.path.split(directory)
    parent_name = os.path.basename(parent)
    upstream_bdf = parent_name if _BDF.match(parent_name) else None
    return PciPlacement(
        directory=directory, upstream_bdf=upstream_bdf,
        numa_node=None if numa is None or numa < 0 else numa,
        local_cpulist=cpulist, local_cpus=cpus,
        link_max=r.maxima(directory),
        upstream_max=r.maxima(parent) if upstream_bdf else (None, None),
        problems=tuple(r.problems))


def read_pci_device(sysfs: Path | str, bdf: str,
                    placement: PciPlacement | None = None) -> PciDevice | None:
    """The device at ``bdf`` (sysfs spelling, ``0000:18:00.0``); None when it is
    not on the bus (removed, or fell off). ``placement``: what an earlier read
    found (PciDevice.placement), so only the moving attributes are read."""
    # Plain string paths: this runs for every GPU on every poll.
    if placement is None:
        placement = read_placement(sysfs, bdf)
        if placement is None:
            return None
    elif not os.path.exists(f"{sysfs}/bus/pci/devices/{bdf}"):
        return None
    directory = placement.directory
    r = _Reader()
    aer = {}
    for severity, tag in AER_SEVERITIES:
        total = r.aer(f"{directory}/aer_dev_{severity}", tag)
        if total is not None:
            aer[severity] = total
    link = r.link(directory, placement.link_max)
    upstream = (r.link(os.path.dirname(directory), placement.upstream_max)
                if placement.upstream_bdf else None)
    return PciDevice(
        bdf=bdf, numa_node=placement.numa_node,
        local_cpulist=placement.local_cpulist, local_cpus=placement.local_cpus,
        link=link, upstream_bdf=placement.upstream_bdf, upstream=upstream, aer=aer,
        problems=placement.problems + tuple(r.problems), placement=placement)
