"""The node's boot: its id (a new one every boot) and how long it has been up,
read under --path.procfs."""

from __future__ import annotations

import re
from pathlib import Path

# /proc/sys/kernel/random/boot_id: a random UUID the kernel makes at boot.
BOOT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _first_line(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(256).decode("ascii", "replace").split("\n", 1)[0].strip()
    except OSError:
        return None


def boot_id(procfs: Path) -> str | None:
    """This boot's id, or None where the kernel does not give one."""
    text = _first_line(procfs / "sys" / "kernel" / "random" / "boot_id")
    return text if text is not None and BOOT_ID.fullmatch(text) else None


def uptime(procfs: Path) -> float | None:
    """Seconds since boot (/proc/uptime's first figure), or None."""
    text = _first_line(procfs / "uptime")
    if not text:
        return None
    try:
        seconds = float(text.split()[0])
    except ValueError:
        return None
    return seconds if seconds >= 0 and seconds == seconds and seconds != float("inf") else None
