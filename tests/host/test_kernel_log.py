"""The kernel log (/dev/kmsg): the driver's Xid and SXid lines of several
branches, the record framing, floods, a log the exporter may not read, and
the two things NVML's events cannot give: Xids from before the exporter
started, and the process (and its pod or Slurm job) of each Xid."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.collectors import kmsg as kmsg_collector
from gpu_exporter.collectors.kmsg import find_culprit, merge_counts, merge_events
from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.host.driver_log import MAX_KEYS, DriverLog, XidEntry
from gpu_exporter.host.kmsg import (
    KmsgReader,
    KmsgState,
    KmsgUnavailable,
    Record,
    parse_record,
    split_records,
)
from gpu_exporter.host.nvrm import GpuUuidLine, SxidLine, XidLine, bus_key, parse_line
from gpu_exporter.poll.readings import KernelLogReading, KernelXid, XidCulprit, XidEvent
from tests.exposition import values as _values
from tests.onegpu import OneGpu
from tests.simnode import SimRun

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kmsg"
LONG = os.environ.get("GPU_EXPORTER_LONG_TESTS") == "1"
LOGGER = "gpu_exporter.collectors.kmsg"


def _log(path: Path) -> DriverLog:
    records, rest = split_records(path.read_bytes())
    assert rest == b""
    store = DriverLog()
    for raw in records:
        record = parse_record(raw)
        assert record is not None, raw
        store.add(record)
    return store


# --- the driver's lines, branch by branch ---------------------------------------------

@pytest.mark.parametrize(("message", "expected"), [
    # R3xx: no "PCI:" and no process.
    ("NVRM: Xid (0000:01:00): 13, 0003 00000000 0000a197 00000408 00000000 00000200",
     XidLine("0000:01:00", 13, None, "")),
    # R4xx: "PCI:", no process.
    ("NVRM: Xid (PCI:0000:1A:00): 32, Channel ID 00000011 intr 00040000",
     XidLine("0000:1a:00", 32, None, "")),
    ("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
     XidLine("0000:3b:00", 79, None, "")),
    # R460 and newer: the process, or '<unknown>'.
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
     "the bus.", XidLine("0000:3b:00", 79, None, "")),
    ("NVRM: Xid (PCI:0000:18:00): 13, pid=1234, name=python3, Graphics SM Warp Exception on "
     "(GPC 1, TPC 0, SM 1): Illegal Instruction Encoding", XidLine("0000:18:00", 13, 1234,
                                                                   "python3")),
    # GB200: a PCI domain, names with ':' and brackets.
    ("NVRM: Xid (PCI:0018:01:00): 145, pid=512340, name=ray::TrainWork, RLW_RXPIPE Nonfatal "
     "XC0 i0 Link 07", XidLine("0018:01:00", 145, 512340, "ray::TrainWork")),
    ("NVRM: Xid (PCI:0002:00:00): 119, pid=902211, name=nvc:[driver], Timeout after 6s",
     XidLine("0002:00:00", 119, 902211, "nvc:[driver]")),
    # A name at the end of the line.
    ("NVRM: Xid (PCI:0000:18:00): 43, pid=7, name=x", XidLine("0000:18:00", 43, 7, "x")),
    ("NVRM: GPU at PCI:0000:1a:00: GPU-6a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9",
     GpuUuidLine("0000:1a:00", "GPU-6a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9")),
    ("nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 19 sourcetrack timeout",
     SxidLine("nvidia-nvswitch0", "0000:c3:00.0", 24007, True)),
    ("nvidia-nvswitch2: SXid (PCI:0000:0b:00.0): 01004, Non-fatal, Link 04 ingress",
     SxidLine("nvidia-nvswitch2", "0000:0b:00.0", 1004, False)),
])
def test_each_branchs_format_is_read(message: str, expected: object) -> None:
    assert parse_line(message) == expected


@pytest.mark.parametrize("message", [
    # Truncated before the code ends: a 7 must never be read out of a 79.
    "NVRM: Xid (PCI:0000:18:00): 7",
    "NVRM: Xid (PCI:0000:18:0",
    "NVRM: Xid error: xyz, invalid data",
    "NVRM: Xid (PCI:0000:18:00): 99999999, too long",
    # Another subsystem quoting the driver is not the driver.
    "audit: comm=\"x\" NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, y",
    "nvidia-nvswitch0: SXid (PCI:0000:c1:00.0): garbled, Fatal",
    "NVRM: GPU at PCI:0000:1a:00: not-a-uuid",
    "",
])
def test_truncated_and_foreign_lines_are_not_xids(message: str) -> None:
    assert parse_line(message) is None


def test_the_fixture_of_several_branches() -> None:
    store = _log(FIXTURES / "branches.kmsg")
    got = {(e.bus, e.code, e.pid): (e.process, e.count) for e in store.xids.values()}
    assert got == {
        ("0000:01:00", 13, None): ("", 1),
        ("0000:1a:00", 32, None): ("", 1),
        ("0000:1a:00", 69, None): ("", 1),
        ("0000:3b:00", 79, None): ("", 1),
        ("0000:18:00", 13, 4242): ("python3", 2),
        ("0000:18:00", 31, 4243): ("pt_main_thread", 1),
        ("0018:01:00", 145, 512340): ("ray::TrainWork", 1),
        ("0002:00:00", 119, 902211): ("nvc:[driver]", 1),
        # The escape code of a hostile process name, unescaped: it is escaped
        # again for whatever shows it.
        ("0000:18:00", 43, 4242): ("py\x1b[2Jthon", 1),
    }
    # The line written by user space (facility 1) claiming an Xid 79 is not one.
    assert ("0000:18:00", 79) not in store.totals
    assert {(e.switch, e.code, e.fatal, e.count) for e in store.sxids.values()} == {
        ("nvidia-nvswitch0", 20009, False, 1), ("nvidia-nvswitch0", 24007, True, 1),
        ("nvidia-nvswitch2", 1004, False, 1)}
    assert store.uuids == {"0000:1a:00": "GPU-6a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"}
    entry = store.xids[("0000:18:00", 13, 4242, None)]
    assert (entry.first_usec, entry.last_usec) == (920000000, 920000100)
    assert store.records == 20  # continuation lines belong to their record


def test_bus_ids_of_nvml_and_of_the_log_meet() -> None:
    assert bus_key("00000000:1A:00.0") == bus_key("0000:1a:00") == "0000:1a:00"
    assert bus_key("00000018:01:00.0") == "0018:01:00"
    assert bus_key("00010000:1a:00.0") == ""  # no 32-bit PCI domain in the log's form
    assert bus_key("garbage") == ""


# --- the record framing ----------------------------------------------------------------

def test_records_with_continuation_lines_escapes_and_unknown_fields() -> None:
    data = (b"7,160,424069,-;pci_root PNP0A03:00: host bridge window\n"
            b" SUBSYSTEM=acpi\n DEVICE=+acpi:PNP0A03:00\n"
            b"4,161,5140900,-,caller=T1;NVRM: back\\x5cslash and \\x1b[31mred\n"
            b"6,162,5690716,-;unfinished")
    records, rest = split_records(data)
    assert rest == b"6,162,5690716,-;unfinished"
    first, second = (parse_record(r) for r in records)
    assert first == Record(0, 7, 160, 424069, "-", "pci_root PNP0A03:00: host bridge window")
    # Future fields before ';' are ignored; escapes are undone.
    assert second is not None and second.message == "NVRM: back\\slash and \x1b[31mred"


@pytest.mark.parametrize("raw", [b"no separator\n", b"x,1,2,-;text\n", b"6,1;text\n",
                                 b"6,1,99999999999999999999999,-;text\n", b";\n", b""])
def test_malformed_records_are_refused(raw: bytes) -> None:
    assert parse_record(raw) is None


def test_orphan_continuation_lines_are_dropped() -> None:
    records, rest = split_records(b" KEY=value\n6,1,2,-;line\n")
    assert records == [b"6,1,2,-;line\n"] and rest == b""


# --- the device: one record per read, EPIPE, EAGAIN --------------------------------------

@pytest.mark.parametrize(("error", "state"), [
    (PermissionError(errno.EACCES, "Permission denied"), KmsgState.UNREADABLE),
    (PermissionError(errno.EPERM, "Operation not permitted"), KmsgState.UNREADABLE),
    (FileNotFoundError(errno.ENOENT, "No such file"), KmsgState.ABSENT),
    (OSError(errno.EIO, "Input/output error"), KmsgState.ERROR),
])
def test_a_log_that_cannot_be_opened_is_a_state(error: OSError, state: KmsgState) -> None:
    def opener(path: str, flags: int) -> int:
        raise error

    reader = KmsgReader("/dev/kmsg", opener)
    with pytest.raises(KmsgUnavailable) as raised:
        reader.open()
    assert raised.value.state == state
    if state == KmsgState.UNREADABLE:
        assert "CAP_SYSLOG" in raised.value.detail


def test_a_directory_is_not_a_log(tmp_path: Path) -> None:
    with pytest.raises(KmsgUnavailable) as raised:
        KmsgReader(str(tmp_path)).open()
    assert raised.value.state == KmsgState.ERROR


def test_this_machines_own_log_reads_as_records() -> None:
    """The real /dev/kmsg where this test may read it: every record parses."""
    reader = KmsgReader()
    try:
        reader.open()
    except KmsgUnavailable as exc:
        pytest.skip(f"/dev/kmsg: {exc.detail}")
    try:
        records = reader.read(5000)
    finally:
        reader.close()
    assert reader.malformed == 0
    seqs = [r.seq for r in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


# --- floods ------------------------------------------------------------------------------

def _flood(path: Path, lines: int, distinct_pids: int = 29) -> None:
    """``lines`` Xid 95 lines over 8 GPUs and ``distinct_pids`` processes (a
    node's 800,000 lines with 29 distinct: NVIDIA/NVSentinel#1120)."""
    buses = [f"0000:{b:02x}:00".encode() for b in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA,
                                                   0xDB)]
    with open(path, "wb") as f:
        chunk = []
        for i in range(lines):
            chunk.append(b"4,%d,%d,-;NVRM: Xid (PCI:%s): 95, pid=%d, name=python3, "
                         b"Uncontained: FBHUB. RST: Yes, D-RST: No\n"
                         % (i, 10**6 + i, buses[i % 8], 1000 + i % distinct_pids))
            if len(chunk) == 10000:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))


