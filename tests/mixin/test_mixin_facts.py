"""The generated rules and dashboards checked against facts outside their
generator, offline: every PromQL expression parsed (promql-parser) and each
of its selectors read, not searched for as text.

- Every selector of a series the exporter exports (the catalog's, and ``up``,
  which Prometheus makes for each of its targets) carries the configured
  selector, in the committed rules and under a changed configuration: a rule
  without it reads every job's series (``up == 0`` of any target pages as a
  GPU exporter down, and inhibits that node's GPU alerts).
- Every selector of a dashboard query carries the dashboard's filters (cluster,
  job, instance; and the GPU choice where the series is a GPU's).
- Each panel's unit is the unit its queries compute: the metric's base unit by
  its name (Prometheus' conventions) through the PromQL's arithmetic (rate
  divides by seconds, a ratio of two byte counts is a ratio), mapped to
  Grafana's unit names below: bytes per second is never shown as bits, a
  ratio never as seconds.

That each panel shows the right values on a simulated node is
tests/mixin/test_live_stack.py::test_every_dashboard_panel_shows_what_mixed_is."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_exporter.diagnosis.table import ROWS
from gpu_exporter.poll.catalog import BY_NAME
from gpu_exporter_mixin.alerting.config import AlertConfig, AlertConfigError, load_config
from gpu_exporter_mixin.alerting.generate import RULES
from gpu_exporter_mixin.alerting.render import alert_annotations
from gpu_exporter_mixin.alerting.rules import alert_rules, recording_rules
from gpu_exporter_mixin.alerting.templates import check as check_template
from gpu_exporter_mixin.dashboards.build import fleet_dashboard, node_dashboard
from gpu_exporter_mixin.dashboards.generate import FLEET, NODE, to_json
from gpu_exporter_mixin.dashboards.queries import panels, substitute
from tests.diagnosis.test_policy_tables import FACTS, REMEMBERED
from tests.promql_facts import (
    COUNT,
    FOREIGN,
    RATIO,
    SECONDS,
    Unit,
    UnitError,
    Units,
    clauses,
    describe,
    matcher_labels,
    matchers_of,
    metric_unit,
    missing_matchers,
    one_to_one_sides,
    record_labels,
    selectors,
    series_labels,
    unit,
)

ROOT = Path(__file__).resolve().parents[2]
# A configuration as a user with two exporters' jobs and a renamed cluster
# label writes it.
CHANGED = {"selector": 'job=~"dcgm-gpu|gpu-exporter", service="gpu-monitoring"',
           "cluster_label": "k8s_cluster"}
CONFIGS = {"default": load_config(),
           "changed": load_config().model_copy(update=CHANGED)}
VARIABLES = {"cluster": ".*", "job": "gpu-exporter", "instance": "node-a:9835", "gpu": ".+",
             "namespace": ".*", "datasource": "prometheus", "__rate_interval": "1m",
             "__range": "1h", "__interval": "15s"}


def exported(name: str) -> bool:
    """A series the exporter's scrape produces: the catalog's, and ``up``."""
    return name in BY_NAME or name == "up"


def _committed_rules() -> list[tuple[str, str]]:
    groups = yaml.safe_load((ROOT / RULES).read_text())["groups"]
    return [(r.get("alert") or r["record"], r["expr"]) for g in groups for r in g["rules"]]


def _generated_rules(config: AlertConfig) -> list[tuple[str, str]]:
    return ([(r.name, r.expr) for r in alert_rules(config)]
            + [(r.record, r.expr) for r in recording_rules(config)])


@pytest.mark.parametrize("source", ["committed", "default", "changed"])
def test_every_exported_series_in_every_rule_carries_the_configured_selector(
        source: str) -> None:
    config = CONFIGS["default" if source == "committed" else source]
    rules = _committed_rules() if source == "committed" else _generated_rules(config)
    wanted = matchers_of(config.selector)
    assert wanted  # a selector that parses to nothing would check nothing
    checked, problems = 0, []
    for name, expr in rules:
        checked += sum(1 for metric, _ in selectors(expr) if exported(metric))
        problems += [f"{name}: {p}" for p in missing_matchers(expr, wanted, exported)]
    assert not problems, "\n".join(problems)
    assert checked >= 60, checked  # every row's alert, the fleet rules, the exporter's health


def test_up_is_selected_by_the_job_and_never_alone() -> None:
    """``up`` is the one series every target has: GpuExporterDown must read
    only the exporter's jobs, whatever else the expression holds."""
    for label, config in CONFIGS.items():
        (down,) = [r for r in alert_rules(config) if r.name == "GpuExporterDown"]
        found = [m for name, m in selectors(down.expr) if name == "up"]
        assert found, label
        for alternatives in found:
            for matchers in alternatives:
                assert matchers_of(config.selector) <= matchers, (label, down.expr)


