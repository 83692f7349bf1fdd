"""What the diagnosis reports: a root cause on one GPU, the rows of that
GPU it explains (precedence.py), and the rows of other GPUs it explains
(jobs.py: a lost GPU's peers waiting on it, a node's GPUs idle beside a
fault of the node)."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_exporter.diagnosis.precedence import Evidence, Explained
from gpu_exporter.diagnosis.table import Row
from gpu_exporter.poll.readings import GpuOwner


@dataclass(frozen=True)
class Consequence:
    """What a cause does to a GPU of its job or its node: a row on that GPU
    (``row``), or a rank seen waiting with no row of its own (``row`` None)."""

    gpu: int
    row: Row | None
    evidence: Evidence
    why: str
    # The MIG instance of that GPU it is about (None: the whole GPU).
    gpu_instance: int | None = None

    def as_dict(self) -> dict[str, object]:
        what = ({"symptom": self.row.symptom, "cause": self.row.cause} if self.row is not None
                else {"symptom": "rank_waiting", "cause": "waits_on_cause"})
        place = {} if self.gpu_instance is None else {"gpu_instance": str(self.gpu_instance)}
        return {"gpu": str(self.gpu), **place, **what, "evidence": dict(self.evidence),
                "why": self.why}


@dataclass(frozen=True)
class Finding:
    """A root cause on one GPU, with the consequences it explains."""

    gpu: int
    uuid: str
    row: Row
    evidence: dict[str, float | str]
    since: float  # unix time the row turned on
    explains: tuple[Explained, ...] = ()
    # Whose the GPU (or instance) is: the containers it is allocated to, its
    # Slurm jobs. For an Xid whose kernel log line names the process, that
    # process's owner only where it is known (the GPU's other tenants did
    # not raise it).
    owners: tuple[GpuOwner, ...] = ()
    # The MIG instance the finding is about (None: the whole GPU).
    gpu_instance: int | None = None
    # The rows on this and other GPUs (of its job or its node) this cause
    # explains: reported here, not as findings of their own.
    consequences: tuple[Consequence, ...] = ()

    def as_dict(self, runbook_base: str = "docs/runbook.md") -> dict[str, object]:
        """The chain for /diagnosis and ``diagnose --json``: symptom <- cause <-
        evidence; ``explained`` lists the rows whose signals this cause
        produces (each with its own evidence and why), and the evidence holds
        one ``explains_<cause>`` line per such row for readers of evidence only;
        ``consequences`` the rows of other GPUs (or the rows of this one only a
        fault across GPUs explains) it produces; ``owners`` names the pods'
        containers (namespace, pod, container) or the Slurm jobs the GPU
        belongs to, where known; ``gpu_instance`` the MIG instance a finding
        about one is about."""
        place = {} if self.gpu_instance is None else {"gpu_instance": str(self.gpu_instance)}
        return {"gpu": str(self.gpu), **place, "uuid": self.uuid, "symptom": self.row.symptom,
                "cause": self.row.cause, "severity": self.row.severity,
                "summary": self.row.summary, "evidence": dict(self.evidence),
                "explained": [{"symptom": e.row.symptom, "cause": e.row.cause,
                               "evidence": dict(e.evidence), "why": e.by.why}
                              for e in self.explains],
                "consequences": [c.as_dict() for c in self.consequences],
                "owners": [o.as_dict() for o in self.owners],
                "fix": self.row.fix, "runbook": f"{runbook_base}#{self.row.anchor}",
                "since": self.since}
