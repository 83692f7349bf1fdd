"""What the shipped daemon costs on this node's GPUs, in one short run (about
1.5 minutes, no network): ``gpu-exporter`` started as its users start it
(default flags, a free local port), under the NVML call counter
(``benchmarks/nvml_calls.py``: pynvml's function look-up wrapped; nothing of
it is in the daemon), measured from outside:

* CPU ms per GPU-poll: the process's utime + stime (/proc, every thread) over
  a window of whole polls, divided by GPUs x polls (its own poll counter);
* NVML calls per GPU-poll, per C function (the poll's drain of the Xid event
  set included: one nvmlEventSetWait_v2 per poll, more when events wait);
* RSS (VmRSS) and its peak (VmHWM);
* each collector's wall time in the last poll (gpu_exporter_collector_duration_seconds);
* SIGTERM to exit.

    .venv/bin/python -m benchmarks.poll_on_gpu                   # on the node's GPUs
    .venv/bin/python -m benchmarks.poll_on_gpu --json gpu.json   # also write the JSON there
    LD_LIBRARY_PATH=../shared/nvidia-mocknvml \\
    MOCK_NVML_CONFIG=../shared/nvidia-mocknvml/configs/mock-nvml-config-h100.yaml \\
        .venv/bin/python -m benchmarks.poll_on_gpu               # on NVIDIA's mock NVML
    .venv/bin/python -m benchmarks.poll_on_gpu --simulate healthy

Prints one JSON object, then the same as Markdown tables. Exits 2 when no GPU
answers through NVML (the daemon up, gpu_exporter_nvml_up 0 or no GPU), 1 when
the daemon could not be started or measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import nvml_calls
from benchmarks.daemon_probe import Daemon, free_port, get, machine, samples
from benchmarks.run import md_table
from gpu_exporter.facts.cadence import DEFAULT_POLL_INTERVAL_S

# Covers the slow reads (every 10 polls at the 2 s default) and the first
# reads of every sample buffer.
WARMUP_S = 25.0
WINDOW_S = 60.0
COUNT_EVERY_S = 0.1
# After a poll ended, how long to wait for the counter's next line (written
# every COUNT_EVERY_S) while the daemon is between two polls.
SETTLE_S = 0.3


def _metrics(d: Daemon) -> bytes:
    status, body = get(d.port)
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    return body


def _value(body: bytes, name: str) -> float | None:
    found = samples(body, name)
    return found[0][1] if found else None


def _after_a_poll(d: Daemon, timeout: float, not_before: float = 0.0) -> tuple[int, float]:
    """Wait until a poll has just ended; (polls so far, a moment between that
    poll and the next one at which the call counter has written a line). It
    watches the poll counter from ``not_before`` on (a few scrapes: their CPU
    falls in the measured window)."""
    time.sleep(max(0.0, not_before - time.monotonic()))
    first = _value(_metrics(d), "gpu_exporter_polls_total")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = _value(_metrics(d), "gpu_exporter_polls_total")
        if now is not None and now != first:
            time.sleep(SETTLE_S)
            return int(now), time.monotonic()
    raise RuntimeError(f"no poll ended within {timeout:.0f} s")


def _counts_at(path: Path, t: float) -> dict[str, int]:
    lines = [(at, counts) for at, counts in nvml_calls.read_log(path) if at <= t]
    if not lines:
        raise RuntimeError("the call counter wrote nothing")
    return lines[-1][1]


def measure(warmup_s: float, window_s: float, simulate: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="poll-on-gpu-") as tmp:
        counted = Path(tmp) / "calls.jsonl"
        port = free_port()
        flags = ["--web.listen-address", f"127.0.0.1:{port}"]
        if simulate:
            flags += ["--simulate", simulate]
        d = Daemon("gpu_exporter", [sys.executable, "-m", "benchmarks.nvml_calls", str(counted),
                                    "--every", str(COUNT_EVERY_S), "--", "gpu-exporter",
                                    *flags], port, {})
        try:
            d.wait_ready()
            time.sleep(2.0)  # the first poll
            body = _metrics(d)
            gpus = len(samples(body, "gpu_info"))
            if not _value(body, "gpu_exporter_nvml_up") or gpus == 0:
                return {"error": "no GPU answered through NVML on this node", "gpus": gpus}
            interval = DEFAULT_POLL_INTERVAL_S
            time.sleep(warmup_s)
            polls0, t0 = _after_a_poll(d, 4 * interval + 10)
            cpu0 = d.cpu_s()
            # Polls run on a fixed schedule: the window's last one ends about
            # a whole number of intervals after the first.
            whole = max(1, round(window_s / interval)) * interval
            polls1, t1 = _after_a_poll(d, 4 * interval + 10,
                                       not_before=t0 + whole - SETTLE_S - 0.25 * interval)
            cpu1 = d.cpu_s()
            body = _metrics(d)
            rss, peak = d.memory_mib()
            made = nvml_calls.difference(_counts_at(counted, t0), _counts_at(counted, t1))
            stop_s, status = d.stop()
        finally:
            d.kill()
    polls = polls1 - polls0
    per = gpus * polls
    collectors = {labels.split('"')[1]: value * 1e3 for labels, value in
                  samples(body, "gpu_exporter_collector_duration_seconds")}
    return {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "driver": _label(body, "gpu_exporter_nvml_driver_info", "driver_version"),
        "gpu": _label(body, "gpu_info", "name"),
        "gpus": gpus,
        "polls": polls,
        "window_s": round(t1 - t0, 3),
        "poll_interval_s": round((t1 - t0) / polls, 3) if polls else None,
        "cpu_ms_per_gpu_poll": (cpu1 - cpu0) * 1e3 / per if per else None,
        "cpu_ms_per_s": (cpu1 - cpu0) * 1e3 / (t1 - t0),
        "nvml_calls_per_gpu_poll": sum(made.values()) / per if per else None,
        "nvml_calls_by_function": {k: v / per for k, v in sorted(made.items())} if per else {},
        "rss_mib": round(rss, 1),
        "rss_peak_mib": round(peak, 1),
        "collector_ms_last_poll": dict(sorted(collectors.items(), key=lambda kv: -kv[1])),
        "stop_ms": round(stop_s * 1e3, 1),
        "stop_status": status,
    }


def _label(body: bytes, name: str, key: str) -> str:
    """The value of label ``key`` of the first sample of ``name``."""
    for labels, _ in samples(body, name):
        for part in labels.strip("{}").split('",'):
            label, _, value = part.partition('="')
            if label == key:
                return value.rstrip('"')
    return ""


def markdown(result: dict[str, Any]) -> str:
    def num(key: str, digits: int = 2) -> str:
        value = result.get(key)
        return "n/a" if value is None else f"{value:.{digits}f}"

    head = [
        ["GPU", f"{result['gpus']}x {result['gpu']}, driver {result['driver']}"],
        ["polls measured", f"{result['polls']} in {result['window_s']:.0f} s "
                           f"({num('poll_interval_s')} s apart)"],
        ["CPU ms per GPU-poll (process CPU / (GPUs x polls))", num("cpu_ms_per_gpu_poll")],
        ["CPU ms per second", num("cpu_ms_per_s")],
        ["NVML calls per GPU-poll", num("nvml_calls_per_gpu_poll", 1)],
        ["RSS MiB (peak)", f"{num('rss_mib', 1)} ({num('rss_peak_mib', 1)})"],
        ["SIGTERM to exit, ms", f"{num('stop_ms', 0)} (status {result['stop_status']})"],
    ]
    calls = [[f"`{k}`", f"{v:.2f}"] for k, v in
             sorted(result["nvml_calls_by_function"].items(), key=lambda kv: -kv[1])]
    collectors = [[k, f"{v:.2f}"] for k, v in result["collector_ms_last_poll"].items()]
    return "\n\n".join([
        f"`gpu-exporter` on {result['machine']}, {result['date']}",
        md_table(head, ["measure", "value"]),
        md_table(calls, ["NVML function", "calls per GPU-poll"]),
        md_table(collectors, ["collector", "wall ms, last poll"]),
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warmup", type=float, default=WARMUP_S,
                        help=f"seconds before measuring (default {WARMUP_S:g})")
    parser.add_argument("--window", type=float, default=WINDOW_S,
                        help=f"seconds measured (default {WINDOW_S:g})")
    parser.add_argument("--simulate", metavar="SCENARIO",
                        help="on a simulated node instead (to try the script)")
    parser.add_argument("--json", type=Path, help="also write the JSON object here")
    args = parser.parse_args(argv)
    try:
        result = measure(args.warmup, args.window, args.simulate)
    except (RuntimeError, OSError) as exc:
        print(f"poll_on_gpu: {exc}", file=sys.stderr)
        return 1
    if "error" in result:
        print(f"poll_on_gpu: {result['error']} (try --simulate NAME)", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1)
    print(text)
    print()
    print(markdown(result))
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
