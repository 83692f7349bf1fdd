"""Assemble the exporter from its settings and run it: the NVML session (real,
or on a simulated node), the stages the settings switch on, the poller, and
the HTTP endpoints reading what the poller publishes; then its lifecycle
(start, SIGHUP reload, stop). What each part does is in its own module."""

from __future__ import annotations

import gc
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from gpu_exporter.daemon import logs, pipeline
from gpu_exporter.daemon.malloc import limit_malloc_arenas
from gpu_exporter.daemon.poller import Poller
from gpu_exporter.history import History, slots_for
from gpu_exporter.nvml.session import NvmlSession
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.poll.stage import Stage
from gpu_exporter.settings.config import ConfigError, Settings, at_start
from gpu_exporter.settings.config_types import parse_listen_address
from gpu_exporter.web.app import App, OnFirstRequest, Route
from gpu_exporter.web.diagnosis import DiagnosisRoute
from gpu_exporter.web.server import ExporterHTTPServer, staleness_check

if TYPE_CHECKING:
    # Only named: a daemon on real GPUs never loads the simulator.
    from gpu_exporter.simulator import SimulatedNode
    from gpu_exporter.web.webconfig import WebConfigWatcher

log = logging.getLogger(__name__)

# Settings a reload cannot apply to a running exporter (marked AT_START where
# they are declared): they take effect at the next start. (The web config
# file's contents are re-read on SIGHUP as well.)
RESTART_SETTINGS = at_start()
# Allocations between two collections of the youngest generation, once the
# daemon runs (Python's default is 700; see Exporter.freeze_after_first_poll).
YOUNG_GC_THRESHOLD = 20_000


