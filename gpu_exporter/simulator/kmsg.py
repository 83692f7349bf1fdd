"""The simulated node's kernel log, as a file in /dev/kmsg's record format
(``PRI,SEQ,USEC,FLAGS;message``, one record a line, continuation lines after
a space), that grows as the scenario's clock moves; and ``/proc/uptime``,
whose clock the records' timestamps are on.

What it holds: a few boot lines; every Xid NVML delivers (``world.events``),
logged as the driver logs it, preceded by ``NVRM: GPU at PCI:...: GPU-<uuid>``
before a GPU's first; and the scenario's ``kernel_log`` lines (Xids NVML never
delivers, from before the exporter started or with the process the driver
names; SXids; floods; lines user space wrote). The exporter reads the file as
it would /dev/kmsg (``--path.kmsg``); the reader treats a regular file as a
stream of records that grows.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from pathlib import Path

from gpu_exporter.simulator.gpu_state import bus_id
from gpu_exporter.simulator.hostfs import boot_uptime
from gpu_exporter.simulator.model import KernelLogLine, Scenario
from gpu_exporter.simulator.world import World

# Kernel log levels (syslog severities) the driver logs at.
KERN_ERR, KERN_WARNING, KERN_INFO = 3, 4, 6
_ESCAPED = frozenset(range(0x20)) | {0x5C, 0x7F}


def escape(message: str) -> str:
    """The message as /dev/kmsg gives it: non-printable bytes and ``\\`` as ``\\xNN``."""
    out = bytearray()
    for b in message.encode("utf-8", errors="replace"):
        if b in _ESCAPED:
            out += b"\\x%02x" % b
        else:
            out.append(b)
    return out.decode("utf-8", errors="replace")


def driver_bus(index: int) -> str:
    """GPU ``index``'s bus id as the driver writes it in its log: ``0000:18:00``."""
    domain, bus, device = bus_id(index).split(".")[0].split(":")
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}"


def xid_message(gpu: int, code: int, pid: int | None = None, name: str = "",
                detail: str = "", link: int | None = None) -> str:
    """An Xid line in the format of the driver branches the simulator emulates
    (R470 and newer print the process, or ``'<unknown>'``); an Xid 74 with a
    ``link`` names it as the driver does."""
    who = (f"pid={pid}, name={name or '<unknown>'}" if pid is not None
           else "pid='<unknown>', name=<unknown>")
    if not detail and link is not None:
        detail = (f"NVLink: fatal error detected on link {link}"
                  "(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")
    return f"NVRM: Xid (PCI:{driver_bus(gpu)}): {code}, {who}, {detail or 'Ch 00000008'}"


class KernelLogFile:
    """Writes ``root/dev/kmsg`` and ``procfs/uptime`` up to the world's time."""

    def __init__(self, world: World, scenario: Scenario, root: Path, procfs: Path) -> None:
        self.world = world
        self.path = root / "dev" / "kmsg"
        self._uptime = procfs / "uptime"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_bytes(b"")
        self._boot = boot_uptime(scenario.host.uptime_s)
        self._seq = scenario.kernel_log.lost
        self._events = 0  # world.events logged so far
        self._announced: set[int] = set()  # GPUs whose UUID line is logged
        lines = sorted(scenario.kernel_log.lines, key=lambda line: line.at)
        boot = [(-self._boot + 0.5, KERN_INFO, 0, "Linux version 6.8.0-45-generic "
                 "(buildd@lcy02-amd64-115) #45-Ubuntu SMP PREEMPT_DYNAMIC"),
                (-self._boot + 4.2, KERN_INFO, 0, "NVRM: loading NVIDIA UNIX x86_64 Kernel "
                 f"Module  {scenario.node.driver_version}")]
        self._pending: Iterator[tuple[float, int, int, str]] = heapq.merge(
            boot, self._expand(lines), key=lambda item: item[0])
        self._next: tuple[float, int, int, str] | None = next(self._pending, None)

    @staticmethod
    def _expand(lines: list[KernelLogLine]) -> Iterator[tuple[float, int, int, str]]:
        """(time, level, facility, message) of each line, in time order."""
        def one(line: KernelLogLine) -> Iterator[tuple[float, int, int, str]]:
            if line.message is not None:
                bus = driver_bus(line.gpu) if line.gpu is not None else ""
                message = line.message.replace("{bus}", bus)
            else:
                assert line.xid is not None and line.gpu is not None
                message = xid_message(line.gpu, line.xid, line.pid, line.name, line.detail,
                                      line.link)
            for k in range(line.repeat):
                yield line.at + k * 0.001, KERN_WARNING, line.facility, message
        return heapq.merge(*(one(line) for line in lines), key=lambda item: item[0])

    def render(self, t: float) -> None:
        """Append every record logged up to ``t`` (scenario seconds)."""
        out: list[str] = []
        while self._next is not None and self._next[0] <= t:
            at, level, facility, message = self._next
            self._logged_events(at, out)
            out.append(self._record(at, level, facility, message))
            self._next = next(self._pending, None)
        self._logged_events(t, out)
        if out:
            with open(self.path, "a") as f:
                f.write("".join(out))
        self._uptime.parent.mkdir(parents=True, exist_ok=True)
        self._uptime.write_text(f"{self._boot + t:.2f} {(self._boot + t) * 7.5:.2f}\n")

    def _logged_events(self, until: float, out: list[str]) -> None:
        """The Xids NVML delivers (or would: those at the start are before
        anyone registered), as the driver logs them, up to ``until``."""
        events = self.world.events
        while self._events < len(events) and events[self._events][0] <= until:
            at, gpu, code = events[self._events]
            self._events += 1
            if gpu not in self._announced:
                self._announced.add(gpu)
                out.append(self._record(at, KERN_WARNING, 0, f"NVRM: GPU at PCI:"
                                        f"{driver_bus(gpu)}: {self.world.state(gpu).uuid}"))
            level = KERN_ERR if code == 79 else KERN_WARNING
            # The driver names the process it attributes the error to, where it knows one.
            who = self.world.xid_process(at, gpu, code)
            pid, name = who if who is not None else (None, "")
            link = next((e.link for e in self.world.xid_log
                         if (e.t, e.gpu, e.xid) == (at, gpu, code) and e.link is not None), None)
            out.append(self._record(at, level, 0, xid_message(gpu, code, pid, name, link=link)))

    def _record(self, at: float, level: int, facility: int, message: str) -> str:
        usec = max(0, round((self._boot + at) * 1e6))
        seq, self._seq = self._seq, self._seq + 1
        return f"{facility * 8 + level},{seq},{usec},-;{escape(message)}\n"