def _read_flood(path: Path, measure_memory: bool) -> tuple[DriverLog, float, int]:
    """The store after reading the whole file, the CPU seconds it took and
    the peak of memory allocated while reading (tracemalloc, which slows the
    reading some sevenfold: only where asked)."""
    reader = KmsgReader(str(path))
    reader.open()
    store = DriverLog()
    if measure_memory:
        tracemalloc.start()
    started = time.process_time()
    try:
        while records := reader.read(4096):
            for record in records:
                store.add(record)
        took = time.process_time() - started
        peak = tracemalloc.get_traced_memory()[1] if measure_memory else 0
    finally:
        tracemalloc.stop()
        reader.close()
    return store, took, peak


def _check_flood(store: DriverLog, lines: int) -> None:
    assert store.records == lines
    # 29 pids over 8 GPUs: each (GPU, pid) pair that occurs is one key.
    assert len(store.xids) == len({(i % 8, i % 29) for i in range(min(lines, 8 * 29))})
    assert sum(e.count for e in store.xids.values()) == lines
    assert sum(t.before_start for t in store.totals.values()) == lines


# The default run reads 100,000 lines for their count and CPU, and measures
# the memory of 20,000; the long form measures the memory of 1,000,000.
@pytest.mark.parametrize(("lines", "measured"), [(1_000_000, 1_000_000)] if LONG
                         else [(100_000, 20_000)])
