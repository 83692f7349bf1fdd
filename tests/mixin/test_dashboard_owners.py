"""The dashboards' owner queries, run by promtool over series as the Prometheus
Operator stores them: every series of the exporter carries the exporter pod's
own namespace/pod/container target labels, except gpu_allocation_info, whose
owner labels ``honorLabels`` keeps.

One node, six GPUs: 0-1 held by ml/train-a, 2 by research/nb, 5 shared by
ml/infer and research/nb (time-slicing), 3 by Slurm job 4242, 4 by no one.
Proven: the fleet's namespace choice shows every GPU under All (Slurm's and
the unallocated one included) and only a chosen namespace's pods' GPUs
otherwise, in the jobs table, the throttled-GPUs table and the active-diagnoses
table; the jobs table counts, averages and ranks per workload; no owner column
ever names the exporter's own pod; the node dashboard's tables name the owner."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_exporter_mixin.alerting.config import load_config
from gpu_exporter_mixin.dashboards.build import JOBS_SHOWN
from gpu_exporter_mixin.dashboards.generate import FLEET, NODE
from gpu_exporter_mixin.dashboards.owners import Owners
from gpu_exporter_mixin.dashboards.panels import Filters
from gpu_exporter_mixin.dashboards.queries import panels, substitute
from tests.tools import tool

ROOT = Path(__file__).resolve().parents[2]
NODE_ID = {"cluster": "c1", "instance": "n1:9835", "job": "gpu-exporter"}
# What the Operator attaches to every series it scrapes: the exporter's own pod.
TARGET = {"namespace": "gpu-exporter", "pod": "gpu-exporter-x7k2p", "container": "gpu-exporter"}
BUSY_PER_MINUTE = {0: 54, 1: 30, 2: 0, 3: 60, 4: 12, 5: 36}  # seconds: 90 %, 50 %, ...
ALLOCATED = {0: [("ml", "train-a", "trainer")], 1: [("ml", "train-a", "trainer")],
             2: [("research", "nb", "jupyter")],
             5: [("ml", "infer", "server"), ("research", "nb", "jupyter")]}
DIAGNOSES = {0: [("throttled_under_load", "thermal")],
             2: [("gpu_allocated_unused", "no_process")],
             4: [("pcie_downtrained", "link_degraded"), ("clocks_capped", "application_clocks")]}
ALL = ".*"
# Grafana's values for the variables: the namespace as it sends it (All is
# the variable's custom all value, several are a regex alternation).
VARIABLES = {"cluster": ".*", "job": "gpu-exporter", "instance": ".+", "gpu": ".+",
             "datasource": "prometheus", "__rate_interval": "5m"}


def gpu(i: int) -> dict[str, str]:
    return {**NODE_ID, "gpu": str(i), "uuid": f"GPU-{i}"}


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def input_series() -> list[dict[str, str]]:
    out = []
    for i, per_minute in BUSY_PER_MINUTE.items():
        out.append(series("gpu_info", {**gpu(i), **TARGET, "driver_version": "570.86.15"},
                          "1x15"))
        out.append(series("gpu_busy_seconds_total", {**gpu(i), **TARGET},
                          f"0+{per_minute}x15"))
    for i, owners in ALLOCATED.items():
        for namespace, pod, container in owners:
            out.append(series("gpu_allocation_info", {
                **gpu(i), "namespace": namespace, "pod": pod, "container": container,
                "resource": "nvidia.com/gpu"}, "1x15"))
    for step in ("0", "batch"):  # two steps of one job: one workload
        out.append(series("gpu_job_info", {**gpu(3), **TARGET, "scheduler": "slurm",
                                           "slurm_job_id": "4242", "slurm_uid": "1000",
                                           "slurm_step": step}, "1x15"))
    for i, rows in DIAGNOSES.items():
        for symptom, cause in rows:
            out.append(series("gpu_diagnosis_active",
                              {**gpu(i), **TARGET, "symptom": symptom, "cause": cause}, "1x15"))
    # A row that does not hold (exported with --metrics.detail): never counted.
    out.append(series("gpu_diagnosis_active", {**gpu(1), **TARGET, "symptom": "memory_near_full",
                                               "cause": "oom_risk"}, "0x15"))
    out.append(series("gpu_diagnosis_not_judged", {**gpu(3), **TARGET,
                                                   "symptom": "utilization_inflated",
                                                   "cause": "small_kernels"}, "1x15"))
    for pid, i in ((100, 0), (300, 3), (400, 4)):
        labels = {**gpu(i), **TARGET, "pid": str(pid), "comm": "python", "type": "compute"}
        out.append(series("gpu_process_info", labels, "1x15"))
        out.append(series("gpu_process_memory_used_bytes", labels, "1024x15"))
    return out


def _query(rel: Path, title: str, ref: str) -> str:
    dash = json.loads((ROOT / rel).read_text())
    [panel] = [p for p in panels(dash) if p["title"] == title and p["type"] == "table"]
    [target] = [t for t in panel["targets"] if t["refId"] == ref]
    expr: str = target["expr"]
    return expr


def labels_of(**labels: str) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def pod_row(namespace: str, pod: str, container: str) -> dict[str, str]:
    return {"cluster": "c1", "held_by": "pod", "namespace": namespace, "pod": pod,
            "container": container}


TRAIN_A = pod_row("ml", "train-a", "trainer")
INFER = pod_row("ml", "infer", "server")
NB = pod_row("research", "nb", "jupyter")
SLURM = {"cluster": "c1", "held_by": "slurm job", "slurm_job_id": "4242"}
NOBODY = {"cluster": "c1", "held_by": "nobody"}
# Per workload: GPUs, mean utilization in %, active diagnoses.
JOBS = {"train-a": (TRAIN_A, 2, 70, 1), "infer": (INFER, 1, 60, 0), "nb": (NB, 2, 30, 1),
        "slurm": (SLURM, 1, 100, 0), "nobody": (NOBODY, 1, 20, 2)}
SHOWS = {ALL: list(JOBS), "ml": ["train-a", "infer"], "research": ["nb"],
         "(ml|research)": ["train-a", "infer", "nb"], "nowhere": []}


def jobs_cases(namespace: str) -> list[dict[str, Any]]:
    """The jobs table's three queries under the namespace choice: exactly
    the workloads it shows, with their numbers (utilization rounded to a %)."""
    values = {**VARIABLES, "namespace": namespace}
    rows = [JOBS[name] for name in SHOWS[namespace]]
    cases = []
    for ref, column, wrap in (("A", 1, "{}"), ("B", 2, "round(100 * ({}))"), ("C", 3, "{}")):
        expr = wrap.format(substitute(_query(FLEET, "Which jobs", ref), values))
        cases.append({"expr": expr, "eval_time": "10m", "exp_samples": [
            {"labels": labels_of(**row[0]), "value": row[column]} for row in rows]})
    return cases


THROTTLED = {"ml": [labels_of(**gpu(0), symptom="throttled_under_load", cause="thermal",
                              namespace="ml", pod="train-a", container="trainer")],
             # A row with no owner keeps its series' name (a join drops it).
             "nobody": ["gpu_diagnosis_active" + labels_of(**gpu(4), symptom="clocks_capped",
                                                           cause="application_clocks")]}
BY_ROW = {"ml": [("throttled_under_load", "thermal")],
          "research": [("gpu_allocated_unused", "no_process")],
          "nobody": [("pcie_downtrained", "link_degraded"),
                     ("clocks_capped", "application_clocks")]}


def owner_table_cases(namespace: str, shown: list[str]) -> list[dict[str, Any]]:
    """The throttled-GPUs and active-diagnoses tables under the choice;
    ``shown``: the owners (a namespace, or "nobody") whose GPUs it shows."""
    values = {**VARIABLES, "namespace": namespace}
    throttled = [row for owner in shown for row in THROTTLED.get(owner, [])]
    by_row = [r for owner in shown for r in BY_ROW.get(owner, [])]
    return [
        {"expr": substitute(_query(FLEET, "Throttled GPUs", "A"), values), "eval_time": "10m",
         "exp_samples": [{"labels": labels, "value": 1} for labels in throttled]},
        {"expr": substitute(_query(FLEET, "Active diagnoses by row", "A"), values),
         "eval_time": "10m",
         "exp_samples": [{"labels": labels_of(cluster="c1", symptom=s, cause=c), "value": 1}
                         for s, c in by_row]},
    ]


def node_cases() -> list[dict[str, Any]]:
    """The node dashboard: the process table's owner query names each
    process's owner (pod, Slurm job, or none: never the exporter's pod), its
    other queries drop the exporter pod's labels so the rows merge, and the
    active-diagnoses table names the owner of each row."""
    values = {**VARIABLES, "instance": "n1:9835"}

    def proc(pid: int, i: int, **owner: str) -> str:
        return labels_of(**gpu(i), pid=str(pid), comm="python", type="compute", **owner)

    diag = _query(NODE, "Active diagnoses: what is wrong and why, and what is not judged", "A")
    ml = {"namespace": "ml", "pod": "train-a", "container": "trainer"}
    return [
        {"expr": substitute(_query(NODE, "GPU processes", "E"), values), "eval_time": "10m",
         "exp_samples": [
             {"labels": proc(100, 0, **ml), "value": 1},
             {"labels": proc(300, 3, slurm_job_id="4242"), "value": 1},
             {"labels": "gpu_process_info" + proc(400, 4), "value": 1}]},
        {"expr": substitute(_query(NODE, "GPU processes", "A"), values), "eval_time": "10m",
         "exp_samples": [{"labels": "gpu_process_memory_used_bytes" + proc(p, i), "value": 1024}
                         for p, i in ((100, 0), (300, 3), (400, 4))]},
        {"expr": substitute(diag, values), "eval_time": "10m", "exp_samples": [
            {"labels": labels_of(**gpu(0), symptom="throttled_under_load", cause="thermal",
                                 state="active", **ml), "value": 1},
            {"labels": labels_of(**gpu(2), symptom="gpu_allocated_unused", cause="no_process",
                                 state="active", namespace="research", pod="nb",
                                 container="jupyter"), "value": 1},
            {"labels": labels_of(**gpu(3), symptom="utilization_inflated",
                                 cause="small_kernels", state="not judged",
                                 slurm_job_id="4242"), "value": 1},
            {"labels": "gpu_diagnosis_active" + labels_of(
                **gpu(4), symptom="pcie_downtrained", cause="link_degraded", state="active"),
             "value": 1},
            {"labels": "gpu_diagnosis_active" + labels_of(
                **gpu(4), symptom="clocks_capped", cause="application_clocks", state="active"),
             "value": 1}]},
    ]


def bounded_cases() -> list[dict[str, Any]]:
    """Bounded to the two worst: the most diagnoses first (no one's GPU: 2),
    then, of one diagnosis each, the less busy (research/nb at 30 % before
    ml/train-a at 70 %)."""
    f = Filters.of(load_config())
    _, util, diagnoses = Owners(f.gpu, f.gpu_key, f.cluster).per_workload(
        f"rate(gpu_busy_seconds_total{{{f.gpu}}}[$__rate_interval])", 2)
    values = {**VARIABLES, "namespace": ALL}
    return [{"expr": substitute(diagnoses, values), "eval_time": "10m", "exp_samples": [
                {"labels": labels_of(**NOBODY), "value": 2},
                {"labels": labels_of(**NB), "value": 1}]},
            {"expr": f"round(100 * ({substitute(util, values)}))", "eval_time": "10m",
             "exp_samples": [{"labels": labels_of(**NOBODY), "value": 20},
                             {"labels": labels_of(**NB), "value": 30}]}]


def promtool(tmp_path: Path, cases: list[dict[str, Any]]) -> None:
    doc = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": input_series(), "promql_expr_test": cases}]}
    (tmp_path / "owners.test.yml").write_text(yaml.safe_dump(doc, width=10_000))
    result = subprocess.run([tool("promtool"), "test", "rules", "owners.test.yml"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


@pytest.mark.parametrize("namespace", list(SHOWS))
def test_the_jobs_table_shows_the_workloads_the_namespace_choice_shows(
        tmp_path: Path, namespace: str) -> None:
    promtool(tmp_path, jobs_cases(namespace))


@pytest.mark.parametrize(("namespace", "shown"), [
    (ALL, ["ml", "research", "nobody"]), ("ml", ["ml"]), ("research", ["research"]),
    ("(ml|research)", ["ml", "research"]), ("nowhere", [])])
def test_the_owner_tables_show_the_gpus_the_namespace_choice_shows(
        tmp_path: Path, namespace: str, shown: list[str]) -> None:
    promtool(tmp_path, owner_table_cases(namespace, shown))


def test_the_node_tables_name_the_owner_never_the_exporters_pod(tmp_path: Path) -> None:
    promtool(tmp_path, node_cases())


def test_the_jobs_table_is_bounded_to_the_worst(tmp_path: Path) -> None:
    promtool(tmp_path, bounded_cases())
    for ref in "ABC":
        assert f"topk({JOBS_SHOWN}," in _query(FLEET, "Which jobs", ref)


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """The harness itself: a workload the choice does not show, expected,
    fails promtool."""
    [gpus, *_] = jobs_cases("ml")
    gpus["exp_samples"].append({"labels": labels_of(**NB), "value": 2})
    with pytest.raises(AssertionError):
        promtool(tmp_path, [gpus])
