"""What every collector is, and how it declares itself.

A collector's module says everything about it in its class: ``name`` (the
``--collector.<name>`` flag, the YAML ``collectors:`` key and the catalog's
``collector`` column), ``description``, ``default`` (on or off), ``settings``
(the settings it reads), ``build()`` (how the exporter makes one) and
``reconfigure()`` (how a reload hands it new settings). The pipeline only
orders the collectors; adding one is one new module, its catalog entries and
its place in that order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Self

from gpu_exporter.config import Settings
from gpu_exporter.nvml.session import NvmlSession
from gpu_exporter.runtime import Runtime
from gpu_exporter.snapshot import SnapshotBuilder


class Collector(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    default: ClassVar[bool] = True
    # The settings it reads, as dotted YAML keys; those a reload may change are
    # handed over through reconfigure(), the others are read by build().
    settings: ClassVar[tuple[str, ...]] = ()
    # Whether a reload that switches it on may build it (False when what it
    # needs is read once at start, like the baseline file).
    starts_on_reload: ClassVar[bool] = True

    @classmethod
    @abstractmethod
    def build(cls, rt: Runtime) -> Self:
        """A collector of this kind for the exporter's runtime."""

    @classmethod
    def wanted(cls, settings: Settings) -> bool:
        """Whether these settings switch the collector on."""
        return settings.collector_enabled(cls.name, cls.default)

    @abstractmethod
    def collect(self, out: SnapshotBuilder) -> None:
        """Add this poll's samples to ``out`` (and, for a reader, its field of
        ``out.readings``). May raise: the poller counts it."""

    def reconfigure(self, settings: Settings) -> None:  # noqa: B027 - most read no settings
        """Take a reloaded configuration (called between polls, on the poll thread)."""

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

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        return cls(rt.session)

    def errors(self) -> int:
        return self._errors
