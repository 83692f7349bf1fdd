"""The floor of a poll: a plain pynvml loop making the exporter's NVML calls.

It is what the shipped daemon's CPU per poll is measured against
(``benchmarks.shipped``): the same C functions at the same rates per GPU and
poll (counted in the daemon by ``benchmarks.nvml_calls``), the same number of
fields in each nvmlDeviceGetFieldValues call, at the same poll interval, and
the same number of series rendered as Prometheus text whenever it is scraped
(gzip when asked). Nothing else: no cadence bookkeeping, no bounds, no
diagnosis, no history, no host reads. What the daemon spends above it is its
own bookkeeping around the same C calls.

    python -m benchmarks.floor --port PORT --interval 2 --plan PLAN.json

PLAN.json: ``{"calls": {"nvmlDeviceGetTemperature": 1.0, ...}, "fields": 34,
"series": 636}``, calls per GPU and poll. A function the floor does not know
how to call is named on stderr at start and not replayed (the report says how
many calls per GPU-poll that leaves out).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gzip
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pynvml

# Field ids the floor asks, cycled to the plan's count: counters and gauges a
# datacenter board answers (energy, ECC, PCIe replays, throttle durations,
# NVLink totals); the mock answers or refuses each at the same C-call cost.
FIELD_IDS = (83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100,
             131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144, 145,
             146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160)
CLOCKS = (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM, pynvml.NVML_CLOCK_GRAPHICS)
GPM_METRICS = (pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
               pynvml.NVML_GPM_METRIC_SM_UTIL)


class Gpu:
    """What the floor keeps per GPU: its handle, the two GPM samples it
    alternates, and the last answer of each call (rendered at a scrape)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.samples = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
        self.turn = 0
        self.values: dict[str, float] = {}


def _gpm_metrics(gpu: Gpu) -> object:
    get = pynvml.c_nvmlGpmMetricsGet_t()
    get.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    get.numMetrics = len(GPM_METRICS)
    get.sample1, get.sample2 = gpu.samples[gpu.turn], gpu.samples[1 - gpu.turn]
    for i, metric in enumerate(GPM_METRICS):
        get.metrics[i].metricId = metric
    return pynvml.nvmlGpmMetricsGet(get)


def _gpm_sample(gpu: Gpu) -> object:
    gpu.turn = 1 - gpu.turn
    return pynvml.nvmlGpmSampleGet(gpu.handle, gpu.samples[gpu.turn])


def _fabric(gpu: Gpu) -> object:
    info = pynvml.c_nvmlGpuFabricInfo_v3_t()  # sets its own version, as the daemon asks
    return pynvml.nvmlDeviceGetGpuFabricInfoV(gpu.handle, ctypes.byref(info))


def calls(fields: int, event_set: Any) -> dict[str, Callable[[Gpu, int], object]]:
    """Each C function the daemon calls, as the floor calls it (the int is how
    many times it was called on this GPU: clock types take turns)."""
    ids = [FIELD_IDS[i % len(FIELD_IDS)] for i in range(fields)]
    return {
        "nvmlDeviceGetApplicationsClock":
            lambda g, n: pynvml.nvmlDeviceGetApplicationsClock(g.handle, CLOCKS[n % 3]),
        "nvmlDeviceGetClockInfo": lambda g, n: pynvml.nvmlDeviceGetClockInfo(g.handle,
                                                                            CLOCKS[n % 3]),
        "nvmlDeviceGetComputeRunningProcesses_v3":
            lambda g, n: pynvml.nvmlDeviceGetComputeRunningProcesses(g.handle),
        "nvmlDeviceGetGraphicsRunningProcesses_v3":
            lambda g, n: pynvml.nvmlDeviceGetGraphicsRunningProcesses(g.handle),
        "nvmlDeviceGetCurrPcieLinkGeneration":
            lambda g, n: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(g.handle),
        "nvmlDeviceGetCurrPcieLinkWidth":
            lambda g, n: pynvml.nvmlDeviceGetCurrPcieLinkWidth(g.handle),
        "nvmlDeviceGetCurrentClocksEventReasons":
            lambda g, n: pynvml.nvmlDeviceGetCurrentClocksEventReasons(g.handle),
        "nvmlDeviceGetEccMode": lambda g, n: pynvml.nvmlDeviceGetEccMode(g.handle),
        "nvmlDeviceGetFieldValues": lambda g, n: pynvml.nvmlDeviceGetFieldValues(g.handle, ids),
        "nvmlDeviceGetGpuFabricInfoV": lambda g, n: _fabric(g),
        "nvmlDeviceGetMemoryInfo_v2":
            lambda g, n: pynvml.nvmlDeviceGetMemoryInfo(g.handle, version=pynvml.nvmlMemory_v2),
        "nvmlDeviceGetMigMode": lambda g, n: pynvml.nvmlDeviceGetMigMode(g.handle),
        "nvmlDeviceGetPerformanceState": lambda g, n: pynvml.nvmlDeviceGetPerformanceState(
            g.handle),
        "nvmlDeviceGetPersistenceMode": lambda g, n: pynvml.nvmlDeviceGetPersistenceMode(
            g.handle),
        "nvmlDeviceGetPowerUsage": lambda g, n: pynvml.nvmlDeviceGetPowerUsage(g.handle),
        "nvmlDeviceGetTemperature":
            lambda g, n: pynvml.nvmlDeviceGetTemperature(g.handle, pynvml.NVML_TEMPERATURE_GPU),
        "nvmlDeviceGetUtilizationRates": lambda g, n: pynvml.nvmlDeviceGetUtilizationRates(
            g.handle),
        "nvmlEventSetWait_v2": lambda g, n: pynvml.nvmlEventSetWait(event_set, 0),
        "nvmlGpmSampleGet": lambda g, n: _gpm_sample(g),
        "nvmlGpmMetricsGet": lambda g, n: _gpm_metrics(g),
    }


