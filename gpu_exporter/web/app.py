"""What the exporter answers, apart from how bytes reach it: the routes
(metrics, landing page, health, readiness and any added, such as /diagnosis),
content negotiation for /metrics, and the request and response the HTTP server
hands in and takes back. No sockets here: the server (``web.server``) owns
those."""

from __future__ import annotations

import gzip
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpu_exporter.facts.safetext import html_escape
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.settings.config_types import FIXED_PATHS, check_telemetry_path
from gpu_exporter.web.render import OPENMETRICS, TEXT, RenderCache

if TYPE_CHECKING:
    # Only named: the daemon serves snapshots and never loads prometheus_client.
    from prometheus_client.registry import CollectorRegistry

log = logging.getLogger(__name__)


@dataclass
class Request:
    path: str
    query: str
    headers: dict[str, str]  # names in lower case
    # The client certificate (ssl.SSLSocket.getpeercert()'s dict) on a TLS
    # connection that presented a verified one.
    peercert: dict[str, Any] | None = None


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


Route = Callable[[Request], Response]
# Returns None to let the request through, or the response that refuses it.
Gate = Callable[[Request], Awaitable[Response | None]]


def accepts_gzip(accept_encoding: str) -> bool:
    """The client takes gzip: named with a q-value above 0 (``gzip;q=0``
    means "not gzip", RFC 9110 §12.5.3)."""
    for part in accept_encoding.split(","):
        coding, *params = (p.strip() for p in part.split(";"))
        if coding.lower() not in ("gzip", "x-gzip"):
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
        return q > 0
    return False


def _version(params: list[str]) -> str:
    """The ``version=`` parameter of a media range ("" when absent)."""
    for param in params:
        key, sep, value = param.strip().partition("=")
        if sep and key == "version":
            return value
    return ""


def _at_least_1(version: str) -> bool:
    parts: list[int] = []
    for part in version.split("."):
        try:
            parts.append(int(part))
        except ValueError:
            return False  # not a version number prometheus_client could compare
    return tuple(parts) >= (1, 0, 0)


def wants_openmetrics(accept: str) -> bool:
    """Whether /metrics answers in OpenMetrics for this Accept header, as
    prometheus_client's choose_encoder decides (a test holds the two to the
    same answer): the first media range that names a format it serves wins,
    OpenMetrics without a version or at 1.0.0 and later, the text format only
    at 1.0.0 and later; with none of them, the text format 0.0.4."""
    for media_range in accept.split(","):
        media, *params = media_range.split(";")
        version = _version(params)
        media = media.strip()
        if media == "application/openmetrics-text" and (not version or _at_least_1(version)):
            return True
        if media == "text/plain" and version and _at_least_1(version):
            return False
    return False


class OnFirstRequest:
    """A route built when it is first asked for: a page most nodes never serve
    (only Prometheus reads them) costs them no memory for its code."""

    def __init__(self, build: Callable[[], Route]) -> None:
        self._build = build
        self._route: Route | None = None
        self._lock = threading.Lock()

    def __call__(self, req: Request) -> Response:
        route = self._route
        if route is None:
            with self._lock:
                if self._route is None:
                    self._route = self._build()
                route = self._route
        return route(req)


class App:
    """Routes and the facts the landing page needs."""

    def __init__(self, registry: CollectorRegistry | None = None,
                 telemetry_path: str = "/metrics",
                 ready: Callable[[], bool] = lambda: True,
                 healthy: Callable[[], tuple[bool, str]] = lambda: (True, "Healthy"),
                 snapshot: Callable[[], Snapshot | None] | None = None) -> None:
        self.registry = registry
        # With a snapshot source, /metrics is served from renderings cached per
        # snapshot; the registry stays the reference implementation.
        self._snapshot = snapshot
        self._renders = RenderCache()
        self.telemetry_path = check_telemetry_path(telemetry_path)
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
        """Answer /-/healthy with ``healthy`` from now on."""
        self._healthy = healthy

    def set_landing(self, route: Route) -> None:
        """Answer ``/`` with ``route`` instead of the plain list of links."""
        self.routes["/"] = route

    def add_route(self, path: str, route: Route, title: str | None = None) -> None:
        if path in self.routes:
            # Two endpoints on one path: one of them would never answer.
            raise ValueError(f"{path} is served already")
        self.routes[path] = route
        if title:
            self.links.append((path, title))

    def _metrics(self, req: Request) -> Response:
        accept = req.headers.get("accept", "")
        compressed = accepts_gzip(req.headers.get("accept-encoding", ""))
        headers = {"Vary": "Accept-Encoding"}
        if compressed:
            headers["Content-Encoding"] = "gzip"
        if self._snapshot is not None or self.registry is None:
            openmetrics = wants_openmetrics(accept)
            snap = self._snapshot() if self._snapshot is not None else None
            if snap is None:
                body = b"# EOF\n" if openmetrics else b""
                if compressed:
                    body = gzip.compress(body)
            else:
                body = self._renders.body(snap, openmetrics, compressed)
            return Response(200, body, OPENMETRICS if openmetrics else TEXT, headers)
        # prometheus_client renders a registry (the reference the tests compare
        # the snapshot rendering with); loaded here, only where one is served.
        from gpu_exporter.web.reference import encode

        body, content_type = encode(self.registry, accept)
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
        links = "".join(f'<li><a href="{html_escape(p)}">{html_escape(t)}</a></li>'
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


__all__ = ["FIXED_PATHS", "App", "Gate", "Request", "Response", "accepts_gzip"]
