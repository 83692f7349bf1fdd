"""NVML's life in the exporter: initialise once, retry with backoff while the
library or driver is missing, discover GPUs, remember what each GPU cannot do,
and notice GPUs that are lost and come back.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, TypeVar

from gpu_exporter.nvml.adapter import Device, Nvml
from gpu_exporter.nvml.errors import NvmlError, Return

# What a GPU is, imported from here too (named once more, so mypy sees it said).
from gpu_exporter.nvml.gpu import GPM_KEY as GPM_KEY
from gpu_exporter.nvml.gpu import UTILIZATION_SAMPLES_KEY as UTILIZATION_SAMPLES_KEY
from gpu_exporter.nvml.gpu import Gpu as Gpu
from gpu_exporter.nvml.gpu import GpuGone as GpuGone
from gpu_exporter.nvml.gpu import Identity as Identity
from gpu_exporter.nvml.gpu import MissingCapabilities as MissingCapabilities
from gpu_exporter.nvml.gpu import NvmlGone as NvmlGone
from gpu_exporter.nvml.gpu import gpu_list as gpu_list
from gpu_exporter.nvml.values import FieldValues

log = logging.getLogger(__name__)
T = TypeVar("T")

INIT_BACKOFF_START_S = 1.0
INIT_BACKOFF_MAX_S = 60.0
LOST_RETRY_S = 10.0


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:18:00.0`` (NVML) and ``0000:18:00.0`` (sysfs) -> ``0000:18:00.0``."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep:
        return text
    return f"{int(domain, 16):04x}:{rest}" if domain else text


class GpuHung(Exception):
    """A call on this GPU did not return before the poll's deadline."""


class PollAbandoned(BaseException):
    """Raised in a poll thread that was given up on while one of its calls hung,
    once that call returns: the thread unwinds without touching anything shared
    again (a BaseException, so no collector's ``except Exception`` stops it)."""


@dataclass(frozen=True)
class _StepInProgress:
    """One GPU's reads in progress on a poll thread, and when they are overdue."""

    gpu: Gpu
    deadline: float  # time.monotonic(): a hang is real time, whatever the poll's clock
    thread: int


class GpuStep:
    """One GPU's reads as one step the session watches (NvmlSession.step())."""

    __slots__ = ("_gpu", "_session")

    def __init__(self, session: NvmlSession, gpu: Gpu) -> None:
        self._session, self._gpu = session, gpu

    def __enter__(self) -> None:
        self._session._begin_step(self._gpu)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._session._end_step(self._gpu)


class EachGpu:
    """Every GPU of the session that can answer now, one at a time, each read
    in ``with`` this object as one step the session watches. A GPU lost on the
    way is marked lost and one hung skipped, each without its read errors; NVML
    gone as a whole marks the session down and ends the round. ``errors``: the
    read errors of the GPUs read whole.

    A loop and a context rather than a function the session calls with each
    GPU: the reader's code stays in the reader, with no call back into it."""

    __slots__ = ("_ended", "_gpu", "_session", "errors")

    def __init__(self, session: NvmlSession) -> None:
        self._session = session
        self._gpu: Gpu | None = None
        self._ended = False
        self.errors = 0

    def __iter__(self) -> Iterator[tuple[Gpu, Device]]:
        for gpu in self._session.gpus:
            if self._ended:
                return
            device = gpu.device
            if gpu.lost or gpu.hung or device is None:
                continue
            gpu.errors = 0
            self._gpu = gpu
            yield gpu, device

    def __enter__(self) -> None:
        if self._gpu is None:  # pragma: no cover - a programming error
            raise RuntimeError("with each_gpu() inside its loop only")
        self._session._begin_step(self._gpu)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> bool:
        gpu, session = self._gpu, self._session
        if gpu is None:  # pragma: no cover - __enter__ refused
            return False
        session._end_step(gpu)  # PollAbandoned goes on up from here
        if error is None:
            self.errors += gpu.errors
            return False
        if isinstance(error, GpuGone):
            session.mark_lost(gpu, str(error))
            return True
        if isinstance(error, GpuHung):
            return True
        if isinstance(error, NvmlGone):  # NVML as a whole: down, re-initialised with backoff
            session.mark_down(error.error)
            self._ended = True
            return True
        return False