def test_the_check_sees_a_selector_dropped_anywhere() -> None:
    """The checker itself, on the shapes the rules use: a selector lost inside
    a function, an aggregation, a join, a range or an ``or`` alternative."""
    wanted = matchers_of('job="gpu-exporter"')
    good = 'up{job="gpu-exporter"} == 0'
    assert missing_matchers(good, wanted, exported) == []
    for bad in ("up == 0", 'up{instance="a"} == 0',
                'rate(gpu_busy_seconds_total[2m]) and gpu_info{job="gpu-exporter"}',
                'max by (gpu) (gpu_info{job="gpu-exporter"} or gpu_diagnosis_active)',
                'x{job="gpu-exporter"} * on (gpu) group_left () gpu_up',
                'gpu_up{job="gpu-exporter" or instance="a"}'):
        assert missing_matchers(bad, wanted, exported), bad
    # Recording rules' outputs and other exporters' series are not the exporter's.
    assert missing_matchers("instance:gpu_info:count > 0 or kube_pod_info", wanted,
                            exported) == []


# --- the dashboards' filters -------------------------------------------------------------------


def _dashboards(config_name: str) -> dict[str, dict[str, Any]]:
    if config_name == "committed":
        return {"node": json.loads((ROOT / NODE).read_text()),
                "fleet": json.loads((ROOT / FLEET).read_text())}
    config = CONFIGS[config_name]
    return {"node": json.loads(to_json(node_dashboard(config))),
            "fleet": json.loads(to_json(fleet_dashboard(config)))}


def _gpu_series(name: str) -> bool:
    if name in BY_NAME:
        return "gpu" in BY_NAME[name].labels
    return name.startswith("gpu:")  # a recording rule at GPU level (level:metric:operations)


@pytest.mark.parametrize("source", ["committed", "changed"])
@pytest.mark.parametrize("which", ["node", "fleet"])
def test_every_dashboard_selector_carries_the_dashboards_filters(source: str,
                                                                 which: str) -> None:
    label = CONFIGS["default" if source == "committed" else source].cluster_label
    # Each variable stands for itself, so the filters can be read from the parse.
    marked = {**VARIABLES, **{name: f"VAR_{name}" for name in ("cluster", "job", "instance",
                                                               "gpu", "namespace")}}
    node = matchers_of(f'{label}=~"VAR_cluster", job=~"VAR_job", instance=~"VAR_instance"')
    gpu = node | matchers_of('gpu=~"VAR_gpu"')
    problems, checked = [], 0
    for panel in panels(_dashboards(source)[which]):
        for target in panel["targets"]:
            where = f"{panel['title']}/{target['refId']}"
            expr = substitute(target["expr"], marked)
            checked += sum(1 for _ in selectors(expr))
            problems += [f"{where}: {p}" for p in missing_matchers(expr, node, bool)]
            problems += [f"{where}: {p}" for p in missing_matchers(expr, gpu, _gpu_series)
                         if which == "node"]
    assert not problems, "\n".join(problems)
    assert checked >= 40, checked


# --- units ---------------------------------------------------------------------------------------

