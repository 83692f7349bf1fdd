"""NVML's life in the exporter: initialise once, retry with backoff while the
library or driver is missing, discover GPUs, remember what each GPU cannot do,
and notice GPUs that are lost and come back.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.adapter import Device, Nvml
from gpu_exporter.nvml.errors import NvmlError, Return

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


class GpuGone(Exception):
    """The GPU stopped answering in the middle of a poll (lost, needs reset)."""


class GpuHung(Exception):
    """A call on this GPU did not return before the poll's deadline."""


class PollAbandoned(BaseException):
    """Raised in a poll thread that was given up on while one of its calls hung,
    once that call returns: the thread unwinds without touching anything shared
    again (a BaseException, so no collector's ``except Exception`` stops it)."""


class NvmlGone(Exception):
    """NVML as a whole stopped answering (driver upgraded or unloaded)."""

    def __init__(self, error: NvmlError) -> None:
        super().__init__(str(error))
        self.error = error


class MissingCapabilities:
    """What NVML on this node cannot answer, said in the log once per
    capability for the whole node (not once per GPU, not every poll): a
    function the driver lacks at once; a capability the GPUs answer
    NOT_SUPPORTED for when the next poll begins, with every GPU that
    answered so ("GPUs 0-7"), and again only for a GPU that answers so later."""

    def __init__(self) -> None:
        self._said: set[str] = set()
        self._gpus: dict[str, set[int]] = {}  # key -> the GPUs noted so far
        self._pending: dict[str, tuple[NvmlError, set[int]]] = {}
        self._lock = threading.Lock()

    def note(self, index: int, key: str, exc: NvmlError) -> None:
        if exc.code == Return.FUNCTION_NOT_FOUND:
            with self._lock:
                if key in self._said:
                    return
                self._said.add(key)
            log.info("NVML on this node has no %s (the driver predates it): %s is read another "
                     "way where there is one, else its series stay absent; the README's "
                     "driver table says what each branch lacks", exc.call or key, key)
            return
        with self._lock:
            noted = self._gpus.setdefault(key, set())
            if index in noted:
                return
            noted.add(index)
            self._pending.setdefault(key, (exc, set()))[1].add(index)

    def flush(self) -> None:
        """Say what the GPUs answered NOT_SUPPORTED for since the last flush."""
        with self._lock:
            pending, self._pending = self._pending, {}
        for key, (exc, gpus) in sorted(pending.items()):
            log.info("%s: NVML answers %s for %s (%s): read another way where there is one, "
                     "else its series stay absent; not asked again", gpu_list(gpus), exc.name,
                     exc.call or key, key)


