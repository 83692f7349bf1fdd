"""The local stack (compose, Prometheus, Alertmanager, the notification sink)
checked with promtool and amtool, the example web config, and the deploy
docs."""

from __future__ import annotations

import http.client
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import trustme
import yaml

from gpu_exporter.cli import parse_settings
from gpu_exporter.simulator import builtin_scenarios
from gpu_exporter.web.webconfig import load_web_config
from tests.deploy_files import (
    COMPOSE,
    DEFAULT_PORT,
    DEPLOY,
    ROOT,
    compose,
)
from tests.procs import free_port
from tests.tools import tool

# --- the local stack -----------------------------------------------------------




def test_compose_runs_the_four_services_on_loopback_ports() -> None:
    services = compose()["services"]
    assert set(services) == {"exporter", "prometheus", "alertmanager", "grafana",
                             "notifications"}
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
        assert not service.get("privileged"), name
        assert service.get("network_mode") != "host", name
        for image in [service.get("image", "")]:
            assert image and ":" in image and not image.endswith(":latest"), (name, image)


def test_compose_exporter_is_simulated_and_locked_down() -> None:
    exporter = compose()["services"]["exporter"]
    command = exporter["command"]
    scenario = command[command.index("--simulate") + 1]
    assert scenario in builtin_scenarios()
    parse_settings(command)
    assert Path(COMPOSE / exporter["build"]["context"]).resolve() == ROOT
    assert exporter["build"]["dockerfile"] == "Dockerfile"
    assert exporter["read_only"] is True
    assert exporter["cap_drop"] == ["ALL"]
    assert "user" not in exporter  # the image's unprivileged user


def test_compose_mounts_exist_and_point_at_the_shared_configs() -> None:
    mounted: dict[str, Path] = {}
    for name, service in compose()["services"].items():
        for volume in service.get("volumes", []):
            source, target, *mode = volume.split(":")
            assert mode == ["ro"], (name, volume)
            host = (COMPOSE / source).resolve()
            assert host.is_relative_to(ROOT), volume
            mounted[target] = host
            if host.is_relative_to(DEPLOY):
                assert host.exists(), volume
    assert mounted["/etc/prometheus/prometheus.yml"] == COMPOSE / "prometheus" / "prometheus.yml"
    # The rules and dashboards as committed, once, in the chart; alerts/ and
    # grafana/ link there (a link inside a mounted folder would not resolve).
    chart_files = DEPLOY / "helm" / "gpu-exporter" / "files"
    assert mounted["/etc/prometheus/rules"] == chart_files
    assert (ROOT / "alerts" / "gpu-exporter.rules.yml").resolve() == \
        chart_files / "gpu-exporter.rules.yml"
    assert mounted["/etc/alertmanager/alertmanager.yml"] == ROOT / "alerts" / "alertmanager.yml"
    assert mounted["/etc/grafana/provisioning"] == ROOT / "grafana" / "provisioning"
    assert mounted["/var/lib/grafana/dashboards/gpu-exporter"] == chart_files / "dashboards"


def test_grafana_provisioning_fits_the_stack() -> None:
    """The provisioning files from grafana/ are mounted as they are: their data
    source must be this stack's Prometheus, their dashboards where they are mounted."""
    provisioning = ROOT / "grafana" / "provisioning"
    assert list(provisioning.glob("*/*.y*ml")), "grafana/provisioning has no files"
    services = compose()["services"]
    mounts = {v.split(":")[1] for v in services["grafana"]["volumes"]}
    for path in provisioning.glob("dashboards/*.y*ml"):
        for provider in yaml.safe_load(path.read_text())["providers"]:
            assert provider["options"]["path"] in mounts, path
    for path in provisioning.glob("datasources/*.y*ml"):
        for source in yaml.safe_load(path.read_text())["datasources"]:
            if source["type"] == "prometheus":
                assert source["url"] == "http://prometheus:9090", path
    assert "prometheus" in services


