"""Which pod holds which GPU, from the kubelet's PodResources API (v1) on its
unix socket.

The kubelet answers ``List`` with every container's devices; the GPUs and MIG
devices the NVIDIA device plugin handed out, and those NVIDIA's DRA driver
allocated through a ResourceClaim, are kept, each with its (namespace, pod,
container) and its claim. A ``PodResourcesWatcher`` asks on its own thread
every ``period`` seconds with a bounded deadline and keeps the last good
answer: the poll reads ``snapshot()``, which never waits on the kubelet, so a
slow, hung or missing kubelet never stalls it. A failure is logged once when
the state changes (not on every refresh) and counted.

No socket at the path means the node runs no kubelet (or it is not mounted
into the exporter's pod): attribution is off, which is not an error, and the
gRPC client (``kubelet_grpc``: grpcio and protobuf, about 14 MiB) is never
loaded. It is loaded at the first refresh that finds the socket.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpu_exporter.attribution.kubelet_answers import (
    FAILED,
    MAX_ALLOCATIONS,
    MAX_NAME,
    Allocation,
    Allocations,
    Claim,
    KubeletFailure,
    Owner,
    Status,
    allocatable_from,
    allocations_from,
    check_socket,
    index_by_device,
)
from gpu_exporter.settings.config_types import DEFAULT_POD_RESOURCES_SOCKET

if TYPE_CHECKING:
    from gpu_exporter.attribution.kubelet_grpc import PodResourcesClient

log = logging.getLogger(__name__)

DEFAULT_SOCKET = DEFAULT_POD_RESOURCES_SOCKET

__all__ = ["DEFAULT_SOCKET", "FAILED", "MAX_ALLOCATIONS", "MAX_NAME", "Allocation",
           "Allocations", "Claim", "Owner", "PodResourcesWatcher", "Status", "allocatable_from",
           "allocations_from", "index_by_device"]


class PodResourcesWatcher:
    """Keeps ``snapshot()`` fresh from the kubelet without ever making its
    reader wait. ``start()`` runs the refreshes on a daemon thread;
    ``refresh()`` runs one on the caller's thread (for tests and one-shot
    tools)."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, period: float = 10.0,
                 timeout: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if timeout <= 0 or period <= 0:
            raise ValueError("period and timeout must be positive")
        self.socket_path = socket_path
        self.period = period
        self.timeout = timeout
        # Made at the first refresh that finds the socket (see the module's note).
        self._client: PodResourcesClient | None = None
        self._clock = clock
        self._lock = threading.Lock()  # guards _state; never held while asking
        self._refreshing = threading.Lock()
        self._state = Allocations(Status.STARTING)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def snapshot(self) -> Allocations:
        """The last good grants and how the last attempt went. Never blocks
        on the kubelet: at most on a lock held for an assignment."""
        with self._lock:
            return self._state

    def refresh(self) -> Allocations:
        """Ask the kubelet once (bounded by the client's timeout), update the
        snapshot and return it."""
        try:
            # The client is one connection: one refresh at a time uses it.
            with self._refreshing:
                allocations, allocatable = self._connected().fetch()
        except KubeletFailure as failure:
            return self._fail(failure)
        except Exception as exc:  # a refresh must never kill the thread
            return self._fail(KubeletFailure(Status.ERROR, f"{type(exc).__name__}: {exc}"))
        grants = tuple(allocations)
        with self._lock:
            before = self._state
            self._state = Allocations(
                Status.OK, grants, allocatable, before.failures, self._clock(), "",
                index_by_device(grants))
        if before.status != Status.OK:
            log.info("kubelet pod resources: %d GPU allocations from %s",
                     len(grants), self.socket_path)
        return self._state

    def _connected(self) -> PodResourcesClient:
        """The gRPC client, loaded and made once the socket is there. Raises
        KubeletFailure while it is not (no kubelet: nothing of gRPC loaded)."""
        if self._client is None:
            check_socket(self.socket_path)
            # Loaded here, not at the top: a node without a kubelet socket
            # never pays for grpcio and protobuf (about 14 MiB).
            from gpu_exporter.attribution.kubelet_grpc import PodResourcesClient

            self._client = PodResourcesClient(self.socket_path, self.timeout)
        return self._client

    def _close_client(self) -> None:
        if self._client is not None:
            self._client.close()

    def _fail(self, failure: KubeletFailure) -> Allocations:
        with self._lock:
            before = self._state
            failures = before.failures + (failure.status in FAILED)
            self._state = Allocations(
                failure.status, before.allocations, before.allocatable, failures,
                before.updated_at, failure.detail, before.by_device)
        if before.status != failure.status:
            if failure.status == Status.SOCKET_ABSENT:
                log.info("kubelet pod resources off: %s", failure.detail)
            else:
                log.warning("kubelet pod resources %s: %s (keeping the last answer)",
                            failure.status.value, failure.detail)
        return self._state

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="podresources", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.refresh()
                self._stop.wait(self.period)
        finally:
            self._close_client()

    def close(self, timeout: float | None = None) -> None:
        """Stop refreshing; waits at most ``timeout`` (default: the client's
        deadline plus a second) for a refresh in flight."""
        self._stop.set()
        if self._thread is None:
            self._close_client()
            return
        # The thread closes the client itself once its refresh is done.
        self._thread.join(self.timeout + 1.0 if timeout is None else timeout)
        self._thread = None
