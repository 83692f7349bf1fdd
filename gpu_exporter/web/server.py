"""The HTTP server: aiohttp's HTTP/1.1 protocol (its C parser, llhttp, the one
Node.js uses) on an asyncio event loop in one thread.

An open connection costs a file descriptor and a few kilobytes, never a
thread: a port scanner, a load balancer's probes or a thousand half-open
connections cannot keep a scrape waiting. On top of aiohttp:

- a request head must arrive within ``header_timeout`` of its first byte (of
  the accept for a new connection), however slowly it dribbles in; a
  kept-alive connection may then wait ``idle_timeout`` for its next request;
- at most ``max_connections`` are open: at the limit the longest-idle one (no
  request in progress) is closed to make room, and when none is idle the new
  connection is closed at once;
- TLS is set up per connection with the web config's context of the moment,
  so a reloaded certificate or CA serves the next connection;
- every malformed or ambiguous request (a header line without a colon,
  conflicting Content-Length headers, a bad request line) gets one 400 and a
  closed connection; a GET or HEAD with a body is answered and the connection
  closed, so the body can never be read as a second request;
- ``shutdown()`` closes every connection at once and returns within a second,
  whatever clients are connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.web_protocol import RequestHandler

from gpu_exporter import __version__
from gpu_exporter.web.app import App, Request, Response
from gpu_exporter.web.endpoints import parse_listen_address

log = logging.getLogger(__name__)

SERVER = f"gpu-exporter/{__version__}"
# The kernel's accept backlog: a burst of scrapers beyond it would have its
# SYNs dropped and retried a second later.
BACKLOG = 128
# How long shutdown() waits for the event loop to wind down.
SHUTDOWN_S = 1.0
_METHODS = ("GET", "HEAD")


class _Connection(RequestHandler):
    """aiohttp's protocol for one connection, with a deadline for each
    request head and a place in the server's connection table."""

    def __init__(self, manager: web.Server, owner: ExporterHTTPServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.owner = owner
        self.busy = False  # a request is being answered
        self.since = time.monotonic()  # idle or waiting for a head since
        self._head_timer: asyncio.TimerHandle | None = None

    # --- the request head deadline --------------------------------------------
    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self._loop.call_later(self.owner.header_timeout, self._overdue)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _overdue(self) -> None:
        self._head_timer = None
        if not self.busy:
            log.debug("closing a connection whose request head did not arrive within %.1fs",
                      self.owner.header_timeout)
            self.force_close()

    def head_arrived(self) -> None:
        self.busy = True
        self._disarm()

    # --- aiohttp's hooks -----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.owner.track(self)
        self._arm()  # a new connection owes its first head from the accept

    def data_received(self, data: bytes) -> None:
        if not self.busy and self._head_timer is None:
            # The first byte of the next request on a kept-alive connection.
            self.since = time.monotonic()
            self._arm()
        super().data_received(data)

    async def finish_response(self, request: web.BaseRequest, resp: web.StreamResponse,
                              start_time: float | None) -> tuple[web.StreamResponse, bool]:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self.busy = False
            self.since = time.monotonic()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        self.owner.untrack(self)
        super().connection_lost(exc)

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status == 500:
            return super().handle_error(request, status, exc, message)
        # A malformed request is the client's problem: one debug line, not a
        # traceback per request a scanner sends.
        log.debug("refused a malformed request (%s): %s", status, message or exc)
        status, text = _refusal(status, exc)
        resp = web.Response(status=status, text=text)
        resp.headers["Server"] = SERVER
        resp.force_close()
        return resp

    def evict(self) -> None:
        self.force_close()


def _refusal(status: int, exc: BaseException | None) -> tuple[int, str]:
    """The status and a fixed text for a request the parser refused; nothing
    of the request is echoed back."""
    if isinstance(exc, LineTooLong):
        line = exc.args[0] if exc.args else b""
        text = line.decode("latin-1") if isinstance(line, bytes | bytearray) else str(line)
        if text.startswith(("/", "http:", "https:", "*")):
            return 414, "Request-URI too long\n"
        return 431, "Request header fields too large\n"
    if isinstance(exc, BadHttpMessage) and "Too many headers" in str(exc):
        return 431, "Request header fields too large\n"
    return status, "Bad request\n"


class _Server(web.Server):
    def __init__(self, handler: Callable[[web.BaseRequest], Any], owner: ExporterHTTPServer,
                 **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.owner = owner

    def __call__(self) -> RequestHandler:
        return _Connection(self, self.owner, loop=self._loop, **self._kwargs)


class _TlsHandshake(asyncio.Protocol):
    """A new TLS connection until its handshake is done, then handed to the
    HTTP protocol. The context is the web config's at the accept."""

    def __init__(self, owner: ExporterHTTPServer, context: ssl.SSLContext,
                 http: Callable[[], RequestHandler]) -> None:
        self.owner = owner
        self.context = context
        self.http = http
        self.busy = False
        self.since = time.monotonic()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # Nothing may be read before start_tls takes the socket over.
        transport.pause_reading()
        self.owner.track(self)
        self.owner.spawn(self._handshake(transport))

    async def _handshake(self, transport: asyncio.Transport) -> None:
        protocol = self.http()
        loop = asyncio.get_running_loop()
        try:
            tls = await loop.start_tls(transport, protocol, self.context, server_side=True,
                                       ssl_handshake_timeout=self.owner.header_timeout)
        except (TimeoutError, OSError, ssl.SSLError, ConnectionError) as exc:
            log.debug("TLS handshake failed: %s", exc)
            transport.abort()
            return
        finally:
            self.owner.untrack(self)
        if tls is None or tls.is_closing():
            transport.abort()
            return
        protocol.connection_made(tls)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.owner.untrack(self)

    def evict(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class _Refused(asyncio.Protocol):
    """Every connection is busy answering: this one is closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort()  # type: ignore[attr-defined]


class ExporterHTTPServer:
    """Binds at construction (so an address in use fails before anything
    starts), serves from ``start()`` on, until ``shutdown()``."""

    def __init__(self, address: tuple[str, int], app: App, max_requests: int = 8,
                 header_timeout: float = 10.0, idle_timeout: float = 300.0,
                 max_connections: int = 1024,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.max_requests = max_requests
        # Read at every accept: the web config swaps it on reload.
        self.ssl_context = ssl_context
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, port), family=family, backlog=BACKLOG,
                                          reuse_port=False)
        self._sock.setblocking(False)
        self.server_address: tuple[str, int] = self._sock.getsockname()[:2]
        self._open: dict[object, None] = {}  # connections, oldest first
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._serving = threading.Event()
        self._stop: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.shed = 0  # connections closed to stay within max_connections

    # --- connections -----------------------------------------------------------
    @property
    def connection_count(self) -> int:
        return len(self._open)

    def track(self, conn: object) -> None:
        self._open[conn] = None

    def untrack(self, conn: object) -> None:
        self._open.pop(conn, None)

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _make_room(self) -> bool:
        """At the limit: close the connection idle the longest; False when
        every one is answering a request."""
        if len(self._open) < self.max_connections:
            return True
        idle = [c for c in self._open if not getattr(c, "busy", False)]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: getattr(c, "since", 0.0))
        self.untrack(oldest)
        self.shed += 1
        oldest.evict()  # type: ignore[attr-defined]
        return True

    def _protocol(self, server: _Server) -> asyncio.BaseProtocol:
        if not self._make_room():
            self.shed += 1
            return _Refused()
        context = self.ssl_context
        if context is None:
            return server()
        return _TlsHandshake(self, context, server)

    # --- requests --------------------------------------------------------------
    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        protocol = request.protocol
        if isinstance(protocol, _Connection):
            protocol.head_arrived()
        with_body = request.body_exists
        if request.method not in _METHODS:
            resp = Response(405, b"Method not allowed\n", headers={"Allow": "GET, HEAD"})
        else:
            transport = request.transport
            cert = transport.get_extra_info("peercert") if transport is not None else None
            req = Request(request.rel_url.path, request.rel_url.query_string,
                          {k.lower(): v for k, v in request.headers.items()}, cert or None)
            refused = await self.app.gate(req) if self.app.gate is not None else None
            resp = refused if refused is not None else self.app.handle(req)
        out = web.Response(status=resp.status, body=resp.body)
        out.headers["Content-Type"] = resp.content_type
        out.headers["Server"] = SERVER
        out.headers.update(resp.headers)
        if with_body:
            # Nothing here takes a body: answer, then close, so no byte of it
            # can be taken for a request of its own.
            out.force_close()
        return out

    # --- the event loop --------------------------------------------------------
    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        self._stop = loop.create_future()
        server = _Server(self._handle, self, access_log=None,
                         keepalive_timeout=self.idle_timeout, lingering_time=1.0,
                         max_line_size=8190, max_field_size=8190)
        listener = await loop.create_server(lambda: self._protocol(server), sock=self._sock,
                                            backlog=BACKLOG)
        self._serving.set()
        try:
            await self._stop
        finally:
            listener.close()
            for conn in list(self._open):
                transport = getattr(conn, "transport", None)
                if transport is not None:
                    transport.abort()
            self._open.clear()
            for task in list(self._tasks):
                task.cancel()
            rest = [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.wait(rest, timeout=0.2) if rest else None

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
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
        stop = self._stop

        def finish() -> None:
            if stop is not None and not stop.done():
                stop.set_result(None)

        with contextlib.suppress(RuntimeError):  # the loop has ended already
            loop.call_soon_threadsafe(finish)
        thread.join(SHUTDOWN_S)
        if thread.is_alive():
            log.warning("the HTTP server did not stop within %.0fs; leaving it", SHUTDOWN_S)

    def server_close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def serve_in_thread(server: ExporterHTTPServer) -> threading.Thread | None:
    """Start serving (on the server's own event-loop thread)."""
    server.start()
    return server._thread


def staleness_check(latest_timestamp: Callable[[], float | None], interval: float,
                    started: float, clock: Callable[[], float] = time.time,
                    ) -> Callable[[], tuple[bool, str]]:
    """Healthy while polls keep coming: stale metrics must not look healthy."""
    limit = stale_after(interval)

    def check() -> tuple[bool, str]:
        ts = latest_timestamp()
        now = clock()
        if ts is None:
            if now - started > limit:
                return False, f"Unhealthy: no poll completed in {now - started:.0f}s"
            return True, "Healthy (starting)"
        age = now - ts
        if age > limit:
            return False, f"Unhealthy: last poll {age:.0f}s ago"
        return True, "Healthy"

    return check


def stale_after(interval: float) -> float:
    """How old the newest poll may be before the exporter counts as stale."""
    return max(10 * interval, 30.0)


__all__ = ["App", "ExporterHTTPServer", "Request", "Response", "parse_listen_address",
           "serve_in_thread", "stale_after", "staleness_check"]
