"""The side by side of the shipped daemons (benchmarks/shipped.py) runs end to
end on NVIDIA's mock NVML and fills every column; the call counter agrees
with a library that counts its own calls; the mock's log is read as calls.
Numbers are asserted only where a wide margin makes them facts (a stop within
seconds, ours answering 32 scrapers faster than a server with a listen
backlog of 5); timing belongs in BENCHMARKS.md."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.daemon_probe import bursts, count_mock_calls, mock_call, mock_missing
from benchmarks.shipped import (
    BOARD_COLUMNS,
    FLOOR,
    HEADLINE_COLUMNS,
    NVITOP,
    NVITOP_SAME,
    OURS,
    SAME_COLUMNS,
)
from tests.procs import stop_bound_s

ROOT = Path(__file__).resolve().parent.parent
MISSING = mock_missing()
needs_mock = pytest.mark.skipif(
    MISSING is not None,
    reason=f"NVIDIA's mock NVML is absent: {(MISSING or '').partition(chr(10))[0]}")


def test_the_mocks_log_lines_are_read_as_one_call_each() -> None:
    # Lines as the mock writes them with MOCK_NVML_DEBUG=1.
    log = [
        "[NVML] nvmlDeviceGetHandleByIndex(0)",  # logged by its C bridge ...
        "[NVML] nvmlDeviceGetHandleByIndex(0)",  # ... and by its engine: one call
        "[NVML]   -> handle=0x55ff1c35d9d0 ret=0",
        "[NVML] nvmlDeviceGetFieldValues: field 251 scope 0 -> 3 (declined)",
        "[NVML] nvmlDeviceGetFieldValues(count=4) -> filled",
        "[NVML-STUB] nvmlDeviceGetSamples called (NOT IMPLEMENTED)",
        "[NVML] nvmlDeviceGetPowerUsage -> 72000 mW",
        "[ENGINE] Initialized with 8 devices (8 visible)",
        "ts=2026-11-26T03:29:06.101Z level=info msg=\"listening\"",
    ]
    calls = [(0.0, name) for name in map(mock_call, log) if name is not None]
    assert count_mock_calls(calls) == {
        "nvmlDeviceGetHandleByIndex": 1, "nvmlDeviceGetFieldValues": 1,
        "nvmlDeviceGetSamples": 1, "nvmlDeviceGetPowerUsage": 1}


def test_calls_with_pauses_between_them_are_separate_polls() -> None:
    times = [0.0, 0.01, 0.02, 1.0, 1.05, 2.0, 2.3, 2.31]
    assert bursts(times, gap_s=0.35) == [(0.0, 0.02), (1.0, 1.05), (2.0, 2.31)]


COUNT = """
import json, sys
from benchmarks import nvml_calls
counter = nvml_calls.install()
nvml_calls.install()  # a second install must not count twice
from gpu_exporter.settings.config import Settings
from gpu_exporter.daemon.exporter import Exporter
from gpu_exporter.simulator import SimulatedNode, load_scenario
node = SimulatedNode(load_scenario("healthy"))
exporter = Exporter(Settings(web={"listen_address": "127.0.0.1:0"}), node, synchronous=True)
for _ in range(3):
    exporter.poller.poll()
