"""A simulated fleet on real Prometheus, as a multi-cluster setup runs it: the
fleet's nodes (``gpu-exporter fleet``'s plan: each the real exporter on its own
simulated node and port) in two clusters, one Prometheus agent per cluster
(deploy/central-store/cluster-agent.yml) scraping its cluster's file_sd file
and remote-writing to a central Prometheus (deploy/central-store/central.yml)
that holds the rules.

Proven here, against the central store only: every node arrives with its
cluster; every fleet dashboard panel query returns data, for each cluster, with
that cluster's label and nodes; each fleet alert fires for exactly the nodes
whose kind should trigger it (a node that reboots with a GPU missing during the
run included) and for no other.

The default form is 16 nodes of 2 GPUs (the mixed node keeps its 8) scraped
every second. ``GPU_EXPORTER_LONG_TESTS=1`` runs 128 nodes of 8 GPUs. The
central store runs the rules' test build (alerts/gpu-exporter.rules.test-build.yml:
the production rules with every ``for:`` capped), so alerts fire in seconds.
Every process listens on 127.0.0.1 with a random port and a temporary
directory, and is stopped by the fixture; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.central_store import CentralStore
from gpu_exporter.alerting.config import load_config
from gpu_exporter.alerting.rules import GROUP_FLEET, alert_rules
from gpu_exporter.dashboards.generate import FLEET
from gpu_exporter.dashboards.queries import panel_queries, panels, substitute
from gpu_exporter.fleet import DEFAULT_MIX, FleetNode, parse_mix, plan
from tests.test_live_stack import EXPORTER_CONFIG, RATE_WINDOW_FILLED_S, wait_for
from tests.tools import tool

ROOT = Path(__file__).resolve().parent.parent
TEST_BUILD = ROOT / "alerts" / "gpu-exporter.rules.test-build.yml"
CLUSTERS = ("cluster-a", "cluster-b")
JOB = "gpu-exporter"
CONFIG = load_config()
FLEET_ALERTS = sorted(r.name for r in alert_rules(CONFIG) if r.group == GROUP_FLEET)

LONG = os.environ.get("GPU_EXPORTER_LONG_TESTS") == "1"
NODES, GPUS, SCRAPE, TIMEOUT = (128, None, "5s", 900.0) if LONG else (16, 2, "1s", 240.0)


def firing(store: CentralStore) -> set[tuple[str, str, str, str]]:
    """(alert, cluster, instance, gpu) of every firing fleet alert."""
    return {(a["labels"]["alertname"], a["labels"].get("cluster", ""),
             a["labels"].get("instance", ""), a["labels"].get("gpu", ""))
            for a in store.alerts()
            if a["state"] == "firing" and a["labels"]["alertname"] in FLEET_ALERTS}


def expected_alerts(nodes: list[FleetNode]) -> set[tuple[str, str, str, str]]:
    return {(e.alert, n.cluster, n.name, "" if e.gpu is None else str(e.gpu))
            for n in nodes for e in n.kind.expects}


@dataclass
class Central:
    store: CentralStore
    settled_at: float  # every node seen and the change made: from here nothing may misfire
    windows_filled_at: float  # the nodes scraped for a whole utilization rate window

    @property
    def nodes(self) -> list[FleetNode]:
        return self.store.nodes


@pytest.fixture(scope="module")
def central(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Central]:
    workdir = tmp_path_factory.mktemp("fleet-stack")
    exporter_config = workdir / "exporter.yml"
    # A loaded machine can starve a simulated NVML call past the default 2 s
    # deadline, and a GPU skipped for it would look like a GPU gone: this test
    # is about the fleet's rules, so the deadline is wide.
    exporter_config.write_text(yaml.safe_dump(
        {**EXPORTER_CONFIG, "poll": {**EXPORTER_CONFIG["poll"], "timeout": "10s"}}))
    nodes = plan(NODES, CLUSTERS, parse_mix(DEFAULT_MIX), GPUS)
    store = CentralStore(workdir, nodes, TEST_BUILD, tool("prometheus"),
                         scrape_interval=SCRAPE, evaluation_interval="1s",
                         batch_send_deadline="1s",
                         exporter_args=["--config.file", str(exporter_config),
                                        "--log.level", "warn"])
    store.start()
    started = time.time()
    try:
        for ready in store.ready_urls():
            wait_for(ready, lambda u=ready: urllib.request.urlopen(u, timeout=2).status == 200,
                     timeout=60)
        want = {(n.cluster, n.name) for n in nodes}

        def all_nodes() -> bool:
            stopped = store.stopped()
            assert not stopped, f"stopped: {stopped}"
            got = {(s["metric"].get("cluster", ""), s["metric"].get("instance", ""))
                   for s in store.query("count by (cluster, instance) "
                                        "(instance:gpu_info:count)")}
            return got == want

        wait_for("every node's GPUs at the central store", all_nodes, TIMEOUT, interval=2)
        time.sleep(5)  # the full GPU counts recorded a few times before one goes
        store.fleet.change()
        # By settled_at the rebooted node is back.
        yield Central(store, time.time() + 15, started + RATE_WINDOW_FILLED_S)
    finally:
        store.stop()


def test_every_node_arrives_at_the_central_store_with_its_cluster(central: Central) -> None:
    by_node = {(s["metric"]["cluster"], s["metric"]["instance"]): s["metric"]
               for s in central.store.query('up{job="gpu-exporter"}')}
    assert set(by_node) == {(n.cluster, n.name) for n in central.nodes}
    # Each agent's external label agrees with its targets' cluster label.
    for metric in central.store.query("count by (cluster) (gpu_info)"):
        assert metric["metric"]["cluster"] in CLUSTERS


def test_each_fleet_alert_fires_for_exactly_the_nodes_that_should(central: Central) -> None:
    expected = expected_alerts(central.nodes)
    assert {a for a, *_ in expected} == set(FLEET_ALERTS), \
        "the fleet's kinds leave a fleet alert without a node to show it"

    def all_fired() -> bool:
        return expected <= firing(central.store)

    try:
        wait_for("every fleet alert on its nodes", all_fired, TIMEOUT, interval=2)
    except pytest.fail.Exception:
        pytest.fail(f"missing: {sorted(expected - firing(central.store))}")
    wait_until = max(central.settled_at, time.time()) + 5
    time.sleep(max(0.0, wait_until - time.time()))
    assert firing(central.store) == expected
    # Nor did any other node fire one since the fleet settled.
    window = max(5, int(time.time() - central.settled_at))
    names = "|".join(FLEET_ALERTS)
    ever = central.store.query(f'max_over_time(ALERTS{{alertstate="firing", '
                               f'alertname=~"{names}"}}[{window}s])')
    fired = {(s["metric"]["alertname"], s["metric"].get("cluster", ""),
              s["metric"].get("instance", ""), s["metric"].get("gpu", "")) for s in ever}
    assert fired <= expected, f"fired beyond the expected: {sorted(fired - expected)}"


def test_every_fleet_panel_query_returns_each_clusters_data(central: Central) -> None:
    """Every query of the fleet dashboard, as Grafana sends it with one cluster
    selected (instant queries instant, the others over the last minute at a
    5 s step): data for every cluster, carrying only that cluster's label and
    nodes."""
    dashboard = json.loads((ROOT / FLEET).read_text())
    instant = {(p["title"], t["refId"]): bool(t.get("instant"))
               for p in panels(dashboard) for t in p["targets"]}
    queries = list(panel_queries(dashboard))
    assert queries
    time.sleep(max(0.0, central.windows_filled_at - time.time()))  # the stragglers panel
    for cluster in CLUSTERS:
        mine = {n.name for n in central.nodes if n.cluster == cluster}
        values = {"cluster": cluster, "job": JOB, "instance": ".+", "gpu": ".+",
                  "datasource": "prometheus"}

        def run(title: str, ref: str, expr: str,
                values: dict[str, str] = values) -> list[dict[str, Any]]:
            q = substitute(expr, values)
            if instant[(title, ref)]:
                return central.store.query(q)
            return central.store.query_range(q, 60, 5)

        for title, ref, expr in queries:
            result = wait_for(f"{cluster}: {title}/{ref} to return data",
                              lambda t=title, r=ref, e=expr: run(t, r, e), 60, interval=2)
            for series in result:
                labels = series["metric"]
                assert labels.get("cluster", cluster) == cluster, (title, ref, labels)
                assert labels.get("instance", next(iter(mine))) in mine, (title, ref, labels)