class Exporter:
    def __init__(self, settings: Settings, simulation: SimulatedNode | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time,
                 synchronous: bool = False) -> None:
        # Before this object starts the poll and HTTP threads.
        limit_malloc_arenas()
        self.simulation = simulation
        if simulation is not None:
            simulation.install()
        settings = self._effective(settings)
        self.settings = settings
        self._reload_lock = threading.Lock()
        # The last reload of each source (the settings; the web config file,
        # reloaded on SIGHUP and when it changes on disk): the reload-success
        # metric is 1 while both stand, so a good reload of one does not hide
        # a failed one of the other.
        self._reloads_ok = {"settings": True, "web config": True}
        # Under a virtual clock everything runs inline; a real daemon guards each
        # GPU's reads with a timeout so one hung GPU cannot stall the poll.
        self.session = NvmlSession(clock=monotonic,
                                   call_timeout=None if synchronous else settings.poll.timeout)
        self.runtime = Runtime(settings, self.session, monotonic, wall_clock, synchronous,
                               watch_udev=simulation is None)
        self.poller = Poller(pipeline.build(self.runtime), settings.poll.interval, self.session,
                             wall_clock=wall_clock, monotonic=monotonic,
                             detail=settings.metrics.detail)
        if simulation is not None:
            self.poller.before_poll.append(simulation.refresh)
        # The last 15 minutes of each GPU for the node page's charts, kept in a
        # ring allocated once (its size follows the interval at start).
        self.history = History(slots_for(settings.poll.interval))
        self.poller.listeners.append(self.history.record)
        started = wall_clock()
        self.app = App(
            None, settings.web.telemetry_path, ready=lambda: self.poller.ready,
            healthy=staleness_check(
                lambda: self.poller.latest.timestamp if self.poller.latest else None,
                self._interval, started, wall_clock),
            snapshot=self._latest,
        )
        # The pages read what the poller published, and the settings a reload may change.
        self.app.add_route("/diagnosis", DiagnosisRoute(self._latest, self._interval, wall_clock),
                           "Diagnosis (JSON)")
        self.app.add_route("/runbook", OnFirstRequest(self._runbook))
        self.app.set_landing(OnFirstRequest(lambda: self._node_page(wall_clock)))
        self.server: ExporterHTTPServer | None = None
        self.web_config: WebConfigWatcher | None = None

    # The node page and the runbook are loaded when first asked for (about
    # 0.2 MiB of code a node that is only scraped never needs); their history
    # is kept from the start all the same.
    def _node_page(self, wall_clock: Callable[[], float]) -> Route:
        from gpu_exporter.web.doctor import NodePage

        return NodePage(self._latest, self.history, links=lambda: self.app.links,
                        interval=self._interval, wall_clock=wall_clock)

    def _runbook(self) -> Route:
        from gpu_exporter.web.runbook import Runbook

        return Runbook(lambda: self.settings.diagnosis)

    def _latest(self) -> Snapshot | None:
        return self.poller.latest

    def _interval(self) -> float:
        """The time between polls now: the interval the poll loop waits with,
        which a reload changes at its first poll (until then the loop waits
        out the old one, and a shorter new interval is not staleness yet)."""
        return self.poller.interval

    def _effective(self, settings: Settings) -> Settings:
        if self.simulation is None or self.simulation.real_host:
            return settings
        # The host readers run unchanged on the simulated node's /proc, /sys and
        # kernel log, and attribution asks the simulated node's kubelet.
        return settings.model_copy(update={
            "path": settings.path.model_copy(
                update={"procfs": self.simulation.procfs, "sysfs": self.simulation.sysfs,
                        # Switched off (empty) stays off.
                        "kmsg": self.simulation.kmsg if settings.path.kmsg else ""}),
            "kubernetes": settings.kubernetes.model_copy(
                update={"pod_resources_socket": self.simulation.pod_resources_socket})})

    # --- configuration reload (SIGHUP) -------------------------------------
    def reload(self, load: Callable[[], Settings]) -> bool:
        """Load the configuration again and apply what can change at run time:
        log level and format, poll interval and timeout, processes per GPU,
        diagnosis thresholds, collectors on and off. A configuration that does
        not load is logged in one line and the running one is kept. Reported in
        gpu_exporter_config_last_reload_success."""
        with self._reload_lock:
            try:
                new = self._effective(load())
                self._apply(new)
            except ConfigError as exc:
                log.error("configuration reload failed, keeping the running configuration: %s",
                          exc)
                self.reloaded("settings", False)
                return False
            except Exception as exc:
                log.error("configuration reload failed, keeping the running configuration: "
                          "%s: %s", type(exc).__name__, exc)
                self.reloaded("settings", False)
                return False
            self.reloaded("settings", True)
            return True

    def reloaded(self, source: str, ok: bool) -> None:
        """Note how a reload of ``source`` went, in
        gpu_exporter_config_last_reload_success (and its timestamp when every
        source's last reload succeeded)."""
        self._reloads_ok[source] = ok
        self.poller.config_reloaded(all(self._reloads_ok.values()))

    def _apply(self, new: Settings) -> None:
        old = self.settings
        if new == old:
            log.info("configuration reloaded: nothing changed")
            return
        changed = [name for name in type(new).model_fields
                   if getattr(new, name) != getattr(old, name)]
        later = [name for name in changed if name in RESTART_SETTINGS]
        # Build what the new settings need before changing anything: a stage
        # that cannot be built fails the reload with the old configuration intact.
        stages = self._stages_for(new)
        self.settings = self.runtime.settings = new
        # Applied by the poll thread between two polls: the stages swapped,
        # each handed the new settings, the interval and call timeout changed.
        # /-/healthy reads the poller's interval, which changes with the first
        # poll at the new one: a longer interval is not staleness.
        self.poller.reconfigure(stages, new)
        applied = [name for name in changed if name not in RESTART_SETTINGS]
        log.info("configuration reloaded: applied %s", ", ".join(applied) or "nothing")
        if later:
            log.warning("configuration reload: %s changed and takes effect at the next start",
                        ", ".join(later))
        if new.log != old.log:
            logs.setup(new.log.level, new.log.format)

    def _stages_for(self, new: Settings) -> list[Stage]:
        """The stages the new settings enable, in run order: the running ones
        kept, the newly enabled ones built."""
        running = {s.name: s for s in self.poller.planned()}
        out = []
        rt = Runtime(new, self.session, self.runtime.monotonic, self.runtime.wall_clock,
                     self.runtime.synchronous, self.runtime.watch_udev)
        for kind in pipeline.STAGES.values():
            if not kind.wanted(new):
                continue
            current = running.get(kind.name)
            if current is None and not kind.starts_on_reload:
                continue
            if current is None:
                current = kind.build(rt)
                log.info("%s %s switched on", kind.kind, kind.name)
            out.append(current)
        for name in running.keys() - {s.name for s in out}:
            log.info("%s %s switched off", running[name].kind, name)
        return out

    def bind(self, web_config: WebConfigWatcher | None = None) -> ExporterHTTPServer:
        """Create the server; with a web config file, TLS and auth come from it."""
        web = self.settings.web
        host, port = parse_listen_address(web.listen_address)
        if web_config is None:
            web_config = load_web_config(self.settings)
        self.web_config = web_config
        self.server = ExporterHTTPServer(
            (host, port), self.app,
            header_timeout=web.request_timeout, idle_timeout=web.idle_timeout,
            max_connections=web.max_connections,
            ssl_context=web_config.ssl_context if web_config else None)
        if web_config is not None:
            web_config.attach(self.server)
            web_config.on_reload = lambda ok: self.reloaded("web config", ok)
        return self.server

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.server_address[1])

    def start(self, background_poll: bool = True) -> None:
        """Bind, then serve and keep polling on the poll thread. Without
        ``background_poll`` only HTTP is served and the caller drives every poll
        (tests on a virtual clock, whose snapshots must not race a poller)."""
        if self.server is None:
            self.bind()
        assert self.server is not None
        self.server.start()
        if background_poll:
            self.poller.start()

    def freeze_after_first_poll(self) -> None:
        """After the first poll, move every object alive then (modules, settings,
        the collectors with their static reads and caches) out of the cyclic
        garbage collector's reach: they live as long as the process, and each
        collection would otherwise walk them all again. And collect the young
        generation every YOUNG_GC_THRESHOLD allocations instead of every 700:
        a poll allocates some ten thousand objects (the snapshot's samples),
        nearly all freed by reference counting, so the default threshold ran
        a dozen collections a poll that found nothing (together about 1 ms of
        a 7 ms poll on the simulated 8-GPU node)."""
        frozen = False

        def freeze(_snapshot: object) -> None:
            nonlocal frozen
            if not frozen:
                frozen = True
                gc.freeze()
                _, older, oldest = gc.get_threshold()
                gc.set_threshold(YOUNG_GC_THRESHOLD, older, oldest)

        self.poller.listeners.append(freeze)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.web_config is not None:
            self.web_config.close()
        self.poller.stop()
        if self.simulation is not None:
            self.simulation.uninstall()
            self.simulation.close()


