"""The NVIDIA driver's lines in the kernel log: every Xid since boot with the
process the driver blames, and the NVSwitch driver's SXids.

NVML's events come only while the exporter runs and carry no process; the
kernel log has both the Xids from before the exporter started (a fault at
boot, one that crashed the exporter) and, since about R460, ``pid=…,
name=…`` on each line. The log as it stands at the first poll is read on the
poll's thread, before the xid reader registers for NVML's events (so "before
start" means exactly "before NVML could deliver it"); what arrives after is
read on a thread of its own as it comes. The xid reader merges the two
sources (:func:`merge_counts`, :func:`merge_events`), each Xid once:

* a line logged before start is counted from the log (NVML never delivers
  it);
* after start NVML's events are the live count; the log's lines of the same
  GPU and code count only beyond them (an Xid NVML missed: a GPU it does not
  watch, NVML down), so the count is NVML's plus the log's before start plus
  ``max(0, log after start - NVML)``;
* an event and a line of the same GPU and code within ``MATCH_WINDOW_S`` are
  one Xid: the event gains the line's process.

The process is looked up when its line is first read (it has often exited a
few seconds after an application Xid): its cgroup names its pod's container
or its Slurm job. A PID reused since (started after the line, or another
name) is not blamed. Reading needs CAP_SYSLOG or kernel.dmesg_restrict=0:
without it the reader says so in one log line and its state series, and the
exporter counts NVML's events alone, as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Self

from gpu_exporter.attribution.grouping import workload_of
from gpu_exporter.attribution.procfiles import read_text_bounded
from gpu_exporter.attribution.slurm import read_job
from gpu_exporter.catalogs.kernel import (
    EXPORTER_KERNEL_LOG_OVERFLOW_TOTAL,
    EXPORTER_KERNEL_LOG_RECORDS_LOST_TOTAL,
    EXPORTER_KERNEL_LOG_RECORDS_MALFORMED_TOTAL,
    EXPORTER_KERNEL_LOG_STATE,
    NIC_KERNEL_EVENTS_TOTAL,
    NVSWITCH_SXID_ERRORS_TOTAL,
)
from gpu_exporter.collectors.base import Collector
from gpu_exporter.host.driver_log import DriverLog, XidEntry
from gpu_exporter.host.kmsg import (
    Fragments,
    KmsgReader,
    KmsgState,
    KmsgUnavailable,
    Opener,
    Record,
)
from gpu_exporter.host.nvrm import bus_key
from gpu_exporter.nvml.session import NvmlSession
from gpu_exporter.poll.readings import KernelLogReading, KernelXid, XidCulprit, XidEvent
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import SnapshotBuilder

log = logging.getLogger(__name__)

# An NVML event and a kernel log line of the same GPU and code this close in
# time are the same Xid (both come from the driver's one report of it).
MATCH_WINDOW_S = 10.0
# Records read on the poll's thread in one poll at most: the log at start
# (the kernel's ring holds some 10^4 records) and, under a virtual clock, what
# came since. More waits for the next poll rather than stalling this one.
MAX_RECORDS_PER_POLL = 2_000_000
# And bytes: a log of lines that are not records (a file of zeros) yields none
# to count, and must not be read to its end in one poll either. The kernel's
# ring is at most 32 MiB (CONFIG_LOG_BUF_SHIFT 25). Memory is bounded apart
# from this: a batch at a time (host.kmsg.MAX_BATCH_BYTES).
MAX_BYTES_PER_POLL = 64 * 1024 * 1024
# How often a log that could not be opened is tried again, quietly.
RETRY_S = 60.0
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_comm_start(text: str) -> tuple[str, float] | None:
    """The comm and start time (seconds since boot) in /proc/PID/stat."""
    open_paren, close_paren = text.find("("), text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        return None
    fields = text[close_paren + 2:].split()
    try:
        return text[open_paren + 1:close_paren], int(fields[19]) / _CLK_TCK
    except (IndexError, ValueError):
        return None


def find_culprit(procfs: Path | str, entry: XidEntry) -> XidCulprit | None:
    """The process an Xid line names, with its workload if it still runs and
    is the same process (started no later than the line, the same name)."""
    if entry.pid is None:
        return None
    culprit = XidCulprit(entry.pid, entry.process)
    root = os.fspath(procfs)
    stat = read_text_bounded(f"{root}/{entry.pid}/stat")
    seen = _stat_comm_start(stat) if stat is not None else None
    if seen is None:
        return culprit
    comm, started = seen
    # The driver prints the task's comm, which (as /proc's) is 15 characters
    # at most; a PID reused since the line by another process must not be
    # blamed for it.
    if entry.process and comm != entry.process[:15]:
        return culprit
    if started > entry.first_usec / 1e6 + 0.5:
        return culprit
    text = read_text_bounded(f"{root}/{entry.pid}/cgroup")
    workload = workload_of(text) if text is not None else None
    if workload is not None and workload.kind == "slurm_job":
        return replace(culprit, slurm_job_id=workload.id)
    if workload is not None:
        return replace(culprit, pod_uid=workload.pod_uid, container_id=workload.id)
    job = read_job(root, entry.pid)
    return replace(culprit, slurm_job_id=job.job_id) if job is not None else culprit


class KmsgCollector(Collector):
    name = "kmsg"
    description = ("the NVIDIA driver's Xid lines (with their process) and NVSwitch SXids in "
                   "the kernel log, since boot")
    settings = (lambda s: s.path.kmsg, lambda s: s.path.procfs)

    def __init__(self, session: NvmlSession, path: str, procfs: Path,
                 wall_clock: Callable[[], float], monotonic: Callable[[], float],
                 synchronous: bool, opener: Opener | None = None) -> None:
        self.session = session
        self.path = path
        self.procfs = procfs
        self._wall = wall_clock
        self._mono = monotonic
        self._synchronous = synchronous
        self._reader = KmsgReader(path, opener) if path else None
        self._fragments = Fragments()
        self.store = DriverLog()
        self._culprits: dict[tuple[str, int, int | None], XidCulprit] = {}
        self._lock = threading.Lock()  # guards the store, culprits and reader counts
        # None until the first attempt to open the log.
        self._state: KmsgState | None = KmsgState.OFF if not path else None
        self._detail = ""
        self._next_try: float | None = None
        self._first_poll = True
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()  # close() wakes the reader thread's poll
        self._thread: threading.Thread | None = None

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        s = rt.settings
        return cls(rt.session, s.path.kmsg, s.path.procfs, rt.wall_clock, rt.monotonic,
                   rt.synchronous)

    @property
    def state(self) -> KmsgState | None:
        return self._state

    # --- reading ----------------------------------------------------------------
    def _open(self) -> bool:
        """Open the log if it is not; False while it cannot be."""
        reader = self._reader
        if reader is None:
            return False
        if reader.fd is not None:
            return True
        now = self._mono()
        if self._next_try is not None and now < self._next_try:
            return False
        self._next_try = now + RETRY_S
        try:
            reader.open()
        except KmsgUnavailable as exc:
            self._set_state(exc.state, exc.detail)
            return False
        self._set_state(KmsgState.OK, "")
        return True

    def _set_state(self, state: KmsgState, detail: str) -> None:
        if state == self._state and detail == self._detail:
            return
        before, self._state, self._detail = self._state, state, detail
        if state == KmsgState.OK:
            if before is not None:
                log.info("reading the kernel log %s again", self.path)
        elif state == KmsgState.ABSENT:
            log.info("kernel log off: %s; Xids are counted from NVML's events only", detail)
        else:
            log.warning("kernel log not read: %s", detail)

    def _drain(self, limit: int) -> None:
        """Read and count what the log has now, at most ``limit`` records."""
        reader = self._reader
        assert reader is not None
        done = 0
        start = reader.bytes_read
        while done < limit and reader.bytes_read - start < MAX_BYTES_PER_POLL:
            before = reader.bytes_read
            try:
                records = reader.read(limit - done)
            except KmsgUnavailable as exc:
                reader.close()
                self._set_state(exc.state, exc.detail)
                break
            if not records and reader.bytes_read == before:
                break  # nothing more now
            done += len(records)
            self._feed(records)
        self._feed_lines(self._fragments.flush())

    def _feed(self, records: Iterable[Record]) -> None:
        lines: list[Record] = []
        for record in records:
            lines.extend(self._fragments.feed(record))
        self._feed_lines(lines)

    def _feed_lines(self, lines: list[Record]) -> None:
        if not lines:
            return
        new: list[XidEntry] = []
        with self._lock:
            for line in lines:
                entry = self.store.add(line)
                if entry is not None and entry.pid is not None:
                    new.append(entry)
        # Looked up at once, outside the lock: the process may exit any moment.
        found = {(e.bus, e.code, e.pid): c for e in new
                 if (c := find_culprit(self.procfs, e)) is not None}
        if found:
            with self._lock:
                self._culprits.update(found)

    def _run(self) -> None:
        reader = self._reader
        assert reader is not None
        poller = select.poll()
        # A byte here ends a wait for the next record: a stop does not wait
        # out the poll's timeout.
        poller.register(self._wake_r, select.POLLIN)
        registered: int | None = None
        while not self._stop.is_set():
            if not self._open():
                self._stop.wait(1.0)
                continue
            fd = reader.fd
            if reader.is_device and fd is not None:
                if registered != fd:
                    if registered is not None:
                        poller.unregister(registered)
                    poller.register(fd, select.POLLIN)
                    registered = fd
                # Woken by the next record, or by close()'s byte.
                poller.poll()
            else:
                self._stop.wait(1.0)
            try:
                self._drain(MAX_RECORDS_PER_POLL)
            except Exception:  # the reader thread must outlive any surprise
                log.exception("reading the kernel log failed; trying again in 1 s")
                self._stop.wait(1.0)

    # --- Collector --------------------------------------------------------------
    def collect(self, out: SnapshotBuilder) -> None:
        first, self._first_poll = self._first_poll, False
        if self._thread is None and self._open():
            self._drain(MAX_RECORDS_PER_POLL)
            if not self.store.started:
                # The log as it stood at start is read: what comes next is live.
                self.store.mark_started()
            if not self._synchronous:
                self._thread = threading.Thread(target=self._run, name="kmsg", daemon=True)
                self._thread.start()
        for state in KmsgState:
            out.add(EXPORTER_KERNEL_LOG_STATE, state == self._state, state=state.value)
        # (a log not tried yet: only until this poll's first try above)
        reading = KernelLogReading((self._state or KmsgState.ERROR).value)
        with self._lock:
            lost = self._reader.lost if self._reader is not None else 0
            out.add(EXPORTER_KERNEL_LOG_RECORDS_LOST_TOTAL, lost)
            malformed = self._reader.malformed if self._reader is not None else 0
            out.add(EXPORTER_KERNEL_LOG_RECORDS_MALFORMED_TOTAL, malformed)
            out.add(EXPORTER_KERNEL_LOG_OVERFLOW_TOTAL, self.store.overflow)
            for e in sorted(self.store.sxids.values(),
                            key=lambda e: (e.switch, e.bus, e.code)):
                out.add(NVSWITCH_SXID_ERRORS_TOTAL, e.count, nvswitch=e.switch,
                        pci_bus_id=e.bus, sxid=str(e.code),
                        fatal="" if e.fatal is None else str(e.fatal).lower())
            for (bdf, event), count in sorted(self.store.nics.counts.items()):
                out.add(NIC_KERNEL_EVENTS_TOTAL, count, pci_bus_id=bdf, event=event)
            if not first:
                # The first poll's counters stand at 0, as every GPU's Xid total
                # does: the Xids from before start are an increase at the next.
                self._fill(reading)
        out.readings.kmsg = reading

    def _fill(self, reading: KernelLogReading) -> None:
        """The store's Xids placed on the GPUs NVML knows (by bus id); a bus
        NVML no longer lists keeps the UUID the driver printed for it."""
        if not self.store.totals:
            # No Xid in the log: nothing to place (and no clock to read). An
            # Xid line always makes a total while the table has room, and a
            # full table is not empty.
            return
        gpus = {bus_key(g.identity.pci_bus_id): (g.index, g.identity.uuid)
                for g in self.session.gpus if g.identity.pci_bus_id}
        offset = self._kernel_offset()
        for e in self.store.xids.values():
            index, uuid = gpus.get(e.bus, (-1, self.store.uuids.get(e.bus, "")))
            reading.xids.append(KernelXid(
                index, uuid, e.code, self._culprits.get((e.bus, e.code, e.pid)),
                e.count, e.before_start, offset + e.first_usec / 1e6,
                offset + e.last_usec / 1e6, e.link))
        for (bus, code), total in self.store.totals.items():
            index, uuid = gpus.get(bus, (-1, self.store.uuids.get(bus, "")))
            key = (index, uuid, code)
            before, after = reading.counts.get(key, (0, 0))
            reading.counts[key] = (before + total.before_start, after + total.live)

    def _kernel_offset(self) -> float:
        """Unix time at the kernel's clock zero (boot): now less the uptime."""
        text = read_text_bounded(f"{os.fspath(self.procfs)}/uptime")
        try:
            uptime = float(text.split()[0]) if text else None
        except (IndexError, ValueError):
            uptime = None
        return self._wall() - (uptime if uptime is not None else self._mono())

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            if self._thread.is_alive():
                return  # still inside a read: it keeps its descriptors
            self._thread = None
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_r = self._wake_w = -1
        if self._reader is not None:
            self._reader.close()


