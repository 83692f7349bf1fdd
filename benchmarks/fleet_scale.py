"""The fleet at scale on Prometheus: N simulated nodes (128 by default, 8 GPUs
each) in two clusters, one Prometheus agent per cluster remote-writing to a
central Prometheus that evaluates the production rules
(alerts/gpu-exporter.rules.yml), scraped every 15 s for 10 minutes. Then:

- the central store's head series and RSS, in all and per node (and the
  agents' RSS);
- each rule group's evaluation time: every evaluation while running (read at a
  third of the interval, each counted once), its median and slowest, when the
  slowest ran, the machine's load then and the group's slowest rule in it;
- every fleet dashboard query's latency as Grafana sends it with every
  cluster and node selected: range queries over the last 6 h at Grafana's step
  for a full-width panel, instant queries at now with ``$__range`` = 6h (the
  median and the slowest of a few runs);
- the CPU the simulated nodes used, per node.

Targets: every fleet query and every rule group under 1 s.

    .venv/bin/python -m benchmarks.fleet_scale                       # 128 nodes, 10 min
    .venv/bin/python -m benchmarks.fleet_scale --nodes 8 --minutes 2 --gpus 2   # a try

It needs the simulator to be cheap enough for N nodes on the machine (the CPU
per node is printed); every process runs on 127.0.0.1 and is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.central_store import CentralStore
from gpu_exporter.commands.fleet import DEFAULT_MIX, parse_mix, plan
from gpu_exporter_mixin.dashboards.generate import FLEET
from gpu_exporter_mixin.dashboards.queries import panel_queries, panels, substitute

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "alerts" / "gpu-exporter.rules.yml"
MIB = 1024 * 1024
TARGET_S = 1.0
RANGE_S = 6 * 3600
# Grafana's step for a range query: the range over the panel's data points
# (about its width in pixels; 1,300 for a full-width panel on a 1080p screen),
# never below the scrape interval, rounded to a whole number of seconds.
MAX_DATA_POINTS = 1300


def grafana_step(range_s: float, scrape_s: float) -> float:
    return float(max(scrape_s, round(range_s / MAX_DATA_POINTS)))


def _prometheus() -> str:
    local = ROOT / ".tools" / "bin" / "prometheus"
    found = str(local) if local.exists() else shutil.which("prometheus")
    if not found:
        sys.exit("prometheus not found: ./scripts/fetch-prometheus.sh puts it in .tools/bin")
    return found


def _wait(what: str, probe: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except OSError:
            pass
        time.sleep(2)
    sys.exit(f"timed out after {timeout:g} s waiting for {what}")


def fleet_queries(scrape_s: float) -> list[tuple[str, str, bool, str]]:
    """(panel, refId, instant, PromQL) of the fleet dashboard, with every
    cluster, job and node selected, as Grafana fills in its variables."""
    dashboard = json.loads((ROOT / FLEET).read_text())
    instant = {(p["title"], t["refId"]): bool(t.get("instant"))
               for p in panels(dashboard) for t in p["targets"]}
    step = grafana_step(RANGE_S, scrape_s)
    values = {"cluster": ".*", "job": "gpu-exporter", "instance": ".+", "gpu": ".+",
              "namespace": ".*", "datasource": "prometheus", "__interval": f"{step:g}s",
              # max(interval + scrape interval, 4 x scrape interval)
              "__rate_interval": f"{max(step + scrape_s, 4 * scrape_s):g}s",
              "__range": f"{RANGE_S}s"}
    return [(title, ref, instant[(title, ref)], substitute(expr, values))
            for title, ref, expr in panel_queries(dashboard)]


def measure_queries(store: CentralStore, scrape_s: float,
                    repeats: int = 3) -> list[dict[str, Any]]:
    step = grafana_step(RANGE_S, scrape_s)
    out = []
    for title, ref, instant, q in fleet_queries(scrape_s):
        times, series = [], 0
        for _ in range(repeats):
            t0 = time.perf_counter()
            try:
                result = store.query(q) if instant else store.query_range(q, RANGE_S, step)
            except OSError:  # a timeout: the query is reported as that slow, not lost
                times.append(time.perf_counter() - t0)
                series = -1
                break
            times.append(time.perf_counter() - t0)
            series = len(result)
        out.append({"panel": title, "ref": ref, "kind": "instant" if instant else
                    f"range 6h / {step:g}s", "median_s": statistics.median(times),
                    "max_s": max(times), "series": series, "expr": q})
        print(f"{title}/{ref}: {max(times) * 1000:.0f} ms, {series} series",
              file=sys.stderr, flush=True)
    return out


class RuleGroupLog:
    """Every evaluation of every rule group, each counted once (by its start
    time), with the machine's load average when it was read: the slowest
    evaluation alone does not say whether the rules or the machine were slow."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.seen: dict[str, dict[str, dict[str, Any]]] = {}

    def read(self, store: CentralStore) -> None:
        load1 = os.getloadavg()[0]
        at = time.monotonic() - self.t0
        for g in store.rule_groups():
            started = g.get("lastEvaluation", "")
            evaluations = self.seen.setdefault(g["name"], {})
            if not started or started.startswith("0001-") or started in evaluations:
                continue
            slowest: dict[str, Any] = max(
                g.get("rules", []), key=lambda r: r.get("evaluationTime", 0.0), default={})
            evaluations[started] = {
                "took_s": g["evaluationTime"], "at_s": at, "load1": load1,
                "rule": slowest.get("name", ""), "rule_s": slowest.get("evaluationTime", 0.0)}

    def summary(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name, evaluations in self.seen.items():
            if not evaluations:
                continue
            took = sorted(e["took_s"] for e in evaluations.values())
            worst = max(evaluations.values(), key=lambda e: e["took_s"])
            out[name] = {"evaluations": len(took), "median_s": statistics.median(took),
                         "max_s": worst["took_s"], "max_at_s": worst["at_s"],
                         "max_load1": worst["load1"], "max_rule": worst["rule"],
                         "max_rule_s": worst["rule_s"],
                         "over_target": sum(1 for t in took if t >= TARGET_S)}
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fleet_scale",
                                description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--nodes", type=int, default=128)
    p.add_argument("--gpus", type=int, default=None, help="GPUs per node (default 8)")
    p.add_argument("--clusters", default="cluster-a,cluster-b")
    p.add_argument("--scenario-mix", default=DEFAULT_MIX)
    p.add_argument("--scrape-interval", type=float, default=15.0, help="seconds (default 15)")
    p.add_argument("--poll-interval", default="5s",
                   help="the exporters' poll interval (default 5s)")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    nodes = plan(args.nodes, [c for c in args.clusters.split(",") if c],
                 parse_mix(args.scenario_mix), args.gpus)
    scrape = f"{args.scrape_interval:g}s"
    with tempfile.TemporaryDirectory(prefix="fleet-scale-") as tmp:
        store = CentralStore(Path(tmp), nodes, RULES, _prometheus(), scrape_interval=scrape,
                             evaluation_interval=scrape,
                             exporter_args=["--poll.interval", args.poll_interval,
                                            "--log.level", "warn"])
        store.start()
        try:
            for url in store.ready_urls():
                _wait(url, lambda u=url: urllib.request.urlopen(u, timeout=2).status == 200, 120)
            want = len(nodes)
            _wait("every node at the central store",
                  lambda: len(store.query("count by (cluster, instance) (gpu_info)")) == want,
                  # 128 Python processes starting at once on 2 cores take minutes
                  max(300.0, 6.0 * len(nodes)) + 2 * args.scrape_interval)
            print(f"{want} nodes at the central store; running {args.minutes:g} min",
                  flush=True)
            cpu0, t0 = store.fleet.cpu_seconds(), time.monotonic()
            log = RuleGroupLog()
            changed_at = None
            while time.monotonic() - t0 < args.minutes * 60:
                if changed_at is None and time.monotonic() - t0 > args.minutes * 30:
                    changed_at = time.monotonic() - t0 if store.fleet.change() else -1.0
                log.read(store)
                stopped = store.stopped()
                if stopped:
                    sys.exit(f"stopped: {stopped}")
                time.sleep(args.scrape_interval / 3)
            wall = time.monotonic() - t0
            cpu = store.fleet.cpu_seconds() - cpu0
            head = store.own_metric("prometheus_tsdb_head_series")
            assert store.central is not None
            rss = store.central.rss_bytes()
            agents_rss = sum(a.rss_bytes() for a in store.agents.values())
            queries = measure_queries(store, args.scrape_interval)
        finally:
            store.stop()
    n = len(nodes)
    results = {
        "nodes": n, "gpus": store.fleet.gpu_count(), "scrape_interval_s": args.scrape_interval,
        "minutes": args.minutes, "fleet_cpu_per_node": cpu / wall / n,
        "central_head_series": head, "head_series_per_node": head / n,
        "central_rss_bytes": rss, "central_rss_per_node_bytes": rss / n,
        "agents_rss_bytes": agents_rss,
        "rule_groups": log.summary(), "node_changed_at_s": changed_at,
        "queries": queries,
    }
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    slow = [q for q in queries if q["max_s"] >= TARGET_S] + \
        [k for k, v in results["rule_groups"].items() if v["max_s"] >= TARGET_S]
    return 1 if slow else 0


def report(r: dict[str, Any]) -> str:
    lines = [
        f"{r['nodes']} nodes, {r['gpus']} GPUs, scraped every {r['scrape_interval_s']:g} s "
        f"for {r['minutes']:g} min; the simulated nodes used "
        f"{r['fleet_cpu_per_node']:.1%} of a core each",
        "",
        "| Central store | In all | Per node |",
        "|---|---:|---:|",
        f"| Head series | {r['central_head_series']:,.0f} | {r['head_series_per_node']:,.0f} |",
        f"| RSS | {r['central_rss_bytes'] / MIB:,.0f} MiB | "
        f"{r['central_rss_per_node_bytes'] / MIB:.2f} MiB |",
        f"| Agents' RSS (all clusters) | {r['agents_rss_bytes'] / MIB:,.0f} MiB | "
        f"{r['agents_rss_bytes'] / r['nodes'] / MIB:.2f} MiB |",
        "",
        "| Rule group | Evaluations | Median | Slowest | At (s) | Load then "
        "| Its slowest rule | ≥ 1 s |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
        *(f"| {k} | {v['evaluations']} | {v['median_s'] * 1000:.1f} ms | "
          f"{v['max_s'] * 1000:.1f} ms | {v['max_at_s']:.0f} | {v['max_load1']:.1f} | "
          f"`{v['max_rule']}` {v['max_rule_s'] * 1000:.1f} ms | {v['over_target']} |"
          for k, v in sorted(r["rule_groups"].items())),
        "",
        "At: seconds after every node had arrived at the central store"
        + ("" if r.get("node_changed_at_s") is None else
           f"; a node was restarted with a GPU missing at {r['node_changed_at_s']:.0f} s") + ".",
        "",
        "| Fleet panel | Query | Kind | Series | Median | Slowest |",
        "|---|---|---|---:|---:|---:|",
        *(f"| {q['panel']} | {q['ref']} | {q['kind']} | "
          f"{'timed out' if q['series'] < 0 else q['series']} | "
          f"{q['median_s'] * 1000:.0f} ms | {q['max_s'] * 1000:.0f} ms |"
          for q in r["queries"]),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