def test_a_flood_of_duplicate_lines_costs_bounded_memory(tmp_path: Path, lines: int,
                                                         measured: int) -> None:
    path = tmp_path / "flood.kmsg"
    _flood(path, lines)
    store, took, _ = _read_flood(path, measure_memory=False)
    _check_flood(store, lines)
    _flood(path, measured)
    store, _, peak = _read_flood(path, measure_memory=True)
    _check_flood(store, measured)
    # The memory of reading it is the read buffer's and one batch's, not the
    # flood's: the same whatever its length (measured on the 2-core
    # development machine: 3.4 MiB peak for 100,000 lines and for 1,000,000).
    assert peak < 8 * 2**20, f"{peak / 2**20:.1f} MiB"
    print(f"\n{lines} lines: {took:.2f} s CPU; {measured} lines: peak {peak / 2**20:.2f} MiB")


def test_distinct_keys_beyond_the_cap_are_counted_as_overflow() -> None:
    store = DriverLog(max_keys=MAX_KEYS)
    for pid in range(MAX_KEYS + 500):
        store.add(Record(0, 4, pid, pid, "-",
                         f"NVRM: Xid (PCI:0000:18:00): 13, pid={pid + 1}, name=p, x"))
    assert len(store.xids) == MAX_KEYS
    assert store.overflow == 500
    # The count per GPU and code keeps every line.
    assert store.totals[("0000:18:00", 13)].before_start == MAX_KEYS + 500


