"""The host CPUs' thermal throttle counters (host/thermal.py) as the kernel
lays them out (Documentation/ABI/testing/sysfs-devices-system-cpu): each
logical CPU shows its core's and its package's counters, so hyperthreads and
the CPUs of one package repeat the same numbers; each is counted once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpu_exporter.collectors.host import THERMAL_EVERY_S, HostCollector
from gpu_exporter.host.files import MalformedFile
from gpu_exporter.host.thermal import read_thermal_throttle
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.simulator.clock import VirtualClock

PROC_FIXTURE = Path(__file__).parents[1] / "fixtures" / "proc" / "normal"


def cpu(sysfs: Path, n: int, package: int, core: int, counts: dict[str, int],
        millis: dict[str, int] | None = None) -> None:
    base = sysfs / "devices" / "system" / "cpu" / f"cpu{n}"
    (base / "topology").mkdir(parents=True, exist_ok=True)
    (base / "topology" / "physical_package_id").write_text(f"{package}\n")
    (base / "topology" / "core_id").write_text(f"{core}\n")
    throttle = base / "thermal_throttle"
    throttle.mkdir(exist_ok=True)
    for kind, value in counts.items():
        (throttle / f"{kind}_throttle_count").write_text(f"{value}\n")
    for kind, value in (millis or {}).items():
        (throttle / f"{kind}_throttle_total_time_ms").write_text(f"{value}\n")


def two_sockets(sysfs: Path) -> None:
    """Two packages of one core with two hyperthreads each: CPUs 0 and 2 are
    package 0's core 0, CPUs 1 and 3 package 1's core 0 (the numbering
    Linux gives a two-socket machine)."""
    for n, package, core_count, package_count in ((0, 0, 5, 40), (2, 0, 5, 40),
                                                   (1, 1, 7, 60), (3, 1, 7, 60)):
        cpu(sysfs, n, package, 0, {"core": core_count, "package": package_count},
            {"core": 1500, "package": 9000 + package})


def test_each_core_and_package_is_counted_once(tmp_path: Path) -> None:
    two_sockets(tmp_path)
    found = read_thermal_throttle(tmp_path)
    assert found is not None
    assert found.events == {"core": 5 + 7, "package": 40 + 60}
    assert found.seconds == {"core": 3.0, "package": (9000 + 9001) / 1000}


def test_cpus_that_keep_no_counters_give_none(tmp_path: Path) -> None:
    assert read_thermal_throttle(tmp_path) is None  # no devices/system/cpu at all
    (tmp_path / "devices" / "system" / "cpu" / "cpu0" / "topology").mkdir(parents=True)
    assert read_thermal_throttle(tmp_path) is None  # CPUs, no thermal_throttle


def test_a_kernel_without_total_time_gives_counts_only(tmp_path: Path) -> None:
    cpu(tmp_path, 0, 0, 0, {"core": 3, "package": 4})
    found = read_thermal_throttle(tmp_path)
    assert found is not None and found.events == {"core": 3, "package": 4}
    assert found.seconds == {}


@pytest.mark.parametrize("text", ["abc\n", "-4\n", "1" * 40 + "\n", ""])
def test_a_counter_that_is_not_one_is_refused_in_one_line(tmp_path: Path, text: str) -> None:
    cpu(tmp_path, 0, 0, 0, {"package": 4})
    path = tmp_path / "devices/system/cpu/cpu0/thermal_throttle/core_throttle_count"
    path.write_text(text)
    with pytest.raises(MalformedFile) as caught:
        read_thermal_throttle(tmp_path)
    assert "\n" not in str(caught.value) and "core_throttle_count" in str(caught.value)


def test_the_topology_is_read_once(tmp_path: Path) -> None:
    two_sockets(tmp_path)
    topology: dict[int, tuple[int, int]] = {}
    read_thermal_throttle(tmp_path, topology)
    assert topology == {0: (0, 0), 1: (1, 0), 2: (0, 0), 3: (1, 0)}
    shutil.rmtree(tmp_path / "devices/system/cpu/cpu0/topology")
    found = read_thermal_throttle(tmp_path, topology)
    assert found is not None and found.events["core"] == 12  # cpu0 still package 0's


class Host:
    def __init__(self, tmp_path: Path) -> None:
        self.procfs = tmp_path / "proc"
        shutil.copytree(PROC_FIXTURE, self.procfs, symlinks=True)
        self.sysfs = tmp_path / "sys"
        self.sysfs.mkdir()
        self.clock = VirtualClock(1000.0)
        self.collector = HostCollector(self.procfs, self.clock, sysfs=self.sysfs)

    def collect(self) -> tuple[Snapshot, SnapshotBuilder]:
        out = SnapshotBuilder(0.0)
        self.collector.collect(out)
        return out.build(), out


def test_the_collector_exports_the_counters_and_hands_them_to_the_diagnosis(
        tmp_path: Path) -> None:
    host = Host(tmp_path)
    two_sockets(host.sysfs)
    snap, out = host.collect()
    assert snap.get("gpu_host_cpu_thermal_throttles_total", kind="core") == 12
    assert snap.get("gpu_host_cpu_thermal_throttles_total", kind="package") == 100
    assert snap.get("gpu_host_cpu_thermal_throttled_seconds_total", kind="core") == 3.0
    signals = out.readings.host_signals
    assert signals is not None
    assert signals.cpu_thermal_kept is True
    assert signals.cpu_thermal_throttles == 112
    assert signals.cpu_thermal_throttled_seconds == pytest.approx(3.0 + 18.001)


def test_the_collector_says_when_the_cpus_keep_none(tmp_path: Path) -> None:
    host = Host(tmp_path)
    snap, out = host.collect()
    assert snap.series("gpu_host_cpu_thermal_throttles_total") == []
    assert out.readings.host_signals is not None
    assert out.readings.host_signals.cpu_thermal_kept is False
    assert out.readings.host_signals.cpu_thermal_throttles is None


def test_a_malformed_counter_is_a_read_error_not_a_missing_cpu(tmp_path: Path) -> None:
    host = Host(tmp_path)
    two_sockets(host.sysfs)
    (host.sysfs / "devices/system/cpu/cpu0/thermal_throttle/core_throttle_count").write_text(
        "garbage\n")
    snap, out = host.collect()
    assert host.collector.errors() == 1
    assert out.readings.host_signals is not None
    assert out.readings.host_signals.cpu_thermal_kept is None  # unknown: a gap
    assert snap.get("gpu_host_cpu_iowait_seconds_total") is not None  # the rest still read


def test_a_counter_going_back_without_a_reboot_is_taken_as_a_reset(tmp_path: Path) -> None:
    host = Host(tmp_path)
    two_sockets(host.sysfs)
    host.collect()
    for n in (0, 2):
        cpu(host.sysfs, n, 0, 0, {"core": 0, "package": 0})
    host.clock.advance(THERMAL_EVERY_S)
    snap, _ = host.collect()
    # A CPU taken offline and back restarts its counters: documented resets.
    assert snap.get("gpu_host_cpu_thermal_throttles_total", kind="core") == 7


def test_the_counters_are_read_every_few_seconds_and_exported_every_poll(
        tmp_path: Path) -> None:
    host = Host(tmp_path)
    two_sockets(host.sysfs)
    host.collect()
    cpu(host.sysfs, 1, 1, 0, {"core": 9, "package": 60})
    host.clock.advance(THERMAL_EVERY_S / 2)
    snap, out = host.collect()
    # Not read again yet: the last reading stands, on the page and for the rules.
    assert snap.get("gpu_host_cpu_thermal_throttles_total", kind="core") == 12
    assert out.readings.host_signals is not None
    assert out.readings.host_signals.cpu_thermal_throttles == 112
    host.clock.advance(THERMAL_EVERY_S / 2)
    snap, _ = host.collect()
    assert snap.get("gpu_host_cpu_thermal_throttles_total", kind="core") == 5 + 9
