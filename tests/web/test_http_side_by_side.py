"""The exporter's HTTP side by side with node_exporter (Go, exporter-toolkit),
as a hostile world would try them, loopback only, bounded in time.

With 64 and with 1,000 TCP connections open and silent (a port scanner, a load
balancer's probes, half-open connections), every normal scrape answers 200 and
the worst takes under 0.5 s; with 32 clients sending wrong basic-auth
passwords as fast as they are answered, authenticated scrapes take under
0.5 s too. The same web config file serves both exporters. node_exporter runs
when it is there (./scripts/fetch-prometheus.sh unpacks Debian's build into
.tools/bin; under the test command it must be), with every collector off so
it reads nothing of the host; its numbers are printed next to ours, and only
ours are asserted.
"""

from __future__ import annotations

import http.client
import os
import resource
import secrets
import socket
import subprocess
import threading
import time
from base64 import b64encode
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import bcrypt
import pytest

from tests.procs import ROOT, free_port, start

NODE_EXPORTER = "prometheus-node-exporter"
WORST_S = 0.5
SCRAPES = 12
USER, PASSWORD = "prometheus", "scrape-secret"


def _node_exporter() -> str | None:
    local = ROOT / ".tools" / "bin" / NODE_EXPORTER
    if local.exists():
        return str(local)
    if os.environ.get("GPU_EXPORTER_REQUIRE_TOOLS") == "1":
        pytest.fail(f"{NODE_EXPORTER} not found; ./scripts/fetch-prometheus.sh puts it in "
                    ".tools/bin")
    return None


def _auth(password: str) -> dict[str, str]:
    token = b64encode(f"{USER}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def _scrape(port: int, password: str = PASSWORD) -> tuple[int, float]:
    """One scrape as Prometheus makes it on a new connection: status, seconds."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip", **_auth(password),
                                                 "Connection": "close"})
        resp = conn.getresponse()
        resp.read()
        return resp.status, time.monotonic() - t0
    finally:
        conn.close()


def _worst_of_scrapes(port: int) -> float:
    worst = 0.0
    for _ in range(SCRAPES):
        status, took = _scrape(port)
        assert status == 200, f"a scrape on port {port} answered {status}"
        worst = max(worst, took)
        time.sleep(0.02)
    return worst


def _wait_up(port: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        try:
            if _scrape(port)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"nothing answered on port {port}")


@contextmanager
def _idle_connections(port: int, count: int) -> Iterator[None]:
    socks = []
    try:
        for _ in range(count):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(0.2)  # every one accepted
        yield
    finally:
        for s in socks:
            s.close()


def _wrong_passwords(port: int, stop: threading.Event, answered: list[int]) -> None:
    """A new wrong password every time: no cache spares a bcrypt check."""
    while not stop.is_set():
        try:
            status, _ = _scrape(port, password=secrets.token_hex(8))
            answered.append(status)
        except OSError:
            answered.append(0)


def _under_wrong_passwords(port: int) -> tuple[float, list[int]]:
    stop, answered = threading.Event(), []  # type: ignore[var-annotated]
    clients = [threading.Thread(target=_wrong_passwords, args=(port, stop, answered),
                                daemon=True) for _ in range(32)]
    for c in clients:
        c.start()
    try:
        time.sleep(0.5)  # the flood is on
        return _worst_of_scrapes(port), answered
    finally:
        stop.set()
        for c in clients:
            c.join(timeout=15)


@contextmanager
def _process(args: list[str], *, ours: bool) -> Iterator[subprocess.Popen[str]]:
    proc = start(args) if ours else subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_idle_connections_and_wrong_passwords_against_node_exporter(tmp_path: Path) -> None:
    # 1,000 idle connections are 1,000 descriptors here and in each server
    # (which inherits the limit): raise the soft limit to the hard one, as
    # Go's runtime does for node_exporter.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard or hard == resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 2200:
        pytest.skip("the file descriptor limit is below the 2,200 this test needs")
    web = tmp_path / "web.yml"
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    web.write_text(f"basic_auth_users:\n  {USER}: {hashed}\n")
    targets: dict[str, int] = {"gpu-exporter": free_port()}
    node = _node_exporter()
    with ExitStack() as stack:
        ours = stack.enter_context(_process(
            ["--simulate", "healthy", "--web.listen-address",
             f"127.0.0.1:{targets['gpu-exporter']}", "--web.config.file", str(web)], ours=True))
        procs = {"gpu-exporter": ours}
        if node is not None:
            targets["node_exporter"] = free_port()
            procs["node_exporter"] = stack.enter_context(_process(
                [node, f"--web.listen-address=127.0.0.1:{targets['node_exporter']}",
                 f"--web.config.file={web}", "--collector.disable-defaults",
                 "--collector.loadavg"], ours=False))
        results: dict[str, dict[str, float]] = {}
        floods: dict[str, list[int]] = {}
        for name, port in targets.items():
            _wait_up(port, procs[name])  # the right password is checked (and cached) once
            row = results[name] = {}
            for count in (64, 1000):
                with _idle_connections(port, count):
                    row[f"{count} idle connections"] = _worst_of_scrapes(port)
            row["32 wrong-password clients"], floods[name] = _under_wrong_passwords(port)
    print(f"\nworst of {SCRAPES} scrapes (new connection each, basic auth)")
    names = list(results)
    print(f"{'':28s}" + "".join(f"{n:>16s}" for n in names))
    for case in results["gpu-exporter"]:
        print(f"{case:28s}" + "".join(f"{results[n][case] * 1000:13.1f} ms" for n in names))
    for name, statuses in floods.items():
        counted = {s: statuses.count(s) for s in sorted(set(statuses))}
        print(f"{name}: the wrong-password clients got {counted}")
    for case, worst in results["gpu-exporter"].items():
        assert worst < WORST_S, f"{case}: a scrape took {worst:.2f}s"
    # The flood was refused, never let through.
    assert floods["gpu-exporter"] and 200 not in floods["gpu-exporter"]