def gpu_list(indices: set[int]) -> str:
    """``GPU 3``, ``GPUs 0-7``, ``GPUs 0-2, 5``: runs of indices as ranges."""
    ordered = sorted(indices)
    runs: list[str] = []
    start = prev = ordered[0]
    for i in [*ordered[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return f"GPU {ordered[0]}" if len(ordered) == 1 else "GPUs " + ", ".join(runs)


@dataclass
class Identity:
    index: int
    uuid: str = ""
    name: str = ""
    pci_bus_id: str = ""
    serial: str = ""
    vbios_version: str = ""
    architecture: str = ""
    compute_capability: str = ""


# Keys of Gpu.unsupported that more than one reader asks about: the GPM and
# sampling readers record them, the device reader reports them with the GPU's
# reading (what the board or driver does not offer, for the diagnosis).
GPM_KEY = "gpm"
UTILIZATION_SAMPLES_KEY = f"samples_{c.SAMPLING_GPU_UTILIZATION}"


@dataclass
class Gpu:
    """A GPU as the exporter tracks it between polls."""

    index: int
    device: Device | None
    identity: Identity
    # Capability keys NVML answered NOT_SUPPORTED (or lacks the function) for:
    # never asked again, their series stay absent.
    unsupported: set[str] = field(default_factory=set)
    # Keys NVML refused (NO_PERMISSION): not asked again, and never a reason
    # to try an older call, which the driver refuses the same way.
    denied: set[str] = field(default_factory=set)
    # Facts read once at discovery (limits, maxima, thresholds...), by key.
    static: dict[str, object] = field(default_factory=dict)
    lost: bool = False
    lost_since: float | None = None
    # A call on this GPU outlived the poll deadline and has not returned yet:
    # the GPU is skipped until it does.
    hung: bool = False
    next_recovery_try: float = 0.0
    errors: int = 0  # errors in the current poll
    warned: set[str] = field(default_factory=set)
    # Polls this GPU has been read in (the device collector counts them), the
    # clock of the reads taken on a cadence (due()).
    polls: int = 0
    # Values read on a cadence, by key: (the poll they were read at, the epoch
    # then, the value).
    slow: dict[str, tuple[int, int, object]] = field(default_factory=dict)
    # Bumped where something may have changed what the slow reads hold (an
    # NVML event on the GPU, a reload): each of them is read again at once.
    epoch: int = 0
    # Fields other readers want of the GPU every poll, by reader (NVLink's
    # per-link counters): the device reader asks them in the same
    # nvmlDeviceGetFieldValues call as its own, one call per GPU and poll, and
    # leaves this poll's answers here for them to take (None once taken, or
    # where the device reader did not run).
    shared_fields: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    shared_answers: dict[tuple[int, int], float | NvmlError] | None = None
    # The GPU's last nvmlDeviceGetFieldValues request (nvml/values.py): its
    # own fields, the other readers' pairs, the pairs asked.
    field_request: tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...],
                         tuple[tuple[int, int], ...]] = field(
        default=((), (), ()), init=False, repr=False, compare=False)
    # shared_request()'s last answer, and the requests it was made of.
    _shared: tuple[tuple[tuple[tuple[int, int], ...], ...], tuple[tuple[int, int], ...]] = field(
        default=((), ()), init=False, repr=False, compare=False)
    # Each counter's last accepted reading, by series: a counter that goes
    # backwards is no reading (collectors/values.py).
    counters: dict[str, float] = field(default_factory=dict)
    # Shared by the session's GPUs: a missing capability is logged once per node.
    missing: MissingCapabilities = field(default_factory=MissingCapabilities)

    # How collectors/values.py names this GPU when it rejects a reading.
    kind = "GPU"

    @property
    def label(self) -> str:
        return f"GPU {self.index}"

    def shared_request(self) -> tuple[tuple[int, int], ...]:
        """Every (field id, scope id) pair the other readers want of the GPU
        (shared_fields), once each: made again only when a request changed (a
        reader passes the same tuple every poll, compared by identity first)."""
        made_of, request = self._shared
        now = tuple(self.shared_fields.values())
        if now != made_of:
            request = tuple(dict.fromkeys(
                pair for wanted in self.shared_fields.values() for pair in wanted))
            self._shared = (now, request)
        return request

    def read(self, key: str, fn: Callable[..., T], *args: object,
             refusal_has_fallback: bool = False) -> T | None:
        """Call ``fn``; None when the GPU cannot answer this (and remember why).

        Raises GpuGone when the device itself has gone away. With
        ``refusal_has_fallback``, NO_PERMISSION is said once for the node like a
        missing capability, not warned per GPU: the caller reads it another way
        (NVML keeps some reads to privileged users).
        """
        if key in self.unsupported:
            return None
        try:
            return fn(*args)
        except NvmlError as exc:
            if exc.capability_absent:
                self.unsupported.add(key)
                self.missing.note(self.index, key, exc)
                return None
            if exc.device_gone:
                raise GpuGone(str(exc)) from None
            if exc.library_gone:
                raise NvmlGone(exc) from None
            if exc.code == Return.NO_PERMISSION:
                self.unsupported.add(key)
                self.denied.add(key)
                if refusal_has_fallback:
                    self.missing.note(self.index, key, exc)
                elif key not in self.warned:
                    self.warned.add(key)
                    log.warning("GPU %d: no permission to read %s (%s); run with access to "
                                "the NVIDIA device nodes to export it", self.index, key, exc)
                return None
            self.errors += 1
            if key not in self.warned:
                self.warned.add(key)
                log.warning("GPU %d: reading %s failed: %s", self.index, key, exc)
            return None

    def read_first(self, *calls: tuple[str, Callable[[], T]], static: bool = False) -> T | None:
        """The first of ``calls`` (key, function) that answers; the next is tried
        only where the one before is absent for good (NOT_SUPPORTED, or a symbol
        this driver lacks): a call under its newer name, then its older one."""
        for key, fn in calls:
            value = self.static_read(key, fn) if static else self.read(key, fn)
            if value is not None or key not in self.unsupported or key in self.denied:
                return value
        return None

    def static_read(self, key: str, fn: Callable[..., T], *args: object,
                    refusal_has_fallback: bool = False) -> T | None:
        """Like read(), but the value is remembered after the first answer."""
        if key in self.static:
            return self.static[key]  # type: ignore[return-value]
        value = self.read(key, fn, *args, refusal_has_fallback=refusal_has_fallback)
        if value is not None:
            self.static[key] = value
        return value


    def due(self, key: str, every: int) -> bool:
        """Whether the value read on a cadence under ``key`` is to be read this
        poll: never read, read ``every`` polls ago or more, or read before the
        last event that may have changed it (refresh())."""
        held = self.slow.get(key)
        return held is None or self.polls - held[0] >= every or held[1] != self.epoch

    def hold(self, key: str, every: int, value: object) -> None:
        """Keep ``value``, read this poll, until it is due again; None forgets
        it (asked again next poll). GPUs start their cadence at different
        offsets, so their slow reads fall on different polls."""
        if value is None:
            self.slow.pop(key, None)
            return
        start = self.polls - (self.index % every if key not in self.slow else 0)
        self.slow[key] = (start, self.epoch, value)

    def held(self, key: str) -> object | None:
        """The value last kept under ``key``, or None."""
        held = self.slow.get(key)
        return None if held is None else held[2]

    def refresh(self) -> None:
        """Something happened to the GPU (an NVML event, a reload): every
        value read on a cadence is read again at its reader's next poll.
        Safe from another thread: one integer written."""
        self.epoch += 1

    def slow_read(self, key: str, fn: Callable[..., T], *args: object, every: int,
                  now: bool = False) -> T | None:
        """Like read(), but a value read less than ``every`` polls ago (and
        since the last refresh()) is answered again without asking NVML,
        unless ``now``. For facts that change rarely: NVML calls are the cost
        of a poll on a real node."""
        if not now and not self.due(key, every):
            return self.held(key)  # type: ignore[return-value]
        value = self.read(key, fn, *args)
        self.hold(key, every, value)
        return value


