"""The kernel-log collector (collectors/kmsg.py) on logs written by hand in a
temporary directory: what a poll exports and how much it reads, the Xids
placed on NVML's GPUs at the kernel's clock, the log that cannot be opened
and is tried again, and the reader's own thread waking on a record and
stopping on close. NVML's session is a stand-in holding the GPUs' identities
(the collector reads nothing else of it). Fast on purpose: mutation testing
runs these per changed line."""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from gpu_exporter.collectors import kmsg as collector_module
from gpu_exporter.collectors.kmsg import (
    _CLK_TCK,
    RETRY_S,
    KmsgCollector,
    _stat_comm_start,
    find_culprit,
    merge_counts,
    merge_events,
)
from gpu_exporter.host.driver_log import XidEntry
from gpu_exporter.host.kmsg import KmsgState, Opener
from gpu_exporter.nvml.session import NvmlSession
from gpu_exporter.poll.readings import KernelLogReading, KernelXid, XidCulprit, XidEvent
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.settings.config import Settings
from gpu_exporter.settings.config_types import KMSG_DEVICE

LOGGER = "gpu_exporter.collectors.kmsg"
WALL = 1_700_000_000.0
BUS = "0000:18:00"  # GPU 0's, as the driver prints it
OTHER_BUS = "0000:3b:00"  # a GPU NVML does not list
UUID = "GPU-11111111-2222-3333-4444-555555555555"
REAL_FSTAT = os.fstat
REAL_READ = os.read


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def session() -> NvmlSession:
    gpu = SimpleNamespace(index=0, identity=SimpleNamespace(pci_bus_id="00000000:18:00.0",
                                                            uuid=UUID))
    gone = SimpleNamespace(index=1, identity=SimpleNamespace(pci_bus_id="", uuid="GPU-x"))
    return cast(NvmlSession, SimpleNamespace(gpus=[gpu, gone]))


def line(seq: int, message: str, usec: int = 0, prio: int = 3) -> bytes:
    return f"{prio},{seq},{usec},-;{message}\n".encode()


def xid(seq: int, code: int = 13, bus: str = BUS, pid: int | None = None,
        usec: int = 0) -> bytes:
    who = f"pid={pid}, name=python3, " if pid is not None else ""
    return line(seq, f"NVRM: Xid (PCI:{bus}): {code}, {who}Graphics Exception", usec)


class Node:
    """A log file and a /proc in a temporary directory, and the clocks."""

    def __init__(self, tmp: Path) -> None:
        self.log = tmp / "kmsg"
        self.procfs = tmp / "proc"
        self.procfs.mkdir()
        self.wall = Clock(WALL)
        self.mono = Clock(5000.0)
        self.made: list[KmsgCollector] = []

    def write(self, data: bytes) -> None:
        with open(self.log, "ab") as f:
            f.write(data)

    def collector(self, synchronous: bool = True, path: str | None = None,
                  opener: Opener | None = None) -> KmsgCollector:
        made = KmsgCollector(session(), str(self.log) if path is None else path, self.procfs,
                             self.wall, self.mono, synchronous=synchronous, opener=opener)
        self.made.append(made)
        return made

    def poll(self, collector: KmsgCollector) -> Snapshot:
        out = SnapshotBuilder(self.wall())
        collector.collect(out)
        return out.build()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = Node(tmp_path)
    yield made
    for c in made.made:
        c.close()


def reading(snap: Snapshot) -> KernelLogReading:
    found = snap.readings.kmsg
    assert found is not None
    return found


def states(snap: Snapshot) -> dict[str, float]:
    return {labels["state"]: value
            for labels, value in snap.series("gpu_exporter_kernel_log_state")}


# --- what a poll exports ---------------------------------------------------------------