BYTES = unit(bytes=1)
# What each unit a query computes may be shown as, by Grafana's unit ids
# (grafana/packages/grafana-data/src/valueFormats/categories.ts).
GRAFANA_UNITS: dict[Unit, set[str]] = {
    RATIO: {"percentunit"},
    COUNT: {"short", "none"},
    unit(count=1, s=-1): {"cps", "ops"},
    BYTES: {"bytes", "decbytes"},
    unit(bytes=1, s=-1): {"Bps", "binBps"},
    unit(W=1): {"watt"},
    unit(C=1): {"celsius"},
    unit(Hz=1): {"hertz"},
    unit(J=1): {"joule"},
    SECONDS: {"s", "dtdurations"},
}
# Columns whose seconds-per-second rate counts busy things rather than a share
# of one: a process's CPU time per second is the cores it keeps busy (2.5
# cores, not 250 %), its run-queue wait per second the threads waiting on
# average.
COUNTED: dict[tuple[str, str], str] = {
    ("GPU processes", "C"): "CPU cores a process keeps busy",
    ("GPU processes", "D"): "threads of a process waiting for a CPU, on average",
}


def _records() -> dict[str, str]:
    return {r.record: r.expr for r in recording_rules(load_config())}


def _shown_unit(panel: dict[str, Any], ref: str) -> str:
    """The unit Grafana shows query ``ref``'s values in: a column's override
    (tables: "Value #A", or "Value" for a single query), a query's override,
    else the panel's."""
    config = panel["fieldConfig"]
    names = {f"Value #{ref}", "Value"} if len(panel["targets"]) == 1 else {f"Value #{ref}"}
    for override in config.get("overrides", []):
        matcher = override["matcher"]
        if ((matcher["id"] == "byName" and matcher["options"] in names)
                or (matcher["id"] == "byFrameRefID" and matcher["options"] == ref)):
            for prop in override["properties"]:
                if prop["id"] == "unit":
                    return str(prop["value"])
    return str(config["defaults"]["unit"])


def _hidden(panel: dict[str, Any], ref: str) -> bool:
    """A table column the panel hides (a join's helper query)."""
    for t in panel.get("transformations", []):
        hidden = t.get("options", {}).get("excludeByName", {})
        if hidden.get(f"Value #{ref}") or (len(panel["targets"]) == 1 and hidden.get("Value")):
            return True
    return False


@pytest.mark.parametrize("source", ["committed", "default"])
@pytest.mark.parametrize("which", ["node", "fleet"])
def test_every_panel_is_shown_in_the_unit_its_queries_compute(source: str, which: str) -> None:
    units = Units(_records())
    problems, checked = [], 0
    for panel in panels(_dashboards(source)[which]):
        for target in panel["targets"]:
            ref = target["refId"]
            where = (panel["title"], ref)
            if _hidden(panel, ref):
                continue
            try:
                computed = units.of(substitute(target["expr"], VARIABLES))
            except UnitError as exc:
                problems.append(f"{where}: {exc}")
                continue
            if where in COUNTED:
                assert computed == RATIO, where  # seconds per second
                computed = COUNT
            shown = _shown_unit(panel, ref)
            checked += 1
            if shown not in GRAFANA_UNITS.get(computed, set()):
                problems.append(f"{where}: computes {describe(computed)}, shown as {shown!r}")
    assert not problems, "\n".join(problems)
    assert checked >= 20, checked


