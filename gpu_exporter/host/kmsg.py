"""The kernel's log as ``/dev/kmsg`` serves it (Documentation/ABI/testing/dev-kmsg
in the kernel tree): every ``read()`` returns one record, ``PRI,SEQ,USEC,FLAGS;message``
followed by continuation lines (`` KEY=value``) that carry a device's context;
records are never partial. Non-printable bytes and ``\\`` in a message are
escaped as ``\\xNN``. ``SEQ`` numbers every record since boot, so a gap is a
count of records the ring buffer overwrote before they were read; a reader the
ring overran gets ``EPIPE`` once and then the oldest record still there.
``USEC`` is the kernel's monotonic clock at the time of the record.

Reading needs ``CAP_SYSLOG`` or ``kernel.dmesg_restrict=0``; the exporter asks
for neither, so a refusal (``EACCES``, ``EPERM``) is a state, said once, never
an error that stops anything. A regular file in the same format (the
simulator's, a saved log) is read as a stream of records that grows.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from gpu_exporter.settings.config_types import DEFAULT_KMSG_PATH, kmsg_file_problem

DEFAULT_PATH = DEFAULT_KMSG_PATH
# The kernel's own buffer per reader (CONSOLE_EXT_LOG_MAX): no record is longer.
MAX_RECORD = 8192
# Only the kernel logs at facility 0: user space writing to /dev/kmsg gets
# facility LOG_USER (1) at least, so a line it writes is never the driver's.
KERNEL_FACILITY = 0
# Bytes read from a regular file at once.
_CHUNK = 256 * 1024
# Bytes one read() takes from the log at most, whatever it holds: the records
# of one batch are held together until they are counted, so this bounds the
# memory of reading (a kernel ring of some 10^4 records is 1-2 MiB).
MAX_BATCH_BYTES = 1024 * 1024
_HEAD = re.compile(rb"(\d{1,4}),(\d{1,20}),(\d{1,20}),([^,;]{0,8})(?:,[^;]*)?\Z")
_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})")


class KmsgState(StrEnum):
    """How reading the kernel log goes: the ``state`` label of
    ``gpu_exporter_kernel_log_state``."""

    OK = "ok"
    OFF = "off"  # no path configured
    ABSENT = "absent"  # no such file (a container without /dev/kmsg)
    UNREADABLE = "unreadable"  # EACCES/EPERM: no CAP_SYSLOG, dmesg_restrict=1
    ERROR = "error"  # any other failure (not a record stream, an I/O error)


class KmsgUnavailable(Exception):
    def __init__(self, state: KmsgState, detail: str) -> None:
        super().__init__(detail)
        self.state = state
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Record:
    facility: int
    level: int
    seq: int
    usec: int  # the kernel's monotonic clock, microseconds since boot
    flags: str  # "-" a whole line; "c" the first fragment of one; "+" a later fragment
    message: str


def _unescape(raw: bytes) -> str:
    return _ESCAPE.sub(lambda m: bytes((int(m.group(1), 16),)), raw).decode(errors="replace")


def parse_record(raw: bytes) -> Record | None:
    """One record as read() returns it (continuation lines included); None
    for anything that is not one."""
    head, sep, rest = raw.partition(b";")
    if not sep:
        return None
    m = _HEAD.match(head)
    if m is None:
        return None
    prio, seq, usec = int(m.group(1)), int(m.group(2)), int(m.group(3))
    line = rest.partition(b"\n")[0]
    return Record(prio >> 3, prio & 7, seq, usec, m.group(4).decode(errors="replace"),
                  _unescape(line))


def split_records(data: bytes) -> tuple[list[bytes], bytes]:
    """The whole records at the start of ``data`` (each with its continuation
    lines) and what is left of an unfinished one. A record is a line that
    does not start with a space, and the continuation lines after it;
    continuation lines with no record before them are dropped."""
    records: list[bytes] = []
    start = 0
    while True:
        nl = data.find(b"\n", start)
        if nl < 0:
            break
        stop = nl + 1
        while data.startswith(b" ", stop):
            more = data.find(b"\n", stop)
            if more < 0:
                return records, data[start:]
            stop = more + 1
        if not data.startswith(b" ", start):
            records.append(data[start:stop])
        start = stop
    return records, data[start:]


Opener = Callable[[str, int], int]


class KmsgReader:
    """Reads records from ``path`` without ever blocking: ``read()`` returns
    what is there now. ``lost`` counts records the kernel's ring overwrote
    before they could be read (sequence gaps, EPIPE), ``malformed`` records
    that could not be parsed."""

    def __init__(self, path: str = DEFAULT_PATH, opener: Opener | None = None) -> None:
        self.path = path
        self._opener = opener
        self._fd: int | None = None
        self._device = False
        self._pending = b""
        # Whole records of a file read but not yet returned: a chunk holds
        # more than the limit asked for.
        self._ready: list[bytes] = []
        self._next_seq: int | None = None
        self.lost = 0
        self.malformed = 0
        self.overruns = 0  # EPIPE answers
        self.bytes_read = 0  # since the reader was made: a read that took none is the end

    @property
    def fd(self) -> int | None:
        return self._fd

    @property
    def is_device(self) -> bool:
        return self._device

    def open(self) -> None:
        """Open the log; raises KmsgUnavailable with the state it is in."""
        self.close()
        try:
            fd = (self._opener or os.open)(self.path,
                                           os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise KmsgUnavailable(KmsgState.ABSENT, f"no {self.path}") from None
        except PermissionError as exc:
            # OSError is a PermissionError whenever its errno is EACCES or EPERM
            raise KmsgUnavailable(KmsgState.UNREADABLE, _refusal(self.path, exc)) from None
        except OSError as exc:
            raise KmsgUnavailable(KmsgState.ERROR,
                                  f"{self.path}: {exc.strerror or exc}") from None
        try:
            st = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            raise KmsgUnavailable(KmsgState.ERROR, f"{self.path}: {exc.strerror}") from None
        # Checked on what was opened, whatever the settings checked before:
        # the default path is not checked at start (a container may have
        # something else there), and a path can change after.
        problem = kmsg_file_problem(st.st_mode, st.st_rdev)
        if problem is not None:
            os.close(fd)
            raise KmsgUnavailable(KmsgState.ERROR, f"{self.path}: {problem}")
        self._fd, self._device = fd, stat.S_ISCHR(st.st_mode)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None
        self._pending = b""
        self._ready = []

    def read(self, limit: int = 65536) -> list[Record]:
        """At most ``limit`` records available now, oldest first, from at most
        MAX_BATCH_BYTES of the log (``bytes_read`` grows by what was taken: a
        read that took bytes but found no record read garbage, not the end).
        Raises KmsgUnavailable when the log cannot be read any more; records
        read before the failure are returned first (the device's are gone
        from it once read), the failure raised by the read after."""
        if self._fd is None:
            raise KmsgUnavailable(KmsgState.ERROR, f"{self.path} is not open")
        raw = self._read_device(limit) if self._device else self._read_file(limit)
        out: list[Record] = []
        for chunk in raw:
            record = parse_record(chunk)
            if record is None:
                self.malformed += 1
                continue
            self._count_gap(record.seq)
            out.append(record)
        return out

    def _count_gap(self, seq: int) -> None:
        """Records between the last one read and this one were overwritten. At
        the first record the count since boot (sequence 0) is the gap."""
        expected = 0 if self._next_seq is None else self._next_seq
        # A sequence number not above the expected one (a saved log read
        # again from its start) loses nothing.
        self.lost += max(0, seq - expected)
        self._next_seq = seq + 1

    def _read_device(self, limit: int) -> list[bytes]:
        assert self._fd is not None
        records: list[bytes] = []
        taken = 0
        # Every read counts, an error too: a device that answered EPIPE or
        # EINVAL on every read would otherwise be read for ever.
        for _ in range(limit):
            if taken >= MAX_BATCH_BYTES:
                break
            try:
                data = os.read(self._fd, MAX_RECORD)
            except BlockingIOError:
                break
            # (os.read retries a read a signal interrupted itself: PEP 475)
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    # The ring overwrote records we had not read; the next
                    # read gives the oldest one left, and its sequence
                    # number says how many were lost.
                    self.overruns += 1
                    continue
                if exc.errno == errno.EINVAL:
                    # A record longer than the buffer: the kernel skips it
                    # for no reader; counted, never fatal.
                    self.malformed += 1
                    continue
                if records:
                    break  # those read are the kernel's no more: counted first
                raise KmsgUnavailable(KmsgState.ERROR,
                                      f"{self.path}: {exc.strerror or exc}") from None
            if not data:
                break
            taken += len(data)
            records.append(data)
        self.bytes_read += taken
        return records

    def _read_file(self, limit: int) -> list[bytes]:
        assert self._fd is not None
        records, self._ready = self._ready[:limit], self._ready[limit:]
        taken = 0
        while len(records) < limit and taken < MAX_BATCH_BYTES:
            try:
                data = os.read(self._fd, _CHUNK)
            except OSError as exc:
                if records:
                    break  # counted first; the error again at the next read
                raise KmsgUnavailable(KmsgState.ERROR,
                                      f"{self.path}: {exc.strerror or exc}") from None
            if not data:
                break
            taken += len(data)
            found, self._pending = split_records(self._pending + data)
            for record in found:
                if len(record) > MAX_RECORD:
                    # Longer than the kernel ever writes one: not a record.
                    self.malformed += 1
                else:
                    records.append(record)
            if len(self._pending) > MAX_RECORD:
                # No record is that long: not a record stream here; skip it.
                self.malformed += 1
                self._pending = b""
        self.bytes_read += taken
        # What the last chunk held beyond the limit waits for the next read.
        records, self._ready = records[:limit], records[limit:] + self._ready
        return records


def _refusal(path: str, exc: OSError) -> str:
    return (f"{path}: {exc.strerror or 'permission denied'} (reading the kernel log needs "
            "CAP_SYSLOG or kernel.dmesg_restrict=0, and in a container a device cgroup that "
            "admits the device; Xids before the exporter started and the process of each Xid "
            "are not known without it)")


class Fragments:
    """Joins a line the kernel logged in fragments (flag ``c`` for the first,
    ``+`` for the ones after, on kernels that do not join them themselves).
    Another record in between ends the fragment as it is: the stream may be
    interleaved with unrelated messages, and a line is never glued to one that
    is not its own."""

    def __init__(self) -> None:
        self._open: Record | None = None

    def feed(self, record: Record) -> list[Record]:
        """The whole lines ``record`` completes, in order."""
        if record.flags == "+" and self._open is not None \
                and self._open.facility == record.facility:
            o = self._open
            self._open = replace(o, message=(o.message + record.message)[:MAX_RECORD])
            return []
        done = self.flush()
        if record.flags == "c":
            self._open = record
            return done
        return [*done, record]

    def flush(self) -> list[Record]:
        """The fragment held, as a line of its own."""
        if self._open is None:
            return []
        o, self._open = self._open, None
        return [replace(o, flags="-")]
