"""``gpu-exporter fleet``'s plan, offline: the mix deals every kind to every
cluster, each node's scenario loads as the simulator reads it, and a bad
argument is one line. The fleet live, on Prometheus, is tests/mixin/test_fleet_stack.py."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_exporter.commands import fleet
from gpu_exporter.commands.fleet import (
    DEFAULT_MIX,
    KINDS,
    OLD_DRIVER,
    FleetError,
    parse_jobs,
    parse_mix,
    place_jobs,
    plan,
    scenario_doc,
)
from gpu_exporter.simulator import load_scenario
from gpu_exporter.simulator.model import Scenario
from gpu_exporter_mixin.alerting.cases import selector_labels
from gpu_exporter_mixin.alerting.config import load_config
from tests.tools import tool


def test_default_mix_deals_every_kind_to_every_cluster() -> None:
    nodes = plan(16, ["a", "b"], parse_mix(DEFAULT_MIX), gpus=2)
    assert len(nodes) == 16 and len({n.name for n in nodes}) == 16
    for cluster in ("a", "b"):
        kinds = {n.kind.name for n in nodes if n.cluster == cluster}
        assert kinds == set(KINDS), cluster
    # A node that drifts is a minority in its cluster, or drift names the others.
    for cluster in ("a", "b"):
        mine = [n for n in nodes if n.cluster == cluster]
        old = sum(n.gpus or 8 for n in mine if n.kind.name == "old-driver")
        assert old * 2 < sum(n.gpus or 8 for n in mine)


def test_mix_weights_share_the_nodes() -> None:
    counts = Counter(n.kind.name for n in plan(128, ["a"], parse_mix("healthy=6,mixed=2")))
    assert counts == {"healthy": 96, "mixed": 32}
    # Fewer nodes than kinds: the heaviest first, none twice.
    counts = Counter(n.kind.name for n in plan(2, ["a"], parse_mix("healthy=5,idle=1,leak=1")))
    assert counts == {"healthy": 2}


@pytest.mark.parametrize("text,message", [
    ("healthy=1,nope=2", "unknown node kind 'nope'"),
    ("healthy=x", "whole number"),
    ("healthy=-1", "negative"),
    ("healthy=0", "no kind"),
])
def test_bad_mix_is_named(text: str, message: str) -> None:
    with pytest.raises(FleetError, match=message):
        parse_mix(text)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kinds_scenario_loads_before_and_after_the_change(kind: str,
                                                                tmp_path: Path) -> None:
    (node,) = [n for n in plan(len(KINDS), ["c"], {k: 1 for k in KINDS}, gpus=2)
               if n.kind.name == kind]
    before = load_scenario_from(scenario_doc(node), tmp_path)
    after = load_scenario_from(scenario_doc(node, changed=True), tmp_path)
    assert before.node.id == node.name
    expected = 8 if KINDS[kind].fixed_gpus else 2
    assert before.node.gpus == expected
    assert after.node.gpus == expected - KINDS[kind].loses_gpus
    for e in KINDS[kind].expects:  # a GPU the kind's alert names exists
        assert e.gpu is None or e.gpu < before.node.gpus
    if kind == "old-driver":
        assert before.node.driver_version == OLD_DRIVER
    if kind == "leak":
        used = [s.set.memory_used_ratio for s in before.timeline]
        assert used == sorted(used) and used[-1] < 0.9  # grows, never near full


def load_scenario_from(doc: dict[str, Any], tmp_path: Path) -> Scenario:
    path = tmp_path / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_scenario(str(path))


def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path) -> None:
    for args in (["--nodes", "0"], ["--scenario-mix", "bogus=1"], ["--gpus", "0"],
                 ["--clusters", "a,../b"], ["--clusters", "a,a"], ["--jobs", "bogus=1"],
                 ["--jobs", "straggler=x"], ["--jobs", "straggler=1"],
                 ["--jobs", "balanced=1", "--job-nodes", "2"]):
        result = subprocess.run(
            [sys.executable, "-m", "gpu_exporter", "fleet", *args,
             "--targets-dir", str(tmp_path), "--duration", "0"],
            capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


# --- jobs spread over nodes ---------------------------------------------------


def _job_of(doc: dict[str, Any]) -> int | None:
    jobs = doc.get("tenants", {}).get("slurm_jobs", [])
    return int(jobs[0]["job_id"]) if jobs else None


def test_jobs_span_their_nodes_with_one_slow_node_per_straggler_job(tmp_path: Path) -> None:
    """Per cluster, each job's nodes hold every GPU for one Slurm job id; a
    straggler job has exactly one slow node (its GPUs' utilization a third of
    the others'), a balanced job none; the rest of the plan is untouched."""
    base = plan(24, ["a", "b"], parse_mix("healthy=4,mixed=1"), gpus=2)
    nodes = place_jobs(base, parse_jobs("straggler=1,balanced=1"))
    assert [n.name for n in nodes] == [n.name for n in base]
    changed = [(b, n) for b, n in zip(base, nodes, strict=True) if b.kind != n.kind]
    assert all(b.kind.name == "healthy" for b, _ in changed)
    members: dict[int, list[tuple[str, Scenario]]] = {}
    for _, node in changed:
        path = tmp_path / f"{node.name}.yaml"
        doc = scenario_doc(node)
        path.write_text(yaml.safe_dump(doc))
        scenario = load_scenario(str(path))  # as the node's exporter reads it
        job_id = _job_of(doc)
        assert job_id is not None
        [job] = scenario.tenants.slurm_jobs
        assert job.gpus == list(range(scenario.node.gpus)) == [0, 1]
        assert sorted(job.pids) == sorted(p.pid for p in scenario.processes)
        members.setdefault(job_id, []).append((node.cluster, scenario))
    assert len(members) == 4  # two jobs in each cluster, ids unique across the fleet
    slow_per_job = []
    for job_id, held in members.items():
        assert len(held) == 4 and len({c for c, _ in held}) == 1, job_id
        utils = sorted(s.state.utilization or 0.0 for _, s in held)
        slow_per_job.append(sum(u < utils[-1] / 2 for u in utils))
    assert sorted(slow_per_job) == [0, 0, 1, 1]
    # The slow nodes, and only they, expect the job straggler alert.
    expecting = [n for n in nodes
                 if any(e.alert == "GpuJobStragglerNode" for e in n.kind.expects)]
    assert sorted(n.kind.name for n in expecting) == ["job-slow", "job-slow"]
    assert {n.cluster for n in expecting} == {"a", "b"}


def test_jobs_that_do_not_fit_the_healthy_nodes_are_refused() -> None:
    base = plan(8, ["a"], parse_mix("healthy=1,idle=1"), gpus=2)  # 4 healthy
    assert len(place_jobs(base, parse_jobs("straggler=1"))) == 8
    with pytest.raises(FleetError, match=r"a has 4 healthy node.*need 8"):
        place_jobs(base, parse_jobs("straggler=1,balanced=1"))
    with pytest.raises(FleetError, match="unknown job shape"):
        parse_jobs("lopsided=1")


# --- the shipped multi-cluster configs ----------------------------------------------

CENTRAL_STORE = Path(__file__).resolve().parents[2] / "deploy" / "central-store"


def test_central_store_configs_pass_promtool_and_agree_with_the_rules(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    config = load_config(root / "alerts" / "config.yaml")
    central = tmp_path / "central"
    (central / "rules").mkdir(parents=True)
    (central / "rules" / "gpu-exporter.rules.yml").symlink_to(
        root / "alerts" / "gpu-exporter.rules.yml")
    (central / "alertmanagers.json").write_text("[]")
    (central / "central.yml").write_text((CENTRAL_STORE / "central.yml").read_text())
    agent = tmp_path / "agent"
    (agent / "targets").mkdir(parents=True)
    (agent / "cluster-agent.yml").write_text((CENTRAL_STORE / "cluster-agent.yml").read_text())
    for path in (central / "central.yml", agent / "cluster-agent.yml"):
        result = subprocess.run([tool("promtool"), "check", "config", str(path)],
                                capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
    # The central store loads the rules; it finds them where the comment says.
    assert "rules/*.rules.yml" in yaml.safe_load(
        (CENTRAL_STORE / "central.yml").read_text())["rule_files"]
    doc = yaml.safe_load((CENTRAL_STORE / "cluster-agent.yml").read_text())
    # Agent mode refuses rules and alerting; the cluster label is the rules'.
    assert "rule_files" not in doc and "alerting" not in doc
    assert doc["global"]["external_labels"] == {config.cluster_label: "${CLUSTER}"}
    (job,) = doc["scrape_configs"]
    assert selector_labels(config.selector).get("job") == job["job_name"]
    (remote,) = doc["remote_write"]
    assert remote["url"].endswith("/api/v1/write")


def test_fleet_command_serves_its_nodes_writes_targets_and_reports_cpu(tmp_path: Path) -> None:
    """Two one-GPU nodes for a few seconds: each answers /metrics with its own
    node's GPUs, the targets files name them with their cluster, the CPU line
    is printed, and nothing is left listening after the command ends."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_exporter", "fleet", "--nodes", "2", "--gpus", "1",
         "--scenario-mix", "healthy=1", "--clusters", "east,west",
         "--targets-dir", str(tmp_path / "t"), "--duration", "12", "--warmup", "1",
         "--report-every", "100", "--", "--poll.interval", "2s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        targets: dict[str, list[dict[str, Any]]] = {}
        while time.monotonic() < deadline and len(targets) < 2:
            for c in ("east", "west"):
                path = tmp_path / "t" / f"{c}.json"
                if path.exists():
                    targets[c] = json.loads(path.read_text())
            time.sleep(0.2)
        addresses = {}
        for cluster, groups in targets.items():
            (group,) = groups
            assert group["labels"] == {"cluster": cluster, "instance": f"{cluster}-node-001",
                                       "scenario": "healthy"}
            addresses[cluster] = group["targets"][0]
        for cluster, address in addresses.items():
            body = _wait_metrics(f"http://{address}/metrics")
            assert 'gpu_info{' in body and body.count("gpu_info{") == 1, cluster
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert re.search(r"fleet: 2 nodes, 2 GPUs: .* of a core and \d+ MiB per node", out), out
    for address in addresses.values():
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://{address}/metrics", timeout=2)


def _wait_metrics(url: str) -> str:
    deadline = time.monotonic() + 45
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                body: str = resp.read().decode()
                if "gpu_info{" in body:
                    return body
        except OSError:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            pytest.fail(f"{url}: no gpu_info in 45 s")
        time.sleep(0.5)


def test_node_ports_lie_below_the_ephemeral_range(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Outgoing connections (Prometheus scraping the first nodes) take their
    local ports from the ephemeral range: a node's planned port is never there."""
    ports = fleet.listen_ports(128)
    low = int(fleet.EPHEMERAL_RANGE.read_text().split()[0])
    assert len(set(ports)) == 128
    assert all(1024 <= p < low for p in ports)
    # A taken port is skipped, not handed out twice.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports[0]))
        monkeypatch.setattr(fleet.random, "randrange", lambda a, b: ports[0])
        again = fleet.listen_ports(4)
    assert ports[0] not in again and len(set(again)) == 4
    # No room below the range (or no /proc): ports from the kernel, still distinct.
    narrow = tmp_path / "range"
    narrow.write_text("10100\t60999\n")
    monkeypatch.setattr(fleet, "EPHEMERAL_RANGE", narrow)
    assert len(set(fleet.listen_ports(128))) == 128
