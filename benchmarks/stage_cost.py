"""CPU per poll of each stage, as the daemon polls: NVIDIA's mock NVML (H100 x8
by default), the exporter's own threads running, its poll loop at the interval
asked (2 s, the default), the daemon's collection thresholds.

The shipped side-by-side (benchmarks/shipped.py) gives the whole process'
CPU against nvitop-exporter and the floor; this one says which stage of ours
spends it. Polls run at the daemon's pace rather than back to back: between
two polls 2 s apart the mock's counters move (so the diagnosis judges again
what they feed) and the CPU's caches go cold, both as on a node. A tight loop
of polls reads lower on both counts.

    python -m benchmarks.stage_cost [--board h100] [--seconds 60] [--interval 2s]

Prints the polls, the process' CPU per poll (every thread), the CPU inside the
poll (the poll thread), and each stage's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from benchmarks.daemon_probe import ROOT, board

WARM_UP_S = 8.0  # the first polls: the reads made once, the first judgments


def _process_cpu_s() -> float:
    """User and system CPU of this process, every thread (/proc/self/stat)."""
    with open("/proc/self/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed(fn: Callable[..., Any], into: dict[str, float], name: str) -> Callable[..., Any]:
    def timed(*args: Any) -> Any:
        start = time.thread_time()
        try:
            return fn(*args)
        finally:
            into[name] += time.thread_time() - start
    return timed


def measure(seconds: float, interval: str) -> dict[str, Any]:
    # Imported here: the parent process only sets the mock's environment up.
    from gpu_exporter.cli import parse_settings
    from gpu_exporter.daemon.exporter import Exporter

    exporter = Exporter(parse_settings(["--web.listen-address=127.0.0.1:0",
                                        f"--poll.interval={interval}"]))
    exporter.freeze_after_first_poll()
    poller = exporter.poller
    spent: dict[str, float] = defaultdict(float)
    polls = [0]
    poll_once = poller.poll_once

    def counted() -> Any:
        polls[0] += 1
        return poll_once()

    poller.poll_once = _timed(counted, spent, " poll")  # type: ignore[method-assign]
    for stage in poller.stages:
        stage.collect = _timed(stage.collect, spent, stage.name)  # type: ignore[method-assign]
    exporter.start()
    try:
        time.sleep(WARM_UP_S)
        cpu0, polls0 = _process_cpu_s(), polls[0]
        spent.clear()
        time.sleep(seconds)
        cpu1, polls1 = _process_cpu_s(), polls[0]
        stages = dict(spent)
    finally:
        exporter.stop()
    n = max(1, polls1 - polls0)
    return {"polls": polls1 - polls0, "process_ms": (cpu1 - cpu0) * 1000 / n,
            "poll_ms": stages.pop(" poll", 0.0) * 1000 / n,
            "stages_ms": {k: v * 1000 / n for k, v in sorted(stages.items(),
                                                             key=lambda kv: -kv[1])}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--board", default="h100")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--interval", default="2s")
    args = p.parse_args()
    b = board(args.board)
    if os.environ.get("MOCK_NVML_CONFIG") != str(b.path):
        # The loader reads LD_LIBRARY_PATH when a process starts: run again with it.
        sys.exit(subprocess.run([sys.executable, "-m", "benchmarks.stage_cost", *sys.argv[1:]],
                                env={**os.environ, **b.env()}, cwd=ROOT, check=False).returncode)
    r = measure(args.seconds, args.interval)
    print(f"{args.board}: {r['polls']} polls at {args.interval}: process "
          f"{r['process_ms']:.2f} ms CPU per poll, inside the poll {r['poll_ms']:.2f} ms")
    for name, ms in r["stages_ms"].items():
        print(f"  {name:15s} {ms:.3f} ms")


if __name__ == "__main__":
    main()
