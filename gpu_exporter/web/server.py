"""A small, bounded HTTP server for the exporter's endpoints.

The standard library's server with three guards an exporter on a sick node
needs: a fixed pool of worker threads (a scrape storm cannot spawn threads
without limit), a cap on connections waiting for a worker (beyond it new ones
are closed at once), and a deadline for each request head (a slow client,
even one that dribbles a byte at a time, cannot hold a worker longer than the
request timeout).
"""

from __future__ import annotations

import contextlib
import gzip
import html
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import CollectorRegistry

from gpu_exporter.config_types import parse_listen_address
from gpu_exporter.snapshot import Snapshot
from gpu_exporter.web.render import OPENMETRICS, TEXT, RenderCache

log = logging.getLogger(__name__)


@dataclass
class Request:
    path: str
    query: str
    headers: dict[str, str]


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


Route = Callable[[Request], Response]
# Returns None to let the request through, or the response that refuses it.
Gate = Callable[[BaseHTTPRequestHandler], Response | None]


class App:
    """Routes and the facts the landing page needs."""

    def __init__(self, registry: CollectorRegistry, telemetry_path: str = "/metrics",
                 ready: Callable[[], bool] = lambda: True,
                 healthy: Callable[[], tuple[bool, str]] = lambda: (True, "Healthy"),
                 snapshot: Callable[[], Snapshot | None] | None = None) -> None:
        self.registry = registry
        # With a snapshot source, /metrics is served from renderings cached per
        # snapshot; the registry stays the reference implementation.
        self._snapshot = snapshot
        self._renders = RenderCache()
        self.telemetry_path = telemetry_path
        self.routes: dict[str, Route] = {}
        self.links: list[tuple[str, str]] = [(telemetry_path, "Metrics")]
        self.landing_sections: list[Callable[[], str]] = []
        self.gate: Gate | None = None
        self._ready = ready
        self._healthy = healthy
        self.routes[telemetry_path] = self._metrics
        self.routes["/"] = self._landing
        self.routes["/-/healthy"] = self._health
        self.routes["/-/ready"] = self._readiness

    def set_health_check(self, healthy: Callable[[], tuple[bool, str]]) -> None:
        """Answer /-/healthy with ``healthy`` from now on (a reload changed the interval)."""
        self._healthy = healthy

    def add_route(self, path: str, route: Route, title: str | None = None) -> None:
        self.routes[path] = route
        if title:
            self.links.append((path, title))

    def _metrics(self, req: Request) -> Response:
        encoder, content_type = choose_encoder(req.headers.get("accept", ""))
        compressed = gzip_accepted(req.headers.get("accept-encoding", ""))
        headers = {"Content-Encoding": "gzip"} if compressed else {}
        if self._snapshot is not None:
            openmetrics = content_type.startswith("application/openmetrics-text")
            snap = self._snapshot()
            if snap is None:
                body = b"# EOF\n" if openmetrics else b""
                if compressed:
                    body = gzip.compress(body)
            else:
                body = self._renders.body(snap, openmetrics, compressed)
            return Response(200, body, OPENMETRICS if openmetrics else TEXT, headers)
        body = encoder(self.registry)
        if compressed:
            body = gzip.compress(body, compresslevel=6)
        return Response(200, body, content_type, headers)

    def _health(self, req: Request) -> Response:
        ok, why = self._healthy()
        return Response(200 if ok else 503, (why + "\n").encode())

    def _readiness(self, req: Request) -> Response:
        if self._ready():
            return Response(200, b"Ready\n")
        return Response(503, b"Not ready: no poll has completed yet\n")

    def _landing(self, req: Request) -> Response:
        if req.path != "/":
            return Response(404, b"Not found\n")
        links = "".join(f'<li><a href="{html.escape(p)}">{html.escape(t)}</a></li>'
                        for p, t in [*self.links, ("/-/healthy", "Health"),
                                     ("/-/ready", "Readiness")])
        sections = "".join(section() for section in self.landing_sections)
        page = (
            "<!doctype html><html><head><meta charset='utf-8'><title>GPU Exporter</title>"
            "<style>body{font-family:sans-serif;margin:2em;max-width:60em}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em}"
            ".bad{color:#b00}.warn{color:#a60}.ok{color:#070}</style></head><body>"
            "<h1>GPU Exporter</h1><p>Prometheus exporter for NVIDIA GPU nodes that says why "
            f"the GPU is slow.</p><ul>{links}</ul>{sections}</body></html>"
        )
        return Response(200, page.encode(), "text/html; charset=utf-8")

    def handle(self, req: Request) -> Response:
        route = self.routes.get(req.path)
        if route is None:
            return Response(404, b"Not found\n")
        try:
            return route(req)
        except Exception:
            log.exception("handler for %s failed", req.path)
            return Response(500, b"Internal error\n")