print(json.dumps({"counted": dict(counter), "library": dict(node.library.calls)}))
exporter.stop()
"""


def test_the_call_counter_agrees_with_a_library_that_counts_its_own_calls() -> None:
    """Every C call the exporter made (pynvml's wrappers and its own reads of
    field values, samples and GPM through function pointers) counted once:
    the simulated library's own per-function counter is the reference."""
    proc = subprocess.run([sys.executable, "-c", COUNT], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    library = {k: v for k, v in got["library"].items() if v}
    assert got["counted"] == library
    assert got["counted"]["nvmlDeviceGetFieldValues"] > 0  # a function-pointer read


def test_without_the_mock_it_says_how_to_get_it_and_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.shipped", "--boards", "t4", "--output", "-"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "GPU_EXPORTER_MOCKNVML": str(tmp_path / "nowhere")})
    assert proc.returncode == 2
    assert "NVIDIA/k8s-test-infra" in proc.stderr and "GPU_EXPORTER_MOCKNVML" in proc.stderr
    assert "Traceback" not in proc.stderr


@needs_mock
def test_the_side_by_side_on_the_mock_fills_every_column(tmp_path: Path) -> None:
    report, raw = tmp_path / "BENCHMARKS.md", tmp_path / "shipped.json"
    report.write_text("# Benchmarks\n\nhand-written text stays\n")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.shipped", "--boards", "t4", "--warmup", "2",
         "--window", "12", "--calls-window", "6", "--single", "3", "--rounds", "1",
         "--output", str(report), "--json", str(raw)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = json.loads(raw.read_text())
    assert run["board"] == "t4" and run["gpus"] == 4
    results = run["results"]
    for name in (OURS, NVITOP):
        r = results[name]
        assert r["error"] == ""
        assert r["cpu_ms_per_s"] > 0, name
        assert 10 < r["rss_mib"] <= r["rss_peak_mib"] < 1000, name
        for latency in ("p50_1_ms", "p99_1_ms", "p50_32_ms", "p99_32_ms"):
            assert 0 < r[latency] < 60_000, (name, latency)
        assert r["series"] > 0 and r["series_per_gpu"] == r["series"] / 4
        assert 0 < r["stop_ms"] < 1000 * stop_bound_s(), name
        assert r["polls"] >= 2, name
        assert r["calls_per_gpu_poll"] > 0 and r["logged_per_gpu_poll"] > 0, name
        assert math.isclose(sum(r["calls_by_function"].values()), r["calls_per_gpu_poll"])
    # The Xid event set is drained once a poll (nothing is pending on the mock).
    assert math.isclose(results[OURS]["calls_by_function"]["nvmlEventSetWait_v2"], 1 / 4)
    ours, peer = results[OURS], results[NVITOP]
    # Ours handles SIGTERM and exits 0; nvitop-exporter leaves it to the default action.
    assert (ours["stop_status"], peer["stop_status"]) == (0, -15)
    # Its own poll counter and the bursts of the mock's log agree on the polls.
    assert abs(ours["polls_counter"] - ours["polls"]) <= 1
    # nvitop-exporter's WSGI server keeps a listen backlog of 5: 32 scrapers at
    # once wait for retried connects (about a second); ours has no such queue.
    assert ours["p99_32_ms"] < peer["p99_32_ms"]

    # At one interval, beside the floor: both polled every 2 s, CPU measured in
    # the same window, and the floor replays every C function ours called,
    # with as many fields per field-values call and as many series.
    assert ours["fields_per_call"] >= 1
    for name in (NVITOP_SAME, FLOOR):
        r = results[name]
        assert r["error"] == "" and r["interval_s"] == ours["interval_s"], name
        # CPU is counted in 10 ms ticks: the floor's few milliseconds in a
        # short window may be none (the benchmark's window is 120 s).
        assert r["cpu_ms_per_s"] >= 0 and 10 < r["rss_mib"] < 1000, name
    assert results[FLOOR]["not_replayed"] == ""
    assert abs(results[FLOOR]["series"] - ours["series"]) <= 4  # whole lines per GPU

    text = report.read_text()
    assert "| " + " | ".join(SAME_COLUMNS) + " |" in text
    assert "hand-written text stays" in text
    lines = text.splitlines()
    headline = lines[lines.index("| " + " | ".join(HEADLINE_COLUMNS) + " |"):]
    measures = [line.split(" | ")[0].lstrip("| ") for line in headline[2:12]]
    assert measures == ["poll interval (default)", "CPU ms/s (process, scraped every 15 s)",
                        "RSS MiB", "RSS peak MiB (after the scrape bursts)",
                        "/metrics p99, 1 scraper, ms", "/metrics p99, 32 scrapers, ms",
                        "series (per GPU)", "SIGTERM to exit, ms",
                        "NVML calls per GPU-poll (C calls counted)",
                        "NVML calls per GPU-poll (the mock's log)"]
    rows = [line for line in lines if line.startswith("| t4 |")]
    assert len(rows) == 2
    for row in rows:
        cells = row.strip("|").split(" | ")
        assert len(cells) == len(BOARD_COLUMNS)
        assert "n/a" not in row and "failed" not in row, row
    assert "Load average" in text and "Machine:" in text and "Run: `python -m" in text
