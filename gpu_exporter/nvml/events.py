"""NVML's event API: an event set the Xid reader waits on."""

from __future__ import annotations

import ctypes

import pynvml

from gpu_exporter.nvml.binding import translate
from gpu_exporter.nvml.errors import Return

# nvmlEventData_t.gpuInstanceId for an event of the whole GPU (or MIG off).
NO_INSTANCE = 0xFFFFFFFF


class EventSet:
    """An NVML event set; wait() blocks up to the timeout."""

    @translate("nvmlEventSetCreate")
    def __init__(self) -> None:
        self.raw = pynvml.nvmlEventSetCreate()

    @translate("nvmlEventSetWait_v2")
    def wait(self, timeout_ms: int) -> tuple[int, int, int, int | None] | None:
        """(device handle address, event type, event data, the MIG GPU instance
        it concerns or None), or None on timeout."""
        try:
            data = pynvml.nvmlEventSetWait_v2(self.raw, timeout_ms)
        except pynvml.NVMLError as exc:
            if exc.value == Return.TIMEOUT:
                return None
            raise
        device = int(ctypes.cast(data.device, ctypes.c_void_p).value or 0)
        # 0xFFFFFFFF: the event concerns the whole GPU (or MIG is off).
        gi = int(data.gpuInstanceId)
        return device, int(data.eventType), int(data.eventData), None if gi == NO_INSTANCE else gi

    @translate("nvmlEventSetFree")
    def close(self) -> None:
        if self.raw is not None:
            pynvml.nvmlEventSetFree(self.raw)
            self.raw = None
