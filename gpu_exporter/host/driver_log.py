"""What the NVIDIA driver said in the kernel log since boot, deduplicated and
bounded whatever the flood.

Xids are kept per (GPU bus id, code, pid, NVLink) with a count and the first and last
time seen, SXids per (switch, bus id, code); the totals per (bus id, code) are
kept apart, split into the Xids logged before the exporter started and those
after. One node logged 800,000 lines of Xid 95 with 29 distinct (GPU, code,
pid) among them (NVIDIA/NVSentinel#1120): the table holds at most
``MAX_KEYS`` keys and counts the lines of any further key in ``overflow``, so
memory stays flat however many lines come. Identical messages (what a flood
is made of) are parsed once.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_exporter.host.kmsg import KERNEL_FACILITY, Record
from gpu_exporter.host.nic_log import NicLog
from gpu_exporter.host.nvrm import DriverLine, GpuUuidLine, SxidLine, XidLine, parse_line

# Distinct (GPU, code, pid) and (switch, code) keys kept; a node sees a few
# dozen. Beyond it lines are counted in ``overflow`` (and still in the totals
# per GPU and code while those have room).
MAX_KEYS = 1024
# (GPU, code) totals kept: 64 GPUs with 16 codes each.
MAX_TOTALS = 1024
# GPU bus ids whose UUID the driver printed.
MAX_UUIDS = 256
# Parsed messages remembered (a flood repeats one message).
_CACHE = 256


@dataclass(slots=True)
class XidEntry:
    """One (GPU, code, pid, link) as the kernel log has it."""

    bus: str
    code: int
    pid: int | None
    process: str  # as the driver printed it first
    count: int
    first_usec: int
    last_usec: int
    before_start: int  # of count, logged before the exporter started
    link: int | None = None  # the NVLink an Xid 74 names (bounded: host/nvrm.py)


@dataclass(slots=True)
class SxidEntry:
    switch: str
    bus: str
    code: int
    fatal: bool | None
    count: int
    first_usec: int
    last_usec: int


@dataclass(slots=True)
class XidTotal:
    before_start: int = 0
    live: int = 0


class DriverLog:
    """Feed it records (:meth:`add`) as they are read; :meth:`mark_started`
    once the log as it stood at start has been read."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self.max_keys = max_keys
        self.xids: dict[tuple[str, int, int | None, int | None], XidEntry] = {}
        self.sxids: dict[tuple[str, str, int], SxidEntry] = {}
        self.totals: dict[tuple[str, int], XidTotal] = {}
        self.uuids: dict[str, str] = {}
        self.started = False
        self.records = 0  # records seen
        self.overflow = 0  # lines whose key found the table full
        # The NIC driver's link, PCIe and firmware lines (nic_log.py).
        self.nics = NicLog()
        self._cache: dict[str, DriverLine | None] = {}

    def mark_started(self) -> None:
        self.started = True

    def add(self, record: Record) -> XidEntry | None:
        """Count one record; the Xid entry it created (the first line of its
        key), so the caller can look up its process while it may still run."""
        self.records += 1
        if record.facility != KERNEL_FACILITY:
            return None
        if record.message.startswith("mlx5_core "):
            self.nics.add(record.message)
            return None
        line = self._parse(record.message)
        if line is None:
            return None
        if isinstance(line, XidLine):
            return self._xid(line, record.usec)
        if isinstance(line, SxidLine):
            self._sxid(line, record.usec)
        elif isinstance(line, GpuUuidLine) and (
                line.bus in self.uuids or len(self.uuids) < MAX_UUIDS):
            self.uuids[line.bus] = line.uuid
        return None

    def _parse(self, message: str) -> DriverLine | None:
        try:
            return self._cache[message]
        except KeyError:
            pass
        # (most of the log is not the driver's: parse_line refuses it by its
        # first characters)
        line = parse_line(message)
        if len(self._cache) >= _CACHE:
            self._cache.clear()
        self._cache[message] = line
        return line

    def _xid(self, line: XidLine, usec: int) -> XidEntry | None:
        before = not self.started
        total_key = (line.bus, line.code)
        total = self.totals.get(total_key)
        if total is None and len(self.totals) < MAX_TOTALS:
            total = self.totals[total_key] = XidTotal()
        if total is not None:
            if before:
                total.before_start += 1
            else:
                total.live += 1
        key = (line.bus, line.code, line.pid, line.link)
        entry = self.xids.get(key)
        if entry is not None:
            entry.count += 1
            entry.before_start += before
            entry.first_usec = min(entry.first_usec, usec)
            entry.last_usec = max(entry.last_usec, usec)
            return None
        if len(self.xids) >= self.max_keys:
            self.overflow += 1
            return None
        entry = self.xids[key] = XidEntry(line.bus, line.code, line.pid, line.process, 1,
                                          usec, usec, int(before), line.link)
        return entry

    def _sxid(self, line: SxidLine, usec: int) -> None:
        key = (line.switch, line.bus, line.code)
        entry = self.sxids.get(key)
        if entry is not None:
            entry.count += 1
            entry.last_usec = max(entry.last_usec, usec)
            return
        if len(self.sxids) >= self.max_keys:
            self.overflow += 1
            return
        self.sxids[key] = SxidEntry(line.switch, line.bus, line.code, line.fatal, 1, usec, usec)
