"""Jobs spread over nodes on real Prometheus: ``gpu-exporter fleet``'s job
shapes (``place_jobs``: Slurm jobs of four nodes each, one straggler job whose
last node's GPUs work at a third of the others' pace, and balanced jobs), each
node the real exporter on its own simulated node, scraped by the shipped
multi-cluster setup (a cluster agent remote-writing to the central store that
holds the rules' test build: every ``for:`` capped at seconds).

Proven against the central store: GpuJobStragglerNode fires for each
straggler job's slow node, and for no other, within five minutes of the
fleet's start; the straggler recording rule never held a node of a balanced
job, nor a fast node of the straggler job, at any evaluation; the fleet
dashboard's "Jobs over nodes" panels, as Grafana sends them, show every job's
nodes with the job's median and name the slow nodes only.

What bounds the time is Prometheus, not the rule: the utilization record is a
rate over 2m, and the rate of a series younger than its window reads low in
proportion to its age (tests/mixin/test_live_stack.py), so the job's median node
reads above the rule's ``job_busy`` (50 %) only about a minute after the
first scrape. The default form (3 jobs of 4 one-GPU nodes in one cluster)
runs in about a minute and a half; ``GPU_EXPORTER_LONG_TESTS=1`` runs 128
nodes of 8 GPUs in two clusters (32 jobs, 4 of them straggling).
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from benchmarks.central_store import CentralStore
from gpu_exporter.commands.fleet import FleetNode, parse_jobs, parse_mix, place_jobs, plan
from gpu_exporter_mixin.alerting.owner_rules import JOB_STRAGGLER_RECORD
from gpu_exporter_mixin.dashboards.build import JOB_STRAGGLER_NODES, JOBS_OVER_NODES
from gpu_exporter_mixin.dashboards.generate import FLEET
from gpu_exporter_mixin.dashboards.queries import panels, substitute
from tests.mixin.test_fleet_stack import CONFIG, ROOT, TEST_BUILD
from tests.mixin.test_live_stack import EXPORTER_CONFIG, wait_for
from tests.tools import tool

ALERT = "GpuJobStragglerNode"
# Within this of the fleet's start, the slow nodes must be named.
NAMED_WITHIN_S = 300.0

LONG = os.environ.get("GPU_EXPORTER_LONG_TESTS") == "1"
# (nodes, clusters, GPUs per node, jobs per cluster, scrape interval)
NODES, CLUSTERS, GPUS, JOBS, SCRAPE = (
    (128, ("cluster-a", "cluster-b"), None, "straggler=2,balanced=14", "5s") if LONG
    else (12, ("cluster-a",), 1, "straggler=1,balanced=2", "1s"))
if LONG:
    pytestmark = pytest.mark.timeout(3 * 900)


@dataclass
class Run:
    store: CentralStore
    started: float  # the fleet's processes launched

    @property
    def nodes(self) -> list[FleetNode]:
        return self.store.nodes


def slow_nodes(nodes: list[FleetNode]) -> set[tuple[str, str]]:
    return {(n.cluster, n.name) for n in nodes
            if any(e.alert == ALERT for e in n.kind.expects)}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    workdir = tmp_path_factory.mktemp("fleet-jobs")
    exporter_config = workdir / "exporter.yml"
    config: dict[str, Any] = {
        **EXPORTER_CONFIG, "poll": {**EXPORTER_CONFIG["poll"], "timeout": "10s"}}
    if LONG:  # 128 nodes of 8 GPUs on few cores: as the long fleet stack test polls
        config["poll"]["interval"] = "5s"
        config["diagnosis"] = {"window": "10s", "clear_after": "10s"}
    exporter_config.write_text(yaml.safe_dump(config))
    nodes = place_jobs(plan(NODES, CLUSTERS, parse_mix("healthy=1"), GPUS), parse_jobs(JOBS))
    store = CentralStore(workdir, nodes, TEST_BUILD, tool("prometheus"),
                         scrape_interval=SCRAPE, evaluation_interval="1s",
                         batch_send_deadline="1s",
                         exporter_args=["--config.file", str(exporter_config),
                                        "--log.level", "warn"])
    store.start()
    try:
        started = time.time()
        for ready in store.ready_urls():
            wait_for(ready, lambda u=ready: urllib.request.urlopen(u, timeout=2).status == 200,
                     timeout=60)
        yield Run(store, started)
    finally:
        store.stop()


def test_the_fleet_has_straggler_and_balanced_jobs(run: Run) -> None:
    """The fixture's plan is what the other tests assume: every node in a job
    of four, one slow node per straggler job."""
    jobs = parse_jobs(JOBS)
    assert all(n.kind.name in ("job", "job-slow") for n in run.nodes)
    assert len(slow_nodes(run.nodes)) == jobs["straggler"] * len(CLUSTERS)


def test_the_slow_node_is_named_within_five_minutes_and_no_other(run: Run) -> None:
    store = run.store
    want = slow_nodes(run.nodes)

    def named() -> set[tuple[str, str]] | None:
        assert not store.stopped(), f"stopped: {store.stopped()}"
        got = {(a["labels"].get("cluster", ""), a["labels"].get("instance", ""))
               for a in store.alerts()
               if a["labels"]["alertname"] == ALERT and a["state"] == "firing"}
        assert got <= want, f"named a node that is not slow: {sorted(got - want)}"
        return got if got == want else None

    wait_for("the straggler jobs' slow nodes named", named,
             max(1.0, run.started + NAMED_WITHIN_S - time.time()), interval=1)
    took = time.time() - run.started
    print(f"{ALERT}: {len(want)} slow node(s) named {took:.0f} s after the fleet started")
    # Every firing alert names its job's Slurm id, the one its node holds.
    owners = {a["labels"]["instance"]: a["labels"]["owner"] for a in store.alerts()
              if a["labels"]["alertname"] == ALERT}
    for node in run.nodes:
        if node.name in owners:
            job_id = node.kind.overrides["tenants"]["slurm_jobs"][0]["job_id"]
            assert owners[node.name] == f"slurm job {job_id}"
    # Since the start, at no evaluation did the straggler record hold another
    # node: not a balanced job's, not the straggler job's fast ones.
    window = int(time.time() - run.started) + 5
    ever = store.query(f"max_over_time({JOB_STRAGGLER_RECORD}[{window}s])")
    held = {(s["metric"].get("cluster", ""), s["metric"]["instance"]) for s in ever}
    assert held == want
    # And the balanced jobs were judged, not skipped: their nodes have a
    # median and a spread like the straggler job's.
    judged = {s["metric"]["owner"]
              for s in store.query("owner:gpu_utilization_ratio:median_abs_deviation")}
    assert len(judged) == sum(parse_jobs(JOBS).values()) * len(CLUSTERS)


def test_the_job_panels_show_each_jobs_nodes_and_name_the_slow_one(run: Run) -> None:
    """The fleet dashboard's job panels, as Grafana sends them with every node
    chosen: each job node's row carries its Slurm job and a median; the slow
    node's share sits below its job's median by more than the rule's floor,
    the others' within it; the
    straggler panel lists the slow nodes only."""
    dashboard = json.loads((ROOT / FLEET).read_text())
    targets = {p["title"]: {t["refId"]: t["expr"] for t in p["targets"]}
               for p in panels(dashboard)}
    want = slow_nodes(run.nodes)
    job_of = {n.name: f"slurm job {n.kind.overrides['tenants']['slurm_jobs'][0]['job_id']}"
              for n in run.nodes}
    for cluster in CLUSTERS:
        values = {"cluster": cluster, "job": "gpu-exporter", "instance": ".+", "gpu": ".+",
                  "namespace": ".*", "datasource": "prometheus"}

        def table(title: str, cluster: str = cluster,
                  values: dict[str, str] = values) -> dict[str, dict[str, float]]:
            rows: dict[str, dict[str, float]] = {}
            for ref, expr in targets[title].items():
                for series in run.store.query(substitute(expr, values)):
                    m = series["metric"]
                    assert m["cluster"] == cluster and m["owner"] == job_of[m["instance"]]
                    rows.setdefault(m["instance"], {})[ref] = float(series["value"][1])
            return rows

        mine = {n.name for n in run.nodes if n.cluster == cluster}
        slow_here = {w for w in want if w[0] == cluster}

        def shown(mine: set[str] = mine, slow_here: set[tuple[str, str]] = slow_here,
                  cluster: str = cluster) -> dict[str, dict[str, float]] | None:
            rows = table(JOBS_OVER_NODES)
            named = {(cluster, n) for n in table(JOB_STRAGGLER_NODES)}
            return rows if set(rows) == mine and named == slow_here else None

        # In any test order: the slow nodes are named once the rates have data.
        nodes = wait_for(f"{cluster}: every job node and the slow ones in the job panels",
                         shown, max(60.0, run.started + NAMED_WITHIN_S - time.time()),
                         interval=2)
        # Far below: by at least the rule's floor; the fast nodes within it.
        gap = CONFIG.fleet.job_straggler.min_gap
        for name, row in nodes.items():
            share, median = row["A"], row["B"]
            if (cluster, name) in want:
                assert share < median - gap, (name, row)
            else:
                assert abs(share - median) < gap, (name, row)
        stragglers = table(JOB_STRAGGLER_NODES)
        assert {(cluster, n) for n in stragglers} == slow_here
        for row in stragglers.values():
            assert row["A"] < row["B"] - gap
