"""The rules' settings (``alerts/config.yaml``), validated.

The generators run from a source checkout (the file is found in the current
directory) or from an installed package (``--config FILE``, or the defaults
below when there is no file): nothing is looked up next to the code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, ValidationError

from gpu_exporter.diagnosis.table import Severity
from gpu_exporter.settings import safefile, sections
from gpu_exporter.settings.config_types import parse_duration
from gpu_exporter.settings.thresholds import DiagnosisConfig

# A duration read as the exporter's settings read one ("1m30s", 500ms, 2).
Duration = Annotated[float, BeforeValidator(parse_duration)]

# Where a source checkout keeps it, relative to the directory the generator runs in.
CONFIG_PATH = Path("alerts/config.yaml")


class AlertConfigError(Exception):
    """alerts/config.yaml is missing or wrong (one line for the operator)."""


class _Strict(BaseModel):
    # Arbitrary types: the exporter's own DiagnosisConfig (a section, below).
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              arbitrary_types_allowed=True)


def _diagnosis(value: Any) -> DiagnosisConfig:
    """``diagnosis:`` read by the exporters' own section, with its checks."""
    try:
        return DiagnosisConfig.model_validate(value)
    except sections.ValidationError as exc:
        loc, problem = safefile.validation_problem(exc)
        raise ValueError(f"{safefile.dotted(loc)}: {problem}" if loc else problem) from None


# The thresholds as the exporters read them (their config's ``diagnosis:``).
Diagnosis = Annotated[DiagnosisConfig, BeforeValidator(_diagnosis),
                      PlainSerializer(lambda d: d.model_dump())]


class DiagnosisFor(_Strict):
    critical: Duration = 60.0
    warning: Duration = 600.0
    info: Duration = 1800.0

    def of(self, severity: Severity) -> float:
        return float(getattr(self, severity))


class ExporterSettings(_Strict):
    down_for: Duration = 180.0
    nvml_down_for: Duration = 180.0
    collector_failing_for: Duration = 600.0
    stale_poll_seconds: float = Field(60.0, gt=0)
    stale_for: Duration = 300.0


class Straggler(_Strict):
    below_ratio: float = Field(0.5, gt=0, lt=1)
    siblings_busy: float = Field(0.7, gt=0, le=1)
    for_: Duration = Field(900.0, alias="for")


# A Kubernetes kind (CamelCase, letters and digits): it is written into a
# PromQL regular expression, so nothing else may reach it.
KindName = Annotated[str, Field(pattern=r"^[A-Z][A-Za-z0-9]{0,62}$")]


class JobStraggler(_Strict):
    """A node of a job spread over nodes whose GPUs work far less than the
    job's median node: far below is more than ``mad_multiplier`` times the
    job's median absolute deviation, and at least ``min_gap`` (a balanced job's
    deviation is near 0, and any wobble would be "far" by it alone)."""

    # Fewer nodes have no median to stand out from (of two, neither is odd).
    min_nodes: int = Field(3, ge=3)
    mad_multiplier: float = Field(3.0, gt=0)
    min_gap: float = Field(0.2, gt=0, lt=1)
    # The job's median node works above this: a job that waits as a whole
    # (checkpointing, starting, idle) has no straggler.
    job_busy: float = Field(0.5, gt=0, le=1)
    # A job of pods over nodes is one owner where kube-state-metrics names
    # the same controller of one of these kinds (kube_pod_owner) for each of
    # its pods: a batch Job (an indexed Job, the Jobs JobSet and Kubeflow
    # Trainer's TrainJob make, Volcano's) or a Kubeflow training operator's
    # job. A Deployment's or StatefulSet's replicas are no job: each serves
    # on its own, and one slower than the others straggles for no one.
    pod_job_kinds: tuple[KindName, ...] = Field(
        default=("Job", "PyTorchJob", "MPIJob", "TFJob", "JAXJob", "XGBoostJob", "PaddleJob"),
        min_length=1)
    for_: Duration = Field(600.0, alias="for")


class DriverDrift(_Strict):
    for_: Duration = Field(3600.0, alias="for")


class GpuCount(_Strict):
    window: Duration = 3600.0
    for_: Duration = Field(300.0, alias="for")


class Temperature(_Strict):
    margin_celsius: float = Field(5.0, ge=0)
    for_: Duration = Field(900.0, alias="for")


class MemoryLeak(_Strict):
    range: Duration = 10800.0
    min_bytes_per_hour: float = Field(1024.0**3, gt=0)
    horizon: Duration = 21600.0
    for_: Duration = Field(3600.0, alias="for")


class FleetSettings(_Strict):
    idle_utilization: float = Field(0.1, ge=0, le=1)
    straggler: Straggler = Straggler()
    job_straggler: JobStraggler = JobStraggler()
    driver_drift: DriverDrift = DriverDrift()
    gpu_count: GpuCount = GpuCount()
    temperature: Temperature = Temperature()
    memory_leak: MemoryLeak = MemoryLeak()


class PrometheusRuleSettings(_Strict):
    name: str = "gpu-exporter"
    labels: dict[str, str] = Field(default_factory=dict)


class AlertConfig(_Strict):
    selector: str = 'job="gpu-exporter"'
    # The label that tells clusters apart (an external label of each cluster's
    # Prometheus, or a target label): every aggregation keeps it.
    cluster_label: str = Field("cluster", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    runbook_url_base: str = "https://gpu-exporter.example.com"
    dashboard_url_base: str = "https://grafana.example.com"
    node_dashboard_uid: str = "gpu-node"
    fleet_dashboard_uid: str = "gpu-fleet"
    # The thresholds the exporters run with (their config's ``diagnosis:``):
    # alert prose and dashboard colours quote them.
    diagnosis: Diagnosis = DiagnosisConfig()
    diagnosis_for: DiagnosisFor = DiagnosisFor()
    # Keyed by alert name, or for a table row's alert by the row's key
    # (``symptom/cause``), so a renamed row fails here rather than silently.
    for_overrides: dict[str, Duration] = Field(default_factory=dict)
    severity_overrides: dict[str, Severity] = Field(default_factory=dict)
    exporter: ExporterSettings = ExporterSettings()
    fleet: FleetSettings = FleetSettings()
    test_build_for: Duration = 3.0
    prometheus_rule: PrometheusRuleSettings = PrometheusRuleSettings()


def load_config(path: Path | None = None) -> AlertConfig:
    """The settings in ``path``; without one, those in ./alerts/config.yaml, or
    the defaults where there is no such file."""
    if path is None:
        if not CONFIG_PATH.exists():
            return AlertConfig()
        path = CONFIG_PATH
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise AlertConfigError(f"{path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise AlertConfigError(f"{path}: not valid YAML: {problem}{where}") from None
    if not isinstance(data, dict):
        raise AlertConfigError(f"{path}: expected a mapping")
    try:
        return AlertConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise AlertConfigError(f"{path}: {where}: {err['msg']}") from None
