"""The host collector on fixture trees, on the simulated node, and on this
machine's own /proc.

Update the golden exposition after an intended change with:
UPDATE_GOLDEN=1 .venv/bin/pytest tests/collectors/test_host_collector.py -k golden
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from gpu_exporter.collectors.host import HostCollector
from gpu_exporter.host.files import TEXT_FILE_LIMIT
from gpu_exporter.host.reading import HostReading
from gpu_exporter.poll.readings import HostSignals
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.simulator.clock import VirtualClock
from gpu_exporter.web.render import LabelCache, render
from tests.golden_files import check_golden
from tests.simnode import SimRun

FIXTURES = Path(__file__).parents[1] / "fixtures" / "proc"
GOLDEN = Path(__file__).parents[1] / "golden" / "host.prom"
PAGE = 4096
REQUIRED = ("gpu_host_cpu_iowait_ratio", "gpu_host_pressure_ratio", "gpu_host_swap_used_bytes",
            "gpu_host_memory_available_bytes")


class Host:
    """A host collector on a copy of a fixture tree, on a virtual clock."""

    def __init__(self, tmp_path: Path, fixture: str = "normal") -> None:
        self.root = tmp_path / "proc"
        shutil.copytree(FIXTURES / fixture, self.root, symlinks=True)
        self.clock = VirtualClock(1000.0)
        self.collector = HostCollector(self.root, self.clock, page_size=PAGE)

    def collect(self) -> Snapshot:
        out = SnapshotBuilder(0.0)
        self.collector.collect(out)
        return out.build()

    def one_second_later(self) -> Snapshot:
        shutil.copytree(FIXTURES / "normal-1s", self.root, symlinks=True, dirs_exist_ok=True)
        self.clock.advance(1.0)
        return self.collect()


def values(snap: Snapshot, name: str) -> dict[tuple[str, ...], float]:
    return {tuple(labels.values()): v for labels, v in snap.series(name)}


def test_first_poll_exports_counters_and_gauges_but_no_ratio(tmp_path: Path) -> None:
    snap = Host(tmp_path).collect()
    for name in ("gpu_host_cpu_iowait_ratio", "gpu_host_cpu_steal_ratio",
                 "gpu_host_disk_busy_ratio"):
        assert snap.series(name) == [], name
    assert snap.get("gpu_host_context_switches_total") == 987654321
    assert snap.get("gpu_host_memory_available_bytes") == 200000000 * 1024
    assert snap.get("gpu_host_memory_total_bytes") == 263921664 * 1024
    assert snap.get("gpu_host_swap_used_bytes") == (8388604 - 4194304) * 1024
    assert values(snap, "gpu_host_swap_bytes_total") == {("in",): 1000 * PAGE,
                                                          ("out",): 2000 * PAGE}
    assert values(snap, "gpu_host_load_average") == {("1m",): 12.5, ("5m",): 10.25,
                                                      ("15m",): 8.0}
    facts = snap.readings.host
    assert isinstance(facts, HostReading)
    assert facts.iowait_ratio is None and "swap_in_bytes_per_s" not in facts.values


def test_ratios_and_rates_over_the_interval(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.collect()
    snap = host.one_second_later()
    assert snap.get("gpu_host_cpu_iowait_ratio") == pytest.approx(0.15)
    assert snap.get("gpu_host_cpu_steal_ratio") == pytest.approx(0.02)
    assert values(snap, "gpu_host_disk_busy_ratio") == pytest.approx(
        {("nvme0n1",): 0.97, ("sda",): 0.01, ("dm-0",): 0.005})
    facts = snap.readings.host
    assert facts.values["swap_in_bytes_per_s"] == 256 * PAGE
    assert facts.values["swap_out_bytes_per_s"] == 512 * PAGE
    assert facts.values["context_switches_per_s"] == 40000
    signals = snap.readings.host_signals
    assert isinstance(signals, HostSignals)
    assert signals.iowait_ratio == pytest.approx(0.15)
    assert signals.io_pressure_some == pytest.approx(0.3421)
    assert signals.cpu_pressure_some == pytest.approx(0.125)
    assert signals.memory_pressure_full == 0.0
    assert signals.swap_bytes_per_s == 768 * PAGE


def test_pressure_for_every_resource_and_kind(tmp_path: Path) -> None:
    snap = Host(tmp_path).collect()
    assert values(snap, "gpu_host_pressure_ratio") == pytest.approx({
        ("cpu", "some"): 0.125, ("cpu", "full"): 0.0, ("memory", "some"): 0.0,
        ("memory", "full"): 0.0, ("io", "some"): 0.3421, ("io", "full"): 0.201})
    assert values(snap, "gpu_host_pressure_stalled_seconds_total") == pytest.approx({
        ("cpu", "some"): 123.456789, ("cpu", "full"): 0.0, ("memory", "some"): 0.005,
        ("memory", "full"): 0.002, ("io", "some"): 987.654321, ("io", "full"): 555.555555})


def test_network_counters_leave_virtual_interfaces_out(tmp_path: Path) -> None:
    snap = Host(tmp_path).collect()
    assert values(snap, "gpu_host_network_receive_drops_total") == {
        ("bond0",): 2, ("eth0",): 42, ("ib0",): 7}
    assert values(snap, "gpu_host_network_receive_errors_total") == {
        ("bond0",): 1, ("eth0",): 3, ("ib0",): 0}


def test_without_psi_the_pressure_series_are_absent_and_said_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpu_exporter.collectors.host")
    host = Host(tmp_path, "no-psi")
    for _ in range(3):
        snap = host.collect()
        host.clock.advance(1.0)
    assert snap.series("gpu_host_pressure_ratio") == []
    assert snap.series("gpu_host_pressure_stalled_seconds_total") == []
    # No MemAvailable on such an old kernel: absent, not 0.
    assert snap.get("gpu_host_memory_available_bytes") is None
    assert snap.get("gpu_host_swap_used_bytes") == (8388604 - 4194304) * 1024
    assert host.collector.errors() == 0
    said = [r for r in caplog.records if "/proc/pressure/" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.INFO] * 3  # once per resource, not per poll
    assert not any("pressure" in name for name in snap.readings.host.values)
    assert snap.readings.host_signals.io_pressure_some is None


def test_malformed_files_are_counted_and_the_rest_still_exported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_exporter.collectors.host")
    host = Host(tmp_path, "malformed")
    host.collect()
    snap = host.collect()
    # stat, pressure/cpu, pressure/memory, meminfo, vmstat, loadavg, diskstats, net/dev
    assert host.collector.errors() == 8
    assert values(snap, "gpu_host_pressure_ratio") == {("io", "some"): 0.01,
                                                       ("io", "full"): 0.005}
    for name in ("gpu_host_context_switches_total", "gpu_host_memory_available_bytes",
                 "gpu_host_swap_bytes_total", "gpu_host_load_average"):
        assert snap.series(name) == [], name
    assert len(caplog.records) == 8  # each failing source once, not every poll


def test_a_source_that_recovers_is_exported_again(tmp_path: Path) -> None:
    host = Host(tmp_path)
    (host.root / "loadavg").write_text("garbage\n")
    assert host.collect().series("gpu_host_load_average") == []
    assert host.collector.errors() == 1
    (host.root / "loadavg").write_text("1.00 2.00 3.00 1/100 5\n")
    assert host.collect().get("gpu_host_load_average", window="15m") == 3.0
    assert host.collector.errors() == 0


def test_an_unreadable_root_fails_the_collector(tmp_path: Path) -> None:
    collector = HostCollector(tmp_path / "not-mounted")
    with pytest.raises(RuntimeError, match="no host source"):
        collector.collect(SnapshotBuilder(0.0))


def test_devices_and_interfaces_are_capped(tmp_path: Path) -> None:
    host = Host(tmp_path)
    lines = (host.root / "net" / "dev").read_text().splitlines()[:2]
    lines += [f"eno{i}: 1 1 {i} {i} 0 0 0 0 1 1 0 0 0 0 0 0" for i in range(100)]
    (host.root / "net" / "dev").write_text("\n".join(lines) + "\n")
    host.collector = HostCollector(host.root, host.clock, max_devices=64)
    snap = host.collect()
    names = [labels["interface"] for labels, _ in
             snap.series("gpu_host_network_receive_drops_total")]
    assert len(names) == 64
    assert names == sorted(names)


@pytest.mark.parametrize("count", [3, 4])
def test_the_cap_is_said_once_per_kind_when_it_bites(tmp_path: Path, count: int,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    host = Host(tmp_path)
    lines = (host.root / "net" / "dev").read_text().splitlines()[:2]
    lines += [f"eno{i}: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0" for i in range(count)]
    (host.root / "net" / "dev").write_text("\n".join(lines) + "\n")
    (host.root / "diskstats").write_text("".join(
        f"   8  {i} sd{chr(97 + i)} 1 0 0 0 0 0 0 0 0 {i} 0\n" for i in range(count)))
    host.collector = HostCollector(host.root, host.clock, max_devices=3)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            host.clock.advance(1)
            snap = host.collect()
    assert len(values(snap, "gpu_host_network_receive_drops_total")) == 3
    assert len(values(snap, "gpu_host_disk_busy_ratio")) == 3
    warnings = [r.getMessage() for r in caplog.records if "bound the number" in r.getMessage()]
    if count == 3:
        assert warnings == []
    else:  # both from the first poll (disks' busy seconds are exported from the first)
        assert warnings == [
            "4 block devices: exporting the first 3 by name to bound the number of series",
            "4 network interfaces: exporting the first 3 by name to bound the number of series"]
    assert len(values(snap, "gpu_host_disk_busy_seconds_total")) == 3


def test_host_exposition_matches_golden(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.collect()
    text = render(host.one_second_later(), False, LabelCache()).decode()
    check_golden(GOLDEN, lambda: text,
                 "UPDATE_GOLDEN=1 ./scripts/test.sh tests/collectors/test_host_collector.py"
                 " -k golden")


# --- end to end ------------------------------------------------------------------------
def test_simulated_healthy_node_shows_the_scenarios_host() -> None:
    with SimRun("healthy", metrics={"detail": True}) as run:
        snap = run.poll(3)
    # HOST_DEFAULTS of the simulator: the healthy scenario keeps them.
    assert snap.get("gpu_host_cpu_iowait_ratio") == pytest.approx(0.002, abs=1e-3)
    assert snap.get("gpu_host_cpu_steal_ratio") == pytest.approx(0.0, abs=1e-3)
    assert values(snap, "gpu_host_pressure_ratio") == pytest.approx({
        ("cpu", "some"): 0.01, ("cpu", "full"): 0.0, ("memory", "some"): 0.0,
        ("memory", "full"): 0.0, ("io", "some"): 0.005, ("io", "full"): 0.002})
    assert snap.get("gpu_host_memory_available_bytes") == pytest.approx(
        0.7 * 2 * 1024**4, rel=1e-6)
    assert snap.get("gpu_host_swap_used_bytes") == 0
    assert values(snap, "gpu_host_disk_busy_ratio") == pytest.approx(
        {("nvme0n1",): 0.05, ("nvme1n1",): 0.04}, abs=1e-3)
    assert snap.get("gpu_exporter_collector_success", collector="host") == 1


def test_simulated_io_starved_node_shows_iowait_io_pressure_and_a_busy_disk() -> None:
    """At the defaults the shares are the counters' rates over a window (what
    a dashboard's rate() reads); with detail the last poll's ratios agree."""
    with SimRun("memory-held-sm-idle-data-pipeline-io") as run:
        before = run.poll(3)
        after = run.poll(10)

    def grown(name: str, **labels: str) -> float:
        return after.get(name, **labels) - before.get(name, **labels)  # type: ignore[operator]

    iowait = grown("gpu_host_cpu_iowait_seconds_total") / grown("gpu_host_cpu_seconds_total")
    assert iowait == pytest.approx(0.42, abs=1e-3)
    assert grown("gpu_host_pressure_stalled_seconds_total", resource="io",
                 kind="some") / 10 == pytest.approx(0.55, abs=0.01)
    assert grown("gpu_host_disk_busy_seconds_total", device="sdb") / 10 == pytest.approx(
        0.99, abs=2e-3)
    for name in ("gpu_host_cpu_iowait_ratio", "gpu_host_pressure_ratio",
                 "gpu_host_disk_busy_ratio"):
        assert not after.series(name), f"{name} is detail"
    with SimRun("memory-held-sm-idle-data-pipeline-io", metrics={"detail": True}) as run:
        snap = run.poll(3)
    assert snap.get("gpu_host_cpu_iowait_ratio") == pytest.approx(0.42, abs=1e-3)
    assert snap.get("gpu_host_pressure_ratio", resource="io", kind="some") == pytest.approx(0.55)
    assert snap.get("gpu_host_disk_busy_ratio", device="sdb") == pytest.approx(0.99, abs=1e-3)


def test_simulated_swapping_node_swaps_at_the_scenarios_rate() -> None:
    with SimRun("memory-held-sm-idle-host-swapping") as run:
        run.poll(2)
        before = run.snapshot
        assert before is not None
        after = run.poll(10)
    grown = {d: after.get("gpu_host_swap_bytes_total", direction=d)
             - before.get("gpu_host_swap_bytes_total", direction=d)  # type: ignore[operator]
             for d in ("in", "out")}
    assert grown["in"] == pytest.approx(10 * 52428800, abs=2 * os.sysconf("SC_PAGE_SIZE"))
    assert grown["out"] == pytest.approx(10 * 83886080, abs=2 * os.sysconf("SC_PAGE_SIZE"))
    assert after.get("gpu_host_swap_used_bytes") == pytest.approx(0.64 * 68719476736, rel=1e-6)


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs a Linux /proc")
def test_this_machines_proc_has_the_required_families() -> None:
    collector = HostCollector(Path("/proc"))
    snap = None
    # The iowait ratio needs CPU time to pass between two readings.
    for _ in range(1000):
        out = SnapshotBuilder(0.0)
        collector.collect(out)
        snap = out.build()
        if snap.series("gpu_host_cpu_iowait_ratio"):
            break
    assert snap is not None
    assert collector.errors() == 0
    iowait = snap.get("gpu_host_cpu_iowait_ratio")
    assert iowait is not None and 0.0 <= iowait <= 1.0
    total = snap.get("gpu_host_memory_total_bytes")
    available = snap.get("gpu_host_memory_available_bytes")
    assert total is not None and available is not None and 0 < available <= total
    swap_used = snap.get("gpu_host_swap_used_bytes")
    assert swap_used is not None and swap_used >= 0
    if Path("/proc/pressure/io").exists():
        pressure = values(snap, "gpu_host_pressure_ratio")
        assert {("io", "some"), ("memory", "some"), ("cpu", "some")} <= set(pressure)
        assert all(0.0 <= v <= 1.0 for v in pressure.values())
    assert snap.get("gpu_host_context_switches_total") > 0  # type: ignore[operator]
    load = values(snap, "gpu_host_load_average")
    assert set(load) == {("1m",), ("5m",), ("15m",)} and min(load.values()) >= 0


def test_what_the_log_says_of_an_absent_a_failing_and_a_recovered_source(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpu_exporter.collectors.host")
    host = Host(tmp_path)
    (host.root / "loadavg").write_text("garbage\n")
    (host.root / "vmstat").unlink()
    host.collect()
    host.collect()
    (host.root / "loadavg").write_text("1.00 2.00 3.00 1/100 5\n")
    host.collect()
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, f"/proc/vmstat does not exist on this host ({host.root / 'vmstat'}); "
                       "its series are absent"),
        (logging.WARNING, f"reading /proc/loadavg failed: {host.root / 'loadavg'}: fewer than "
                          "three load averages; its series are absent until it can be read"),
        (logging.INFO, "/proc/loadavg can be read again")]


def test_a_source_that_fails_or_goes_again_after_recovering_is_said_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpu_exporter.collectors.host")
    host = Host(tmp_path)
    good = (host.root / "loadavg").read_text()
    for text in ("garbage\n", good, "garbage\n", good):
        (host.root / "loadavg").write_text(text)
        host.collect()
    vmstat = (host.root / "vmstat").read_text()
    for present in (False, True, False):
        if present:
            (host.root / "vmstat").write_text(vmstat)
        else:
            (host.root / "vmstat").unlink()
        host.collect()
    said = [r.getMessage().split(" ")[0:2] for r in caplog.records]
    assert said == [["reading", "/proc/loadavg"], ["/proc/loadavg", "can"],
                    ["reading", "/proc/loadavg"], ["/proc/loadavg", "can"],
                    ["/proc/vmstat", "does"], ["/proc/vmstat", "does"]]


def test_a_root_where_every_file_is_garbage_fails_the_collector_naming_the_first(
        tmp_path: Path) -> None:
    host = Host(tmp_path)
    for name in ("stat", "meminfo", "vmstat", "loadavg", "diskstats", "net/dev",
                 *(f"pressure/{r}" for r in ("cpu", "memory", "io"))):
        (host.root / name).write_text("garbage\n")
    (host.root / "vmstat").write_text("pswpin x\n")  # without pswpin it is a kernel without swap
    with pytest.raises(RuntimeError) as err:
        host.collect()
    assert str(err.value) == (f"no host source under {host.root} could be read: "
                              f"{host.root / 'stat'}: no aggregate cpu line")
    assert host.collector.errors() == 9


def test_a_file_that_never_ends_is_refused_at_the_limit_and_the_rest_exported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Something mounted over /proc can serve a file with no end: /dev/zero in
    place of meminfo. It is read no further than the limit, counted as one
    error and said once, and every other source is still exported."""
    host = Host(tmp_path)
    (host.root / "meminfo").unlink()
    (host.root / "meminfo").symlink_to("/dev/zero")
    with caplog.at_level(logging.WARNING):
        snap = host.collect()
        host.collect()
    assert host.collector.errors() == 1
    assert snap.get("gpu_host_memory_available_bytes") is None
    assert snap.get("gpu_host_load_average", window="15m") == 8.0  # the fixture's
    warned = [r.getMessage() for r in caplog.records if "meminfo" in r.getMessage()]
    assert len(warned) == 1 and f"longer than {TEXT_FILE_LIMIT} bytes" in warned[0]
    assert "\n" not in warned[0]
