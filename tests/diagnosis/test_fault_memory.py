"""The GPUs' fault memory (--path.state-file) and the boot grace, on the
simulator: a fault from before a restart stays a finding with its own time, a
fault back on the same GPU after a reboot is a finding of its own, a bad
state file is refused in one line and started over, the memory and its file
stay within their bounds, and a write never leaves half a file."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.diagnosis import memory as memory_module
from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.coverage import answer
from gpu_exporter.diagnosis.engine import FINDINGS, Finding
from gpu_exporter.diagnosis.memory import (
    MAX_FAULTS_PER_GPU,
    MAX_FILE_BYTES,
    MAX_GPUS,
    Fault,
    FaultMemory,
    GpuPast,
)
from gpu_exporter.diagnosis.registry import RULES, Trend
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.poll.readings import GpuReading
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.settings.thresholds import DiagnosisConfig
from gpu_exporter.simulator import load_scenario
from gpu_exporter.simulator.model import Scenario
from tests.simnode import EPOCH, SimRun, VirtualClock

BOOT_A = "11111111-2222-4333-8444-555555555555"
BOOT_B = "99999999-8888-4777-8666-555555555555"
LOGGER = "gpu_exporter.diagnosis.memory"


def scenario(name: str, **host: Any) -> Scenario:
    sc = load_scenario(name)
    return sc.model_copy(update={"host": sc.host.model_copy(update=host)})


def run(sc: Scenario, state: Path, start: float = EPOCH, **overrides: Any) -> SimRun:
    return SimRun(sc, clock=VirtualClock(start), path={"state_file": str(state)}, **overrides)


def findings(snap: Snapshot) -> dict[tuple[int, str, str], Finding]:
    return {(f.gpu, f.row.symptom, f.row.cause): f for f in snap.derived(FINDINGS) or ()}


def explained(snap: Snapshot) -> set[tuple[int, str, str]]:
    return {(f.gpu, e.row.symptom, e.row.cause)
            for f in snap.derived(FINDINGS) or () for e in f.explains}


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and "refused" in r.getMessage()]


def lose_gpu_5(state: Path, boot: str, start: float = EPOCH) -> float:
    """GPU 5 falls off the bus with Xid 79 (the scenario's 5th second); the
    time of its Xid as the state file holds it."""
    first = run(scenario("gpu-lost-xid-79", boot_id=boot), state, start)
    try:
        snap = first.poll(10)
        assert (5, "gpu_lost", "hardware") in findings(snap)
    finally:
        first.close()
    data = json.loads(state.read_text())
    (uuid,) = [u for u, g in data["gpus"].items() if g["lost"]]
    (xid,) = [f for f in data["gpus"][uuid]["faults"] if f["kind"] == "xid"]
    assert xid["code"] == 79 and xid["boot_id"] == boot
    assert start + 4 <= xid["first"] <= start + 7
    return float(xid["first"])


def test_an_xid_from_before_a_restart_is_still_a_finding_with_its_own_time(tmp_path: Path
                                                                          ) -> None:
    state = tmp_path / "state.json"
    xid_at = lose_gpu_5(state, BOOT_A)
    # Restarted a minute later in the same boot, on a node whose kernel log
    # and NVML say nothing of it any more.
    later = run(scenario("healthy", boot_id=BOOT_A), state, EPOCH + 60)
    try:
        snap = later.poll(2)
        found = findings(snap)
        assert (5, "xid_error", "driver_reported") in found
        assert found[(5, "xid_error", "driver_reported")].since == xid_at
        assert found[(5, "xid_error", "driver_reported")].evidence["xid"] == "79"
        # The same boot, nothing back yet: no fault came back.
        assert not any(k[1] == "fault_recurred" for k in found)
        # Past the Xid hold (15 min from the Xid's own time) it is over.
        later.poll(900, interval=30)
        assert (5, "xid_error", "driver_reported") not in findings(later.poll(30))
    finally:
        later.close()


def test_without_a_state_file_a_restart_forgets(tmp_path: Path) -> None:
    """The control: the finding above comes from the file, not the simulator."""
    lose_gpu_5(tmp_path / "state.json", BOOT_A)
    later = SimRun(scenario("healthy", boot_id=BOOT_A), clock=VirtualClock(EPOCH + 60))
    try:
        assert (5, "xid_error", "driver_reported") not in findings(later.poll(2))
    finally:
        later.close()


def test_the_same_fault_after_a_reboot_is_a_finding_of_its_own(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    xid_at = lose_gpu_5(state, BOOT_A)
    rebooted = run(scenario("gpu-lost-xid-79", boot_id=BOOT_B), state, EPOCH + 3600)
    try:
        snap = rebooted.poll(2)
        assert not any(k[1] == "fault_recurred" for k in findings(snap))
        snap = rebooted.poll(8)
        found = findings(snap)
        key = (5, "fault_recurred", "came_back_after_reset")
        assert key in found, found
        back = found[key]
        assert back.row.severity == "critical" and "Replace or RMA" in back.row.fix
        assert "Xid 79" in str(back.evidence["fault"])
        assert "gpu lost" in str(back.evidence["fault"])
        assert back.evidence["fault_lives"] == 2
        assert EPOCH + 3600 + 4 <= back.since <= EPOCH + 3600 + 7
        assert back.evidence["fault_first_seen"] == _utc(xid_at)
        # A finding of its own: beside the loss, never explained by it.
        assert (5, "gpu_lost", "hardware") in found and key not in explained(snap)
        # Only the GPU whose fault came back.
        assert [k for k in found if k[1] == "fault_recurred"] == [key]
    finally:
        rebooted.close()


def test_a_reboot_without_the_fault_finds_nothing_back(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    lose_gpu_5(state, BOOT_A)
    rebooted = run(scenario("healthy", boot_id=BOOT_B), state, EPOCH + 3600)
    try:
        assert not any(k[1] == "fault_recurred" for k in findings(rebooted.poll(10)))
    finally:
        rebooted.close()


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


# --- a bad state file -----------------------------------------------------------------

def _valid(uuid: str = "GPU-00000000-0000-0000-0000-000000000000") -> dict[str, Any]:
    return {"version": 1, "gpus": {uuid: {
        "seen": EPOCH, "lost": False, "resets": 0, "back": 0.0,
        "faults": [{"kind": "xid", "code": 79, "first": EPOCH, "last": EPOCH, "count": 1,
                    "boot_id": BOOT_A, "resets": 0}]}}}


def _write(text: str) -> Any:
    return lambda p: p.write_text(text)


def _with(change: Any) -> Any:
    def write(p: Path) -> None:
        data = _valid()
        change(data)
        p.write_text(json.dumps(data))
    return write


def _gpu(data: dict[str, Any]) -> dict[str, Any]:
    return next(iter(data["gpus"].values()))  # type: ignore[no-any-return]


BAD_FILES = {
    "truncated": lambda p: p.write_text(json.dumps(_valid())[:57]),
    "empty": _write(""),
    "not UTF-8": lambda p: p.write_bytes(b'{"version": 1, "gpus": {"\xff": 1}}'),
    "oversized": lambda p: p.write_text(" " * (MAX_FILE_BYTES + 1)),
    "a list": _write("[1, 2, 3]"),
    "wrong version": _with(lambda d: d.update(version=2)),
    "a string for a number": _with(lambda d: _gpu(d)["faults"][0].update(code="79")),
    "a bool for a count": _with(lambda d: _gpu(d)["faults"][0].update(count=True)),
    "an unknown key": _with(lambda d: _gpu(d).update(evil=1)),
    "an unknown kind": _with(lambda d: _gpu(d)["faults"][0].update(kind="rm -rf")),
    "escape codes in a boot id": _with(
        lambda d: _gpu(d)["faults"][0].update(boot_id="\x1b[31m" + BOOT_A[5:])),
    "escape codes in a UUID": lambda p: p.write_text(json.dumps(
        {"version": 1, "gpus": {"GPU-\x1b]0;pwned\x07": _gpu(_valid())}})),
    "a time from nowhere": _with(lambda d: _gpu(d)["faults"][0].update(first=-1.0)),
    "too many faults": _with(lambda d: _gpu(d).update(
        faults=_gpu(d)["faults"] * (MAX_FAULTS_PER_GPU + 1))),
    "too many GPUs": lambda p: p.write_text(json.dumps(
        {"version": 1, "gpus": {f"GPU-{i}": _gpu(_valid()) for i in range(MAX_GPUS + 1)}})),
    "too deep": _write("[" * 100 + "]" * 100),
    "NaN": _write('{"version": 1, "gpus": NaN}'),
}


@pytest.mark.parametrize("bad", list(BAD_FILES))
def test_a_bad_state_file_is_refused_in_one_line_and_started_over(
        bad: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "state.json"
    BAD_FILES[bad](state)
    refused_bytes = state.read_bytes()
    caplog.set_level(logging.WARNING)
    node = run(scenario("healthy", boot_id=BOOT_A), state)
    try:
        node.poll(2)
    finally:
        node.close()
    (line,) = refusals(caplog)
    assert "\n" not in line and "\x1b" not in line and "\x07" not in line
    assert str(state) in line and "starts over" in line
    # Kept aside for whoever wants to look; the memory starts over in a good file.
    assert (tmp_path / "state.json.refused").read_bytes() == refused_bytes
    data = json.loads(state.read_text())
    assert len(data["gpus"]) == 8
    assert all(g["faults"] == [] for g in data["gpus"].values())


def test_a_symlink_is_refused_and_its_target_never_written(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    target = tmp_path / "precious"
    target.write_text(json.dumps(_valid()))
    before = target.read_bytes()
    state = tmp_path / "state.json"
    state.symlink_to(target)
    caplog.set_level(logging.WARNING)
    node = run(scenario("healthy", boot_id=BOOT_A), state)
    try:
        node.poll(2)
    finally:
        node.close()
    (line,) = refusals(caplog)
    assert "symbolic link" in line
    assert target.read_bytes() == before
    assert (tmp_path / "state.json.refused").is_symlink()
    assert not state.is_symlink() and len(json.loads(state.read_text())["gpus"]) == 8


def test_a_fifo_is_refused_without_waiting_on_it(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "state.json"
    os.mkfifo(state)
    caplog.set_level(logging.WARNING)
    memory = FaultMemory(state, tmp_path, lambda: EPOCH)
    (line,) = refusals(caplog)
    assert "not a regular file" in line
    assert memory.observe([]) == {}


def test_another_nodes_file_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                       ) -> None:
    state = tmp_path / "state.json"
    state.write_text(json.dumps(_valid("GPU-aaaaaaaa-0000-0000-0000-000000000000")))
    caplog.set_level(logging.WARNING)
    node = run(scenario("healthy", boot_id=BOOT_A), state)
    try:
        snap = node.poll(2)
    finally:
        node.close()
    (line,) = refusals(caplog)
    assert "none of this node's GPUs" in line
    assert "GPU-aaaaaaaa-0000-0000-0000-000000000000" not in json.loads(state.read_text())["gpus"]
    assert not any(k[1] == "xid_error" for k in findings(snap))


def test_a_file_this_exporter_wrote_is_read_back_without_a_word(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "state.json"
    lose_gpu_5(state, BOOT_A)
    caplog.set_level(logging.INFO)
    again = run(scenario("healthy", boot_id=BOOT_A), state, EPOCH + 60)
    try:
        again.poll(2)
    finally:
        again.close()
    assert [r for r in caplog.records if r.name == LOGGER] == []


# --- bounds and atomic writes ------------------------------------------------------------

def _signals(uuid: str, xids: list[tuple[float, int, int | None]], up: bool = True
             ) -> GpuSignals:
    return GpuSignals(0, uuid, GpuReading(0, uuid, up), None, None, xids=xids)


def test_the_memory_and_its_file_stay_within_their_bounds(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    procfs = tmp_path / "proc"
    (procfs / "sys/kernel/random").mkdir(parents=True)
    now = [EPOCH]
    biggest = 0
    for boot in range(3):
        # Each boot a new exporter, with the file the last one left.
        (procfs / "sys/kernel/random/boot_id").write_text(
            f"{boot:08d}-0000-4000-8000-000000000000\n")
        memory = FaultMemory(state, procfs, lambda: now[0])
        # The first GPU seen is one the file kept (the newest), so each boot
        # goes on from the last one's file rather than refusing it as foreign.
        last = MAX_GPUS * 2 - 1
        for gpu in (last, *range(last)):
            uuid = f"GPU-{gpu:08d}-ffff-ffff-ffff-ffffffffffff"
            now[0] += 1
            # Many distinct Xids a poll, each GPU its own.
            pasts = memory.observe([_signals(uuid, [(now[0], code, None)
                                                    for code in range(200, 260)])])
            assert len(pasts) <= MAX_GPUS
            assert all(len(p.faults) <= MAX_FAULTS_PER_GPU for p in pasts.values())
            biggest = max(biggest, state.stat().st_size)
    assert biggest <= MAX_FILE_BYTES
    data = json.loads(state.read_text())
    assert len(data["gpus"]) == MAX_GPUS
    # The newest GPUs and faults are the ones kept.
    assert f"GPU-{last - 1:08d}-ffff-ffff-ffff-ffffffffffff" in data["gpus"]
    # And the full file reads back.
    assert len(FaultMemory(state, procfs, lambda: now[0]).observe([])) == MAX_GPUS


def test_an_xid_repeated_every_poll_is_one_fault_with_its_count(tmp_path: Path) -> None:
    memory = FaultMemory(None, tmp_path, lambda: EPOCH + 10)
    uuid = "GPU-00000000-0000-0000-0000-000000000001"
    events: list[tuple[float, int, int | None]] = []
    for k in range(5):
        events.append((EPOCH + k, 79, None))
        past = memory.observe([_signals(uuid, list(events))])[uuid]
    (fault,) = past.faults
    assert (fault.count, fault.first, fault.last) == (5, EPOCH, EPOCH + 4)


def test_a_failed_write_leaves_the_old_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "state.json"
    memory = FaultMemory(state, tmp_path, lambda: EPOCH)
    uuid = "GPU-00000000-0000-0000-0000-000000000001"
    memory.observe([_signals(uuid, [(EPOCH, 79, None)])])
    before = state.read_bytes()

    def crash(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(memory_module.os, "replace", crash)
    caplog.set_level(logging.WARNING)
    for k in range(3):
        memory.observe([_signals(uuid, [(EPOCH, 79, None), (EPOCH + 1 + k, 48, None)])])
    # The old file, whole; no temporary file left beside it; said once.
    assert state.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    assert len([r for r in caplog.records if "cannot write" in r.getMessage()]) == 1
    monkeypatch.undo()
    memory.observe([_signals(uuid, [(EPOCH, 79, None), (EPOCH + 9, 48, None)])])
    codes = {f["code"] for f in json.loads(state.read_text())["gpus"][uuid]["faults"]}
    assert codes == {79, 48}


def test_the_came_back_rule_both_ways(tmp_path: Path) -> None:
    """Direct cases of the rule: the same hardware fault in two lives holds;
    an application Xid, a remap that stays failed, or one life does not; no
    memory is not judged."""
    def judge(past: GpuPast | None) -> bool | None:
        trend = Trend(lambda name, value: None, EPOCH + 100, past)
        return RULES[t.FAULT_CAME_BACK](_signals("GPU-1", []), DiagnosisConfig(), trend).holds

    def fault(kind: Any, code: int, at: float, boot: str, resets: int = 0) -> Fault:
        return Fault(kind, code, at, at, 1, boot, resets)

    now = (BOOT_B, 0)
    assert judge(None) is None
    assert judge(GpuPast((fault("xid", 79, EPOCH, BOOT_A), fault("xid", 79, EPOCH + 9, BOOT_B)),
                         now)) is True
    assert judge(GpuPast((fault("gpu_lost", 0, EPOCH, BOOT_B, 0),
                          fault("gpu_lost", 0, EPOCH + 9, BOOT_B, 1)), (BOOT_B, 1))) is True
    assert judge(GpuPast((fault("xid", 13, EPOCH, BOOT_A), fault("xid", 13, EPOCH + 9, BOOT_B)),
                         now)) is False  # the job's Xid, not the board's
    assert judge(GpuPast((fault("row_remap_failed", 0, EPOCH, BOOT_A),
                          fault("row_remap_failed", 0, EPOCH + 9, BOOT_B)), now)) is False
    assert judge(GpuPast((fault("xid", 79, EPOCH, BOOT_A), fault("xid", 48, EPOCH + 9, BOOT_B)),
                         now)) is False  # another fault
    assert judge(GpuPast((fault("xid", 79, EPOCH, BOOT_A),), now)) is False  # not back (yet)


# --- the boot grace ----------------------------------------------------------------------

@pytest.mark.parametrize("name, key", [
    ("pcie-downtrained-link-degraded", "pcie_downtrained/link_degraded"),
    ("fabric-degraded-nvswitch-fabric", "fabric_degraded/nvswitch_fabric"),
    ("c2c-errors-link-integrity", "c2c_errors/link_integrity"),
])
def test_link_rows_wait_the_boot_grace_and_coverage_says_so(name: str, key: str) -> None:
    symptom, cause = key.split("/")
    sc = load_scenario(name)
    booting = SimRun(sc.model_copy(update={"host": sc.host.model_copy(update={"uptime_s": 20})}),
                     diagnosis={"boot_grace": 120})
    try:
        snap = booting.poll(60)  # the scenario's fault is on from its start, or soon after
        assert not any(k[1:] == (symptom, cause) for k in findings(snap))
        cov = answer(snap)
        waiting = [g for g in cov["not_checked"] if key in g["checks"]]
        assert waiting and "boot grace" in waiting[0]["reason"]
        assert cov["complete"] is False
        # Past the grace (uptime 20 + 100 s), with the window (30 s) on top, it is found.
        snap = booting.poll(80)
        assert any(k[1:] == (symptom, cause) for k in findings(snap))
        assert not any(key in g["checks"] and "boot grace" in g["reason"]
                       for g in answer(snap)["not_checked"])
    finally:
        booting.close()


def test_a_node_up_a_day_does_not_wait() -> None:
    node = SimRun("pcie-downtrained-link-degraded", diagnosis={"boot_grace": 120})
    try:
        assert any(k[1:] == ("pcie_downtrained", "link_degraded")
                   for k in findings(node.poll(40)))
    finally:
        node.close()


def test_the_boot_id_is_read_at_the_first_poll_and_kept(tmp_path: Path) -> None:
    """A boot never changes under a running exporter (a reboot ends it), so
    the memory reads the boot id once, not every poll: a file changed under
    it later does not make a fault of a new life."""
    procfs = tmp_path / "proc"
    (procfs / "sys/kernel/random").mkdir(parents=True)
    path = procfs / "sys/kernel/random/boot_id"
    path.write_text(BOOT_A + "\n")
    memory = FaultMemory(None, procfs, lambda: EPOCH + 10)
    uuid = "GPU-00000000-0000-0000-0000-000000000001"
    memory.observe([_signals(uuid, [])])
    path.write_text(BOOT_B + "\n")
    (fault,) = memory.observe([_signals(uuid, [(EPOCH + 5, 79, None)])])[uuid].faults
    assert fault.boot_id == BOOT_A
