"""What the collectors share at run time: the settings, the NVML session, and
(in simulation) the simulated node standing in for hardware and host."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpu_exporter.config import Settings
from gpu_exporter.nvml.session import NvmlSession

if TYPE_CHECKING:
    from gpu_exporter.simulator import SimulatedNode


@dataclass
class Runtime:
    settings: Settings
    session: NvmlSession
    simulation: SimulatedNode | None = None
    monotonic: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    # True under a virtual clock (tests, `diagnose --simulate`): work that a
    # real daemon does on background threads happens inside collect() instead.
    synchronous: bool = False
    extras: dict[str, object] = field(default_factory=dict)
