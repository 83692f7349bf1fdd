"""Findings for people and scripts: the JSON of /diagnosis and `diagnose
--json`, and the causal chains `gpu-exporter diagnose` prints (symptom ->
likely cause -> evidence -> fix, most severe first)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpu_exporter.diagnosis.table import SEVERITY_ORDER

# Evidence keys end in their unit; this is how each is shown to a person.
_GIB = 1024**3


def format_value(key: str, value: object) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, int | float):
        return str(value)
    v = float(value)
    if key.endswith("_seconds_per_second"):
        return f"{v:.2f} s/s"
    if key.endswith("_bytes_per_second"):
        return f"{v / 1e6:.1f} MB/s"
    if key.endswith("_ratio"):
        return f"{v * 100:.0f} %"
    if key.endswith("_bytes"):
        return f"{v / _GIB:.1f} GiB"
    if key.endswith("_hertz"):
        return f"{v / 1e6:.0f} MHz"
    if key.endswith("_celsius"):
        return f"{v:.0f} °C"
    if key.endswith("_watts"):
        return f"{v:.0f} W"
    return f"{v:g}"


def _label(key: str) -> str:
    for suffix in ("_seconds_per_second", "_bytes_per_second", "_ratio", "_bytes", "_hertz",
                   "_celsius", "_watts"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
            break
    return key.replace("_", " ")


def evidence_line(evidence: Mapping[str, object]) -> str:
    return ", ".join(f"{_label(k)} {format_value(k, v)}" for k, v in evidence.items())


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