def test_prometheus_config_passes_promtool_with_the_generated_rules(tmp_path: Path) -> None:
    """Laid out as compose mounts it: the config, its target lists, the chart's
    files/ as rules/, where the pattern finds the rule file and nothing else."""
    for name in ("prometheus.yml", "targets.json", "alertmanagers.json"):
        shutil.copy(COMPOSE / "prometheus" / name, tmp_path / name)
    rules = DEPLOY / "helm" / "gpu-exporter" / "files"
    (tmp_path / "rules").symlink_to(rules, target_is_directory=True)
    patterns = yaml.safe_load((COMPOSE / "prometheus" / "prometheus.yml").read_text())
    found = [p.name for pattern in patterns["rule_files"] for p in tmp_path.glob(pattern)]
    assert found == ["gpu-exporter.rules.yml"]
    result = subprocess.run([tool("promtool"), "check", "config",
                             str(tmp_path / "prometheus.yml")],
                            capture_output=True, text=True, check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load((COMPOSE / "prometheus" / "prometheus.yml").read_text())
    assert [job["job_name"] for job in config["scrape_configs"]] == ["gpu-exporter"]
    targets = json.loads((COMPOSE / "prometheus" / "targets.json").read_text())
    exporter = compose()["services"]["exporter"]
    assert targets[0]["targets"] == [f"exporter:{DEFAULT_PORT}"]
    assert "scenario" in targets[0]["labels"]
    assert exporter["command"][-1] == targets[0]["labels"]["scenario"]
    managers = json.loads((COMPOSE / "prometheus" / "alertmanagers.json").read_text())
    assert managers[0]["targets"] == ["alertmanager:9093"]


ALERTMANAGER = ROOT / "alerts" / "alertmanager.yml"


def test_alertmanager_config_passes_amtool() -> None:
    result = subprocess.run([tool("amtool"), "check-config", str(ALERTMANAGER)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


SINK_PORT = 9095


def test_every_webhook_of_the_example_lands_in_the_stacks_sink() -> None:
    config = yaml.safe_load(ALERTMANAGER.read_text())
    urls = [hook["url"] for receiver in config["receivers"]
            for hook in receiver.get("webhook_configs", [])]
    assert urls
    for url in urls:
        assert url.startswith(f"http://127.0.0.1:{SINK_PORT}/"), url
    sink = compose()["services"]["notifications"]
    assert sink["network_mode"] == "service:alertmanager"
    assert f'("127.0.0.1", {SINK_PORT})' in sink["command"][0]


def test_the_notification_sink_prints_what_alertmanager_sends() -> None:
    sink = compose()["services"]["notifications"]
    assert sink["entrypoint"][:1] == ["python"]
    port = free_port()
    code = sink["command"][0].replace(f'("127.0.0.1", {SINK_PORT})', f'("127.0.0.1", {port})')
    proc = subprocess.Popen([sys.executable, *sink["entrypoint"][1:], code],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        payload = json.dumps({"alerts": [{"status": "firing", "labels": {
            "alertname": "GpuLostHardware", "instance": "node-1", "gpu": "3"}}]}).encode()
        deadline = time.monotonic() + 20
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("POST", "/pager", body=payload,
                             headers={"Content-Type": "application/json"})
                assert conn.getresponse().status == 200
                conn.close()
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert "pager firing GpuLostHardware node-1 gpu=3" in out, err


# --- the example web config and the docs ----------------------------------------


def test_the_example_web_config_loads(tmp_path: Path) -> None:
    ca = trustme.CA()
    leaf = ca.issue_cert("gpu-node.example.com")
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "gpu-exporter.crt"))
    leaf.private_key_pem.write_to_path(str(tmp_path / "gpu-exporter.key"))
    shutil.copy(DEPLOY / "web-config.yml", tmp_path / "web-config.yml")
    loaded = load_web_config(tmp_path / "web-config.yml")
    assert loaded.tls and loaded.auth is not None


def test_deploy_docs_cover_every_way_and_name_files_that_exist() -> None:
    text = (ROOT / "docs" / "deploy.md").read_text()
    for heading in ("Bare metal", "Docker", "Kubernetes", "Local stack",
                    "Securing the endpoint", "Least privilege"):
        assert re.search(rf"^#+ .*{heading}", text, re.M | re.I), heading
    assert "htpasswd -nBC 10" in text and "bcrypt" in text
    assert "helm install gpu-exporter deploy/helm/gpu-exporter" in text
    named = set(re.findall(r"(?<![\w/.])((?:deploy|docs|alerts|grafana)/[\w./-]*\w)", text))
    assert named
    for path in named:
        assert (ROOT / path).exists() or path.startswith(("alerts/", "grafana/")), path



