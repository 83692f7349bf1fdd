"""The kernel-log reader's store and the process an Xid line names
(host/driver_log.py, collectors/kmsg.py ``find_culprit``) on records and
/proc trees written by hand: every count, bound and time kept, and which
process is blamed. Fast on purpose, beside tests/host/test_kernel_log.py and
tests/diagnosis/test_xid_details.py (the reader end to end): mutation testing runs
these per changed line."""

from __future__ import annotations

from pathlib import Path

from gpu_exporter.collectors.kmsg import _CLK_TCK, _stat_comm_start, find_culprit
from gpu_exporter.host.driver_log import MAX_TOTALS, DriverLog, XidEntry
from gpu_exporter.host.kmsg import KERNEL_FACILITY, Record
from gpu_exporter.poll.readings import XidCulprit


def rec(message: str, usec: int, facility: int = KERNEL_FACILITY) -> Record:
    return Record(facility, 3, 0, usec, "-", message)


def xid(bus: str, code: int, pid: int | None = None, name: str = "python3") -> str:
    who = f"pid={pid}, name={name}, " if pid is not None else ""
    return f"NVRM: Xid (PCI:{bus}): {code}, {who}Graphics Exception"


def sxid(switch: int, code: str, fatal: str = "Non-fatal") -> str:
    return f"nvidia-nvswitch{switch}: SXid (PCI:0000:c3:00.0): {code}, {fatal}, Link 19 x"


def test_each_xid_key_counts_its_lines_with_first_and_last_time_and_the_start() -> None:
    log = DriverLog()
    first = log.add(rec(xid("0000:18:00", 13, 42), 5_000_000))
    assert isinstance(first, XidEntry) and first.count == 1 and first.before_start == 1
    assert log.add(rec(xid("0000:18:00", 13, 42), 3_000_000)) is None  # an older line
    log.mark_started()
    assert log.add(rec(xid("0000:18:00", 13, 42), 9_000_000)) is None
    assert log.add(rec(xid("0000:18:00", 13, 42), 9_000_000)) is None
    e = log.xids[("0000:18:00", 13, 42, None)]
    assert (e.count, e.before_start, e.first_usec, e.last_usec) == (4, 2, 3_000_000, 9_000_000)
    t = log.totals[("0000:18:00", 13)]
    assert (t.before_start, t.live) == (2, 2)
    # another pid is another key, the same total
    log.add(rec(xid("0000:18:00", 13, 43), 10_000_000))
    assert len(log.xids) == 2 and log.totals[("0000:18:00", 13)].live == 3
    assert log.records == 5 and log.overflow == 0


def test_past_the_bound_lines_are_counted_not_kept_and_totals_stay_within_theirs() -> None:
    log = DriverLog(max_keys=2)
    for pid in (1, 2, 3, 3):
        log.add(rec(xid("0000:18:00", 31, pid), pid))
    assert len(log.xids) == 2 and log.overflow == 2
    assert log.totals[("0000:18:00", 31)].before_start == 4
    # a known key still counts when the table is full
    log.add(rec(xid("0000:18:00", 31, 1), 99))
    assert log.xids[("0000:18:00", 31, 1, None)].count == 2 and log.overflow == 2
    big = DriverLog(max_keys=10 * MAX_TOTALS)
    for i in range(MAX_TOTALS + 5):
        big.add(rec(xid(f"0000:{i // 256:02x}:{i % 256:02x}", 31), i))
    assert len(big.totals) == MAX_TOTALS


def test_sxids_count_per_switch_and_code_and_keep_the_last_time() -> None:
    log = DriverLog(max_keys=2)
    log.add(rec(sxid(0, "24007", "Fatal"), 7_000_000))
    log.add(rec(sxid(0, "24007", "Fatal"), 9_000_000))
    log.add(rec(sxid(0, "24007", "Fatal"), 8_000_000))
    e = log.sxids[("nvidia-nvswitch0", "0000:c3:00.0", 24007)]
    assert (e.count, e.fatal, e.first_usec, e.last_usec) == (3, True, 7_000_000, 9_000_000)
    log.add(rec(sxid(1, "01004"), 1))
    assert log.sxids[("nvidia-nvswitch1", "0000:c3:00.0", 1004)].fatal is False
    log.add(rec(sxid(2, "01004"), 1))  # a third key: the table holds two
    log.add(rec(sxid(2, "01004"), 2))
    assert len(log.sxids) == 2 and log.overflow == 2
    # not the kernel's facility: not the driver's line
    log.add(rec(sxid(3, "01004"), 1, facility=1))
    assert len(log.sxids) == 2 and log.overflow == 2 and log.records == 7