# --- which process, and whose ------------------------------------------------------------

def _proc(procfs: Path, pid: int, comm: str, start_ticks: int, cgroup: str) -> None:
    d = procfs / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 "
                            f"{start_ticks} 1000 100 18446744073709551615\n")
    (d / "cgroup").write_text(cgroup + "\n")


POD_CGROUP = ("0::/kubepods.slice/kubepods-pod6f1d3c2a_9b7e_4c1d_8e2f_0a1b2c3d4e5f.slice/"
              "cri-containerd-" + "ab" * 32 + ".scope")
SLURM_CGROUP = "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0"


def test_the_process_of_an_xid_names_its_pod_or_slurm_job(tmp_path: Path) -> None:
    tck = os.sysconf("SC_CLK_TCK")
    _proc(tmp_path, 10, "python3", 100 * tck, POD_CGROUP)
    _proc(tmp_path, 11, "python", 100 * tck, SLURM_CGROUP)
    pod = find_culprit(tmp_path, XidEntry("0000:18:00", 13, 10, "python3", 1, 200 * 10**6,
                                          200 * 10**6, 0))
    assert pod == XidCulprit(10, "python3", "6f1d3c2a-9b7e-4c1d-8e2f-0a1b2c3d4e5f", "ab" * 32)
    job = find_culprit(tmp_path, XidEntry("0000:18:00", 31, 11, "python", 1, 200 * 10**6,
                                          200 * 10**6, 0))
    assert job == XidCulprit(11, "python", slurm_job_id="4242")


def test_a_pid_reused_since_the_line_is_not_blamed(tmp_path: Path) -> None:
    tck = os.sysconf("SC_CLK_TCK")
    _proc(tmp_path, 10, "python3", 300 * tck, POD_CGROUP)  # started after the line
    _proc(tmp_path, 11, "bash", 100 * tck, SLURM_CGROUP)  # another name
    late = find_culprit(tmp_path, XidEntry("0000:18:00", 13, 10, "python3", 1, 200 * 10**6,
                                           200 * 10**6, 0))
    other = find_culprit(tmp_path, XidEntry("0000:18:00", 13, 11, "python", 1, 200 * 10**6,
                                            200 * 10**6, 0))
    gone = find_culprit(tmp_path, XidEntry("0000:18:00", 13, 12, "python", 1, 1, 1, 0))
    assert late == XidCulprit(10, "python3")
    assert other == XidCulprit(11, "python")
    assert gone == XidCulprit(12, "python")


# --- each Xid once -----------------------------------------------------------------------

def _kernel(*xids: KernelXid) -> KernelLogReading:
    reading = KernelLogReading("ok", list(xids))
    for k in xids:
        before, after = reading.counts.get((k.gpu, k.uuid, k.xid), (0, 0))
        reading.counts[(k.gpu, k.uuid, k.xid)] = (before + k.before_start,
                                                  after + k.count - k.before_start)
    return reading


def test_xids_seen_by_nvml_and_the_log_are_counted_once() -> None:
    nvml = {(0, "GPU-a", 13): 3, (1, "GPU-b", 79): 1}
    kernel = _kernel(
        # Two before start (NVML never saw them) and the same three NVML did.
        KernelXid(0, "GPU-a", 13, None, 5, 2, 100.0, 300.0),
        # The log lost the line NVML delivered: NVML's count stands.
        # A GPU NVML does not watch: the log alone counts it.
        KernelXid(2, "GPU-c", 31, None, 4, 0, 200.0, 210.0),
    )
    assert merge_counts(nvml, kernel) == {(0, "GPU-a", 13): 5, (1, "GPU-b", 79): 1,
                                          (2, "GPU-c", 31): 4}
    assert merge_counts(nvml, None) == nvml


