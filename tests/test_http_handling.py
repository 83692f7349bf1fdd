"""Request handling, decision by decision: the routes and content negotiation
on ``Request`` objects (no socket), and the wire behaviour of the HTTP server
on 127.0.0.1 with a one-gauge registry (no simulator, so it starts in
milliseconds). Fast on purpose: mutation testing (``./scripts/mutation.sh``)
runs these for every edit it makes to ``web/app.py`` and ``web/server.py``."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import logging
import re
import socket
import ssl
import time
from collections.abc import Iterator
from html.parser import HTMLParser

import pytest
import trustme
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import Gauge
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from gpu_exporter import __version__
from gpu_exporter.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.web.app import App, Request, Response, accepts_gzip, wants_openmetrics
from gpu_exporter.web.render import OPENMETRICS, TEXT, _value
from gpu_exporter.web.server import (
    MAX_HEAD,
    MAX_HEADERS,
    MAX_TARGET,
    SERVER,
    ExporterHTTPServer,
    _headers,
    _Refusal,
    _target,
    staleness_check,
)

PLAIN = "text/plain; version=0.0.4; charset=utf-8"
OM_ACCEPT = "application/openmetrics-text; version=1.0.0"
HEAD_S = 0.15  # the head deadline of the test server
IDLE_S = 0.4  # its keep-alive idle deadline


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Gauge("demo_value", "A demo.", registry=reg).set(7)
    return reg


def req(path: str = "/metrics", **headers: str) -> Request:
    return Request(path, "", {k.lower().replace("_", "-"): v for k, v in headers.items()})


# --- the routes, no socket ------------------------------------------------------

def test_metrics_from_the_registry_plain_openmetrics_and_gzip() -> None:
    app = App(registry())
    plain = app.handle(req())
    assert (plain.status, plain.content_type) == (200, PLAIN)
    assert plain.headers == {"Vary": "Accept-Encoding"}
    assert b"\ndemo_value 7.0\n" in plain.body
    om = app.handle(req(accept=OM_ACCEPT))
    assert om.content_type.startswith("application/openmetrics-text; version=1.0.0")
    assert om.body.endswith(b"# EOF\n") and b"demo_value 7.0\n" in om.body
    gz = app.handle(req(accept_encoding="gzip"))
    assert gz.headers == {"Vary": "Accept-Encoding", "Content-Encoding": "gzip"}
    assert gzip.decompress(gz.body) == plain.body


def snapshot() -> Snapshot:
    b = SnapshotBuilder(1000.0)
    b.add("gpu_up", 1, gpu="0", uuid="GPU-0")
    return b.build()


@pytest.mark.parametrize(("accept", "accept_encoding", "content_type", "gzipped", "empty"), [
    ("", "", TEXT, False, b""),
    (OM_ACCEPT, "", OPENMETRICS, False, b"# EOF\n"),
    ("", "gzip", TEXT, True, b""),
    (OM_ACCEPT, "gzip", OPENMETRICS, True, b"# EOF\n"),
])
def test_metrics_from_snapshots_before_and_after_the_first_poll(
        accept: str, accept_encoding: str, content_type: str, gzipped: bool,
        empty: bytes) -> None:
    current: list[Snapshot | None] = [None]
    app = App(registry(), snapshot=lambda: current[0])
    headers = {"accept": accept, "accept-encoding": accept_encoding}
    before = app.handle(Request("/metrics", "", headers))
    assert (before.status, before.content_type) == (200, content_type)
    assert (gzip.decompress(before.body) if gzipped else before.body) == empty
    assert ("Content-Encoding" in before.headers) is gzipped
    current[0] = snapshot()
    after = app.handle(Request("/metrics", "", headers))
    assert (after.status, after.content_type) == (200, content_type)
    body = gzip.decompress(after.body) if gzipped else after.body
    assert b'gpu_up{gpu="0"' in body
    assert body.endswith(b"# EOF\n") is (content_type == OPENMETRICS)
    assert b"demo_value" not in body  # served from the snapshot, not the registry
    assert after.headers == ({"Vary": "Accept-Encoding", "Content-Encoding": "gzip"}
                             if gzipped else {"Vary": "Accept-Encoding"})


ACCEPTS = [
    "", "*/*", "text/plain", OM_ACCEPT, "application/openmetrics-text",
    "application/openmetrics-text;version=0.0.1", "application/openmetrics-text; version=",
    "application/openmetrics-text;version=1.0.0;escaping=underscores",
    "application/openmetrics-text;version=2.0.0", "application/openmetrics-text;version=x.y",
    "text/plain;version=1.0.0, application/openmetrics-text",
    "text/plain;version=0.0.4, application/openmetrics-text;version=1.0.0",
    "application/openmetrics-text;version=0.0.1,text/plain;version=1.0.0",
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3",
    # What Prometheus 2.x and 3.x send.
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,*/*;q=0.2",
    " application/openmetrics-text ; version=1.0.0", "APPLICATION/OPENMETRICS-TEXT",
    "application/openmetrics-text;version=1.0.0 ", "text/plain;version=1.0",
]


def chooses_openmetrics(accept: str) -> bool:
    """prometheus_client's choice; on a version it cannot compare ("x.y") it
    raises, and the exporter answers in the text format."""
    try:
        _, content_type = choose_encoder(accept)
    except TypeError:
        return False
    return content_type.startswith("application/openmetrics-text")


@pytest.mark.parametrize("accept", ACCEPTS)
def test_the_format_is_the_one_prometheus_client_chooses(accept: str) -> None:
    chosen = chooses_openmetrics(accept)
    assert wants_openmetrics(accept) is chosen
    served = App(snapshot=snapshot).handle(req(accept=accept))
    assert served.content_type == (OPENMETRICS if chosen else TEXT)


@given(st.lists(st.sampled_from([
    "application/openmetrics-text", "text/plain", "*/*", "version=1.0.0", "version=0.0.1",
    "version=2", "version=1.0.0.1", "q=0.5", "escaping=underscores", " ", "version="]),
    max_size=8).map(lambda parts: ";".join(parts)).flatmap(
    lambda one: st.lists(st.just(one), min_size=1, max_size=2).map(",".join)))
def test_any_accept_header_gets_the_format_prometheus_client_chooses(accept: str) -> None:
    assert wants_openmetrics(accept) is chooses_openmetrics(accept)


@given(st.floats(allow_nan=True, allow_infinity=True)
       | st.sampled_from([1e6, 1234567.0, 2345678.5, 1e15, 1.5e16, 123456789012.25, -1e7,
                          1e21, 5e-324, -0.0, 999999.9999999999]))
def test_values_are_written_as_prometheus_client_writes_them(value: float) -> None:
    assert _value(value) == floatToGoString(value)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(("accept_encoding", "gzipped"), [
    ("gzip", True), ("GZIP", True), ("x-gzip", True), ("deflate, gzip;q=0.8", True),
    ("gzip;q=0.001", True), ("gzip ; Q = 0.5", True), ("gzip;level=9", True),
    ("br, x-gzip", True), ("identity, gzip;q=1.0", True),
    ("gzip;q=0", False), ("gzip; q=0.000", False), ("x-gzip;q=0", False),
    ("gzip;q=bogus", False), ("gzip;q=", False), ("gzip;q=-1", False),
    ("deflate;q=1", False), ("identity", False), ("*", False), ("", False),
    ("gzipper", False), ("gzip;q=0, identity", False), ("gzip;q=1=2", False),
])
def test_accepts_gzip_reads_q_values(accept_encoding: str, gzipped: bool) -> None:
    assert accepts_gzip(accept_encoding) is gzipped


@pytest.mark.parametrize(("healthy", "status", "body"), [
    ((True, "Healthy"), 200, b"Healthy\n"),
    ((True, "Healthy (starting)"), 200, b"Healthy (starting)\n"),
    ((False, "Unhealthy: last poll 40s ago"), 503, b"Unhealthy: last poll 40s ago\n"),
])
def test_health_answers_what_the_check_says(healthy: tuple[bool, str], status: int,
                                            body: bytes) -> None:
    app = App(registry(), healthy=lambda: healthy)
    resp = app.handle(req("/-/healthy"))
    assert (resp.status, resp.body, resp.content_type) == (
        status, body, "text/plain; charset=utf-8")


def test_a_new_health_check_replaces_the_old_one() -> None:
    app = App(registry())
    app.set_health_check(lambda: (False, "Unhealthy: no poll completed in 31s"))
    assert app.handle(req("/-/healthy")).status == 503


@pytest.mark.parametrize(("ready", "status", "body"), [
    (True, 200, b"Ready\n"), (False, 503, b"Not ready: no poll has completed yet\n")])
def test_readiness(ready: bool, status: int, body: bytes) -> None:
    resp = App(registry(), ready=lambda: ready).handle(req("/-/ready"))
    assert (resp.status, resp.body) == (status, body)


def test_unknown_paths_404_and_a_failing_route_500(caplog: pytest.LogCaptureFixture) -> None:
    app = App(registry())
    for path in ("/nope", "/metrics/", "/Metrics", ""):
        resp = app.handle(req(path))
        assert (resp.status, resp.body) == (404, b"Not found\n"), path

    def broken(_: Request) -> Response:
        raise RuntimeError("boom")

    app.add_route("/broken", broken)
    assert (app.handle(req("/broken")).status, app.handle(req("/broken")).body) == (
        500, b"Internal error\n")
    # The operator's log names the route and keeps the traceback.
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failures] == ["handler for /broken failed"] * 2
    assert all(r.exc_info and r.exc_info[0] is RuntimeError for r in failures)


def test_routes_links_and_the_landing_page() -> None:
    with pytest.raises(ValueError, match="exporter's own endpoint"):
        App(registry(), telemetry_path="/-/healthy")
    app = App(registry(), telemetry_path="/gpu/metrics")
    assert app.telemetry_path == "/gpu/metrics"
    assert app.handle(req("/gpu/metrics")).status == 200
    assert app.handle(req("/metrics")).status == 404
    app.add_route("/extra", lambda r: Response(200, b"x"), title="Extra <b>&")
    app.add_route("/hidden", lambda r: Response(200, b"h"))
    with pytest.raises(ValueError, match="/extra is served already"):
        app.add_route("/extra", lambda r: Response(200, b"y"))
    assert app.handle(req("/extra")).body == b"x"  # the first one still answers
    app.landing_sections.append(lambda: "<p id=s1>one</p>")
    app.landing_sections.append(lambda: "<p id=s2>two</p>")
    page = app.handle(req("/"))
    assert (page.status, page.content_type) == (200, "text/html; charset=utf-8")
    text = page.body.decode()
    links = re.findall(r'<li><a href="([^"]*)">([^<]*)</a></li>', text)
    assert links == [("/gpu/metrics", "Metrics"), ("/extra", "Extra &lt;b&gt;&amp;"),
                     ("/-/healthy", "Health"), ("/-/ready", "Readiness")]
    assert "<p id=s1>one</p><p id=s2>two</p></body></html>" in text
    assert text.startswith("<!doctype html>") and "<title>GPU Exporter</title>" in text


class _Page(HTMLParser):
    """The landing page as its elements, texts and style rules."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.texts: list[tuple[str, str]] = []  # (enclosing element, text)
        self.css = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ("meta",):
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open.pop() == tag, f"</{tag}> closes something else"

    def handle_data(self, data: str) -> None:
        if self.open and self.open[-1] == "style":
            self.css += data
        else:
            self.texts.append((self.open[-1] if self.open else "", data))


