"""Findings for people and scripts: the JSON of /diagnosis and `diagnose
--json`, and the causal chains `gpu-exporter diagnose` prints (symptom ->
likely cause -> evidence -> fix, most severe first)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpu_exporter.diagnosis.evidence import evidence_line
from gpu_exporter.diagnosis.table import SEVERITY_ORDER

_COLORS = {"critical": "\033[1;31m", "warning": "\033[33m", "info": "\033[36m"}
_RESET = "\033[0m"


def render_text(findings: Iterable[Mapping[str, Any]], color: bool,
                drifts: Iterable[Mapping[str, Any]] = ()) -> str:
    items = sorted(findings, key=lambda f: (SEVERITY_ORDER[str(f["severity"])],
                                            int(f["gpu"]), str(f["symptom"])))
    drift_list = list(drifts)
    if not items and not drift_list:
        return "No problems found: every GPU on this node looks healthy.\n"
    lines = []
    for f in items:
        sev = str(f["severity"])
        head = f"{sev.upper():8s} GPU {f['gpu']} ({f['uuid']})"
        if color:
            head = _COLORS[sev] + head + _RESET
        lines.append(f"{head}  {f['symptom']} -> {f['cause']}")
        lines.append(f"  {f['summary']}")
        if f.get("evidence"):
            lines.append(f"  evidence: {evidence_line(f['evidence'])}")
        lines.append(f"  fix:      {f['fix']}")
        lines.append(f"  runbook:  {f['runbook']}")
        lines.append("")
    if drift_list:
        lines.append("Drift from the node baseline:")
        for d in drift_list:
            lines.append(f"  GPU {d['gpu']} {d['field']}: expected {d['expected']}, "
                         f"found {d['found']}")
        lines.append("")
    return "\n".join(lines)


def exit_status(findings: Iterable[Mapping[str, Any]]) -> int:
    """0 nothing found, 1 warnings (or notes), 2 something critical."""
    severities = {str(f["severity"]) for f in findings}
    if "critical" in severities:
        return 2
    return 1 if severities else 0
