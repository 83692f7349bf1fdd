"""One exporter on one simulated node, in a process of its own, driven by the
runner over stdin/stdout (one JSON object a line each way).

A process per exporter and node keeps RSS honest (nothing of the runner or of
another exporter is counted) and lets nvitop-exporter run with the simulator
installed underneath its pynvml before it is imported.

Polls run on a virtual clock: the runner asks for N polls and each advances
the node by one interval (each exporter's default unless ``--interval`` says
otherwise), so 10,000 polls take minutes, not hours, while the HTTP server
answers real scrapes on loopback in between.

Commands: ``{"cmd": "poll", "n": N}``, ``{"cmd": "state"}``,
``{"cmd": "drift", "n": N, "samples": K, "scrape_every": S}``, ``{"cmd": "quit"}``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.accounting import SimulatorCpu
from benchmarks.scenarios import Config, scenario
from gpu_exporter.simulator import SimulatedNode
from gpu_exporter.simulator.clock import VirtualClock
from gpu_exporter.simulator.latency import NVML_LATENCY_US

EPOCH = 1_790_000_000.0
PR_SET_TIMERSLACK = 29


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def tight_sleeps() -> None:
    """The latency model sleeps tens of microseconds per call; Linux's default
    50 us timer slack would add more than the modelled cost to each."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Target:
    """What the worker drives: one exporter on the node."""

    port = 0
    interval = 1.0

    def poll(self) -> None:
        raise NotImplementedError

    def breakdown(self) -> dict[str, float]:
        return {}

    def absent_calls(self) -> dict[str, int]:
        return {}

    def stop(self) -> None:
        pass


class Ours(Target):
    def __init__(self, node: SimulatedNode, clock: VirtualClock, acc: SimulatorCpu,
                 interval: float | None) -> None:
        from gpu_exporter.daemon.exporter import Exporter
        from gpu_exporter.settings.config import Settings
        from gpu_exporter.web.server import serve_in_thread

        # No interval given: the exporter's default, as a user runs it.
        poll = {} if interval is None else {"interval": interval}
        settings = Settings(web={"listen_address": "127.0.0.1:0"}, poll=poll)
        self.clock, self.interval = clock, settings.poll.interval
        # synchronous=False: each GPU's reads run on its own guarded worker
        # thread, exactly as in the daemon; only the clock is virtual.
        self.exporter = Exporter(settings, node, monotonic=clock, wall_clock=clock,
                                 synchronous=False)
        self.exporter.freeze_after_first_poll()  # as the daemon's run() does
        server = self.exporter.bind()
        serve_in_thread(server)
        self.port = self.exporter.port
        # Where a poll's CPU goes, per collector, less the simulator's share.
        self._own: dict[str, float] = {}
        for collector in self.exporter.poller.stages:
            collector.collect = self._timed(collector.name, collector.collect, acc)  # type: ignore[method-assign,assignment]

    def _timed(self, name: str, collect: Callable[[Any], None],
               acc: SimulatorCpu) -> Callable[[Any], None]:
        def timed(out: Any) -> None:
            c0, s0 = time.process_time(), acc.total_s
            try:
                collect(out)
            finally:
                spent = (time.process_time() - c0) - (acc.total_s - s0)
                self._own[name] = self._own.get(name, 0.0) + spent

        return timed

    def poll(self) -> None:
        self.clock.advance(self.interval)
        self.exporter.poller.poll()

    def breakdown(self) -> dict[str, float]:
        out = dict(self._own)
        self._own.clear()
        return out

    def stop(self) -> None:
        self.exporter.stop()


class Nvitop(Target):
    """nvitop-exporter 1.x: PrometheusExporter.collect()'s loop body is one
    poll (update_host, then update_device for each device)."""

    # nvitop-exporter's own default (--interval 1.0).
    DEFAULT_INTERVAL_S = 1.0

    def __init__(self, node: SimulatedNode, clock: VirtualClock,
                 interval: float | None) -> None:
        import psutil

        interval = self.DEFAULT_INTERVAL_S if interval is None else interval

        # The simulator goes underneath pynvml before nvitop is imported, just
        # as it does underneath ours.
        node.install()
        # nvitop reads each GPU process's host side through psutil: point it
        # at the simulated /proc, where the scenario's processes live.
        psutil.PROCFS_PATH = str(node.procfs)
        _borrow_host_proc(node.procfs)
        _complete_processes(node)
        self.absent = _count_absent_symbols()
        from nvitop import Device  # type: ignore[import-untyped]
        from nvitop_exporter.exporter import (  # type: ignore[import-untyped]
            PrometheusExporter,
        )
        from prometheus_client import start_wsgi_server

        self.node, self.clock, self.interval = node, clock, interval
        physical = Device.from_indices(range(Device.count()))
        migs = [m for d in physical for m in d.mig_devices()]
        # Sorted as nvitop-exporter's own main() sorts them.
        self.devices = sorted([*physical, *migs], key=lambda d: (
            (d.index,) if isinstance(d.index, int) else tuple(d.index)))
        self.exporter = PrometheusExporter(self.devices, hostname="bench", interval=interval)
        self.server, _ = start_wsgi_server(port=0, addr="127.0.0.1")
        self.port = int(self.server.server_address[1])

    def poll(self) -> None:
        self.clock.advance(self.interval)
        self.node.refresh()  # our poller does this through before_poll
        self.exporter.update_host()
        for device in self.devices:
            self.exporter.update_device(device)

    def absent_calls(self) -> dict[str, int]:
        return dict(self.absent)

    def stop(self) -> None:
        self.server.shutdown()


