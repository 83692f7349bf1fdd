"""The deployment files as the deploy tests read them: the Dockerfile's
instructions, the systemd unit's entries, the Kubernetes manifests (with
structural models for the kinds the schemas do not know), the compose stack
and the release workflow. One reader per file, shared by the deploy and Helm
chart tests."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any, Literal

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpu_exporter.settings.config import DEFAULT_LISTEN_ADDRESS
from gpu_exporter.settings.config_types import parse_listen_address

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
COMPOSE = DEPLOY / "compose"
UNIT = DEPLOY / "systemd" / "gpu-exporter.service"
DEFAULT_PORT = parse_listen_address(DEFAULT_LISTEN_ADDRESS)[1]
# The oldest Kubernetes with recursiveReadOnly mounts (Chart.yaml's kubeVersion),
# and the newest the schemas know.
K8S_VERSIONS = ("1.30", kubernetes_validate.latest_version())


def venv_tool(name: str) -> str:
    """A tool installed by the test extra (next to this interpreter)."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found: `pip install -e '.[test]'` installs it")
    return found



def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    instructions = dockerfile()
    last_from = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    return instructions[last_from:]


RELEASE_WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def release_workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(RELEASE_WORKFLOW.read_text())
    return loaded


def release_image() -> str:
    """The image repository the release workflow pushes to."""
    image: str = release_workflow()["env"]["IMAGE"]
    return image


def release_steps() -> dict[str, dict[str, Any]]:
    """The image job's steps by action (owner/name, without the version)."""
    (job,) = release_workflow()["jobs"].values()
    return {s["uses"].split("@")[0]: s for s in job["steps"] if "uses" in s}



def unit_entries(path: Path = UNIT) -> list[tuple[str, str, str]]:
    """(section, key, value) in order; keys may repeat (DeviceAllow=)."""
    out: list[tuple[str, str, str]] = []
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def unit_values(key: str) -> list[str]:
    return [v for s, k, v in unit_entries() if s == "Service" and k == key]



class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Meta(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class _Relabel(_Strict):
    sourceLabels: list[str] | None = None
    targetLabel: str | None = None
    action: str = "replace"
    regex: str | None = None
    replacement: str | None = None
    separator: str | None = None


class _Endpoint(_Strict):
    port: str
    path: str = "/metrics"
    scheme: Literal["http", "https"] | None = None
    interval: str | None = Field(None, pattern=r"^(\d+(ms|s|m|h))+$")
    scrapeTimeout: str | None = Field(None, pattern=r"^(\d+(ms|s|m|h))+$")
    relabelings: list[_Relabel] = Field(default_factory=list)
    metricRelabelings: list[_Relabel] = Field(default_factory=list)
    honorLabels: bool | None = None
    tlsConfig: dict[str, Any] | None = None
    basicAuth: dict[str, Any] | None = None


class _LabelSelector(_Strict):
    matchLabels: dict[str, str]


class _ServiceMonitorSpec(_Strict):
    jobLabel: str | None = None
    selector: _LabelSelector
    namespaceSelector: dict[str, list[str]] | None = None
    endpoints: list[_Endpoint] = Field(min_length=1)


class ServiceMonitor(_Strict):
    """monitoring.coreos.com/v1 ServiceMonitor: the fields this repository uses,
    as the Prometheus Operator's CRD defines them."""

    apiVersion: Literal["monitoring.coreos.com/v1"]
    kind: Literal["ServiceMonitor"]
    metadata: _Meta
    spec: _ServiceMonitorSpec


class _PodMonitorSpec(_Strict):
    jobLabel: str | None = None
    selector: _LabelSelector
    namespaceSelector: dict[str, list[str]] | None = None
    podMetricsEndpoints: list[_Endpoint] = Field(min_length=1)


class PodMonitor(_Strict):
    """monitoring.coreos.com/v1 PodMonitor (the Helm chart's option)."""

    apiVersion: Literal["monitoring.coreos.com/v1"]
    kind: Literal["PodMonitor"]
    metadata: _Meta
    spec: _PodMonitorSpec


class _Rule(_Strict):
    alert: str | None = None
    record: str | None = None
    expr: str | int = Field(min_length=1)
    for_: str | None = Field(None, alias="for", pattern=r"^(\d+(ms|s|m|h|d|w|y))+$")
    keep_firing_for: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_kind(self) -> _Rule:
        if (self.alert is None) == (self.record is None):
            raise ValueError("a rule has exactly one of alert and record")
        if self.record is not None and (self.for_ or self.annotations):
            raise ValueError("a recording rule has no for: and no annotations")
        return self


class _Group(_Strict):
    name: str
    interval: str | None = None
    limit: int | None = None
    rules: list[_Rule]


class _PrometheusRuleSpec(_Strict):
    groups: list[_Group]


class PrometheusRule(_Strict):
    apiVersion: Literal["monitoring.coreos.com/v1"]
    kind: Literal["PrometheusRule"]
    metadata: _Meta
    spec: _PrometheusRuleSpec


class Kustomization(_Strict):
    apiVersion: Literal["kustomize.config.k8s.io/v1beta1"]
    kind: Literal["Kustomization"]
    namespace: str | None = None
    resources: list[str]
    images: list[dict[str, str]] = Field(default_factory=list)
    labels: list[dict[str, Any]] = Field(default_factory=list)


# Kinds without a schema in kubernetes-validate (custom resources, kustomize's
# own file): checked structurally with the models above.
CUSTOM: dict[str, type[BaseModel]] = {"ServiceMonitor": ServiceMonitor,
                                      "PodMonitor": PodMonitor,
                                      "PrometheusRule": PrometheusRule,
                                      "Kustomization": Kustomization}


def manifests() -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")) + sorted(K8S.glob("*.yml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path, doc))
    return out


def by_kind(kind: str) -> dict[str, Any]:
    (doc,) = [d for _, d in manifests() if d["kind"] == kind]
    return doc


def validate_k8s(doc: dict[str, Any]) -> None:
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(doc, version, strict=True)


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = by_kind("DaemonSet")["spec"]["template"]["spec"]
    return spec


def container() -> dict[str, Any]:
    (only,) = pod_spec()["containers"]
    result: dict[str, Any] = only
    return result


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    """Whether a pod with ``tolerations`` tolerates ``taint``, by the
    kubelet's and scheduler's rule (ToleratesTaint in k8s.io/api core/v1): an
    empty effect matches every effect, Exists with an empty key every key."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        if t.get("operator", "Equal") == "Exists":
            return True
        if t.get("operator", "Equal") == "Equal" and t.get("value", "") == taint.get("value", ""):
            return True
    return False


# Taints a sick GPU node gets: the scheduler's own, the GPU Operator's, and
# the ones health systems set from findings (NVSentinel, node-problem-detector
# with a taint controller, an operator by hand).
SICK_NODE_TAINTS = (
    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu-health", "value": "quarantined", "effect": "NoExecute"},
    {"key": "example.com/gpu-hardware-fault", "value": "true", "effect": "NoSchedule"},
    {"key": "anything", "value": "at-all", "effect": "PreferNoSchedule"},
)


def assert_stays_on_sick_nodes(pod: dict[str, Any]) -> None:
    """Every taint is tolerated and the pod runs at system-node-critical:
    a tainted, quarantined GPU node keeps its exporter."""
    for taint in SICK_NODE_TAINTS:
        assert tolerates(pod["tolerations"], taint), taint
    assert pod["priorityClassName"] == "system-node-critical"


def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    return doc

