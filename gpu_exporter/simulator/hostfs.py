"""The simulated node's /proc and /sys as real files, so the host readers run
unchanged on simulated data (pointed there as with --path.procfs/--path.sysfs).

Rendering of the files is filled in together with the host readers.
"""

from __future__ import annotations

from pathlib import Path

from gpu_exporter.simulator.world import World


class HostFs:
    def __init__(self, world: World, root: Path) -> None:
        self.world = world
        self.procfs = root / "proc"
        self.sysfs = root / "sys"
        self.procfs.mkdir(parents=True, exist_ok=True)
        self.sysfs.mkdir(parents=True, exist_ok=True)

    def render(self, t: float) -> None:
        """Write the files for time ``t`` (seconds since the scenario started)."""
