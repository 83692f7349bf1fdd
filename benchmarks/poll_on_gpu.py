"""What one poll of the exporter costs on this node's real GPUs: process CPU per
poll, per collector, and every NVML call it made (calls per poll, median and
worst wall time). The figures in BENCHMARKS.md "Measured on a real H100" come
from this.

    .venv/bin/python -m benchmarks.poll_on_gpu                # 60 polls, 1 s apart
    .venv/bin/python -m benchmarks.poll_on_gpu --polls 300 --interval 0.1
    .venv/bin/python -m benchmarks.poll_on_gpu --simulate healthy

Polls are taken 1 s apart by default, as the daemon takes them: reads that
run on a time cadence (utilization samples, per-process utilization: every
5 s) are then counted at their real share. The wall times include pynvml's
Python wrapper; the call log wraps pynvml's functions, so reads the adapter
makes through pynvml's function pointers (field values, samples, GPM metrics)
are in the collector's CPU but not in the call table.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import pynvml

from gpu_exporter.cadence import DEFAULT_POLL_INTERVAL_S


def _wrap_pynvml(times: dict[str, list[float]]) -> None:
    """Time every pynvml function from now on (before the exporter imports it)."""

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                times.setdefault(name, []).append((time.perf_counter() - t0) * 1e6)

        return inner

    for name in dir(pynvml):
        fn = getattr(pynvml, name)
        if name.startswith("nvml") and isinstance(fn, types.FunctionType) \
                and name not in ("nvmlInit", "nvmlInitWithFlags", "nvmlShutdown"):
            setattr(pynvml, name, timed(name, fn))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--polls", type=int, default=60)
    parser.add_argument("--interval", type=float, default=DEFAULT_POLL_INTERVAL_S,
                        help="seconds between polls (default: the daemon's, "
                             f"{DEFAULT_POLL_INTERVAL_S:g})")
    parser.add_argument("--simulate", metavar="SCENARIO",
                        help="on a simulated node instead (to try the script)")
    args = parser.parse_args(argv)

    times: dict[str, list[float]] = {}
    _wrap_pynvml(times)
    from gpu_exporter.config import Settings
    from gpu_exporter.daemon import Exporter

    simulation = None
    if args.simulate:
        from gpu_exporter.simulator import SimulatedNode, load_scenario

        simulation = SimulatedNode(load_scenario(args.simulate))
    settings = Settings(web={"listen_address": "127.0.0.1:0"},
                        poll={"interval": max(args.interval, 0.1)})
    exporter = Exporter(settings, simulation)
    exporter.freeze_after_first_poll()  # as the daemon's run() does
    exporter.poller.poll()
    if not exporter.session.up or not exporter.session.gpus:
        exporter.stop()
        print("poll_on_gpu: no GPU answered through NVML on this node "
              "(try --simulate NAME)", file=sys.stderr)
        return 2
    own: dict[str, float] = {}
    for collector in exporter.poller.stages:
        def collect(out: Any, _collect: Any = collector.collect,
                    _name: str = collector.name) -> None:
            c0 = time.process_time()
            try:
                _collect(out)
            finally:
                own[_name] = own.get(_name, 0.0) + time.process_time() - c0

        collector.collect = collect  # type: ignore[method-assign]
    try:
        for _ in range(3):  # discovery and the first reads of every buffer
            exporter.poller.poll()
            time.sleep(args.interval)
        own.clear()
        times.clear()
        walls = []
        c0 = time.process_time()
        for _ in range(args.polls):
            t0 = time.perf_counter()
            exporter.poller.poll()
            walls.append(time.perf_counter() - t0)
            time.sleep(args.interval)
        cpu_ms = (time.process_time() - c0) / args.polls * 1e3
    finally:
        exporter.stop()
    n = args.polls
    walls.sort()
    gpus = len(exporter.session.gpus)
    per_second = (f"{cpu_ms / args.interval:.2f} ms per second" if args.interval > 0
                  else "polled back to back")
    print(f"{n} polls of {gpus} GPU(s), {args.interval:g} s apart: process CPU per poll "
          f"{cpu_ms:.2f} ms (all threads), {cpu_ms / max(1, gpus):.2f} ms per GPU, "
          f"{per_second}; poll wall median "
          f"{walls[n // 2] * 1e3:.2f} ms, p90 {walls[int(0.9 * (n - 1))] * 1e3:.2f} ms\n")
    print("| collector | CPU ms per poll |\n|---|---|")
    for name, spent in sorted(own.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {spent / n * 1e3:.2f} |")
    print("\n| pynvml call | calls per poll | median us | max us |\n|---|---|---|---|")
    for name, spent_us in sorted(times.items(), key=lambda kv: -sum(kv[1])):
        spent_us.sort()
        print(f"| {name} | {len(spent_us) / n:.1f} | {spent_us[len(spent_us) // 2]:.1f} | "
              f"{spent_us[-1]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