@dataclass(frozen=True)
class _Step:
    """One GPU's reads in progress on a poll thread, and when they are overdue."""

    gpu: Gpu
    deadline: float  # time.monotonic(): a hang is real time, whatever the poll's clock
    thread: int


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
        self._step: _Step | None = None
        self._abandoned: set[int] = set()  # idents of poll threads given up on
        self._returned: set[int] = set()  # GPUs whose stuck call has returned since
        self._poll_thread: _PollThread[object] | None = None
        self._poll_threads = 0
        self.up = False
        self.gpus: list[Gpu] = []
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

    def run(self, gpu: Gpu, fn: Callable[[], T]) -> T:
        """``fn()``, this GPU's reads, as one step guarded() watches: raises
        GpuHung for a GPU whose earlier call has not returned, PollAbandoned
        when this step outlived the timeout and the poll went on without it."""
        if self.call_timeout is None:
            return fn()
        if gpu.hung:
            raise GpuHung()
        me = threading.get_ident()
        with self._guard:
            if me in self._abandoned:
                raise PollAbandoned()
            self._step = _Step(gpu, time.monotonic() + self.call_timeout, me)
        try:
            return fn()
        finally:
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

    def each_gpu(self, fn: Callable[[Gpu, Device], None]) -> int:
        """Run ``fn`` for every GPU that can answer now, each guarded; the number of
        reads that failed (GPUs lost or hung on the way are marked, not counted)."""
        errors = 0
        for gpu in self.gpus:
            device = gpu.device
            if gpu.lost or gpu.hung or device is None:
                continue
            gpu.errors = 0
            try:
                self.run(gpu, lambda: fn(gpu, device))  # noqa: B023 - run() waits for it
            except GpuGone as exc:
                self.mark_lost(gpu, str(exc))
            except GpuHung:
                continue
            except NvmlGone as gone:  # NVML as a whole: down, re-initialised with backoff
                self.mark_down(gone.error)
                break
            errors += gpu.errors
        return errors

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
        gpu.slow.clear()
        gpu.counters.clear()  # a GPU that came back may have been reset
        gpu.unsupported.clear()
        gpu.lost, gpu.lost_since = False, None
        log.info("GPU %d (%s) answers again", gpu.index, gpu.identity.uuid)
        return True

