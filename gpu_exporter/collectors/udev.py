"""Watching the kernel's PCI add/remove events (udev, over netlink) on a thread
of its own: a GPU's ``remove`` marks it lost at once instead of at the next
failing NVML call, an ``add`` lets the next poll try it again."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from pathlib import Path
from typing import Any, Protocol

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


class PyudevSource:
    """PCI events from udev's netlink socket."""

    def __init__(self) -> None:
        import pyudev

        self._monitor: Any = pyudev.Monitor.from_netlink(pyudev.Context())
        self._monitor.filter_by(subsystem="pci")
        self._monitor.start()
        # A byte here ends a poll in flight: a stop does not wait out its timeout.
        self._wake_r, self._wake_w = os.pipe()

    def poll(self, timeout: float) -> UdevEvent | None:
        monitor = self._monitor
        if monitor is None:
            return None
        ready, _, _ = select.select([monitor, self._wake_r], [], [], timeout)
        if monitor not in ready:
            return None
        device = monitor.poll(timeout=0)
        if device is None:
            return None
        slot = device.properties.get("PCI_SLOT_NAME") or device.sys_name
        return str(device.action), str(slot)

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def close(self) -> None:
        # pyudev frees the netlink socket with the monitor object.
        self._monitor = None
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_r = self._wake_w = -1


def open_source(sysfs: Path) -> EventSource | None:
    """A udev event source when ``sysfs`` is the host's real /sys and udev can
    be reached; otherwise None, said once in the log."""
    if sysfs != Path("/sys"):
        log.info("udev monitor not started: sysfs root %s is not /sys; GPUs that leave the "
                 "bus are noticed by NVML on the next poll", sysfs)
        return None
    try:
        return PyudevSource()
    except Exception as exc:  # no libudev, no netlink in this container, ...
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