def test_the_landing_page_is_well_formed_with_only_its_own_texts() -> None:
    app = App(registry())
    app.landing_sections.append(lambda: '<p><span class="bad">lost</span></p>')
    page = _Page()
    page.feed(app.handle(req("/")).body.decode())
    assert page.open == []
    assert page.texts == [
        ("title", "GPU Exporter"), ("h1", "GPU Exporter"),
        ("p", "Prometheus exporter for NVIDIA GPU nodes that says why the GPU is slow."),
        ("a", "Metrics"), ("a", "Health"), ("a", "Readiness"), ("span", "lost")]
    # Every style rule styles the page's elements or the classes the landing
    # sections use (ok, warn, bad), and nothing else is in the style element.
    rules = re.findall(r"([^{}]+)\{([^{}]+)\}", page.css)
    assert "".join(f"{sel}{{{decl}}}" for sel, decl in rules) == page.css
    selectors = {s for sel, _ in rules for s in sel.split(",")}
    assert selectors == {"body", "table", "td", "th", ".bad", ".warn", ".ok"}


@pytest.mark.parametrize(("latest", "now", "healthy", "why"), [
    (None, 1000.0 + 30, True, "Healthy (starting)"),
    (None, 1000.0 + 31, False, "Unhealthy: no poll completed in 31s"),
    (1100.0, 1100.0 + 30, True, "Healthy"),
    (1100.0, 1100.0 + 31, False, "Unhealthy: last poll 31s ago"),
])
def test_staleness_check_at_its_edges(latest: float | None, now: float, healthy: bool,
                                      why: str) -> None:
    # interval 2 s: stale after max(10 intervals, 30 s) = 30 s
    check = staleness_check(lambda: latest, lambda: 2.0, started=1000.0, clock=lambda: now)
    assert check() == (healthy, why)


