"""Reading kernel text files, and the one error every reader raises for a file
it cannot understand."""

from __future__ import annotations

import errno
import os
from pathlib import Path

_CHUNK = 65536


class MalformedFile(ValueError):
    """A kernel file that exists but does not have the expected shape
    (truncated, an unknown format, a number that is not one)."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


# The most a kernel text file may hold: /proc/stat of a 1,024-CPU node is
# about 150 KiB and /proc/net/dev of 10,000 interfaces about 1.5 MiB. Past it
# the file is no kernel's (something mounted over /proc or /sys, a fixture gone
# wrong, a file that never ends), and reading it would hold it in memory.
TEXT_FILE_LIMIT = 4 * 1024 * 1024


def read_text(path: Path | str, limit: int = TEXT_FILE_LIMIT) -> str:
    """The whole file. Plain os.read calls rather than a text-mode file object:
    the readers open a few hundred small files every poll, and most of the
    cost of a buffered text file is its setup. Names (comm) can hold any bytes;
    what is not UTF-8 is replaced rather than failing the read.

    A file longer than ``limit`` is refused, read no further than that, with
    OSError(EFBIG): every reader already counts a file it cannot read and
    says so once."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        # A short read is not the end of a /proc file (seq_file stops before a
        # record that does not fit); only an empty one is.
        parts = []
        size = 0
        while chunk := os.read(fd, min(_CHUNK, limit + 1 - size)):
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                raise OSError(errno.EFBIG, f"longer than {limit} bytes", str(path))
    finally:
        os.close(fd)
    return b"".join(parts).decode("utf-8", errors="replace")


def line_fields(text: str, prefix: str) -> list[str] | None:
    """The fields after ``prefix`` on the first line that begins with it
    (``"MemTotal:"``, ``"ctxt "``), None where no line does. No other line is
    split: /proc/stat's interrupt line alone is thousands of numbers on a large
    node, and /proc/vmstat has some 180 lines of which a poll wants two."""
    at = 0
    while (start := text.find(prefix, at)) >= 0:
        if start == 0 or text[start - 1] == "\n":
            end = text.find("\n", start)
            return text[start + len(prefix):end if end >= 0 else len(text)].split()
        at = start + len(prefix)
    return None


def to_int(path: Path | str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise MalformedFile(path, f"{text!r} is not an integer") from None


def to_float(path: Path | str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise MalformedFile(path, f"{text!r} is not a number") from None


# A sysfs attribute is one short value; the kernel's page is 4096 bytes.
SMALL_FILE_LIMIT = 4096


def read_small(path: Path | str, limit: int = SMALL_FILE_LIMIT) -> str:
    """A one-value attribute file, stripped; a file longer than ``limit`` is
    not one (a fixture gone wrong, something mounted over sysfs) and is
    refused unread past the limit rather than held in memory."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise MalformedFile(path, f"longer than {limit} bytes")
    return data.decode("utf-8", errors="replace").strip()
