"""Every value of the Helm chart does something: each leaf key of
values.yaml, set to another value the schema allows, changes what Helm
renders (rendered by Helm's own engine, as tests/deploy/test_helm_chart.py does).
A value that changes nothing is a knob an operator turns in vain.

The leaves are walked from values.yaml, so a value added to the chart is
tried without a line here; the value tried is derived from its default and
its schema (a bool flipped, a number one up, another choice of an enum, a
string of the schema's pattern), with a table for the values whose shape a
default does not show (an empty list or mapping). Where the value is text or
a number, the new value is in the rendering: the chart passes it on rather
than merely reacting to it.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.deploy.test_helm_chart import CHART, NAMESPACE, OPTIONS, RELEASE, merged

VALUES: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())

# An empty list or mapping by default: a value of the shape the schema's
# description asks for.
SHAPED: dict[str, Any] = {
    "imagePullSecrets": [{"name": "registry"}],
    "commonLabels": {"team": "gpu"},
    "podLabels": {"team": "gpu"},
    "podAnnotations": {"example.com/note": "changed"},
    "daemonSetAnnotations": {"example.com/note": "changed"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "example.com/rack", "operator": "In", "values": ["r1"]}]}]}}},
    "tolerations": [{"key": "example.com/changed", "operator": "Exists"}],
    "securityContext.capabilities.drop": ["ALL", "NET_RAW"],
    "extraArgs": ["--log.level=debug"],
    "extraEnv": [{"name": "GPU_EXPORTER_LOG__FORMAT", "value": "json"}],
    "extraVolumes": [{"name": "scratch", "emptyDir": {}}],
    "extraVolumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
    "service.annotations": {"example.com/note": "changed"},
    "service.labels": {"team": "gpu"},
    "dashboards.labels": {"grafana_dashboard": "2"},
    "dashboards.annotations": {"grafana_folder": "Changed"},
    "nodeSelector": {"example.com/gpu": "yes"},
}
for _monitor in ("serviceMonitor", "podMonitor"):
    SHAPED |= {
        f"{_monitor}.additionalLabels": {"release": "changed"},
        f"{_monitor}.tlsConfig": {"serverName": "changed.example.com"},
        f"{_monitor}.basicAuth": {"username": {"name": "scrape", "key": "user"},
                                  "password": {"name": "scrape", "key": "password"}},
        f"{_monitor}.relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"],
                                     "targetLabel": "node", "action": "replace"}],
        f"{_monitor}.metricRelabelings": [{"sourceLabels": ["__name__"],
                                           "regex": "gpu_process_.*", "action": "drop"}],
    }
SHAPED["prometheusRule.additionalLabels"] = {"release": "changed"}

# Values that change nothing at the defaults, why, and the values under
# which they do (where the leaf is tried).
_ROOT = ("podResources.runAsRoot (on by default: the kubelet's PodResources socket is "
         "root's) runs the exporter as user 0 whatever the user settings say")
_NON_ROOT = {"podResources": {"runAsRoot": False}}
CHANGES_NOTHING_AT_DEFAULTS: dict[str, tuple[str, dict[str, Any]]] = {
    "podSecurityContext.runAsNonRoot": (_ROOT, _NON_ROOT),
    "podSecurityContext.runAsUser": (_ROOT, _NON_ROOT),
    "securityContext.runAsNonRoot": (_ROOT, _NON_ROOT),
    "securityContext.runAsUser": (_ROOT, _NON_ROOT),
}
CHANGES_NOTHING: dict[str, str] = {}  # values that never change anything (none)


def leaves(tree: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in tree.items():
        path = prefix + key
        if isinstance(value, dict) and value and path not in SHAPED:
            yield from leaves(value, path + ".")
        else:
            yield path, value


def schema_of(path: str) -> dict[str, Any]:
    node = SCHEMA
    for part in path.split("."):
        node = node.get("properties", {}).get(part, {})
    return node


def _bumped_quantity(text: str) -> str | None:
    m = re.fullmatch(r"(\d+)(m|Mi|Gi|%)", text)
    return f"{int(m.group(1)) + 1}{m.group(2)}" if m else None


def other_value(path: str, default: Any) -> Any:
    """A value the schema allows that is not the default."""
    if path in SHAPED:
        # The base may already set the shaped value: then none at all is the change.
        return SHAPED[path] if SHAPED[path] != default else type(default)()
    schema = schema_of(path)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if "enum" in schema:
        return next(v for v in schema["enum"] if v != default)
    pattern = schema.get("pattern", "")
    if pattern.startswith("^(sha256"):
        return "sha256:" + "cd" * 32
    if pattern.startswith("^(\\d+"):
        return "37s"
    if pattern == "^/":
        return "/var/lib/changed"
    if isinstance(default, str):
        return _bumped_quantity(default) or f"{default}changed".lstrip("-") or "changed"
    raise AssertionError(f"{path}: no other value for {default!r}; add one to SHAPED")


# Every part of the chart rendered (the monitors, the rules, the dashboards,
# the web config), nothing that overrides another value (privileged mode
# drops allowPrivilegeEscalation, as the kernel log's privileged mode sets it).
_RENDERS_ALL = merged(*(OPTIONS[o] for o in ("serviceMonitor", "prometheusRule",
                                             "dashboards", "webConfig-tls")))
_PODMONITOR = merged(OPTIONS["podMonitor"], {"webConfig": {"secretName": "web", "tls": True}})
_KERNEL_LOG = merged(_RENDERS_ALL, {"kernelLog": {"enabled": True}})


def base_for(path: str) -> dict[str, Any]:
    """Values under which the leaf's part of the chart renders at all."""
    if path.startswith("podMonitor.") or path == "service.enabled":
        return _PODMONITOR
    if path.startswith("kernelLog.") and path != "kernelLog.enabled":
        return _KERNEL_LOG
    if path in CHANGES_NOTHING_AT_DEFAULTS:
        return merged(_RENDERS_ALL, CHANGES_NOTHING_AT_DEFAULTS[path][1])
    return _RENDERS_ALL