def test_the_unit_reading_follows_the_arithmetic() -> None:
    """The unit checker on the shapes the panels use."""
    u = Units({"gpu:util:rate2m": "rate(gpu_busy_seconds_total[2m])"})
    assert u.of("rate(gpu_pcie_bytes_total[1m])") == unit(bytes=1, s=-1)
    assert u.of("rate(gpu_pcie_bytes_total[1m]) * 8") == unit(bytes=1, s=-1)
    assert u.of("gpu_memory_used_bytes / on (gpu) gpu_memory_total_bytes") == RATIO
    assert u.of("rate(gpu_host_cpu_iowait_seconds_total[1m]) / "
                "rate(gpu_host_cpu_seconds_total[1m])") == RATIO
    assert u.of("1 - rate(gpu_busy_seconds_total[1m])") == RATIO
    assert u.of("avg by (instance) (gpu:util:rate2m)") == RATIO
    assert u.of("count(gpu_diagnosis_active == 1) or vector(0)") == COUNT
    assert u.of("sum(gpu:util:rate2m) / count(gpu:util:rate2m)") == RATIO
    assert u.of("sum(increase(gpu_xid_errors_total[1h]))") == COUNT
    assert u.of("time() - gpu_exporter_last_poll_timestamp_seconds") == SECONDS
    assert u.of("gpu_power_watts") == unit(W=1)
    assert u.of("sum_over_time(rate(gpu_energy_joules_total[2m])[1h:60s]) * 60") == unit(J=1)
    assert u.of("sum_over_time(rate(gpu_energy_joules_total[2m])[1h:60s]) * 30") == \
        unit(J=1, s=-1)  # steps of 60 s counted as 30: not an integral
    assert u.of("x_info * on (gpu) group_left () gpu_temperature_celsius") == unit(C=1)
    assert metric_unit("gpu_clock_max_hertz").unit == unit(Hz=1)
    for bad in ("gpu_power_watts + gpu_temperature_celsius",
                "gpu_memory_used_bytes or gpu_power_watts",
                "rate(gpu_pcie_bytes_total[1m]) > gpu_memory_used_bytes"):
        with pytest.raises(UnitError):
            u.of(bad)


@pytest.mark.parametrize("source", ["committed", "default", "changed"])
def test_every_rule_grouping_keeps_the_cluster_and_names_labels_its_series_carry(
        source: str) -> None:
    """Every by/on clause of a rule that names a node (instance) or a driver
    version keeps the cluster label under its configured name; every label a
    clause names is one the expression's series carry."""
    config = CONFIGS["default" if source == "committed" else source]
    rules = _committed_rules() if source == "committed" else _generated_rules(config)
    records = {r.record for r in recording_rules(config)}
    cluster, keyed = config.cluster_label, 0
    for name, expr in rules:
        known = series_labels(expr, records)
        for kind, labels in clauses(expr):
            if kind in ("by", "include") and {"instance", "driver_version"} & set(labels):
                keyed += 1
                assert cluster in labels, (name, kind, labels)
            if known is not None:
                extra = set(labels) - known - {cluster}
                assert not extra, (name, kind, sorted(extra))
    assert keyed >= 15, keyed


# --- the rules as Prometheus and Alertmanager read them ------------------------------------------

RECORD_NAME = re.compile(r"^[a-z_]+:[a-z_]+:[a-z_0-9]+$")  # level:metric:operations


@pytest.mark.parametrize("source", ["default", "changed"])
def test_every_rule_reads_series_that_exist(source: str) -> None:
    config = CONFIGS[source]
    records = recording_rules(config)
    defined = {r.record for r in records}
    for name, expr in _generated_rules(config):
        for metric, _ in selectors(expr):
            assert metric in BY_NAME or metric in defined or metric in FOREIGN \
                or metric == "up", (name, metric)
    for r in records:
        assert RECORD_NAME.match(r.record), r.record
    by_record: dict[str, list[dict[str, str]]] = {}
    for r in records:
        by_record.setdefault(r.record, []).append(r.labels)
    for record, labels in by_record.items():
        # One record written by several rules: the same label names, told apart by value.
        assert len({tuple(sorted(x)) for x in labels}) == 1, record
        assert len({tuple(sorted(x.items())) for x in labels}) == len(labels), record


def test_every_alert_is_routable_and_has_its_runbook_section() -> None:
    rules = alert_rules(load_config())
    anchors = [r.anchor for r in rules]
    assert len(set(anchors)) == len(anchors)
    for r in rules:
        assert r.severity in ("critical", "warning", "info"), r.name
        assert r.scope in ("gpu", "node", "fleet"), r.name
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", r.anchor), r.anchor
        assert r.group.startswith("gpu-exporter."), r.group
        assert re.fullmatch(r"Gpu[A-Za-z0-9]+", r.name), r.name
        assert r.for_s >= 0 and r.summary and r.fix and r.confirm, r.name
        # An alert on one GPU names it; one on a node does not pretend to.
        assert ("{{ $labels.gpu }}" in r.description) == (r.scope == "gpu"), r.name