def test_staleness_follows_the_interval() -> None:
    check = staleness_check(lambda: 0.0, lambda: 5.0, started=0.0, clock=lambda: 49.0)
    assert check() == (True, "Healthy")  # 10 intervals of 5 s: 50 s


# --- targets and headers, no socket ---------------------------------------------

@pytest.mark.parametrize(("raw", "expected"), [
    (b"/metrics", ("/metrics", "")),
    (b"/metrics?x=1&y", ("/metrics", "x=1&y")),
    (b"/a?b?c", ("/a", "b?c")),
    (b"http://node:9835/-/ready?q", ("/-/ready", "q")),
    (b"HTTPS://node", ("/", "")),
    (b"http://node/%7Efoo", ("/%7Efoo", "")),
    (b"/" + b"a" * (MAX_TARGET - 1), ("/" + "a" * (MAX_TARGET - 1), "")),
])
def test_request_targets(raw: bytes, expected: tuple[str, str]) -> None:
    assert _target(raw) == expected


@pytest.mark.parametrize(("raw", "status"), [
    (b"*", 400), (b"node:9835", 400), (b"ftp://node/metrics", 400), (b"http://[::1/x", 400),
    (b"metrics", 400), (b"/" + b"a" * MAX_TARGET, 414),
])
def test_request_targets_refused(raw: bytes, status: int) -> None:
    with pytest.raises(_Refusal) as refusal:
        _target(raw)
    assert refusal.value.status == status