def stat(pid: int, comm: str, start_ticks: int, ppid: int = 1) -> str:
    # fields after the comm: state, ppid, then 17 more before starttime (the 22nd field)
    rest = ["S", str(ppid)] + ["0"] * 17 + [str(start_ticks)] + ["0"] * 5
    return f"{pid} ({comm}) " + " ".join(rest) + "\n"


def test_the_comm_and_start_are_read_whatever_the_name_holds() -> None:
    assert _stat_comm_start(stat(7, "py (x) y", 250)) == ("py (x) y", 250 / _CLK_TCK)
    assert _stat_comm_start(stat(7, ")(", 100)) == (")(", 100 / _CLK_TCK)
    assert _stat_comm_start("(comm) S 1 2") is None  # cut short
    assert _stat_comm_start("7 comm S 1") is None  # no parentheses
    assert _stat_comm_start("7 ) comm ( S") is None  # the wrong way round
    assert _stat_comm_start("7 (a) " + " ".join(["S", "1"] + ["0"] * 17 + ["x"])) is None


def proc(tmp: Path, pid: int, comm: str, start_s: float, cgroup: str, ppid: int = 1,
         cmdline: bytes = b"") -> None:
    d = tmp / str(pid)
    d.mkdir()
    (d / "stat").write_text(stat(pid, comm, round(start_s * _CLK_TCK), ppid))
    (d / "cgroup").write_text(cgroup)
    (d / "comm").write_text(comm + "\n")
    (d / "cmdline").write_bytes(cmdline)
    (d / "status").write_text("Name:\tx\nUid:\t1000\t1000\t1000\t1000\n")


POD = ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_5678_90ab_"
       "cdef_1234567890ab.slice/cri-containerd-" + "a" * 64 + ".scope\n")
SLURM = "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n"


def entry(pid: int | None, process: str = "python3", at_s: float = 100.0) -> XidEntry:
    return XidEntry("0000:18:00", 13, pid, process, 1, int(at_s * 1e6), int(at_s * 1e6), 0)


def container(procfs: Path, pid: int, process: str) -> str:
    found = find_culprit(procfs, entry(pid, process))
    assert found is not None
    return found.container_id


def test_the_culprit_is_the_process_still_running_with_its_workload(tmp_path: Path) -> None:
    proc(tmp_path, 42, "python3", 99.0, POD)
    found = find_culprit(tmp_path, entry(42))
    assert found == XidCulprit(42, "python3", pod_uid="1234abcd-5678-90ab-cdef-1234567890ab",
                               container_id="a" * 64)
    proc(tmp_path, 43, "python3", 100.4, SLURM)  # started within the line's half second
    assert find_culprit(tmp_path, entry(43)) == XidCulprit(43, "python3", slurm_job_id="4242")
    assert find_culprit(tmp_path, entry(None)) is None


def test_a_pid_reused_or_gone_blames_no_workload(tmp_path: Path) -> None:
    bare = XidCulprit(44, "python3")
    assert find_culprit(tmp_path, entry(44)) == bare  # gone
    proc(tmp_path, 44, "bash", 50.0, POD)  # another program has the pid now
    assert find_culprit(tmp_path, entry(44)) == bare
    proc(tmp_path, 45, "python3", 101.0, POD)  # started after the line
    assert find_culprit(tmp_path, entry(45)) == XidCulprit(45, "python3")
    proc(tmp_path, 46, "python3", 100.5, "0::/user.slice/user-0.slice/session-1.scope\n")
    assert find_culprit(tmp_path, entry(46)) == XidCulprit(46, "python3")  # a host process
    # the driver prints 15 characters of the name; the kernel's comm holds 15 too
    proc(tmp_path, 47, "a_very_long_pro", 10.0, POD)
    assert container(tmp_path, 47, "a_very_long_program") == "a" * 64
    proc(tmp_path, 48, "a_very_long_prX", 10.0, POD)
    assert container(tmp_path, 48, "a_very_long_program") == ""
    # no name in the line: the start time alone decides
    proc(tmp_path, 49, "whatever", 10.0, POD)
    assert container(tmp_path, 49, "") == "a" * 64


def test_a_task_under_slurmstepd_is_its_jobs_when_its_cgroup_does_not_say(
        tmp_path: Path) -> None:
    proc(tmp_path, 500, "slurmstepd", 1.0, "0::/\n", cmdline=b"slurmstepd: [777.0]\0")
    proc(tmp_path, 501, "python3", 2.0, "0::/user.slice\n", ppid=500)
    assert find_culprit(tmp_path, entry(501)) == XidCulprit(501, "python3", slurm_job_id="777")

