"""Memory and swap: what is available (/proc/meminfo) and how much is being
swapped in and out (/proc/vmstat)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.host.files import MalformedFile, line_fields, read_text, to_int

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
# parsed (and so held to being numbers); the others are never split.
MEMINFO_KEYS = ("MemTotal", "MemAvailable", "SwapTotal", "SwapFree")


def read_meminfo(procfs: Path | str) -> MemInfo:
    path = f"{procfs}/meminfo"
    text = read_text(path)
    fields: dict[str, int] = {}
    for key in MEMINFO_KEYS:
        parts = line_fields(text, f"{key}:")
        if parts:
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


def read_swap_activity(procfs: Path | str, page_size: int = PAGE_SIZE) -> SwapActivity | None:
    """None on a kernel built without swap support (no pswpin/pswpout)."""
    path = f"{procfs}/vmstat"
    text = read_text(path)
    pages: dict[str, int] = {}
    # Only the two lines asked for are split (vmstat has some 180).
    for key in ("pswpin", "pswpout"):
        parts = line_fields(text, f"{key} ")
        if parts is not None and len(parts) == 1:
            pages[key] = to_int(path, parts[0])
    if not pages:
        # A kernel without swap accounting still lists its other counters;
        # a file with none is not a kernel's vmstat at all.
        rows = (line.split() for line in text.splitlines())
        if not any(len(p) == 2 and p[1].isascii() and p[1].isdigit() for p in rows):
            raise MalformedFile(path, "no counter lines")
        return None
    if len(pages) != 2:
        raise MalformedFile(path, "pswpin without pswpout or the other way round")
    return SwapActivity(pages["pswpin"] * page_size, pages["pswpout"] * page_size)
