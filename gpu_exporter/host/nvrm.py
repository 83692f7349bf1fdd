"""The NVIDIA driver's lines in the kernel log: Xids (``NVRM: Xid``), the
NVSwitch driver's SXids, and the line that names a GPU's UUID.

The formats, as the driver branches print them (public samples are cited in
``tests/fixtures/kmsg/README.md``):

- before pids were printed (R3xx, R4xx): ``NVRM: Xid (0000:01:00): 13, 0005 ...``
  and ``NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.``;
- since about R460: ``NVRM: Xid (PCI:0000:18:00): 13, pid=1234, name=python3,
  Graphics SM Warp Exception ...``, with ``pid='<unknown>', name=<unknown>``
  where no process is to blame;
- GB200 and other multi-domain boards: the same with a PCI domain other than 0
  (``PCI:0018:01:00``);
- Xid 74 (an NVLink error) names its link: ``NVRM: Xid (PCI:0000:3b:00): 74,
  pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link
  14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)`` (``Fatal`` on some branches);
- ``NVRM: GPU at PCI:0000:01:00: GPU-<uuid>``, printed before a GPU's first Xid;
- ``nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 ...``
  (codes below 10000 printed with leading zeros).

The bus id in an Xid line has no function number (the GPU's is .0); it is
kept as ``DDDD:BB:DD`` in lower case and matched with NVML's
``DDDDDDDD:BB:DD.F`` by :func:`bus_key`. Every pattern is anchored at the start of
the message and ASCII-only; a process name is at most 64 characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BUS = r"(?P<bus>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
_XID = re.compile(rf"NVRM: Xid \((?:PCI:)?{_BUS}(?:\.[0-7])?\): (?P<code>\d{{1,5}}),(?P<rest>.*)\Z",
                  re.ASCII | re.DOTALL)
# The process the driver blames, right after the code. A name is the task's
# comm (15 characters on Linux) but is taken up to the next ", " or the end.
_WHO = re.compile(r" pid=(?:(?P<pid>\d{1,10})|'<unknown>'), name=(?P<name>.{0,64}?)(?:, |\Z)",
                  re.ASCII | re.DOTALL)
_UUID_LINE = re.compile(rf"NVRM: GPU at PCI:{_BUS}: (?P<uuid>GPU-[0-9a-fA-F-]{{36}})\Z",
                        re.ASCII)
_SXID = re.compile(
    r"nvidia-nvswitch(?P<switch>\d{1,3}): SXid \(PCI:(?P<bus>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:"
    r"[0-9a-fA-F]{2}\.[0-7])\): (?P<code>\d{1,6}), (?P<rest>.*)\Z", re.ASCII | re.DOTALL)
_UNKNOWN_NAME = "<unknown>"
# The NVLink an Xid 74 line names. A GPU has at most 18 links (Hopper) or 36
# (newer boards); a number of 64 or more is no link of a GPU, and a line that
# claims one names none.
NVLINK_XID = 74
MAX_LINKS = 64
_NVLINK = re.compile(r"NVLink: (?:[Ff]atal |[Nn]on-?[Ff]atal )?[Ee]rror detected on link "
                     r"(?P<link>\d{1,3})(?!\d)", re.ASCII)


@dataclass(frozen=True, slots=True)
class XidLine:
    bus: str  # "0000:18:00"
    code: int
    pid: int | None  # None: not printed, or '<unknown>'
    process: str  # the name printed; "" when none
    link: int | None = None  # the NVLink an Xid 74 names (0..63); None otherwise


@dataclass(frozen=True, slots=True)
class SxidLine:
    switch: str  # "nvidia-nvswitch3"
    bus: str  # "0000:05:00.0"
    code: int
    fatal: bool | None  # from "Fatal" / "Non-fatal"; None when not said


@dataclass(frozen=True, slots=True)
class GpuUuidLine:
    bus: str
    uuid: str


DriverLine = XidLine | SxidLine | GpuUuidLine


def parse_line(message: str) -> DriverLine | None:
    """What a kernel log message says, if it is one of the driver's lines above."""
    if message.startswith("NVRM: Xid"):
        return _xid(message)
    if message.startswith("NVRM: GPU at"):
        m = _UUID_LINE.match(message)
        return GpuUuidLine(m.group("bus").lower(), m.group("uuid")) if m else None
    if message.startswith("nvidia-nvswitch"):
        return _sxid(message)
    return None


def _xid(message: str) -> XidLine | None:
    m = _XID.match(message)
    if m is None:
        return None
    pid: int | None = None
    process = ""
    rest = m.group("rest")
    who = _WHO.match(rest)
    if who is not None:
        pid = int(who.group("pid")) if who.group("pid") else None
        name = who.group("name")
        process = "" if name == _UNKNOWN_NAME else name
    code = int(m.group("code"))
    # Looked for after the process's name only: a process may name itself
    # anything, a link too.
    detail = rest[who.end():] if who is not None else rest
    return XidLine(m.group("bus").lower(), code, pid, process,
                   nvlink_of(detail) if code == NVLINK_XID else None)


def nvlink_of(detail: str) -> int | None:
    """The link ``NVLink: fatal error detected on link 14(...)`` names in an
    Xid 74 line's detail, if it names one a GPU can have."""
    found = _NVLINK.search(detail)
    if found is None:
        return None
    link = int(found.group("link"))
    return link if link < MAX_LINKS else None


def _sxid(message: str) -> SxidLine | None:
    m = _SXID.match(message)
    if m is None:
        return None
    rest = m.group("rest")
    fatal = True if rest.startswith("Fatal") else False if rest.startswith("Non-fatal") else None
    return SxidLine(f"nvidia-nvswitch{m.group('switch')}", m.group("bus").lower(),
                    int(m.group("code")), fatal)


def bus_key(bus_id: str) -> str:
    """The ``DDDD:BB:DD`` form of a bus id as NVML (``00000000:18:00.0``) or the
    driver's log (``0000:18:00``) writes it; "" for anything else."""
    m = re.fullmatch(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?",
                     bus_id.strip())
    if m is None:
        return ""
    domain = int(m.group(1), 16)
    if domain > 0xFFFF:
        return ""
    return f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}"
