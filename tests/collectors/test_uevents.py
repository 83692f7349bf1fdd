"""The uevent reader's parts one at a time (collectors/udev.py): a kernel
message read as the kernel writes it, the socket as the kernel's group gives
it, the watcher's answers and counts, and what it logs when it cannot watch.
Fast on purpose, beside tests/collectors/test_pcie_collector.py (the watcher in the PCIe
collector) and tests/collectors/test_forgeries.py (forged senders): mutation testing runs
these per changed line."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from gpu_exporter.collectors import udev
from gpu_exporter.collectors.udev import KernelUevents, UdevWatcher, open_source, parse_uevent
from gpu_exporter.nvml.session import Gpu, Identity, NvmlSession

SLOT = "0000:18:00.0"
PATH = b"/devices/pci0000:15/0000:15:01.0/0000:18:00.0"


def message(header: bytes, *fields: bytes) -> bytes:
    return b"\0".join((header, *fields)) + b"\0"


def test_the_slot_comes_from_pci_slot_name_else_from_the_device_path() -> None:
    named = message(b"add@" + PATH + b"/extra", b"ACTION=add", b"SUBSYSTEM=pci",
                    b"PCI_SLOT_NAME=" + SLOT.encode())
    assert parse_uevent(named) == ("add", SLOT)
    # a device path may end with a slash: the slot is its last part all the same
    assert parse_uevent(message(b"remove@" + PATH + b"/", b"ACTION=remove",
                                b"SUBSYSTEM=pci")) == ("remove", SLOT)


def test_the_action_variable_is_read_and_the_header_stands_in_without_it() -> None:
    assert parse_uevent(message(b"add@" + PATH, b"ACTION=remove", b"SUBSYSTEM=pci")) == (
        "remove", SLOT)
    assert parse_uevent(message(b"remove@" + PATH, b"SUBSYSTEM=pci")) == ("remove", SLOT)


def test_a_device_path_may_hold_at_signs_and_a_value_equals_signs() -> None:
    # device-tree names carry "@" (soc@0); the header splits at the first
    at = b"/devices/platform/soc@0/pcie@40000000/pci0000:00/0000:00:00.0/0000:01:00.0"
    assert parse_uevent(message(b"add@" + at, b"ACTION=add", b"SUBSYSTEM=pci")) == (
        "add", "0000:01:00.0")
    # a variable's value may hold "=": it is split at the first only
    odd = message(b"add@" + PATH, b"ACTION=add", b"SUBSYSTEM=pci", b"OPTS=a=b=c",
                  b"PCI_SLOT_NAME=" + SLOT.encode())
    assert parse_uevent(odd) == ("add", SLOT)


def test_bytes_that_are_not_ascii_are_replaced_never_an_error() -> None:
    odd = message(b"add@" + PATH, b"ACTION=a\xffd", b"SUBSYSTEM=pci",
                  b"PCI_SLOT_NAME=0000:18:00.\xfe")
    assert parse_uevent(odd) == ("a\ufffdd", "0000:18:00.\ufffd")


class Source:
    def __init__(self) -> None:
        self.closed = False

    def poll(self, timeout: float) -> None:
        return None

    def wake(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def watched(*slots: str) -> UdevWatcher:
    s = NvmlSession()
    s.gpus = [Gpu(i, None, Identity(i, uuid=f"GPU-{i}", pci_bus_id=bus))
              for i, bus in enumerate(slots)]
    return UdevWatcher(s, Source())


def test_each_event_about_a_gpu_is_counted_and_others_are_not(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_exporter.collectors.udev")
    w = watched(SLOT, "0000:2a:00.0")
    assert w.handle("change", SLOT) is False and w.handle("bind", SLOT) is False
    assert w.handle("remove", "0000:99:00.0") is False
    assert w.handle("remove", SLOT) is True and w.handle("add", SLOT) is True
    assert w.handle("remove", SLOT) is True
    assert w.counts() == {"add": 1, "remove": 2}
    said = [r.getMessage() for r in caplog.records if r.name == udev.log.name]
    assert said == ["udev: remove event for GPU PCI device 0000:18:00.0",
                    "udev: add event for GPU PCI device 0000:18:00.0",
                    "udev: remove event for GPU PCI device 0000:18:00.0"]


def test_no_watch_is_said_once_with_the_reason(caplog: pytest.LogCaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.INFO, logger="gpu_exporter.collectors.udev")
    assert open_source(Path("/host/sys")) is None
    assert caplog.messages == ["udev monitor not started: sysfs root /host/sys is not /sys; "
                               "GPUs that leave the bus are noticed by NVML on the next poll"]
    caplog.clear()

    def refused() -> KernelUevents:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(udev, "KernelUevents", refused)
    assert open_source(Path("/sys")) is None
    assert caplog.messages == ["udev monitor not started ([Errno 1] Operation not permitted); "
                               "GPUs that leave the bus are noticed by NVML on the next poll"]


def _kernel_socket() -> KernelUevents:
    """The reader, where this kernel lets a process open the socket at all
    (asked directly, so that a reader that opens it wrong fails, not skips)."""
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM,
                      udev.NETLINK_KOBJECT_UEVENT).close()
    except OSError as exc:
        pytest.skip(f"no netlink uevent socket here: {exc}")
    return KernelUevents()


def test_the_kernels_group_is_joined_on_a_port_of_its_own() -> None:
    first = _kernel_socket()
    second = KernelUevents()  # a second exporter, or the same one reloading
    try:
        for source in (first, second):
            sock = source._sock
            assert sock is not None
            assert (sock.family, sock.type) == (socket.AF_NETLINK, socket.SOCK_DGRAM)
            assert sock.proto == udev.NETLINK_KOBJECT_UEVENT
            assert not sock.get_inheritable()  # a child the exporter starts gets no copy
        # the kernel gives each its own port (0 asks it to choose)
        assert first._sock.getsockname()[0] != second._sock.getsockname()[0]  # type: ignore[union-attr]
        assert first._sock.getsockname()[1] == udev.KERNEL_GROUP  # type: ignore[union-attr]
        assert open_source(Path("/sys")) is not None
    finally:
        first.close()
        second.close()
    assert first.poll(0.01) is None  # a closed reader answers nothing


def test_a_wake_ends_a_poll_at_once() -> None:
    source = _kernel_socket()
    try:
        source.wake()
        assert source.poll(30.0) is None
    finally:
        source.close()


class Recording:
    """An event source that hands out its events, then fails or waits."""

    def __init__(self, events: list[tuple[str, str]], then: Exception | None = None) -> None:
        self.events = list(events)
        self.then = then
        self.timeouts: list[float] = []
        self.woken = self.closed = 0
        self.done = threading.Event()

    def poll(self, timeout: float) -> tuple[str, str] | None:
        self.timeouts.append(timeout)
        if self.events:
            return self.events.pop(0)
        self.done.set()
        if self.then is not None:
            raise self.then
        time.sleep(0.01)
        return None

    def wake(self) -> None:
        self.woken += 1

    def close(self) -> None:
        self.closed += 1


def test_the_watcher_thread_hands_each_event_on_and_stops_when_told() -> None:
    w = watched(SLOT)
    source = Recording([("remove", SLOT), ("change", SLOT), ("add", SLOT)])
    w.source = source
    assert w._timeout == 30.0 and w.counts() == {"add": 0, "remove": 0}
    w._timeout = 0.25
    w.start()
    thread = w._thread
    assert thread is not None and thread.name == "udev-monitor" and thread.daemon
    assert source.done.wait(10)
    w.stop()
    assert not thread.is_alive() and w._thread is None
    assert w.counts() == {"add": 1, "remove": 1}
    assert set(source.timeouts) == {0.25}
    assert (source.woken, source.closed) == (1, 1)
    # stopped before it started: nothing to wake, the source still closed
    idle = watched(SLOT)
    idle.source = Recording([])
    idle.stop()
    assert (idle.source.woken, idle.source.closed) == (0, 1)


def test_a_source_that_fails_ends_the_thread_with_one_line(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_exporter.collectors.udev")
    w = watched(SLOT)
    source = Recording([("remove", SLOT)], then=OSError("socket gone"))
    w.source = source
    w.start()
    assert w._thread is not None
    w._thread.join(10)
    assert not w._thread.is_alive()
    said = [r.getMessage() for r in caplog.records if r.name == udev.log.name]
    assert said == ["udev: remove event for GPU PCI device 0000:18:00.0",
                    "udev monitor stopped: socket gone; GPUs that leave the bus are noticed by "
                    "NVML on the next poll"]
    assert w.counts() == {"add": 0, "remove": 1}


def test_closing_the_reader_closes_its_socket_and_its_wake_pipe() -> None:
    source = _kernel_socket()
    sock, ends = source._sock, (source._wake_r, source._wake_w)
    assert sock is not None
    pipe = {fd: os.fstat(fd).st_ino for fd in ends}
    source.close()
    assert sock.fileno() == -1 and source._sock is None
    for fd, inode in pipe.items():
        # closed, or since reused for another file: not the pipe
        with contextlib.suppress(OSError):
            assert os.fstat(fd).st_ino != inode
    assert (source._wake_r, source._wake_w) == (-1, -1)
    source.close()  # twice is harmless
    source.wake()  # and a wake after it says nothing


def test_a_poll_with_nothing_to_read_ends_at_its_timeout() -> None:
    source = _kernel_socket()
    try:
        began = time.monotonic()
        found = source.poll(0.05)
        # the kernel may send a real event meanwhile; the wait ends either way
        assert found is None or isinstance(found, tuple)
        assert time.monotonic() - began < 5
    finally:
        source.close()


def test_a_stop_waits_no_longer_than_told_for_a_source_that_ignores_the_wake() -> None:
    class Deaf(Recording):
        def poll(self, timeout: float) -> None:
            self.done.set()
            time.sleep(3)
            return None

    w = watched(SLOT)
    deaf = Deaf([])
    w.source = deaf
    w.start()
    assert deaf.done.wait(10)
    began = time.monotonic()
    w.stop(timeout=0.1)
    assert time.monotonic() - began < 2 and deaf.closed == 1
