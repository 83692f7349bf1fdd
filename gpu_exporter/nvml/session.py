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
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, TypeVar

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


class NvmlGone(Exception):
    """NVML as a whole stopped answering (driver upgraded or unloaded)."""

    def __init__(self, error: NvmlError) -> None:
        super().__init__(str(error))
        self.error = error


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


@dataclass
class Gpu:
    """A GPU as the exporter tracks it between polls."""

    index: int
    device: Device | None
    identity: Identity
    # Capability keys NVML answered NOT_SUPPORTED (or lacks the function) for:
    # never asked again, their series stay absent.
    unsupported: set[str] = field(default_factory=set)
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
    # clock of slow_read().
    polls: int = 0
    # Slow-changing facts by key: (the poll they were read at, the value).
    slow: dict[str, tuple[int, object]] = field(default_factory=dict)

    def read(self, key: str, fn: Callable[..., T], *args: object) -> T | None:
        """Call ``fn``; None when the GPU cannot answer this (and remember why).

        Raises GpuGone when the device itself has gone away.
        """
        if key in self.unsupported:
            return None
        try:
            return fn(*args)
        except NvmlError as exc:
            if exc.capability_absent:
                self.unsupported.add(key)
                log.debug("GPU %d: %s not supported (%s); not asking again", self.index, key,
                          exc.name)
                return None
            if exc.device_gone:
                raise GpuGone(str(exc)) from None
            if exc.library_gone:
                raise NvmlGone(exc) from None
            if exc.code == Return.NO_PERMISSION:
                self.unsupported.add(key)
                if key not in self.warned:
                    self.warned.add(key)
                    log.warning("GPU %d: no permission to read %s (%s); run with access to "
                                "the NVIDIA device nodes to export it", self.index, key, exc)
                return None
            self.errors += 1
            if key not in self.warned:
                self.warned.add(key)
                log.warning("GPU %d: reading %s failed: %s", self.index, key, exc)
            return None

    def static_read(self, key: str, fn: Callable[..., T], *args: object) -> T | None:
        """Like read(), but the value is remembered after the first answer."""
        if key in self.static:
            return self.static[key]  # type: ignore[return-value]
        value = self.read(key, fn, *args)
        if value is not None:
            self.static[key] = value
        return value


    def slow_read(self, key: str, fn: Callable[..., T], *args: object, every: int,
                  now: bool = False) -> T | None:
        """Like read(), but a value read less than ``every`` polls ago is
        answered again without asking NVML, unless ``now``.

        For facts that change rarely (ECC aggregates, remapped rows, modes):
        NVML calls are the cost of a poll on a real node. GPUs start their
        cadence at different offsets so their slow reads fall on different polls.
        """
        held = self.slow.get(key)
        if held is not None and not now and self.polls - held[0] < every:
            return held[1]  # type: ignore[return-value]
        value = self.read(key, fn, *args)
        if value is None:
            self.slow.pop(key, None)  # ask again next poll
        else:
            first = held is None
            self.slow[key] = (self.polls - (self.index % every if first else 0), value)
        return value


class NvmlSession:
    """Shared by every NVML-backed collector."""

    def __init__(self, nvml: Nvml | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 call_timeout: float | None = None) -> None:
        self.nvml = nvml or Nvml()
        self._clock = clock
        # With a timeout, each GPU's reads run on that GPU's own worker thread so
        # a call that hangs on a sick GPU costs the poll at most the timeout and
        # never more than one thread per GPU. None: reads run inline (tests on
        # a virtual clock).
        self.call_timeout = call_timeout
        self._workers: dict[int, ThreadPoolExecutor] = {}
        self._pending: dict[int, Future[Any]] = {}
        self.timeouts: dict[int, int] = {}
        self._lock = threading.Lock()
        self.up = False
        self.gpus: list[Gpu] = []
        self.driver_version = ""
        self.cuda_driver_version = ""
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
    def begin_poll(self) -> None:
        """GPUs whose stuck call has returned since are usable again."""
        for gpu in self.gpus:
            pending = self._pending.get(gpu.index)
            if gpu.hung and (pending is None or pending.done()):
                log.warning("GPU %d answers again after a call that hung", gpu.index)
                gpu.hung = False

    def run(self, gpu: Gpu, fn: Callable[[], T]) -> T:
        """``fn()`` for this GPU within ``call_timeout``; raises GpuHung."""
        if self.call_timeout is None:
            return fn()
        if gpu.hung:
            raise GpuHung()
        worker = self._workers.get(gpu.index)
        if worker is None:
            worker = self._workers[gpu.index] = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"nvml-gpu{gpu.index}")
        future = worker.submit(fn)
        self._pending[gpu.index] = future
        try:
            return future.result(timeout=self.call_timeout)
        except FutureTimeout:
            gpu.hung = True
            self.timeouts[gpu.index] = self.timeouts.get(gpu.index, 0) + 1
            log.error("GPU %d (%s): an NVML call did not return within %.1fs; skipping the "
                      "GPU until it does", gpu.index, gpu.identity.uuid, self.call_timeout)
            raise GpuHung() from None

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
        for worker in self._workers.values():
            # A worker stuck in a hung call cannot be joined; do not wait for it.
            worker.shutdown(wait=False, cancel_futures=True)
        self._workers.clear()
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
            gpu = Gpu(index, None, ident, lost=True, lost_since=self._clock())
            gpu.next_recovery_try = self._clock() + LOST_RETRY_S
            return gpu
        gpu = Gpu(index, device, ident)
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
        ident.pci_bus_id = (gpu.read("pci_info", d.pci_bus_id) or "").lower()
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
        gpu.unsupported.clear()
        gpu.lost, gpu.lost_since = False, None
        log.info("GPU %d (%s) answers again", gpu.index, gpu.identity.uuid)
        return True

