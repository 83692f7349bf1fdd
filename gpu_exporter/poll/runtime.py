"""What the collectors share at run time: the settings, the NVML session, the
clocks, and whether the node is simulated."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gpu_exporter.nvml.session import NvmlSession
from gpu_exporter.settings.config import Settings


@dataclass
class Runtime:
    settings: Settings
    session: NvmlSession
    monotonic: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    # True under a virtual clock (tests, `diagnose --simulate`): work that a
    # real daemon does on background threads happens inside collect() instead.
    synchronous: bool = False
    # False on a simulated node: its /sys has no udev behind it.
    watch_udev: bool = True
