"""CPU the simulator spends standing in for the hardware, so the benchmark can
report the exporter's own share.

Two places burn simulator CPU inside the exporter's process: the fake
library's C callbacks (the world's state, struct filling) and the simulated
/proc and /sys being rewritten before each poll. Both are wrapped here with
per-thread CPU clocks; nothing in the product knows about it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gpu_exporter.simulator import SimulatedNode


class SimulatorCpu:
    """Adds up the thread CPU time spent inside the simulator, all threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.library_s = 0.0
        self.hostfs_s = 0.0

    @property
    def total_s(self) -> float:
        with self._lock:
            return self.library_s + self.hostfs_s

    def install(self, node: SimulatedNode) -> None:
        library = node.library
        dispatch = library._dispatch

        # An instance attribute shadows the method: the C callbacks call
        # self._dispatch, so every NVML call is timed from here on.
        def timed_dispatch(name: str, impl: Callable[..., int], device: bool,
                           args: tuple[Any, ...]) -> int:
            t0 = time.thread_time()
            try:
                return dispatch(name, impl, device, args)
            finally:
                spent = time.thread_time() - t0
                with self._lock:
                    self.library_s += spent

        library._dispatch = timed_dispatch  # type: ignore[method-assign]
        refresh = node.refresh

        def timed_refresh() -> None:
            t0 = time.thread_time()
            try:
                refresh()
            finally:
                spent = time.thread_time() - t0
                with self._lock:
                    self.hostfs_s += spent

        node.refresh = timed_refresh  # type: ignore[method-assign]
