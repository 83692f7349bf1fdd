"""Request handling without a socket: the routes and content negotiation on
``Request`` objects, request targets and headers as the server parses them.
Fast on purpose: mutation testing (``./scripts/mutation.sh``) runs these and
tests/web/test_http_wire.py for every edit it makes to ``web/app.py`` and
``web/server.py``."""

from __future__ import annotations

import gzip
import logging
import re
from html.parser import HTMLParser

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import Gauge
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from gpu_exporter.catalogs.device import UP
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.web.app import App, Request, Response, accepts_gzip, wants_openmetrics
from gpu_exporter.web.render import OPENMETRICS, TEXT, _value
from gpu_exporter.web.server import (
    MAX_HEAD,
    MAX_HEADERS,
    MAX_TARGET,
    _headers,
    _Refusal,
    _target,
    staleness_check,
)

PLAIN = "text/plain; version=0.0.4; charset=utf-8"
OM_ACCEPT = "application/openmetrics-text; version=1.0.0"


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
    b.add(UP, 1, gpu="0", uuid="GPU-0")
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


