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
import os
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

from gpu_exporter.attribution.pod_cpu import checkpoint_path
from gpu_exporter.cli import parse_settings
from tests.deploy_files import (
    CUSTOM,
    K8S_VERSIONS,
    assert_stays_on_sick_nodes,
    by_kind,
    release_image,
)

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpu-exporter"
STATE_DIR = "/var/lib/gpu-exporter"
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
    "podResources-non-root": {"podResources": {"runAsRoot": False}},
    "podResources-off": {"podResources": {"enabled": False}},
    "deviceCheckpoint": {"podResources": {"deviceCheckpoint": True,
                                          "hostPath": "/var/lib/k0s/kubelet/pod-resources"}},
    "kernelLog": {"kernelLog": {"enabled": True}},
    "kernelLog-unprivileged": {"kernelLog": {"enabled": True, "privileged": False}},
    "privileged": {"securityContext": {"privileged": True}},
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
# Everything but the PodMonitor: with the ServiceMonitor it fails to render.
OPTIONS["everything"] = {k: v for values in OPTIONS.values() for k, v in values.items()
                         if k not in ("service", "podMonitor")}


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
    {"kernelLog": {"enabled": "true"}},
    {"kernelLog": {"device": "/dev/kmsg"}},
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


def api_server_refusals(pod: dict[str, Any]) -> list[str]:
    """What the API server (ValidateSecurityContext, validateVolumeMounts in
    k8s.io/kubernetes pkg/apis/core/validation) and the kubelet (its
    runAsNonRoot check) refuse that the schemas cannot see: rules across fields."""
    out = []
    for c in pod["containers"]:
        sc = c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is False:
            if sc.get("privileged") is True:
                out.append("allowPrivilegeEscalation false and privileged true")
            if "CAP_SYS_ADMIN" in sc.get("capabilities", {}).get("add", []):
                out.append("allowPrivilegeEscalation false and capabilities.add CAP_SYS_ADMIN")
        user = {**pod.get("securityContext", {}), **sc}
        if user.get("runAsNonRoot") is True and user.get("runAsUser") == 0:
            out.append("runAsNonRoot with runAsUser 0")
        for mount in c.get("volumeMounts", []):
            if mount.get("recursiveReadOnly", "Disabled") != "Disabled" and (
                    mount.get("readOnly") is not True or mount.get("mountPropagation")):
                out.append(f"{mount['name']}: recursiveReadOnly needs readOnly, no propagation")
    return out


def test_the_api_server_rules_are_checked() -> None:
    """The check below is not vacuous: the pod the chart once rendered for
    securityContext.privileged=true is refused."""
    pod = {"securityContext": {}, "containers": [{"securityContext": {
        "privileged": True, "allowPrivilegeEscalation": False}}]}
    assert api_server_refusals(pod) == ["allowPrivilegeEscalation false and privileged true"]
    pod = {"securityContext": {"runAsNonRoot": True}, "containers": [{
        "securityContext": {"runAsUser": 0},
        "volumeMounts": [{"name": "sys", "mountPath": "/s", "recursiveReadOnly": "Enabled"}]}]}
    assert len(api_server_refusals(pod)) == 2


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
    assert api_server_refusals(pod) == []
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
    assert kinds["everything"] == ["ConfigMap", "DaemonSet", "PrometheusRule", "Service",
                                   "ServiceMonitor"]
    with pytest.raises(helm.HelmRenderError, match=r"needs service\.enabled"):
        render(chart, {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}})


