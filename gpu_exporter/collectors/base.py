"""What every collector is: a name, a one-line description, and ``collect()``,
which adds this poll's samples to the snapshot being built."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from gpu_exporter.nvml.session import NvmlSession
from gpu_exporter.snapshot import SnapshotBuilder


class Collector(ABC):
    name: ClassVar[str]
    description: ClassVar[str]

    @abstractmethod
    def collect(self, out: SnapshotBuilder) -> None:
        """Add this poll's samples to ``out``. May raise: the poller counts it."""

    def errors(self) -> int:
        """Reads that failed in the last collect() without failing the collector."""
        return 0

    def close(self) -> None:  # noqa: B027 - optional hook, most collectors hold nothing
        """Release what the collector holds (threads, handles)."""


class NvmlCollector(Collector):
    """A collector reading through the shared NVML session; ``_errors`` holds the
    reads that failed in the last collect()."""

    def __init__(self, session: NvmlSession) -> None:
        self.session = session
        self._errors = 0

    def errors(self) -> int:
        return self._errors
