"""CPU per poll of each stage, as the daemon polls: NVIDIA's mock NVML (H100 x8
by default), the exporter's own threads running, its poll loop at the interval
asked (2 s, the default), the daemon's collection thresholds.

The shipped side-by-side (benchmarks/shipped.py) gives the whole process'
CPU against nvitop-exporter and the floor; this one says which stage of ours
spends it. Polls run at the daemon's pace rather than back to back: between
two polls 2 s apart the mock's counters move (so the diagnosis judges again
what they feed) and the CPU's caches go cold, both as on a node. A tight loop
of polls reads lower on both counts.

    python -m benchmarks.stage_cost [--board h100] [--seconds 60] [--interval 2s] [--nvml]

Prints the polls, the process' CPU per poll (every thread), the CPU inside the
poll (the poll thread), and each stage's. With ``--nvml``, also the share of
each in NVML's C functions (the ctypes call included; the timing adds about a
microsecond a call), and then the floor (``benchmarks.floor``: a plain pynvml
loop) making the calls the daemon made, per GPU and poll, at the same
interval for as long: what is left above the C calls is Python, ours against
the floor's own (pynvml's wrappers and structs).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pynvml

from benchmarks import nvml_calls
from benchmarks.daemon_probe import ROOT, board
from benchmarks.floor import Floor
from gpu_exporter.settings.config_types import parse_duration

# Past the daemon's settling: the reads made once, every reader's first
# answer (GPM's first ratio after a sample pair), and the window of the
# diagnosis rows those answers made judgeable (30 s: until then each is judged
# every poll). On NVIDIA's mock (H100 x8, polls 2 s apart) the last of those
# rows had its window 40 s after the start. --warm-up 8 measures the settling.
WARM_UP_S = 45.0


def _process_cpu_s() -> float:
    """User and system CPU of this process, every thread (/proc/self/stat)."""
    with open("/proc/self/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# CPU seconds each thread has spent in NVML's C functions (timed_nvml()).
_IN_NVML = threading.local()


def _nvml_s() -> float:
    return getattr(_IN_NVML, "s", 0.0)


class _TimedPointer:
    """A C function pointer whose calls add their thread's CPU time to _IN_NVML;
    attributes (restype, argtypes) go to the pointer itself."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Any) -> None:
        object.__setattr__(self, "_fn", fn)

    def __call__(self, *args: Any) -> Any:
        start = time.thread_time()
        try:
            return self._fn(*args)
        finally:
            _IN_NVML.s = _nvml_s() + time.thread_time() - start

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._fn, attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(self._fn, attr, value)


def timed_nvml() -> None:
    """Time every C function pynvml hands out from now on (and count it:
    benchmarks.nvml_calls), through the one look-up they all go through."""
    nvml_calls.install()
    lookup = pynvml._nvmlGetFunctionPointer
    wrapped: dict[str, _TimedPointer] = {}

    def timing_lookup(name: str) -> Any:
        fn = lookup(name)
        timed = wrapped.get(name)
        if timed is None or timed._fn is not fn:
            timed = wrapped[name] = _TimedPointer(fn)
        return timed

    pynvml._nvmlGetFunctionPointer = timing_lookup


def _timed(fn: Callable[..., Any], into: dict[str, float], name: str,
           in_nvml: dict[str, float]) -> Callable[..., Any]:
    def timed(*args: Any) -> Any:
        start, start_nvml = time.thread_time(), _nvml_s()
        try:
            return fn(*args)
        finally:
            into[name] += time.thread_time() - start
            in_nvml[name] += _nvml_s() - start_nvml
    return timed


