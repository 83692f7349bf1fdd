"""Metrics of the diagnosis: the symptom -> cause table as live signals."""

from __future__ import annotations

from gpu_exporter.facts.catalog_types import GPU, Metric, declared
from gpu_exporter.facts.catalog_types import metric_spec as _m

DIAGNOSIS_ACTIVE = _m(
    "gpu_diagnosis_active", "gauge",
    "1 while this row of the symptom -> cause table holds for the GPU (it held for the "
    "whole diagnosis window) and it is a root cause; the rows that do not hold are "
    "exported at 0 with --metrics.detail only.",
    (*GPU, "symptom", "cause"), "diagnosis")

DIAGNOSIS_NOT_JUDGED = _m(
    "gpu_diagnosis_not_judged", "gauge",
    "1 for each row of the symptom -> cause table the exporter could not judge on this GPU "
    "this poll for a reason a working exporter should close (a reader switched off or "
    "failing, permission refused, the GPU settling or lost, a reading that failed): no "
    "finding there means unknown, not healthy; the rows it counts are those that make "
    "`gpu-exporter diagnose` say \"checked only in part\" (exit 5). Absent for the rows it "
    "judges, for a check the board or driver does not offer (e.g. utilization_inflated "
    "without GPM before Hopper, the recovery action before R565) and for a row whose "
    "subject is absent (no fan, no process): /diagnosis lists those as not_available and "
    "nothing_to_check.",
    (*GPU, "symptom", "cause"), "diagnosis")

DIAGNOSIS_INPUT_MISSING = _m(
    "gpu_diagnosis_input_missing", "gauge",
    "1 for each collector (input) whose readings the diagnosis reads but did not get this poll "
    "(switched off, or failed before reading): the rows that need them are not judged. "
    "Absent while every input was read.", ("input",), "diagnosis")

BASELINE_DRIFT = _m(
    "gpu_baseline_drift", "gauge",
    "1 when this fact of the GPU differs from the node baseline file (--baseline.file), "
    "else 0.", (*GPU, "field"), "baseline")

METRICS: tuple[Metric, ...] = declared(globals())