def test_every_alert_takes_its_for_and_severity_from_the_config_by_its_name() -> None:
    base = alert_rules(load_config())
    keys = [r.row.key if r.row is not None else r.name for r in base]
    config = load_config().model_copy(update={
        "for_overrides": {k: 7 * 3600.0 for k in keys},
        "severity_overrides": {k: "info" for k in keys}})
    for r in alert_rules(config):
        assert (r.for_s, r.severity) == (7 * 3600.0, "info"), r.name
    with pytest.raises(AlertConfigError, match="GpuNoSuchAlert"):
        alert_rules(load_config().model_copy(update={"for_overrides": {"GpuNoSuchAlert": 1.0}}))


def _recorded(config: AlertConfig) -> dict[str, set[str]]:
    return record_labels([(r.record, r.expr, r.labels) for r in recording_rules(config)])


@pytest.mark.parametrize("source", ["default", "changed"])
def test_annotations_name_labels_the_alert_carries_in_templates_prometheus_renders(
        source: str) -> None:
    config = CONFIGS[source]
    recorded = _recorded(config)
    records = set(recorded)
    for rule in alert_rules(config):
        known = series_labels(rule.expr, records, recorded)
        assert known is not None, rule.name
        known |= {config.cluster_label, *rule.labels, "severity"}
        for key, template in alert_annotations(config, rule).items():
            check_template(template)  # every action one Prometheus' Go templates render
            named = set(re.findall(r"\$labels\.(\w+)", template))
            assert named <= known, (rule.name, key, sorted(named - known))


@pytest.mark.parametrize("source", ["default", "changed"])
def test_every_matcher_and_one_to_one_match_reads_labels_the_series_have(source: str) -> None:
    """A matcher on a label a series does not have selects nothing; an on()
    match without group_left/right needs each side unique per the on() labels
    (Prometheus refuses a many-to-many match at evaluation)."""
    config = CONFIGS[source]
    recorded = _recorded(config)
    base = {"job", "instance", config.cluster_label} | {a for a, _, _ in
                                                         matchers_of(config.selector)}
    for name, expr in _generated_rules(config):
        for metric, labels in matcher_labels(expr):
            have = set(BY_NAME[metric].labels) if metric in BY_NAME else \
                recorded.get(metric, FOREIGN.get(metric, set()) | {"uid"})
            assert labels <= have | base, (name, metric, sorted(labels - have - base))
        for on, metric, fixed in one_to_one_sides(expr):
            if metric in BY_NAME:
                free = set(BY_NAME[metric].labels) - set(on) - fixed
                assert not free, (name, metric, on, sorted(free))


def test_alertmanager_routes_on_labels_the_alerts_carry() -> None:
    """Every label value alerts/alertmanager.yml routes on (beyond severity
    and the alert's name) is carried by some alert, and each value of
    severity it routes is some alert's."""
    routes = yaml.safe_load((ROOT / "alerts" / "alertmanager.yml").read_text())["route"]
    rules = alert_rules(load_config())
    carried = {(k, v) for r in rules for k, v in r.labels.items()}
    severities = {r.severity for r in rules}
    for route in routes.get("routes", []):
        for matcher in route.get("matchers", []):
            name, value = re.fullmatch(r'(\w+)="([^"]*)"', matcher).groups()  # type: ignore[union-attr]
            if name == "severity":
                assert value in severities, matcher
            else:
                assert (name, value) in carried, matcher
    xid_rows = [r for r in rules if r.row is not None and r.row.xid_tier]
    assert xid_rows and all(r.labels.get("xid_tier") == r.row.xid_tier for r in xid_rows
                            if r.row is not None)


def test_an_alert_says_it_is_reported_at_once_exactly_for_the_rows_of_facts() -> None:
    for rule in alert_rules(load_config()):
        for text in (rule.description, rule.likely_cause, rule.meaning, rule.escalate):
            assert isinstance(text, str) and text.strip(), rule.name
        if rule.row is not None:
            assert ("reported at once" in rule.description) == (
                rule.row.key in FACTS or rule.row.key in REMEMBERED), rule.name


