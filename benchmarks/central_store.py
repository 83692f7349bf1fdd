"""A simulated fleet behind the shipped multi-cluster setup: the fleet's nodes
(gpu_exporter.commands.fleet), one Prometheus agent per cluster
(deploy/central-store/cluster-agent.yml) remote-writing to a central Prometheus
(deploy/central-store/central.yml) that evaluates the rules. The shipped
configs are used as they are, with only addresses, intervals and paths set.

Shared by the live test (tests/mixin/test_fleet_stack.py) and the fleet benchmark
(benchmarks/fleet_scale.py). Every process listens on 127.0.0.1 with a random
port and works in the given directory; ``stop()`` ends them all.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpu_exporter.commands.fleet import Fleet, FleetNode, free_port, stop_process

ROOT = Path(__file__).resolve().parent.parent
CENTRAL_STORE = ROOT / "deploy" / "central-store"


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        stop_process(self.popen, grace_s=20)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0


def spawn(name: str, args: Sequence[str], workdir: Path,
          env: dict[str, str] | None = None) -> Proc:
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT, cwd=workdir,
                                 env=env, stdin=subprocess.DEVNULL)
    return Proc(name, popen, log)


def http_json(url: str, timeout: float = 30) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read().decode())


def shipped_config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((CENTRAL_STORE / name).read_text())
    return config


class CentralStore:
    def __init__(self, workdir: Path, nodes: list[FleetNode], rules: Path, prometheus: str,
                 scrape_interval: str = "15s", evaluation_interval: str = "15s",
                 batch_send_deadline: str = "5s", exporter_args: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.nodes = nodes
        self.clusters = sorted({n.cluster for n in nodes})
        self.fleet = Fleet(nodes, workdir / "nodes", workdir / "targets",
                           exporter_args=exporter_args)
        self.rules = rules
        self.prometheus = prometheus
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.batch_send_deadline = batch_send_deadline
        self.central_port = free_port()
        self.url = f"http://127.0.0.1:{self.central_port}"
        self.agent_ports = {c: free_port() for c in self.clusters}
        self.central: Proc | None = None
        self.agents: dict[str, Proc] = {}

    # --- starting and stopping -------------------------------------------

    def start(self) -> None:
        try:
            self._start_central()
            for cluster in self.clusters:
                self._start_agent(cluster)
            self.fleet.start()
        except BaseException:
            self.stop()
            raise

    def _start_central(self) -> None:
        d = self.workdir / "central"
        (d / "rules").mkdir(parents=True)
        (d / "rules" / "gpu-exporter.rules.yml").symlink_to(self.rules)
        (d / "alertmanagers.json").write_text("[]")
        config = shipped_config("central.yml")
        config["global"]["evaluation_interval"] = self.evaluation_interval
        (d / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.central = spawn("central", [
            self.prometheus, f"--config.file={d / 'prometheus.yml'}",
            f"--storage.tsdb.path={d / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.central_port}",
            "--web.enable-remote-write-receiver", "--log.level=warn"], d)

    def _start_agent(self, cluster: str) -> None:
        d = self.workdir / f"agent-{cluster}"
        (d / "targets").mkdir(parents=True)
        (d / "targets" / f"{cluster}.json").symlink_to(self.fleet.targets_dir / f"{cluster}.json")
        config = shipped_config("cluster-agent.yml")
        timeout = self.scrape_interval if self.scrape_interval.endswith("s") and \
            float(self.scrape_interval[:-1]) < 10 else "10s"
        config["global"].update({"scrape_interval": self.scrape_interval,
                                 "scrape_timeout": timeout})
        for sd in config["scrape_configs"][0]["file_sd_configs"]:
            sd["refresh_interval"] = "1s"
        (remote,) = config["remote_write"]
        remote["url"] = f"{self.url}/api/v1/write"
        remote["queue_config"]["batch_send_deadline"] = self.batch_send_deadline
        (d / "prometheus.yml").write_text(yaml.safe_dump(config))
        # Prometheus 2.x: agent mode and ${CLUSTER} in external_labels are features.
        self.agents[cluster] = spawn(f"agent-{cluster}", [
            self.prometheus, "--enable-feature=agent,expand-external-labels",
            f"--config.file={d / 'prometheus.yml'}", f"--storage.agent.path={d / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.agent_ports[cluster]}",
            "--log.level=warn"], d, env={**os.environ, "CLUSTER": cluster})

    def ready_urls(self) -> list[str]:
        return [f"{self.url}/-/ready",
                *(f"http://127.0.0.1:{p}/-/ready" for p in self.agent_ports.values())]

    def stopped(self) -> list[str]:
        """Processes that ended on their own, with the end of their log."""
        out = [f"node {n}" for n in self.fleet.exited()]
        for proc in [self.central, *self.agents.values()]:
            if proc is not None and proc.popen.poll() is not None:
                out.append(f"{proc.name} (exit {proc.popen.returncode}): {proc.tail()}")
        return out

    def stop(self) -> None:
        self.fleet.stop()
        for proc in [*self.agents.values(), self.central]:
            if proc is not None:
                proc.stop()

    # --- the central store's API -----------------------------------------

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        args = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        reply = http_json(f"{self.url}/api/v1/query?" + urllib.parse.urlencode(args))
        assert reply["status"] == "success", reply
        result: list[dict[str, Any]] = reply["data"]["result"]
        return result

    def query_range(self, expr: str, seconds: float, step: float,
                    end: float | None = None) -> list[dict[str, Any]]:
        end = time.time() if end is None else end
        args = {"query": expr, "start": f"{end - seconds:.3f}", "end": f"{end:.3f}",
                "step": f"{step:g}"}
        reply = http_json(f"{self.url}/api/v1/query_range?" + urllib.parse.urlencode(args))
        assert reply["status"] == "success", reply
        result: list[dict[str, Any]] = reply["data"]["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = http_json(f"{self.url}/api/v1/alerts")["data"]["alerts"]
        return alerts

    def rule_groups(self) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = http_json(f"{self.url}/api/v1/rules")["data"]["groups"]
        return groups

    def own_metric(self, name: str) -> float:
        """A sample of the central Prometheus' own /metrics (it scrapes nothing,
        itself included)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{}"):
                    return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)
