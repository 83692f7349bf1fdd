"""The attribution metrics and the kube-state-metrics join: names that do
not clash with the catalog, no label Prometheus sets at scrape, the
recording rule run through the real promtool, and the design note quoting
both as defined."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from gpu_exporter.catalogs import attribution
from gpu_exporter.poll.catalog import BY_NAME, metric
from gpu_exporter_mixin.alerting.attribution import POD_OF_PROCESS_EXPR, POD_OF_PROCESS_RECORD
from tests.tools import ROOT, tool

DOC = ROOT / "docs" / "attribution.md"


def test_names_are_in_the_catalog_once_and_no_label_is_one_prometheus_sets() -> None:
    names = [m.name for m in attribution.METRICS]
    assert len(set(names)) == len(names)
    for m in attribution.METRICS:
        # The catalog's entry is this one: no other area defines the name.
        assert BY_NAME[m.name] is m
    for m in attribution.METRICS:
        assert not {"job", "instance"} & set(m.labels), m.name
        assert m.name.startswith("gpu_")


def test_workload_series_use_the_process_series_keys() -> None:
    # The join from a workload's pressure to its GPUs goes through these.
    process = set(metric("gpu_process_info").labels)
    for m in attribution.METRICS:
        if m.name.startswith("gpu_workload_"):
            assert {"pod_uid", "container_id"} <= set(m.labels) & process
            assert "slurm_job_id" in m.labels
    assert "slurm_job_id" in {label for m in attribution.METRICS
                              if m.name == "gpu_job_info" for label in m.labels}


def test_the_design_note_names_every_metric_and_quotes_the_rule() -> None:
    text = DOC.read_text()
    for m in attribution.METRICS:
        assert f"`{m.name}" in text, m.name
    assert POD_OF_PROCESS_RECORD in text
    indented = "\n".join("    " + line if line else line
                         for line in POD_OF_PROCESS_EXPR.splitlines())
    assert indented in text


def test_the_join_names_the_pod_of_each_process(tmp_path: Path) -> None:
    rules = {"groups": [{"name": "attribution", "rules": [
        {"record": POD_OF_PROCESS_RECORD, "expr": POD_OF_PROCESS_EXPR}]}]}
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    uid_a, uid_b = "6f1d3c2a-9b7e-4c1d-8e2f-0a1b2c3d4e5f", "0a0b0c0d-1111-2222-3333-444455556666"
    proc = ('gpu_process_info{{gpu="{g}",uuid="GPU-{g}",pid="{p}",pod_uid="{u}",'
            'container_id="c{p}",namespace="gpu-exporter",pod="gpu-exporter-x",'
            'job="gpu-exporter",instance="node-1"}}')
    ksm = ('kube_pod_info{{namespace="{ns}",pod="{name}",uid="{u}",pod_ip="{ip}",'
           'job="kube-state-metrics",instance="ksm-{r}"}}')
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": proc.format(g=0, p=100, u=uid_a), "values": "1x5"},
            {"series": proc.format(g=4, p=200, u=uid_b), "values": "1x5"},
            # a host process: no pod UID, so not in the result
            {"series": proc.format(g=7, p=300, u=""), "values": "1x5"},
            # two kube-state-metrics replicas, and pod A's IP changed at 2m
            {"series": ksm.format(ns="ml", name="train-a", u=uid_a, ip="10.0.0.1", r=1),
             "values": "1 1 _ _ _ _"},
            {"series": ksm.format(ns="ml", name="train-a", u=uid_a, ip="10.0.0.9", r=1),
             "values": "_ _ 1 1 1 1"},
            {"series": ksm.format(ns="ml", name="train-a", u=uid_a, ip="10.0.0.9", r=2),
             "values": "1x5"},
            {"series": ksm.format(ns="research", name="sweep-7", u=uid_b, ip="10.0.0.2", r=1),
             "values": "1x5"},
        ],
        "promql_expr_test": [{
            "expr": POD_OF_PROCESS_RECORD, "eval_time": "3m",
            "exp_samples": [
                {"labels": (f'{POD_OF_PROCESS_RECORD}{{gpu="0",uuid="GPU-0",pid="100",'
                            f'pod_uid="{uid_a}",container_id="c100",namespace="ml",'
                            'pod="train-a",job="gpu-exporter",instance="node-1"}'),
                 "value": 1},
                {"labels": (f'{POD_OF_PROCESS_RECORD}{{gpu="4",uuid="GPU-4",pid="200",'
                            f'pod_uid="{uid_b}",container_id="c200",namespace="research",'
                            'pod="sweep-7",job="gpu-exporter",instance="node-1"}'),
                 "value": 1},
            ]}],
    }]}
    (tmp_path / "join.test.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([tool("promtool"), "test", "rules", "join.test.yml"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