def test_an_nvml_event_gains_the_process_of_its_line() -> None:
    culprit = XidCulprit(4242, "python3", slurm_job_id="7")
    nvml = [XidEvent(0, "GPU-a", 13, 1000.0), XidEvent(0, "GPU-a", 43, 1001.0),
            XidEvent(1, "GPU-b", 13, 1000.5)]
    kernel = _kernel(KernelXid(0, "GPU-a", 13, culprit, 1, 0, 1000.2, 1000.2),
                     KernelXid(0, "GPU-a", 79, None, 1, 1, 50.0, 50.0))
    merged = merge_events(nvml, kernel)
    # The before-start Xid is added at its own time; the live one is NVML's
    # event with the process, not a second event.
    assert [(e.gpu, e.xid, e.at, e.culprit, e.source) for e in merged] == [
        (0, 79, 50.0, None, "kernel_log"),
        (0, 13, 1000.0, culprit, "nvml"),
        (1, 13, 1000.5, None, "nvml"),
        (0, 43, 1001.0, None, "nvml"),
    ]
    # A line with no event of its GPU and code within the window stands alone.
    far = merge_events([XidEvent(0, "GPU-a", 13, 2000.0)], kernel)
    assert [(e.at, e.source) for e in far] == [(50.0, "kernel_log"), (1000.2, "kernel_log"),
                                                (2000.0, "nvml")]


# --- on a simulated node -----------------------------------------------------------------

SCENARIO = """\
name: kernel-log-test
extends: two-tenant-node
expect: null
gpus:
  2: {xid: [31]}
kernel_log:
  lost: 3
  lines:
    - {at: 0, xid: 13, gpu: 5, pid: 24105, name: python, detail: "Graphics SM Warp Exception"}
    - {at: -3600, xid: 79, gpu: 7}
    - {at: -60, message: "nvidia-nvswitch1: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32"}
    - {at: 2, xid: 43, gpu: 1, pid: 24101, name: python}
    - {at: 2, facility: 1, message: "NVRM: Xid (PCI:{bus}): 79, pid=1, name=x, y", gpu: 0}
timeline:
  - {at: 4, gpus: [3], set: {xid: [13]}}
"""


@pytest.fixture
def scenario(tmp_path: Path) -> Iterator[str]:
    path = tmp_path / "kernel-log-test.yaml"
    path.write_text(SCENARIO)
    yield str(path)


def test_an_xid_before_start_is_counted_after_start(scenario: str) -> None:
    with SimRun(scenario) as run:
        first = run.poll()
        text = run.scrape()
        # The first scrape: every total at 0, as always.
        assert _values(text, "gpu_xid_errors_all_total") == [0.0] * 8
        assert _values(text, "gpu_exporter_kernel_log_state", state="ok") == [1.0]
        run.poll(1)
        text = run.scrape()
        # The Xid at start (NVML registers after it: never delivered), the
        # one at boot, an hour before, and the one of GPU 5's process.
        assert _values(text, "gpu_xid_errors_total", gpu="2", xid="31") == [1.0]
        assert _values(text, "gpu_xid_errors_total", gpu="7", xid="79") == [1.0]
        assert _values(text, "gpu_xid_errors_total", gpu="5", xid="13") == [1.0]
        assert _values(text, "gpu_xid_errors_all_total", gpu="2") == [1.0]
        assert _values(text, "gpu_exporter_kernel_log_records_lost_total") == [3.0]
        assert _values(text, "gpu_nvswitch_sxid_errors_total", nvswitch="nvidia-nvswitch1",
                       sxid="12028", fatal="false") == [1.0]
        assert first is not None
        run.poll(5)
        text = run.scrape()
        # GPU 3's Xid at 4 s: delivered by NVML and logged, counted once; the
        # line user space wrote is no Xid.
        assert _values(text, "gpu_xid_errors_total", gpu="3", xid="13") == [1.0]
        assert _values(text, "gpu_xid_errors_total", gpu="0") == []
        # GPU 1's line after start that NVML did not deliver: the log counts it.
        assert _values(text, "gpu_xid_errors_total", gpu="1", xid="43") == [1.0]


def test_an_application_xid_with_a_pid_names_its_pod(scenario: str) -> None:
    with SimRun(scenario) as run:
        run.poll(6)
        findings = {(f.gpu, f.row.cause): f for f in run.snapshot.derived(FINDINGS)}
        gpu5 = findings[(5, "application_fault")]
        assert gpu5.evidence["xid_process"] == "python (pid 24105)"
        assert gpu5.evidence["xid_owner"] == "ml/train-b/trainer"
        gpu1 = findings[(1, "application_fault")]
        assert gpu1.evidence["xid_owner"] == "ml/train-a/trainer"
        # An Xid whose line names no process names no one.
        assert "xid_owner" not in findings[(3, "application_fault")].evidence


