"""The generated alerting rules, runbook, promtool unit tests and the example
Alertmanager configuration, checked with the real promtool and amtool."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_exporter.diagnosis.table import ROWS, XID, XID_APPLICATION, XID_INFORMATIONAL, Row
from gpu_exporter.poll.catalog import BY_NAME
from gpu_exporter.settings.config_types import parse_duration
from gpu_exporter_mixin.alerting import templates
from gpu_exporter_mixin.alerting.config import AlertConfigError, load_config
from gpu_exporter_mixin.alerting.generate import (
    CHART_RULES,
    LINKS,
    PROMETHEUS_RULE,
    RULES,
    RUNBOOK,
    TEST_BUILD,
    TESTS_DIR,
    differences,
    outputs,
    write,
)
from gpu_exporter_mixin.alerting.promql import metric_names
from gpu_exporter_mixin.alerting.render import ANNOTATIONS
from gpu_exporter_mixin.alerting.rules import alert_rules
from gpu_exporter_mixin.alerting.templates import (
    duration,
    humanize1024,
    humanize_percentage,
)
from tests import promtool_shares
from tests.tools import tool

ROOT = Path(__file__).resolve().parents[2]
ALERTMANAGER_CONFIG = ROOT / "alerts" / "alertmanager.yml"
TEST_FILES = sorted((ROOT / TESTS_DIR).glob("*.yml"))
# An application Xid (GpuXidErrorApplicationFault) never pages: the job's owner acts.
PAGES = {"GpuLostHardware", "GpuMemoryErrorsEccUncorrectable", "GpuXidErrorDriverReported",
         "GpuExporterDown", "GpuExporterNvmlDown",
         # the driver itself says the GPU or node must be reset or rebooted, or the GPU
         # is out of its NVSwitch fabric
         "GpuRecoveryActionGpuReset", "GpuRecoveryActionNodeReboot",
         "GpuFabricDegradedNvswitchFabric",
         # a hardware fault back on the same GPU after a reset or reboot: replace it
         "GpuFaultRecurredCameBackAfterReset"}


def _groups(path: Path) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(path.read_text())["groups"]
    return groups


def _alerts(path: Path = ROOT / RULES) -> list[dict[str, Any]]:
    return [r for g in _groups(path) for r in g["rules"] if "alert" in r]


def _records(path: Path = ROOT / RULES) -> set[str]:
    return {r["record"] for g in _groups(path) for r in g["rules"] if "record" in r}


def github_anchors(markdown: str) -> set[str]:
    """Anchors GitHub gives a Markdown file: heading slugs and explicit ids."""
    anchors: set[str] = set(re.findall(r'<a\s+(?:id|name)="([^"]+)"', markdown))
    seen: dict[str, int] = {}
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if in_code or not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


# --- generated files ---------------------------------------------------------


def test_committed_files_are_what_the_generator_produces() -> None:
    assert differences(load_config()) == [], \
        "regenerate with: .venv/bin/python -m gpu_exporter_mixin.alerting"


def test_generator_covers_every_output() -> None:
    produced = set(outputs(load_config()))
    assert {CHART_RULES, TEST_BUILD, PROMETHEUS_RULE, RUNBOOK} <= produced
    # alerts/ shows the rule file as a link to the chart's: committed once.
    assert {p.relative_to(ROOT) for p in TEST_FILES} <= produced
    assert LINKS == {RULES: CHART_RULES} and RULES not in produced
    assert (ROOT / RULES).is_symlink() and (ROOT / RULES).resolve() == ROOT / CHART_RULES


def test_a_second_copy_of_the_rules_is_refused_and_written_back_as_a_link(
        tmp_path: Path) -> None:
    """A copy edited at one path would drift from the chart's, or be lost
    when the chart's is regenerated: the check names it, the writer links."""
    config = load_config()
    write(config, tmp_path)
    assert differences(config, tmp_path) == []
    copy = tmp_path / RULES
    text = copy.read_text()
    copy.unlink()
    copy.write_text(text)
    assert differences(config, tmp_path) == [f"{RULES}: not a link to {CHART_RULES}"]
    assert write(config, tmp_path) == [RULES]
    assert copy.is_symlink() and copy.read_text() == text
    copy.unlink()
    copy.symlink_to("elsewhere.yml")
    assert differences(config, tmp_path) == [
        f"{RULES}: links to elsewhere.yml, not {CHART_RULES}"]


def test_one_alert_per_table_row_named_from_the_table() -> None:
    alerts = {a["alert"]: a for a in _alerts()}
    for row in ROWS:
        alert = alerts[row.alert_name]
        assert alert["labels"]["severity"] == row.severity
        assert alert["annotations"]["summary"] == row.summary
        assert alert["annotations"]["fix"] == row.fix
        assert alert["annotations"]["runbook_url"].endswith(f"/docs/runbook.md#{row.anchor}")
        assert f'symptom="{row.symptom}"' in alert["expr"]
        assert f'cause="{row.cause}"' in alert["expr"]
        # Both branches of the owner join (owned, unowned) fire on the row alone.
        assert alert["expr"].count(f'cause="{row.cause}"}} == 1') == 2