def test_the_first_poll_reads_the_log_and_the_next_places_its_xids(node: Node) -> None:
    (node.procfs / "uptime").write_text("1000.50 3000.00\n")
    node.write(xid(4, usec=400_000_000) + xid(5, usec=450_000_000)
               + xid(6, code=79, bus=OTHER_BUS, usec=460_000_000))
    c = node.collector()
    first = node.poll(c)
    assert states(first) == {"ok": 1, "off": 0, "absent": 0, "unreadable": 0, "error": 0}
    assert first.get("gpu_exporter_kernel_log_records_lost_total") == 4  # 0-3 overwritten
    # the counters stand at 0 at the first poll, the Xids are its increase at the next
    assert reading(first) == KernelLogReading("ok")
    node.write(xid(7, usec=990_000_000))
    second = reading(node.poll(c))
    boot = WALL - 1000.5
    got = {(k.gpu, k.uuid, k.xid): (k.count, k.before_start, k.first_at, k.last_at)
           for k in second.xids}
    assert got == {(0, UUID, 13): (3, 2, boot + 400, boot + 990),
                   (-1, "", 79): (1, 1, boot + 460, boot + 460)}
    assert second.counts == {(0, UUID, 13): (2, 1), (-1, "", 79): (1, 0)}


def test_a_gpu_nvml_does_not_list_keeps_the_uuid_the_driver_printed(node: Node) -> None:
    (node.procfs / "uptime").write_text("10.0 1.0\n")
    other_uuid = "GPU-6a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
    node.write(line(0, f"NVRM: GPU at PCI:{OTHER_BUS}: {other_uuid}")
               + xid(1, code=79, bus=OTHER_BUS) + xid(2, code=79, bus="0000:3c:00")
               + xid(3, code=79, bus="0000:3d:00"))
    c = node.collector()
    node.poll(c)
    got = reading(node.poll(c))
    assert {(k.gpu, k.uuid) for k in got.xids} == {(-1, other_uuid), (-1, "")}
    # two buses with no GPU and no UUID are one unknown GPU: their lines add up
    assert got.counts == {(-1, other_uuid, 79): (1, 0), (-1, "", 79): (2, 0)}


@pytest.mark.parametrize("uptime", [None, "", "   \n", "up a while\n"])
def test_without_a_readable_uptime_the_monotonic_clock_stands_for_it(
        node: Node, uptime: str | None) -> None:
    if uptime is not None:
        (node.procfs / "uptime").write_text(uptime)
    node.write(xid(0, usec=2_000_000))
    c = node.collector()
    node.poll(c)
    (k,) = reading(node.poll(c)).xids
    assert k.first_at == WALL - 5000.0 + 2.0


def test_sxids_nic_events_and_overflow_are_exported(node: Node) -> None:
    node.write(line(0, "nvidia-nvswitch1: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32")
               + line(1, "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 19")
               + line(2, "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 19")
               + line(3, "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 20009, Link 2 down")
               + line(4, "mlx5_core 0000:1a:00.0 ibp26s0: Link down"))
    c = node.collector()
    snap = node.poll(c)
    # in order of switch, bus and code; fatal left empty where the line does not say
    assert snap.series("gpu_nvswitch_sxid_errors_total") == [
        ({"nvswitch": "nvidia-nvswitch0", "pci_bus_id": "0000:c3:00.0", "sxid": "20009",
          "fatal": ""}, 1),
        ({"nvswitch": "nvidia-nvswitch0", "pci_bus_id": "0000:c3:00.0", "sxid": "24007",
          "fatal": "true"}, 2),
        ({"nvswitch": "nvidia-nvswitch1", "pci_bus_id": "0000:05:00.0", "sxid": "12028",
          "fatal": "false"}, 1),
    ]
    assert snap.get("gpu_nic_kernel_events_total", pci_bus_id="0000:1a:00.0",
                    event="link_down") == 1
    assert snap.get("gpu_exporter_kernel_log_overflow_total") == 0
    c.store.max_keys = 1
    node.write(xid(5, pid=1) + xid(6, pid=2) + xid(7, pid=3))
    assert node.poll(c).get("gpu_exporter_kernel_log_overflow_total") == 2