def test_headers_join_repeats_and_stop_at_the_limits() -> None:
    assert _headers([(b"accept", b"a"), (b"host", b"x"), (b"accept", b"b")]) == {
        "accept": "a, b", "host": "x"}
    assert len(_headers([(b"x%d" % i, b"v") for i in range(MAX_HEADERS)])) == MAX_HEADERS
    value = b"v" * (MAX_HEAD - 5)  # name, value and ": " + CRLF: exactly the limit
    assert _headers([(b"x", value)]) == {"x": value.decode()}
    for items in ([(b"x%d" % i, b"v") for i in range(MAX_HEADERS + 1)],
                  [(b"x", value + b"v")]):
        with pytest.raises(_Refusal) as refusal:
            _headers(items)
        assert (refusal.value.status, refusal.value.reason, refusal.value.text) == (
            431, "Request Header Fields Too Large", "Request head too large\n")


# --- on the wire ----------------------------------------------------------------

async def _gate(request: Request) -> Response | None:
    if request.path == "/private":
        return Response(401, b"Unauthorized\n", headers={"WWW-Authenticate": "Basic"})
    if request.path == "/slow":
        await asyncio.sleep(0.3)
    return None


def make_server(ssl_context: ssl.SSLContext | None = None,
                **kwargs: float) -> ExporterHTTPServer:
    app = App(registry())
    app.gate = _gate
    app.add_route("/slow", lambda r: Response(200, b"Slow\n"))
    app.add_route("/echo", lambda r: Response(200, f"{r.path}?{r.query}".encode()))
    app.add_route("/peer", lambda r: Response(200, repr(r.peercert).encode()))
    server = ExporterHTTPServer(("127.0.0.1", 0), app, ssl_context=ssl_context,
                                **kwargs)  # type: ignore[arg-type]
    server.start()
    return server


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    server = make_server(header_timeout=HEAD_S, idle_timeout=IDLE_S)
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=3)