def test_each_energy_split_the_rules_write_is_explained_on_the_dashboards() -> None:
    splits = {r.labels["split"] for r in recording_rules(load_config()) if "split" in r.labels}
    assert splits
    for build in (node_dashboard, fleet_dashboard):
        (panel,) = [p for p in panels(json.loads(to_json(build(load_config()))))
                    if p["title"].startswith("Energy by workload")]
        for split in splits:
            assert f"split {split}" in panel["description"], (panel["title"], split)


# Selectors as a user may write them: none at all (one Prometheus per exporter
# job), and one ending in a comma and a space.
SELECTORS = ["", 'job="gpu-exporter", ', ' job="gpu-exporter",']


@pytest.mark.parametrize("selector", SELECTORS)
def test_every_rule_parses_and_carries_the_selector_as_written(selector: str) -> None:
    """An empty selector leaves a bare metric name (``up{}`` is no PromQL), and
    a trailing comma is not an empty matcher."""
    config = load_config().model_copy(update={"selector": selector})
    wanted = matchers_of(selector.strip().strip(",")) if selector.strip() else frozenset()
    exprs = [r.expr for r in recording_rules(config)] + [r.expr for r in alert_rules(config)]
    for expr in exprs:
        assert "{}" not in expr and "{," not in expr and ", }" not in expr, expr
        for name, alternatives in selectors(expr):  # parses, or raises
            if exported(name):
                assert all(wanted <= found for found in alternatives), (name, expr)


def test_each_row_alert_reads_its_own_row_and_carries_its_tier() -> None:
    """A row's alert fires on that row of the diagnosis table alone (without
    its symptom and cause it fires for every active row), and a row of the Xid
    table's tiers carries its tier for Alertmanager's routes."""
    config = load_config()
    alerts = {a.name: a for a in alert_rules(config)}
    for row in ROWS:
        alert = alerts[row.alert_name]
        found = [m for name, alternatives in selectors(alert.expr)
                 if name == "gpu_diagnosis_active" for m in alternatives]
        assert found, alert.expr
        for matchers in found:
            assert ("symptom", "=", row.symptom) in matchers, (row.key, alert.expr)
            assert ("cause", "=", row.cause) in matchers, (row.key, alert.expr)
        assert alert.labels.get("xid_tier") == row.xid_tier, (row.key, alert.labels)


def test_each_gpus_worst_state_is_counted_under_its_severity() -> None:
    """The worst-severity record weighs each active row by its severity, and
    each health-state count compares with that severity's weight: weights that
    do not match the counts (or two severities at one weight) count a GPU
    under another state, or under none."""
    config = load_config()
    rules = recording_rules(config)
    (worst,) = [r for r in rules if r.record == "gpu:gpu_diagnosis_severity:max"]
    weight_of: dict[str, set[int]] = {}
    terms = re.findall(r'symptom="(\w+)", cause="(\w+)"\}\s*\*\s*(\d+)', worst.expr)
    severity = {(r.symptom, r.cause): r.severity for r in ROWS}
    for symptom, cause, weight in terms:
        weight_of.setdefault(severity[(symptom, cause)], set()).add(int(weight))
    assert len(terms) == len(ROWS)
    counted = {r.labels["state"]: int(m[1]) for r in rules
               if r.record == "instance:gpu_health_state:count"
               and (m := re.search(r"severity:max == (\d+)\)", r.expr))}
    assert set(counted) == {"critical", "warning", "info"}, counted
    for sev, weights in weight_of.items():
        assert weights == {counted[sev]}, (sev, weights, counted)
    assert counted["critical"] > counted["warning"] > counted["info"] > 0, counted


def test_no_rule_says_none_and_every_record_says_what_it_holds() -> None:
    for config in CONFIGS.values():
        for record in recording_rules(config):
            assert record.help and "None" not in record.help, record.record
        for alert in alert_rules(config):
            for key, text in alert_annotations(config, alert).items():
                assert text and "None" not in text, (alert.name, key, text)
            # A label Prometheus attaches is a string: a null one is no label.
            for key, value in alert.labels.items():
                assert isinstance(value, str) and value, (alert.name, key, value)