def _number(answer: object) -> float:
    """A value to render: the answer itself, or the first number in it."""
    if isinstance(answer, (int, float)):
        return float(answer)
    for name in ("used", "gpu", "currentMode", "state"):
        value = getattr(answer, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    return 0.0


class Floor:
    def __init__(self, plan: dict[str, Any]) -> None:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        self.gpus = [Gpu(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        event_set = pynvml.nvmlEventSetCreate()
        for gpu in self.gpus:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlDeviceRegisterEvents(gpu.handle, pynvml.nvmlEventTypeXidCriticalError,
                                                event_set)
        known = calls(int(plan.get("fields", 0)), event_set)
        rates = {str(k): float(v) for k, v in plan["calls"].items()}
        self.skipped = {k: v for k, v in rates.items() if k not in known}
        self.plan = [(name, rate, known[name]) for name, rate in sorted(rates.items())
                     if name in known]
        self.credit = [[0.0] * len(self.plan) for _ in self.gpus]
        self.made = [[0] * len(self.plan) for _ in self.gpus]
        self.series_per_gpu = max(1, int(plan.get("series", 1)) // max(1, count))
        self.lock = threading.Lock()

    def poll(self) -> None:
        for g, gpu in enumerate(self.gpus):
            credit, made = self.credit[g], self.made[g]
            for i, (name, rate, call) in enumerate(self.plan):
                credit[i] += rate
                while credit[i] >= 1.0:
                    credit[i] -= 1.0
                    try:
                        answer = call(gpu, made[i])
                    except pynvml.NVMLError:
                        answer = None
                    made[i] += 1
                    with self.lock:
                        gpu.values[name] = _number(answer)

    def render(self) -> bytes:
        lines = []
        with self.lock:
            for g, gpu in enumerate(self.gpus):
                values = list(gpu.values.values()) or [0.0]
                for n in range(self.series_per_gpu):
                    lines.append(f'floor_value{{gpu="{g}",n="{n}"}} '
                                 f"{values[n % len(values)]!r}\n")
        return "".join(lines).encode()


def serve(floor: Floor, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = floor.render()
            gzipped = "gzip" in self.headers.get("Accept-Encoding", "")
            if gzipped:
                body = gzip.compress(body, compresslevel=1)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            if gzipped:
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--plan", type=Path, required=True)
    args = parser.parse_args(argv)
    floor = Floor(json.loads(args.plan.read_text()))
    for name, rate in sorted(floor.skipped.items()):
        print(f"floor: not replayed: {name} ({rate:.2f} per GPU-poll)", file=sys.stderr)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    floor.poll()
    server = serve(floor, args.port)
    next_poll = time.monotonic() + args.interval
    while not stop.wait(max(0.0, next_poll - time.monotonic())):
        floor.poll()
        next_poll += args.interval
    server.shutdown()
    pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
