"""Panel helpers over grafana-foundation-sdk's builders: every panel gets a
description, a unit and thresholds, and reads the ``$datasource`` variable."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from grafana_foundation_sdk.builders import bargauge, common, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from gpu_exporter_mixin.alerting.config import AlertConfig
from gpu_exporter_mixin.alerting.rule_types import GPU_LABELS

DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

GREEN, ORANGE, RED, BLUE = "green", "orange", "red", "blue"



@dataclass(frozen=True)
class Filters:
    """The label matchers every query carries and the labels that name one GPU,
    with the cluster label under its configured name (``cluster_label``)."""

    node: str  # one or more nodes: cluster, job, instance
    gpu: str  # ... and GPUs of them
    gpu_key: str  # the labels of one GPU, for ``on (...)``
    cluster: str  # the cluster label's name

    @classmethod
    def of(cls, config: AlertConfig) -> Filters:
        c = config.cluster_label
        node = f'{c}=~"$cluster", job=~"$job", instance=~"$instance"'
        return cls(node=node, gpu=f'{node}, gpu=~"$gpu"',
                   gpu_key=", ".join((c, *GPU_LABELS)), cluster=c)


@dataclass(frozen=True)
class Q:
    """One PromQL query of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass(frozen=True)
class Steps:
    """Threshold steps: the base colour, then (value, colour) from low to high."""

    base: str = GREEN
    steps: tuple[tuple[float, str], ...] = ()

    def build(self) -> db.ThresholdsConfig:
        out = [dm.Threshold(value=None, color=self.base)]
        out += [dm.Threshold(value=v, color=c) for v, c in self.steps]
        return db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(out)


@dataclass(frozen=True)
class Layout:
    w: int = 12
    h: int = 8


@dataclass
class Common:
    title: str
    description: str
    unit: str
    queries: Sequence[Q]
    thresholds: Steps = field(default_factory=Steps)
    layout: Layout = field(default_factory=Layout)
    min: float | None = None
    max: float | None = None


def _targets(queries: Sequence[Q]) -> list[cogbuilder.Builder[cogvariants.Dataquery]]:
    out: list[cogbuilder.Builder[cogvariants.Dataquery]] = []
    for i, q in enumerate(queries):
        t = prom.Dataquery().expr(q.expr).ref_id(chr(ord("A") + i)).datasource(DATASOURCE)
        t = t.legend_format(q.legend or "__auto")
        t = t.instant() if q.instant else t.range()
        if q.table:
            t = t.format(pm.PromQueryFormat.TABLE)
        out.append(t)
    return out


P = TypeVar("P", timeseries.Panel, stat.Panel, table.Panel, statetimeline.Panel, bargauge.Panel)


def _common(panel: P, c: Common) -> P:
    panel = panel.title(c.title).description(c.description).unit(c.unit) \
        .datasource(DATASOURCE).targets(_targets(c.queries)).thresholds(c.thresholds.build()) \
        .height(c.layout.h).span(c.layout.w)
    if c.min is not None:
        panel = panel.min(c.min)
    if c.max is not None:
        panel = panel.max(c.max)
    return panel


def graph(c: Common, thresholds_line: bool = False) -> timeseries.Panel:
    p = _common(timeseries.Panel(), c).fill_opacity(10).line_width(1) \
        .legend(common.VizLegendOptions().display_mode(cm.LegendDisplayMode.LIST)
                .placement(cm.LegendPlacement.BOTTOM).show_legend(True))
    if thresholds_line:
        p = p.thresholds_style(common.GraphThresholdsStyleConfig()
                               .mode(cm.GraphThresholdsStyleMode.DASHED))
    return p


def single(c: Common, text: bool = False) -> stat.Panel:
    p = _common(stat.Panel(), c).color_mode(cm.BigValueColorMode.BACKGROUND) \
        .graph_mode(cm.BigValueGraphMode.NONE) \
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    if text:
        p = p.text_mode(cm.BigValueTextMode.VALUE_AND_NAME)
    return p


def bars(c: Common) -> bargauge.Panel:
    return _common(bargauge.Panel(), c).display_mode(cm.BarGaugeDisplayMode.BASIC) \
        .orientation(cm.VizOrientation.HORIZONTAL) \
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))


