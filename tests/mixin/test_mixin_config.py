"""The rules and dashboards as a monitoring mixin: one config (alerts/config.yaml)
of selector, cluster label, thresholds and ``for:`` durations, everything
regenerated from it. A user who renames the cluster label and selects the
exporters differently gets rules that still pass every promtool test (the
tests' series carry the new labels, and the expected alerts the new cluster
label), and dashboards whose every query filters and groups by it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_exporter_mixin.alerting import __main__ as alerts_main
from gpu_exporter_mixin.alerting.cases import selector_labels
from gpu_exporter_mixin.alerting.generate import RULES, TESTS_DIR
from gpu_exporter_mixin.alerting.promql import metric_names
from gpu_exporter_mixin.dashboards import __main__ as dashboards_main
from gpu_exporter_mixin.dashboards.generate import FLEET, NODE
from gpu_exporter_mixin.dashboards.queries import panel_queries, substitute
from tests import promtool_shares
from tests.tools import tool

ROOT = Path(__file__).resolve().parents[2]
LABEL = "k8s_cluster"
SELECTOR = 'job=~"dcgm-gpu|gpu-exporter", service="gpu-monitoring"'


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mixin")
    config = yaml.safe_load((ROOT / "alerts" / "config.yaml").read_text())
    config["cluster_label"] = LABEL
    config["selector"] = SELECTOR
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert alerts_main.main(["--config", str(path), "--out", str(out)]) == 0
    assert dashboards_main.main(["--config", str(path), "--out", str(out)]) == 0
    return out


def _rule_exprs(root: Path) -> list[tuple[str, str]]:
    groups = yaml.safe_load((root / RULES).read_text())["groups"]
    return [(r.get("alert") or r["record"], r["expr"]) for g in groups for r in g["rules"]]


def test_selector_labels() -> None:
    assert selector_labels(SELECTOR) == {"job": "dcgm-gpu", "service": "gpu-monitoring"}
    assert selector_labels('job="a", env!="dev", x=~"(a|b)+"') == {"job": "a"}
    assert selector_labels('job="a\\"b"') == {"job": 'a"b'}


def test_every_aggregation_keeps_the_configured_cluster_label(generated: Path) -> None:
    """Every ``by (...)`` and ``on (...)`` that names a node keeps the cluster
    label (under its configured name); the default name is gone."""
    keys = 0
    for name, expr in _rule_exprs(generated):
        for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
            labels = {x.strip() for x in clause.split(",") if x.strip()}
            if labels & {"instance", "driver_version"}:
                keys += 1
                assert LABEL in labels, f"{name}: {clause!r} drops {LABEL}"
        assert not re.search(r"\bcluster\b", expr), f"{name}: still names 'cluster'"
        if "gpu_info{" in expr or "up{" in expr:
            assert 'service="gpu-monitoring"' in expr, f"{name}: selector not applied"
    assert keys >= 15  # the fleet rules are many; a regex that found none proves nothing


def test_the_promtool_tests_carry_the_new_labels_and_the_rules_check(generated: Path) -> None:
    files = sorted((generated / TESTS_DIR).glob("*.yml"))
    assert [f.name for f in files] == [f.name for f in COMMITTED_TESTS]
    text = "\n".join(f.read_text() for f in files)
    assert f'{LABEL}="cluster-a"' in text and 'service="gpu-monitoring"' in text
    assert 'job="dcgm-gpu"' in text and 'job="gpu-exporter"' not in text
    check = subprocess.run([tool("promtool"), "check", "rules", str(generated / RULES)],
                           capture_output=True, text=True, timeout=120, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


# Every promtool test file, relabelled, passes: run as the committed files are,
# a share of groups at a time (the relabelling keeps each file's groups).
COMMITTED_TESTS = sorted((ROOT / TESTS_DIR).glob("*.yml"))
PROMTOOL_RUNS = promtool_shares.shares(COMMITTED_TESTS)


@pytest.mark.parametrize(("name", "share", "shares"), PROMTOOL_RUNS,
                         ids=promtool_shares.share_ids(PROMTOOL_RUNS))
def test_the_relabelled_promtool_tests_pass(generated: Path, name: str, share: int,
                                            shares: int, tmp_path: Path) -> None:
    promtool_shares.run_share(generated / TESTS_DIR / name, share, shares, tmp_path)


def _dashboard(root: Path, rel: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / rel).read_text())
    return data


@pytest.mark.parametrize("rel", [NODE, FLEET])
def test_dashboards_filter_by_the_configured_cluster_label(generated: Path, rel: Path) -> None:
    dash = _dashboard(generated, rel)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["cluster"]["query"]["query"] == f"label_values(gpu_info, {LABEL})"
    assert SELECTOR in variables["job"]["query"]["query"]
    names = ("job", "instance", "gpu", "namespace") if rel == FLEET else ("job", "instance", "gpu")
    for name in names:
        assert f'{LABEL}=~"$cluster"' in variables[name]["query"]["query"], name
    values = {"cluster": ".*", "job": "dcgm-gpu", "instance": "n1:9835", "gpu": ".+",
              "namespace": ".*", "datasource": "prometheus"}
    queries = list(panel_queries(dash))
    assert queries
    for title, ref, expr in queries:
        metric_names(substitute(expr, values))  # still PromQL
        assert f'{LABEL}=~"$cluster"' in expr, f"{title}/{ref}: no cluster filter"
        assert not re.search(r"\bcluster\b(?!\")", expr.replace("$cluster", "")), \
            f"{title}/{ref}: still names 'cluster'"
        # Every grouping by a node, GPU or workload keeps the renamed label.
        for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
            labels = {x.strip() for x in clause.split(",")}
            if labels & {"instance", "held_by", "namespace", "slurm_job_id"}:
                assert LABEL in labels, f"{title}/{ref}: {clause!r} drops {LABEL}"
