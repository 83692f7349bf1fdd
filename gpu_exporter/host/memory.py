"""Memory and swap: what is available (/proc/meminfo) and how much is being
swapped in and out (/proc/vmstat)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.host.files import MalformedFile, read_text, to_int

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class MemInfo:
    total_bytes: int
    available_bytes: int | None  # None before Linux 3.14 (no MemAvailable)
    swap_total_bytes: int
    swap_free_bytes: int

    @property
    def swap_used_bytes(self) -> int:
        """Negative where the file claims more swap free than there is (the
        collector holds it against its metric's bounds)."""
        return self.swap_total_bytes - self.swap_free_bytes


# The lines of /proc/meminfo the exporter uses, of some fifty: only these are
# parsed (and so held to being numbers), the rest skipped by their key.
MEMINFO_KEYS = frozenset(("MemTotal", "MemAvailable", "SwapTotal", "SwapFree"))


def read_meminfo(procfs: Path) -> MemInfo:
    path = procfs / "meminfo"
    fields: dict[str, int] = {}
    for line in read_text(path).splitlines():
        key, sep, rest = line.partition(":")
        if key not in MEMINFO_KEYS:
            continue
        parts = rest.split()
        if not sep or not parts:
            continue
        value = to_int(path, parts[0])
        fields[key] = value * 1024 if parts[1:] == ["kB"] else value
    missing = [k for k in ("MemTotal", "SwapTotal", "SwapFree") if k not in fields]
    if missing:
        raise MalformedFile(path, f"no {', '.join(missing)}")
    return MemInfo(fields["MemTotal"], fields.get("MemAvailable"), fields["SwapTotal"],
                   fields["SwapFree"])


@dataclass(frozen=True, slots=True)
class SwapActivity:
    """Bytes swapped in from and out to swap devices since boot."""

    in_bytes: int
    out_bytes: int


def read_swap_activity(procfs: Path, page_size: int = PAGE_SIZE) -> SwapActivity | None:
    """None on a kernel built without swap support (no pswpin/pswpout)."""
    path = procfs / "vmstat"
    pages: dict[str, int] = {}
    lines = read_text(path).splitlines()
    # Only the two lines asked for are split (vmstat has some 180).
    for line in lines:
        if "pswp" in line:
            parts = line.split()
            if len(parts) == 2 and parts[0] in ("pswpin", "pswpout"):
                pages[parts[0]] = to_int(path, parts[1])
    if not pages:
        # A kernel without swap accounting still lists its other counters;
        # a file with none is not a kernel's vmstat at all.
        rows = (line.split() for line in lines)
        if not any(len(p) == 2 and p[1].isascii() and p[1].isdigit() for p in rows):
            raise MalformedFile(path, "no counter lines")
        return None
    if len(pages) != 2:
        raise MalformedFile(path, "pswpin without pswpout or the other way round")
    return SwapActivity(pages["pswpin"] * page_size, pages["pswpout"] * page_size)