def timeline(c: Common, mappings: list[dm.ValueMapping]) -> statetimeline.Panel:
    return _common(statetimeline.Panel(), c).mappings(mappings).show_value(
        cm.VisibilityMode.NEVER).merge_values(True).fill_opacity(80).line_width(0)


def grid(c: Common, columns: dict[str, str], units: dict[str, str] | None = None,
         hide: Sequence[str] = ("Time",), sort_by: str | None = None) -> table.Panel:
    """A table of instant queries merged on their labels. ``columns`` renames
    fields (e.g. ``{"Value #A": "GPU memory"}``); ``units`` sets a column's unit;
    ``sort_by`` names a column (as renamed) the rows are sorted by, highest first."""
    p = _common(table.Panel(), c).filterable(True) \
        .with_transformation(dm.DataTransformerConfig(id_val="merge", options={})) \
        .with_transformation(dm.DataTransformerConfig(id_val="organize", options={
            "excludeByName": {name: True for name in hide},
            "renameByName": dict(columns),
        }))
    for field_name, unit in (units or {}).items():
        p = p.override_by_name(field_name, [dm.DynamicConfigValue(id_val="unit", value=unit)])
    if sort_by is not None:
        p = p.sort_by([common.TableSortByFieldState().display_name(sort_by).desc(True)])
    return p


def on_off(off: str, on: str, on_color: str) -> list[dm.ValueMapping]:
    return [dm.ValueMap(options={
        "0": dm.ValueMappingResult(text=off, color="transparent", index=0),
        "1": dm.ValueMappingResult(text=on, color=on_color, index=1),
    })]


def row(title: str, repeat: str | None = None) -> db.Row:
    r = db.Row(title)
    return r.repeat(repeat) if repeat else r


def variables(config: AlertConfig, multi_instance: bool,
              namespace: bool = False) -> list[cogbuilder.Builder[dm.VariableModel]]:
    def query(name: str, label: str, q: str, description: str, multi: bool,
              all_value: str = ".+") -> db.QueryVariable:
        v = db.QueryVariable(name).label(label).description(description).datasource(DATASOURCE) \
            .query({"query": q, "refId": name}).refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED) \
            .sort(dm.VariableSort.NATURAL_ASC)
        return v.multi(True).include_all(True).all_value(all_value) if multi else v

    c = config.cluster_label
    # The exporters' selector (alerts/config.yaml) picks the jobs offered.
    exporters = f"gpu_info{{{config.selector.strip().strip(',')}, {c}=~\"$cluster\"}}"
    out: list[cogbuilder.Builder[dm.VariableModel]] = [
        db.DatasourceVariable("datasource").label("Data source").type("prometheus")
        .description("The Prometheus that scrapes the GPU exporters, or the central store "
                     "their clusters' Prometheus servers write to."),
        # All clusters is ".*", which also matches series without the label:
        # a Prometheus that serves one cluster needs no cluster label at all.
        query("cluster", "Cluster", f"label_values(gpu_info, {c})",
              f"The cluster (label {c}) the GPU nodes belong to.", True, all_value=".*"),
        query("job", "Job", f"label_values({exporters}, job)",
              "Prometheus job of the GPU exporters.", False),
        query("instance", "Node",
              f'label_values(gpu_info{{{c}=~"$cluster", job=~"$job"}}, instance)',
              "The exporter's target (one per GPU node).", multi_instance),
        query("gpu", "GPU",
              f'label_values(gpu_info{{{c}=~"$cluster", job=~"$job", '
              'instance=~"$instance"}, gpu)',
              "GPU index (NVML order) on the node.", True),
    ]
    if namespace:
        # All is ".*", which also matches the empty namespace: the owner
        # queries (owners.py) show every GPU under All, owned or not.
        out.append(query(
            "namespace", "Namespace",
            f'label_values(gpu_allocation_info{{{c}=~"$cluster", job=~"$job", '
            'instance=~"$instance"}, namespace)',
            "Kubernetes namespaces of the pods the selected nodes' GPUs are allocated to. "
            "All shows every GPU, Slurm jobs' and unallocated ones included; a chosen "
            "namespace shows only its pods' GPUs in the tables that name owners (jobs, "
            "throttled GPUs, active diagnoses).", True, all_value=".*"))
    return out
