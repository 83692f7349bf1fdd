"""Measure what each NVML call the exporter makes costs on this machine's real
GPUs, to replace the estimates in gpu_exporter/simulator/latency.py.

    .venv/bin/python -m benchmarks.measure_nvml            # needs a GPU and its driver
    .venv/bin/python -m benchmarks.measure_nvml --simulate # the same on a simulated node

Prints a Markdown table: C function, median and p90 microseconds per call
(wall), and CPU microseconds per call (user + system: an ioctl's kernel time
counts here, which is what the node pays).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import pynvml

from gpu_exporter.simulator.latency import COSTS


def calls(h: Any) -> dict[str, Callable[[], object]]:
    n = pynvml
    return {
        "nvmlDeviceGetUtilizationRates": lambda: n.nvmlDeviceGetUtilizationRates(h),
        "nvmlDeviceGetMemoryInfo_v2": lambda: n.nvmlDeviceGetMemoryInfo(h, n.nvmlMemory_v2),
        "nvmlDeviceGetTemperature": lambda: n.nvmlDeviceGetTemperature(h, 0),
        "nvmlDeviceGetPowerUsage": lambda: n.nvmlDeviceGetPowerUsage(h),
        "nvmlDeviceGetEnforcedPowerLimit": lambda: n.nvmlDeviceGetEnforcedPowerLimit(h),
        "nvmlDeviceGetTotalEnergyConsumption": lambda: n.nvmlDeviceGetTotalEnergyConsumption(h),
        "nvmlDeviceGetClockInfo": lambda: n.nvmlDeviceGetClockInfo(h, 1),
        "nvmlDeviceGetApplicationsClock": lambda: n.nvmlDeviceGetApplicationsClock(h, 1),
        "nvmlDeviceGetPerformanceState": lambda: n.nvmlDeviceGetPerformanceState(h),
        "nvmlDeviceGetCurrentClocksEventReasons":
            lambda: n.nvmlDeviceGetCurrentClocksEventReasons(h),
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda: n.nvmlDeviceGetCurrPcieLinkGeneration(h),
        "nvmlDeviceGetCurrPcieLinkWidth": lambda: n.nvmlDeviceGetCurrPcieLinkWidth(h),
        "nvmlDeviceGetPcieReplayCounter": lambda: n.nvmlDeviceGetPcieReplayCounter(h),
        "nvmlDeviceGetEccMode": lambda: n.nvmlDeviceGetEccMode(h),
        "nvmlDeviceGetTotalEccErrors": lambda: n.nvmlDeviceGetTotalEccErrors(h, 0, 1),
        "nvmlDeviceGetRemappedRows": lambda: n.nvmlDeviceGetRemappedRows(h),
        "nvmlDeviceGetPersistenceMode": lambda: n.nvmlDeviceGetPersistenceMode(h),
        "nvmlDeviceGetFieldValues": lambda: n.nvmlDeviceGetFieldValues(h, [82, 90, 91]),
        "nvmlDeviceGetComputeRunningProcesses_v3":
            lambda: n.nvmlDeviceGetComputeRunningProcesses(h),
        "nvmlDeviceGetProcessUtilization": lambda: n.nvmlDeviceGetProcessUtilization(h, 0),
        "nvmlDeviceGetSamples": lambda: n.nvmlDeviceGetSamples(h, 1, 0),
        "nvmlDeviceGetSamples:0": lambda: n.nvmlDeviceGetSamples(h, 0, 0),  # power
        "nvmlDeviceGetMigMode": lambda: n.nvmlDeviceGetMigMode(h),
        "nvmlDeviceGetPcieThroughput": lambda: n.nvmlDeviceGetPcieThroughput(h, 0),
    }


# pynvml asks these for the size first, then for the data.
TWO_C_CALLS = {"nvmlDeviceGetProcessUtilization", "nvmlDeviceGetSamples",
               "nvmlDeviceGetSamples:0"}


def measure(fn: Callable[[], object], n: int) -> tuple[float, float, float] | None:
    wall: list[float] = []
    c0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        try:
            fn()
        except pynvml.NVMLError as exc:
            # NOT_FOUND (no samples, no process) is an answer and costs the
            # call; anything else on the first try means unsupported.
            if not wall and exc.value != pynvml.NVML_ERROR_NOT_FOUND:
                return None
        wall.append(time.perf_counter() - t0)
    cpu = (time.process_time() - c0) / n
    wall.sort()
    return statistics.median(wall) * 1e6, wall[int(0.9 * (len(wall) - 1))] * 1e6, cpu * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simulate", action="store_true", help="on a simulated H100 node")
    parser.add_argument("-n", type=int, default=200, help="calls per function")
    parser.add_argument("--gpu", type=int, default=0)
    args = parser.parse_args(argv)
    if args.simulate:
        from benchmarks.scenarios import Config, scenario
        from gpu_exporter.simulator import SimulatedNode

        SimulatedNode(scenario(Config(1, 8))).install()
    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
        name = pynvml.nvmlDeviceGetName(h)
        print(f"GPU {args.gpu}: {name}, driver {pynvml.nvmlSystemGetDriverVersion()}\n")
        print("| C function | median us | p90 us | CPU us | table us |")
        print("|---|---|---|---|---|")
        for fname, fn in calls(h).items():
            # The 20 ms PCIe throughput call: a few samples are enough.
            n = 5 if fname == "nvmlDeviceGetPcieThroughput" else args.n
            got = measure(fn, n)
            table = COSTS[fname].us if fname in COSTS else float("nan")
            if fname in TWO_C_CALLS:
                table *= 2  # the table is per C call; pynvml makes two a read
            if got is None:
                print(f"| {fname} | not supported | | | {table:g} |")
            else:
                print(f"| {fname} | {got[0]:.1f} | {got[1]:.1f} | {got[2]:.1f} | {table:g} |")
    finally:
        pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
