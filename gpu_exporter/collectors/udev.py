"""Watching the kernel's PCI add/remove events (its uevents, over netlink) on a thread
of its own: a GPU's ``remove`` marks it lost at once instead of at the next
failing NVML call, an ``add`` lets the next poll try it again."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import threading
from pathlib import Path
from typing import Protocol

from gpu_exporter.nvml.session import NvmlSession, normalize_bus_id

log = logging.getLogger(__name__)

# (action, PCI slot name such as 0000:18:00.0)
UdevEvent = tuple[str, str]
ACTIONS = ("add", "remove")


class EventSource(Protocol):
    def poll(self, timeout: float) -> UdevEvent | None:
        """The next event, or None when none came within ``timeout`` seconds."""

    def wake(self) -> None:
        """Make a poll in flight return None now (another thread is stopping)."""

    def close(self) -> None: ...


# The kernel's uevents, as lib/kobject_uevent.c sends them: a netlink family
# any user may listen to, and the multicast group the kernel itself sends to
# (udevd re-sends each event, after its rules, to group 2 in its own format).
NETLINK_KOBJECT_UEVENT = 15
KERNEL_GROUP = 1
# The kernel builds an event in a 2048-byte buffer (UEVENT_BUFFER_SIZE):
# anything longer is not one of its messages.
MAX_MESSAGE = 8192


def parse_uevent(message: bytes) -> UdevEvent | None:
    """(action, PCI slot) of a kernel uevent of the ``pci`` subsystem; None for
    any other message. The kernel writes ``ACTION@DEVPATH``, then each variable
    as ``KEY=VALUE``, every part ended by a NUL; for a PCI device
    drivers/pci/pci-driver.c adds ``PCI_SLOT_NAME``."""
    header, *fields = message.split(b"\0")
    action, at, devpath = header.partition(b"@")
    if not at or not devpath.startswith(b"/"):
        return None  # not the kernel's (udevd's own messages begin "libudev")
    env = dict(f.split(b"=", 1) for f in fields if b"=" in f)
    if env.get(b"SUBSYSTEM") != b"pci":
        return None
    slot = env.get(b"PCI_SLOT_NAME") or devpath.rstrip(b"/").rpartition(b"/")[2]
    return (env.get(b"ACTION", action).decode("ascii", "replace"),
            slot.decode("ascii", "replace"))


class KernelUevents:
    """PCI events from the kernel's uevent netlink socket.

    Not pyudev: it reads the same events through libudev and udevd's socket,
    and cost every node about 0.7 MiB of memory (BENCHMARKS.md) for what is
    one datagram socket and the parser above; the kernel's own group needs no
    udevd either (a container has none)."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = socket.socket(
            socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT)
        try:
            self._sock.bind((0, KERNEL_GROUP))
        except OSError:
            self._sock.close()
            raise
        # A byte here ends a poll in flight: a stop does not wait out its timeout.
        self._wake_r, self._wake_w = os.pipe()

    def poll(self, timeout: float) -> UdevEvent | None:
        sock = self._sock
        if sock is None:
            return None
        ready, _, _ = select.select([sock.fileno(), self._wake_r], [], [], timeout)
        if sock.fileno() not in ready:
            return None
        try:
            message, (sender, _groups) = sock.recvfrom(MAX_MESSAGE, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return None
        if sender != 0:
            return None  # only the kernel (port 0) speaks for the bus
        return parse_uevent(message)

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_r = self._wake_w = -1


def open_source(sysfs: Path) -> EventSource | None:
    """The kernel's PCI events when ``sysfs`` is the host's real /sys and its
    uevent socket can be opened; otherwise None, said once in the log."""
    if sysfs != Path("/sys"):
        log.info("udev monitor not started: sysfs root %s is not /sys; GPUs that leave the "
                 "bus are noticed by NVML on the next poll", sysfs)
        return None
    try:
        return KernelUevents()
    except OSError as exc:  # no netlink in this sandbox, ...
        log.info("udev monitor not started (%s); GPUs that leave the bus are noticed by NVML "
                 "on the next poll", exc)
        return None


class UdevWatcher:
    """Feeds PCI events of the session's GPUs to the session and counts them."""

    def __init__(self, session: NvmlSession, source: EventSource,
                 poll_timeout: float = 30.0) -> None:
        self.session = session
        self.source = source
        self._timeout = poll_timeout
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(ACTIONS, 0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def handle(self, action: str, slot: str) -> bool:
        """True when the event was about one of the session's GPUs."""
        if action == "remove":
            hit = self.session.gpu_removed(slot)
        elif action == "add":
            hit = self.session.gpu_added(slot)
        else:  # change, bind, unbind: nothing the exporter acts on
            return False
        if hit:
            with self._lock:
                self._counts[action] += 1
            log.warning("udev: %s event for GPU PCI device %s", action, normalize_bus_id(slot))
        return hit

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="udev-monitor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # stop() wakes a poll in flight; the timeout only bounds a missed wake.
        while not self._stop.is_set():
            try:
                event = self.source.poll(self._timeout)
            except Exception as exc:
                log.warning("udev monitor stopped: %s; GPUs that leave the bus are noticed "
                            "by NVML on the next poll", exc)
                return
            if event is not None:
                self.handle(*event)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self.source.wake()
            self._thread.join(timeout)
            self._thread = None
        self.source.close()