def measure(seconds: float, interval: str, warm_up: float = WARM_UP_S) -> dict[str, Any]:
    # Imported here: the parent process only sets the mock's environment up.
    from gpu_exporter.cli import parse_settings
    from gpu_exporter.daemon.exporter import Exporter

    exporter = Exporter(parse_settings(["--web.listen-address=127.0.0.1:0",
                                        f"--poll.interval={interval}"]))
    exporter.freeze_after_first_poll()
    poller = exporter.poller
    spent: dict[str, float] = defaultdict(float)
    in_nvml: dict[str, float] = defaultdict(float)
    # This poll's figures, added to the window's when the poll ends: a poll
    # under way when the window opens or closes counts whole or not at all.
    this_poll: dict[str, float] = defaultdict(float)
    this_nvml: dict[str, float] = defaultdict(float)
    polls = [0]
    poll_once = _timed(poller.poll_once, this_poll, " poll", this_nvml)

    def counted() -> Any:
        try:
            return poll_once()
        finally:
            for into, new in ((spent, this_poll), (in_nvml, this_nvml)):
                for name, s in new.items():
                    into[name] += s
                new.clear()
            polls[0] += 1

    poller.poll_once = counted  # type: ignore[method-assign]
    for stage in poller.stages:
        stage.collect = _timed(stage.collect, this_poll,  # type: ignore[method-assign]
                               stage.name, this_nvml)
    exporter.start()
    try:
        time.sleep(warm_up)
        cpu0, polls0, calls0 = _process_cpu_s(), polls[0], nvml_calls.snapshot()
        fields0 = nvml_calls.fields_asked()
        spent.clear()
        in_nvml.clear()
        time.sleep(seconds)
        cpu1, polls1, calls1 = _process_cpu_s(), polls[0], nvml_calls.snapshot()
        fields1 = nvml_calls.fields_asked()
        stages, nvml = dict(spent), dict(in_nvml)
    finally:
        exporter.stop()
    n = max(1, polls1 - polls0)
    calls = nvml_calls.difference(calls0, calls1)
    return {"polls": polls1 - polls0, "process_ms": (cpu1 - cpu0) * 1000 / n,
            "poll_ms": stages.pop(" poll", 0.0) * 1000 / n,
            "poll_nvml_ms": nvml.pop(" poll", 0.0) * 1000 / n,
            "stages_ms": {k: v * 1000 / n for k, v in sorted(stages.items(),
                                                             key=lambda kv: -kv[1])},
            "stages_nvml_ms": {k: v * 1000 / n for k, v in nvml.items()},
            "gpus": len(exporter.session.gpus),
            "calls": calls,
            "fields_per_call": ((fields1 - fields0) / calls[nvml_calls.FIELD_VALUES]
                                if calls.get(nvml_calls.FIELD_VALUES) else 0)}


def measure_floor(r: dict[str, Any], seconds: float, interval_s: float) -> dict[str, Any]:
    """The floor making the calls ``r`` counted, per GPU and poll, at the same
    interval for as long: its CPU per poll and the share in NVML's C functions."""
    per = max(1, r["polls"] * max(1, r["gpus"]))
    floor = Floor({"calls": {k: v / per for k, v in r["calls"].items()},
                   "fields": round(r["fields_per_call"]), "series": 0})
    try:
        floor.poll()  # the GPM samples' first, the pointers looked up
        polls, cpu, nvml = 0, 0.0, 0.0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            start, start_nvml = time.thread_time(), _nvml_s()
            floor.poll()
            cpu += time.thread_time() - start
            nvml += _nvml_s() - start_nvml
            polls += 1
            time.sleep(interval_s)
    finally:
        pynvml.nvmlShutdown()
    return {"polls": polls, "poll_ms": cpu * 1000 / max(1, polls),
            "nvml_ms": nvml * 1000 / max(1, polls),
            "not_replayed": ", ".join(sorted(floor.skipped))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--board", default="h100")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--interval", default="2s")
    p.add_argument("--warm-up", type=float, default=WARM_UP_S,
                   help=f"seconds before the window opens (default {WARM_UP_S:g}: past the "
                        "settling, in steady state)")
    p.add_argument("--nvml", action="store_true",
                   help="time NVML's C functions too, and run the floor after")
    args = p.parse_args()
    b = board(args.board)
    if os.environ.get("MOCK_NVML_CONFIG") != str(b.path):
        # The loader reads LD_LIBRARY_PATH when a process starts: run again with it.
        sys.exit(subprocess.run([sys.executable, "-m", "benchmarks.stage_cost", *sys.argv[1:]],
                                env={**os.environ, **b.env()}, cwd=ROOT, check=False).returncode)
    if args.nvml:
        timed_nvml()
    r = measure(args.seconds, args.interval, args.warm_up)
    print(f"{args.board}: {r['polls']} polls at {args.interval}: process "
          f"{r['process_ms']:.2f} ms CPU per poll, inside the poll {r['poll_ms']:.2f} ms"
          + (f" (in NVML {r['poll_nvml_ms']:.2f} ms)" if args.nvml else ""))
    for name, ms in r["stages_ms"].items():
        print(f"  {name:15s} {ms:.3f} ms"
              + (f"  in NVML {r['stages_nvml_ms'].get(name, 0.0):.3f} ms" if args.nvml else ""))
    if args.nvml:
        f = measure_floor(r, args.seconds, parse_duration(args.interval))
        print(f"floor: {f['polls']} polls at {args.interval}: {f['poll_ms']:.2f} ms CPU per poll "
              f"(in NVML {f['nvml_ms']:.2f} ms)"
              + (f"; not replayed: {f['not_replayed']}" if f["not_replayed"] else ""))


if __name__ == "__main__":
    main()
