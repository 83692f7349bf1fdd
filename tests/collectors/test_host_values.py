"""The host collector never publishes a value no host can report: garbage in
/proc (a negative count, a ratio above 100 %, more memory available than
there is, NaN, a counter lower than its last reading) leaves that series
absent for the poll, counts a read error and is logged once per series; the
other series of the same file are still exported, and the series is back with
the next sane reading. The ranges are the bounds of each metric's catalog entry.

Fast (a fixture tree and a virtual clock, no simulator) so that mutation
testing can run it per mutant.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from gpu_exporter.collectors import values as p
from gpu_exporter.collectors.host import HostCollector
from gpu_exporter.poll.catalog import BY_NAME, CATALOG
from gpu_exporter.poll.snapshot import Snapshot
from tests.collectors.test_host_collector import PAGE, Host, values
from tests.host.test_host_thermal import two_sockets


def write(host: Host, name: str, text: str) -> None:
    (host.root / name).write_text(text)


def later(host: Host, seconds: float = 1.0) -> Snapshot:
    host.clock.advance(seconds)
    return host.collect()


def stat(user: int, iowait: int, steal: int = 0, ctxt: int = 1000, total_idle: int = 1000) -> str:
    return f"cpu  {user} 0 100 {total_idle} {iowait} 0 0 {steal} 0 0\nctxt {ctxt}\n"


def rejected(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "which no host can report" in r.getMessage()]


# --- every host series has a range -----------------------------------------------------------
def test_every_host_series_the_collector_exports_has_a_range(tmp_path: Path) -> None:
    host = Host(tmp_path)
    # The CPUs' thermal counters live in sysfs, beside the /proc fixture.
    host.collector.sysfs = tmp_path / "sys"
    two_sockets(host.collector.sysfs)
    host.collect()
    snap = host.one_second_later()
    names = {m.name for m in CATALOG if m.bounds is not None and m.name.startswith("gpu_host_")}
    assert {n for n in names if snap.series(n)} == names


def test_a_share_just_outside_its_range_is_shown_at_the_edge_farther_out_rejected() -> None:
    host_src = _tally()
    for value, shown in [(-0.05, 0.0), (-0.0499, 0.0), (0.0, 0.0), (0.5, 0.5), (1.0, 1.0),
                         (1.05, 1.0)]:
        assert p.accept_share(host_src, IOWAIT, value) == shown, value
    assert host_src.errors == 0
    for value in (-0.0501, 1.0501, math.nan, math.inf, -math.inf):
        assert p.accept_share(host_src, IOWAIT, value) is None, value
    assert host_src.errors == 5
    # a disk's busy time against the collector's own clock may land farther out
    assert p.accept_share(host_src, DISK_BUSY, 1.5, "sda") == 1.0
    assert p.accept_share(host_src, DISK_BUSY, 1.5001, "sda") is None
    assert p.accept_share(host_src, DISK_BUSY, -0.5, "sda") == 0.0
    assert p.accept_share(host_src, DISK_BUSY, -0.5001, "sda") is None
    assert host_src.errors == 7
    assert host_src.warned == {"implausible:gpu_host_cpu_iowait_ratio",
                               "implausible:gpu_host_disk_busy_ratio:sda"}


IOWAIT, DISK_BUSY = BY_NAME["gpu_host_cpu_iowait_ratio"], BY_NAME["gpu_host_disk_busy_ratio"]


def _tally() -> p.Tally:
    """The host collector's tally, as collectors/values.py sees it."""
    return HostCollector(Path("/nonexistent"))._src