def test_names_severities_and_pages() -> None:
    alerts = _alerts()
    for alert in alerts:
        assert re.fullmatch(r"Gpu(?:[A-Z][a-z0-9]*)+", alert["alert"]), alert["alert"]
        assert alert["labels"]["severity"] in ("critical", "warning", "info")
    critical = {a["alert"] for a in alerts if a["labels"]["severity"] == "critical"}
    assert critical == PAGES


def test_every_alert_has_every_annotation_and_its_runbook_anchor() -> None:
    config = load_config()
    anchors = github_anchors((ROOT / RUNBOOK).read_text())
    for alert in _alerts():
        notes = alert["annotations"]
        for key in ANNOTATIONS:
            assert notes.get(key, "").strip(), f"{alert['alert']} lacks {key}"
        assert "{{ $labels." in notes["description"], alert["alert"]
        assert "$value" in notes["description"], alert["alert"]
        base = f"{config.runbook_url_base}/docs/runbook.md#"
        assert notes["runbook_url"].startswith(base)
        anchor = notes["runbook_url"].removeprefix(base)
        assert anchor in anchors, f"{alert['alert']}: no #{anchor} in docs/runbook.md"
        assert notes["dashboard_url"].startswith(config.dashboard_url_base + "/d/")


def test_runbook_sections_confirm_fix_and_escalate() -> None:
    text = (ROOT / RUNBOOK).read_text()
    for row in ROWS:
        section = text.split(f"## {row.anchor}\n", 1)[1].split("\n## ", 1)[0]
        for command in row.confirm:
            assert command in section
        assert row.fix in section
        assert row.escalate in section


def test_every_metric_a_rule_reads_exists() -> None:
    records = _records()
    for group in _groups(ROOT / RULES):
        for rule in group["rules"]:
            for name in metric_names(rule["expr"]):
                # up: Prometheus' own; kube_pod_info: kube-state-metrics', for
                # the pod of each process where the kubelet's socket is not read;
                # kube_pod_owner: kube-state-metrics', for a job of pods over nodes.
                assert name in BY_NAME or name in records or name in (
                    "up", "kube_pod_info", "kube_pod_owner"), \
                    f"{rule.get('alert') or rule.get('record')}: unknown metric {name}"


def test_temperature_is_judged_against_the_gpus_own_threshold() -> None:
    (alert,) = [a for a in _alerts() if a["alert"] == "GpuTemperatureNearSlowdown"]
    assert 'gpu_temperature_threshold_celsius{job="gpu-exporter", threshold="slowdown"}' \
        in alert["expr"]
    assert not re.search(r"\b83\b", alert["expr"])


def test_test_build_differs_only_in_shorter_for() -> None:
    cap = load_config().test_build_for
    prod, test = _groups(ROOT / RULES), _groups(ROOT / TEST_BUILD)
    assert [g["name"] for g in prod] == [g["name"] for g in test]
    for pg, tg in zip(prod, test, strict=True):
        for p, t in zip(pg["rules"], tg["rules"], strict=True):
            p_for, t_for = p.pop("for", "0s"), t.pop("for", "0s")
            assert p == t
            assert parse_duration(t_for) == min(parse_duration(p_for), cap)


def test_prometheus_rule_carries_the_same_groups() -> None:
    doc = yaml.safe_load((ROOT / PROMETHEUS_RULE).read_text())
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["kind"] == "PrometheusRule"
    assert doc["metadata"]["name"]
    assert doc["spec"]["groups"] == _groups(ROOT / RULES)


def test_config_errors_name_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("fleet: {straggler: {below_ratio: 2}}\n")
    with pytest.raises(AlertConfigError, match=r"fleet\.straggler\.below_ratio"):
        load_config(bad)
    bad.write_text("selector: 'job=\"x\"'\nfor_overrides: {GpuNoSuchAlert: 5m}\n")
    with pytest.raises(AlertConfigError, match="GpuNoSuchAlert"):
        alert_rules(load_config(bad))
    # A kind reaches a regular expression: only a Kubernetes kind name may.
    for kinds in ('["Job\\"|.*"]', "[job]", "[]"):
        bad.write_text(f"fleet: {{job_straggler: {{pod_job_kinds: {kinds}}}}}\n")
        with pytest.raises(AlertConfigError, match=r"fleet\.job_straggler\.pod_job_kinds"):
            load_config(bad)


def test_template_helpers_match_prometheus() -> None:
    # Values from Prometheus' own template tests.
    assert humanize_percentage(0.1234567) == "12.35%"
    assert humanize_percentage(0) == "0%"
    assert humanize1024(0) == "0"
    assert humanize1024(1024) == "1ki"
    assert humanize1024(1048576) == "1Mi"
    assert humanize1024(12884901888) == "12Gi"
    assert duration(5400) == "1h30m"
    assert duration(3) == "3s"