def load_web_config(settings: Settings) -> WebConfigWatcher | None:
    """The web config file's watcher, or None without --web.config.file. Its
    module (TLS, bcrypt, the file's schema) is loaded only then: an exporter
    serving plain HTTP never holds it in memory (about 0.5 MiB)."""
    if settings.web.config_file is None:
        return None
    from gpu_exporter.web.webconfig import WebConfigWatcher

    return WebConfigWatcher(settings.web.config_file, max_checks=settings.web.max_requests)


def _holds_capabilities() -> bool:
    """Whether this process holds an effective capability (CapEff in
    /proc/self/status); where that cannot be read, assume it does. User 0
    with none (the Kubernetes DaemonSet, for the kubelet's root-only socket)
    reads only what any user owning nothing could, plus root's own files."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16) != 0
    except (OSError, ValueError, IndexError):
        pass
    return True


def run(settings: Settings, simulation: SimulatedNode | None = None,
        load_settings: Callable[[], Settings] | None = None) -> int:
    """Run until SIGTERM or SIGINT; SIGHUP reloads the configuration (with
    ``load_settings``: flags, environment and --config.file again) and re-reads
    the web config file. The process's exit status."""
    # A bad web config or a listen address that does not resolve is a usage
    # error: reported before anything starts.
    _check_resolves(settings.web.listen_address)
    web_config = load_web_config(settings)
    if hasattr(os, "geteuid") and os.geteuid() == 0 and _holds_capabilities():
        log.warning("running as root: the exporter needs no privileges beyond read access to "
                    "the NVIDIA device nodes and the host's /proc; run it as an unprivileged "
                    "user, or as user 0 with every capability dropped where it must reach "
                    "the kubelet's root-only PodResources socket (see docs/deploy.md)")
    _raise_fd_limit(settings.web.max_connections)
    exporter = Exporter(settings, simulation)
    exporter.freeze_after_first_poll()
    exporter.bind(web_config)
    # The main thread acts on signals; the handlers do nothing. A handler runs
    # between two bytecodes of the main thread, which may hold any lock at that
    # moment: an Event.set() from a handler interrupting the main thread's own
    # Event.wait() deadlocked on the Event's lock (SIGINT left the exporter
    # running). Logging and starting threads take locks too. Instead Python's
    # C-level handler writes each signal's number to a pipe the main thread
    # blocks on: it wakes at once (a stop is not delayed by a polling sleep)
    # and costs nothing while no signal comes.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)

    def note(signum: int, frame: FrameType | None) -> None:
        pass  # the number is in the pipe

    def reload() -> None:
        if load_settings is not None:
            exporter.reload(load_settings)
        if web_config is not None:
            # Its outcome reaches gpu_exporter_config_last_reload_success
            # through the watcher (bound above), as a change on disk does.
            web_config.reload("SIGHUP")

    signal.signal(signal.SIGTERM, note)
    signal.signal(signal.SIGINT, note)
    # Without a handler SIGHUP would end the process (`systemctl reload`).
    signal.signal(signal.SIGHUP, note)
    exporter.start()
    host = settings.web.listen_address.rpartition(":")[0]
    log.info("listening on %s:%d (%s), metrics at %s", host, exporter.port,
             "https" if web_config is not None and web_config.active.tls else "http",
             settings.web.telemetry_path)
    stopping = False
    while not stopping:
        # Blocks, holding no lock. Signals that arrive together come in any
        # order (each thread's handler writes its own byte): taken in number
        # order, as Python runs its handlers, a SIGHUP sent just before a
        # SIGTERM is still said.
        for signum in sorted(os.read(wake_r, 64)):
            if signum == signal.SIGHUP:
                # The reload runs off the main thread: it reads files and may hash.
                log.info("received SIGHUP; %s",
                         "reloading the configuration and the web config file"
                         if web_config is not None else
                         "no --web.config.file to reload; reloading the configuration")
                threading.Thread(target=reload, name="config-reload", daemon=True).start()
            elif signum in (signal.SIGTERM, signal.SIGINT):
                log.info("received %s, shutting down", signal.Signals(signum).name)
                stopping = True
                break
    signal.set_wakeup_fd(-1)
    os.close(wake_r)
    os.close(wake_w)
    exporter.stop()
    log.info("stopped")
    _leave_stuck_calls_behind()
    return 0