class _PollThread(Generic[T]):
    """A thread that runs one poll at a time for guarded(). Two locks as a
    mailbox: a ThreadPoolExecutor hand-off costs about half again as much CPU."""

    def __init__(self, name: str) -> None:
        self._go = threading.Lock()
        self._go.acquire()
        self.done = threading.Event()
        self._task: Callable[[], T] | None = None
        self._result: T | None = None
        self._error: BaseException | None = None
        self._closed = threading.Event()
        thread = threading.Thread(target=self._loop, name=name, daemon=True)
        thread.start()
        self.ident = thread.ident

    def submit(self, task: Callable[[], T]) -> None:
        self._task, self._result, self._error = task, None, None
        self.done.clear()
        self._go.release()

    def result(self) -> T | None:
        if self._error is not None:
            raise self._error
        return self._result

    def abandon(self) -> None:
        """End the thread after its current task, if any (never waits for it)."""
        self._closed.set()
        if self._task is None or self.done.is_set():
            with contextlib.suppress(RuntimeError):
                self._go.release()

    def _loop(self) -> None:
        while True:
            self._go.acquire()
            task = self._task
            if self._closed.is_set() or task is None:
                return
            try:
                self._result = task()
            except PollAbandoned:
                return  # the poll went on without this thread
            except BaseException as exc:  # handed to the caller, raised there
                self._error = exc
            self.done.set()
            if self._closed.is_set():
                return  # closed while it polled