def read_until_closed(s: socket.socket) -> bytes:
    chunks = []
    while chunk := s.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def exchange(port: int, data: bytes) -> bytes:
    """Send ``data``, read until the server closes (3 s at most)."""
    with connect(port) as s:
        s.sendall(data)
        return read_until_closed(s)


def responses(answer: bytes, heads: tuple[int, ...] = ()
              ) -> list[tuple[bytes, dict[str, str], bytes]]:
    """Split what a connection read into (status line, headers, body); the
    answers numbered in ``heads`` are to HEAD requests (no body)."""
    out: list[tuple[bytes, dict[str, str], bytes]] = []
    while answer:
        head, _, rest = answer.partition(b"\r\n\r\n")
        status, *lines = head.split(b"\r\n")
        headers = dict(line.decode().split(": ", 1) for line in lines)
        length = 0 if len(out) in heads else int(headers.get("Content-Length", "0"))
        out.append((status, headers, rest[:length]))
        answer = rest[length:]
    return out


DATE = re.compile(r"[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT")


def refusal(status: bytes, text: bytes) -> re.Pattern[bytes]:
    return re.compile(
        re.escape(b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain; charset=utf-8\r\n"
                  b"Content-Length: %d\r\nServer: %s\r\nDate: " % (len(text), SERVER.encode()))
        + DATE.pattern.encode() + re.escape(b"\r\nConnection: close\r\n\r\n" + text) + b"$")


BAD = (b"400 Bad Request", b"Bad request\n")


@pytest.mark.parametrize(("request_bytes", "expected"), [
    (b"GET /-/ready HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
     BAD),
    (b"GET /-/ready HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", BAD),
    (b"GET /-/ready HTTP/1.1\r\nHost: x\r\nNo-colon-here\r\n\r\n", BAD),
    (b"GARBAGE\r\n\r\n", BAD),
    (b"GET /-/ready\r\n\r\n", BAD),
    (b"GET /-/ready HTTP/1.1\r\n\r\n", BAD),  # HTTP/1.1 without Host
    (b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", BAD),
    (b"GET /" + b"a" * MAX_TARGET + b" HTTP/1.1\r\nHost: x\r\n\r\n",
     (b"414 URI Too Long", b"Request target too long\n")),
    # Longer than a head may be before its request line is even in.
    (b"GET /" + b"a" * (MAX_HEAD + 10),
     (b"414 URI Too Long", b"Request target too long\n")),
    (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X%d: v\r\n" % i for i in range(MAX_HEADERS))
     + b"\r\n", (b"431 Request Header Fields Too Large", b"Request head too large\n")),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"v" * (MAX_HEAD + 10),
     (b"431 Request Header Fields Too Large", b"Request head too large\n")),
])
def test_a_refused_request_gets_exactly_one_answer_and_a_closed_connection(
        port: int, request_bytes: bytes, expected: tuple[bytes, bytes]) -> None:
    answer = exchange(port, request_bytes)
    assert refusal(*expected).match(answer), answer[:300]


