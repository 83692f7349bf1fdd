"""The Helm chart (deploy/helm/gpu-exporter), checked by Helm's own engine:
helm-python-sdk embeds Helm's Go SDK (no helm binary), which lints the chart
strictly, checks values against values.schema.json and renders the templates
exactly as `helm install` would. Every rendering (the defaults and each option)
is validated against the Kubernetes schemas, and where the chart and the
kustomize manifests overlap (the DaemonSet, the scrape endpoint, the rules,
the dashboards) they are equal."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from gpu_exporter.cli import parse_settings
from tests.test_deploy import (
    CUSTOM,
    K8S_VERSIONS,
    assert_stays_on_sick_nodes,
    by_kind,
)

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "gpu-exporter"
RELEASE, NAMESPACE = "gpu-exporter", "gpu-exporter"
# The newest Kubernetes the schemas know, as Helm's lint takes it.
KUBE_VERSION = "v" + kubernetes_validate.latest_version()

_SECRET_KEY = {"name": "gpu-exporter-scrape", "key": "password"}
# Each option turned on, alone; "everything" turns them all on together.
OPTIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "serviceMonitor": {"serviceMonitor": {
        "enabled": True, "additionalLabels": {"release": "kube-prometheus-stack"},
        "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"],
                         "targetLabel": "node", "action": "replace"}],
        "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "gpu_process_.*",
                               "action": "drop"}]}},
    "podMonitor": {"service": {"enabled": False}, "podMonitor": {
        "enabled": True, "interval": "30s", "additionalLabels": {"release": "kps"}}},
    "prometheusRule": {"prometheusRule": {
        "enabled": True, "additionalLabels": {"release": "kube-prometheus-stack"}}},
    "dashboards": {"dashboards": {"enabled": True, "namespace": "monitoring"}},
    "webConfig-tls": {
        "webConfig": {"secretName": "gpu-exporter-web", "tls": True},
        "serviceMonitor": {"enabled": True, "scheme": "https",
                           "tlsConfig": {"ca": {"secret": {"name": "gpu-exporter-ca",
                                                           "key": "ca.crt"}},
                                         "serverName": "gpu-exporter"}}},
    "webConfig-auth": {
        "webConfig": {"secretName": "gpu-exporter-web", "tls": True, "authRequired": True},
        "podMonitor": {"enabled": True, "scheme": "https",
                       "basicAuth": {"username": {"name": "gpu-exporter-scrape",
                                                  "key": "user"},
                                     "password": _SECRET_KEY}}},
    "podResources-as-root": {"podResources": {"runAsRoot": True}},
    "podResources-off": {"podResources": {"enabled": False}},
    "hostNetwork": {"hostNetwork": True},
    "image-and-placement": {
        "image": {"repository": "registry.example.com/gpu-exporter", "tag": "0.1.0-rc1",
                  "digest": "sha256:" + "ab" * 32, "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "registry"}],
        "runtimeClassName": "nvidia", "priorityClassName": "gpu-monitoring",
        "nodeSelector": None, "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In",
                                       "values": ["true"]}]},
                {"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present",
                                       "operator": "Exists"}]}]}}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                         "effect": "NoSchedule"}]},
    "names-and-labels": {
        "nameOverride": "nvidia-gpu-exporter", "fullnameOverride": "gpu-exp",
        "namespaceOverride": "monitoring", "commonLabels": {"team": "ml-platform"},
        "podLabels": {"tier": "node"}, "podAnnotations": {"example.com/owner": "ml"},
        "daemonSetAnnotations": {"example.com/rollout": "slow"},
        "service": {"labels": {"extra": "yes"}, "annotations": {"a": "b"}}},
    "extra-args-env-volumes": {
        "extraArgs": ["--poll.interval=5s", "--no-collector.process_series"],
        "extraEnv": [{"name": "GPU_EXPORTER_LOG__LEVEL", "value": "debug"},
                     {"name": "NODE_NAME", "valueFrom": {"fieldRef": {
                         "fieldPath": "spec.nodeName"}}}],
        "extraVolumes": [{"name": "baseline", "configMap": {"name": "node-baseline"}}],
        "extraVolumeMounts": [{"name": "baseline", "mountPath": "/etc/gpu-exporter/baseline",
                               "readOnly": True}],
        "port": 9400,
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        "livenessProbe": {"periodSeconds": 60}},
}
OPTIONS["everything"] = {k: v for values in OPTIONS.values() for k, v in values.items()
                         if k != "service"}


def merged(*overrides: dict[str, Any]) -> dict[str, Any]:
    """The values one option hands to Helm (deep-merged, later wins)."""
    out: dict[str, Any] = {}
    for values in overrides:
        for key, value in values.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object Helm renders for ``values``, as `helm install` would."""
    rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def only(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def lint_problems(values: dict[str, Any], path: Path = CHART) -> list[str]:
    """What `helm lint --strict` (at the newest Kubernetes) reports as warnings
    or errors: under --strict a warning fails the lint too."""
    report = helm.lint(path, values, strict=True, kube_version=KUBE_VERSION, quiet=False)
    return [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2] + \
        list(report["errors"])


# --- Helm's lint and schema ------------------------------------------------------


def test_the_embedded_helm_is_helm_v4() -> None:
    assert helm.helm_sdk_version().startswith("v4."), helm.helm_sdk_version()


@pytest.mark.parametrize("option", OPTIONS)
def test_helm_lint_strict_passes(option: str) -> None:
    assert lint_problems(OPTIONS[option]) == []


def test_helm_lint_catches_a_broken_template(tmp_path: Path) -> None:
    """The lint above is not vacuous: a template that reads a value that does
    not exist fails strict lint, and so does a value of the wrong type."""
    broken = tmp_path / "gpu-exporter"
    shutil.copytree(CHART, broken)
    service = broken / "templates" / "service.yaml"
    service.write_text(service.read_text().replace(".Values.port", ".Values.prot.number"))
    assert lint_problems({}, broken)
    assert lint_problems({"port": "9835"})
    assert lint_problems({"tolerations": "all"})


@pytest.mark.parametrize("values", [
    {"serviceMonitor": {"enabeld": True}},          # a typo is refused, not ignored
    {"image": {"pullPolicy": "Sometimes"}},
    {"image": {"digest": "latest"}},
    {"port": 70000},
    {"extraArgs": "--poll.interval=5s"},
    {"serviceMonitor": {"interval": "15 seconds"}},
    {"podResources": {"hostPath": "relative/path"}},
], ids=lambda v: json.dumps(v))
def test_the_schema_refuses_wrong_values(chart: helm.Chart, values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


def test_every_value_has_a_schema_entry_and_a_default() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(props: dict[str, Any], vals: dict[str, Any], where: str) -> None:
        assert set(props) == set(vals), (where, set(props) ^ set(vals))
        for name, prop in props.items():
            assert prop.get("description"), f"{where}{name} has no description"
            if "properties" in prop:
                walk(prop["properties"], vals[name], f"{where}{name}.")

    walk(schema["properties"], values, "")


def test_the_readme_values_table_is_current() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "chart-readme.py"),
                             "--check"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    readme = (CHART / "README.md").read_text()
    assert "| `webConfig.secretName` |" in readme


# --- every rendering validates -----------------------------------------------------


@pytest.mark.parametrize("option", OPTIONS)
def test_every_rendered_object_validates(chart: helm.Chart, option: str) -> None:
    docs = render(chart, OPTIONS[option])
    assert {d["kind"] for d in docs} >= {"DaemonSet"}
    for doc in docs:
        if doc["kind"] in CUSTOM:
            CUSTOM[doc["kind"]].model_validate(doc)
            continue
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    pod = only(docs, "DaemonSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # The flags the chart writes are flags the exporter accepts.
    settings = parse_settings(container["args"])
    assert settings.web.listen_address == f":{container['ports'][0]['containerPort']}"


def test_each_option_renders_what_it_asks_for(chart: helm.Chart) -> None:
    kinds = {name: sorted(d["kind"] for d in render(chart, values))
             for name, values in OPTIONS.items()}
    assert kinds["defaults"] == ["DaemonSet", "Service"]
    assert kinds["serviceMonitor"] == ["DaemonSet", "Service", "ServiceMonitor"]
    assert kinds["podMonitor"] == ["DaemonSet", "PodMonitor"]
    assert kinds["prometheusRule"] == ["DaemonSet", "PrometheusRule", "Service"]
    assert kinds["dashboards"] == ["ConfigMap", "DaemonSet", "Service"]
    assert kinds["everything"] == ["ConfigMap", "DaemonSet", "PodMonitor", "PrometheusRule",
                                   "Service", "ServiceMonitor"]
    with pytest.raises(helm.HelmRenderError, match=r"needs service\.enabled"):
        render(chart, {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}})


# --- the same as the kustomize manifests where they overlap --------------------------


def test_the_default_daemonset_is_the_kustomize_one(chart: helm.Chart) -> None:
    """The pod the chart runs by default is the kustomize DaemonSet's pod, field
    for field (image, flags, probes, resources, security, volumes)."""
    chart_ds = only(render(chart, {}), "DaemonSet")
    kustomize_ds = by_kind("DaemonSet")
    assert chart_ds["spec"]["template"]["spec"] == kustomize_ds["spec"]["template"]["spec"]
    assert chart_ds["spec"]["updateStrategy"] == kustomize_ds["spec"]["updateStrategy"]
    # Its labels carry the kustomize ones' name: the ServiceMonitor's job label.
    assert chart_ds["metadata"]["labels"]["app.kubernetes.io/name"] == \
        kustomize_ds["metadata"]["labels"]["app.kubernetes.io/name"]


def test_the_scrape_endpoint_is_the_kustomize_one(chart: helm.Chart) -> None:
    docs = render(chart, merged(OPTIONS["serviceMonitor"], OPTIONS["podMonitor"],
                                {"service": {"enabled": True}}))
    kustomize = by_kind("ServiceMonitor")
    (kustomize_endpoint,) = kustomize["spec"]["endpoints"]
    monitor = only(docs, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    extra = OPTIONS["serviceMonitor"]["serviceMonitor"]
    assert endpoint == {**kustomize_endpoint,
                        "relabelings": kustomize_endpoint["relabelings"] + extra["relabelings"],
                        "metricRelabelings": extra["metricRelabelings"]}
    assert monitor["spec"]["jobLabel"] == kustomize["spec"]["jobLabel"]
    (pod_endpoint,) = only(docs, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert pod_endpoint == {**kustomize_endpoint, "interval": "30s"}
    # Both select the chart's pods and Service.
    ds = only(docs, "DaemonSet")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    service = only(docs, "Service")
    assert only(docs, "PodMonitor")["spec"]["selector"]["matchLabels"].items() <= \
        pod_labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "gpu-exporter"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_the_rules_are_the_kustomize_ones(chart: helm.Chart) -> None:
    rule = only(render(chart, OPTIONS["prometheusRule"]), "PrometheusRule")
    assert rule["spec"] == by_kind("PrometheusRule")["spec"]
    alerts_file = yaml.safe_load((ROOT / "alerts" / "gpu-exporter.rules.yml").read_text())
    assert rule["spec"] == alerts_file
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # Prometheus' templates in the annotations reach the object untouched by Helm's.
    annotations = [r["annotations"] for g in rule["spec"]["groups"] for r in g["rules"]
                   if "annotations" in r]
    assert any("{{ $labels.instance }}" in a["description"] for a in annotations)


def test_the_dashboards_are_the_kustomize_ones(chart: helm.Chart) -> None:
    configmap = only(render(chart, OPTIONS["dashboards"]), "ConfigMap")
    kustomize = by_kind("ConfigMap")
    assert configmap["data"] == kustomize["data"]
    assert configmap["data"].keys() == {p.name for p in (ROOT / "grafana" / "dashboards")
                                        .glob("*.json")}
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == kustomize["metadata"]["annotations"]
    assert configmap["metadata"]["namespace"] == "monitoring"
    for text in configmap["data"].values():
        assert json.loads(text)["uid"]


# --- what each option does to the pod ------------------------------------------------


def pod_of(chart: helm.Chart, option: str) -> dict[str, Any]:
    spec: dict[str, Any] = only(render(chart, OPTIONS[option]), "DaemonSet")["spec"][
        "template"]["spec"]
    return spec


@pytest.mark.parametrize("option", OPTIONS)
def test_every_rendering_is_locked_down(chart: helm.Chart, option: str) -> None:
    pod = pod_of(chart, option)
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False
    as_root = OPTIONS[option].get("podResources", {}).get("runAsRoot", False)
    for ctx in (pod["securityContext"], sc):
        assert ctx["runAsNonRoot"] is (not as_root)
        assert (ctx["runAsUser"] == 0) is as_root
    for mount in c["volumeMounts"]:
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        if "hostPath" in volume or "secret" in volume:
            assert mount["readOnly"] is True, mount


def test_the_default_pod_stays_on_tainted_nodes_at_node_critical_priority(
        chart: helm.Chart) -> None:
    assert_stays_on_sick_nodes(pod_of(chart, "defaults"))
    assert_stays_on_sick_nodes(pod_of(chart, "serviceMonitor"))


def test_the_web_config_comes_from_its_secret(chart: helm.Chart) -> None:
    pod = pod_of(chart, "webConfig-tls")
    (c,) = pod["containers"]
    mount = next(m for m in c["volumeMounts"] if m["name"] == "web-config")
    volume = next(v for v in pod["volumes"] if v["name"] == "web-config")
    assert volume["secret"]["secretName"] == "gpu-exporter-web"
    settings = parse_settings(c["args"])
    assert str(settings.web.config_file) == f"{mount['mountPath']}/web-config.yml"
    assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert c["readinessProbe"]["httpGet"] == {"path": "/-/ready", "port": "metrics",
                                              "scheme": "HTTPS"}
    # With basic auth or required client certificates the kubelet cannot pass.
    (auth,) = pod_of(chart, "webConfig-auth")["containers"]
    assert auth["livenessProbe"]["tcpSocket"] == {"port": "metrics"}
    assert "httpGet" not in auth["readinessProbe"]


def test_pod_resources_can_be_switched_off(chart: helm.Chart) -> None:
    pod = pod_of(chart, "podResources-off")
    (c,) = pod["containers"]
    assert parse_settings(c["args"]).kubernetes.pod_resources_socket == ""
    assert all(v["name"] != "pod-resources" for v in pod["volumes"])


def test_host_network_for_node_problem_detector(chart: helm.Chart) -> None:
    pod = pod_of(chart, "hostNetwork")
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "hostNetwork" not in pod_of(chart, "defaults")


def test_extra_args_env_and_volumes_reach_the_container(chart: helm.Chart) -> None:
    pod = pod_of(chart, "extra-args-env-volumes")
    (c,) = pod["containers"]
    settings = parse_settings(c["args"])
    assert settings.poll.interval == 5.0
    assert settings.web.listen_address == ":9400"
    assert c["ports"][0]["containerPort"] == 9400
    assert [e["name"] for e in c["env"]] == ["GPU_EXPORTER_LOG__LEVEL", "NODE_NAME"]
    assert {"name": "baseline", "mountPath": "/etc/gpu-exporter/baseline",
            "readOnly": True} in c["volumeMounts"]
    assert c["livenessProbe"]["periodSeconds"] == 60


def test_image_and_placement_options(chart: helm.Chart) -> None:
    pod = pod_of(chart, "image-and-placement")
    (c,) = pod["containers"]
    assert c["image"] == ("registry.example.com/gpu-exporter:0.1.0-rc1@sha256:" + "ab" * 32)
    assert c["imagePullPolicy"] == "Always"
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["priorityClassName"] == "gpu-monitoring"
    assert "nodeSelector" not in pod
    assert pod["affinity"]["nodeAffinity"]
    assert pod["imagePullSecrets"] == [{"name": "registry"}]


def test_name_and_label_overrides(chart: helm.Chart) -> None:
    docs = render(chart, OPTIONS["names-and-labels"])
    for doc in docs:
        assert doc["metadata"]["name"] == "gpu-exp"
        assert doc["metadata"]["namespace"] == "monitoring"
        assert doc["metadata"]["labels"]["team"] == "ml-platform"
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "nvidia-gpu-exporter"
    template = only(docs, "DaemonSet")["spec"]["template"]["metadata"]
    assert template["labels"]["tier"] == "node"
    assert template["annotations"] == {"example.com/owner": "ml"}