class NvmlSession:
    """Shared by every NVML-backed collector."""

    def __init__(self, nvml: Nvml | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 call_timeout: float | None = None) -> None:
        self.nvml = nvml or Nvml()
        self._clock = clock
        # With a timeout, a poll runs on a poll thread that guarded() watches: a
        # GPU's reads (run()) that outlive the timeout get the GPU marked hung
        # and the poll thread given up on (it stays behind in the stuck call);
        # the next poll runs on a fresh thread and skips that GPU until the call
        # returns. None: reads run inline, unwatched (tests on a virtual clock).
        self.call_timeout = call_timeout
        self.timeouts: dict[int, int] = {}
        self._lock = threading.Lock()
        self._guard = threading.Lock()  # the step in progress, threads given up on
        self._step: _StepInProgress | None = None
        self._abandoned: set[int] = set()  # idents of poll threads given up on
        self._returned: set[int] = set()  # GPUs whose stuck call has returned since
        self._poll_thread: _PollThread[object] | None = None
        self._poll_threads = 0
        self.up = False
        self.gpus: list[Gpu] = []
        # What the readers read of each GPU between polls, and this poll's
        # field values (nvml/values.py).
        self.reads = FieldValues()
        # The poll the readers are in: the snapshot being built (held weakly)
        # and the readers that began it.
        self._poll_of: weakref.ref[object] | None = None
        self._began: set[str] = set()
        self.driver_version = ""
        self.cuda_driver_version = ""
        self.missing = MissingCapabilities()
        self.last_error: NvmlError | None = None
        # Bumped on every successful init: holders of NVML objects (event sets,
        # GPM samples) re-create them when it changes.
        self.generation = 0
        self._backoff = INIT_BACKOFF_START_S
        self._next_try = 0.0
        self._logged_code: int | None = None

    def ensure(self) -> bool:
        """Initialise NVML if it is not yet; True when it is usable now."""
        with self._lock:
            if self.up:
                # A whole poll went by since init without NVML failing as a whole:
                # only now does the next failure start its backoff afresh (a
                # library that inits but fails every read is not retried every poll).
                self._backoff = INIT_BACKOFF_START_S
                self._logged_code = None
                return True
            now = self._clock()
            if now < self._next_try:
                return False
            inited = False
            try:
                self.nvml.init()
                inited = True
                self.driver_version = self._safe(self.nvml.driver_version) or ""
                self.cuda_driver_version = self._safe(self.nvml.cuda_driver_version) or ""
                self.gpus = self._discover()
                self.reads.track(self.gpus)
            except (NvmlError, NvmlGone) as failure:
                # NvmlGone: NVML as a whole failed while the GPUs were discovered.
                exc = failure.error if isinstance(failure, NvmlGone) else failure
                if inited:
                    with contextlib.suppress(NvmlError):
                        self.nvml.shutdown()
                self.last_error = exc
                # Log once per distinct reason, not every retry.
                if self._logged_code != exc.code:
                    self._logged_code = exc.code
                    log.error("NVML unavailable: %s (%s); serving the exporter's own metrics "
                              "with gpu_exporter_nvml_up 0 and retrying with backoff",
                              exc.init_hint(), exc.name)
                self._next_try = now + self._backoff
                self._backoff = min(self._backoff * 2, INIT_BACKOFF_MAX_S)
                return False
            self.up = True
            self.generation += 1
            self.last_error = None
            if self._logged_code is not None:
                log.info("NVML is available again")
            log.info("NVML initialised: driver %s, CUDA %s, %d GPU(s)", self.driver_version,
                     self.cuda_driver_version, len(self.gpus))
            return True

    def begin(self, reader: str, poll: object) -> bool:
        """What every NVML reader does first in a poll (``poll``: the
        snapshot it builds): NVML initialised where it is not yet, and, for
        the first reader of a poll, whichever it is, the poll begun
        (begin_poll()). True when NVML is usable now. A reader that already
        began this poll begins the next: readers polled without a snapshot
        of their own (tests) keep their polls apart."""
        if not self.ensure():
            return False
        held = self._poll_of() if self._poll_of is not None else None
        if held is not poll or reader in self._began:
            self._poll_of = weakref.ref(poll)
            self._began = set()
            self.reads.next_poll()
            self.begin_poll()
        self._began.add(reader)
        return True

    # --- guarded reads ------------------------------------------------------
    def now(self) -> float:
        """The session's monotonic clock (virtual under a simulated clock)."""
        return self._clock()

    def begin_poll(self) -> None:
        """GPUs whose stuck call has returned since are usable again; what
        the last poll found unsupported is said, once for all its GPUs."""
        self.missing.flush()
        with self._guard:
            returned, self._returned = self._returned, set()
        for gpu in self.gpus:
            if gpu.hung and gpu.index in returned:
                log.warning("GPU %d answers again after a call that hung", gpu.index)
                gpu.hung = False

    def step(self, gpu: Gpu) -> GpuStep:
        """``with session.step(gpu):`` this GPU's reads, as one step guarded()
        watches: raises GpuHung for a GPU whose earlier call has not returned,
        PollAbandoned when the step outlived the timeout and the poll went on
        without it. A context, not a function it calls: the reader's code
        runs in the reader, and only the watch is the session's."""
        return GpuStep(self, gpu)

    def _begin_step(self, gpu: Gpu) -> None:
        if self.call_timeout is None:
            return
        if gpu.hung:
            raise GpuHung()
        me = threading.get_ident()
        with self._guard:
            if me in self._abandoned:
                raise PollAbandoned()
            self._step = _StepInProgress(gpu, time.monotonic() + self.call_timeout, me)

    def _end_step(self, gpu: Gpu) -> None:
        if self.call_timeout is None:
            return
        me = threading.get_ident()
        with self._guard:
            if self._step is not None and self._step.thread == me:
                self._step = None
            abandoned = me in self._abandoned
            if abandoned:
                self._abandoned.discard(me)
                self._returned.add(gpu.index)
        if abandoned:
            raise PollAbandoned()  # its result belongs to a poll given up on

    def guarded(self, poll: Callable[[], T]) -> T | None:
        """``poll()`` on the poll thread, watched: None when a GPU's call hung
        past the timeout (the GPU is marked hung, the poll given up on).

        One hand-off per poll instead of one per GPU and collector: the calls
        themselves run inline on the poll thread, and this thread only wakes
        when the poll ends or a step's deadline passes.
        """
        timeout = self.call_timeout
        if timeout is None:
            return poll()
        worker = self._poll_thread
        if worker is None:
            self._poll_threads += 1
            worker = self._poll_thread = _PollThread(f"nvml-poll-{self._poll_threads}")
        worker.submit(poll)
        wait = timeout
        while not worker.done.wait(wait):
            with self._guard:
                step = self._step
                now = time.monotonic()
                if step is None or step.thread != worker.ident:
                    wait = timeout  # between steps (host files, the snapshot)
                    continue
                if now < step.deadline:
                    wait = step.deadline - now
                    continue
                self._abandoned.add(step.thread)
                self._step = None
            self._give_up(worker, step.gpu, timeout)
            return None
        return worker.result()  # type: ignore[return-value]

    def _give_up(self, worker: _PollThread[object], gpu: Gpu, timeout: float) -> None:
        worker.abandon()
        self._poll_thread = None
        gpu.hung = True
        self.timeouts[gpu.index] = self.timeouts.get(gpu.index, 0) + 1
        log.error("GPU %d (%s): an NVML call did not return within %.1fs; skipping the GPU "
                  "until it does", gpu.index, gpu.identity.uuid, timeout)

    def each_gpu(self) -> EachGpu:
        """Every GPU that can answer now, each read as one step:
        ``for gpu, device in (each := session.each_gpu()): with each: ...``."""
        return EachGpu(self)

    def mark_down(self, exc: NvmlError) -> None:
        """A library-wide failure (e.g. driver upgraded underneath us): re-init later."""
        with self._lock:
            if not self.up:
                return
            self.up = False
            self.last_error = exc
            # Said once per reason while it keeps failing (or flapping).
            if self._logged_code != exc.code:
                self._logged_code = exc.code
                log.error("NVML stopped answering: %s (%s); retrying with backoff",
                          exc.init_hint(), exc.name)
            with contextlib.suppress(NvmlError):
                self.nvml.shutdown()
            self._next_try = self._clock() + self._backoff
            self._backoff = min(self._backoff * 2, INIT_BACKOFF_MAX_S)

    def close(self) -> None:
        # A poll thread stuck in a hung call cannot be joined; an idle one ends.
        if self._poll_thread is not None:
            self._poll_thread.abandon()
            self._poll_thread = None
        with self._lock:
            if self.up:
                self.up = False
                with contextlib.suppress(NvmlError):
                    self.nvml.shutdown()

    @staticmethod
    def _safe(fn: Callable[[], str]) -> str | None:
        try:
            return fn()
        except NvmlError as exc:
            if exc.code in (Return.LIB_RM_VERSION_MISMATCH, Return.DRIVER_NOT_LOADED):
                raise
            return None

    def _discover(self) -> list[Gpu]:
        gpus = []
        for index in range(self.nvml.device_count()):
            gpus.append(self._open(index))
        return gpus

    def _open(self, index: int) -> Gpu:
        ident = Identity(index)
        try:
            device = self.nvml.device(index)
        except NvmlError as exc:
            log.error("GPU %d: cannot get a handle: %s", index, exc)
            gpu = Gpu(index, None, ident, lost=True, lost_since=self._clock(),
                      missing=self.missing)
            gpu.next_recovery_try = self._clock() + LOST_RETRY_S
            return gpu
        gpu = Gpu(index, device, ident, missing=self.missing)
        try:
            self._read_identity(gpu, device)
        except GpuGone as exc:
            log.error("GPU %d is lost at discovery: %s", index, exc)
            gpu.lost = True
            gpu.lost_since = self._clock()
            gpu.next_recovery_try = self._clock() + LOST_RETRY_S
        return gpu

    def _read_identity(self, gpu: Gpu, d: Device) -> None:
        ident = gpu.identity
        ident.uuid = gpu.read("uuid", d.uuid) or ""
        ident.name = gpu.read("name", d.name) or ""
        # As NVML, nvidia-smi and DCGM write it (00000000:1A:00.0), so joins across
        # exporters by bus id match; sysfs lookups normalise it (normalize_bus_id).
        ident.pci_bus_id = gpu.read("pci_info", d.pci_bus_id) or ""
        ident.serial = gpu.read("serial", d.serial) or ""
        ident.vbios_version = gpu.read("vbios", d.vbios_version) or ""
        ident.architecture = gpu.read("architecture", d.architecture) or ""
        ident.compute_capability = gpu.read("compute_capability", d.compute_capability) or ""

    def mark_lost(self, gpu: Gpu, reason: str) -> None:
        if not gpu.lost:
            log.error("GPU %d (%s) is lost: %s", gpu.index, gpu.identity.uuid, reason)
            gpu.lost = True
            gpu.lost_since = self._clock()
        gpu.next_recovery_try = self._clock() + LOST_RETRY_S

    def _by_bus_id(self, pci_bus_id: str) -> Gpu | None:
        want = normalize_bus_id(pci_bus_id)
        for gpu in self.gpus:
            if gpu.identity.pci_bus_id and normalize_bus_id(gpu.identity.pci_bus_id) == want:
                return gpu
        return None

    def gpu_removed(self, pci_bus_id: str) -> bool:
        """The kernel says the device left the bus (udev remove): lost at once."""
        gpu = self._by_bus_id(pci_bus_id)
        if gpu is None:
            return False
        self.mark_lost(gpu, f"udev remove event for PCI device {pci_bus_id}")
        return True

    def gpu_added(self, pci_bus_id: str) -> bool:
        """The device is back on the bus (udev add): try it on the next poll."""
        gpu = self._by_bus_id(pci_bus_id)
        if gpu is None or not gpu.lost:
            return False
        gpu.next_recovery_try = 0.0
        return True

    def try_recover(self, gpu: Gpu) -> bool:
        """Ask again for a lost GPU, at most every LOST_RETRY_S seconds."""
        now = self._clock()
        if now < gpu.next_recovery_try:
            return False
        gpu.next_recovery_try = now + LOST_RETRY_S
        try:
            device = self.nvml.device(gpu.index)
            uuid = device.uuid()
            device.performance_state()  # a dynamic read: a lost GPU fails here
        except NvmlError:
            return False
        if gpu.identity.uuid and uuid != gpu.identity.uuid:
            log.warning("GPU %d came back with a different UUID (%s, was %s)", gpu.index, uuid,
                        gpu.identity.uuid)
        fresh = self._open(gpu.index)
        if fresh.lost:
            return False
        gpu.device, gpu.identity, gpu.static = fresh.device, fresh.identity, {}
        self.reads.renew(gpu)  # a GPU that came back may have been reset
        gpu.unsupported.clear()
        gpu.lost, gpu.lost_since = False, None
        log.info("GPU %d (%s) answers again", gpu.index, gpu.identity.uuid)
        return True

