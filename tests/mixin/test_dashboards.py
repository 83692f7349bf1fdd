"""The Grafana dashboards, offline: the committed JSON is the generator's,
it is valid against grafana-foundation-sdk's dashboard model, every panel has a
description, a unit and thresholds, every query parses as PromQL (promql-parser)
and names only metrics of the exporter's catalog or recording rules.

That every query returns data is proven live in tests/mixin/test_live_stack.py."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import dashboard as dm

from benchmarks.fleet_scale import fleet_queries
from gpu_exporter.poll.catalog import BY_NAME, DETAIL
from gpu_exporter_mixin.alerting.config import load_config
from gpu_exporter_mixin.alerting.generate import RULES
from gpu_exporter_mixin.alerting.promql import metric_names
from gpu_exporter_mixin.dashboards.generate import FLEET, NODE, differences
from gpu_exporter_mixin.dashboards.queries import panel_queries, panels, substitute
from tests.tools import tool

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = {"node": ROOT / NODE, "fleet": ROOT / FLEET}
VARIABLES = {"cluster": ".*", "job": "gpu-exporter", "instance": "node-a:9835", "gpu": ".+",
             "namespace": ".*", "datasource": "prometheus"}


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARDS[name].read_text())
    return data


def _recording_rules() -> set[str]:
    groups = yaml.safe_load((ROOT / RULES).read_text())["groups"]
    return {r["record"] for g in groups for r in g["rules"] if "record" in r}


def test_committed_dashboards_are_what_the_generator_produces() -> None:
    assert differences(load_config()) == [], \
        "regenerate with: .venv/bin/python -m gpu_exporter_mixin.dashboards"


@pytest.mark.parametrize("name", DASHBOARDS)
def test_dashboard_validates_against_the_sdk_model(name: str) -> None:
    """Decoded into the SDK's typed model and encoded again, nothing is lost:
    every key is one the model knows, with a value of its type."""
    register_default_plugins()
    raw = _load(name)
    model = dm.Dashboard.from_json(raw)
    assert json.loads(json.dumps(model, cls=JSONEncoder)) == raw
    assert model.uid and model.title and model.description


def test_round_trip_would_catch_an_unknown_key() -> None:
    register_default_plugins()
    raw = _load("node")
    raw["panels"][1]["colour"] = "red"
    model = dm.Dashboard.from_json(raw)
    assert json.loads(json.dumps(model, cls=JSONEncoder)) != raw


@pytest.mark.parametrize("name", DASHBOARDS)
def test_variables(name: str) -> None:
    variables = {v["name"]: v for v in _load(name)["templating"]["list"]}
    # The namespace filter is the fleet's: the node page shows one node whole.
    extra = ["namespace"] if name == "fleet" else []
    assert list(variables) == ["datasource", "cluster", "job", "instance", "gpu", *extra]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for var in ("cluster", "job", "instance", "gpu"):
        assert variables[var]["datasource"]["uid"] == "${datasource}"
        assert variables[var]["description"]
    assert variables["gpu"]["multi"] and variables["gpu"]["includeAll"]


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_panel_has_description_unit_thresholds_and_the_datasource(name: str) -> None:
    found = list(panels(_load(name)))
    assert found
    ids = [p["id"] for p in _load(name)["panels"]]
    assert len(ids) == len(set(ids))
    for panel in found:
        title = panel["title"]
        assert panel.get("description", "").strip(), f"{title}: no description"
        defaults = panel["fieldConfig"]["defaults"]
        assert defaults.get("unit"), f"{title}: no unit"
        steps = defaults["thresholds"]["steps"]
        assert steps and steps[0]["value"] is None, f"{title}: no base threshold"
        values = [s["value"] for s in steps[1:]]
        assert values == sorted(values), f"{title}: thresholds out of order"
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"], f"{title}: no query"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_query_parses_and_names_known_metrics(name: str) -> None:
    known = set(BY_NAME) | _recording_rules()
    for title, ref, expr in panel_queries(_load(name)):
        names = metric_names(substitute(expr, VARIABLES))  # raises if it does not parse
        assert names, f"{title}/{ref}: selects no metric"
        unknown = names - known
        assert not unknown, f"{title}/{ref}: {sorted(unknown)} neither in the catalog " \
                            "nor a recording rule"


@pytest.mark.parametrize("name", DASHBOARDS)
def test_dashboards_need_no_detail_series(name: str) -> None:
    # What a panel shows must be there at the default settings: a family only
    # --metrics.detail exports would leave it empty on most nodes.
    used = _metrics_of(name) & DETAIL
    assert not used, f"{name}: {sorted(used)} are exported with --metrics.detail only"


def test_substitute_fills_every_variable() -> None:
    assert substitute('rate(x{a=~"$job"}[$__rate_interval]) * ${gpu}', VARIABLES) == \
        'rate(x{a=~"gpu-exporter"}[1m]) * .+'
    with pytest.raises(KeyError):
        substitute("x{a=\"$nope\"}", VARIABLES)


def _metrics_of(name: str) -> set[str]:
    out: set[str] = set()
    for _, _, expr in panel_queries(_load(name)):
        out |= metric_names(substitute(expr, VARIABLES))
    return out


def test_node_dashboard_shows_what_the_on_call_needs() -> None:
    metrics = _metrics_of("node")
    for needed in (
            "gpu_diagnosis_active", "gpu_busy_seconds_total", "gpu_sm_active_seconds_total",
            "gpu_throttle_seconds_total",
            "gpu_memory_used_bytes", "gpu_power_watts", "gpu_power_limit_watts",
            "gpu_clock_hertz", "gpu_clock_max_hertz", "gpu_throttle_reason_active",
            "gpu_temperature_celsius", "gpu_temperature_threshold_celsius",
            "gpu_pcie_link_width", "gpu_pcie_link_width_max", "gpu_pcie_link_generation",
            "gpu_pcie_link_generation_max", "gpu_pcie_bytes_total", "gpu_pcie_replays_total",
            "gpu_pcie_aer_errors_total", "gpu_ecc_errors_total", "gpu_remapped_rows_total",
            "gpu_row_remap_pending", "gpu_row_remap_failed", "gpu_xid_errors_total",
            "gpu_xid_errors_all_total",
            "gpu_process_memory_used_bytes", "gpu_process_sm_utilization_ratio",
            "gpu_process_cpu_seconds_total", "gpu_process_run_queue_wait_seconds_total",
            "gpu_host_cpu_iowait_seconds_total", "gpu_host_cpu_seconds_total",
            "gpu_host_pressure_stalled_seconds_total",
            "gpu_host_swap_used_bytes"):
        assert needed in metrics, needed
    dash = _load("node")
    kinds = {p["title"]: p["type"] for p in panels(dash)}
    assert kinds["Throttle reasons"] == "state-timeline"
    assert kinds["GPU processes"] == "table"
    repeated = [p for p in dash["panels"] if p["type"] == "row" and p.get("repeat")]
    assert [r["repeat"] for r in repeated] == ["gpu"]
    temps = [e for t, _, e in panel_queries(dash) if t.startswith("Temperature")]
    assert any('threshold="slowdown"' in e for e in temps)


def test_fleet_dashboard_shows_states_throttled_downtrained_stragglers_drivers() -> None:
    titles = {p["title"] for p in panels(_load("fleet"))}
    for needed in ("GPUs by state", "Throttled GPUs", "Downtrained links", "Stragglers",
                   "Driver versions"):
        assert needed in titles, needed
    assert {"instance:gpu_health_state:count", "gpu:gpu_utilization_ratio:straggler",
            "gpu_info"} <= _metrics_of("fleet")


def test_the_fleet_filters_owner_tables_by_namespace() -> None:
    """The namespace variable lists the namespaces GPUs are allocated to on
    the selected nodes; All is ".*", which the owner queries read as every
    GPU, owned or not (tests/mixin/test_dashboard_owners.py runs them); every table
    that names owners, and only those, follows it."""
    dash = _load("fleet")
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ns = variables["namespace"]
    assert ns["query"]["query"] == ('label_values(gpu_allocation_info{cluster=~"$cluster", '
                                    'job=~"$job", instance=~"$instance"}, namespace)')
    assert ns["multi"] and ns["includeAll"] and ns["allValue"] == ".*"
    assert ns["datasource"]["uid"] == "${datasource}"
    owner_aware = {(p["title"], p["type"]) for p in panels(dash)
                   if any("$namespace" in t["expr"] for t in p["targets"])}
    assert owner_aware == {("Which jobs", "table"), ("Throttled GPUs", "table"),
                           ("Active diagnoses by row", "table"),
                           ("Energy by workload", "table")}
    # The energy table names each owner in one column (the recording rule's).
    own_columns = owner_aware - {("Active diagnoses by row", "table"),
                                 ("Energy by workload", "table")}
    for panel in panels(dash):
        if (panel["title"], panel["type"]) in own_columns:
            renamed = panel["transformations"][1]["options"]["renameByName"]
            assert {"namespace", "pod", "container", "slurm_job_id"} <= set(renamed), \
                panel["title"]


def test_the_jobs_table_per_workload_worst_first() -> None:
    [jobs] = [p for p in panels(_load("fleet")) if p["title"] == "Which jobs"]
    exprs = {t["refId"]: t["expr"] for t in jobs["targets"]}
    assert set(exprs) == {"A", "B", "C"}
    assert all(t["instant"] and t["format"] == "table" for t in jobs["targets"])
    assert "rate(gpu_busy_seconds_total{" in exprs["B"]
    assert all("gpu_allocation_info{" in e and "gpu_job_info{" in e for e in exprs.values())
    renamed = jobs["transformations"][1]["options"]["renameByName"]
    assert [renamed[v] for v in ("Value #A", "Value #B", "Value #C")] == \
        ["GPUs", "utilization", "diagnoses"]
    assert jobs["options"]["sortBy"] == [{"displayName": "diagnoses", "desc": True}]


def test_fleet_aggregations_keep_the_cluster() -> None:
    """Every by (...) and on (...) of the fleet dashboard that names a node,
    a GPU, a workload or a table row keeps the cluster label."""
    keyed = {"instance", "gpu", "namespace", "pod", "slurm_job_id", "held_by", "symptom",
             "driver_version"}
    clauses = 0
    for title, ref, expr in panel_queries(_load("fleet")):
        for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
            labels = {x.strip() for x in clause.split(",") if x.strip()}
            if labels & keyed:
                clauses += 1
                assert "cluster" in labels, f"{title}/{ref}: {clause!r} drops the cluster"
    assert clauses >= 30


def test_provisioning_files() -> None:
    provider = yaml.safe_load(
        (ROOT / "grafana/provisioning/dashboards/gpu-exporter.yaml").read_text())
    assert provider["apiVersion"] == 1
    (prov,) = provider["providers"]
    assert prov["type"] == "file" and prov["options"]["path"]
    sources = yaml.safe_load(
        (ROOT / "grafana/provisioning/datasources/prometheus.yaml").read_text())
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus" and source["url"].startswith("http")


def _promtool_test(directory: Path, name: str, doc: dict[str, Any]) -> None:
    """Run the promtool unit test ``doc`` (written as ``name``); fail with its output."""
    (directory / name).write_text(yaml.safe_dump(doc))
    result = subprocess.run([tool("promtool"), "test", "rules", name], cwd=directory,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_xid_panel_shows_the_first_xid(tmp_path: Path) -> None:
    """The node dashboard's Xid panel, run by promtool over what the exporter
    exports: a GPU's first Xid (its all-codes total from 0, the code's own
    series appearing at 1) is 1 in a range that covers it, in total and under
    its code; a range before or after it shows none."""
    (panel,) = [p for p in panels(_load("node")) if p["title"] == "Xid errors in the time range"]
    gpu = 'gpu="0", instance="node-a:9835", job="gpu-exporter", uuid="GPU-node-a-0000"'

    (target,) = panel["targets"]
    cases = []
    for at, window, total, codes in (
            ("10m", "10m", 1, {"79": 1}),  # covers the Xid at 6m
            ("8m", "5m", 1, {"79": 1}),
            ("4m", "3m", 0, {}),  # before it
            ("15m", "5m", 0, {})):  # after it
        expected = [{"labels": '{xid="all codes"}', "value": total}]
        expected += [{"labels": f'{{xid="{code}"}}', "value": n} for code, n in codes.items()]
        cases.append({"expr": substitute(target["expr"], {**VARIABLES, "__range": window}),
                      "eval_time": at, "exp_samples": expected})
    doc = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": f"gpu_xid_errors_all_total{{{gpu}}}", "values": "0x5 1x10"},
            {"series": f'gpu_xid_errors_total{{{gpu}, xid="79"}}', "values": "_ _ _ _ _ _ 1x9"},
        ],
        "promql_expr_test": cases,
    }]}
    _promtool_test(tmp_path, "xid-panel.test.yml", doc)


ENERGY_GPU = 'cluster="c1", gpu="0", instance="node-a:9835", job="gpu-exporter", uuid="GPU-0"'


@pytest.mark.parametrize(("name", "title", "key"), [
    ("node", "Energy by workload in the time range", 'gpu="0"'),
    ("fleet", "Energy by workload", 'cluster="c1"'),
])
def test_the_energy_panels_show_the_joules_a_workload_used(
        tmp_path: Path, name: str, title: str, key: str) -> None:
    """Both dashboards' energy tables, run by promtool with the recording
    rules over what the exporter exports. A GPU whose counter grows 600 J a
    minute (10 J/s) is allocated from 11 to 20 min: its owner used 6000 J in
    the ten minutes to 20:30 (ten one-minute steps of 600 J, 11 to 20), 3000 J
    in the five to 20:30 and still 6000 J in the twenty to 30:30, where the
    GPU's 6000 J of 21 to 30 min are no one's; before the allocation it is
    no one's (3000 J in the five to 10:30). A job that ran part of a range is
    counted for that part. (Every range ends half a step past a step, so no
    version's rule on whether a range's first step counts changes the sums;
    none starts before 5 min, where the rate of a counter that began at 0
    still ramps up over its 5 min window.)"""
    (panel,) = [p for p in panels(_load(name)) if p["title"] == title]
    (target,) = panel["targets"]
    owner = f'{{{key}, owner="ml/train-a/trainer", split="whole"}}'
    nobody = f'{{{key}, split="unowned"}}'
    cases = []
    for at, window, expected in (("20m30s", "10m", [(owner, 6000)]),
                                 ("20m30s", "5m", [(owner, 3000)]),
                                 ("30m30s", "20m", [(owner, 6000), (nobody, 6000)]),
                                 ("10m30s", "5m", [(nobody, 3000)])):
        cases.append({"expr": substitute(target["expr"], {**VARIABLES, "__range": window}),
                      "eval_time": at, "exp_samples": [{"labels": labels, "value": joules}
                                                       for labels, joules in expected]})
    doc = {"rule_files": [str(ROOT / RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": f"gpu_energy_joules_total{{{ENERGY_GPU}}}", "values": "0+600x40"},
            {"series": f'gpu_info{{{ENERGY_GPU}}}', "values": "1x40"},
            # Allocated from 11 min to 20 min, then gone (the staleness
            # marker Prometheus writes when the exporter stops exporting it).
            {"series": f'gpu_allocation_info{{{ENERGY_GPU}, namespace="ml", pod="train-a", '
                       'container="trainer"}', "values": "_x11 1x9 stale"},
        ],
        "promql_expr_test": cases,
    }]}
    _promtool_test(tmp_path, "energy-panel.test.yml", doc)


def test_the_fleet_benchmark_fills_in_every_variable() -> None:
    """benchmarks/fleet_scale.py times every fleet query as Grafana sends it:
    a variable the dashboard gains must get its value there too."""
    queries = fleet_queries(15.0)
    assert len(queries) == len(list(panel_queries(_load("fleet"))))
    assert all("$" not in q for _, _, _, q in queries)