# --- CPU -------------------------------------------------------------------------------------
def test_iowait_stepping_back_a_little_is_none_farther_is_rejected(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = Host(tmp_path)
    write(host, "stat", stat(user=100, iowait=50))
    host.collect()
    # 300 jiffies passed, iowait fell by 3: 1 % back, the kernel's own step back
    write(host, "stat", stat(user=403, iowait=47))
    snap = later(host)
    assert snap.get("gpu_host_cpu_iowait_ratio") == 0.0
    assert snap.readings.host.iowait_ratio == 0.0
    assert host.collector.errors() == 0
    # The iowait seconds counter holds its last reading rather than step back.
    assert snap.get("gpu_host_cpu_iowait_seconds_total") == 0.5
    # 300 jiffies passed, iowait fell by 30: no kernel does that
    write(host, "stat", stat(user=733, iowait=17))
    with caplog.at_level(logging.WARNING):
        snap = later(host)
    assert snap.series("gpu_host_cpu_iowait_ratio") == []
    assert snap.get("gpu_host_cpu_steal_ratio") == 0.0
    assert snap.readings.host.iowait_ratio is None
    assert snap.readings.host_signals.iowait_ratio is None
    assert host.collector.errors() == 1
    [message] = rejected(caplog)
    assert message.startswith("host: gpu_host_cpu_iowait_ratio reads -0.1")
    assert message.endswith(", which no host can report (a 'not available' value or a faulty "
                            "reading); left out while it does")
    assert float(message.split()[3].rstrip(",")) == pytest.approx(-0.1)


def test_more_iowait_than_cpu_time_passed_is_rejected_and_the_next_poll_is_fresh(
        tmp_path: Path) -> None:
    host = Host(tmp_path)
    write(host, "stat", stat(user=100, iowait=50, steal=10))
    host.collect()
    # user stepped back by 100 while iowait rose by 1000: 900 jiffies, 1000 in iowait
    write(host, "stat", stat(user=0, iowait=1050, steal=10))
    snap = later(host)
    assert snap.series("gpu_host_cpu_iowait_ratio") == []
    assert snap.get("gpu_host_cpu_steal_ratio") == 0.0
    assert host.collector.errors() == 1
    write(host, "stat", stat(user=0, iowait=1250, steal=30))  # 220 jiffies, 200 iowait
    snap = later(host)
    assert snap.get("gpu_host_cpu_iowait_ratio") == pytest.approx(200 / 220)
    assert snap.get("gpu_host_cpu_steal_ratio") == pytest.approx(20 / 220)
    assert snap.readings.host.steal_ratio == pytest.approx(20 / 220)
    assert snap.readings.host_signals.iowait_ratio == pytest.approx(200 / 220)
    assert host.collector.errors() == 0


def test_cpu_time_going_backwards_leaves_both_shares_absent(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = Host(tmp_path)
    write(host, "stat", stat(user=500, iowait=50, steal=10))
    host.collect()
    write(host, "stat", stat(user=100, iowait=50, steal=10))
    with caplog.at_level(logging.WARNING):
        snap = later(host)
    assert snap.series("gpu_host_cpu_iowait_ratio") == []
    assert snap.series("gpu_host_cpu_steal_ratio") == []
    assert snap.readings.host.steal_ratio is None
    assert snap.series("gpu_host_cpu_seconds_total") == []  # a counter going backwards
    assert host.collector.errors() == 3
    messages = rejected(caplog)
    assert messages[0].startswith("host: gpu_host_cpu_seconds_total reads 12.6")
    assert [m.split(" reads ")[1][:3] for m in messages[1:]] == ["nan", "nan"]


def test_context_switches_negative_or_going_backwards(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = Host(tmp_path)
    write(host, "stat", stat(user=100, iowait=50, ctxt=5000))
    assert host.collect().get("gpu_host_context_switches_total") == 5000
    write(host, "stat", stat(user=200, iowait=50, ctxt=4000))
    with caplog.at_level(logging.WARNING):
        snap = later(host)
        assert snap.series("gpu_host_context_switches_total") == []
        assert "context_switches_per_s" not in snap.readings.host.values
        assert snap.get("gpu_host_cpu_iowait_ratio") == 0.0  # the rest of /proc/stat is fine
        assert host.collector.errors() == 1
        write(host, "stat", stat(user=300, iowait=50, ctxt=-1))
        snap = later(host)
        assert snap.series("gpu_host_context_switches_total") == []
        assert host.collector.errors() == 1
    [message] = rejected(caplog)  # once per series
    assert message.startswith("host: gpu_host_context_switches_total reads 4000, which")
    # back: the rate is taken since the last accepted reading, 3 s before
    write(host, "stat", stat(user=400, iowait=50, ctxt=8000))
    snap = later(host)
    assert snap.get("gpu_host_context_switches_total") == 8000
    assert snap.readings.host.values["context_switches_per_s"] == pytest.approx(1000.0)
    assert host.collector.errors() == 0


def test_a_counter_past_what_a_64_bit_kernel_counter_holds(tmp_path: Path) -> None:
    host = Host(tmp_path)
    write(host, "stat", stat(user=100, iowait=50, ctxt=2**64 - 1))
    snap = host.collect()
    assert snap.series("gpu_host_context_switches_total") == []
    assert host.collector.errors() == 1
    write(host, "stat", stat(user=100, iowait=50, ctxt=2**63))
    assert later(host).get("gpu_host_context_switches_total") == 2**63


# --- memory and swap -------------------------------------------------------------------------
def test_more_memory_available_than_there_is(tmp_path: Path) -> None:
    host = Host(tmp_path)
    write(host, "meminfo", "MemTotal: 1000 kB\nMemAvailable: 1001 kB\nSwapTotal: 0 kB\n"
                           "SwapFree: 0 kB\n")
    snap = host.collect()
    assert snap.get("gpu_host_memory_total_bytes") == 1000 * 1024
    assert snap.series("gpu_host_memory_available_bytes") == []
    assert snap.get("gpu_host_swap_used_bytes") == 0
    assert "memory_available_bytes" not in snap.readings.host.values
    assert snap.readings.host.values["memory_total_bytes"] == 1000 * 1024
    assert host.collector.errors() == 1
    write(host, "meminfo", "MemTotal: 1000 kB\nMemAvailable: 1000 kB\nSwapTotal: 0 kB\n"
                           "SwapFree: 0 kB\n")
    snap = later(host)
    assert snap.get("gpu_host_memory_available_bytes") == 1000 * 1024
    assert host.collector.errors() == 0


@pytest.mark.parametrize(("meminfo", "absent", "present"), [
    # more swap free than there is swap
    ("MemTotal: 1000 kB\nMemAvailable: 10 kB\nSwapTotal: 10 kB\nSwapFree: 11 kB\n",
     "gpu_host_swap_used_bytes", "gpu_host_memory_available_bytes"),
    # a total no machine has (2**51 bytes), so available is held to its own range only
    (f"MemTotal: {2**41} kB\nMemAvailable: 10 kB\nSwapTotal: 10 kB\nSwapFree: 5 kB\n",
     "gpu_host_memory_total_bytes", "gpu_host_memory_available_bytes"),
    ("MemTotal: 0 kB\nMemAvailable: 0 kB\nSwapTotal: 10 kB\nSwapFree: 5 kB\n",
     "gpu_host_memory_total_bytes", "gpu_host_swap_used_bytes"),
    ("MemTotal: 1000 kB\nMemAvailable: -1 kB\nSwapTotal: 10 kB\nSwapFree: 5 kB\n",
     "gpu_host_memory_available_bytes", "gpu_host_memory_total_bytes"),
])
def test_impossible_memory_figures_are_absent(tmp_path: Path, meminfo: str, absent: str,
                                              present: str) -> None:
    host = Host(tmp_path)
    write(host, "meminfo", meminfo)
    snap = host.collect()
    assert snap.series(absent) == []
    assert snap.series(present) != []
    assert host.collector.errors() == 1
    facts = snap.readings.host
    field = {"gpu_host_swap_used_bytes": facts.values.get("swap_used_bytes"),
             "gpu_host_memory_total_bytes": facts.values.get("memory_total_bytes"),
             "gpu_host_memory_available_bytes": facts.values.get("memory_available_bytes")}
    assert field[absent] is None and field[present] is not None


def test_swap_counters_going_backwards_have_no_rate(tmp_path: Path) -> None:
    host = Host(tmp_path)
    write(host, "vmstat", "pswpin 1000\npswpout 2000\n")
    host.collect()
    write(host, "vmstat", "pswpin 900\npswpout 2100\n")
    snap = later(host)
    assert values(snap, "gpu_host_swap_bytes_total") == {("out",): 2100 * PAGE}
    assert "swap_in_bytes_per_s" not in snap.readings.host.values
    assert snap.readings.host.values["swap_out_bytes_per_s"] == 100 * PAGE
    assert snap.readings.host_signals.swap_bytes_per_s is None  # needs both directions
    assert host.collector.errors() == 1
    write(host, "vmstat", "pswpin 1200\npswpout 2200\n")
    snap = later(host)
    assert snap.readings.host.values["swap_in_bytes_per_s"] == 100 * PAGE  # since the last good one
    assert snap.readings.host_signals.swap_bytes_per_s == 200 * PAGE


# --- load, pressure --------------------------------------------------------------------------
@pytest.mark.parametrize("loadavg", ["-1.00 10.25 8.00 1/2 3", "nan 10.25 8.00 1/2 3",
                                     "inf 10.25 8.00 1/2 3", "4194305 10.25 8.00 1/2 3"])
def test_a_load_no_host_can_have(tmp_path: Path, loadavg: str) -> None:
    host = Host(tmp_path)
    write(host, "loadavg", loadavg)
    snap = host.collect()
    assert values(snap, "gpu_host_load_average") == {("5m",): 10.25, ("15m",): 8.0}
    assert "load_1m" not in snap.readings.host.values
    assert snap.readings.host.values["load_5m"] == 10.25
    assert host.collector.errors() == 1


def test_a_load_of_every_task_there_can_be_is_a_load(tmp_path: Path) -> None:
    host = Host(tmp_path)
    write(host, "loadavg", "4194304 0 0.00 1/2 3")
    snap = host.collect()
    assert values(snap, "gpu_host_load_average") == {("1m",): 4194304, ("5m",): 0.0,
                                                     ("15m",): 0.0}
    assert snap.readings.host.values["load_1m"] == 4194304
    assert host.collector.errors() == 0


def test_pressure_above_100_percent_or_a_negative_total(tmp_path: Path) -> None:
    host = Host(tmp_path)
    write(host, "pressure/cpu", "some avg10=250.00 avg60=0 avg300=0 total=100\n"
                                "full avg10=1.00 avg60=0 avg300=0 total=50\n")
    write(host, "pressure/io", "some avg10=10.00 avg60=0 avg300=0 total=100\n"
                               "full avg10=100.01 avg60=0 avg300=0 total=-5\n")
    snap = host.collect()
    ratios = values(snap, "gpu_host_pressure_ratio")
    assert ("cpu", "some") not in ratios and ratios[("cpu", "full")] == 0.01
    assert ratios[("io", "some")] == pytest.approx(0.1) and ("io", "full") not in ratios
    totals = values(snap, "gpu_host_pressure_stalled_seconds_total")
    assert totals[("cpu", "some")] == pytest.approx(1e-4) and ("io", "full") not in totals
    assert host.collector.errors() == 3
    facts = snap.readings.host
    assert "cpu_pressure_some" not in facts.values  # the share the rules read
    assert facts.values["cpu_pressure_full"] == 0.01
    assert "io_pressure_full" not in facts.values
    signals = snap.readings.host_signals
    assert signals.cpu_pressure_some is None
    assert signals.io_pressure_some == pytest.approx(0.1)


def test_pressure_of_exactly_100_percent_is_a_reading(tmp_path: Path) -> None:
    host = Host(tmp_path)
    write(host, "pressure/memory", "some avg10=100.00 avg60=0 avg300=0 total=100\n"
                                   "full avg10=100.00 avg60=0 avg300=0 total=100\n")
    snap = host.collect()
    assert snap.readings.host_signals.memory_pressure_full == 1.0
    assert host.collector.errors() == 0


def test_a_stall_total_going_backwards(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.collect()
    write(host, "pressure/io", "some avg10=34.21 avg60=0 avg300=0 total=987654320\n"
                               "full avg10=20.10 avg60=0 avg300=0 total=555555556\n")
    snap = later(host)
    totals = values(snap, "gpu_host_pressure_stalled_seconds_total")
    assert ("io", "some") not in totals
    assert totals[("io", "full")] == pytest.approx(555.555556)
    assert snap.readings.host_signals.io_pressure_some == pytest.approx(0.3421)  # share fine
    assert host.collector.errors() == 1


# --- disks, network --------------------------------------------------------------------------
def diskstats(sda_ms: int, sdb_ms: int) -> str:
    return "".join(f"   8  {i} {name} 1 0 0 0 0 0 0 0 0 {ms} 0\n"
                   for i, (name, ms) in enumerate((("sda", sda_ms), ("sdb", sdb_ms))))


def test_a_disks_busy_time_going_backwards_or_far_past_the_interval(tmp_path: Path) -> None:
    host = Host(tmp_path)
    write(host, "diskstats", diskstats(10_000, 10_000))
    host.collect()
    write(host, "diskstats", diskstats(5_000, 11_300))  # sda re-created; sdb 1.3 s in 1 s
    snap = later(host)
    assert values(snap, "gpu_host_disk_busy_ratio") == {("sdb",): 1.0}  # a late poll
    assert snap.readings.host.disk_busy_ratio == {"sdb": 1.0}
    assert host.collector.errors() == 1
    write(host, "diskstats", diskstats(5_500, 13_000))  # sdb 1.7 s in 1 s: no poll is that late
    snap = later(host)
    assert values(snap, "gpu_host_disk_busy_ratio") == {("sda",): 0.5}
    assert host.collector.errors() == 1


def netdev(errors: int, drops: int) -> str:
    return ("Inter-| Receive | Transmit\n face |bytes packets errs drop|bytes\n"
            f"  eth0: 1 1 {errors} {drops} 0 0 0 0 1 1 0 0 0 0 0 0\n")


def test_network_counters_negative_are_absent_going_backwards_are_a_reset(
        tmp_path: Path) -> None:
    host = Host(tmp_path)
    write(host, "net/dev", netdev(10, 20))
    host.collect()
    write(host, "net/dev", netdev(-1, 5))  # drops: the interface was re-created
    snap = later(host)
    assert snap.series("gpu_host_network_receive_errors_total") == []
    assert values(snap, "gpu_host_network_receive_drops_total") == {("eth0",): 5}
    assert host.collector.errors() == 1
    write(host, "net/dev", netdev(3, 6))
    snap = later(host)
    assert values(snap, "gpu_host_network_receive_errors_total") == {("eth0",): 3}
    assert host.collector.errors() == 0


def test_a_rejected_series_is_logged_once_and_other_series_of_its_metric_each_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = Host(tmp_path)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            write(host, "loadavg", "-1 -2 3 1/2 3")
            later(host)
            assert host.collector.errors() == 2
    assert [m.split(" reads ")[0] for m in rejected(caplog)] == [
        "host: gpu_host_load_average:1m", "host: gpu_host_load_average:5m"]


def test_each_rejected_series_is_named_by_its_labels_in_the_log(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = Host(tmp_path)
    write(host, "diskstats", diskstats(10_000, 10_000))
    write(host, "pressure/io", "some avg10=101.00 avg60=0 avg300=0 total=100\n"
                               "full avg10=102.00 avg60=0 avg300=0 total=50\n")
    host.collect()
    write(host, "diskstats", diskstats(1_000, 2_000))  # both went backwards
    with caplog.at_level(logging.WARNING):
        later(host)
    assert sorted(m.split(" reads ")[0] for m in rejected(caplog)) == [
        "host: gpu_host_disk_busy_ratio:sda", "host: gpu_host_disk_busy_ratio:sdb",
        "host: gpu_host_pressure_ratio:io/full", "host: gpu_host_pressure_ratio:io/some"]
    assert host.collector.errors() == 4


def test_two_polls_at_the_same_instant_have_no_rate_and_no_ratio(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.collect()
    snap = host.one_second_later()
    assert snap.readings.host.values["context_switches_per_s"] == 40000
    (host.root / "stat").write_text(stat(user=10**7, iowait=10**6, steal=10**5, ctxt=10**10))
    again = host.collect()  # the clock did not move
    facts = again.readings.host
    assert "context_switches_per_s" not in facts.values
    assert "swap_in_bytes_per_s" not in facts.values
    assert facts.disk_busy_ratio == {} and again.series("gpu_host_disk_busy_ratio") == []
    assert again.get("gpu_host_context_switches_total") == 10**10
    assert host.collector.errors() == 0


@pytest.mark.parametrize("source", ["stat", "meminfo", "vmstat", "loadavg", "diskstats",
                                    "net/dev", "pressure/cpu", "pressure/memory",
                                    "pressure/io"])
def test_a_failing_source_is_named_in_the_log(tmp_path: Path, source: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    host = Host(tmp_path)
    (host.root / source).unlink()
    (host.root / source).mkdir()  # reading it fails: a directory
    with caplog.at_level(logging.WARNING):
        host.collect()
    assert [r.getMessage().split(" failed: ")[0] for r in caplog.records] == [
        f"reading /proc/{source}"]
    assert host.collector.errors() == 1


def test_swap_pages_are_counted_in_the_hosts_page_size(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.collector = HostCollector(host.root, host.clock, page_size=65536)
    assert values(host.collect(), "gpu_host_swap_bytes_total") == {
        ("in",): 1000 * 65536, ("out",): 2000 * 65536}


def test_negative_free_swap_is_more_swap_used_than_there_is(tmp_path: Path) -> None:
    host = Host(tmp_path)
    write(host, "meminfo", "MemTotal: 1000 kB\nMemAvailable: 10 kB\nSwapTotal: 10 kB\n"
                           "SwapFree: -5 kB\n")
    snap = host.collect()
    assert snap.series("gpu_host_swap_used_bytes") == []
    assert "swap_used_bytes" not in snap.readings.host.values
    assert host.collector.errors() == 1