def current(values: dict[str, Any], path: str, default: Any) -> Any:
    """The leaf's value in ``values`` (the base sets some), else its default."""
    node: Any = values
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def with_value(values: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(values)
    node = out
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return out


LEAVES = list(leaves(VALUES))


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def rendered(chart: helm.Chart, values: dict[str, Any]) -> str:
    out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return "\n".join(f"# {path}\n{text}" for path, text in sorted(out.items()))


def test_every_leaf_changes_the_rendering(chart: helm.Chart) -> None:
    unchanged, missing, refused = [], [], []
    renders: dict[str, str] = {}
    for path, default in LEAVES:
        if path in CHANGES_NOTHING:
            continue
        base = base_for(path)
        key = json.dumps(base, sort_keys=True)
        if key not in renders:
            renders[key] = rendered(chart, base)
        value = other_value(path, current(base, path, default))
        try:
            after = rendered(chart, with_value(base, path, value))
        except helm.HelmError as exc:
            refused.append(f"{path}={value!r}: {exc}")
            continue
        if after == renders[key]:
            unchanged.append(f"{path}={value!r}")
        elif isinstance(value, str | int) and not isinstance(value, bool) \
                and str(value) not in after:
            missing.append(f"{path}={value!r}")
    assert not refused, "values the chart refused (a better value is needed here):\n" + \
        "\n".join(refused)
    assert not unchanged, "values that change nothing:\n" + "\n".join(unchanged)
    assert not missing, "values not passed on into the rendering:\n" + "\n".join(missing)


def test_the_walk_reaches_the_chart_s_values() -> None:
    """The walk is not vacuous: it reaches values at every depth."""
    paths = {p for p, _ in LEAVES}
    assert {"image.tag", "port", "securityContext.capabilities.drop",
            "serviceMonitor.interval", "podMonitor.scheme", "dashboards.labels"} <= paths
    assert len(paths) > 60
    assert set(CHANGES_NOTHING) <= paths


def test_what_changes_nothing_at_the_defaults_still_does_not(chart: helm.Chart) -> None:
    """The list above is true: each value in it changes nothing at the
    defaults (else it belongs with the others)."""
    defaults = rendered(chart, {})
    for path in CHANGES_NOTHING_AT_DEFAULTS:
        default = dict(LEAVES)[path]
        assert rendered(chart, with_value({}, path, other_value(path, default))) == defaults, \
            path
