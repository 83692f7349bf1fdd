"""Xid errors and other NVML events, counted per GPU and code.

Each poll drains the GPUs' NVML event set without blocking: the driver
queues every event in the set from registration on, so none is lost between
two polls, and an Xid is in the snapshot of the poll that follows it, the
first that could have shown it. (A thread blocked in the wait would see it
sooner but could show it no sooner, held SIGTERM for the wait in flight, and
on NVIDIA's mock NVML cost about 0.2 ms of CPU per timed-out wait: 0.9 ms/s
at one every 200 ms; a wait that does not block costs it 3 us.)
Xid is a counter per code — never a last-value gauge that hides repeats.
The reader survives a GPU being lost and builds a new event set after NVML
is initialised again. Events that happened before registration are lost:
that is NVML's rule.

Two things make an Xid visible where it matters:

- ``gpu_xid_errors_all_total{gpu,uuid}`` counts every Xid of a GPU and starts
  at 0 for every GPU the exporter knows, so the first Xid is an increase from
  0 that ``increase()`` sees. The per-code series cannot start at 0: the
  label set of every code the driver may report is too large to pre-create,
  so each appears at its first event, at 1 (``increase()`` over a range that
  contains only that appearance is 0; the total shows it).
- A GPU that falls off the bus reports Xid 79 as it goes. When a poll finds a
  GPU newly lost and the set holds no Xid of it yet, the poll waits on the
  set (at most ``LOSS_XID_WAIT_S``, once per loss) for that GPU's Xid, so the
  snapshot with ``gpu_up 0`` carries its Xid rather than the next one.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Self

from gpu_exporter.catalogs.deep import EVENTS_TOTAL, XID_ERRORS_ALL_TOTAL, XID_ERRORS_TOTAL
from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.collectors.kmsg import merge_counts, merge_events
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.errors import NvmlError
from gpu_exporter.nvml.events import EventSet
from gpu_exporter.nvml.session import GpuGone, NvmlGone, NvmlSession
from gpu_exporter.poll.readings import XidEvent
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import SnapshotBuilder
from gpu_exporter.settings.config import Settings

log = logging.getLogger(__name__)

# Event types worth counting: every health event the driver offers, on the
# one set this reader drains (clock and P-state changes are too chatty to be events).
WANTED = c.EVENT_TYPES_WANTED
# Events after which what the GPU reports may have changed (remapped rows, ECC
# counts, retired pages, the fabric, the recovery action): its readers read
# those facts again at their next poll. A correctable error moves the volatile
# count, which has the same effect on what it concerns; a power-source change
# changes nothing they hold.
REFRESHING = WANTED & ~(c.EVENT_SINGLE_BIT_ECC | c.EVENT_POWER_SOURCE_CHANGE)
# The most events one poll takes from the set; the rest stay queued for the next.
MAX_EVENTS_PER_POLL = 1000
# How long a poll that finds a GPU newly lost waits for its Xid (79: fallen
# off the bus) when the set holds none yet. Once per loss; a GPU lost without
# an Xid costs that poll this much.
LOSS_XID_WAIT_S = 0.5


class XidCollector(NvmlCollector):
    name = "xid"
    description = "Xid errors and ECC/power events from NVML's event API"
    settings = (lambda s: s.poll.interval,)

    def __init__(self, session: NvmlSession, wall_clock: Callable[[], float],
                 synchronous: bool = False, interval: float = 0.0) -> None:
        super().__init__(session)
        self._wall = wall_clock
        # Under a virtual clock a loss is not waited for: a wait is real time.
        self._synchronous = synchronous
        # An event is stamped when a poll drains it: at most this much after
        # the driver reported it (the kernel log's line of it is matched so).
        self._late_s = interval
        self._xids: Counter[tuple[int, str, int]] = Counter()
        self._totals: Counter[tuple[int, str]] = Counter()  # every Xid per GPU
        self._lost: set[tuple[int, str]] = set()  # the GPUs lost at the last poll
        self._exported: Counter[tuple[int, str]] = Counter()  # totals the last poll showed
        self._events: Counter[tuple[int, str, str]] = Counter()
        self.recent: list[XidEvent] = []
        self._set: EventSet | None = None
        self._set_generation = -1
        self._registered: dict[int, str] = {}  # gpu index -> uuid registered in the set
        self._failing = False
        self._polls = 0

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        return cls(rt.session, rt.wall_clock, rt.synchronous,
                   rt.settings.poll.interval)

    def reconfigure(self, settings: Settings) -> None:
        self._late_s = settings.poll.interval

    # --- the event set ---------------------------------------------------------
    def _service(self, timeout_ms: int) -> bool:
        """Keep the event set current and handle at most one event; False when
        there was none (within ``timeout_ms``)."""
        if not self.session.up:
            return False
        try:
            self._ensure_set()
            if self._set is None:
                return False
            event = self._set.wait(timeout_ms)
        except (NvmlError, NvmlGone) as exc:
            # NvmlGone: NVML as a whole failed while registering; the device
            # collector marks it down and the set is made again after re-init.
            if not self._failing:
                log.warning("waiting for NVML events failed: %s; retrying", exc)
                self._failing = True
            self._drop_set()
            return False
        self._failing = False
        if event is None:
            return False
        self._handle(*event)
        return True

    def _ensure_set(self) -> None:
        if self._set is not None and self._set_generation != self.session.generation:
            self._drop_set()  # NVML was initialised again: the old set is gone
        if self._set is None:
            self._set = EventSet()
            self._set_generation = self.session.generation
            self._registered = {}
        for gpu in self.session.gpus:
            if gpu.lost or gpu.hung or gpu.device is None:
                continue
            if self._registered.get(gpu.index) == gpu.identity.uuid:
                continue
            try:
                supported = gpu.static_read("event_types", gpu.device.supported_event_types)
            except GpuGone:
                continue  # lost on the way: registered once it is back
            types = (supported or 0) & WANTED
            if not types:
                self._registered[gpu.index] = gpu.identity.uuid
                continue
            try:
                gpu.device.register_events(types, self._set)
            except NvmlError as exc:
                if exc.device_gone:
                    continue  # try again once the GPU is back
                log.warning("GPU %d: cannot register for events: %s", gpu.index, exc)
            self._registered[gpu.index] = gpu.identity.uuid

    def _drop_set(self) -> None:
        if self._set is not None:
            with contextlib.suppress(NvmlError):
                self._set.close()
        self._set = None
        self._registered = {}

    def _handle(self, device: int, event_type: int, data: int,
                gpu_instance: int | None = None) -> None:
        gpu = next((g for g in self.session.gpus
                    if g.device is not None and g.device.handle_value == device), None)
        index, uuid = (gpu.index, gpu.identity.uuid) if gpu else (-1, "")
        if gpu is not None and event_type & REFRESHING:
            self.session.reads.held_for(gpu).refresh()
        if event_type & c.EVENT_XID_CRITICAL:
            self._xids[(index, uuid, data)] += 1
            self._totals[(index, uuid)] += 1
            self.recent.append(XidEvent(index, uuid, data, self._wall(),
                                        gpu_instance=gpu_instance))
            del self.recent[:-256]
            log.warning("GPU %d (%s): Xid %d", index, uuid, data)
        else:
            name = c.EVENT_NAMES.get(event_type, f"0x{event_type:x}")
            self._events[(index, uuid, name)] += 1

    def _drain(self) -> None:
        for _ in range(MAX_EVENTS_PER_POLL):
            if not self._service(0):
                break

    def _await_loss_xids(self) -> None:
        """For GPUs the device reader found lost in this poll with no Xid
        drained since the last poll: wait on the set, bounded, for one (the
        driver reports Xid 79 as the GPU goes), so the loss and its Xid share
        a snapshot."""
        lost = {(g.index, g.identity.uuid) for g in self.session.gpus if g.lost}
        new, self._lost = lost - self._lost, lost
        if self._polls == 1:
            return  # lost before the exporter could register for its events
        waiting = {key for key in new if self._totals[key] <= self._exported[key]}
        deadline = time.monotonic() + LOSS_XID_WAIT_S  # a hang is real time
        while waiting:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0 or not self._service(remaining_ms):
                break
            waiting = {key for key in waiting if self._totals[key] <= self._exported[key]}

    # --- Collector -----------------------------------------------------------
    def collect(self, out: SnapshotBuilder) -> None:
        self._polls += 1
        self._drain()
        if not self._synchronous:
            self._await_loss_xids()
        # The GPUs NVML knows now start at 0: their first Xid is an increase.
        # While NVML is down only what was counted stays: no NVML series.
        known = ({(g.index, g.identity.uuid) for g in self.session.gpus}
                 if self.session.up else set())
        for key in known:
            self._totals[key] += 0
        self._exported = Counter(self._totals)
        # The kernel log's Xids that NVML did not deliver, each Xid once.
        kernel = out.readings.kmsg
        counts = merge_counts(dict(self._xids), kernel)
        totals = Counter(self._totals)
        for (index, uuid, _xid), count in counts.items():
            totals[(index, uuid)] += count - self._xids.get((index, uuid, _xid), 0)
        for (index, uuid), count in sorted(totals.items()):
            if count or (index, uuid) in known:
                out.add(XID_ERRORS_ALL_TOTAL, count, gpu=str(index), uuid=uuid)
        for (index, uuid, xid), count in sorted(counts.items()):
            out.add(XID_ERRORS_TOTAL, count, gpu=str(index), uuid=uuid, xid=str(xid))
        for (index, uuid, name), count in sorted(self._events.items()):
            out.add(EVENTS_TOTAL, count, gpu=str(index), uuid=uuid, type=name)
        out.readings.xid = merge_events(list(self.recent), kernel, late_s=self._late_s)

    def close(self) -> None:
        self._drop_set()


__all__ = ["XidCollector", "XidEvent"]
