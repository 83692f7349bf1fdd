"""What ``gpu-exporter --simulate SCENARIO`` costs, on the real clock, as a
user runs it: CPU of the process as a share of one core, split into the
simulator (its NVML callbacks and its /proc and /sys) and the exporter.

    .venv/bin/python -m benchmarks.simulate_cost                  # healthy, 60 s
    .venv/bin/python -m benchmarks.simulate_cost --seconds 20 --scenario mixed

The daemon is built as the command line builds it (flags parsed, settings at
their defaults, the simulated node on the real clock) and runs in this
process with every thread, the HTTP server included; a scraper asks for
/metrics every ``--scrape-every`` seconds as Prometheus would. Prints one line
of ``key=value`` pairs; ``--json`` prints them as JSON instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass

from benchmarks.accounting import SimulatorCpu
from gpu_exporter.cli import settings_loader
from gpu_exporter.daemon.exporter import Exporter
from gpu_exporter.simulator import SimulatedNode

WARMUP_S = 5.0  # start-up and the first polls (static reads) are not the steady cost


@dataclass(frozen=True)
class Cost:
    scenario: str
    seconds: float
    polls: int
    scrapes: int
    process_core_pct: float  # all threads, CPU seconds per wall second x 100
    simulator_core_pct: float
    exporter_core_pct: float
    poll_interval_s: float


def measure(scenario: str, seconds: float, scrape_every: float) -> Cost:
    settings = settings_loader(["--simulate", scenario,
                                "--web.listen-address", "127.0.0.1:0"])()
    node = SimulatedNode.from_name(settings.simulate or scenario)
    acc = SimulatorCpu()
    acc.install(node)  # before the exporter hooks node.refresh into its polls
    exporter = Exporter(settings, node)
    exporter.freeze_after_first_poll()  # as the daemon's run() does
    exporter.start()
    url = f"http://127.0.0.1:{exporter.port}{settings.web.telemetry_path}"
    try:
        time.sleep(WARMUP_S)
        polls0 = exporter.poller.polls
        c0, s0, w0 = time.process_time(), acc.total_s, time.monotonic()
        scrapes = 0
        next_scrape = w0
        while (now := time.monotonic()) < w0 + seconds:
            if now >= next_scrape:
                with urllib.request.urlopen(url, timeout=30) as resp:
                    resp.read()
                scrapes += 1
                next_scrape += scrape_every
            time.sleep(max(0.0, min(next_scrape, w0 + seconds) - time.monotonic()))
        wall = time.monotonic() - w0
        cpu, sim = time.process_time() - c0, acc.total_s - s0
        polls = exporter.poller.polls - polls0
    finally:
        exporter.stop()
    return Cost(scenario=scenario, seconds=round(wall, 1), polls=polls, scrapes=scrapes,
                process_core_pct=round(cpu / wall * 100, 2),
                simulator_core_pct=round(sim / wall * 100, 2),
                exporter_core_pct=round((cpu - sim) / wall * 100, 2),
                poll_interval_s=settings.poll.interval)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="healthy")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--scrape-every", type=float, default=15.0,
                        help="seconds between scrapes (Prometheus' usual 15 s)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cost = measure(args.scenario, args.seconds, args.scrape_every)
    if args.json:
        print(json.dumps(asdict(cost)))
    else:
        print(" ".join(f"{k}={v}" for k, v in asdict(cost).items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
