"""What a row of the diagnosis table is (``table.py`` holds the rows)."""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Literal

from gpu_exporter.facts.catalog_types import Metric
from gpu_exporter.facts.xids import XidTier
from gpu_exporter.settings.thresholds import DiagnosisConfig

Severity = Literal["critical", "warning", "info"]


@dataclass(frozen=True)
class Row:
    symptom: str
    cause: str
    severity: Severity
    summary: str  # one line, plain words, for alert summaries and the landing page
    # What the exporter sees when the row fires; ``{name}`` quotes the
    # DiagnosisConfig threshold ``name`` as people read it (see evidence_text).
    evidence: str
    fix: str  # what the runbook tells the on-call engineer to do
    confirm: tuple[str, ...]  # commands that confirm it on the node
    escalate: str  # when to hand it on
    # Facts, not trends (a lost GPU, an ECC error): on at once, without the
    # diagnosis window.
    immediate: bool = False
    # The Xid rows: which tier of xids.py the row reports (who must
    # act); the alert carries it as its ``xid_tier`` label for routing.
    xid_tier: XidTier | None = None
    # Judged for what runs on the GPU: on a GPU without MIG, and on each MIG
    # instance of a GPU with MIG (not on the MIG GPU as a whole). Other rows
    # judge the physical GPU.
    per_instance: bool = False
    # The metrics whose readings the rule judges, by their catalog handles (the
    # catalog walk in tests/diagnosis/test_cause_signals.py holds every cause
    # signal to a row or a reason); a handle, not a name, so a renamed or removed
    # metric is an error at import, not a row that silently reads nothing.
    reads: tuple[Metric, ...] = ()
    # Why the rule looks at how busy the GPU is, where it does; empty: the
    # cause is judged at every load (docs/diagnosis.md, "Judged at every load
    # at which it can exist"; tests/diagnosis/test_diagnosis_principles.py sweeps it).
    load_gate: str = ""
    # A link or the fabric, which train while the node boots: the row waits
    # diagnosis.boot_grace after boot before it judges (docs/diagnosis.md).
    boot_grace: bool = False
    # The row's hash, taken once: rows are dict keys and set members on every
    # poll of every GPU, and a frozen dataclass would hash all its fields (the
    # texts included) each time. (symptom, cause) names one row of the table.
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.symptom, self.cause)))
        # mypy holds the rows to handles; this holds what it cannot see (a
        # name handed on through an untyped call), once, when the row is made.
        for metric in self.reads:
            if not isinstance(metric, Metric):
                raise TypeError(f"diagnosis row {self.key} reads {metric!r}: a row reads a "
                                "metric by its catalog handle, not by its name")

    def __hash__(self) -> int:
        return self._hash

    @property
    def key(self) -> str:
        return f"{self.symptom}/{self.cause}"

    @property
    def anchor(self) -> str:
        """Runbook anchor and built-in scenario name: underscores as hyphens."""
        return f"{self.symptom}-{self.cause}".replace("_", "-")

    def evidence_text(self, cfg: DiagnosisConfig) -> str:
        """``evidence`` with the thresholds of ``cfg`` written in."""
        return self.evidence.format_map(cfg.prose())

    def thresholds(self) -> tuple[str, ...]:
        """The DiagnosisConfig fields the evidence prose quotes."""
        return tuple(name for _, name, _, _ in string.Formatter().parse(self.evidence) if name)

    @property
    def alert_name(self) -> str:
        words = f"{self.symptom}_{self.cause}".split("_")
        if words[0] == "gpu":  # GpuLostHardware, not GpuGpuLostHardware
            words = words[1:]
        return "Gpu" + "".join(w.capitalize() for w in words)
