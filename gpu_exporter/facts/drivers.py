"""Driver branches: how a version string names its branch, and the first
branch whose NVML has each value the diagnosis reads and older drivers lack.

One source for the readers (which fields a pass asks for) and for the
diagnosis's words (whether a value is absent because the driver is older than
the call, or because this GPU does not offer it under a driver that has it).
"""

from __future__ import annotations


def branch(driver_version: str) -> int:
    """The driver's branch number ("580.65.06" -> 580); 0 where unknown."""
    head = driver_version.partition(".")[0]
    return int(head) if head.isascii() and head.isdigit() else 0


# A value (GpuReading's field, or "gpm") -> the first branch whose NVML has it
# (NVML's change log and nvml.h): the GPM API ("Changes between v515 and
# v520"), the recovery action field ("v560 and v565"), the fabric probe
# nvmlDeviceGetGpuFabricInfoV ("v545 and v550"), and the C2C error fields
# 231-233 (first in nvml.h of CUDA 12.9, R575).
FIRST_BRANCH: dict[str, int] = {
    "gpm": 520,
    "recovery_action": 565,
    "fabric_state": 550,
    "c2c_errors": 575,
}