def merge_counts(nvml: dict[tuple[int, str, int], int],
                 kernel: KernelLogReading | None) -> dict[tuple[int, str, int], int]:
    """Each (GPU, UUID, code)'s Xids counted once: NVML's, plus the log's
    from before start, plus the log's after start beyond NVML's."""
    merged = dict(nvml)
    if kernel is None:
        return merged
    for key, (before, after) in kernel.counts.items():
        seen = nvml.get(key, 0)
        extra = before + max(0, after - seen)
        if extra:
            merged[key] = seen + extra
    return merged


def merge_events(nvml: list[XidEvent], kernel: KernelLogReading | None,
                 keep: int = 256, late_s: float = 0.0) -> list[XidEvent]:
    """NVML's recent events, each given the process of the log's line of the
    same GPU and code within MATCH_WINDOW_S (NVML's stamped up to ``late_s``
    after the driver's report: when a poll took them from the event set); and
    the log's Xids NVML did not deliver (before start, or beyond its events),
    at their last line, each standing for its lines (``lines``). An event
    gains the line's NVLink too. The newest ``keep``, oldest first."""
    if kernel is None or not kernel.xids:
        return nvml[-keep:]
    events = list(nvml)
    matched: set[int] = set()
    extra: list[XidEvent] = []
    for k in kernel.xids:
        live = k.count - k.before_start
        if k.before_start:
            extra.append(XidEvent(k.gpu, k.uuid, k.xid, k.last_at if not live else k.first_at,
                                  k.culprit, "kernel_log", link=k.link,
                                  lines=k.before_start))
        if not live:
            continue
        hits = [i for i, e in enumerate(events)
                if i not in matched and e.gpu == k.gpu and e.xid == k.xid
                and k.first_at - MATCH_WINDOW_S <= e.at <= k.last_at + MATCH_WINDOW_S + late_s]
        for i in hits[:live]:
            matched.add(i)
            if k.culprit is not None and events[i].culprit is None:
                events[i] = replace(events[i], culprit=k.culprit)
            if k.link is not None and events[i].link is None:
                events[i] = replace(events[i], link=k.link)
        if not hits:
            # NVML delivered none of them: the log's last line stands for them.
            extra.append(XidEvent(k.gpu, k.uuid, k.xid, k.last_at, k.culprit, "kernel_log",
                                  link=k.link, lines=live))
    merged = sorted([*events, *extra], key=lambda e: e.at)
    return merged[-keep:]
