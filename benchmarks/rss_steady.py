"""Memory in steady state: RSS of the shipped daemons over time, and how it
grows with GPUs, on NVIDIA's mock NVML.

Both exporters run as their users start them (default flags, only the listen
ports chosen), side by side on one board file of the mock, each scraped every
15 s as Prometheus would (OpenMetrics preferred, gzip); ``VmRSS`` of each
process is read every 10 s.

* ``steady``: the H100 x8 board for 30 minutes; RSS at the end, and the
  least-squares slope of the last 10 minutes (MiB per hour) to show the curve
  is flat.
* ``per-gpu``: boards derived from the H100 file with its first 1, 2, 4 and 8
  devices (the mock counts the ``devices:`` list), a shorter warm window each;
  RSS at the end of each (the median of its last minute), then the
  least-squares slope of RSS against GPUs per exporter.

Samples go to a JSON-lines file as they are taken, so a run cut short still
leaves its curve; ``report`` prints the tables from such files.

    python -m benchmarks.rss_steady steady  --out rss-steady.jsonl
    python -m benchmarks.rss_steady per-gpu --out rss-per-gpu.jsonl
    python -m benchmarks.rss_steady report  rss-steady.jsonl rss-per-gpu.jsonl

Where the mock is absent it says how to get it and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmarks.daemon_probe import (
    MOCK_LIBRARY,
    ROOT,
    Board,
    Daemon,
    board,
    console_script,
    free_port,
    mock_missing,
)
from benchmarks.run import PROMETHEUS_HEADERS, SCRAPE_EVERY_S, scrape

OURS, NVITOP = "gpu_exporter", "nvitop-exporter"
NVML_LOOP = "pynvml loop (no exporter)"
EXPORTERS = (OURS, NVITOP)
SAMPLE_EVERY_S = 10.0
STEADY_S = 1800.0
SLOPE_WINDOW_S = 600.0
GPU_COUNTS = (1, 2, 4, 8)
WARM_S = 180.0
MIG_COUNTS = (0, 7, 14, 28, 56)
MIG_PER_GPU = 7  # 1g.10gb instances an H100 holds
PROFILE_1G_10GB = 19  # NVML's GPU instance profile id of 1g.10gb
FIRST_1G_INSTANCE = 7  # the GPU instance ids an H100 gives seven 1g.10gb instances: 7-13
# RSS "at the end" of a per-GPU run: the median of its samples in this last span.
END_SPAN_S = 60.0
_GPU_UUID = re.compile(r'"(GPU-[0-9A-Fa-f-]+)"')
_MIG_UUID = re.compile(r'"(MIG-[0-9A-Fa-f-]+)"')


# --- pure parts ---------------------------------------------------------------------------
def least_squares(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through the points."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError("a line needs at least two points, as many x as y")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("a line needs at least two distinct x")
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return slope, my - slope * mx


def tail_slope_per_hour(points: Sequence[tuple[float, float]], window_s: float) -> float:
    """Least-squares slope, in units per hour, of the (seconds, value) points
    in the last ``window_s`` seconds of the curve."""
    if not points:
        raise ValueError("no points")
    end = max(t for t, _ in points)
    kept = [(t, v) for t, v in points if t >= end - window_s]
    slope, _ = least_squares([t for t, _ in kept], [v for _, v in kept])
    return slope * 3600.0


def subset_board(doc: dict[str, Any], gpus: int) -> dict[str, Any]:
    """The board file ``doc`` with only its first ``gpus`` devices: the mock
    presents one GPU per entry of ``devices:``; the PCIe topology keeps only
    the bus ids still there."""
    devices = list(doc.get("devices") or [])
    if not 1 <= gpus <= len(devices):
        raise ValueError(f"the board has {len(devices)} devices; asked for {gpus}")
    out = dict(doc)
    out["devices"] = devices[:gpus]
    kept = {d.get("pci", {}).get("bus_id") for d in out["devices"]}
    topology = doc.get("pcie_topology")
    if topology:
        complexes = []
        for rc in topology.get("root_complexes") or []:
            left = [bdf for bdf in rc.get("devices") or [] if bdf in kept]
            if left:
                complexes.append({**rc, "devices": left})
        out["pcie_topology"] = {**topology, "root_complexes": complexes}
    return out


def mig_scenario(instances: int, gpus: int = 8) -> dict[str, Any]:
    """A simulated H100 x``gpus`` node with ``instances`` 1g.10gb MIG instances,
    seven to a GPU from GPU 0 on (an H100 holds seven): the node of the
    built-in mig-h100 scenario, with no processes, so that only the instances
    change from one run to the next."""
    if not 0 <= instances <= MIG_PER_GPU * gpus:
        raise ValueError(f"{gpus} H100s hold 0 to {MIG_PER_GPU * gpus} instances")
    split: dict[int, Any] = {}
    for gpu in range((instances + MIG_PER_GPU - 1) // MIG_PER_GPU):
        here = min(MIG_PER_GPU, instances - gpu * MIG_PER_GPU)
        split[gpu] = {"memory_used_ratio": 0.0, "mig_instances": [
            {"gpu_instance": FIRST_1G_INSTANCE + i, "profile_id": PROFILE_1G_10GB,
             "compute_instance": 0, "memory_total_mib": 9856, "memory_used_ratio": 0.7,
             "sm_active": 0.6} for i in range(here)]}
    return {"name": f"rss-mig-{instances}",
            "description": f"{gpus}x H100 SXM5 node with {instances} MIG instances.",
            "node": {"gpus": gpus, "profile": "h100-sxm5-80gb"},
            "state": {"utilization": 0.96, "memory_used_ratio": 0.78},
            "gpus": split, "processes": [], "expect": []}


def gpus_seen(body: bytes) -> int:
    """How many GPUs (distinct GPU UUID label values) an exposition names."""
    return len(set(_GPU_UUID.findall(body.decode(errors="replace"))))


def mig_seen(body: bytes) -> int:
    """How many MIG instances (distinct MIG UUID label values) an exposition names."""
    return len(set(_MIG_UUID.findall(body.decode(errors="replace"))))


# --- measuring ----------------------------------------------------------------------------
def _argv(exporter: str, port: int) -> list[str]:
    if exporter == OURS:
        return [console_script("gpu-exporter"), "--web.listen-address", f"127.0.0.1:{port}"]
    return [console_script("nvitop-exporter"), "--port", str(port)]


def _write(out: Any, record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


Start = tuple[Callable[[int], list[str]], dict[str, str]]  # argv for a port, environment


def measure(starts: dict[str, Start], duration_s: float,
            phase: str, out: Any, gpus: int, **extra: Any) -> None:
    """Each exporter of ``starts`` (its argv and environment) for
    ``duration_s``, all at once: scraped every 15 s, VmRSS every 10 s, each
    sample written to ``out`` as it is taken."""
    running: dict[str, Daemon] = {}
    try:
        for e, (argv, env) in starts.items():
            port = free_port()
            running[e] = Daemon(e, argv(port), port, env)
        bodies = {e: d.wait_ready() for e, d in running.items()}
        t0 = time.monotonic()
        _write(out, {"phase": phase, "gpus": gpus, **extra, "event": "start",
                     "gpus_seen": {e: gpus_seen(b) for e, b in bodies.items()},
                     "mig_seen": {e: mig_seen(b) for e, b in bodies.items()},
                     "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        next_scrape, next_sample = t0 + SCRAPE_EVERY_S / 2, t0
        while True:
            now = time.monotonic()
            if now >= next_scrape:
                for d in running.values():
                    scrape(d.port, PROMETHEUS_HEADERS)
                next_scrape += SCRAPE_EVERY_S
            if now >= next_sample:
                rss = {e: d.memory_mib()[0] for e, d in running.items()}
                _write(out, {"phase": phase, "gpus": gpus, **extra, "t": round(now - t0, 2),
                             "rss": rss})
                next_sample += SAMPLE_EVERY_S
                if next_sample > t0 + duration_s + 0.5:
                    break
            time.sleep(max(0.0, min(next_scrape, next_sample) - time.monotonic()))
        for d in running.values():
            d.stop()
    finally:
        for d in running.values():
            d.kill()


def _on_mock(b: Board) -> dict[str, Start]:
    return {e: (functools.partial(_argv, e), b.env()) for e in EXPORTERS}


def _steady(args: argparse.Namespace) -> None:
    with open(args.out, "a") as out:
        b = board("h100")
        measure(_on_mock(b), args.duration, "steady", out, b.gpus)


def _per_gpu(args: argparse.Namespace) -> None:
    base = board("h100")
    doc = yaml.safe_load(base.path.read_text())
    with tempfile.TemporaryDirectory(prefix="rss-boards-") as tmp, open(args.out, "a") as out:
        # Laid out as the mock's own directory (library beside configs/), as
        # Board.env expects.
        mock = Path(tmp)
        (mock / MOCK_LIBRARY).symlink_to(base.path.parent.parent / MOCK_LIBRARY)
        (mock / "configs").mkdir()
        for n in args.gpus:
            path = mock / "configs" / f"mock-nvml-config-h100x{n}.yaml"
            path.write_text(yaml.safe_dump(subset_board(doc, n), sort_keys=False))
            b = Board(f"h100x{n}", path, base.product, n, base.memory_bytes, base.nvlink)
            measure(_on_mock(b), args.warm, "per-gpu", out, n)
            print(f"per-gpu: {n} GPUs done", file=sys.stderr, flush=True)


def _simulated(scenario: Path, port: int) -> list[str]:
    return [*_argv(OURS, port), "--simulate", str(scenario)]


def _per_mig(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="rss-mig-") as tmp, open(args.out, "a") as out:
        for n in args.instances:
            path = Path(tmp) / f"mig-{n}.yaml"
            path.write_text(yaml.safe_dump(mig_scenario(n), sort_keys=False))
            start: Start = (functools.partial(_simulated, path), {})
            measure({OURS: start}, args.warm, "per-mig", out, 8, instances=n)
            print(f"per-mig: {n} instances done", file=sys.stderr, flush=True)


def _nvml_loop(args: argparse.Namespace) -> None:
    """No exporter: this process calls NVML on the H100 x8 board the way a
    poll does (a few reads of every GPU each second) and samples its own
    RSS, to tell what the library underneath grows from what an exporter
    does."""
    b = board("h100")
    if os.environ.get("MOCK_NVML_CONFIG") != str(b.path):
        # The loader reads LD_LIBRARY_PATH when a process starts: run again with it.
        subprocess.run([sys.executable, "-m", "benchmarks.rss_steady", *sys.argv[1:]],
                       env={**os.environ, **b.env()}, cwd=ROOT, check=True)
        return
    import pynvml  # imported here: the other commands run the exporters, not pynvml

    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    reads: list[Callable[[Any], object]] = [
        pynvml.nvmlDeviceGetUtilizationRates, pynvml.nvmlDeviceGetMemoryInfo,
        pynvml.nvmlDeviceGetPowerUsage, pynvml.nvmlDeviceGetCurrentClocksEventReasons,
        pynvml.nvmlDeviceGetComputeRunningProcesses,
        functools.partial(pynvml.nvmlDeviceGetTemperature, sensor=pynvml.NVML_TEMPERATURE_GPU),
        functools.partial(pynvml.nvmlDeviceGetClockInfo, type=pynvml.NVML_CLOCK_SM),
        functools.partial(pynvml.nvmlDeviceGetPcieThroughput,
                          counter=pynvml.NVML_PCIE_UTIL_TX_BYTES),
        functools.partial(pynvml.nvmlDeviceGetFieldValues, fieldIds=[150, 151, 152, 153])]
    with open(args.out, "a") as out:
        t0 = time.monotonic()
        next_poll = next_sample = t0
        _write(out, {"phase": "nvml-loop", "gpus": len(handles), "event": "start",
                     "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        while (now := time.monotonic()) < t0 + args.duration + 0.5:
            if now >= next_poll:
                for h in handles:
                    for read in reads:
                        with contextlib.suppress(pynvml.NVMLError):
                            read(h)
                next_poll += args.interval
            if now >= next_sample:
                _write(out, {"phase": "nvml-loop", "gpus": len(handles), "t": round(now - t0, 2),
                             "rss": {NVML_LOOP: _own_rss_mib()}})
                next_sample += SAMPLE_EVERY_S
            time.sleep(max(0.0, min(next_poll, next_sample) - time.monotonic()))


def _own_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _per_mig_harness(args: argparse.Namespace) -> None:
    """Both exporters in the simulator harness (benchmarks/worker.py: the
    simulator under each one's pynvml, polls on a virtual clock, scraped every
    15 polls), on its 8-GPU node whole and split into 8x7 MIG instances: RSS
    after ``--polls`` polls."""
    with open(args.out, "a") as out:
        for _ in range(args.repeat):
            for config, instances in (("8gpu/0p", 0), (f"8x{MIG_PER_GPU}mig/0p", 8 * MIG_PER_GPU)):
                for e, flag in ((OURS, "ours"), (NVITOP, "nvitop")):
                    request = json.dumps({"cmd": "drift", "n": args.polls, "samples": 5,
                                          "scrape_every": 15}) + "\n" + '{"cmd": "quit"}\n'
                    done = subprocess.run(
                        [sys.executable, "-m", "benchmarks.worker", "--exporter", flag,
                         "--config", config], input=request, capture_output=True, text=True,
                        timeout=600, cwd=ROOT)
                    replies = [json.loads(line) for line in done.stdout.splitlines()
                               if line.startswith("{")]
                    drift = next((r for r in replies if "rss_series" in r), None)
                    if drift is None:
                        raise RuntimeError(f"the worker ({e}, {config}) answered no RSS: "
                                           f"{done.stdout[-500:]} {done.stderr[-500:]}")
                    _write(out, {"phase": "per-mig-harness", "gpus": 8, "instances": instances,
                                 "t": float(args.polls), "polls": args.polls,
                                 "rss": {e: drift["rss_series"][-1][1] / 2**20}})
                    print(f"per-mig-harness: {e} {config} done", file=sys.stderr, flush=True)


# --- the report ---------------------------------------------------------------------------
def read_records(paths: Iterable[Path]) -> list[dict[str, Any]]:
    records = []
    for p in paths:
        for line in p.read_text().splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


def steady_summary(records: Sequence[dict[str, Any]], phase: str = "steady"
                   ) -> dict[str, dict[str, float]]:
    """Per process of ``phase``: RSS at the last sample, its minutes, and over
    the last 10 minutes the slope in MiB/hour and the median, least and most
    (the curve is a saw: the allocators hand memory back now and then, so one
    sample can sit on a tooth)."""
    rows = [r for r in records if r.get("phase") == phase and "rss" in r]
    out = {}
    for e in sorted({e for r in rows for e in r["rss"]}):
        curve = [(r["t"], r["rss"][e]) for r in rows if e in r["rss"]]
        if len(curve) < 2:
            continue
        window = [v for t, v in curve if t >= curve[-1][0] - SLOPE_WINDOW_S]
        out[e] = {"minutes": curve[-1][0] / 60.0, "rss_mib": curve[-1][1],
                  "first_mib": curve[0][1], "max_mib": max(v for _, v in curve),
                  "window_median_mib": statistics.median(window),
                  "window_min_mib": min(window), "window_max_mib": max(window),
                  "slope_mib_per_h": tail_slope_per_hour(curve, SLOPE_WINDOW_S)}
    return out


def growth_summary(records: Sequence[dict[str, Any]], phase: str = "per-gpu", key: str = "gpus"
                   ) -> tuple[dict[str, dict[int, float]], dict[str, tuple[float, float]]]:
    """Per exporter: RSS at the end of each run of ``phase`` (the median of
    its last minute) by ``key`` (GPUs, MIG instances), and the least-squares
    (slope MiB per unit of ``key``, intercept MiB)."""
    rows = [r for r in records if r.get("phase") == phase and "rss" in r]
    ends: dict[str, dict[int, float]] = {e: {} for e in EXPORTERS}
    for n in sorted({r[key] for r in rows}):
        run = [r for r in rows if r[key] == n]
        last = max(r["t"] for r in run)
        for e in EXPORTERS:
            tail = [r["rss"][e] for r in run if r["t"] >= last - END_SPAN_S and e in r["rss"]]
            if tail:
                ends[e][n] = statistics.median(tail)
    fits = {e: least_squares(list(ends[e]), list(ends[e].values()))
            for e in EXPORTERS if len(ends[e]) >= 2}
    return ends, fits


def _report(args: argparse.Namespace) -> None:
    records = read_records(args.files)
    for r in records:
        if r.get("event") == "start":
            print(f"{r['phase']} {r['gpus']} GPUs, {r.get('instances', 0)} MIG instances: "
                  f"started {r['utc']}; seen {r.get('gpus_seen', {})} GPUs, "
                  f"{r.get('mig_seen', {})} MIG")
    for phase, e, s in [(p, e, s) for p in ("steady", "nvml-loop")
                        for e, s in steady_summary(records, p).items()]:
        print(f"{phase} {e}: RSS {s['rss_mib']:.1f} MiB at {s['minutes']:.1f} min "
              f"(first {s['first_mib']:.1f}, max {s['max_mib']:.1f}); last "
              f"{SLOPE_WINDOW_S / 60:.0f} min: slope {s['slope_mib_per_h']:+.3f} MiB/h, median "
              f"{s['window_median_mib']:.2f}, {s['window_min_mib']:.2f}-"
              f"{s['window_max_mib']:.2f} MiB")
    for phase, key, unit in (("per-gpu", "gpus", "GPU"), ("per-mig", "instances", "instance"),
                             ("per-mig-harness", "instances", "instance")):
        ends, fits = growth_summary(records, phase, key)
        for e in EXPORTERS:
            if ends[e]:
                points = ", ".join(f"{n}: {v:.2f}" for n, v in ends[e].items())
                print(f"{phase} {e}: RSS MiB by {key}: {points}")
            if e in fits:
                print(f"{phase} {e}: slope {fits[e][0]:+.4f} MiB/{unit}, "
                      f"intercept {fits[e][1]:.2f} MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("steady", help="H100 x8, both exporters, 30 minutes")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--duration", type=float, default=STEADY_S, help="seconds")
    p = sub.add_parser("per-gpu", help="RSS against GPUs, boards of 1, 2, 4, 8 H100s")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--warm", type=float, default=WARM_S, help="seconds per board")
    p.add_argument("--gpus", type=int, nargs="+", default=list(GPU_COUNTS))
    p = sub.add_parser("per-mig", help="gpu_exporter alone on the simulator: RSS against "
                       "MIG instances (the mock presents none)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--warm", type=float, default=WARM_S, help="seconds per node")
    p.add_argument("--instances", type=int, nargs="+", default=list(MIG_COUNTS))
    p = sub.add_parser("per-mig-harness", help="both exporters in the simulator harness: "
                       "RSS on 8 GPUs whole and split into 56 MIG instances")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--polls", type=int, default=300)
    p.add_argument("--repeat", type=int, default=3)
    p = sub.add_parser("nvml-loop", help="no exporter: a plain pynvml loop on the mock's "
                       "H100 x8 board, its own RSS (what the library underneath grows)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--duration", type=float, default=STEADY_S, help="seconds")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between passes")
    p = sub.add_parser("report", help="print the results of earlier runs")
    p.add_argument("files", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.command in ("steady", "per-gpu", "nvml-loop"):
        missing = mock_missing()
        if missing:
            print(missing, file=sys.stderr)
            return 2
    run = {"steady": _steady, "per-gpu": _per_gpu, "per-mig": _per_mig,
           "per-mig-harness": _per_mig_harness, "nvml-loop": _nvml_loop, "report": _report}
    run[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