def test_a_get_with_a_body_is_answered_once_and_the_body_never_read_as_a_request(
        port: int) -> None:
    answer = exchange(port, b"GET /-/ready HTTP/1.1\r\nHost: x\r\nContent-Length: 38\r\n\r\n"
                            b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
    [(status, headers, body)] = responses(answer)
    assert (status, body, headers["Connection"]) == (b"HTTP/1.1 200 OK", b"Ready\n", "close")
    chunked = exchange(port, b"GET /-/ready HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
                             b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    [(status, headers, body)] = responses(chunked)
    assert (status, body, headers["Connection"]) == (b"HTTP/1.1 200 OK", b"Ready\n", "close")


def test_keep_alive_head_methods_the_gate_and_the_headers(
        port: int, caplog: pytest.LogCaptureFixture) -> None:
    one = (b"GET http://node:9835/-/ready HTTP/1.1\r\nHost: node\r\n\r\n"  # absolute URI
           b"HEAD /-/ready HTTP/1.1\r\nHost: x\r\n\r\n"
           b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
           b"OPTIONS /-/ready HTTP/1.1\r\nHost: x\r\n\r\n"
           b"GET /private HTTP/1.1\r\nHost: x\r\n\r\n"
           b"GET /peer HTTP/1.1\r\nHost: x\r\n\r\n"
           b"GET /echo?a=1&b HTTP/1.1\r\nHost: x\r\n\r\n"
           b"GET /nope?x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answer = exchange(port, one)
    got = responses(answer, heads=(1,))
    statuses = [(s, b) for s, _, b in got]
    assert statuses == [
        (b"HTTP/1.1 200 OK", b"Ready\n"),
        (b"HTTP/1.1 200 OK", b""),
        (b"HTTP/1.1 405 Method Not Allowed", b"Method not allowed\n"),
        (b"HTTP/1.1 405 Method Not Allowed", b"Method not allowed\n"),
        (b"HTTP/1.1 401 Unauthorized", b"Unauthorized\n"),
        (b"HTTP/1.1 200 OK", b"None"),  # no TLS: no client certificate
        (b"HTTP/1.1 200 OK", b"/echo?a=1&b"),
        (b"HTTP/1.1 404 Not Found", b"Not found\n"),
    ]
    for _, headers, _ in got:
        assert headers["Server"] == f"gpu-exporter/{__version__}"
        assert DATE.fullmatch(headers["Date"])
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert "Connection" not in headers or headers["Connection"] == "close"
    assert got[1][1]["Content-Length"] == "6"  # HEAD: a GET's head, no body
    assert got[2][1]["Allow"] == "GET, HEAD" and got[3][1]["Allow"] == "GET, HEAD"
    assert got[4][1]["WWW-Authenticate"] == "Basic"
    assert got[-1][1]["Connection"] == "close"
    assert all("Connection" not in h for _, h, _ in got[:-1])
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    # After a kept-alive request, the next request line is judged afresh.
    long_line = exchange(port, b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n"
                               b"GET /" + b"a" * (MAX_HEAD + 10))
    assert refusal(b"414 URI Too Long", b"Request target too long\n").search(long_line)


def test_metrics_on_the_wire_in_one_send(port: int) -> None:
    answer = exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n"
                            b"Connection: close\r\n\r\n")
    [(status, headers, body)] = responses(answer)
    assert status == b"HTTP/1.1 200 OK"
    assert (headers["Content-Type"], headers["Content-Encoding"], headers["Vary"]) == (
        PLAIN, "gzip", "Accept-Encoding")
    assert b"\ndemo_value 7.0\n" in gzip.decompress(body)


def elapsed_until_closed(s: socket.socket) -> float:
    t0 = time.monotonic()
    rest = read_until_closed(s)
    assert rest == b"" or rest.startswith(b"HTTP/1.1 200"), rest
    return time.monotonic() - t0


def test_a_silent_or_unfinished_head_is_closed_at_the_head_deadline(
        port: int, caplog: pytest.LogCaptureFixture) -> None:
    with connect(port) as s:
        assert HEAD_S * 0.5 < elapsed_until_closed(s) < HEAD_S + 1.5
    with connect(port) as s:
        s.sendall(b"GET /-/ready HTTP/1.1\r\nHost: x\r\n")
        t = elapsed_until_closed(s)
        assert HEAD_S * 0.5 < t < HEAD_S + 1.5
    time.sleep(0.05)  # the server's side of the close
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def dribble(s: socket.socket, within: float) -> float:
    """Send a head a byte every 50 ms; the seconds until the server closes."""
    t0 = time.monotonic()
    with contextlib.suppress(ConnectionError):
        for byte in b"GET /-/ready HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"z" * 100:
            s.sendall(bytes([byte]))
            time.sleep(0.05)
            if time.monotonic() - t0 > within:
                break
    return time.monotonic() - t0


def test_the_head_deadline_runs_from_the_accept_and_from_a_next_heads_first_byte() -> None:
    server = make_server(header_timeout=0.4)
    port = server.server_address[1]
    try:
        with connect(port) as s:
            t0 = time.monotonic()
            time.sleep(0.3)  # then a head dribbles in: due 0.4 s after the accept
            dribble(s, within=1.5)
            assert time.monotonic() - t0 < 0.65
        with connect(port) as s:
            s.sendall(b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(65536).endswith(b"Ready\n")
            # kept alive; the next head dribbles: due 0.4 s after its first byte
            assert dribble(s, within=1.5) < 0.9
    finally:
        server.shutdown()
        server.server_close()


def test_a_kept_alive_connection_waits_the_idle_deadline_then_a_head_deadline(
        port: int) -> None:
    with connect(port) as s:
        s.sendall(b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(65536).endswith(b"\r\n\r\nReady\n")
        t0 = time.monotonic()
        assert s.recv(1) == b""  # idle, then closed
        assert IDLE_S * 0.8 < time.monotonic() - t0 < IDLE_S + 1.5
    with connect(port) as s:
        s.sendall(b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(65536).endswith(b"\r\n\r\nReady\n")
        time.sleep(HEAD_S * 1.5)  # idle past a head deadline: still open
        s.sendall(b"GET /-/ready HTTP/1.1\r\n")  # a head begins: its own deadline
        t = elapsed_until_closed(s)
        assert t < IDLE_S * 0.8, "the next head had the idle deadline"


def test_at_the_connection_limit_the_longest_idle_connection_makes_room() -> None:
    server = make_server(max_connections=2, header_timeout=5.0)
    port = server.server_address[1]
    try:
        # `first` never sends a byte (a port scanner); `second` has asked
        # and been answered since: idle for less time.
        first = connect(port)
        time.sleep(0.05)
        second = connect(port)
        second.sendall(b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        assert second.recv(65536).endswith(b"Ready\n")
        assert server.connection_count == 2
        answer = exchange(port, b"GET /-/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        assert first.recv(10) == b""  # closed to make room
        second.sendall(b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        assert second.recv(65536).endswith(b"Ready\n")  # still served
        assert server.shed == 1
        assert server.connection_count == 1
        with connect(port) as fourth:  # room without eviction
            fourth.sendall(b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            assert fourth.recv(65536).endswith(b"Ready\n")
            assert server.connection_count == 2
            assert exchange(port, b"GET /-/ready HTTP/1.1\r\nHost: x\r\n"
                                  b"Connection: close\r\n\r\n").endswith(b"Ready\n")
            assert second.recv(10) == b""  # now the one idle the longest
        assert server.shed == 2
        # Every connection busy answering: the new one is closed at once.
        for s in (first, second):
            s.close()
        slow = [connect(port), connect(port)]
        for s in slow:
            s.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + 3
        while server.connection_count < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        with connect(port) as third:
            t0 = time.monotonic()
            try:
                third.sendall(b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n")
                refused = third.recv(10)
            except ConnectionError:
                refused = b""
            assert refused == b"" and time.monotonic() - t0 < 0.4
        assert server.shed == 3
        for s in slow:
            assert s.recv(65536).endswith(b"Slow\n")  # the busy ones finish
            s.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_shutdown_closes_every_connection_and_stops_listening(
        caplog: pytest.LogCaptureFixture) -> None:
    server = make_server()
    port = server.server_address[1]
    thread = server._thread
    server.start()  # a second start changes nothing
    assert server._thread is thread
    # A thread named for thread dumps, and one that never keeps the process alive.
    assert thread is not None and thread.name == "http" and thread.daemon is True
    idle, slow = connect(port), connect(port)
    slow.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    while server.connection_count < 2:
        time.sleep(0.01)
    t0 = time.monotonic()
    server.shutdown()
    assert time.monotonic() - t0 < 0.9
    for s in (idle, slow):
        with contextlib.suppress(ConnectionError):  # closed, or reset
            assert s.recv(10) == b""
        s.close()
    assert server.connection_count == 0
    assert server._thread is not None and not server._thread.is_alive()
    with pytest.raises(ConnectionError):
        connect(port).close()
    server.server_close()
    server.shutdown()  # a second shutdown is harmless
    # Wound down in order: no task left pending, nothing logged as failed.
    gc.collect()  # a task left pending is reported when it is collected
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_defaults_are_the_documented_ones() -> None:
    server = ExporterHTTPServer(("127.0.0.1", 0), App(registry()))
    try:
        # docs/reliability.md: a head within 10 s, kept alive 5 min, 1024 open
        assert (server.header_timeout, server.idle_timeout, server.max_connections) == (
            10.0, 300.0, 1024)
    finally:
        server.server_close()


def test_an_ipv6_address_is_served() -> None:
    server = ExporterHTTPServer(("::1", 0), App(registry()))
    server.start()
    port = server.server_address[1]
    try:
        assert server.server_address == ("::1", port)
        with socket.create_connection(("::1", port), timeout=3) as s:
            s.sendall(b"GET /-/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert read_until_closed(s).endswith(b"\r\n\r\nReady\n")
    finally:
        server.shutdown()
        server.server_close()


def test_tls_hands_the_client_certificate_to_the_routes_and_drops_plain_text() -> None:
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca.configure_trust(context)
    context.verify_mode = ssl.CERT_OPTIONAL
    server = make_server(context, header_timeout=HEAD_S)
    port = server.server_address[1]
    try:
        for with_cert in (True, False):
            client = ssl.create_default_context()
            ca.configure_trust(client)
            if with_cert:
                ca.issue_cert("client.example").configure_cert(client)
            with client.wrap_socket(connect(port), server_hostname="127.0.0.1") as s:
                s.sendall(b"GET /peer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                [(status, _, body)] = responses(read_until_closed(s))
            assert status == b"HTTP/1.1 200 OK"
            if with_cert:
                assert b"'subjectAltName': (('DNS', 'client.example'),)" in body
            else:
                assert body == b"None"
        # A server that asks for no client certificate: none reaches the
        # routes (ssl gives an empty dict there). The context is read per
        # connection, so a reload's new one serves the next connection.
        plain_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(plain_tls)
        server.ssl_context = plain_tls
        client = ssl.create_default_context()
        ca.configure_trust(client)
        ca.issue_cert("client.example").configure_cert(client)
        with client.wrap_socket(connect(port), server_hostname="127.0.0.1") as s:
            s.sendall(b"GET /peer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert responses(read_until_closed(s))[0][2] == b"None"
        # Plain HTTP to the TLS port: no answer, closed.
        assert exchange(port, b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n") == b""
    finally:
        server.shutdown()
        server.server_close()


def test_the_date_header_is_the_imf_fixdate_the_standard_library_writes() -> None:
    """RFC 9110's Date: checked against email.utils (an implementation this
    project did not write) over every weekday and month, leap day and century
    turns included."""
    import email.utils

    from gpu_exporter.web.server import http_date

    seconds = [0, 951_782_400, 1_709_164_800, 4_102_444_799, 4_102_444_800]
    seconds += list(range(1_700_000_000, 1_700_000_000 + 400 * 86_400, 86_400 + 3_607))
    for second in seconds:
        assert http_date(second).decode() == email.utils.formatdate(second, usegmt=True)
