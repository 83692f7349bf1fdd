"""The HTTP server on the wire, on 127.0.0.1 with a one-gauge registry (no
simulator, so it starts in milliseconds): one answer per request, deadlines
for silent and dribbling clients, the connection limit, shutdown, IPv6 and
TLS. Fast on purpose: mutation testing runs these for every edit it makes to
``web/app.py`` and ``web/server.py``."""

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

import pytest
import trustme

from gpu_exporter import __version__
from gpu_exporter.web.app import App, Request, Response
from gpu_exporter.web.server import (
    MAX_HEAD,
    MAX_HEADERS,
    MAX_TARGET,
    SERVER,
    ExporterHTTPServer,
)
from tests.web.test_http_routes import PLAIN, registry

HEAD_S = 0.15  # the head deadline of the test server
IDLE_S = 0.4  # its keep-alive idle deadline


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
