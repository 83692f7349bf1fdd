"""Bounded, never-raising reads of small kernel files (/proc/PID/*, cgroup
files) whose contents come from a world that may be hostile: a file may be
missing, unreadable, vanish mid-read, or be far larger than any real one."""

from __future__ import annotations

import errno
import os

# /proc/PID/cgroup, cgroup pressure and stat files are well under 4 KiB.
SMALL_FILE = 64 * 1024


def read_bounded(path: str, limit: int = SMALL_FILE) -> bytes | None:
    """At most ``limit`` bytes of the file; None when it cannot be read or is
    longer than ``limit`` (a file that size is not the kernel file expected,
    and half of it would be misread)."""
    data = read_bounded_or_errno(path, limit)
    return data if isinstance(data, bytes) else None


def read_bounded_or_errno(path: str, limit: int = SMALL_FILE) -> bytes | int:
    """As :func:`read_bounded`, but what kept the file is said: its errno
    (ENOENT: not there, EACCES: not permitted; EFBIG: over ``limit``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        return exc.errno or errno.EIO
    except ValueError:  # a NUL in the path
        return errno.EINVAL
    try:
        parts: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(65536, limit + 1 - size))
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
            size += len(chunk)
        return errno.EFBIG
    except OSError as exc:
        return exc.errno or errno.EIO
    finally:
        os.close(fd)


def read_text_bounded(path: str, limit: int = SMALL_FILE) -> str | None:
    data = read_bounded(path, limit)
    return None if data is None else data.decode("utf-8", errors="replace")