def _check_resolves(listen_address: str) -> None:
    host, port = parse_listen_address(listen_address)
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"web.listen_address {listen_address}: cannot resolve the host "
                          f"{host!r}: {exc.strerror}") from None
    except UnicodeError:  # a label the IDNA codec refuses (empty, over 63 characters)
        raise ConfigError(f"web.listen_address {listen_address}: {host!r} is not a valid "
                          "host name") from None


def _raise_fd_limit(connections: int) -> None:
    """Every open connection is a file descriptor: raise the soft limit to the
    hard one, as Go's runtime does for node_exporter, and say so when even
    that is short of --web.max-connections."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    except (ValueError, OSError) as exc:
        log.debug("cannot raise the open file limit: %s", exc)
        return
    # Descriptors the exporter needs besides connections: /proc, /sys, NVML.
    if soft != resource.RLIM_INFINITY and soft < connections + 64:
        log.warning("the open file limit (%d) is below --web.max-connections (%d) plus what "
                    "the exporter needs itself; connections beyond it will be refused by the "
                    "kernel (raise LimitNOFILE or lower --web.max-connections)", soft,
                    connections)


def _leave_stuck_calls_behind() -> None:
    """An NVML call stuck in the driver cannot be interrupted, and Python would
    wait for its thread at exit: end the process now instead (status 0), so a
    hung GPU never delays a stop."""
    deadline = time.monotonic() + 1.0
    stuck = []
    # The NVML session's poll threads (see NvmlSession.guarded): an idle one ends
    # at once after close(); one still alive is inside a call.
    for t in threading.enumerate():
        if t.name.startswith("nvml-poll"):
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                stuck.append(t)
    if not stuck:
        return
    log.warning("leaving %d NVML call(s) that have not returned (%s)", len(stuck),
                ", ".join(sorted(t.name for t in stuck)))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