def _borrow_host_proc(procfs: Path) -> None:
    """The simulated /proc has what our readers read (stat, meminfo, pressure,
    per-process files...); psutil also wants files it lacks (filesystems,
    mounts, uptime...). Those are linked from this machine's /proc."""
    for entry in Path("/proc").iterdir():
        target = procfs / entry.name
        if entry.name.isdigit() or target.exists() or target.is_symlink():
            continue
        with contextlib.suppress(OSError):
            target.symlink_to(entry)


def _complete_processes(node: SimulatedNode) -> None:
    """psutil also reads cmdline and statm, which the simulated /proc (written
    for our readers) leaves out; give every scenario process both, as a real
    /proc would. They never change during a benchmark run."""
    page = 4096
    for proc in node.scenario.processes:
        directory = node.procfs / str(proc.pid)
        if not directory.is_dir():
            continue
        (directory / "cmdline").write_bytes(f"{proc.comm}\0train.py\0".encode())
        pages = proc.rss_bytes // page
        (directory / "statm").write_text(f"{pages * 4} {pages} {pages // 8} 1 0 {pages} 0\n")


def _count_absent_symbols() -> Counter[str]:
    """Counts each lookup of an NVML function the simulated library lacks: the
    call never reaches the library, so library.calls cannot see it, but a real
    driver would answer it (at its real cost)."""
    import pynvml

    absent: Counter[str] = Counter()
    lookup = pynvml._nvmlGetFunctionPointer

    def counting(name: str) -> Any:
        try:
            return lookup(name)
        except pynvml.NVMLError_FunctionNotFound:
            absent[name] += 1
            raise

    pynvml._nvmlGetFunctionPointer = counting
    return absent


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        config = Config.parse(args.config)
        self.gpus = config.gpus
        self.clock = VirtualClock(EPOCH)
        if args.latency:
            tight_sleeps()
        self.node = SimulatedNode(scenario(config), clock=self.clock,
                                  latency_us=dict(NVML_LATENCY_US) if args.latency else None)
        self.acc = SimulatorCpu()
        self.acc.install(self.node)
        self.target: Target = (Ours(self.node, self.clock, self.acc, args.interval)
                               if args.exporter == "ours"
                               else Nvitop(self.node, self.clock, args.interval))

    def state(self) -> dict[str, Any]:
        return {"cpu_s": time.process_time(), "sim_cpu_s": self.acc.total_s,
                "rss_bytes": rss_bytes(), "wall_s": time.perf_counter(),
                "interval_s": self.target.interval}

    def poll(self, n: int) -> dict[str, Any]:
        calls0 = self.node.library.calls.copy()
        absent0 = Counter(self.target.absent_calls())
        self.target.breakdown()
        c0, s0, w0 = time.process_time(), self.acc.total_s, time.perf_counter()
        lib0, fs0 = self.acc.library_s, self.acc.hostfs_s
        for _ in range(n):
            self.target.poll()
        wall = time.perf_counter() - w0
        cpu, sim = time.process_time() - c0, self.acc.total_s - s0
        calls = self.node.library.calls - calls0
        absent = Counter(self.target.absent_calls()) - absent0
        return {"polls": n, "cpu_s": cpu, "sim_cpu_s": sim, "wall_s": wall,
                "sim_library_cpu_s": self.acc.library_s - lib0,
                "sim_hostfs_cpu_s": self.acc.hostfs_s - fs0,
                "nvml_calls": dict(calls), "gpus": self.gpus,
                "absent_calls": dict(absent),
                "own_by_collector_s": self.target.breakdown(), **self._now()}

    def _now(self) -> dict[str, Any]:
        return {"rss_bytes": rss_bytes(), "cpu_now_s": time.process_time()}

    def drift(self, n: int, samples: int, scrape_every: int) -> dict[str, Any]:
        """RSS over n polls, scraped now and then as Prometheus would."""
        url = f"http://127.0.0.1:{self.target.port}/metrics"
        every = max(1, n // max(1, samples))
        series = [(0, rss_bytes())]
        w0 = time.perf_counter()
        for i in range(1, n + 1):
            self.target.poll()
            if scrape_every and i % scrape_every == 0:
                with urllib.request.urlopen(url, timeout=30) as resp:
                    resp.read()
            if i % every == 0 or i == n:
                series.append((i, rss_bytes()))
        return {"polls": n, "rss_series": series, "wall_s": time.perf_counter() - w0}

    def serve(self) -> None:
        reply({"ready": True, "port": self.target.port, **self.state()})
        for line in sys.stdin:
            msg = json.loads(line)
            cmd = msg["cmd"]
            if cmd == "poll":
                reply(self.poll(int(msg.get("n", 1))))
            elif cmd == "state":
                reply(self.state())
            elif cmd == "drift":
                reply(self.drift(int(msg["n"]), int(msg.get("samples", 20)),
                                 int(msg.get("scrape_every", 15))))
            elif cmd == "quit":
                break
            else:
                reply({"error": f"unknown command {cmd!r}"})
        self.target.stop()
        reply({"bye": True})


def reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--exporter", choices=["ours", "nvitop"], default="ours")
    parser.add_argument("--config", default="8gpu/64p")
    parser.add_argument("--latency", action="store_true")
    parser.add_argument("--interval", type=float,
                        help="seconds between polls (default: each exporter's own default)")
    args = parser.parse_args(argv)
    try:
        worker = Worker(args)
    except Exception as exc:  # reported to the runner as one line, not a traceback
        reply({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    worker.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