def test_the_process_an_xid_line_names_is_looked_up_when_read(node: Node) -> None:
    tck = os.sysconf("SC_CLK_TCK")
    d = node.procfs / "4242"
    d.mkdir()
    fields = ["S", "1"] + ["0"] * 17 + [str(1 * tck)] + ["0"] * 5
    (d / "stat").write_text("4242 (python3) " + " ".join(fields) + "\n")
    (d / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n")
    node.write(xid(0, pid=4242, usec=5_000_000) + xid(1, code=79, usec=6_000_000))
    c = node.collector()
    node.poll(c)
    (d / "cgroup").unlink()  # the process exits: what was read stays
    got = {k.xid: k.culprit for k in reading(node.poll(c)).xids}
    assert got == {13: XidCulprit(4242, "python3", slurm_job_id="77"), 79: None}


def test_no_path_is_off_and_reads_nothing(node: Node) -> None:
    c = node.collector(path="")
    snap = node.poll(c)
    assert states(snap) == {"ok": 0, "off": 1, "absent": 0, "unreadable": 0, "error": 0}
    assert snap.get("gpu_exporter_kernel_log_records_lost_total") == 0
    assert reading(snap).state == "off" and c.state == KmsgState.OFF


def test_an_absent_log_is_said_once_and_tried_again_every_minute(
        node: Node, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    c = node.collector()
    assert states(node.poll(c))["absent"] == 1
    node.write(xid(0))
    node.mono.now += RETRY_S - 0.01
    assert reading(node.poll(c)).state == "absent"  # not tried again yet
    node.mono.now += 0.01
    assert reading(node.poll(c)).state == "ok"
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LOGGER] == [
        ("INFO", f"kernel log off: no {node.log}; Xids are counted from NVML's events only"),
        ("INFO", f"reading the kernel log {node.log} again"),
    ]


def test_a_log_that_cannot_be_read_is_a_warning_said_once(
        node: Node, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    node.log.mkdir()  # not a record stream
    c = node.collector()
    for _ in range(3):
        assert states(node.poll(c))["error"] == 1
        node.mono.now += RETRY_S
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    assert said == [("WARNING", f"kernel log not read: {node.log}: neither the kmsg device "
                                "nor a regular file")]


def test_a_poll_reads_at_most_its_share_and_the_rest_waits(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector_module, "MAX_RECORDS_PER_POLL", 4)
    node.write(b"".join(xid(i, code=31) for i in range(10)))
    c = node.collector()
    node.poll(c)
    assert c.store.totals[(BUS, 31)].before_start == 4
    node.poll(c)
    node.poll(c)
    assert c.store.totals[(BUS, 31)].live == 6  # 4, then the 2 left


def test_a_poll_reads_past_garbage_but_at_most_its_bytes(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    garbage = (b"\x00" * 255 + b"\n") * 4096  # one batch (1 MiB) of lines that are not records
    node.write(garbage + garbage + xid(0, code=43))
    c = node.collector()
    snap = node.poll(c)
    assert c.store.totals[(BUS, 43)].before_start == 1  # two batches found nothing: read on
    # each line skipped is said, once, in the exporter's own counter
    assert snap.get("gpu_exporter_kernel_log_records_malformed_total") == 2 * 4096
    monkeypatch.setattr(collector_module, "MAX_BYTES_PER_POLL", len(garbage) * 2)
    node.write(garbage + garbage + xid(1, code=45))
    node.poll(c)
    assert (BUS, 45) not in c.store.totals  # what is left waits for the next poll
    node.poll(c)
    assert c.store.totals[(BUS, 45)].live == 1


def test_a_line_cut_at_the_end_of_what_was_read_is_counted_as_it_stands(node: Node) -> None:
    node.write(f"3,0,0,c;NVRM: Xid (PCI:{BUS}): 62, ".encode() + b"\n"
               + b"3,1,0,+;pid=9, name=x, y\n" + b"3,2,0,c;NVRM: Xid (PCI:" + BUS.encode()
               + b"): 64, part\n")
    c = node.collector()
    node.poll(c)
    assert c.store.xids[(BUS, 62, 9, None)].count == 1
    assert c.store.totals[(BUS, 64)].before_start == 1  # not held back for its rest


# --- the reader's own thread -----------------------------------------------------------

class Device:
    """/dev/kmsg as the thread sees it: a descriptor poll() says is readable
    when a record waits (a pipe holding a byte per record), and read()
    answering one record per call, an errno, or EAGAIN."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        self.fds: set[int] = set()
        self.answers: list[bytes | int | Exception | threading.Event] = []
        self.reads = 0
        self._lock = threading.Lock()
        self._blockers: list[int] = []

    def opener(self, path: str, flags: int) -> int:
        # a descriptor of a new number each time (the thread must poll the new one)
        self._blockers.append(os.open(os.devnull, os.O_RDONLY))
        fd = os.dup(self._r)
        os.set_blocking(fd, False)
        self.fds.add(fd)
        return fd

    def push(self, answer: bytes | int | Exception | threading.Event) -> None:
        with self._lock:
            self.answers.append(answer)
            os.write(self._w, b"r")

    def read(self, fd: int, size: int) -> bytes:
        if fd not in self.fds:
            return REAL_READ(fd, size)
        with self._lock:
            self.reads += 1
            if not self.answers:
                raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
            REAL_READ(fd, 1)
            answer = self.answers.pop(0)
        if isinstance(answer, int):
            raise OSError(answer, os.strerror(answer))
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, threading.Event):  # a read that hangs until set
            answer.wait(5.0)
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return answer

    def fstat(self, fd: int) -> os.stat_result:
        st = REAL_FSTAT(fd)
        if fd not in self.fds:
            return st
        fields = list(st)
        fields[0] = stat.S_IFCHR | 0o600
        return os.stat_result(fields, {"st_rdev": os.makedev(*KMSG_DEVICE)})

    def close(self) -> None:
        for fd in (self._r, self._w, *self._blockers):
            os.close(fd)


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> Iterator[Device]:
    fake = Device()
    monkeypatch.setattr(os, "read", fake.read)
    monkeypatch.setattr(os, "fstat", fake.fstat)
    yield fake
    fake.close()


def wait_for(condition: Callable[[], bool], within: float) -> float:
    """Seconds until ``condition()`` held; fails after ``within``."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < within, "not within the time"
        time.sleep(0.005)
    return time.monotonic() - start


def kmsg_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "kmsg"]


def test_the_thread_wakes_on_a_record_and_stops_at_once_on_close(
        device: Device, node: Node) -> None:
    c = node.collector(synchronous=False, opener=device.opener)
    node.poll(c)
    assert c.store.started and len(kmsg_threads()) == 1
    time.sleep(0.05)  # the thread is waiting now
    device.push(xid(0, code=13))
    # woken by the record, not by the wait's end (1 s)
    assert wait_for(lambda: (BUS, 13) in c.store.totals, within=0.7) < 0.7
    assert c.store.totals[(BUS, 13)].live == 1
    reads = device.reads
    time.sleep(0.2)
    assert device.reads - reads <= 3  # waiting, not reading over and over
    start = time.monotonic()
    c.close()
    assert time.monotonic() - start < 0.5
    assert kmsg_threads() == [] and c._reader is not None and c._reader.fd is None


def test_the_thread_opens_the_log_again_after_an_error_and_polls_the_new_one(
        device: Device, node: Node, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    c = node.collector(synchronous=False, opener=device.opener)
    node.poll(c)
    time.sleep(0.05)
    device.push(errno.EIO)
    wait_for(lambda: c.state == KmsgState.ERROR, within=0.7)
    node.mono.now += RETRY_S
    wait_for(lambda: c.state == KmsgState.OK, within=1.9)  # tried again within its second
    time.sleep(0.05)
    device.push(xid(1, code=45))
    assert wait_for(lambda: (BUS, 45) in c.store.totals, within=0.7) < 0.7
    reads = device.reads
    time.sleep(0.2)
    assert device.reads - reads <= 3
    said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert said == [f"kernel log not read: {node.log}: {os.strerror(errno.EIO)}",
                    f"reading the kernel log {node.log} again"]


def test_the_thread_outlives_a_surprise_and_says_so(device: Device, node: Node,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    c = node.collector(synchronous=False, opener=device.opener)
    node.poll(c)
    device.push(ValueError("surprise"))
    wait_for(lambda: any(r.exc_info for r in caplog.records if r.name == LOGGER), within=0.7)
    (said,) = [r for r in caplog.records if r.name == LOGGER]
    assert said.getMessage() == "reading the kernel log failed; trying again in 1 s"
    device.push(xid(2, code=48))
    took = wait_for(lambda: (BUS, 48) in c.store.totals, within=1.9)
    assert took > 0.5  # after the pause it said
    assert c.state == KmsgState.OK


def test_the_thread_reads_what_a_file_gains_and_stops_at_once(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    node.write(xid(0, code=13))
    c = node.collector(synchronous=False)
    node.poll(c)
    assert [t.daemon for t in kmsg_threads()] == [True]  # never holds the exporter's exit
    reads = 0

    def read(fd: int, size: int) -> bytes:
        nonlocal reads
        reads += 1
        return REAL_READ(fd, size)

    monkeypatch.setattr(os, "read", read)
    node.write(xid(1, code=31))
    wait_for(lambda: (BUS, 31) in c.store.totals, within=1.9)  # read within its second
    time.sleep(0.3)
    assert reads <= 8  # a file is looked at once a second, not polled (always "ready")
    time.sleep(0.05)
    start = time.monotonic()
    c.close()
    assert time.monotonic() - start < 0.5 and kmsg_threads() == []


def test_closing_frees_every_descriptor(tmp_path: Path, node: Node) -> None:
    before = set(os.listdir("/proc/self/fd"))
    node.write(xid(0))
    for synchronous in (True, False):
        c = node.collector(synchronous=synchronous)
        node.poll(c)
        c.close()
        c.close()  # twice is harmless
    assert set(os.listdir("/proc/self/fd")) == before


def test_a_close_does_not_wait_for_ever_on_a_read_that_hangs(device: Device, node: Node) -> None:
    c = node.collector(synchronous=False, opener=device.opener)
    node.poll(c)
    gate = threading.Event()
    reads = device.reads
    device.push(gate)
    wait_for(lambda: device.reads > reads, within=0.7)
    start = time.monotonic()
    c.close()
    took = time.monotonic() - start
    assert 1.9 < took < 2.9  # it waited its two seconds, then left the thread its descriptors
    assert len(kmsg_threads()) == 1 and c._reader is not None and c._reader.fd is not None
    gate.set()
    wait_for(lambda: not kmsg_threads(), within=1.0)
    c.close()
    assert c._reader.fd is None


# --- a poll's share of a long log ------------------------------------------------------

def test_a_poll_counts_exactly_its_share_across_batches(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector_module, "MAX_RECORDS_PER_POLL", 5000)
    size = 256  # 4096 records a batch
    node.write(b"".join(f"3,{i},0,-;NVRM: Xid (PCI:{BUS}): 31, ".encode().ljust(size - 1, b"x")
                        + b"\n" for i in range(10_000)))
    c = node.collector()
    node.poll(c)
    assert c.store.totals[(BUS, 31)].before_start == 5000
    node.poll(c)
    assert c.store.totals[(BUS, 31)].live == 5000


def test_a_line_in_fragments_before_an_error_is_counted_at_that_poll(
        device: Device, node: Node) -> None:
    device.push(f"3,0,0,c;NVRM: Xid (PCI:{BUS}): 62, pid=9, name=x, ".encode() + b"\n")
    device.push(errno.EIO)
    device.push(errno.EIO)  # the device failing, at every read
    c = node.collector(opener=device.opener)
    node.poll(c)
    assert c.state == KmsgState.ERROR
    assert c.store.totals[(BUS, 62)].before_start == 1


def test_an_xid_74s_link_reaches_the_reading(node: Node) -> None:
    node.write(line(0, f"NVRM: Xid (PCI:{BUS}): 74, pid='<unknown>', name=<unknown>, NVLink: "
                       "fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"))
    c = node.collector()
    node.poll(c)
    assert [(k.xid, k.link) for k in reading(node.poll(c)).xids] == [(74, 14)]


def test_built_from_the_settings(tmp_path: Path, node: Node) -> None:
    (node.procfs / "uptime").write_text("100.0 1.0\n")
    node.write(xid(0, usec=50_000_000))
    rt = Runtime(Settings(path={"kmsg": str(node.log), "procfs": node.procfs}), session(),
                 monotonic=Clock(7.0), wall_clock=Clock(WALL), synchronous=True)
    c = KmsgCollector.build(rt)
    node.made.append(c)
    node.poll(c)
    (k,) = reading(node.poll(c)).xids
    assert (k.gpu, k.uuid, k.first_at) == (0, UUID, WALL - 100.0 + 50.0)
    assert kmsg_threads() == []  # synchronous: read on the poll's thread
    (node.procfs / "uptime").unlink()
    node.write(xid(1, code=31, usec=60_000_000))
    got = {k.xid: k.first_at for k in reading(node.poll(c)).xids}
    assert got[31] == WALL - 7.0 + 60.0  # the runtime's monotonic clock stands for the uptime


# --- the process of an Xid, at the edges -----------------------------------------------

def proc_stat(pid: int, comm: str, start_s: float) -> str:
    fields = ["S", "1"] + ["0"] * 17 + [str(round(start_s * _CLK_TCK))] + ["0"] * 5
    return f"{pid} ({comm}) " + " ".join(fields) + "\n"


POD = ("0::/kubepods.slice/kubepods-pod1234abcd_5678_90ab_cdef_1234567890ab.slice/"
       "cri-containerd-" + "c" * 64 + ".scope\n")


def test_a_process_started_half_a_second_after_its_line_is_still_its(tmp_path: Path) -> None:
    d = tmp_path / "50"
    d.mkdir()
    (d / "stat").write_text(proc_stat(50, "python3", 100.5))
    (d / "cgroup").write_text(POD)
    found = find_culprit(tmp_path, XidEntry(BUS, 13, 50, "python3", 1, 100_000_000,
                                            100_000_000, 0))
    assert found is not None and found.container_id == "c" * 64


def test_a_process_whose_cgroup_is_gone_is_named_without_a_workload(tmp_path: Path) -> None:
    d = tmp_path / "51"
    d.mkdir()
    (d / "stat").write_text(proc_stat(51, "python3", 10.0))
    found = find_culprit(tmp_path, XidEntry(BUS, 13, 51, "python3", 1, 100_000_000,
                                            100_000_000, 0))
    assert found == XidCulprit(51, "python3")


def test_the_comm_is_between_the_first_open_and_the_last_close_parenthesis() -> None:
    tail = " ".join(["S", "1"] + ["0"] * 17 + ["250"] + ["0"] * 5)
    assert _stat_comm_start(f"(a) b) {tail}") == ("a) b", 250 / _CLK_TCK)
    # the wrong way round, however many fields follow
    assert _stat_comm_start(f"7 ) x ( {tail}") is None
    assert _stat_comm_start(f"7 ) x {tail}") is None
    assert _stat_comm_start(f"7 ( x {tail}") is None


# --- each Xid once: NVML's events and the log's lines -----------------------------------

def test_the_log_adds_only_what_nvml_did_not_count() -> None:
    kernel = KernelLogReading("ok", counts={
        (0, "GPU-a", 13): (0, 3),  # after start, and NVML saw 3: nothing to add
        (1, "GPU-b", 79): (2, 0),  # before start on a GPU NVML never saw an Xid of
        (2, "GPU-c", 31): (1, 5),  # NVML saw 2 of the 5
        (4, "GPU-e", 13): (1, 1),  # NVML saw 4: the log lost lines NVML delivered
    })
    nvml = {(0, "GPU-a", 13): 3, (2, "GPU-c", 31): 2, (3, "GPU-d", 48): 1, (4, "GPU-e", 13): 4}
    assert merge_counts(nvml, kernel) == {(0, "GPU-a", 13): 3, (1, "GPU-b", 79): 2,
                                          (2, "GPU-c", 31): 6, (3, "GPU-d", 48): 1,
                                          (4, "GPU-e", 13): 5}
    assert merge_counts(nvml, None) == nvml


def kxid(xid: int, count: int, before: int, first: float, last: float,
         culprit: XidCulprit | None = None, link: int | None = None, gpu: int = 0) -> KernelXid:
    return KernelXid(gpu, f"GPU-{gpu}", xid, culprit, count, before, first, last, link)


def seen(events: list[XidEvent]) -> list[tuple[object, ...]]:
    return [(e.gpu, e.uuid, e.xid, e.at, e.culprit, e.source, e.link, e.lines) for e in events]


def test_lines_before_start_stand_at_their_last_time_or_their_first_when_more_came() -> None:
    who = XidCulprit(9, "python3")
    kernel = KernelLogReading("ok", [kxid(79, 2, 2, 10.0, 20.0, who, link=3),
                                     kxid(74, 3, 1, 30.0, 40.0, link=5)])
    got = seen(merge_events([], kernel))
    assert got == [
        (0, "GPU-0", 79, 20.0, who, "kernel_log", 3, 2),  # all before: at the last
        (0, "GPU-0", 74, 30.0, None, "kernel_log", 5, 1),  # some after: at the first
        (0, "GPU-0", 74, 40.0, None, "kernel_log", 5, 2),  # NVML saw none of the 2 after
    ]


def test_an_event_matches_a_line_within_the_window_edges_included() -> None:
    who = XidCulprit(9, "python3")
    events = [XidEvent(0, "GPU-0", 13, 990.0), XidEvent(0, "GPU-0", 13, 1015.0)]
    kernel = KernelLogReading("ok", [kxid(13, 2, 0, 1000.0, 1005.0, who, link=7)])
    got = seen(merge_events(events, kernel))
    assert got == [(0, "GPU-0", 13, 990.0, who, "nvml", 7, 1),
                   (0, "GPU-0", 13, 1015.0, who, "nvml", 7, 1)]
    late = [XidEvent(0, "GPU-0", 13, 1015.5)]
    # outside: unmatched, the line stands alone with what it names
    assert seen(merge_events(late, kernel)) == [
        (0, "GPU-0", 13, 1005.0, who, "kernel_log", 7, 2),
        (0, "GPU-0", 13, 1015.5, None, "nvml", None, 1)]
    # unless NVML's events were taken that late
    assert seen(merge_events(late, kernel, late_s=0.5)) == [
        (0, "GPU-0", 13, 1015.5, who, "nvml", 7, 1)]
    early = [XidEvent(0, "GPU-0", 13, 989.0)]
    assert [e.source for e in merge_events(early, kernel)] == ["nvml", "kernel_log"]


def test_an_event_is_matched_once_and_keeps_what_it_already_names() -> None:
    mine, other = XidCulprit(1, "a"), XidCulprit(2, "b")
    events = [XidEvent(0, "GPU-0", 13, 100.0, culprit=mine, link=1)]
    kernel = KernelLogReading("ok", [kxid(13, 1, 0, 100.0, 100.0, other, link=2),
                                     kxid(13, 1, 0, 101.0, 101.0, None, None)])
    assert seen(merge_events(events, kernel)) == [
        (0, "GPU-0", 13, 100.0, mine, "nvml", 1, 1),
        # the second line found the event taken: it stands alone
        (0, "GPU-0", 13, 101.0, None, "kernel_log", None, 1)]
    # a line naming nothing takes nothing from an event
    bare = [XidEvent(0, "GPU-0", 13, 100.0, culprit=mine, link=1)]
    assert seen(merge_events(bare, KernelLogReading("ok", [kxid(13, 1, 0, 100.0, 100.0)]))) \
        == [(0, "GPU-0", 13, 100.0, mine, "nvml", 1, 1)]


def test_a_line_of_another_gpu_or_code_matches_no_event() -> None:
    events = [XidEvent(0, "GPU-0", 13, 100.0)]
    kernel = KernelLogReading("ok", [kxid(31, 1, 0, 100.0, 100.0),
                                     kxid(13, 1, 0, 100.0, 100.0, gpu=1)])
    assert [(e.gpu, e.xid, e.source) for e in merge_events(events, kernel)] == [
        (0, 13, "nvml"), (0, 31, "kernel_log"), (1, 13, "kernel_log")]


def test_the_newest_events_are_kept_and_nvmls_alone_pass_untouched() -> None:
    many = [XidEvent(0, "GPU-0", 13, float(t)) for t in range(300)]
    assert merge_events(many, None) == many[-256:]
    assert merge_events(many, KernelLogReading("ok")) == many[-256:]
    unordered = [XidEvent(0, "GPU-0", 13, 5.0), XidEvent(0, "GPU-0", 13, 1.0)]
    assert merge_events(unordered, KernelLogReading("ok")) == unordered
    kernel = KernelLogReading("ok", [kxid(79, 1, 1, 0.5, 0.5)])
    merged = merge_events(many, kernel)
    assert len(merged) == 256 and merged[-1].at == 299.0
    assert merge_events(many, kernel, keep=3) == many[-3:]
