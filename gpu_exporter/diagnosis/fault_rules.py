"""The rules of the rows that judge what the exporter remembers of a GPU
(memory.py), registered on their rows as rules.py registers its own."""

from __future__ import annotations

import time

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.registry import Evidence, Trend, Verdict, rule
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.settings.thresholds import DiagnosisConfig


def _came_back(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    """A hardware fault of this life of the GPU that an earlier life had too
    (before a reboot, or before the GPU was lost and came back)."""
    past = trend.past
    if past is None:
        return Verdict(None)  # no memory of the GPU: nothing to judge
    pairs = past.came_back(cfg.hardware_xids)
    if not pairs:
        return Verdict(False)
    ev: Evidence = {
        "fault": ", ".join(dict.fromkeys(now.name for _, now in pairs)),
        "fault_first_seen": _utc(min(before.first for before, _ in pairs)),
        "fault_back_at": _utc(min(now.first for _, now in pairs)),
        "fault_lives": len({f.life for f in past.faults
                            if any(f.kind == now.kind and f.code == now.code
                                   for _, now in pairs)}),
    }
    return Verdict(True, ev, since=min(now.first for _, now in pairs))


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


rule(t.FAULT_CAME_BACK)(_came_back)
