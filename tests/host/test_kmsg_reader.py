"""The kernel-log reader (host/kmsg.py) against a hostile log: garbage
records, lines longer than the kernel ever writes, escape codes, a byte that
is not UTF-8, and /dev/kmsg's answers (one record per read, EPIPE after an
overrun, EINVAL for a record too long, EAGAIN when there is nothing new).
Regular files in a temporary directory stand for a saved log; the device is
an os-level fake (fstat says 1:11, read answers as the kernel does). Fast on
purpose: mutation testing runs these per changed line."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from gpu_exporter.host.driver_log import DriverLog
from gpu_exporter.host.kmsg import (
    MAX_BATCH_BYTES,
    MAX_RECORD,
    Fragments,
    KmsgReader,
    KmsgState,
    KmsgUnavailable,
    Record,
    parse_record,
    split_records,
)
from gpu_exporter.settings.config_types import KMSG_DEVICE

REAL_FSTAT = os.fstat
REAL_READ = os.read


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def record(seq: int, message: str = "line", prio: int = 6) -> bytes:
    return f"{prio},{seq},{seq * 1000},-;{message}\n".encode()


def of_size(seq: int, size: int) -> bytes:
    """A record of exactly ``size`` bytes, its newline included."""
    head = f"6,{seq},0,-;".encode()
    return head + b"x" * (size - len(head) - 1) + b"\n"


# --- one record ----------------------------------------------------------------------

def test_the_priority_splits_into_facility_and_level() -> None:
    # 14 = facility 1 (user space) << 3 | level 6
    assert parse_record(b"14,7,99,-;from user space\n") == Record(1, 6, 7, 99, "-",
                                                                    "from user space")
    assert parse_record(b"3,0,0,c;NVRM: frag") == Record(0, 3, 0, 0, "c", "NVRM: frag")


def test_escapes_are_undone_and_bytes_not_utf8_are_replaced_not_fatal() -> None:
    got = parse_record(b"4,1,2,-;a\\x1b[2Jb\\x1fc\\x5cd \\xff end\n")
    assert got is not None
    assert got.message == "a\x1b[2Jb\x1fc\\d \ufffd end"
    raw = parse_record(b"4,1,2,-;raw \xfe\xff byte\n")
    assert raw is not None and raw.message == "raw \ufffd\ufffd byte"
    # a flag field of a byte that is not ASCII: read, never an exception
    odd = parse_record(b"4,1,2,\xe9;x\n")
    assert odd is not None and odd.flags == "\ufffd"


def test_continuation_lines_are_not_part_of_the_message() -> None:
    got = parse_record(b"6,5,9,-;pci 0000:18:00.0: probe\n SUBSYSTEM=pci\n DEVICE=+pci:x\n")
    assert got is not None and got.message == "pci 0000:18:00.0: probe"


# --- the framing of a stream -----------------------------------------------------------

def test_an_empty_line_is_a_record_of_its_own_and_framing_goes_on() -> None:
    records, rest = split_records(b"\n6,1,2,-;a\n")
    assert records == [b"\n", b"6,1,2,-;a\n"] and rest == b""


def test_a_record_whose_continuation_is_unfinished_waits_whole() -> None:
    data = b"6,1,2,-;a\n6,2,3,-;b\n KEY=val"
    records, rest = split_records(data)
    assert records == [b"6,1,2,-;a\n"] and rest == b"6,2,3,-;b\n KEY=val"
    records, rest = split_records(rest + b"ue\n MORE=1\n6,3,4,-;c\n")
    assert records == [b"6,2,3,-;b\n KEY=value\n MORE=1\n", b"6,3,4,-;c\n"] and rest == b""


# --- opening ---------------------------------------------------------------------------

def test_the_log_is_opened_non_blocking_and_not_inherited(tmp_path: Path) -> None:
    path = tmp_path / "kmsg"
    path.write_bytes(record(0))
    reader = KmsgReader(str(path))
    reader.open()
    try:
        assert reader.fd is not None and not reader.is_device
        assert os.get_blocking(reader.fd) is False
        assert os.get_inheritable(reader.fd) is False
    finally:
        reader.close()
    assert reader.fd is None


def test_opening_again_closes_what_was_open(tmp_path: Path) -> None:
    path = tmp_path / "kmsg"
    path.write_bytes(record(0))
    reader = KmsgReader(str(path))
    before = open_fds()
    reader.open()
    reader.open()
    assert len(open_fds() - before) == 1
    reader.close()
    assert open_fds() == before


def _refused(error: OSError, path: str = "/dev/kmsg") -> KmsgUnavailable:
    def opener(p: str, flags: int) -> int:
        raise error

    with pytest.raises(KmsgUnavailable) as raised:
        KmsgReader(path, opener).open()
    return raised.value


def test_a_refusal_says_in_one_line_what_reading_the_log_needs() -> None:
    refused = _refused(PermissionError(errno.EPERM, "Operation not permitted"))
    assert refused.state == KmsgState.UNREADABLE
    assert refused.detail == (
        "/dev/kmsg: Operation not permitted (reading the kernel log needs CAP_SYSLOG or "
        "kernel.dmesg_restrict=0, and in a container a device cgroup that admits the device; "
        "Xids before the exporter started and the process of each Xid are not known without "
        "it)")
    assert "\n" not in refused.detail
    # an OSError with EACCES is a PermissionError: the same state
    assert _refused(OSError(errno.EACCES, "Permission denied")).state == KmsgState.UNREADABLE
    # no reason given by the system: still said
    assert _refused(PermissionError()).detail.startswith(
        "/dev/kmsg: permission denied (reading the kernel log needs CAP_SYSLOG")


def test_other_failures_to_open_name_the_path_and_the_reason() -> None:
    absent = _refused(FileNotFoundError(errno.ENOENT, "No such file"), "/x/kmsg")
    assert (absent.state, absent.detail) == (KmsgState.ABSENT, "no /x/kmsg")
    io = _refused(OSError(errno.EIO, "Input/output error"), "/x/kmsg")
    assert (io.state, io.detail) == (KmsgState.ERROR, "/x/kmsg: Input/output error")
    bare = _refused(OSError("no errno at all"), "/x/kmsg")
    assert (bare.state, bare.detail) == (KmsgState.ERROR, "/x/kmsg: no errno at all")


def test_what_is_neither_the_device_nor_a_file_is_refused_and_closed(tmp_path: Path) -> None:
    before = open_fds()
    with pytest.raises(KmsgUnavailable) as raised:
        KmsgReader(str(tmp_path)).open()
    assert raised.value.state == KmsgState.ERROR
    assert raised.value.detail == f"{tmp_path}: neither the kmsg device nor a regular file"
    assert open_fds() == before


def test_a_failed_fstat_is_an_error_and_leaks_nothing(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kmsg"
    path.write_bytes(b"")

    def fstat(fd: int) -> os.stat_result:
        raise OSError(errno.EIO, "Input/output error")

    before = open_fds()
    monkeypatch.setattr(os, "fstat", fstat)
    with pytest.raises(KmsgUnavailable) as raised:
        KmsgReader(str(path)).open()
    monkeypatch.undo()
    assert (raised.value.state, raised.value.detail) == (
        KmsgState.ERROR, f"{path}: Input/output error")
    assert open_fds() == before


def test_reading_a_log_not_open_is_an_error() -> None:
    with pytest.raises(KmsgUnavailable) as raised:
        KmsgReader("/x/kmsg").read()
    assert (raised.value.state, raised.value.detail) == (KmsgState.ERROR, "/x/kmsg is not open")


# --- a saved log (a regular file) ------------------------------------------------------

def file_reader(tmp_path: Path, data: bytes) -> KmsgReader:
    path = tmp_path / "kmsg"
    path.write_bytes(data)
    reader = KmsgReader(str(path))
    reader.open()
    return reader


def test_a_file_gives_at_most_the_records_asked_and_keeps_the_rest(tmp_path: Path) -> None:
    reader = file_reader(tmp_path, b"".join(record(i) for i in range(10)))
    assert [r.seq for r in reader.read(3)] == [0, 1, 2]
    assert [r.seq for r in reader.read(3)] == [3, 4, 5]
    assert reader.bytes_read == sum(len(record(i)) for i in range(10))
    assert [r.seq for r in reader.read(100)] == [6, 7, 8, 9]
    assert reader.read() == [] and reader.lost == 0 and reader.malformed == 0
    reader.close()


def test_garbage_between_records_is_counted_and_reading_goes_on(tmp_path: Path) -> None:
    data = (record(0) + b"garbage\n" + b"\x00\x00\x00\n" + b"6,x,1,-;bad\n"
            + record(1, "NVRM: \\x1b[31mred") + record(5))
    reader = file_reader(tmp_path, data)
    records = reader.read()
    assert [r.seq for r in records] == [0, 1, 5]
    assert records[1].message == "NVRM: \x1b[31mred"
    assert reader.malformed == 3
    assert reader.lost == 3  # 2, 3 and 4
    assert reader.bytes_read == len(data)
    reader.close()


def test_the_first_sequence_number_counts_what_was_lost_since_boot(tmp_path: Path) -> None:
    reader = file_reader(tmp_path, record(7) + record(8) + record(8) + record(3) + record(9))
    assert [r.seq for r in reader.read()] == [7, 8, 8, 3, 9]
    # 0-6 before the first; a record repeated or older (a log read again)
    # loses nothing; after the 3, the 9 is five ahead
    assert reader.lost == 7 + 5
    reader.close()


def test_lines_longer_than_the_kernel_writes_are_not_records(tmp_path: Path) -> None:
    data = (of_size(0, MAX_RECORD) + of_size(1, MAX_RECORD + 1) + record(2)
            + b"7,3,0,-;" + b"y" * (3 * MAX_RECORD))  # no newline: never a record
    reader = file_reader(tmp_path, data)
    got = reader.read()
    assert [(r.seq, len(r.message)) for r in got] == [(0, MAX_RECORD - 9), (2, 4)]
    assert reader.malformed == 2  # the long line, and the unfinished one dropped
    # what follows the dropped part: its tail, not a record, and then records again
    with open(tmp_path / "kmsg", "ab") as f:
        f.write(b"yyy\n" + record(4))
    assert [r.seq for r in reader.read()] == [4]
    assert reader.malformed == 3
    reader.close()


def test_an_unfinished_record_of_the_longest_size_waits(tmp_path: Path) -> None:
    whole = of_size(0, MAX_RECORD)
    reader = file_reader(tmp_path, whole[:-1])  # all but its newline
    assert reader.read() == [] and reader.malformed == 0
    with open(tmp_path / "kmsg", "ab") as f:
        f.write(b"\n")
    assert [r.seq for r in reader.read()] == [0]
    reader.close()


def test_one_read_of_a_file_takes_at_most_a_batch(tmp_path: Path) -> None:
    size = 256  # a chunk (256 KiB) holds 1024 of them exactly
    count = 2 * MAX_BATCH_BYTES // size
    reader = file_reader(tmp_path, b"".join(of_size(i, size) for i in range(count)))
    first = reader.read(10 * count)
    assert reader.bytes_read == MAX_BATCH_BYTES
    assert len(first) == MAX_BATCH_BYTES // size
    # a limit met exactly at a chunk's end stops there
    assert len(reader.read(1024)) == 1024
    assert reader.bytes_read == MAX_BATCH_BYTES + 256 * 1024
    reader.close()


def test_what_one_chunk_held_beyond_a_limit_is_all_that_waits(tmp_path: Path) -> None:
    """Records read past a read's limit wait for the next read: never more
    than one chunk (256 KiB) of them, however small and however many."""
    size = 32
    per_chunk = 256 * 1024 // size
    reader = file_reader(tmp_path, b"".join(of_size(i, size) for i in range(4 * per_chunk)))
    seen = []
    for _ in range(3 * per_chunk):
        seen += [r.seq for r in reader.read(1)]
        assert len(reader._ready) < per_chunk
    assert seen == list(range(3 * per_chunk))  # in order, none lost or read twice
    reader.close()


def test_closing_forgets_an_unfinished_record(tmp_path: Path) -> None:
    reader = file_reader(tmp_path, record(0) + record(1) + b"6,2,0,-;unfin")
    assert [r.seq for r in reader.read(1)] == [0]
    reader.open()  # again, from the start: nothing held from before is glued on
    assert [r.seq for r in reader.read()] == [0, 1]
    assert reader.malformed == 0
    reader.close()


def test_a_file_that_fails_to_read_is_an_error(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    reader = file_reader(tmp_path, record(0) + record(1) + record(2))
    assert [r.seq for r in reader.read(1)] == [0]

    def read(fd: int, size: int) -> bytes:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "read", read)
    assert [r.seq for r in reader.read()] == [1, 2]  # those already read come first
    with pytest.raises(KmsgUnavailable) as raised:
        reader.read()
    monkeypatch.undo()
    assert (raised.value.state, raised.value.detail) == (
        KmsgState.ERROR, f"{tmp_path / 'kmsg'}: Input/output error")
    reader.close()


# --- the device: one record a read -----------------------------------------------------

class Device:
    """read() as /dev/kmsg answers it: one record per call, an errno as an
    error, EAGAIN when nothing is left."""

    def __init__(self, answers: list[bytes | int]) -> None:
        self.answers = list(answers)
        self.reads = 0
        self.sizes: set[int] = set()

    def read(self, fd: int, size: int) -> bytes:
        self.reads += 1
        self.sizes.add(size)
        if not self.answers:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        answer = self.answers.pop(0)
        if isinstance(answer, int):
            raise OSError(answer, os.strerror(answer))
        return answer


@pytest.fixture
def device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Device:
    (tmp_path / "kmsg").write_bytes(b"")
    fake = Device([])

    def fstat(fd: int) -> os.stat_result:
        fields = list(REAL_FSTAT(fd))
        fields[0] = stat.S_IFCHR | 0o644
        return os.stat_result(fields, {"st_rdev": os.makedev(*KMSG_DEVICE)})

    monkeypatch.setattr(os, "fstat", fstat)
    monkeypatch.setattr(os, "read", fake.read)
    return fake


def device_reader(tmp_path: Path) -> KmsgReader:
    reader = KmsgReader(str(tmp_path / "kmsg"))
    reader.open()
    assert reader.is_device
    return reader


def test_the_device_reads_one_record_a_call_and_goes_on_past_errors(
        tmp_path: Path, device: Device) -> None:
    device.answers = [errno.EPIPE, record(3), errno.EINVAL, b"garbage\n", record(4, "x"),
                      errno.EPIPE, errno.EPIPE, record(9)]
    reader = device_reader(tmp_path)
    got = reader.read()
    assert [r.seq for r in got] == [3, 4, 9]
    assert (reader.overruns, reader.malformed, reader.lost) == (3, 2, 3 + 4)
    assert reader.bytes_read == len(record(3)) + len(b"garbage\n") + len(record(4, "x")) \
        + len(record(9))
    assert device.sizes == {MAX_RECORD}
    reads = device.reads
    assert reader.read() == [] and device.reads == reads + 1  # EAGAIN: one try, no spin
    reader.close()


def test_records_before_the_first_and_in_an_overrun_are_lost_and_counted(
        tmp_path: Path, device: Device) -> None:
    device.answers = [
        b"6,5,10,-;first left in the ring\n",
        b"6,6,11,-;second\n SUBSYSTEM=pci\n",  # its key=value lines are not records
        errno.EPIPE,  # overwritten while read: the next is the oldest left
        b"4,40,90,-;after the overrun\n",
    ]
    reader = device_reader(tmp_path)
    assert [r.seq for r in reader.read()] == [5, 6, 40]
    assert reader.lost == 5 + 33  # 0-4 before the first (since boot), 7-39 in the overrun
    assert (reader.overruns, reader.malformed) == (1, 0)
    reader.close()


def test_the_device_gives_at_most_the_records_asked(tmp_path: Path, device: Device) -> None:
    device.answers = [record(i) for i in range(6)]
    reader = device_reader(tmp_path)
    assert [r.seq for r in reader.read(2)] == [0, 1]
    assert device.reads == 2
    # errors count as reads too: a device answering EPIPE for ever is not read for ever
    device.answers[:0] = [errno.EPIPE] * 3
    assert reader.read(3) == [] and reader.overruns == 3
    assert [r.seq for r in reader.read(5)] == [2, 3, 4, 5]
    reader.close()


def test_one_read_of_the_device_takes_at_most_a_batch(tmp_path: Path, device: Device) -> None:
    per_batch = MAX_BATCH_BYTES // MAX_RECORD  # records of the longest size fill it exactly
    device.answers = [of_size(i, MAX_RECORD) for i in range(per_batch + 3)]
    reader = device_reader(tmp_path)
    assert len(reader.read()) == per_batch
    assert reader.bytes_read == MAX_BATCH_BYTES
    assert [r.seq for r in reader.read()] == [per_batch, per_batch + 1, per_batch + 2]
    reader.close()


def test_an_empty_read_ends_the_batch(tmp_path: Path, device: Device) -> None:
    device.answers = [record(0), b"", record(1)]
    reader = device_reader(tmp_path)
    assert [r.seq for r in reader.read()] == [0]
    assert [r.seq for r in reader.read()] == [1]
    reader.close()


def test_a_device_error_other_than_an_overrun_stops_reading(tmp_path: Path,
                                                            device: Device) -> None:
    device.answers = [record(0), errno.EIO, errno.EIO]
    reader = device_reader(tmp_path)
    # what was read before the error is the kernel's no more: returned first
    assert [r.seq for r in reader.read()] == [0]
    with pytest.raises(KmsgUnavailable) as raised:
        reader.read()
    assert (raised.value.state, raised.value.detail) == (
        KmsgState.ERROR, f"{tmp_path / 'kmsg'}: {os.strerror(errno.EIO)}")
    reader.close()


# --- fragments -------------------------------------------------------------------------

def frag(seq: int, flags: str, message: str, facility: int = 0) -> Record:
    return Record(facility, 4, seq, seq * 10, flags, message)


def test_a_line_in_fragments_is_one_line_at_its_first_fragments_time() -> None:
    f = Fragments()
    assert f.feed(frag(1, "c", "NVRM: Xid ")) == []
    assert f.feed(frag(2, "+", "(PCI:0000:18:00): ")) == []
    assert f.feed(frag(3, "+", "13, x")) == []
    assert f.flush() == [Record(0, 4, 1, 10, "-", "NVRM: Xid (PCI:0000:18:00): 13, x")]
    assert f.flush() == []


def test_a_fragment_of_another_facility_is_not_glued_on() -> None:
    f = Fragments()
    f.feed(frag(1, "c", "NVRM: Xid (PCI:0000:18:00): 7"))
    out = f.feed(frag(2, "+", "9, forged", facility=1))
    assert out == [Record(0, 4, 1, 10, "-", "NVRM: Xid (PCI:0000:18:00): 7"),
                   frag(2, "+", "9, forged", facility=1)]
    # a continuation with nothing open stands alone
    assert Fragments().feed(frag(5, "+", "x")) == [frag(5, "+", "x")]


def test_fragments_join_and_an_interleaved_line_ends_them() -> None:
    f = Fragments()
    assert f.feed(frag(1, "c", "NVRM: Xid (PCI:0000:18:00): ")) == []
    assert f.feed(frag(2, "+", "13, pid=9, name=a, b")) == []
    out = f.feed(frag(3, "-", "usb 1-1: new device"))
    assert [r.message for r in out] == ["NVRM: Xid (PCI:0000:18:00): 13, pid=9, name=a, b",
                                        "usb 1-1: new device"]
    # An unrelated line between a fragment and its rest: the fragment stands
    # alone (a truncated Xid that is not counted), the rest is not glued to
    # the wrong line.
    f.feed(frag(4, "c", "NVRM: Xid (PCI:0000:18:00): 7"))
    out = f.feed(frag(5, "-", "eth0: link up"))
    out += f.feed(frag(6, "+", "9, pid=1, name=a, b"))
    store = DriverLog()
    for r in out:
        store.add(r)
    assert store.totals == {}
    assert [r.message for r in out][:2] == ["NVRM: Xid (PCI:0000:18:00): 7", "eth0: link up"]


def test_a_new_first_fragment_ends_the_one_open() -> None:
    f = Fragments()
    f.feed(frag(1, "c", "a"))
    assert f.feed(frag(2, "c", "b")) == [Record(0, 4, 1, 10, "-", "a")]
    assert f.flush() == [Record(0, 4, 2, 20, "-", "b")]


def test_a_line_in_endless_fragments_stays_bounded() -> None:
    f = Fragments()
    f.feed(frag(1, "c", "a" * 5000))
    for seq in range(2, 50):
        f.feed(frag(seq, "+", "b" * 5000))
    (line,) = f.flush()
    assert len(line.message) == MAX_RECORD and line.message.startswith("a" * 5000 + "b")


# --- what the first runs left standing -------------------------------------------------

def test_a_semicolon_in_the_message_stays_in_it() -> None:
    got = parse_record(b"6,1,2,-;a; b;c\n")
    assert got is not None and got.message == "a; b;c"


def test_continuation_lines_before_any_record_are_dropped() -> None:
    records, rest = split_records(b" ORPHAN=1\n ORPHAN=2\n6,1,2,-;a\n SUBSYSTEM=pci\n")
    assert records == [b"6,1,2,-;a\n SUBSYSTEM=pci\n"] and rest == b""


def test_every_refused_record_counts(tmp_path: Path, device: Device) -> None:
    device.answers = [errno.EINVAL, record(0), errno.EINVAL, b"junk\n", b"junk\n"]
    reader = device_reader(tmp_path)
    assert [r.seq for r in reader.read()] == [0]
    assert reader.malformed == 4
    device.answers = [record(1, "second batch")]
    reader.read()
    # what was read since the reader was made, not by the last read alone
    assert reader.bytes_read == len(record(0)) + 2 * len(b"junk\n") + len(record(1, "second batch"))
    reader.close()


def test_every_line_too_long_counts(tmp_path: Path) -> None:
    reader = file_reader(tmp_path, of_size(0, MAX_RECORD + 1) + of_size(1, MAX_RECORD + 5)
                         + record(2))
    assert [r.seq for r in reader.read()] == [2] and reader.malformed == 2
    reader.close()


def test_a_line_one_byte_too_long_is_one_refusal_however_it_arrives(tmp_path: Path) -> None:
    line = of_size(0, MAX_RECORD + 1)
    reader = file_reader(tmp_path, line[:-1])  # the longest a record is, and no newline yet
    assert reader.read() == [] and reader.malformed == 0
    with open(tmp_path / "kmsg", "ab") as f:
        f.write(b"\n" + record(1))
    assert [r.seq for r in reader.read()] == [1]
    assert reader.malformed == 1
    reader.close()


def test_a_read_without_a_limit_takes_65536_records(tmp_path: Path) -> None:
    data = b"".join(f"6,{i},0,-;\n".encode() for i in range(70_000))
    assert len(data) < MAX_BATCH_BYTES  # the limit is the count, not the batch
    reader = file_reader(tmp_path, data)
    assert len(reader.read()) == 65536
    assert len(reader.read()) == 70_000 - 65536
    reader.close()


def test_the_reason_is_the_exceptions_text() -> None:
    refused = _refused(FileNotFoundError(errno.ENOENT, "No such file"), "/x/kmsg")
    assert str(refused) == refused.detail == "no /x/kmsg"
