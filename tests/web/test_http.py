"""The HTTP endpoints: metrics with content negotiation and gzip, the landing
page, health and readiness, and polite answers to everything else."""

from __future__ import annotations

import gzip
import http.client
import json
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.web.reference import snapshot_registry
from tests.simnode import SimRun


@pytest.fixture
def run() -> Iterator[SimRun]:
    with SimRun("gpu-lost") as r:
        r.exporter.bind()
        assert r.exporter.server is not None
        r.exporter.server.start()  # serving, not polling: the test polls by hand
        yield r


def get(run: SimRun, path: str, method: str = "GET",
        headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", run.exporter.port, timeout=5)
    conn.request(method, path, headers=headers or {})
    return conn.getresponse()


def test_not_ready_and_no_metrics_before_the_first_poll(run: SimRun) -> None:
    assert get(run, "/-/ready").status == 503
    assert get(run, "/-/healthy").status == 200
    body = get(run, "/metrics").read().decode()
    assert "gpu_info" not in body


def test_ready_after_first_poll(run: SimRun) -> None:
    run.poll()
    assert get(run, "/-/ready").status == 200


def test_metrics_plain_openmetrics_and_gzip(run: SimRun) -> None:
    run.poll(10)
    plain = get(run, "/metrics")
    assert plain.status == 200
    assert plain.getheader("Content-Type", "").startswith("text/plain; version=0.0.4")
    text = plain.read().decode()
    assert 'gpu_up{gpu="5"' in text

    om = get(run, "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert om.getheader("Content-Type", "").startswith("application/openmetrics-text")
    assert om.read().decode().rstrip().endswith("# EOF")

    gz = get(run, "/metrics", headers={"Accept-Encoding": "gzip"})
    assert gz.getheader("Content-Encoding") == "gzip"
    assert 'gpu_up{gpu="5"' in gzip.decompress(gz.read()).decode()


def test_node_page_links_and_gpu_states(run: SimRun) -> None:
    run.poll(10)
    resp = get(run, "/")
    assert resp.status == 200
    page = resp.read().decode()
    for link in ("metrics", "-/healthy", "runbook"):
        assert f'href="{link}"' in page
    assert page.count('<section class="gpu"') == 8
    assert "NVML cannot reach this GPU" in page


def test_unknown_path_and_method(run: SimRun) -> None:
    assert get(run, "/nope").status == 404
    assert get(run, "/metrics", method="POST").status == 405
    assert get(run, "/metrics", method="HEAD").status == 200


def test_health_turns_bad_when_polls_stop(run: SimRun) -> None:
    from gpu_exporter.web.server import staleness_check

    now = [1000.0]
    check = staleness_check(lambda: 900.0, lambda: 1.0, started=0.0, clock=lambda: now[0])
    ok, why = check()
    assert not ok and "last poll 100s ago" in why
    fresh = staleness_check(lambda: 995.0, lambda: 1.0, started=0.0, clock=lambda: now[0])
    assert fresh()[0]


@pytest.mark.parametrize("scenario", ["mixed", "mig-h100", "xid-79"])
@pytest.mark.parametrize("openmetrics", [False, True])
def test_fast_rendering_matches_prometheus_client(scenario: str, openmetrics: bool) -> None:
    """The cached renderer serves exactly what prometheus_client would."""
    from prometheus_client.exposition import generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as om_latest
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
    from prometheus_client.parser import text_string_to_metric_families as parse

    from gpu_exporter.web.render import LabelCache, render

    def samples(text: str) -> list[tuple[str, str, tuple[tuple[str, str], ...], float]]:
        families = om_parse(text) if openmetrics else parse(text)
        return [(f.name, f.type, tuple(sorted(s.labels.items())), s.value)
                for f in families for s in f.samples]

    with SimRun(scenario) as run:
        snap = run.poll(15)
        poller = run.exporter.poller
        reference = (om_latest if openmetrics else generate_latest)(
            snapshot_registry(lambda: poller.latest))
    ours = render(snap, openmetrics, LabelCache())
    assert samples(ours.decode()) == samples(reference.decode())
    if not openmetrics:
        assert ours == reference  # byte for byte in the text format


@pytest.mark.parametrize("openmetrics", [False, True])
def test_families_kept_from_the_last_render_give_the_same_bytes_as_a_fresh_render(
        openmetrics: bool) -> None:
    """Unchanged families are served from the last render; changed, new and
    vanished ones are not (bursty-input: utilization and processes move)."""
    from gpu_exporter.web.render import FamilyTexts, LabelCache, render

    families, labels = FamilyTexts(), LabelCache()
    with SimRun("bursty-input") as run:
        previous = None
        for _ in range(12):
            snap = run.poll(1)
            cached = render(snap, openmetrics, labels, families)
            assert cached == render(snap, openmetrics, LabelCache())
            if previous is not None:
                assert cached != previous  # something moved, and it shows
            previous = cached
        # A family that vanishes from a snapshot is not rendered from memory.
        gone = {name: family for name, family in snap.families.items()
                if not name.startswith("gpu_process_")}
        from dataclasses import replace
        trimmed = replace(snap, families=gone)
        text = render(trimmed, openmetrics, labels, families).decode()
        assert "gpu_process_info" not in text
        assert text == render(trimmed, openmetrics, LabelCache()).decode()


def test_remembered_value_texts_stay_bounded_and_correct() -> None:
    from gpu_exporter.web import render as r

    texts = [r._remember(float(v) + 0.5) for v in range(3 * r._FORMATTED_LIMIT)]
    assert texts[:3] == ["0.5", "1.5", "2.5"]
    assert len(r._FORMATTED) + len(r._FORMATTED_OLD) <= 2 * r._FORMATTED_LIMIT
    assert r._remember(2.5e9) == "2.5e+09"  # Go's format above a million, as Prometheus writes
    assert r._remember(-0.0) == "-0.0" and r._remember(0.0) == "0.0"


# --- the promises of the HTTP layer ------------------------------------------------------

def raw_exchange(port: int, data: bytes, timeout: float = 5.0) -> tuple[bytes, bool]:
    """Send ``data`` as it is; everything the server answers until it closes,
    and whether it closed (False: still open when the timeout ran out)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                return b"".join(chunks), False
            except ConnectionResetError:
                return b"".join(chunks), True
            if not chunk:
                return b"".join(chunks), True
            chunks.append(chunk)


def status_lines(answer: bytes) -> list[bytes]:
    return [line for line in answer.split(b"\r\n") if line.startswith(b"HTTP/1.")]


@pytest.mark.parametrize(("request_bytes", "status"), [
    # A GET with a body: the body must not be read as a second request.
    (b"GET /-/ready HTTP/1.1\r\nHost: x\r\nContent-Length: 38\r\n\r\n"
     b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n", 200),
    # Two framings a proxy and this server could read differently.
    (b"GET /-/ready HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
     400),
    (b"GET /-/ready HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    (b"GET /-/ready HTTP/1.1\r\nHost: x\r\nNo-colon-here\r\n\r\n", 400),
    (b"GET /-/ready HTTP/1.1\r\nHost: x\r\nContent-Length : 0\r\n\r\n", 400),
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /-/ready\r\n\r\n", 400),
    (b"GET /-/ready HTTP/1.1\r\n\r\n", 400),  # HTTP/1.1 without Host, as Go answers
])
def test_an_ambiguous_or_malformed_request_gets_one_response_and_a_closed_connection(
        run: SimRun, request_bytes: bytes, status: int) -> None:
    run.poll()
    answer, closed = raw_exchange(run.exporter.port, request_bytes)
    lines = status_lines(answer)
    assert len(lines) == 1, answer
    assert lines[0].split(b" ")[1] == str(status).encode()
    assert closed, "the connection was left open"


def test_an_absolute_uri_target_is_served_as_go_serves_it(run: SimRun) -> None:
    run.poll()
    answer, _ = raw_exchange(run.exporter.port, b"GET http://node:9835/-/ready HTTP/1.1\r\n"
                             b"Host: node:9835\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"Ready\n")


def test_the_server_header_and_status_line_are_well_formed(run: SimRun) -> None:
    from gpu_exporter import __version__

    answer, _ = raw_exchange(run.exporter.port,
                             b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head = answer.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"HTTP/1.1 404 Not Found"
    assert f"Server: gpu-exporter/{__version__}".encode() in head


@pytest.mark.parametrize(("accept_encoding", "gzipped"), [
    ("gzip", True), ("gzip;q=0.5, identity", True), ("identity, GZIP;q=1.0", True),
    ("gzip;q=0", False), ("gzip; q=0.000", False), ("identity", False), ("", False),
    ("br, x-gzip", True), ("gzip;q=bogus", False),
])
def test_gzip_only_when_the_client_takes_it(run: SimRun, accept_encoding: str,
                                            gzipped: bool) -> None:
    run.poll()
    resp = get(run, "/metrics", headers={"Accept-Encoding": accept_encoding})
    body = resp.read()
    assert (resp.getheader("Content-Encoding") == "gzip") is gzipped
    text = gzip.decompress(body) if gzipped else body
    assert b"gpu_up{" in text


def test_diagnosis_is_served_with_findings_and_what_the_exporter_saw(run: SimRun) -> None:
    assert get(run, "/diagnosis").status == 503  # before the first poll
    run.poll(30)  # gpu-lost: GPU 5 falls off the bus after 5 s
    resp = get(run, "/diagnosis")
    assert resp.status == 200
    assert resp.getheader("Content-Type") == "application/json"
    data = json.loads(resp.read())
    assert any(f["gpu"] == "5" for f in data["findings"])
    assert data["visibility"]["nvml_up"] is True
    assert data["visibility"]["gpus"] == 8 and data["visibility"]["blind"] is None
    assert 'href="diagnosis"' in get(run, "/").read().decode()  # relative: behind a prefix too


def test_health_answers_503_once_polls_stop(run: SimRun) -> None:
    run.poll()
    assert get(run, "/-/healthy").status == 200
    run.clock.advance(25)  # polls late, not yet stale (10 intervals, at least 30 s)
    assert get(run, "/-/healthy").status == 200
    run.clock.advance(10)
    resp = get(run, "/-/healthy")
    assert resp.status == 503
    assert b"last poll 35s ago" in resp.read()
    run.exporter.poller.poll_once()  # polls resume
    assert get(run, "/-/healthy").status == 200


def test_the_telemetry_path_serves_metrics_and_metrics_moves_there() -> None:
    with SimRun("healthy", web={"listen_address": "127.0.0.1:0",
                                "telemetry_path": "/gpu/metrics"}) as run:
        run.poll()
        run.exporter.bind()
        assert run.exporter.server is not None
        run.exporter.server.start()
        moved = get(run, "/gpu/metrics")
        assert moved.status == 200 and b"gpu_up{" in moved.read()
        assert get(run, "/metrics").status == 404
        assert 'href="gpu/metrics"' in get(run, "/").read().decode()


@pytest.mark.parametrize("path", ["/diagnosis", "/", "/-/healthy", "/-/ready", "metrics"])
def test_a_telemetry_path_that_would_hide_an_endpoint_is_refused(path: str) -> None:
    from gpu_exporter.settings.config import ConfigError, load

    with pytest.raises(ConfigError) as err:
        load({"web": {"telemetry_path": path}})
    message = str(err.value)
    assert message.startswith("web.telemetry_path from ")
    assert "Value error" not in message and "\n" not in message


def test_a_kept_alive_connection_outlives_the_head_deadline_while_idle() -> None:
    """The head deadline runs from a request's first byte: a kept-alive
    connection waiting between scrapes (Prometheus holds one) stays open."""
    with SimRun("healthy", web={"listen_address": "127.0.0.1:0", "request_timeout": "0.3s",
                                "idle_timeout": "5s"}) as run:
        run.poll()
        run.exporter.bind()
        assert run.exporter.server is not None
        run.exporter.server.start()
        conn = http.client.HTTPConnection("127.0.0.1", run.exporter.port, timeout=5)
        try:
            for _ in range(3):
                conn.request("GET", "/-/ready")
                resp = conn.getresponse()
                assert resp.status == 200 and resp.read() == b"Ready\n"
                time.sleep(0.6)  # twice the head deadline, idle
            assert conn.sock is not None  # the same connection all along
        finally:
            conn.close()


def test_a_silent_or_dribbling_connection_is_closed_at_the_head_deadline() -> None:
    with SimRun("healthy", web={"listen_address": "127.0.0.1:0",
                                "request_timeout": "0.5s"}) as run:
        run.poll()
        run.exporter.bind()
        assert run.exporter.server is not None
        run.exporter.server.start()
        port = run.exporter.port
        t0 = time.monotonic()
        silent, closed = raw_exchange(port, b"", timeout=5)
        assert closed and silent == b""
        assert 0.4 < time.monotonic() - t0 < 2.5
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            t0 = time.monotonic()
            with pytest.raises((ConnectionError, OSError)):
                for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"z" * 200:
                    s.sendall(bytes([byte]))
                    time.sleep(0.02)
                    if time.monotonic() - t0 > 2.5:
                        break
                s.settimeout(1)
                if s.recv(10) == b"":
                    raise ConnectionError("closed")
            assert time.monotonic() - t0 < 2.5


def test_at_the_connection_limit_the_longest_idle_connection_makes_room() -> None:
    with SimRun("healthy", web={"listen_address": "127.0.0.1:0", "max_connections": 4}) as run:
        run.poll()
        run.exporter.bind()
        server = run.exporter.server
        assert server is not None
        server.start()
        port = run.exporter.port
        idle = []
        for _ in range(4):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            time.sleep(0.05)
        deadline = time.monotonic() + 5
        while server.connection_count < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.connection_count == 4
        try:
            # A scrape beyond the limit is served: the oldest idle one is closed.
            resp = get(run, "/metrics")
            assert resp.status == 200 and b"gpu_up{" in resp.read()
            assert idle[0].recv(10) == b""  # closed by the server
            assert server.shed >= 1
            assert server.connection_count <= 4
        finally:
            for s in idle:
                s.close()


def test_accepts_gzip_reads_q_values() -> None:
    from gpu_exporter.web.app import accepts_gzip

    assert accepts_gzip("deflate, gzip;q=0.8")
    assert not accepts_gzip("gzip;q=0, identity")
    assert not accepts_gzip("*")  # only an explicit gzip: identity is always safe


def test_the_readme_lists_every_endpoint_and_the_docs_say_what_sighup_reloads() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    with SimRun("healthy") as run:
        paths = set(run.exporter.app.routes)
    for path in paths:
        assert f"| `{path}` |" in readme, f"README's endpoint table lacks {path}"
    unit = (root / "deploy" / "systemd" / "gpu-exporter.service").read_text()
    env = (root / "deploy" / "systemd" / "gpu-exporter.env").read_text()
    deploy = (root / "docs" / "deploy.md").read_text()
    for text in (unit, env, deploy):
        flat = " ".join(text.replace("#", " ").split())
        assert "only re-reads the web config" not in flat
        assert "re-reads only the web config" not in flat
    assert "SIGHUP reloads the whole configuration" in " ".join(
        unit.replace("#", " ").split())
    assert "reloads the whole configuration" in " ".join(deploy.split())


def test_a_connection_cut_off_by_the_stop_is_not_logged_as_an_error(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A stop that comes between a connection's accept and its first step (a
    client connecting as SIGTERM arrives; 2 stops in 4 met it with clients
    connected) cancels a task that never ran: Python 3.11's start_server then
    raised CancelledError in its done callback, logged with a traceback at
    level error. Here the stop is made to land exactly there."""
    import asyncio

    from gpu_exporter.web.app import App
    from gpu_exporter.web.server import ExporterHTTPServer

    server = ExporterHTTPServer(("127.0.0.1", 0), App())
    original = asyncio.StreamReaderProtocol.connection_made

    def stop_first(protocol: asyncio.StreamReaderProtocol,
                   transport: asyncio.BaseTransport) -> None:
        if server._stop is not None and not server._stop.done():
            server._stop.set_result(None)  # the stop's wake-up runs before the client's task
        original(protocol, transport)

    monkeypatch.setattr(asyncio.StreamReaderProtocol, "connection_made", stop_first)
    caplog.set_level(logging.DEBUG)
    server.start()
    with socket.create_connection(server.server_address, timeout=5):
        assert server._thread is not None
        server._thread.join(5)
    server.shutdown()
    server.server_close()
    assert not server._thread.is_alive()
    assert "a connection was cut off by the shutdown" in caplog.text  # the race was met
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


@pytest.mark.parametrize("openmetrics", [False, True])
def test_control_characters_in_a_label_value_are_written_as_escapes(tmp_path: Path,
                                                                     openmetrics: bool) -> None:
    """A process named with an escape sequence and a reordering mark: its comm
    label reads as those characters' escapes (what Prometheus stores), and no
    raw control byte reaches whoever reads the exposition in a terminal."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
    from prometheus_client.parser import text_string_to_metric_families as parse

    from gpu_exporter.web.render import LabelCache, render

    scenario = tmp_path / "evil-name.yaml"
    scenario.write_text(
        "name: evil-name\nextends: memory-held-sm-idle-process-stalled\n"
        'process_changes:\n  24107: {comm: "\\e[31m\\u202e\\"x\\\\"}\n')
    with SimRun(str(scenario)) as run:
        snap = run.poll(2)
    text = render(snap, openmetrics, LabelCache()).decode()
    assert "\x1b" not in text and "\u202e" not in text
    comms = {s.labels["comm"] for f in (om_parse if openmetrics else parse)(text)
             for s in f.samples if "comm" in s.labels}
    assert '\\x1b[31m\\u202e"x\\' in comms, comms  # the others: python