SLURM = """\
name: kernel-log-slurm
extends: healthy
expect: null
processes:
  - {pid: 4300, comm: python, gpus: [6], gpu_memory_ratio: 0.5, sm_utilization: 0.9,
     cpu_ratio: 1.0, state: R}
tenants:
  slurm_jobs:
    - {job_id: 4242, uid: 1001, step: "0", cgroup_version: 2, gpus: [6], pids: [4300]}
kernel_log:
  lines:
    - {at: 1, xid: 31, gpu: 6, pid: 4300, name: python}
"""


def test_an_application_xid_with_a_pid_names_its_slurm_job(tmp_path: Path) -> None:
    path = tmp_path / "slurm.yaml"
    path.write_text(SLURM)
    with SimRun(str(path)) as run:
        run.poll(3)
        findings = {(f.gpu, f.row.cause): f for f in run.snapshot.derived(FINDINGS)}
        # The job and its user, as the tenants declare them.
        owner = findings[(6, "application_fault")].evidence["xid_owner"]
        assert owner == "slurm job 4242 (uid 1001)"
        report = findings[(6, "application_fault")].as_dict()
        assert report["evidence"]["xid_process"] == "python (pid 4300)"  # type: ignore[index]


@pytest.mark.parametrize("error", [errno.EACCES, errno.EPERM])
def test_a_log_not_readable_is_said_once_and_nvml_still_counts(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        scenario: str, error: int) -> None:
    real_open = os.open

    # os.open itself is patched (the module's os is the os module): every
    # other caller still gets it whole, dir_fd included (shutil.rmtree frees
    # the simulated node's files with it; a TypeError there left them behind).
    def refuse(path: str, flags: int, *args: int, **kwargs: int) -> int:
        if str(path).endswith("/dev/kmsg"):
            raise PermissionError(error, os.strerror(error))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(kmsg_collector.os, "open", refuse)
    monkeypatch.setattr(kmsg_collector, "RETRY_S", 1.0)
    caplog.set_level(logging.INFO, logger=LOGGER)
    with SimRun(scenario) as run:
        run.poll(8)
        text = run.scrape()
    assert _values(text, "gpu_exporter_kernel_log_state", state="unreadable") == [1.0]
    # NVML's own: GPU 3's Xid at 4 s. Nothing from the log.
    assert _values(text, "gpu_xid_errors_total", gpu="3", xid="13") == [1.0]
    assert _values(text, "gpu_xid_errors_total", gpu="7") == []
    said = [r for r in caplog.records if r.name == LOGGER]
    assert len(said) == 1 and "CAP_SYSLOG" in said[0].getMessage()


def test_lines_that_arrive_after_start_are_read_as_they_come(tmp_path: Path) -> None:
    """Off the virtual clock the log at start is read by the first poll and
    what comes after by the reader's own thread, with no poll needed; an Xid
    line after start on a GPU NVML did not report counts as live."""
    log = tmp_path / "kmsg"
    log.write_text("4,0,5000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', "
                   "name=<unknown>, GPU has fallen off the bus.\n")
    with OneGpu() as one:
        collector = kmsg_collector.KmsgCollector(one.session, str(log), one.node.procfs,
                                                 one.clock, one.clock, synchronous=False)
        one.built.append(collector)
        one.poll(collector)
        assert collector.store.totals[("0000:18:00", 79)].before_start == 1
        with open(log, "a") as f:
            f.write("4,1,9000000,-;NVRM: Xid (PCI:0000:18:00): 13, pid=77, name=x, y\n")
        deadline = time.monotonic() + 10
        while ("0000:18:00", 13) not in collector.store.totals \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert collector.store.totals[("0000:18:00", 13)].live == 1
        snap = one.poll(collector)
        reading = snap.readings.kmsg
        assert reading is not None and reading.state == "ok"
        gpu = one.session.gpus[0]
        assert reading.counts[(0, gpu.identity.uuid, 13)] == (0, 1)
        assert reading.counts[(0, gpu.identity.uuid, 79)] == (1, 0)
    # Closed with the node: the reader's thread is gone.
    assert not any(t.name == "kmsg" for t in threading.enumerate())


def test_no_path_switches_it_off(scenario: str) -> None:
    with SimRun(scenario, path={"kmsg": ""}) as run:
        run.poll(1)
        text = run.scrape()
    assert _values(text, "gpu_exporter_kernel_log_state", state="off") == [1.0]
    assert _values(text, "gpu_xid_errors_total", gpu="7") == []
