"""Findings for people and scripts: the JSON of /diagnosis and `diagnose
--json`, and the causal chains `gpu-exporter diagnose` prints (symptom ->
likely cause -> evidence -> fix, most severe first)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpu_exporter.diagnosis.evidence import evidence_line
from gpu_exporter.diagnosis.table import SEVERITY_ORDER
from gpu_exporter.readings import GpuOwner
from gpu_exporter.safetext import terminal_safe


def owner_text(owner: Mapping[str, Any]) -> str:
    """``ml/train-a/trainer``, ``ml/infer/server (claim ml/gpus)`` or ``slurm
    job 4242``, from a finding's owner in its JSON form (not yet escaped for
    any destination)."""
    return GpuOwner(**{k: str(owner.get(k, "")) for k in
                       ("namespace", "pod", "container", "slurm_job_id", "claim",
                        "pod_uid")}).describe()


_COLORS = {"critical": "\033[1;31m", "warning": "\033[33m", "info": "\033[36m"}
_RESET = "\033[0m"


def render_text(findings: Iterable[Mapping[str, Any]], color: bool,
                drifts: Iterable[Mapping[str, Any]] = (), blind: str | None = None) -> str:
    """The findings for a person. ``blind``: why the GPUs could not be read,
    said first and instead of any "healthy"."""
    items = sorted(findings, key=lambda f: (SEVERITY_ORDER.get(str(f["severity"]), 99),
                                            str(f["gpu"]), str(f["symptom"])))
    drift_list = list(drifts)
    lines = []
    if blind is not None:
        lines.append(f"Could not see the GPUs: {terminal_safe(blind)}.")
        lines.append("")
    elif not items and not drift_list:
        return "No problems found: every GPU on this node looks healthy.\n"
    safe = terminal_safe
    for f in items:
        sev = str(f["severity"])
        head = f"{safe(sev.upper()):8s} GPU {safe(f['gpu'])} ({safe(f['uuid'])})"
        if color and sev in _COLORS:
            head = _COLORS[sev] + head + _RESET
        lines.append(f"{head}  {safe(f['symptom'])} -> {safe(f['cause'])}")
        lines.append(f"  {safe(f['summary'])}")
        owners = [owner_text(o) for o in f.get("owners") or ()]
        if owners:
            lines.append(f"  owner:    {safe(', '.join(owners))}")
        evidence = dict(f.get("evidence") or {})
        # A consequence this cause explains is listed beneath it, not as evidence.
        explained = {f"explains_{e['symptom']}_{e['cause']}": e
                     for e in f.get("explained") or ()}
        shown = {k: v for k, v in evidence.items() if k not in explained}
        if shown:
            lines.append(f"  evidence: {safe(evidence_line(shown))}")
        for key, e in explained.items():
            lines.append(f"  explains: {safe(e['symptom'])} -> {safe(e['cause'])}: "
                         f"{safe(evidence.get(key) or e['why'])}")
        lines.append(f"  fix:      {safe(f['fix'])}")
        lines.append(f"  runbook:  {safe(f['runbook'])}")
        lines.append("")
    if drift_list:
        lines.append("Drift from the node baseline:")
        for d in drift_list:
            lines.append(f"  GPU {safe(d['gpu'])} {safe(d['field'])}: expected "
                         f"{safe(d['expected'])}, found {safe(d['found'])}")
        lines.append("")
    return "\n".join(lines)


EXIT_WARNING = 1
EXIT_CRITICAL = 2
EXIT_UNREACHABLE = 3  # the exporter could not be asked
EXIT_BLIND = 4  # asked, but it could not see the GPUs: no verdict either way


def exit_status(findings: Iterable[Mapping[str, Any]], blind: str | None = None) -> int:
    """0 nothing found, 1 warnings (or notes), 2 something critical, 4 the
    GPUs could not be seen (whatever else was found)."""
    if blind is not None:
        return EXIT_BLIND
    severities = {str(f["severity"]) for f in findings}
    if "critical" in severities:
        return 2
    return 1 if severities else 0
