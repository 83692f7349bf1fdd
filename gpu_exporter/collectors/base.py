"""What every reader is, and how it declares itself.

A reader's module says everything about it in its class: ``name`` (the
``--collector.<name>`` flag, the YAML ``collectors:`` key and the catalog's
``collector`` column), ``description``, ``default`` (on or off), ``settings``
(the settings it reads), ``build()`` (how the exporter makes one) and
``reconfigure()`` (how a reload hands it new settings). The pipeline only
orders the stages; adding a reader is one new module, its catalog entries and
its place in that order. What a poll does with every stage, readers and
derivations alike, is ``gpu_exporter.poll.stage``.
"""

from __future__ import annotations

from typing import ClassVar, Self

from gpu_exporter.nvml.session import NvmlSession
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.stage import Stage
from gpu_exporter.settings.config import Selector, Settings, setting_key


class Collector(Stage):
    """A reader: switched on and off by ``--collector.<name>``."""

    kind = "reader"
    default: ClassVar[bool] = True
    # The settings it reads (``lambda s: s.path.procfs``); those a reload may
    # change are handed over through reconfigure(), the others are read by build().
    settings: ClassVar[tuple[Selector, ...]] = ()

    @classmethod
    def wanted(cls, settings: Settings) -> bool:
        """Whether these settings switch the collector on."""
        return settings.collector_enabled(cls.name, cls.default)

    @classmethod
    def flag_help(cls) -> str:
        """What --help and the README say of ``--[no-]collector.<name>``."""
        reads = cls.setting_keys()
        also = f"; reads {', '.join(reads)}" if reads else ""
        return f"{cls.description} (default {'on' if cls.default else 'off'}{also})."

    @classmethod
    def setting_keys(cls) -> tuple[str, ...]:
        """The dotted keys of the settings it reads (``path.procfs``), for
        --help and the README."""
        return tuple(setting_key(select) for select in cls.settings)


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