def test_a_service_monitor_and_a_pod_monitor_together_fail(chart: helm.Chart) -> None:
    """Both would have Prometheus scrape every node twice (two series of
    everything, every sum doubled): the chart refuses to render, and says why."""
    both = merged(OPTIONS["serviceMonitor"], OPTIONS["podMonitor"],
                  {"service": {"enabled": True}})
    with pytest.raises(helm.HelmRenderError,
                       match=r"serviceMonitor\.enabled and podMonitor\.enabled: choose one"):
        render(chart, both)
    # Each alone renders.
    assert [d["kind"] for d in render(chart, OPTIONS["podMonitor"])].count("PodMonitor") == 1


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
    docs = render(chart, OPTIONS["serviceMonitor"])
    pod_docs = render(chart, OPTIONS["podMonitor"])
    kustomize = by_kind("ServiceMonitor")
    (kustomize_endpoint,) = kustomize["spec"]["endpoints"]
    monitor = only(docs, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    extra = OPTIONS["serviceMonitor"]["serviceMonitor"]
    assert endpoint == {**kustomize_endpoint,
                        "relabelings": kustomize_endpoint["relabelings"] + extra["relabelings"],
                        "metricRelabelings": extra["metricRelabelings"]}
    assert monitor["spec"]["jobLabel"] == kustomize["spec"]["jobLabel"]
    (pod_endpoint,) = only(pod_docs, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert pod_endpoint == {**kustomize_endpoint, "interval": "30s"}
    # Both select the chart's pods and Service.
    ds = only(docs, "DaemonSet")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert only(pod_docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"] == pod_labels
    service = only(docs, "Service")
    assert only(pod_docs, "PodMonitor")["spec"]["selector"]["matchLabels"].items() <= \
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


def runs_as_root(values: dict[str, Any]) -> bool:
    """The chart's rule: user 0 for the root-only PodResources socket, when
    that is read and podResources.runAsRoot (the default) holds."""
    pod_resources = {"enabled": True, "runAsRoot": True, **values.get("podResources", {})}
    return bool(pod_resources["enabled"] and pod_resources["runAsRoot"])


def privileged(values: dict[str, Any]) -> bool:
    kernel_log = {"enabled": False, "privileged": True, **values.get("kernelLog", {})}
    return bool(values.get("securityContext", {}).get("privileged")
                or (kernel_log["enabled"] and kernel_log["privileged"]))


@pytest.mark.parametrize("option", OPTIONS)
def test_every_rendering_is_locked_down(chart: helm.Chart, option: str) -> None:
    """No capability but CAP_SYSLOG for the kernel log, no privilege unless
    asked for, a read-only root and host mounts; user 0 only for the socket."""
    values = OPTIONS[option]
    pod = pod_of(chart, option)
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    kernel_log = values.get("kernelLog", {}).get("enabled", False)
    assert sc["capabilities"] == {"drop": ["ALL"], **({"add": ["SYSLOG"]} if kernel_log else {})}
    if privileged(values):
        assert sc["privileged"] is True and "allowPrivilegeEscalation" not in sc
    else:
        assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert pod["automountServiceAccountToken"] is False
    as_root = runs_as_root(values)
    for ctx in (pod["securityContext"], sc):
        assert ctx["runAsNonRoot"] is (not as_root)
        assert ctx["runAsUser"] == (0 if as_root else 10001)
        assert ctx["runAsGroup"] == 10001
        assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    for mount in c["volumeMounts"]:
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        if mount["mountPath"] == STATE_DIR:
            # The one place it writes: its fault memory, its own directory.
            assert volume["hostPath"]["type"] == "DirectoryOrCreate", volume
            assert "--path.state-file=/var/lib/gpu-exporter/state.json" in c["args"]
        elif "hostPath" in volume or "secret" in volume:
            assert mount["readOnly"] is True, mount


def test_the_default_pod_runs_as_user_0_with_nothing_else(chart: helm.Chart) -> None:
    """The default install names the pod of every GPU: user 0 connects to the
    kubelet's root-only socket; every capability is dropped, so user 0 reads
    no file it does not own or that is not readable by all."""
    pod = pod_of(chart, "defaults")
    (c,) = pod["containers"]
    assert c["securityContext"]["runAsUser"] == pod["securityContext"]["runAsUser"] == 0
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["securityContext"]["privileged"] is False
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert parse_settings(c["args"]).kubernetes.pod_resources_socket == \
        "/var/lib/kubelet/pod-resources/kubelet.sock"
    # The documented ways back to user 10001.
    for option in ("podResources-non-root", "podResources-off"):
        other = pod_of(chart, option)
        (oc,) = other["containers"]
        assert oc["securityContext"]["runAsUser"] == other["securityContext"]["runAsUser"] \
            == 10001
        assert oc["securityContext"]["runAsNonRoot"] is True
    (non_root,) = pod_of(chart, "podResources-non-root")["containers"]
    assert parse_settings(non_root["args"]).kubernetes.pod_resources_socket  # still asked


def mounts_of(pod: dict[str, Any]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """mountPath -> (the mount, its volume)."""
    (c,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {m["mountPath"]: (m, volumes[m["name"]]) for m in c["volumeMounts"]}


@pytest.mark.parametrize("option", OPTIONS)
def test_the_hosts_proc_and_sys_are_read_where_the_exporter_looks(
        chart: helm.Chart, option: str) -> None:
    """The exporter reads PCI link state under --path.sysfs/bus/pci and the
    pods' cgroups under --path.sysfs/fs/cgroup: the host's /sys is mounted
    there (the container's own /sys/fs/cgroup is its own subtree only), and
    the host's /proc at --path.procfs; read-only, recursively where the
    runtime can (their submounts belong to user 0)."""
    pod = pod_of(chart, option)
    (c,) = pod["containers"]
    settings = parse_settings(c["args"])
    mounts = mounts_of(pod)
    for path, host in ((settings.path.sysfs, "/sys"), (settings.path.procfs, "/proc")):
        mount, volume = mounts[str(path)]
        assert volume["hostPath"] == {"path": host, "type": "Directory"}
        assert mount["readOnly"] is True
        assert mount["recursiveReadOnly"] == "IfPossible"
        assert "mountPropagation" not in mount
    assert str(settings.path.sysfs) == "/host/sys"


def test_the_kernel_log_option_mounts_dev_kmsg_with_what_opening_it_needs(
        chart: helm.Chart) -> None:
    (default,) = pod_of(chart, "defaults")["containers"]
    assert parse_settings(default["args"]).path.kmsg == ""  # off, said as such
    assert "/dev/kmsg" not in mounts_of(pod_of(chart, "defaults"))
    for option, is_privileged in (("kernelLog", True), ("kernelLog-unprivileged", False)):
        pod = pod_of(chart, option)
        (c,) = pod["containers"]
        path = parse_settings(c["args"]).path.kmsg
        mount, volume = mounts_of(pod)[path]
        assert volume["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
        assert mount["readOnly"] is True
        # kernel.dmesg_restrict=1: CAP_SYSLOG (devkmsg_open, check_syslog_permissions).
        assert c["securityContext"]["capabilities"]["add"] == ["SYSLOG"]
        # A hostPath device is not in the device cgroup; privileged puts every device there.
        assert c["securityContext"]["privileged"] is is_privileged
        assert ("allowPrivilegeEscalation" in c["securityContext"]) is not is_privileged


def test_privileged_renders_a_pod_the_api_server_accepts(chart: helm.Chart) -> None:
    (c,) = pod_of(chart, "privileged")["containers"]
    assert c["securityContext"]["privileged"] is True
    assert "allowPrivilegeEscalation" not in c["securityContext"]
    assert api_server_refusals(pod_of(chart, "privileged")) == []


def test_the_default_image_is_the_one_the_release_workflow_pushes(chart: helm.Chart) -> None:
    (c,) = pod_of(chart, "defaults")["containers"]
    chart_yaml = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert c["image"] == f"{release_image()}:{chart_yaml['appVersion']}"


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


def test_the_device_checkpoint_is_mounted_only_when_asked_where_the_exporter_reads_it(
        chart: helm.Chart) -> None:
    """Off by default (its folder holds the kubelet's registration socket);
    asked for, the kubelet's device-plugins folder beside the pod-resources
    one, read-only, where checkpoint_path finds it from the socket's path."""
    default = pod_of(chart, "defaults")
    assert all(v["name"] != "device-plugins" for v in default["volumes"])
    pod = pod_of(chart, "deviceCheckpoint")
    (c,) = pod["containers"]
    socket = parse_settings(c["args"]).kubernetes.pod_resources_socket
    checkpoint = checkpoint_path(socket)
    mount, volume = mounts_of(pod)[os.path.dirname(checkpoint)]
    assert mount["readOnly"] is True
    assert volume["hostPath"] == {"path": "/var/lib/k0s/kubelet/device-plugins",
                                  "type": "Directory"}
    assert api_server_refusals(pod) == []


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
