"""What an Xid's kernel log line adds beyond its code: the NVLink an Xid 74
names, and the process of an application Xid's burst of lines.

The lines are shaped as NVIDIA's driver prints them (an Xid 74 as quoted in
AWS's and NVSentinel's material: ``NVLink: fatal error detected on link
6(0x10000, 0x0, ...)``, ``Fatal`` on some branches, ``pid=<unknown>``
unquoted on some; tests/fixtures/kmsg/README.md for the rest), and
hostile ones: a link no GPU has, garbage where the number goes, a process
that names itself like the driver's text or puts escape codes in its name.
On the simulator, the exporter's findings name the link (and still do after
a restart, from the state file), and a burst of Xid 13 lines from two
processes is two findings with each one's count of lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_exporter.diagnosis.engine import FINDINGS, Finding
from gpu_exporter.diagnosis.memory import (
    MAX_FAULTS_PER_GPU,
    MAX_FILE_BYTES,
    MAX_GPUS,
    MAX_PROCESS_FAULTS_PER_GPU,
    FaultMemory,
)
from gpu_exporter.diagnosis.signals import GpuSignals, XidBlame
from gpu_exporter.host.kmsg import parse_record
from gpu_exporter.host.nvrm import XidLine, parse_line
from gpu_exporter.poll.readings import GpuOwner, GpuReading
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.simulator import load_scenario
from gpu_exporter.simulator.kmsg import driver_bus
from gpu_exporter.simulator.model import KernelLog, KernelLogLine, Scenario, XidCondition
from tests.diagnosis.test_fault_memory import BOOT_A, refusals, run, scenario
from tests.simnode import EPOCH

X74 = "NVRM: Xid (PCI:0000:3b:00): 74, "
LINES: list[tuple[str, XidLine | None, str]] = [
    (X74 + "pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 14(0x0, "
     "0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
     XidLine("0000:3b:00", 74, None, "", 14), "the driver's line (R535 and newer)"),
    (X74 + "pid=<unknown>, name=<unknown>, NVLink: fatal error detected on link 6(0x10000, "
     "0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
     XidLine("0000:3b:00", 74, None, "", 6), "pid=<unknown> unquoted"),
    (X74 + "pid=4242, name=python3, NVLink: Fatal error detected on link 0",
     XidLine("0000:3b:00", 74, 4242, "python3", 0), "Fatal, link 0, no register dump"),
    (X74 + "pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 35(0x0)",
     XidLine("0000:3b:00", 74, None, "", 35), "the last link of a 36-link board"),
    (X74 + "pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 64(0x0)",
     XidLine("0000:3b:00", 74, None, "", None), "a link no GPU has: the Xid, no link"),
    (X74 + "pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 1234",
     XidLine("0000:3b:00", 74, None, "", None), "a number of four digits"),
    (X74 + "pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 99999",
     XidLine("0000:3b:00", 74, None, "", None), "more digits than any link"),
    (X74 + "pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link -3",
     XidLine("0000:3b:00", 74, None, "", None), "a negative link"),
    (X74 + "pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link x1f",
     XidLine("0000:3b:00", 74, None, "", None), "garbage for the number"),
    (X74 + "pid=4242, name=NVLink: fatal error detected on link 3, Ch 00000008",
     XidLine("0000:3b:00", 74, 4242, "NVLink: fatal error detected on link 3", None),
     "a process named like the driver's text names no link"),
    (X74 + "pid=4242, name=py\x1b[2Jthon, NVLink: fatal error detected on link 9(0x0)",
     XidLine("0000:3b:00", 74, 4242, "py\x1b[2Jthon", 9), "escape codes in the name"),
    ("NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python3, NVLink: fatal error detected "
     "on link 3", XidLine("0000:18:00", 13, 4242, "python3", None),
     "only an Xid 74 names a link"),
    ("NVRM: Xid (PCI:0000:3b:00): 7", None, "a line cut before its code ends"),
    ("NVRM: Xid (PCI:0000:3b:00): 74", None, "a line cut after its code"),
]


@pytest.mark.parametrize(("message", "expected", "why"), LINES, ids=[c[2] for c in LINES])
def test_an_xid_line_names_its_link_or_none(message: str, expected: XidLine | None,
                                            why: str) -> None:
    assert parse_line(message) == expected, why


def test_a_link_survives_the_logs_escaping_of_a_hostile_name() -> None:
    """/dev/kmsg gives an escape byte as ``\\x1b``: unescaped, the name is the
    process's own, and the link is still the driver's."""
    raw = (b"4,9,920000000,-;" + X74.encode() + b"pid=4242, name=py\\x1b[2Jthon, "
           b"NVLink: fatal error detected on link 9(0x0, 0x0)\n")
    record = parse_record(raw)
    assert record is not None
    line = parse_line(record.message)
    assert line == XidLine("0000:3b:00", 74, 4242, "py\x1b[2Jthon", 9)


def findings(snap: Snapshot) -> list[Finding]:
    return list(snap.derived(FINDINGS) or ())


def xid_74_on_link_14() -> Scenario:
    sc = scenario("xid-error-driver-reported", boot_id=BOOT_A)
    (step,) = sc.timeline
    setting = step.set.model_copy(update={"xid": [XidCondition(code=74, link=14)]})
    data = sc.model_dump()
    data["timeline"] = [{**step.model_dump(), "set": setting.model_dump(exclude_none=True)}]
    return Scenario(**{k: v for k, v in data.items() if v is not None})


def test_an_xid_74_names_its_link_in_the_log_the_finding_and_after_a_restart(
        tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    first = run(xid_74_on_link_14(), state)
    try:
        snap = first.poll(10)
        log = first.node.kernel_log.path.read_text()
        assert (f"NVRM: Xid (PCI:{driver_bus(4)}): 74, pid='<unknown>', name=<unknown>, "
                "NVLink: fatal error detected on link 14(") in log
        (xid,) = [f for f in findings(snap) if f.row.cause == "driver_reported"]
        assert (xid.gpu, xid.evidence["xid"]) == (4, "74")
        assert xid.evidence["xid_nvlink"] == "Xid 74 on NVLink 14"
    finally:
        first.close()
    saved = json.loads(state.read_text())
    faults = [f for g in saved["gpus"].values() for f in g["faults"] if f["kind"] == "xid"]
    assert [(f["code"], f.get("link")) for f in faults] == [(74, 14)]
    # Restarted a minute later on a node whose kernel log and NVML say
    # nothing of it any more: the finding comes from the file, link and all.
    later = run(scenario("healthy", boot_id=BOOT_A), state, EPOCH + 60)
    try:
        (xid,) = [f for f in findings(later.poll(2)) if f.row.cause == "driver_reported"]
        assert xid.gpu == 4
        assert xid.evidence["xid_nvlink"] == "Xid 74 on NVLink 14"
    finally:
        later.close()


def xid_13_burst() -> Scenario:
    """Job 4243's process 24106 on GPU 6 logs 30 Xid 13 lines, job 4242's
    24102 then 20, 1 ms apart (the driver logs one per faulting warp)."""
    sc = load_scenario("slurm-node-cgroup-v2")
    sc = sc.model_copy(update={"host": sc.host.model_copy(update={"boot_id": BOOT_A})})
    lines = [KernelLogLine(at=10, xid=13, gpu=6, pid=24106, name="python", repeat=30,
                           detail="Graphics SM Warp Exception on (GPC 2, TPC 1, SM 0)"),
             KernelLogLine(at=11, xid=13, gpu=6, pid=24102, name="python", repeat=20,
                           detail="Graphics Exception: ESR 0x50e648=0x1000e")]
    return sc.model_copy(update={"kernel_log": KernelLog(lines=lines)})


def test_a_burst_of_xid_13_is_one_finding_per_process_with_its_lines(tmp_path: Path
                                                                    ) -> None:
    state = tmp_path / "state.json"
    sim = run(xid_13_burst(), state)
    try:
        snap = sim.poll(15)
        log = sim.node.kernel_log.path.read_text()
        assert log.count(f"NVRM: Xid (PCI:{driver_bus(6)}): 13, pid=") == 50
        app = [f for f in findings(snap) if f.row.cause == "application_fault"]
        got = sorted((f.gpu, f.evidence["xid_process"], f.evidence["xid_lines"],
                      f.evidence.get("xid_owner"), f.evidence["xid"]) for f in app)
        assert got == [(6, "python (pid 24102)", 20, "slurm job 4242 (uid 1000)", "13"),
                       (6, "python (pid 24106)", 30, "slurm job 4243 (uid 1000)", "13")]
        # More polls, the lines handed to each again: still 30 and 20.
        snap = sim.poll(5)
        app = [f for f in findings(snap) if f.row.cause == "application_fault"]
        assert sorted(f.evidence["xid_lines"] for f in app) == [20, 30]
        # One series per GPU and row whatever the processes: no per-process label.
        text = sim.scrape()
        active = [ln for ln in text.splitlines() if ln.startswith("gpu_diagnosis_active{")
                  and "application_fault" in ln and 'gpu="6"' in ln]
        assert len(active) == 1 and active[0].endswith(" 1.0")
    finally:
        sim.close()
    saved = json.loads(state.read_text())
    records = sorted((f["pid"], f["process"], f["owner"], f["count"])
                     for g in saved["gpus"].values() for f in g["faults"]
                     if f["kind"] == "xid" and f["code"] == 13)
    assert records == [(24102, "python (pid 24102)", "slurm job 4242 (uid 1000)", 20),
                       (24106, "python (pid 24106)", "slurm job 4243 (uid 1000)", 30)]


def test_a_flood_of_processes_never_crowds_out_a_hardware_fault_nor_the_files_bounds(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Every GPU of a full file: an Xid 79, an Xid 74 on each of 16 links, and
    200 processes each with Xid 13, named with escape codes and as long as the
    driver prints, owned by a job with the longest name."""
    state = tmp_path / "state.json"
    procfs = tmp_path / "proc"
    (procfs / "sys/kernel/random").mkdir(parents=True)
    (procfs / "sys/kernel/random/boot_id").write_text(BOOT_A + "\n")
    now = [EPOCH]
    memory = FaultMemory(state, procfs, lambda: now[0])
    name = "\x1b[2J" + "n" * 60
    owner = GpuOwner(slurm_job_id="9" * 200)
    uuids = [f"GPU-{gpu:08d}-ffff-ffff-ffff-ffffffffffff" for gpu in range(MAX_GPUS)]
    for pid in range(1, 41):
        now[0] += 1
        pasts = memory.observe([GpuSignals(
            0, uuid, GpuReading(0, uuid, True), None, None,
            xids=[(EPOCH, 79, None), (now[0], 13, None)]
            + [(EPOCH + 1 + k, 74, None) for k in range(16)],
            xid_blames=[XidBlame(now[0], 13, f"{name} (pid {pid})", owner, pid, 50)],
            xid_links=[(EPOCH + 1 + k, 74, k) for k in range(16)]) for uuid in uuids],
            per_process=[13])
        assert state.stat().st_size <= MAX_FILE_BYTES
    for past in pasts.values():
        assert len(past.faults) <= MAX_FAULTS_PER_GPU
        mine = [f for f in past.faults if f.process]
        assert len(mine) <= MAX_PROCESS_FAULTS_PER_GPU
        # The newest processes are the ones kept, and the hardware faults stay.
        assert sorted(f.pid or 0 for f in mine) == list(range(41 - len(mine), 41))
        assert len(mine) >= MAX_FAULTS_PER_GPU - 17
        assert sorted(f.link if f.code == 74 else -1 for f in past.faults
                      if f.code != 13) == [-1, *range(16)]
    uuid = uuids[-1]
    assert state.stat().st_size <= MAX_FILE_BYTES
    text = state.read_text()
    assert "\x1b" not in text and "\\u001b" not in text
    saved = json.loads(text)
    (record,) = [f for f in saved["gpus"][uuid]["faults"] if f.get("pid") == 40]
    assert record["process"] == "?[2J" + "n" * 60 + " (pid 40)"
    assert record["count"] == 50 and len(record["owner"]) <= 160
    # And the file reads back, every record whole, without a word.
    back = FaultMemory(state, procfs, lambda: now[0]).observe([])
    assert sum(len(p.faults) for p in back.values()) == sum(
        len(g["faults"]) for g in saved["gpus"].values())
    assert not refusals(caplog)
