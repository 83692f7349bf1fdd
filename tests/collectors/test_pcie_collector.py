"""The PCIe/NUMA collector on fixture sysfs trees and on the simulated node, and
the udev watcher fed by a fake event source (never a real netlink socket)."""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_exporter.collectors.pcie import PcieCollector
from gpu_exporter.collectors.udev import (
    NETLINK_KOBJECT_UEVENT,
    KernelUevents,
    UdevEvent,
    UdevWatcher,
    open_source,
    parse_uevent,
)
from gpu_exporter.host.pci import PciDevice
from gpu_exporter.nvml.session import Gpu, Identity, NvmlSession
from gpu_exporter.poll.readings import PcieKernelView
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from tests.simnode import SimRun

FIXTURES = Path(__file__).parents[1] / "fixtures" / "sys"
SWITCH = FIXTURES / "switch"
BAD_SYS = FIXTURES / "malformed"


def session(*bus_ids: str) -> NvmlSession:
    s = NvmlSession()
    s.gpus = [Gpu(i, None, Identity(i, uuid=f"GPU-{i}", pci_bus_id=bus))
              for i, bus in enumerate(bus_ids)]
    return s


def collect(collector: PcieCollector) -> Snapshot:
    out = SnapshotBuilder(0.0)
    collector.collect(out)
    return out.build()


def by_port(snap: Snapshot, name: str, gpu: str) -> dict[str, float]:
    return {labels["port"]: v for labels, v in snap.series(name) if labels["gpu"] == gpu}


def test_gpu_behind_a_switch_reports_its_link_and_the_ports_above_it() -> None:
    # NVML's spelling of the bus id (eight-digit domain, upper case) matches sysfs'.
    s = session("00000000:18:00.0", "00000000:2A:00.0", "00000000:99:00.0", "")
    snap = collect(PcieCollector(s, SWITCH))
    assert snap.series("gpu_numa_info") == [
        ({"gpu": "0", "uuid": "GPU-0", "numa_node": "0", "local_cpulist": "0-31,64-95"}, 1.0),
        ({"gpu": "1", "uuid": "GPU-1", "numa_node": "-1", "local_cpulist": "0-127"}, 1.0)]
    assert by_port(snap, "gpu_pcie_sysfs_link_generation", "0") == {"gpu": 5, "upstream": 4}
    assert by_port(snap, "gpu_pcie_sysfs_link_generation_max", "0") == {"gpu": 5, "upstream": 5}
    assert by_port(snap, "gpu_pcie_sysfs_link_width", "0") == {"gpu": 16, "upstream": 8}
    assert by_port(snap, "gpu_pcie_sysfs_link_width_max", "0") == {"gpu": 16, "upstream": 16}
    assert {labels["severity"]: v for labels, v in snap.series("gpu_pcie_aer_errors_total")} == {
        "correctable": 17, "nonfatal": 2, "fatal": 0}
    # GPU 1: on a root complex (no upstream port), link down, no AER reporting.
    assert by_port(snap, "gpu_pcie_sysfs_link_generation", "1") == {}
    assert by_port(snap, "gpu_pcie_sysfs_link_generation_max", "1") == {"gpu": 3}
    assert by_port(snap, "gpu_pcie_sysfs_link_width", "1") == {"gpu": 0}
    # GPU 2 is not on the bus, GPU 3 has no known bus id: no series for either.
    assert {labels["gpu"] for labels, _ in snap.series("gpu_numa_info")} == {"0", "1"}
    # Without a udev watcher there is no event counter.
    assert snap.series("gpu_udev_events_total") == []


def test_facts_for_the_diagnosis_rules() -> None:
    snap = collect(PcieCollector(session("0000:18:00.0", "0000:2a:00.0"), SWITCH))
    devices = snap.readings.pcie
    assert set(devices) == {0, 1}
    assert isinstance(devices[0], PciDevice) and devices[0].upstream_bdf == "0000:17:00.0"
    assert snap.readings.pcie_view[0] == PcieKernelView(
        numa_node=0, local_cpulist="0-31,64-95", upstream_generation=4,
        upstream_generation_max=5, upstream_width=8, upstream_width_max=16,
        aer_correctable=17)
    assert snap.readings.pcie_view[1].numa_node is None