class _Handler(BaseHTTPRequestHandler):
    server: ExporterHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "gpu-exporter"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout)

    def handle_one_request(self) -> None:
        if self.server.head_pending():
            # The first request: its deadline runs from the accept.
            super().handle_one_request()
            return
        # A further request on a kept-alive connection (or the idle wait for
        # it) has request_timeout in all.
        self.server.head_deadline(self.server.request_timeout)
        super().handle_one_request()

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.server.head_deadline(None)  # the head is in
        return ok

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def _not_allowed(self) -> None:
        self._send(Response(405, b"Method not allowed\n", headers={"Allow": "GET, HEAD"}), True)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def _serve(self, send_body: bool) -> None:
        app = self.server.app
        if app.gate is not None:
            refused = app.gate(self)
            if refused is not None:
                self._send(refused, send_body)
                return
        path, _, query = self.path.partition("?")
        headers = {k.lower(): v for k, v in self.headers.items()}
        self._send(app.handle(Request(path, query, headers)), send_body)

    def _send(self, resp: Response, send_body: bool) -> None:
        self.send_response(resp.status)
        if self.server.waiting() and not self.close_connection:
            # Connections are queued for a worker: hand this one back after the
            # response, so kept-alive clients cannot keep the workers to themselves.
            self.send_header("Connection", "close")
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(resp.body)))
        for k, v in resp.headers.items():
            self.send_header(k, v)
        self.end_headers()
        if send_body:
            self.wfile.write(resp.body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class ExporterHTTPServer(HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The kernel's accept backlog (socketserver's default is 5: a burst of
    # scrapers beyond it has its SYNs dropped and retried a second later).
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], app: App, max_workers: int = 8,
                 max_pending: int = 64, request_timeout: float = 10.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.request_timeout = request_timeout
        self.ssl_context = ssl_context
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="http")
        self._pending = threading.BoundedSemaphore(max_workers + max_pending)
        # Worker thread -> (its connection, when the request head must be in).
        self._heads: dict[int, tuple[Any, float | None]] = {}
        self._heads_lock = threading.Lock()
        self._queued = 0  # accepted connections no worker has taken yet
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.address_family = family
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._pending.acquire(blocking=False):
            # Saturated: shed the connection rather than queue without limit.
            self.shutdown_request(request)
            return
        # The request timeout runs from the accept: time spent queued for a
        # worker counts, so a queue of slow clients drains at the pace of the timeout.
        with self._heads_lock:
            self._queued += 1
        self._pool.submit(self._work, request, client_address,
                          time.monotonic() + self.request_timeout)

    def head_deadline(self, seconds: float | None) -> None:
        """This worker's connection must deliver its request head within
        ``seconds`` (None: no deadline now, the head is in)."""
        ident = threading.get_ident()
        with self._heads_lock:
            conn = self._heads.get(ident)
            if conn is not None:
                self._heads[ident] = (conn[0], None if seconds is None
                                      else time.monotonic() + seconds)

    def waiting(self) -> bool:
        """Connections are waiting for a worker."""
        return self._queued > 0

    def head_pending(self) -> bool:
        with self._heads_lock:
            conn = self._heads.get(threading.get_ident())
        return conn is not None and conn[1] is not None

    def service_actions(self) -> None:
        """Between accepts (every poll interval): cut off connections whose
        request head is overdue. The socket timeout alone restarts with every
        byte received."""
        now = time.monotonic()
        with self._heads_lock:
            overdue = [conn for conn, deadline in self._heads.values()
                       if deadline is not None and deadline < now]
        for conn in overdue:
            log.debug("closing a connection whose request did not arrive within %.1fs",
                      self.request_timeout)
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _work(self, request: Any, client_address: Any, deadline: float) -> None:
        ident = threading.get_ident()
        with self._heads_lock:  # covers the TLS handshake and the first head
            self._queued -= 1
            self._heads[ident] = (request, deadline)
        try:
            if self.ssl_context is not None:
                request.settimeout(self.request_timeout)
                request = self.ssl_context.wrap_socket(request, server_side=True)
            self.finish_request(request, client_address)
        except (ssl.SSLError, OSError) as exc:
            log.debug("connection from %s failed: %s", client_address, exc)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            with self._heads_lock:
                self._heads.pop(ident, None)
            self.shutdown_request(request)
            self._pending.release()

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


def serve_in_thread(server: ExporterHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="http-accept", daemon=True)
    thread.start()
    return thread


def staleness_check(latest_timestamp: Callable[[], float | None], interval: float,
                    started: float, clock: Callable[[], float] = time.time,
                    ) -> Callable[[], tuple[bool, str]]:
    """Healthy while polls keep coming: stale metrics must not look healthy."""
    limit = max(10 * interval, 30.0)

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


__all__ = ["App", "ExporterHTTPServer", "Request", "Response",
           "parse_listen_address", "serve_in_thread", "staleness_check"]
