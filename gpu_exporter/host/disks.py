"""Block devices' busy time (/proc/diskstats): the share of time a device had
I/O in flight says whether storage can keep a data pipeline fed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.host.files import MalformedFile, read_text, to_int

# Devices whose busy time says nothing about a training job's input: loop
# devices (snaps, images), RAM disks, compressed RAM swap, floppies.
_VIRTUAL = re.compile(r"^(loop|ram|zram|fd)\d+$")
# Partitions: their time is already in their whole disk's.
_PARTITION = re.compile(r"^((h|s|v|xv)d[a-z]+\d+|(nvme\d+n\d+|mmcblk\d+|md\d+)p\d+)$")
# major minor name, then at least the 11 fields every kernel since 2.6 has.
_MIN_FIELDS = 14
_IO_TICKS = 12  # milliseconds spent with I/O in flight


@dataclass(frozen=True, slots=True)
class DiskBusy:
    """Seconds each whole block device had I/O in flight, since boot."""

    busy_seconds: dict[str, float]


def is_counted(name: str) -> bool:
    return not (_VIRTUAL.match(name) or _PARTITION.match(name))


def read_diskstats(procfs: Path | str) -> DiskBusy:
    path = f"{procfs}/diskstats"
    busy: dict[str, float] = {}
    lines = 0
    for line in read_text(path).splitlines():
        parts = line.split()
        if not parts:
            continue
        lines += 1
        if len(parts) < _MIN_FIELDS:
            raise MalformedFile(path, f"short line {line.strip()!r}")
        name = parts[2]
        if is_counted(name):
            busy[name] = to_int(path, parts[_IO_TICKS]) / 1000.0
    if not lines:  # the kernel lists every block device, loop and RAM disks included
        raise MalformedFile(path, "no block device")
    return DiskBusy(busy)


def busy_ratios(before: DiskBusy, after: DiskBusy, seconds: float) -> dict[str, float]:
    """Share of ``seconds`` each device was busy; devices seen in both only.
    As the counters give it: a little above 1 where the poll was late, below
    0 where the device was re-created (the collector holds it against
    its metric's bounds)."""
    if seconds <= 0:
        return {}
    out = {}
    for name, now in after.busy_seconds.items():
        then = before.busy_seconds.get(name)
        if then is not None:
            out[name] = (now - then) / seconds
    return out
