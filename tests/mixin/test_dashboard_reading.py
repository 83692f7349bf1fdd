"""The dashboards as a person reads them: every line named in its legend, every
column of a table under a header or hidden, each panel's unit stated, a value
that is on or off shown as words, a stat of several series naming each, colours
that change where the exporter's diagnosis judges (from the same settings), a
panel of problems turning at the first one, and the variables the queries use
defined (one node on the node dashboard, any number on the fleet's). Checked on
the committed files and on the generator's output for the default and a changed
configuration (other cluster label, selector and diagnosis thresholds)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from gpu_exporter.diagnosis.table import ROWS
from gpu_exporter.poll.catalog import BY_NAME
from gpu_exporter_mixin.alerting.config import load_config
from gpu_exporter_mixin.alerting.rules import alert_rules, recording_rules
from gpu_exporter_mixin.dashboards.build import fleet_dashboard, node_dashboard
from gpu_exporter_mixin.dashboards.generate import to_json
from gpu_exporter_mixin.dashboards.queries import panels
from tests.mixin.test_dashboard_layout import NAMES
from tests.mixin.test_dashboard_layout import dashboard as layout_dashboard

# A configuration whose diagnosis thresholds differ from every default, so a
# colour step is known to come from the settings and not from a constant.
_DEFAULT = load_config()
JUDGED_CONFIG = _DEFAULT.model_copy(update={
    "cluster_label": "k8s_cluster", "selector": 'job="gpu"',
    "diagnosis": _DEFAULT.diagnosis.model_copy(update={
        "idle_utilization": 0.07, "busy_utilization": 0.63, "memory_near_full_ratio": 0.93,
        "iowait_high": 0.17, "io_pressure_high": 0.23, "run_queue_wait_high": 0.41}),
    "fleet": _DEFAULT.fleet.model_copy(update={
        "straggler": _DEFAULT.fleet.straggler.model_copy(update={
            "siblings_busy": 0.71, "below_ratio": 0.53})}),
})
ALL = [*NAMES, "judged-node", "judged-fleet"]
# The panels whose series the diagnosis judges: on the node dashboard utilization,
# idle time, memory, iowait, pressure and swap; on the fleet's stragglers and
# utilization by node.
JUDGED_NODE, JUDGED_FLEET = 6, 2


def dashboard(name: str) -> dict[str, Any]:
    if name.startswith("judged"):
        build = node_dashboard if name.endswith("node") else fleet_dashboard
        return dict(json.loads(to_json(build(JUDGED_CONFIG))))
    return layout_dashboard(name)


def config_of(name: str) -> Any:
    return JUDGED_CONFIG if name.startswith("judged") else _DEFAULT


def defaults(panel: dict[str, Any]) -> dict[str, Any]:
    return dict(panel["fieldConfig"]["defaults"])


def steps(panel: dict[str, Any]) -> list[float]:
    return [s["value"] for s in defaults(panel)["thresholds"]["steps"][1:]]


def organize(panel: dict[str, Any]) -> dict[str, Any]:
    (options,) = [t["options"] for t in panel.get("transformations", [])
                  if t["id"] == "organize"]
    return dict(options)


@pytest.mark.parametrize("name", ALL)
def test_every_line_and_stat_is_named_in_its_legend(name: str) -> None:
    """Grafana's automatic legend is the series' whole label set (or the
    query): every query of a graph, a stat or a bar gauge names what it draws,
    and two queries of one panel never share a name."""
    for panel in panels(dashboard(name)):
        if panel["type"] == "table":
            continue
        legends = [t.get("legendFormat", "") for t in panel["targets"]]
        for legend in legends:
            assert legend and legend != "__auto", (panel["title"], legends)
        assert len(set(legends)) == len(legends), (panel["title"], legends)


@pytest.mark.parametrize("name", ALL)
def test_every_value_a_table_returns_is_under_a_header_or_hidden(name: str) -> None:
    """A table shows each value it returns under a header written for a person,
    or hides it (no raw ``Value #B``), never ``Time`` or ``__name__``; it sorts
    by a column it shows; and a column's unit names a field it shows."""
    checked = 0
    for panel in panels(dashboard(name)):
        if panel["type"] != "table":
            continue
        checked += 1
        options = organize(panel)
        renamed, hidden = options["renameByName"], set(options["excludeByName"])
        assert not set(renamed) & hidden, panel["title"]
        assert "Time" in hidden and "__name__" not in renamed, panel["title"]
        # Grafana's merge names the value of one query "Value", of several "Value #refId".
        targets = panel["targets"]
        values = ({"Value"} if len(targets) == 1
                  else {f"Value #{t['refId']}" for t in targets})
        assert values <= set(renamed) | hidden, (panel["title"], values)
        for order in panel.get("options", {}).get("sortBy", []):
            assert order["displayName"] in renamed.values(), (panel["title"], order)
        for override in panel["fieldConfig"].get("overrides", []):
            if override["matcher"]["id"] == "byName":
                assert override["matcher"]["options"] not in hidden, panel["title"]
    assert checked >= 3


@pytest.mark.parametrize("name", ALL)
def test_every_panel_states_its_unit_and_what_it_shows(name: str) -> None:
    for panel in panels(dashboard(name)):
        assert defaults(panel).get("unit"), panel["title"]
        assert panel.get("description"), panel["title"]


@pytest.mark.parametrize("name", ALL)
def test_a_table_of_the_worst_few_lists_them_worst_first(name: str) -> None:
    """A table that keeps the top N of something (topk) shows them from the
    top: sorted by that value, highest first."""
    found = 0
    for panel in panels(dashboard(name)):
        if panel["type"] != "table" or not any("topk(" in t["expr"] for t in panel["targets"]):
            continue
        found += 1
        (order,) = panel["options"].get("sortBy", [None])
        assert order is not None and order["desc"] is True, panel["title"]
    assert found == (0 if name.endswith("node") else 2), found


@pytest.mark.parametrize("name", ALL)
def test_bars_of_counts_start_at_0(name: str) -> None:
    for panel in panels(dashboard(name)):
        if panel["type"] == "bargauge":
            assert defaults(panel).get("min") == 0, panel["title"]


# The catalog's gauges that are 1 or 0 ("1 when ...", "1 while ...").
BOOLEAN = {m.name for m in BY_NAME.values()
           if m.kind == "gauge" and re.match(r"1 (when|while) ", m.help)}


@pytest.mark.parametrize("name", ALL)
def test_a_value_that_is_on_or_off_reads_as_words(name: str) -> None:
    """A stat or a timeline of a 1-or-0 series (the catalog says so) maps both
    values to words of their own and colours 1; every value mapping names what
    each value means."""
    assert {"gpu_exporter_nvml_up", "gpu_throttle_reason_active"} <= BOOLEAN
    seen = 0
    for panel in panels(dashboard(name)):
        mappings = defaults(panel).get("mappings", [])
        for mapping in mappings:
            texts = {k: v.get("text") for k, v in mapping["options"].items()}
            assert all(texts.values()) and len(set(texts.values())) == len(texts), texts
            assert all(v.get("color") for v in mapping["options"].values()), panel["title"]
        if panel["type"] not in ("stat", "state-timeline"):
            continue
        metrics = {m for t in panel["targets"] for m in re.findall(r"\b[a-z_:]+(?=\{)", t["expr"])}
        bare = all(re.fullmatch(r"(?:min|max)?\(?\s*[a-z_]+\{[^}]*\}\s*\)?", t["expr"])
                   for t in panel["targets"])
        if bare and metrics and metrics <= BOOLEAN:
            seen += 1
            (mapping,) = mappings
            assert set(mapping["options"]) == {"0", "1"}, panel["title"]
            assert mapping["options"]["1"]["color"] != "transparent", panel["title"]
    assert seen == (2 if name.endswith("node") else 0)


@pytest.mark.parametrize("name", ALL)
def test_a_stat_of_several_series_names_each(name: str) -> None:
    """A stat whose legend varies by a label draws one value per series: each
    shows its name beside its value, or the reader sees numbers without which."""
    for panel in panels(dashboard(name)):
        if panel["type"] != "stat":
            continue
        several = any("{{" in t.get("legendFormat", "") for t in panel["targets"])
        mode = panel["options"].get("textMode")
        assert (mode == "value_and_name") == several, (panel["title"], mode)


def judged(name: str) -> dict[str, tuple[float, ...]]:
    """The colour steps a panel reading what the diagnosis judges must hold:
    the series' key (a metric in the query, the query's shape) -> the settings
    the diagnosis compares it with."""
    config = config_of(name)
    d, s = config.diagnosis, config.fleet.straggler
    return {
        "rate(gpu_busy_seconds_total": (d.idle_utilization, d.busy_utilization),
        "1 - rate(gpu_busy_seconds_total": (1 - d.idle_utilization,),
        "gpu_memory_used_bytes": (d.memory_near_full_ratio,),
        "gpu_host_cpu_iowait_seconds_total": (d.iowait_high,),
        "gpu_host_pressure_stalled_seconds_total": (d.io_pressure_high,),
        "gpu_process_run_queue_wait_seconds_total": (d.run_queue_wait_high,),
        "gpu_host_swap_used_bytes": (d.swap_bytes_per_s,),  # beside its traffic
        "instance:gpu_utilization_ratio:avg": (d.idle_utilization, d.busy_utilization),
        "gpu:gpu_utilization_ratio:straggler": (s.siblings_busy * s.below_ratio,
                                                s.siblings_busy),
    }


@pytest.mark.parametrize("name", ALL)
def test_colours_change_where_the_diagnosis_judges(name: str) -> None:
    """A panel of a series the diagnosis compares with a setting changes colour
    at that setting (the same settings the alerts read), and a graph of a share
    draws it as a line."""
    found = 0
    for panel in panels(dashboard(name)):
        exprs = [t["expr"] for t in panel["targets"]]
        for key, want in judged(name).items():
            first = exprs[0] if exprs else ""  # the series the panel is about
            if not (first.startswith(key) if key.startswith(("1 -", "rate("))
                    else re.search(rf"(?<![\w:]){re.escape(key)}", first)
                    and not first.startswith("count(")):
                continue
            found += 1
            for value in want:
                assert any(abs(v - value) < 1e-9 for v in steps(panel)), (
                    panel["title"], key, value, steps(panel))
            if panel["type"] == "timeseries" and defaults(panel)["unit"] == "percentunit":
                style = defaults(panel)["custom"].get("thresholdsStyle", {})
                assert style.get("mode") in ("line", "dashed"), (panel["title"], style)
    assert found == (JUDGED_NODE if name.endswith("node") else JUDGED_FLEET), found


# What a panel of problems counts: the exporter's findings, NVML, Xids,
# stragglers, the GPU's error counters.
PROBLEMS = re.compile(r"gpu_diagnosis_active|gpu_diagnosis_not_judged|gpu_exporter_nvml_up|"
                      r"gpu_xid_errors|straggler|gpu_throttle_reason_active|"
                      r"gpu_pcie_replays|gpu_pcie_aer_errors|gpu_ecc_errors|gpu_row_remap|"
                      r"gpu_remapped_rows")


@pytest.mark.parametrize("name", ALL)
def test_a_panel_of_problems_turns_at_the_first_one(name: str) -> None:
    """Whatever draws it (a stat, a graph, a timeline), a count of
    problems changes colour at the first problem (a rate at its first event
    within a few minutes), never later."""
    found = 0
    for panel in panels(dashboard(name)):
        exprs = [t["expr"] for t in panel["targets"]]
        if panel["type"] == "table" or not all(PROBLEMS.search(e) for e in exprs):
            continue  # a table's columns say more than how many
        if panel["title"] == "Stragglers":  # utilization against the siblings'
            continue
        found += 1
        first = steps(panel)[:1]
        assert first and 0 < first[0] <= 1, (panel["title"], steps(panel))
        if not any(e.startswith("rate(") for e in exprs):
            assert first == [1], (panel["title"], steps(panel))
    assert found >= (6 if name.endswith("node") else 2), found


def _used_variables(text: str) -> set[str]:
    return set(re.findall(r"\$\{?(\w+)", text)) - {"__rate_interval", "__interval", "__range"}


@pytest.mark.parametrize("name", ALL)
def test_the_variables_the_queries_use_are_the_ones_defined(name: str) -> None:
    """Every variable a query, a title or another variable reads is defined,
    and every variable defined is read; the node dashboard shows one node
    (its node variable takes one value), the fleet any number of them."""
    dash = dashboard(name)
    defined = {v["name"]: v for v in dash["templating"]["list"]}
    used: set[str] = set()
    for panel in panels(dash):
        used |= _used_variables(panel["title"])
        for t in panel["targets"]:
            used |= _used_variables(t["expr"]) | _used_variables(json.dumps(t["datasource"]))
    for v in defined.values():
        query = v.get("query")
        used |= _used_variables(json.dumps(query) if query is not None else "")
    assert used == set(defined), (sorted(used), sorted(defined))
    instance = defined["instance"]
    if name.endswith("node"):
        assert not instance.get("multi") and not instance.get("includeAll"), instance
    else:
        assert instance.get("multi") and instance.get("includeAll"), instance


@pytest.mark.parametrize("source", ["committed", "default", "changed", "judged"])
def test_a_label_has_one_header_on_every_table(source: str) -> None:
    """The same label is the same column on every table of both dashboards (a
    reader comparing the node's and the fleet's tables finds it by one name)."""
    headers: dict[str, set[str]] = {}
    for which in ("node", "fleet"):
        for panel in panels(dashboard(f"{source}-{which}")):
            if panel["type"] != "table":
                continue
            for label, header in organize(panel)["renameByName"].items():
                if not label.startswith("Value"):
                    headers.setdefault(label, set()).add(header)
    several = {label: names for label, names in headers.items() if len(names) > 1}
    assert not several, several
    assert len(headers) >= 10, sorted(headers)


@pytest.mark.parametrize("source", ["committed", "default", "changed", "judged"])
def test_each_link_is_titled_as_the_dashboard_it_opens(source: str) -> None:
    dashboards = {which: dashboard(f"{source}-{which}") for which in ("node", "fleet")}
    by_uid = {d["uid"]: d["title"] for d in dashboards.values()}
    for dash in dashboards.values():
        for link in dash["links"]:
            uid = link["url"].split("/")[2]
            assert link["title"] == by_uid[uid], (link, by_uid)


# A matcher on a diagnosis label: symptom="x", symptom=~"x|y", cause!="z".
DIAGNOSIS_MATCHER = re.compile(r'\b(symptom|cause)\s*(=~|!~|=|!=)\s*"([^"]*)"')


def test_every_symptom_and_cause_a_query_names_is_in_the_diagnosis_table() -> None:
    """A symptom or cause spelled wrong in a matcher selects nothing, and a
    count of it reads 0 through ``or vector(0)``; each one every rule and
    panel names is a row's, as the exporter exports it."""
    symptoms = {r.symptom for r in ROWS}
    causes = {r.cause for r in ROWS}
    exprs = [r.expr for r in recording_rules(_DEFAULT)]
    exprs += [r.expr for r in alert_rules(_DEFAULT)]
    for which in ("node", "fleet"):
        for source in ("committed", "default"):
            exprs += [t["expr"] for p in panels(dashboard(f"{source}-{which}"))
                      for t in p["targets"]]
    named = 0
    for expr in exprs:
        for label, _op, value in DIAGNOSIS_MATCHER.findall(expr):
            known = symptoms if label == "symptom" else causes
            for one in value.split("|"):
                named += 1
                assert one in known, (label, one, expr)
    assert named >= 10


@pytest.mark.parametrize("source", ["committed", "default", "changed"])
def test_every_health_state_the_rules_write_has_its_colour(source: str) -> None:
    """The fleet's GPUs by state colours each state the health-state record
    writes, and no other (a state spelled otherwise in either is drawn in the
    palette's next colour, or not at all)."""
    written = {r.labels["state"] for r in recording_rules(_DEFAULT)
               if r.record == "instance:gpu_health_state:count"}
    (bars,) = [p for p in panels(dashboard(f"{source}-fleet")) if p["type"] == "bargauge"]
    coloured = {o["matcher"]["options"] for o in bars["fieldConfig"]["overrides"]
                if o["matcher"]["id"] == "byName"}
    assert written == coloured == {"critical", "warning", "info", "idle", "ok"}, (written,
                                                                               coloured)


@pytest.mark.parametrize("name", ALL)
def test_a_panel_that_says_the_namespace_choice_applies_reads_it(name: str) -> None:
    """The description is the promise: a panel that says the namespace
    choice applies (or that a chosen namespace shows its pods only) reads
    ``$namespace``, and one that reads it says so."""
    promised = re.compile(r"namespace choice|chosen namespace")
    found = 0
    for panel in panels(dashboard(name)):
        reads = any("$namespace" in t["expr"] for t in panel["targets"])
        says = bool(promised.search(panel.get("description", "")))
        found += says
        assert reads == says, (panel["title"], reads, says)
    assert found == (0 if name.endswith("node") else 4), found


# The colour of each health state: a severity's as the stats draw it.
STATE_COLOURS = {"critical": "red", "warning": "orange", "info": "blue", "ok": "green",
                 "idle": "text"}


@pytest.mark.parametrize("name", [n for n in ALL if n.endswith("fleet")])
def test_each_health_state_is_drawn_in_its_colour(name: str) -> None:
    (bars,) = [p for p in panels(dashboard(name)) if p["type"] == "bargauge"]
    colours = {o["matcher"]["options"]: [p["value"]["fixedColor"] for p in o["properties"]
                                         if p["id"] == "color"]
               for o in bars["fieldConfig"]["overrides"]}
    assert colours == {state: [colour] for state, colour in STATE_COLOURS.items()}, colours


# The labels that name one GPU or one MIG device on it.
DEVICE_LABELS = {"gpu", "uuid", "gpu_instance", "compute_instance"}


@pytest.mark.parametrize("name", ALL)
def test_a_process_is_joined_to_the_allocation_of_its_own_device(name: str) -> None:
    """A process on a MIG device is named by the pod the kubelet allocated
    that device to: a join of processes to allocations keys on every device
    label both series carry (the catalog's), or one pod names every process of
    the GPU."""
    shared = (set(BY_NAME["gpu_process_info"].labels)
              & set(BY_NAME["gpu_allocation_info"].labels) & DEVICE_LABELS)
    assert shared == DEVICE_LABELS
    found = 0
    for panel in panels(dashboard(name)):
        for t in panel["targets"]:
            if "gpu_process_info" not in t["expr"]:
                continue
            for key in re.findall(r"bottomk by \(([^)]*)\) \(1, gpu_allocation_info", t["expr"]):
                found += 1
                assert shared <= {k.strip() for k in key.split(",")}, (panel["title"], key)
    assert found == (1 if name.endswith("node") else 0), found
