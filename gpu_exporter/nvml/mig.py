"""MIG: a MIG instance's own device handle."""

from __future__ import annotations

from typing import Any

import pynvml

from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.binding import text, translate


class MigDevice:
    """A MIG instance's device handle."""

    def __init__(self, handle: Any) -> None:
        self._h = handle

    @translate("nvmlDeviceGetUUID")
    def uuid(self) -> str:
        return text(pynvml.nvmlDeviceGetUUID(self._h))

    @translate("nvmlDeviceGetGpuInstanceId")
    def gpu_instance(self) -> int:
        return int(pynvml.nvmlDeviceGetGpuInstanceId(self._h))

    @translate("nvmlDeviceGetComputeInstanceId")
    def compute_instance(self) -> int:
        return int(pynvml.nvmlDeviceGetComputeInstanceId(self._h))

    @translate("nvmlDeviceGetMemoryInfo_v2")
    def memory(self) -> tuple[int, int]:
        """(total, used) bytes of the instance."""
        m = pynvml.nvmlDeviceGetMemoryInfo(self._h, version=c.MEMORY_V2_VERSION)
        return int(m.total), int(m.used)
