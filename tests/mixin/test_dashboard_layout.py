"""The dashboards as Grafana reads them, whatever the generator's settings:
the grid, the time settings, each panel's query type for what it draws, and
the fields its tables rename or hide. Checked on the committed files and on
the generator's output for the default and a changed configuration."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter_mixin.alerting.config import load_config
from gpu_exporter_mixin.alerting.rules import recording_rules
from gpu_exporter_mixin.dashboards.build import fleet_dashboard, node_dashboard
from gpu_exporter_mixin.dashboards.generate import FLEET, NODE, to_json
from gpu_exporter_mixin.dashboards.queries import panels, substitute
from tests.promql_facts import clauses, matcher_labels, record_labels, series_labels

ROOT = Path(__file__).resolve().parents[2]
CHANGED = load_config().model_copy(update={"cluster_label": "k8s_cluster",
                                           "selector": 'job="gpu"'})
# Grafana's dashboard grid is 24 columns wide.
GRID_COLUMNS = 24
# Panels that draw one value per series now, and those that draw a line over time.
INSTANT = {"stat", "table", "bargauge"}
RANGE = {"timeseries", "state-timeline"}
# Grafana's named colours the dashboards use, or a hex colour.
COLOURS = re.compile(r"^(green|orange|red|blue|yellow|purple|text|#[0-9a-fA-F]{6})$")
VARIABLES = {"cluster": ".*", "job": "gpu", "instance": "n:1", "gpu": ".+", "namespace": ".*",
             "datasource": "prometheus"}


NAMES = [f"{source}-{which}" for source in ("committed", "default", "changed")
         for which in ("node", "fleet")]


def dashboard(name: str) -> dict[str, Any]:
    """The dashboard as committed, or as the generator makes it now (never
    cached: mutation testing changes the generator between tests)."""
    source, which = name.split("-")
    if source == "committed":
        return dict(json.loads((ROOT / (NODE if which == "node" else FLEET)).read_text()))
    config = load_config() if source == "default" else CHANGED
    build = node_dashboard if which == "node" else fleet_dashboard
    return dict(json.loads(to_json(build(config))))


@pytest.mark.parametrize("name", NAMES)
def test_each_line_of_panels_fills_the_grid_at_one_height(name: str) -> None:
    lines: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for panel in dashboard(name)["panels"]:
        lines[panel["gridPos"]["y"]].append(panel)
    assert lines
    for y, line in sorted(lines.items()):
        widths = [p["gridPos"]["w"] for p in line]
        assert sum(widths) == GRID_COLUMNS, (y, [(p["title"], p["gridPos"]) for p in line])
        heights = {p["gridPos"]["h"] for p in line}
        assert len(heights) == 1, (y, [(p["title"], p["gridPos"]) for p in line])
        placed = sorted((p["gridPos"]["x"], p["gridPos"]["w"]) for p in line)
        starts = [sum(w for _, w in placed[:k]) for k in range(len(placed))]
        assert [x for x, _ in placed] == starts, (y, placed)  # side by side, no overlap


@pytest.mark.parametrize("name", NAMES)
def test_time_refresh_and_zone_are_what_grafana_accepts(name: str) -> None:
    dash = dashboard(name)
    assert re.fullmatch(r"now-\d+[smhdwMy]", dash["time"]["from"]), dash["time"]
    assert dash["time"]["to"] == "now"
    # Refreshed no faster than Prometheus can have new data (a 15 s scrape at least).
    refresh = re.fullmatch(r"(\d+)([smhd])", dash["refresh"])
    assert refresh, dash["refresh"]
    seconds = int(refresh[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[refresh[2]]
    assert seconds >= 15
    assert dash["timezone"] in ("browser", "utc")
    assert dash["title"] and dash["description"] and dash["uid"]
    assert "gpu-exporter" in dash["tags"]


@pytest.mark.parametrize("name", NAMES)
def test_each_panel_asks_for_what_it_draws(name: str) -> None:
    """A stat, a table or a bar gauge shows one value per series now: its
    queries are instant; a graph or a state timeline draws a range."""
    for panel in panels(dashboard(name)):
        kind = panel["type"]
        assert kind in INSTANT | RANGE, (panel["title"], kind)
        for t in panel["targets"]:
            assert bool(t.get("instant")) == (kind in INSTANT), (panel["title"], t["refId"])
            assert bool(t.get("range")) == (kind in RANGE), (panel["title"], t["refId"])
            if kind == "table":
                assert t.get("format") == "table", (panel["title"], t["refId"])


@pytest.mark.parametrize("name", NAMES)
def test_thresholds_rise_and_are_colours(name: str) -> None:
    for panel in panels(dashboard(name)):
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert steps[0]["value"] is None, panel["title"]
        values = [s["value"] for s in steps[1:]]
        assert values == sorted(values) and len(set(values)) == len(values), panel["title"]
        for step in steps:
            assert COLOURS.match(step["color"]), (panel["title"], step)
        if panel["fieldConfig"]["defaults"].get("unit") == "percentunit":
            assert all(0 < v <= 1 for v in values), (panel["title"], values)


@pytest.mark.parametrize("name", NAMES)
def test_tables_rename_and_hide_only_fields_their_queries_return(name: str) -> None:
    rules = recording_rules(load_config())
    records = {r.record for r in rules}
    recorded = record_labels([(r.record, r.expr, r.labels) for r in rules])
    cluster = _cluster(name)
    for panel in panels(dashboard(name)):
        fields: set[str] = {"Time", "Value"} | {f"Value #{t['refId']}" for t in panel["targets"]}
        any_label = False
        for t in panel["targets"]:
            labels = series_labels(substitute(t["expr"], VARIABLES), records, recorded)
            any_label |= labels is None
            fields |= (labels or set()) | {cluster}
        for t in panel.get("transformations", []):
            options = t.get("options", {})
            named = set(options.get("renameByName", {})) | set(options.get("excludeByName", {}))
            unknown = named - fields
            assert any_label or not unknown, (panel["title"], sorted(unknown))
        for override in panel["fieldConfig"].get("overrides", []):
            if override["matcher"]["id"] == "byName":
                assert override["matcher"]["options"] in fields | {"critical", "warning", "info",
                                                                   "idle", "ok"}, panel["title"]
            for prop in override["properties"]:
                # The field config properties the dashboards set, as Grafana names them.
                assert prop["id"] in ("unit", "color"), (panel["title"], prop)
                if prop["id"] == "color":
                    assert set(prop["value"]) == {"mode", "fixedColor"}, prop
                    assert prop["value"]["mode"] == "fixed", prop
                    assert COLOURS.match(prop["value"]["fixedColor"]), prop


def _cluster(name: str) -> str:
    return CHANGED.cluster_label if name.startswith("changed") else "cluster"



@pytest.mark.parametrize("name", NAMES)
def test_every_grouping_and_legend_names_labels_the_series_carry(name: str) -> None:
    """Every label a by/on/group clause or a legend names is one the query's
    series carry (or the cluster label); a grouping by node keeps the cluster."""
    rules = recording_rules(load_config())
    records = {r.record for r in rules}
    recorded = record_labels([(r.record, r.expr, r.labels) for r in rules])
    cluster = _cluster(name)
    checked = 0
    for panel in panels(dashboard(name)):
        for t in panel["targets"]:
            expr = substitute(t["expr"], VARIABLES)
            known = series_labels(expr, records, recorded)
            for metric, labels in matcher_labels(expr):
                if known is not None:
                    assert labels <= known | {cluster}, (panel["title"], metric, labels)
            for kind, labels in clauses(expr):
                checked += 1
                if kind in ("by", "include") and "instance" in labels:
                    assert cluster in labels, (panel["title"], t["refId"], kind, labels)
                if known is not None:
                    assert set(labels) <= known | {cluster}, (panel["title"], t["refId"], labels)
            legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat", "")))
            if known is not None:
                assert legend <= known | {cluster}, (panel["title"], t["refId"], legend)
    assert checked >= 10


@pytest.mark.parametrize("name", NAMES)
def test_variables_named_in_titles_exist_and_a_row_titled_by_one_repeats_over_it(
        name: str) -> None:
    dash = dashboard(name)
    variables = {v["name"] for v in dash["templating"]["list"]}
    repeated = []
    for panel in dash["panels"]:
        used = set(re.findall(r"\$\{?(\w+)", panel["title"]))
        assert used <= variables, (panel["title"], used)
        if panel["type"] == "row" and used:
            assert panel.get("repeat") in used, panel["title"]
        if panel.get("repeat"):
            assert panel["repeat"] in variables
            repeated.append(panel["repeat"])
    assert repeated == (["gpu"] if name.endswith("node") else [])


@pytest.mark.parametrize("name", NAMES)
def test_each_dashboard_links_to_the_other_keeping_time_and_variables(name: str) -> None:
    config = load_config()
    other = config.fleet_dashboard_uid if name.endswith("node") else config.node_dashboard_uid
    (link,) = dashboard(name)["links"]
    assert link["type"] == "link" and link["url"] == f"/d/{other}/{other}"
    assert link["includeVars"] is True and link["keepTime"] is True
    assert link["title"]


@pytest.mark.parametrize("name", NAMES)
def test_a_graph_of_shares_is_drawn_from_0_to_1(name: str) -> None:
    """A share of time or memory lies within 0-1: its graph's axis says so."""
    for panel in panels(dashboard(name)):
        defaults = panel["fieldConfig"]["defaults"]
        if panel["type"] == "timeseries" and defaults["unit"] == "percentunit":
            assert (defaults.get("min"), defaults.get("max")) == (0, 1), panel["title"]


# What a stat of problems counts: the exporter's findings, NVML, Xids, stragglers.
PROBLEMS = ("gpu_diagnosis_active", "gpu_diagnosis_not_judged", "gpu_exporter_nvml_up",
            "gpu_xid_errors", "straggler")


@pytest.mark.parametrize("name", NAMES)
def test_a_stat_of_problems_turns_at_the_first_one(name: str) -> None:
    for panel in panels(dashboard(name)):
        if panel["type"] != "stat":
            continue
        if not any(p in t["expr"] for t in panel["targets"] for p in PROBLEMS):
            continue
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert [s["value"] for s in steps[1:2]] == [1], (panel["title"], steps)


@pytest.mark.parametrize("name", NAMES)
def test_a_graph_of_what_cannot_be_negative_starts_at_0(name: str) -> None:
    for panel in panels(dashboard(name)):
        defaults = panel["fieldConfig"]["defaults"]
        if panel["type"] == "timeseries" and defaults["unit"] != "celsius":
            assert defaults.get("min") == 0, panel["title"]
