"""Assemble the exporter from its settings: the NVML session (real, or on a
simulated node), the enabled collectors, the poller, and the HTTP endpoints."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from prometheus_client.registry import CollectorRegistry

from gpu_exporter.collectors import registry as collector_registry
from gpu_exporter.config import Settings
from gpu_exporter.nvml.session import NvmlSession
from gpu_exporter.poller import Poller
from gpu_exporter.runtime import Runtime
from gpu_exporter.simulator import SimulatedNode
from gpu_exporter.web.exposition import SnapshotCollector
from gpu_exporter.web.landing import gpu_table
from gpu_exporter.web.server import (
    App,
    ExporterHTTPServer,
    Request,
    Response,
    parse_listen_address,
    serve_in_thread,
    staleness_check,
)
from gpu_exporter.web.webconfig import WebConfigWatcher

log = logging.getLogger(__name__)


class Exporter:
    def __init__(self, settings: Settings, simulation: SimulatedNode | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time,
                 synchronous: bool = False) -> None:
        self.simulation = simulation
        if simulation is not None:
            simulation.install()
            # The host readers run unchanged on the simulated node's /proc and /sys.
            settings = settings.model_copy(update={"path": settings.path.model_copy(
                update={"procfs": simulation.procfs, "sysfs": simulation.sysfs})})
        self.settings = settings
        # Under a virtual clock everything runs inline; a real daemon guards each
        # GPU's reads with a timeout so one hung GPU cannot stall the poll.
        self.session = NvmlSession(clock=monotonic,
                                   call_timeout=None if synchronous else settings.poll.timeout)
        self.runtime = Runtime(settings, self.session, simulation, monotonic, wall_clock,
                               synchronous)
        self.collectors = collector_registry.build(self.runtime)
        self.poller = Poller(self.collectors, settings.poll.interval, self.session,
                             wall_clock=wall_clock, monotonic=monotonic)
        if simulation is not None:
            self.poller.before_poll.append(simulation.refresh)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(lambda: self.poller.latest))
        started = wall_clock()
        self.app = App(
            self.registry, settings.web.telemetry_path, ready=lambda: self.poller.ready,
            healthy=staleness_check(
                lambda: self.poller.latest.timestamp if self.poller.latest else None,
                settings.poll.interval, started, wall_clock),
            snapshot=lambda: self.poller.latest,
        )
        self.app.landing_sections.append(lambda: gpu_table(self.poller.latest))
        self.app.add_route("/diagnosis", self._diagnosis, "Diagnosis (JSON)")
        self.server: ExporterHTTPServer | None = None
        self._http_thread: threading.Thread | None = None

    def findings(self) -> dict[str, object]:
        snap = self.poller.latest
        if snap is None:
            return {"timestamp": None, "findings": []}
        return {"timestamp": snap.timestamp,
                "findings": [f.as_dict() for f in snap.facts.get("findings", [])],
                "baseline_drifts": list(snap.facts.get("drifts", []))}

    def _diagnosis(self, req: Request) -> Response:
        if self.poller.latest is None:
            return Response(503, b'{"error": "no poll has completed yet"}\n',
                            "application/json")
        body = json.dumps(self.findings(), indent=2) + "\n"
        return Response(200, body.encode(), "application/json")

    def bind(self, web_config: WebConfigWatcher | None = None) -> ExporterHTTPServer:
        """Create the server; with a web config file, TLS and auth come from it."""
        host, port = parse_listen_address(self.settings.web.listen_address)
        if web_config is None and self.settings.web.config_file is not None:
            web_config = WebConfigWatcher(self.settings.web.config_file)
        self.web_config = web_config
        self.server = ExporterHTTPServer(
            (host, port), self.app, max_workers=self.settings.web.max_requests,
            request_timeout=self.settings.web.request_timeout,
            ssl_context=web_config.ssl_context if web_config else None)
        if web_config is not None:
            web_config.attach(self.server)
        return self.server

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.server_address[1])

    def start(self) -> None:
        """Bind, take the first poll, then serve and keep polling."""
        if self.server is None:
            self.bind()
        assert self.server is not None
        self._http_thread = serve_in_thread(self.server)
        self.poller.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        self.poller.stop()
        if self.simulation is not None:
            self.simulation.uninstall()
            self.simulation.close()


def run(settings: Settings, simulation: SimulatedNode | None = None) -> int:
    """Run until SIGTERM or SIGINT; SIGHUP re-reads the web config file. The
    process's exit status."""
    # A bad web config is a usage error: report it before anything starts.
    web_config = (WebConfigWatcher(settings.web.config_file)
                  if settings.web.config_file is not None else None)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        log.warning("running as root: the exporter needs no privileges beyond read access to "
                    "the NVIDIA device nodes and the host's /proc; run it as an unprivileged "
                    "user (see docs/deploy.md)")
    exporter = Exporter(settings, simulation)
    exporter.bind(web_config)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        stop.set()

    def on_hangup(signum: int, frame: FrameType | None) -> None:
        # Without a handler SIGHUP would end the process (`systemctl reload`).
        # The reload runs off the signal handler: it reads files and may hash.
        if web_config is None:
            log.info("received SIGHUP; no --web.config.file to reload")
            return
        threading.Thread(target=web_config.reload, args=("SIGHUP",), name="web-config-reload",
                         daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hangup)
    exporter.start()
    log.info("listening on %s (%s), metrics at %s", settings.web.listen_address,
             "https" if web_config is not None and web_config.active.tls else "http",
             settings.web.telemetry_path)
    stop.wait()
    exporter.stop()
    log.info("stopped")
    return 0
