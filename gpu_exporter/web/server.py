"""The HTTP server: h11's HTTP/1.1 state machine (the parser httpx and uvicorn
use) driven by asyncio streams on one event-loop thread.

h11 does what is easy to get wrong by hand: framing (Content-Length and
chunked bodies, keep-alive, HTTP/1.0), and refusing what is malformed or
ambiguous (conflicting Content-Length headers, a header line without a colon,
a bad request line, a missing Host). This module adds what an exporter on
every node needs around it:

- an open connection costs a file descriptor and a few kilobytes, never a
  thread: a port scanner, a load balancer's probes or a thousand half-open
  connections cannot keep a scrape waiting;
- a request head must arrive within ``header_timeout`` of its first byte (of
  the accept for a new connection), however slowly it dribbles in; a
  kept-alive connection may then wait ``idle_timeout`` for its next request;
- at most ``max_connections`` are open: at the limit the connection idle the
  longest (no request in progress) is closed to make room, and when none is
  idle the new one is closed at once;
- TLS is set up per connection with the web config's context of the moment,
  so a reloaded certificate or CA serves the next connection;
- a malformed or ambiguous request gets exactly one 400 (414 or 431 for a
  request line or head that is too long) and a closed connection; a request
  with a body (nothing here takes one) is answered and the connection closed,
  so no byte of the body is ever read as a request;
- ``shutdown()`` closes every connection at once and returns within a second,
  whatever clients are connected.

Why h11 and not aiohttp: both parse strictly and serve /metrics as fast (see
docs/reliability.md), but importing aiohttp costs the process about 11 MiB of
memory and h11 under 1 MiB, on an exporter whose whole budget is 60 MiB.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import h11

from gpu_exporter import __version__
from gpu_exporter.facts.cadence import stale_after
from gpu_exporter.web.app import App, Request, Response

if TYPE_CHECKING:
    import ssl

log = logging.getLogger(__name__)

SERVER = f"gpu-exporter/{__version__}"
# The kernel's accept backlog: a burst of scrapers beyond it would have its
# SYNs dropped and retried a second later.
BACKLOG = 128
# How long shutdown() waits for the event loop to wind down.
SHUTDOWN_S = 1.0
# Request limits, as Go's net/http words them (414, 431).
MAX_TARGET = 8 * 1024
MAX_HEAD = 16 * 1024
MAX_HEADERS = 100
_READ = 64 * 1024
_METHODS = (b"GET", b"HEAD")


class _Refusal(Exception):
    """A request answered with an error before any route sees it."""

    def __init__(self, status: int, reason: str, text: str) -> None:
        super().__init__(text)
        self.status, self.reason, self.text = status, reason, text


def _bad_request() -> _Refusal:
    return _Refusal(400, "Bad Request", "Bad request\n")


def _too_large(request_line_done: bool) -> _Refusal:
    if not request_line_done:
        return _Refusal(414, "URI Too Long", "Request target too long\n")
    return _Refusal(431, "Request Header Fields Too Large", "Request head too large\n")


class _Connection:
    """One client connection's place in the server's table, and its deadline."""

    __slots__ = ("busy", "since", "timer", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.busy = False  # a request is being answered
        self.since = time.monotonic()  # idle, or waiting for a head, since
        self.timer: asyncio.TimerHandle | None = None

    def deadline(self, seconds: float) -> None:
        """Close the connection in ``seconds`` unless told otherwise first."""
        self.clear()
        self.timer = asyncio.get_running_loop().call_later(seconds, self.evict)

    def clear(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def evict(self) -> None:
        self.timer = None
        self.writer.transport.abort()


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@functools.lru_cache(maxsize=1)
def http_date(second: int) -> bytes:
    """The Date header (RFC 9110's IMF-fixdate, in English whatever the
    locale), formatted once a second, however many requests come in it. Not
    email.utils.formatdate: the email package it loads costs every node about
    0.3 MiB for this one line."""
    t = time.gmtime(second)
    return (f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year:04d} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT").encode()


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _target(raw: bytes) -> tuple[str, str]:
    """The path and query of a request target: origin form (``/metrics``) or,
    as Go's server takes it, absolute form (``http://host/metrics``)."""
    if len(raw) > MAX_TARGET:
        raise _too_large(False)
    text = raw.decode("latin-1")
    if text.startswith("/"):
        path, _, query = text.partition("?")
        return path, query
    if text[:8].lower().startswith(("http://", "https://")):
        try:
            parts = urlsplit(text)
        except ValueError:
            raise _bad_request() from None
        return parts.path or "/", parts.query
    raise _bad_request()  # "*" or an authority: nothing here answers those