def test_malformed_attributes_are_counted_logged_once_and_the_rest_exported(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_exporter.collectors.pcie")
    collector = PcieCollector(session("0000:18:00.0"), BAD_SYS)
    collect(collector)
    snap = collect(collector)
    assert collector.errors() == 3
    assert len(caplog.records) == 3
    assert by_port(snap, "gpu_pcie_sysfs_link_width", "0") == {"upstream": 16}
    assert by_port(snap, "gpu_pcie_sysfs_link_generation", "0") == {"gpu": 5, "upstream": 5}
    assert snap.series("gpu_numa_info") == [
        ({"gpu": "0", "uuid": "GPU-0", "numa_node": "1", "local_cpulist": ""}, 1.0)]
    assert {labels["severity"]: v for labels, v in snap.series("gpu_pcie_aer_errors_total")} == {
        "nonfatal": 3, "fatal": 1}


def test_current_links_are_read_every_poll_and_placement_again_when_the_device_moves(
        tmp_path: Path) -> None:
    import shutil

    from gpu_exporter.collectors.pcie import PLACEMENT_REFRESH_POLLS

    tree = tmp_path / "sys"
    shutil.copytree(SWITCH, tree, symlinks=True)
    gpu_dir = tree / "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"
    collector = PcieCollector(session("0000:18:00.0"), tree)
    collect(collector)
    # What moves is read every poll: the link downtrains, AER counts.
    (gpu_dir / "current_link_width").write_text("8\n")
    snap = collect(collector)
    assert by_port(snap, "gpu_pcie_sysfs_link_width", "0")["gpu"] == 8
    # Placement (NUMA node, maxima) is kept between polls...
    (gpu_dir / "numa_node").write_text("1\n")
    assert snap.series("gpu_numa_info")[0][0]["numa_node"] == "0"
    assert collect(collector).series("gpu_numa_info")[0][0]["numa_node"] == "0"
    # ...read again once the device left the bus and came back (re-enumerated)...
    link = tree / "bus/pci/devices/0000:18:00.0"
    target = link.readlink()
    link.unlink()
    assert not collect(collector).series("gpu_numa_info")
    link.symlink_to(target)
    assert collect(collector).series("gpu_numa_info")[0][0]["numa_node"] == "1"
    # ...and every PLACEMENT_REFRESH_POLLS polls in any case.
    (gpu_dir / "numa_node").write_text("0\n")
    numa = {collect(collector).series("gpu_numa_info")[0][0]["numa_node"]
            for _ in range(PLACEMENT_REFRESH_POLLS)}
    assert numa == {"0", "1"}


# --- udev -------------------------------------------------------------------------------
class FakeSource:
    """Hands out queued events. The watcher asks for the next event only after
    it has handled the last one, so ``events.join()`` returns once every queued
    event has been handled."""

    def __init__(self) -> None:
        self.events: queue.Queue[UdevEvent] = queue.Queue()
        self.closed = False
        self._handing_out = False

    def poll(self, timeout: float) -> UdevEvent | None:
        if self._handing_out:
            self._handing_out = False
            self.events.task_done()
        try:
            event = self.events.get(timeout=timeout)
        except queue.Empty:
            return None
        self._handing_out = True
        return event

    def wake(self) -> None:
        pass  # its poll times out within the test's poll_timeout

    def close(self) -> None:
        self.closed = True

    def send(self, *events: UdevEvent) -> None:
        for event in events:
            self.events.put(event)
        self.events.join()


def test_a_remove_event_marks_the_gpu_lost_at_once_and_is_counted() -> None:
    s = session("00000000:18:00.0", "00000000:2A:00.0")
    source = FakeSource()
    collector = PcieCollector(s, SWITCH, source)
    try:
        snap = collect(collector)
        assert {labels["action"]: v for labels, v in snap.series("gpu_udev_events_total")} == {
            "add": 0, "remove": 0}
        source.send(("remove", "0000:2a:00.0"),
                    ("remove", "0000:00:1f.0"),  # not a GPU: ignored
                    ("change", "0000:18:00.0"))  # nothing to act on
        assert s.gpus[1].lost and not s.gpus[0].lost
        snap = collect(collector)
        assert {labels["action"]: v for labels, v in snap.series("gpu_udev_events_total")} == {
            "add": 0, "remove": 1}
        s.gpus[1].next_recovery_try = 1e12
        source.send(("add", "0000:2a:00.0"))
        # The next poll tries the GPU again instead of waiting for the retry time.
        assert s.gpus[1].next_recovery_try == 0.0
        assert collector.watcher is not None and collector.watcher.counts() == {
            "add": 1, "remove": 1}
    finally:
        collector.close()
    assert source.closed
    assert collector.watcher is None


def test_close_stops_the_watcher_thread() -> None:
    source = FakeSource()
    watcher = UdevWatcher(session("0000:18:00.0"), source, poll_timeout=0.01)
    watcher.start()
    thread = watcher._thread
    assert thread is not None and thread.is_alive()
    watcher.stop()
    assert not thread.is_alive()
    assert source.closed


def test_a_failing_source_ends_the_watcher_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    class Broken(FakeSource):
        def poll(self, timeout: float) -> UdevEvent | None:
            raise OSError("netlink socket closed")

    caplog.set_level(logging.WARNING, logger="gpu_exporter.collectors.udev")
    watcher = UdevWatcher(session("0000:18:00.0"), Broken())
    watcher.start()
    assert watcher._thread is not None
    watcher._thread.join(timeout=30)
    assert not watcher._thread.is_alive()
    assert "netlink socket closed" in caplog.text
    watcher.stop()


def test_no_udev_monitor_for_a_sysfs_that_is_not_the_hosts(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpu_exporter.collectors.udev")
    assert open_source(SWITCH) is None
    assert "not /sys" in caplog.text


# --- the simulated node ------------------------------------------------------------------
def test_simulated_node_shows_numa_and_links_of_every_gpu() -> None:
    with SimRun("healthy", metrics={"detail": True}) as run:
        snap = run.poll(2)
    numa = {labels["gpu"]: (labels["numa_node"], labels["local_cpulist"])
            for labels, _ in snap.series("gpu_numa_info")}
    assert numa == {**{str(i): ("0", "0-63") for i in range(4)},
                    **{str(i): ("1", "64-127") for i in range(4, 8)}}
    widths = {(labels["gpu"], labels["port"]): v
              for labels, v in snap.series("gpu_pcie_sysfs_link_width")}
    assert set(widths.values()) == {16}
    assert len(widths) == 16
    assert set(v for labels, v in snap.series("gpu_pcie_aer_errors_total")) == {0}
    assert snap.get("gpu_exporter_collector_success", collector="pcie") == 1
    assert snap.get("gpu_exporter_collector_errors_total", collector="pcie") == 0


def test_simulated_downtrained_link_shows_on_the_gpu_and_its_upstream_port() -> None:
    with SimRun("pcie-downtrained-link-degraded", metrics={"detail": True}) as run:
        snap = run.poll(2)
    assert by_port(snap, "gpu_pcie_sysfs_link_width", "3") == {"gpu": 8, "upstream": 8}
    assert by_port(snap, "gpu_pcie_sysfs_link_width", "2") == {"gpu": 16, "upstream": 16}
    assert snap.readings.pcie_view[3].upstream_width == 8


def test_simulated_aer_errors_grow_at_the_scenarios_rate() -> None:
    with SimRun("pcie-errors-link-integrity") as run:
        before = run.poll(2).get("gpu_pcie_aer_errors_total", gpu="5", severity="correctable")
        after = run.poll(10).get("gpu_pcie_aer_errors_total", gpu="5", severity="correctable")
        other = run.snapshot.get(  # type: ignore[union-attr]
            "gpu_pcie_aer_errors_total", gpu="4", severity="correctable")
    assert before is not None and after is not None
    assert after - before == pytest.approx(40, abs=1)
    assert other == 0


def test_a_lost_gpu_leaves_sysfs() -> None:
    with SimRun("gpu-lost") as run:
        assert "5" in {labels["gpu"] for labels, _ in run.poll(2).series("gpu_numa_info")}
        snap = run.poll(6)
    assert {labels["gpu"] for labels, _ in snap.series("gpu_numa_info")} == {
        "0", "1", "2", "3", "4", "6", "7"}
    assert 5 not in snap.readings.pcie


# --- the kernel's uevents (the real netlink socket) -----------------------------------------
# As lib/kobject_uevent.c sends them: "ACTION@DEVPATH", then each variable, every
# part NUL-ended; drivers/pci/pci-driver.c adds PCI_CLASS, PCI_ID, PCI_SUBSYS_ID,
# PCI_SLOT_NAME and MODALIAS for a PCI device.
_REMOVE = (b"remove@/devices/pci0000:15/0000:15:01.0/0000:18:00.0\0ACTION=remove\0"
           b"DEVPATH=/devices/pci0000:15/0000:15:01.0/0000:18:00.0\0SUBSYSTEM=pci\0"
           b"PCI_CLASS=30200\0PCI_ID=10DE:2330\0PCI_SUBSYS_ID=10DE:16C1\0"
           b"PCI_SLOT_NAME=0000:18:00.0\0MODALIAS=pci:v000010DEd00002330sv000010DEsd000016C1"
           b"bc03sc02i00\0SEQNUM=4711\0")


def test_a_kernel_pci_uevent_is_its_action_and_slot_and_nothing_else_is_one() -> None:
    assert parse_uevent(_REMOVE) == ("remove", "0000:18:00.0")
    add = _REMOVE.replace(b"remove", b"add")
    assert parse_uevent(add) == ("add", "0000:18:00.0")
    # Without PCI_SLOT_NAME the slot is the device path's last part.
    bare = b"add@/devices/pci0000:15/0000:15:01.0/0000:18:00.0\0ACTION=add\0SUBSYSTEM=pci\0"
    assert parse_uevent(bare) == ("add", "0000:18:00.0")
    usb = b"add@/devices/pci0000:00/0000:00:14.0/usb1\0ACTION=add\0SUBSYSTEM=usb\0"
    assert parse_uevent(usb) is None
    # udevd's re-sent copy (its own binary header), and what is no uevent at all.
    assert parse_uevent(b"libudev\0\xfe\xed\xca\xfe" + _REMOVE) is None
    for junk in (b"", b"\0\0", b"remove", b"remove@", b"remove@devices\0SUBSYSTEM=pci\0",
                 _REMOVE[:20]):
        assert parse_uevent(junk) is None


@given(st.binary(max_size=300))
def test_any_bytes_on_the_socket_are_an_event_or_none_never_an_error(data: bytes) -> None:
    found = parse_uevent(data)
    assert found is None or all(isinstance(part, str) for part in found)


@pytest.fixture
def kernel_uevents() -> Iterator[KernelUevents]:
    try:
        source = KernelUevents()
    except OSError as exc:
        pytest.skip(f"no netlink uevent socket here: {exc}")
    yield source
    source.close()


def test_a_uevent_sent_by_a_process_is_not_the_kernels_and_is_ignored(
        kernel_uevents: KernelUevents) -> None:
    """Any local process may send a netlink datagram to the exporter's socket;
    a forged "remove" must not mark a GPU lost. Only the kernel's port (0) is read."""
    port = kernel_uevents._sock.getsockname()[0]  # type: ignore[union-attr]
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT) as forger:
        forger.bind((0, 0))
        forger.sendto(_REMOVE, (port, 0))
        assert kernel_uevents.poll(2.0) is None


def test_a_stop_ends_a_poll_in_flight_at_once(kernel_uevents: KernelUevents) -> None:
    timer = threading.Timer(0.2, kernel_uevents.wake)
    timer.start()
    t0 = time.monotonic()
    assert kernel_uevents.poll(30.0) is None
    assert time.monotonic() - t0 < 5.0
    kernel_uevents.close()
    assert kernel_uevents.poll(0.0) is None
