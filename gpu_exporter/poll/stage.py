"""One step of a poll, and the two kinds there are.

A poll runs its stages in the pipeline's order into one snapshot builder.
*Readers* (``collectors/``) read a source (NVML, /proc, /sys, the kubelet),
add samples and fill their field of the readings; they are switched on and
off with ``--collector.<name>``. *Derivations* (the diagnosis, the baseline
comparison) run after them on those readings and publish what they derive;
each is switched on by its own settings. The poller treats both alike: it
times each stage, counts its failures and errors
(``gpu_exporter_collector_*{collector=<name>}``), hands it a reloaded
configuration and closes it when it is switched off.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Self

from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import SnapshotBuilder
from gpu_exporter.settings.config import Settings


class Stage(ABC):
    # Its label on the exporter's own series, and its name in logs.
    name: ClassVar[str]
    # What it is, in logs: "reader device failed", "derivation diagnosis
    # recovered". (The self-metrics keep their label ``collector``, the name
    # dashboards and alerts are written against.)
    kind: ClassVar[str] = "stage"
    description: ClassVar[str]
    # Whether a reload that switches it on may build it (False when what it
    # needs is read once at start, like the baseline file).
    starts_on_reload: ClassVar[bool] = True

    @classmethod
    @abstractmethod
    def build(cls, rt: Runtime) -> Self:
        """A stage of this kind for the exporter's runtime."""

    @classmethod
    @abstractmethod
    def wanted(cls, settings: Settings) -> bool:
        """Whether these settings switch the stage on."""

    @abstractmethod
    def collect(self, out: SnapshotBuilder) -> None:
        """Add this poll's samples to ``out`` (a reader: and its field of
        ``out.readings``; a derivation: and what it publishes). May raise: the
        poller counts it."""

    def reconfigure(self, settings: Settings) -> None:  # noqa: B027 - most read no settings
        """Take a reloaded configuration (called between polls, on the poll thread)."""

    def errors(self) -> int:
        """Reads or rules that failed in the last collect() without failing the stage."""
        return 0

    def close(self) -> None:  # noqa: B027 - optional hook, most stages hold nothing
        """Release what the stage holds (threads, handles)."""


class Derivation(Stage):
    """A stage that reasons over the readers' readings of the same poll and
    publishes its results in a :class:`~gpu_exporter.poll.snapshot.Slot` it owns.
    It reads no source itself, and imports no reader."""

    kind = "derivation"