def _headers(items: list[tuple[bytes, bytes]]) -> dict[str, str]:
    if len(items) > MAX_HEADERS or sum(len(n) + len(v) + 4 for n, v in items) > MAX_HEAD:
        raise _too_large(True)
    out: dict[str, str] = {}
    for name, value in items:
        key = name.decode("latin-1")  # h11 gives names in lower case
        text = value.decode("latin-1")
        # Repeated headers join with ", " (RFC 9110 §5.3).
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out


class ExporterHTTPServer:
    """Binds at construction (so an address in use fails before anything
    starts), serves from ``start()`` on, until ``shutdown()``."""

    def __init__(self, address: tuple[str, int], app: App,
                 header_timeout: float = 10.0, idle_timeout: float = 300.0,
                 max_connections: int = 1024,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        # Read at every accept: the web config swaps it on reload.
        self.ssl_context = ssl_context
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # Listening from here on (asyncio sets the backlog when serving starts).
        self._sock = socket.create_server((host, port), family=family)
        self.server_address: tuple[str, int] = self._sock.getsockname()[:2]
        self._open: dict[_Connection, None] = {}  # oldest first
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._serving = threading.Event()
        self._stop: asyncio.Future[None] | None = None
        self.shed = 0  # connections closed to stay within max_connections

    # --- connections -----------------------------------------------------------
    @property
    def connection_count(self) -> int:
        return len(self._open)

    def _make_room(self) -> bool:
        """At the limit: close the connection idle the longest; False when
        every one is answering a request."""
        if len(self._open) < self.max_connections:
            return True
        idle = [c for c in self._open if not c.busy]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.since)
        self._open.pop(oldest, None)
        self.shed += 1
        log.debug("%d connections open: closing the one idle the longest",
                  self.max_connections)
        oldest.evict()
        return True

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._make_room():
            self.shed += 1
            writer.transport.abort()
            return
        conn = _Connection(writer)
        self._open[conn] = None
        try:
            await self._converse(conn, reader, writer)
        except _Refusal as refusal:
            log.debug("refused a request: %s %s", refusal.status, refusal.reason)
            body = refusal.text.encode()
            writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                         b"Content-Length: %d\r\nServer: %s\r\nDate: %s\r\n"
                         b"Connection: close\r\n\r\n%s"
                         % (refusal.status, refusal.reason.encode(), len(body),
                            SERVER.encode(), http_date(int(time.time())), body))
        except (ConnectionError, OSError, TimeoutError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("an HTTP connection failed")
        finally:
            conn.clear()
            self._open.pop(conn, None)
            transport = writer.transport
            if not transport.is_closing():
                writer.close()  # after what is written has been sent
                if transport.get_write_buffer_size():
                    # A client that does not read it is waited for no longer
                    # than a request head may take.
                    asyncio.get_running_loop().call_later(self.header_timeout,
                                                          transport.abort)

    async def _converse(self, conn: _Connection, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        conn.deadline(self.header_timeout)  # the first head is due from the accept
        context = self.ssl_context
        if context is not None:
            try:
                await writer.start_tls(context, ssl_handshake_timeout=self.header_timeout)
            except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
                log.debug("TLS handshake failed: %s", exc)
                writer.transport.abort()
                return
        peercert = writer.get_extra_info("peercert") if context is not None else None
        h = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        line_done = False  # the request line of the head under way is in
        idle = False  # kept alive, waiting for the next request's first byte
        while True:
            try:
                event = h.next_event()
            except h11.RemoteProtocolError as exc:
                if exc.error_status_hint == 431:
                    raise _too_large(line_done) from None
                raise _bad_request() from None
            if event is h11.NEED_DATA:
                data = await reader.read(_READ)
                if data:
                    if idle:
                        idle = False
                        conn.deadline(self.header_timeout)
                    line_done = line_done or b"\n" in data
                h.receive_data(data)
                continue
            if not isinstance(event, h11.Request):
                return  # closed by the client, or the body of a request answered
            conn.clear()
            conn.busy = True
            try:
                keep = await self._answer(h, event, writer, peercert)
            finally:
                conn.busy, conn.since = False, time.monotonic()
            if not keep:
                return
            try:
                ended = h.next_event()  # a request without a body ends at once
            except h11.RemoteProtocolError:
                return
            if not isinstance(ended, h11.EndOfMessage) or h.our_state is not h11.DONE:
                return
            h.start_next_cycle()
            line_done, idle = False, True
            conn.deadline(self.idle_timeout)

    async def _answer(self, h: h11.Connection, event: h11.Request,
                      writer: asyncio.StreamWriter, peercert: object) -> bool:
        """Answer one request; False when the connection closes after it."""
        path, query = _target(event.target)
        headers = _headers(list(event.headers))
        if "transfer-encoding" in headers and "content-length" in headers:
            raise _bad_request()  # two framings: which one a proxy used is anyone's guess
        # Nothing here takes a body: a request with one is answered and the
        # connection closed, so no byte of the body is taken for a request.
        with_body = "transfer-encoding" in headers or headers.get("content-length", "0") != "0"
        if event.method not in _METHODS:
            resp = Response(405, b"Method not allowed\n", headers={"Allow": "GET, HEAD"})
        else:
            req = Request(path, query, headers,
                          peercert if isinstance(peercert, dict) and peercert else None)
            refused = await self.app.gate(req) if self.app.gate is not None else None
            resp = refused if refused is not None else self.app.handle(req)
        out = [("Content-Type", resp.content_type), ("Content-Length", str(len(resp.body))),
               ("Server", SERVER), ("Date", http_date(int(time.time())).decode()),
               *resp.headers.items()]
        if with_body:
            out.append(("Connection", "close"))
        parts = [h.send(h11.Response(status_code=resp.status, headers=out,
                                     reason=_reason(resp.status)))]
        if event.method != b"HEAD" and resp.body:
            parts.append(h.send(h11.Data(data=resp.body)))
        parts.append(h.send(h11.EndOfMessage()))
        writer.write(b"".join(p for p in parts if p))  # one send for head and body
        await writer.drain()  # a client that does not read holds one body, no more
        return not with_body

    # --- the event loop --------------------------------------------------------
    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        self._stop = loop.create_future()
        listener = await asyncio.start_server(self._client, sock=self._sock, backlog=BACKLOG)
        self._serving.set()
        try:
            await self._stop
        finally:
            listener.close()
            for conn in list(self._open):
                conn.evict()
            self._open.clear()
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            if rest:
                await asyncio.wait(rest, timeout=0.2)

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        loop.set_exception_handler(_ignore_cancelled_clients)
        try:
            loop.run_until_complete(self._serve())
        except Exception:
            log.exception("the HTTP server stopped")
        finally:
            self._serving.set()
            with contextlib.suppress(Exception):
                loop.close()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="http", daemon=True)
        self._thread.start()
        self._serving.wait(5.0)

    def shutdown(self) -> None:
        """Stop serving and close every connection; returns within about a second."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        def finish() -> None:
            if self._stop is not None and not self._stop.done():
                self._stop.set_result(None)

        with contextlib.suppress(RuntimeError):  # the loop has ended already
            loop.call_soon_threadsafe(finish)
        thread.join(SHUTDOWN_S)
        if thread.is_alive():
            log.warning("the HTTP server did not stop within %.0fs; leaving it", SHUTDOWN_S)

    def server_close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def _ignore_cancelled_clients(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's handler of errors nothing awaited, less one that is none: on
    Python 3.11, asyncio.start_server asks each finished client task for its
    exception in a done callback, and for a task the shutdown cancelled that
    raises CancelledError, logged as an error with a traceback (Python 3.12
    checks first). A connection cut off by a stop is not an error."""
    if isinstance(context.get("exception"), asyncio.CancelledError):
        log.debug("a connection was cut off by the shutdown")
        return
    loop.default_exception_handler(context)


def serve_in_thread(server: ExporterHTTPServer) -> threading.Thread | None:
    """Start serving (on the server's own event-loop thread)."""
    server.start()
    return server._thread


def staleness_check(latest_timestamp: Callable[[], float | None],
                    interval: Callable[[], float], started: float,
                    clock: Callable[[], float] = time.time) -> Callable[[], tuple[bool, str]]:
    """Healthy while polls keep coming: stale metrics must not look healthy.
    ``interval``: the time the poll loop waits until its next poll, read at
    each check (after a reload the loop waits out the old interval once)."""

    def check() -> tuple[bool, str]:
        ts = latest_timestamp()
        now = clock()
        limit = stale_after(interval())
        if ts is None:
            if now - started > limit:
                return False, f"Unhealthy: no poll completed in {now - started:.0f}s"
            return True, "Healthy (starting)"
        age = now - ts
        if age > limit:
            return False, f"Unhealthy: last poll {age:.0f}s ago"
        return True, "Healthy"

    return check


__all__ = ["App", "ExporterHTTPServer", "Request", "Response",
           "serve_in_thread", "staleness_check"]
