"""Load and soak, loopback only, bounded in time, stopping by themselves.

- Load: 64 concurrent scrapers against a simulated 8-GPU node served by the real
  HTTP server and poller: no scrape fails; latency is printed, not asserted.
  A few seconds in CI, 60 s with ``GPU_EXPORTER_LONG_TESTS=1``.
- Soak: 10,000 accelerated polls (virtual clock, in-process) with processes
  coming and going: the series count stays bounded, no series of an exited
  process survives, RSS stays flat (figures printed; a generous bound asserted).
"""

from __future__ import annotations

import gc
import http.client
import os
import random
import threading
import time
from typing import Any

import psutil

from gpu_exporter.simulator.model import Scenario
from tests.simnode import SimRun

LONG = os.environ.get("GPU_EXPORTER_LONG_TESTS") == "1"
SCRAPERS = 64


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def _scraper(port: int, until: float, latencies: list[float], failures: list[str],
             keep_alive: bool) -> None:
    conn: http.client.HTTPConnection | None = None
    while time.monotonic() < until:
        t0 = time.monotonic()
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/metrics", headers={
                "Accept-Encoding": "gzip", **({} if keep_alive else {"Connection": "close"})})
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200 or not body:
                failures.append(f"status {resp.status}, {len(body)} bytes")
            else:
                latencies.append(time.monotonic() - t0)
            if not keep_alive or resp.will_close:
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException) as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
            if conn is not None:
                conn.close()
            conn = None
    if conn is not None:
        conn.close()


def _load(keep_alive: bool) -> None:
    seconds = 60.0 if LONG else 3.0
    with SimRun("healthy", web={"listen_address": "127.0.0.1:0"}) as run:
        run.poll()
        # A real-time poller alongside: every scrape sees a fresh snapshot now and then.
        exporter = run.exporter
        exporter.start()
        latencies: list[float] = []
        failures: list[str] = []
        until = time.monotonic() + seconds
        scrapers = [threading.Thread(target=_scraper, daemon=True,
                                     args=(exporter.port, until, latencies, failures,
                                           keep_alive)) for _ in range(SCRAPERS)]
        for s in scrapers:
            s.start()
        for s in scrapers:
            s.join(timeout=seconds + 30)
        assert not any(s.is_alive() for s in scrapers)
    mode = "keep-alive" if keep_alive else "a connection per scrape"
    print(f"\nload ({mode}): {SCRAPERS} scrapers for {seconds:.0f}s: {len(latencies)} scrapes "
          f"({len(latencies) / seconds:.0f}/s), {len(failures)} failed; latency p50 "
          f"{_percentile(latencies, 0.5) * 1000:.1f} ms, p99 "
          f"{_percentile(latencies, 0.99) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms")
    assert not failures, failures[:5]
    assert latencies


def test_64_concurrent_scrapers_with_a_connection_each() -> None:
    _load(keep_alive=False)


def test_64_concurrent_scrapers_keeping_their_connections_alive() -> None:
    _load(keep_alive=True)


# --- soak -----------------------------------------------------------------------------------
def _churn_scenario(polls: int, gpus: int, batch: tuple[int, int],
                    seed: int = 7) -> tuple[Scenario, dict[int, float]]:
    """Processes starting and exiting all the time: every 50 s a batch of new
    ones starts, each living 5 s to 2 min, so some exit every few polls.
    Returns the scenario and each process's exit time."""
    rnd = random.Random(seed)
    timeline: list[dict[str, Any]] = []
    exits: dict[int, float] = {}
    pid = 10000
    alive: list[dict[str, Any]] = []
    for t in range(0, polls, 50):
        alive = [p for p in alive if p["exits_at"] > t]
        for _ in range(rnd.randint(*batch)):
            pid += 1
            exits[pid] = t + rnd.randint(5, 120)
            alive.append({"pid": pid, "comm": f"job{pid % 1000}", "gpus": [rnd.randrange(gpus)],
                          "gpu_memory_ratio": 0.01, "cpu_ratio": 0.5, "state": "R",
                          "exits_at": float(exits[pid])})
        timeline.append({"at": float(t), "processes": [dict(p) for p in alive]})
    return Scenario(name="churn", node={"gpus": gpus}, state={"utilization": 0.8},
                    timeline=timeline), exits


def test_soak_10000_polls_with_processes_coming_and_going() -> None:
    polls = 10_000
    # CI: 1 GPU, a few processes at a time, and the collectors that hold state
    # between polls; GPU_EXPORTER_LONG_TESTS=1: 8 GPUs, more processes, every collector.
    gpus, batch = (8, (10, 30)) if LONG else (1, (2, 6))
    scenario, exits = _churn_scenario(polls, gpus, batch)
    off = {} if LONG else {n: False for n in ("mig", "gpm", "samples", "nvlink", "pcie")}
    proc = psutil.Process()
    series_counts: list[int] = []
    rss: list[int] = []
    with SimRun(scenario, collectors=off) as run:
        run.poll()
        t0 = time.monotonic()
        for i in range(1, polls + 1):
            snap = run.poll(1.0)
            if i % 10 == 0:
                now = float(i)  # poll i is taken i seconds into the scenario
                series_counts.append(sum(len(s) for s in snap.samples.values()))
                listed = {int(lab["pid"]) for lab, _ in snap.series("gpu_process_info")}
                # No series of a process that has exited.
                gone = {p for p in listed if exits[p] <= now}
                assert not gone, (i, sorted(gone))
            if i % 1000 == 0:
                gc.collect()
                rss.append(proc.memory_info().rss)
            if i == polls:
                text = run.scrape()
        elapsed = time.monotonic() - t0
    mib = [r / 2**20 for r in rss]
    print(f"\nsoak: {polls} polls in {elapsed:.1f}s ({elapsed / polls * 1000:.2f} ms/poll); "
          f"series min {min(series_counts)}, max {max(series_counts)}; RSS MiB at each 1000 "
          f"polls: {', '.join(f'{m:.1f}' for m in mib)}; growth after warm-up "
          f"{mib[-1] - mib[1]:+.1f} MiB; last exposition {len(text)} bytes")
    # Bounded: 8 GPUs' own series plus at most the processes alive at once.
    assert max(series_counts) < 3 * min(series_counts)
    # Flat: after the first 1000 polls (caches, imports) RSS grows by less than 20 MiB.
    assert mib[-1] - mib[1] < 20
