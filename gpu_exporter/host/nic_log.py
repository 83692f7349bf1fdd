"""What the NIC driver (mlx5_core, NVIDIA ConnectX) said in the kernel log:
links going down and up, PCIe errors the AER driver reported on the NIC, and
firmware health faults. The lines as the driver prints them:

- ``mlx5_core 0000:1a:00.0 ibp26s0: Link down`` (netdev_info of en_main.c);
- ``mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health
  compromised - reached miss count`` and ``... Fatal error 1 detected``
  (mlx5_core_err of health.c: function, line, pid, then the message);
- ``mlx5_core 0000:1a:00.0: PCIe Bus Error: severity=Corrected, type=Physical
  Layer, (Receiver ID)`` (the AER driver's line, printed for the device).

Counted per (NIC, event) within a fixed number of keys, as driver_log.py
counts Xids: a flood of one line costs one key."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Events the exporter counts (the ``event`` label's values).
EVENTS = ("link_down", "link_up", "pcie_correctable", "pcie_uncorrectable",
          "health_compromised", "firmware_fatal")
MAX_KEYS = 256

_LINE = re.compile(r"^mlx5_core (?P<bdf>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])"
                   r"(?: (?P<netdev>[A-Za-z0-9_.@-]{1,15}))?: (?P<rest>.{1,512})$")
# mlx5_core_err's prefix: the function, its line and the pid.
_WHERE = re.compile(r"^[A-Za-z0-9_]{1,64}:\d{1,6}:\(pid \d{1,8}\): ")
_FATAL = re.compile(r"^Fatal error \d{1,10} detected$")
_AER = re.compile(r"^PCIe Bus Error: severity=(?P<severity>[A-Za-z() -]{1,40}), ")


@dataclass(frozen=True, slots=True)
class NicLine:
    bdf: str
    event: str


def parse_nic_line(message: str) -> NicLine | None:
    """The event a kernel log message of mlx5_core reports; None for any other."""
    match = _LINE.match(message)
    if match is None:
        return None
    bdf, rest = match.group("bdf"), match.group("rest").rstrip()
    if match.group("netdev") is not None:
        if rest == "Link down":
            return NicLine(bdf, "link_down")
        if rest == "Link up":
            return NicLine(bdf, "link_up")
        return None
    aer = _AER.match(rest)
    if aer is not None:
        corrected = aer.group("severity") == "Corrected"
        return NicLine(bdf, "pcie_correctable" if corrected else "pcie_uncorrectable")
    where = _WHERE.match(rest)
    if where is None:
        return None
    said = rest[where.end():]
    if said.endswith("health compromised - reached miss count"):
        return NicLine(bdf, "health_compromised")
    if _FATAL.match(said):
        return NicLine(bdf, "firmware_fatal")
    return None


@dataclass(slots=True)
class NicLog:
    """Lines per (NIC's PCI address, event), at most ``max_keys`` keys; the
    lines of any further key are counted in ``overflow``."""

    max_keys: int = MAX_KEYS
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    overflow: int = 0

    def add(self, message: str) -> NicLine | None:
        line = parse_nic_line(message)
        if line is None:
            return None
        key = (line.bdf, line.event)
        if key in self.counts:
            self.counts[key] += 1
        elif len(self.counts) < self.max_keys:
            self.counts[key] = 1
        else:
            self.overflow += 1
        return line
