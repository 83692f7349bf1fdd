"""A GPU as the exporter tracks it between polls: who it is (its index,
NVML handle and identity) and how it fails (what it cannot answer, what it
refuses, whether it is lost or hung, its read errors this poll). What the
readers read of it between polls (values on a cadence, this poll's field
values) lives in ``nvml/values.py``; what they check, in theirs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.errors import NvmlError, Return

log = logging.getLogger(__name__)
T = TypeVar("T")


class GpuGone(Exception):
    """The GPU stopped answering in the middle of a poll (lost, needs reset)."""


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
    # Shared by the session's GPUs: a missing capability is logged once per node.
    missing: MissingCapabilities = field(default_factory=MissingCapabilities)

    # How collectors/values.py names this GPU when it rejects a reading.
    kind = "GPU"

    @property
    def label(self) -> str:
        return f"GPU {self.index}"

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
