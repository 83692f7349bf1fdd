"""The jsonnet mixin (mixin/mixin.libsonnet), rendered by jsonnet itself (the
jsonnet package's binding), equals what the Python generators write: the
rules of alerts/ and the dashboards of grafana/ for the default settings, and
the generators' output for a changed _config; promtool accepts what it
renders."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import _jsonnet  # type: ignore[import-not-found]
import pytest
import yaml

from gpu_exporter_mixin.alerting.config import AlertConfig, load_config
from gpu_exporter_mixin.alerting.render import rule_groups
from gpu_exporter_mixin.dashboards import jsonnet
from gpu_exporter_mixin.dashboards.build import fleet_dashboard, node_dashboard
from gpu_exporter_mixin.dashboards.generate import FLEET, NODE, to_json
from tests.tools import tool

ROOT = Path(__file__).resolve().parents[2]
MIXIN = ROOT / "mixin"
CONFIG = ROOT / "alerts" / "config.yaml"

# Selector, cluster label, thresholds in PromQL, prose and dashboard colours,
# durations, a URL, and both kinds of override.
CHANGED: dict[str, Any] = {
    "selector": 'job="gpu", env="prod"',
    "cluster_label": "k8s_cluster",
    "runbook_url_base": "https://runbooks.example.org/gpu/",
    "diagnosis": {"busy_utilization": 0.6, "idle_utilization": 0.05, "window": "1m",
                  "swap_bytes_per_s": 4194304, "thermal_margin_celsius": 4.5},
    "diagnosis_for": {"warning": "15m"},
    "for_overrides": {"memory_near_full/oom_risk": "2m", "GpuExporterDown": "10m"},
    "severity_overrides": {"pcie_downtrained/link_degraded": "critical",
                           "GpuStraggler": "info"},
    "fleet": {"idle_utilization": 0.05, "straggler": {"siblings_busy": 0.8, "for": "30m"},
              "job_straggler": {"mad_multiplier": 2.5, "min_gap": 0.25, "job_busy": 0.6,
                                "for": "20m"},
              "memory_leak": {"horizon": "12h"}},
    "exporter": {"stale_poll_seconds": 90},
}
_WHOLE = ("for_overrides", "severity_overrides")


def merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in change.items():
        if isinstance(value, dict) and key not in _WHOLE:
            out[key] = merged(out.get(key) or {}, value)
        else:
            out[key] = value
    return out


def as_jsonnet(change: dict[str, Any]) -> str:
    """``change`` as a _config override, nested objects merged with +:."""
    fields = []
    for key, value in change.items():
        if isinstance(value, dict) and key not in _WHOLE:
            fields.append(f"{json.dumps(key)}+: {as_jsonnet(value)}")
        else:
            fields.append(f"{json.dumps(key)}: {json.dumps(value)}")
    return "{" + ", ".join(fields) + "}"


def render(config_override: str = "{}") -> dict[str, Any]:
    snippet = (f"local m = (import 'mixin.libsonnet') + {{ _config+:: {config_override} }};\n"
               "{ alerts: m.prometheusAlerts, rules: m.prometheusRules, "
               "dashboards: m.grafanaDashboards }")
    out: dict[str, Any] = json.loads(_jsonnet.evaluate_snippet("test", snippet,
                                                               jpathdir=[str(MIXIN)]))
    return out


def python_output(config: AlertConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    dashboards = {NODE.name: json.loads(to_json(node_dashboard(config))),
                  FLEET.name: json.loads(to_json(fleet_dashboard(config)))}
    return rule_groups(config), dashboards


def test_the_mixin_data_is_a_fresh_generation() -> None:
    for rel, text in jsonnet.outputs(load_config(CONFIG)).items():
        assert (ROOT / rel).read_text() == text, f"{rel}: run gpu-exporter-dashboards"


def test_the_defaults_render_the_committed_rules_and_dashboards() -> None:
    out = render()
    groups = out["rules"]["groups"] + out["alerts"]["groups"]
    assert all("record" in r for g in out["rules"]["groups"] for r in g["rules"])
    assert all("alert" in r for g in out["alerts"]["groups"] for r in g["rules"])
    # The committed rules file, as the generator writes it: its block scalars
    # end in a newline the rule objects do not carry.
    committed = yaml.safe_load((ROOT / "alerts" / "gpu-exporter.rules.yml").read_text())
    assert {"groups": groups} == json.loads(json.dumps(committed).replace('\\n"', '"'))
    for name, dashboard in out["dashboards"].items():
        assert dashboard == json.loads((ROOT / "grafana" / "dashboards" / name).read_text())
    assert set(out["dashboards"]) == {p.name for p in (ROOT / "grafana" / "dashboards")
                                      .glob("*.json")}


def test_a_changed_config_renders_what_the_generators_write(tmp_path: Path) -> None:
    base = yaml.safe_load(CONFIG.read_text())
    config = AlertConfig.model_validate(merged(base, CHANGED))
    out = render(as_jsonnet(CHANGED))
    groups, dashboards = python_output(config)
    assert out["rules"]["groups"] + out["alerts"]["groups"] == groups
    assert out["dashboards"] == dashboards
    # The change reached the output (the comparison above is not of two defaults).
    text = json.dumps(out)
    assert 'job=\\"gpu\\", env=\\"prod\\"' in text and "k8s_cluster" in text
    assert "job=\\\"gpu-exporter\\\"" not in text
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    result = subprocess.run([tool("promtool"), "check", "rules", str(rules)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_durations_as_numbers_too() -> None:
    """config.libsonnet writes durations as alerts/config.yaml does ("15m",
    read by every render above); jsonnet users may give seconds."""
    as_number = render('{ fleet+: { straggler+: { "for": 5400 } } }')
    (straggler,) = [r for g in as_number["alerts"]["groups"] for r in g["rules"]
                    if r["alert"] == "GpuStraggler"]
    assert straggler["for"] == "1h30m"


def test_a_setting_written_into_the_prose_fails_loudly_when_changed() -> None:
    with pytest.raises(RuntimeError, match="hardware_xids is written into the table's prose"):
        render("{ diagnosis+: { hardware_xids: [79] } }")


def test_every_setting_of_the_config_is_followed_or_guarded() -> None:
    names = {leaf.path for leaf in jsonnet.leaves()}
    dumped = AlertConfig().model_dump(by_alias=True)

    def paths(d: dict[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
        out: set[tuple[str, ...]] = set()
        for key, value in d.items():
            path = (*prefix, key)
            if path in jsonnet.UNUSED or path in jsonnet.OVERRIDES:
                continue
            out |= paths(value, path) if isinstance(value, dict) else {path}
        return out

    assert names == paths(dumped)
    config = (MIXIN / "config.libsonnet").read_text()
    for key in dumped:
        assert f'"{key}":' in config, key
