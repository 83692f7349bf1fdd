"""The Kubernetes manifests, checked against Kubernetes' own schemas, and one
rule across every way to run the exporter: nothing holds a capability or a
privilege by default, and only the Kubernetes pod runs as user 0 (the
kubelet's PodResources socket admits root only)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from gpu_exporter.cli import parse_settings
from gpu_exporter.settings.config_types import parse_listen_address
from tests.deploy_files import (
    CUSTOM,
    DEFAULT_PORT,
    DEPLOY,
    K8S,
    ROOT,
    SICK_NODE_TAINTS,
    Kustomization,
    PrometheusRule,
    ServiceMonitor,
    assert_stays_on_sick_nodes,
    by_kind,
    compose,
    container,
    final_stage,
    manifests,
    pod_spec,
    tolerates,
    unit_values,
    validate_k8s,
)
from tests.tools import tool

# --- Kubernetes ----------------------------------------------------------------




@pytest.mark.parametrize("path,doc", manifests(),
                         ids=[f"{p.name}:{d['kind']}" for p, d in manifests()])
def test_every_manifest_validates(path: Path, doc: dict[str, Any]) -> None:
    kind = doc["kind"]
    if kind in CUSTOM:
        CUSTOM[kind].model_validate(doc)
        return
    try:
        validate_k8s(doc)
    except kubernetes_validate.SchemaNotFoundError:
        pytest.fail(f"{path.name}: no schema for {kind} {doc['apiVersion']}, and it is not "
                    "a custom resource this test knows")


def test_schema_validation_rejects_a_misspelt_field() -> None:
    """The check above is not vacuous: strict validation reports an unknown field."""
    doc = by_kind("DaemonSet")
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_k8s(doc)


def test_kustomization_lists_every_manifest_and_nothing_else() -> None:
    kustomization = Kustomization.model_validate(by_kind("Kustomization"))
    files = {p.name for p in K8S.iterdir() if p.suffix in (".yaml", ".yml")}
    assert set(kustomization.resources) == files - {"kustomization.yaml"}
    assert len(kustomization.resources) == len(set(kustomization.resources))
    namespaced = [d for _, d in manifests() if d["kind"] not in ("Namespace", "Kustomization")]
    # kustomize sets the namespace; a manifest that names one must agree.
    assert {d["metadata"].get("namespace", kustomization.namespace) for d in namespaced} == \
        {kustomization.namespace}
    assert by_kind("Namespace")["metadata"]["name"] == kustomization.namespace
    assert "prometheusrule.yaml" in kustomization.resources




def test_toleration_matching_follows_kubernetes() -> None:
    """The check above is not vacuous: the old, narrow toleration fails it."""
    narrow = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert tolerates(narrow, SICK_NODE_TAINTS[0])
    assert not tolerates(narrow, SICK_NODE_TAINTS[1])
    assert not tolerates(narrow, {"key": "nvidia.com/gpu", "effect": "NoExecute"})
    assert tolerates([{"key": "k", "value": "v", "effect": "NoSchedule"}],
                     {"key": "k", "value": "v", "effect": "NoSchedule"})
    assert not tolerates([{"key": "k", "value": "v"}], {"key": "k", "value": "w",
                                                        "effect": "NoSchedule"})
    with pytest.raises(AssertionError):
        assert_stays_on_sick_nodes({"tolerations": narrow,
                                    "priorityClassName": "system-node-critical"})


def test_daemonset_stays_on_tainted_nodes_at_node_critical_priority() -> None:
    assert_stays_on_sick_nodes(pod_spec())


def test_daemonset_runs_on_gpu_nodes_with_the_hosts_processes_in_view() -> None:
    pod = pod_spec()
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["hostPID"] is True
    assert not pod.get("hostNetwork") and not pod.get("hostIPC")
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container()["volumeMounts"]}
    proc = mounts["/host/proc"]
    assert proc["readOnly"] is True
    assert volumes[proc["name"]]["hostPath"]["path"] == "/proc"
    assert "--path.procfs=/host/proc" in container()["args"]
    # PCI link state and the host's cgroup tree: the host's /sys.
    sys_mount = mounts["/host/sys"]
    assert volumes[sys_mount["name"]]["hostPath"] == {"path": "/sys", "type": "Directory"}
    assert "--path.sysfs=/host/sys" in container()["args"]
    # Their submounts (cgroups, binfmt_misc, debugfs) belong to user 0: read-only too.
    for mount in (proc, sys_mount):
        assert mount["readOnly"] is True and mount["recursiveReadOnly"] == "IfPossible"
    # Every hostPath is mounted read-only but the fault memory's own
    # directory, the one place the exporter writes.
    state = mounts["/var/lib/gpu-exporter"]
    assert volumes[state["name"]]["hostPath"] == {"path": "/var/lib/gpu-exporter",
                                                  "type": "DirectoryOrCreate"}
    assert "--path.state-file=/var/lib/gpu-exporter/state.json" in container()["args"]
    for mount in container()["volumeMounts"]:
        if "hostPath" in volumes[mount["name"]] and mount["mountPath"] != state["mountPath"]:
            assert mount.get("readOnly") is True, mount


def test_daemonset_args_are_flags_the_exporter_accepts() -> None:
    settings = parse_settings(container()["args"])
    assert parse_listen_address(settings.web.listen_address)[1] == DEFAULT_PORT
    assert str(settings.path.procfs) == "/host/proc"
    assert str(settings.path.sysfs) == "/host/sys"
    assert settings.path.kmsg == ""  # an unprivileged container cannot open /dev/kmsg


def test_daemonset_is_locked_down() -> None:
    pod, c = pod_spec(), container()
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc.get("privileged", False) is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert "add" not in sc["capabilities"]
    for ctx in (pod["securityContext"], sc):
        assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
        # User 0 for the socket, group 10001: no file of group root to read.
        assert ctx["runAsUser"] == 0 and ctx["runAsNonRoot"] is False
        assert ctx["runAsGroup"] == 10001
    assert pod["automountServiceAccountToken"] is False


def test_daemonset_resources_and_probes() -> None:
    c = container()
    assert c["resources"] == {"requests": {"cpu": "20m", "memory": "48Mi"},
                              "limits": {"cpu": "200m", "memory": "128Mi"}}
    assert "BENCHMARKS.md" in (K8S / "daemonset.yaml").read_text()
    (port,) = c["ports"]
    assert port == {"name": "metrics", "containerPort": DEFAULT_PORT, "protocol": "TCP"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/-/healthy", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/-/ready", "port": "metrics"}


def test_service_and_servicemonitor_reach_the_pods() -> None:
    pod_labels = by_kind("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    service = by_kind("Service")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["name"] == "metrics" and port["targetPort"] == "metrics"
    monitor = ServiceMonitor.model_validate(by_kind("ServiceMonitor"))
    assert monitor.spec.selector.matchLabels.items() <= service["metadata"]["labels"].items()
    assert [e.port for e in monitor.spec.endpoints] == ["metrics"]
    assert monitor.spec.endpoints[0].path == "/metrics"
    # The job label comes from the Service and is the one the rules select on.
    assert monitor.spec.jobLabel is not None
    job = service["metadata"]["labels"][monitor.spec.jobLabel]
    assert job == "gpu-exporter"
    alerts_config = ROOT / "alerts" / "config.yaml"
    if alerts_config.exists():
        assert f'job="{job}"' in yaml.safe_load(alerts_config.read_text())["selector"]


def test_prometheusrule_groups_pass_promtool(tmp_path: Path) -> None:
    rule = PrometheusRule.model_validate(by_kind("PrometheusRule"))
    rules_file = tmp_path / "rules.yml"
    rules_file.write_text(yaml.safe_dump(by_kind("PrometheusRule")["spec"]))
    result = subprocess.run([tool("promtool"), "check", "rules", str(rules_file)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    # The rules come from alerts/, never written here by hand.
    assert (K8S / "prometheusrule.yaml").read_text().lower().startswith("# generated")
    assert isinstance(rule.spec.groups, list)



# --- root, nowhere ---------------------------------------------------------------


def test_nothing_holds_a_capability_and_only_the_pod_runs_as_root() -> None:
    users = [a for w, a in final_stage() if w == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert unit_values("User") and unit_values("User")[-1] not in ("0", "root")
    # User 0 for the kubelet's root-only socket, and nothing else: no
    # capability, no privilege, no way to gain one.
    pod = pod_spec()
    assert pod["securityContext"]["runAsUser"] == 0
    for c in pod["containers"] + pod.get("initContainers", []):
        sc = c["securityContext"]
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
        assert c["args"].count(
            "--kubernetes.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock") == 1
    for service in compose()["services"].values():
        assert str(service.get("user", "")).split(":")[0] not in ("0", "root")
    # The chart's kernelLog.privileged holds only with kernelLog.enabled (off by
    # default); its default pod is checked as rendered, in test_helm_chart.py.
    values = DEPLOY / "helm" / "gpu-exporter" / "values.yaml"
    assert yaml.safe_load(values.read_text())["kernelLog"]["enabled"] is False
    for path in DEPLOY.rglob("*"):
        if path.suffix in (".yaml", ".yml") and path.is_file() and path != values:
            assert not re.search(r"^\s*privileged:\s*true", path.read_text(), re.M), path


def test_daemonset_reads_the_kubelets_pod_resources_socket_read_only_without_rbac() -> None:
    pod, c = pod_spec(), container()
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    socket_dir = mounts["/var/lib/kubelet/pod-resources"]
    assert socket_dir["readOnly"] is True
    assert volumes[socket_dir["name"]]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    settings = parse_settings(c["args"])
    assert settings.kubernetes.pod_resources_socket.startswith(socket_dir["mountPath"] + "/")
    # A local API of the kubelet: no token, and nothing to grant.
    assert pod["automountServiceAccountToken"] is False
    kinds = {d["kind"] for _, d in manifests()}
    assert not kinds & {"ServiceAccount", "Role", "ClusterRole", "RoleBinding",
                        "ClusterRoleBinding"}
    # The owner labels are the exporter's, not renamed exported_*.
    [endpoint] = by_kind("ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True


def test_the_non_root_component_changes_only_the_user() -> None:
    """deploy/kubernetes/non-root/ runs the same pod as user 10001: its
    patch, applied as kustomize applies a JSON patch, replaces fields that
    exist with the non-root user, and the result validates."""
    component = yaml.safe_load((K8S / "non-root" / "kustomization.yaml").read_text())
    assert component["kind"] == "Component"
    [patch] = component["patches"]
    assert patch["target"] == {"kind": "DaemonSet",
                               "name": by_kind("DaemonSet")["metadata"]["name"]}
    ops = yaml.safe_load(patch["patch"])
    assert {op["op"] for op in ops} == {"replace"}
    doc = by_kind("DaemonSet")
    for op in ops:
        *parents, leaf = op["path"].strip("/").split("/")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        assert leaf in node, op["path"]  # replace needs the field to exist
        node[leaf] = op["value"]
    validate_k8s(doc)
    pod = doc["spec"]["template"]["spec"]
    for ctx in [pod["securityContext"]] + [c["securityContext"] for c in pod["containers"]]:
        assert ctx["runAsUser"] == 10001 and ctx["runAsNonRoot"] is True
    base = by_kind("DaemonSet")["spec"]["template"]["spec"]
    for ctx in (pod["securityContext"], pod["containers"][0]["securityContext"]):
        ctx.update(runAsUser=0, runAsNonRoot=False)
    assert pod == base  # nothing else changed

