"""The daemon loads only what it runs: a fresh interpreter that starts the
exporter as ``gpu-exporter`` does (settings from flags, one poll) has not
imported the simulator, the generators, the one-shot commands, the web
config file's module (TLS and bcrypt), prometheus_client, or, without a
kubelet socket, gRPC and protobuf, which cost memory on every node (see
BENCHMARKS.md, "What each library costs")."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

NOT_AT_START = ("gpu_exporter.simulator", "gpu_exporter_mixin", "gpu_exporter.commands",
                "gpu_exporter.web.webconfig", "bcrypt",
                # The daemon renders its own exposition; prometheus_client (and
                # the http.server, wsgiref and urllib it brings) is the tests'
                # reference only.
                "prometheus_client", "gpu_exporter.web.reference",
                # Its table of named entities, for unescaping only (html_escape).
                "html",
                # The kubelet's gRPC client and its protobuf messages (about
                # 14 MiB): only once the pod-resources socket exists.
                "grpc", "google.protobuf", "gpu_exporter.attribution.kubelet_grpc",
                "gpu_exporter.attribution.podresources_v1",
                # Every file the exporter reads is checked by sections:
                # pydantic (about 12 MiB with the schemas it builds) is no
                # dependency of it.
                "pydantic", "pydantic_core",
                # PyYAML: only with a YAML file given (--config.file and the like).
                "yaml",
                # OpenSSL's digests (about 0.7 MiB): the node page's script hash,
                # at the first page served; the web config file's gate.
                "hashlib",
                # The node page and the runbook: at their first request.
                "gpu_exporter.web.doctor", "gpu_exporter.web.runbook",
                # importlib.metadata (and the email, zipfile and csv it brings):
                # the binding's version is read from its installed record.
                "importlib.metadata", "email")

START = """
import json, sys, time
from gpu_exporter.cli import settings_loader
from gpu_exporter.daemon.exporter import Exporter
settings = settings_loader(sys.argv[1:])()
exporter = Exporter(settings)
exporter.bind()
exporter.poller.poll_once()
# The kubelet client's thread asks at once; give it time to have loaded gRPC.
time.sleep(float(__import__("os").environ.get("SETTLE_S", "0")))
exporter.stop()
print(json.dumps(sorted(sys.modules)))
"""


def _modules_after_start(*flags: str, settle_s: float = 0.0) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", START, "--web.listen-address", "127.0.0.1:0",
                           "--log.level", "error", *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SETTLE_S": str(settle_s)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return modules


def _loaded(modules: list[str], prefix: str) -> bool:
    return any(m == prefix or m.startswith(prefix + ".") for m in modules)


def test_the_daemon_starts_without_what_it_does_not_run(tmp_path: Path) -> None:
    # No kubelet socket at the path: attribution is on, asks, finds nothing.
    modules = _modules_after_start("--kubernetes.pod-resources-socket",
                                   str(tmp_path / "kubelet.sock"), settle_s=0.5)
    assert _loaded(modules, "gpu_exporter.collectors.device")  # it did build the pipeline
    assert [p for p in NOT_AT_START if _loaded(modules, p)] == []


def test_a_web_config_file_loads_its_module(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text("basic_auth_users: {}\n")
    modules = _modules_after_start("--web.config.file", str(config))
    assert _loaded(modules, "gpu_exporter.web.webconfig")


def test_a_web_config_file_and_a_state_file_are_read_without_pydantic(tmp_path: Path
                                                                      ) -> None:
    """The files a node may be given are checked by sections, as the
    settings are: neither brings pydantic into the daemon."""
    config = tmp_path / "web.yml"
    config.write_text("basic_auth_users: {}\nhttp_server_config: {http2: true}\n")
    state = tmp_path / "state.json"
    state.write_text('{"version": 1, "gpus": {}}')
    modules = _modules_after_start("--web.config.file", str(config),
                                   "--path.state-file", str(state))
    assert _loaded(modules, "gpu_exporter.web.webconfig")
    assert _loaded(modules, "gpu_exporter.diagnosis.memory_file")
    assert [m for m in modules if m.split(".")[0] in ("pydantic", "pydantic_core")] == []


def test_a_kubelet_socket_loads_the_grpc_client(tmp_path: Path) -> None:
    """The other side of the rule: where the socket exists, the client is
    loaded (and asks; nobody answers here, which is its own error)."""
    path = tmp_path / "kubelet.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        listener.listen()
        modules = _modules_after_start("--kubernetes.pod-resources-socket", str(path),
                                       settle_s=1.0)
    assert _loaded(modules, "gpu_exporter.attribution.kubelet_grpc")
    assert _loaded(modules, "grpc")


def test_a_page_built_at_its_first_request_is_built_once_however_many_ask_at_once() -> None:
    import threading

    from gpu_exporter.web.app import OnFirstRequest, Request, Response

    builds: list[int] = []
    gate = threading.Barrier(8)

    def build() -> Any:
        builds.append(1)
        return lambda req: Response(200, f"page {len(builds)}".encode())

    route = OnFirstRequest(build)
    answers: list[bytes] = []

    def ask() -> None:
        gate.wait()
        answers.append(route(Request("/", "", {})).body)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == [1] and answers == [b"page 1"] * 8
