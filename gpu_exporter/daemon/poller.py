"""The poll loop: on a fixed interval, run every enabled stage (the readers,
then the derivations) into one builder, add the exporter's own health, freeze
it and publish it.

A stage that raises never fails the poll: it is reported through
``gpu_exporter_collector_success`` 0, logged once until it recovers, and run
again next poll.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpu_exporter import __version__
from gpu_exporter.catalogs.exporter import (
    EXPORTER_BUILD_INFO,
    EXPORTER_COLLECTOR_DURATION_SECONDS,
    EXPORTER_COLLECTOR_ERRORS_TOTAL,
    EXPORTER_COLLECTOR_SUCCESS,
    EXPORTER_CONFIG_LAST_RELOAD_SUCCESS,
    EXPORTER_CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP_SECONDS,
    EXPORTER_LAST_POLL_TIMESTAMP_SECONDS,
    EXPORTER_NVML_DRIVER_INFO,
    EXPORTER_NVML_TIMEOUTS_TOTAL,
    EXPORTER_NVML_UP,
    EXPORTER_POLL_DURATION_SECONDS,
    EXPORTER_POLLS_TOTAL,
)
from gpu_exporter.diagnosis.visibility import NVML_PROBLEM
from gpu_exporter.nvml.binding import binding_version
from gpu_exporter.nvml.session import NvmlSession
from gpu_exporter.poll.catalog import DETAIL
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.poll.stage import Stage
from gpu_exporter.settings.config import Settings

log = logging.getLogger(__name__)

Listener = Callable[[Snapshot], None]


@dataclass(frozen=True)
class _Reconfiguration:
    """A reloaded configuration waiting for the end of the running poll."""

    stages: tuple[Stage, ...]
    settings: Settings


class Poller:
    def __init__(
        self,
        stages: Sequence[Stage],
        interval: float,
        session: NvmlSession | None = None,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        detail: bool = False,
    ) -> None:
        self.stages = list(stages)
        # Whether the detail families (catalog DETAIL) are exported too.
        self.detail = detail
        self.interval = interval
        self.session = session
        self._wall = wall_clock
        self._mono = monotonic
        self._latest: Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: set[str] = set()
        self._errors_total: dict[str, int] = {s.name: 0 for s in self.stages}
        self.polls = 0
        self.listeners: list[Listener] = []
        # Called before each poll (the simulator advances its host files here).
        self.before_poll: list[Callable[[], None]] = []
        self._build_labels = {"version": __version__, "nvml_binding_version": binding_version(),
                              "python_version": platform.python_version()}
        # The configuration in force was loaded at start; SIGHUP reloads report here.
        self.reload_success = True
        self.reload_success_timestamp = wall_clock()
        # A reloaded configuration, applied between two polls on the poll
        # thread, so no stage is swapped, reconfigured or closed while it runs.
        self._pending: _Reconfiguration | None = None
        self._pending_lock = threading.Lock()

    @property
    def latest(self) -> Snapshot | None:
        return self._latest

    @property
    def ready(self) -> bool:
        return self._latest is not None

    def planned(self) -> list[Stage]:
        """The stages the next poll runs: those of a reconfiguration still
        waiting for it, else the running ones."""
        with self._pending_lock:
            pending = self._pending
        return list(pending.stages if pending is not None else self.stages)

    def reconfigure(self, stages: Sequence[Stage], settings: Settings) -> None:
        """From the next poll on: run ``stages`` (those no longer listed are
        closed), hand each the new settings, and poll at the new interval. A
        later call before that poll replaces an earlier one; stages built for
        the earlier one and not kept are closed now (they never ran)."""
        with self._pending_lock:
            replaced, self._pending = self._pending, _Reconfiguration(tuple(stages), settings)
        if replaced is None:
            return
        kept = {id(c) for c in stages} | {id(c) for c in self.stages}
        for c in replaced.stages:
            if id(c) not in kept:
                try:
                    c.close()
                except Exception:
                    log.exception("closing %s %s failed", c.kind, c.name)

    def config_reloaded(self, ok: bool) -> None:
        self.reload_success = ok
        if ok:
            self.reload_success_timestamp = self._wall()

    def _apply_pending(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return
        kept = {id(c) for c in pending.stages}
        closing = [c for c in self.stages if id(c) not in kept]
        self.stages = list(pending.stages)
        for c in closing:
            try:
                c.close()
            except Exception:
                log.exception("closing %s %s failed", c.kind, c.name)
        for c in self.stages:
            self._errors_total.setdefault(c.name, 0)
            try:
                c.reconfigure(pending.settings)
            except Exception:
                log.exception("reconfiguring %s %s failed", c.kind, c.name)
        self.interval = pending.settings.poll.interval
        self.detail = pending.settings.metrics.detail
        if self.session is not None and self.session.call_timeout is not None:
            self.session.call_timeout = pending.settings.poll.timeout

    def poll(self) -> Snapshot | None:
        """One poll as the daemon runs it: on the NVML session's poll thread,
        watched for a GPU call that hangs (None then: the poll was given up on,
        the GPU is marked hung and the next poll skips it)."""
        if self.session is None:
            return self.poll_once()
        return self.session.guarded(self.poll_once)

    def poll_once(self) -> Snapshot:
        if self._pending is not None:
            self._apply_pending()
        start = self._mono()
        for hook in self.before_poll:
            hook()
        # The collectors read the detail families anyway (the aggregates and
        # the diagnosis are made from them); only the series stay out.
        out = SnapshotBuilder(self._wall(), drop=() if self.detail else DETAIL)
        for stage in self.stages:
            t0 = self._mono()
            ok = True
            try:
                stage.collect(out)
            except Exception as exc:  # a failing stage must never take the poll down
                ok = False
                self._errors_total[stage.name] += 1
                if stage.name not in self._failing:
                    log.error("%s %s failed: %s", stage.kind, stage.name, exc,
                              exc_info=log.isEnabledFor(logging.DEBUG))
            else:
                self._errors_total[stage.name] += stage.errors()
                if stage.name in self._failing:
                    log.info("%s %s recovered", stage.kind, stage.name)
            if ok:
                self._failing.discard(stage.name)
            else:
                self._failing.add(stage.name)
            labels = (stage.name,)
            out.add_values(EXPORTER_COLLECTOR_SUCCESS, labels, ok)
            out.add_values(EXPORTER_COLLECTOR_DURATION_SECONDS, labels, self._mono() - t0)
            out.add_values(EXPORTER_COLLECTOR_ERRORS_TOTAL, labels,
                           self._errors_total[stage.name])
        self._add_self(out, self._mono() - start)
        snap = out.build()
        self._latest = snap
        for listener in self.listeners:
            try:
                listener(snap)
            except Exception:
                log.exception("snapshot listener failed")
        return snap

    def _add_self(self, out: SnapshotBuilder, duration: float) -> None:
        self.polls += 1
        out.add(EXPORTER_BUILD_INFO, 1, **self._build_labels)
        if self.session is not None:
            out.add(EXPORTER_NVML_UP, self.session.up)
            if not self.session.up and self.session.last_error is not None:
                out.publish(NVML_PROBLEM, self.session.last_error.init_hint())
            # Every GPU NVML knows from 0: the first timeout is an increase()
            # sees. (While NVML is down, only the timeouts counted stay.)
            timeouts = {gpu.index: 0 for gpu in self.session.gpus} if self.session.up else {}
            timeouts.update(self.session.timeouts)
            for index, count in sorted(timeouts.items()):
                out.add(EXPORTER_NVML_TIMEOUTS_TOTAL, count, gpu=str(index))
            if self.session.up:
                out.add(EXPORTER_NVML_DRIVER_INFO, 1,
                        driver_version=self.session.driver_version,
                        cuda_driver_version=self.session.cuda_driver_version)
        out.add(EXPORTER_POLL_DURATION_SECONDS, duration)
        out.add(EXPORTER_POLLS_TOTAL, self.polls)
        out.add(EXPORTER_LAST_POLL_TIMESTAMP_SECONDS, out.timestamp)
        out.add(EXPORTER_CONFIG_LAST_RELOAD_SUCCESS, self.reload_success)
        out.add(EXPORTER_CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP_SECONDS,
                self.reload_success_timestamp)

    # --- the loop ------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_at = self._mono()
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:
                log.exception("poll failed")
            # Fixed-rate schedule; if a poll overran, skip the missed slots
            # instead of polling back to back.
            next_at += self.interval
            now = self._mono()
            if next_at < now:
                next_at = now + self.interval - ((now - next_at) % self.interval)
            self._stop.wait(max(0.0, next_at - now))

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._apply_pending()  # stages a reload switched off are closed too
        for stage in self.stages:
            try:
                stage.close()
            except Exception:
                log.exception("closing %s %s failed", stage.kind, stage.name)
        if self.session is not None:
            self.session.close()