# --- promtool ----------------------------------------------------------------


def test_promtool_check_rules() -> None:
    for path in (ROOT / RULES, ROOT / TEST_BUILD):
        result = subprocess.run([tool("promtool"), "check", "rules", str(path)],
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stdout + result.stderr


PROMTOOL_RUNS = promtool_shares.shares(TEST_FILES)


@pytest.mark.parametrize(("name", "share", "shares"), PROMTOOL_RUNS,
                         ids=promtool_shares.share_ids(PROMTOOL_RUNS))
def test_promtool_unit_tests(name: str, share: int, shares: int, tmp_path: Path) -> None:
    promtool_shares.run_share(ROOT / TESTS_DIR / name, share, shares, tmp_path)


def test_every_alert_has_firing_and_silent_unit_tests() -> None:
    fires: dict[str, int] = {}
    silent: dict[str, set[str]] = {}
    for path in TEST_FILES:
        doc = yaml.safe_load(path.read_text())
        assert doc["rule_files"] == ["../gpu-exporter.rules.yml"]
        for test in doc["tests"]:
            for check in test.get("alert_rule_test", []):
                name = check["alertname"]
                if check.get("exp_alerts"):
                    fires[name] = fires.get(name, 0) + 1
                    for exp in check["exp_alerts"]:
                        assert set(exp["exp_annotations"]) == set(ANNOTATIONS)
                        assert exp["exp_labels"]["severity"]
                else:
                    silent.setdefault(name, set()).add(test["name"])
    for alert in _alerts():
        name = alert["alert"]
        assert fires.get(name), f"{name} has no unit test in which it fires"
        tests = silent.get(name, set())
        assert any("healthy" in t for t in tests), f"{name}: not checked silent when healthy"
        assert any("idle" in t for t in tests), f"{name}: not checked silent when idle"
        assert any("healthy" not in t and "idle node" not in t for t in tests), \
            f"{name}: no near-miss that stays silent"


# --- Alertmanager ------------------------------------------------------------


def test_amtool_check_config() -> None:
    result = subprocess.run([tool("amtool"), "check-config", str(ALERTMANAGER_CONFIG)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def _labels(row: Row) -> dict[str, str]:
    """The labels of the row's generated alert, as the rules file has them."""
    alert = next(a for a in _alerts() if a["alert"] == row.alert_name)
    return {"alertname": row.alert_name, "instance": "n1:9835", "gpu": "4", **alert["labels"]}


@pytest.mark.parametrize(("labels", "receiver"), [
    ({"alertname": "GpuLostHardware", "severity": "critical", "instance": "n1:9835",
      "gpu": "5"}, "pager"),
    ({"alertname": "GpuMemoryErrorsEccUncorrectable", "severity": "critical",
      "instance": "n1:9835", "gpu": "1"}, "pager"),
    ({"alertname": "GpuExporterDown", "severity": "critical", "instance": "n1:9835"}, "pager"),
    ({"alertname": "GpuThrottledUnderLoadPowerCap", "severity": "warning",
      "instance": "n1:9835", "gpu": "2"}, "ticket"),
    ({"alertname": "GpuStraggler", "severity": "warning", "instance": "n1:9835"}, "ticket"),
    ({"alertname": "GpuPersistenceOffConfiguration", "severity": "info",
      "instance": "n1:9835", "gpu": "3"}, "blackhole"),
    ({"alertname": "SomethingElse", "instance": "n1:9835"}, "ticket"),
    # Xids by who must act: the labels the generated rules put on each tier's alert.
    *((_labels(row), receiver) for row, receiver in (
        (XID, "pager"), (XID_APPLICATION, "job-owner"), (XID_INFORMATIONAL, "blackhole"))),
])
def test_amtool_routes(labels: dict[str, str], receiver: str) -> None:
    args = [f"{k}={v}" for k, v in labels.items()]
    result = subprocess.run(
        [tool("amtool"), "config", "routes", "test", f"--config.file={ALERTMANAGER_CONFIG}",
         f"--verify.receivers={receiver}", *args],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receiver


def test_alertmanager_groups_per_node() -> None:
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    assert config["route"]["group_by"] == ["instance"]
    for route in config["route"].get("routes", []):
        assert "group_by" not in route  # every route groups per node


def test_the_owner_is_said_only_where_it_is_known() -> None:
    template = ("GPU 0" + templates.with_label("owner", f" (allocated to {templates.DOT})")
                + ": stalled")
    templates.check(template)
    assert templates.render(template, {"owner": "ml/train-a/trainer"}, 1) == \
        "GPU 0 (allocated to ml/train-a/trainer): stalled"
    assert templates.render(template, {"owner": ""}, 1) == "GPU 0: stalled"
    assert templates.render(template, {}, 1) == "GPU 0: stalled"
