"""benchmarks/stage_cost.py on NVIDIA's mock: the daemon's threads running,
its polls at their own pace, each stage's CPU inside the poll's and the
poll's inside the process'."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.daemon_probe import mock_missing

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(mock_missing() is not None, reason=mock_missing() or "")
def test_each_stage_is_inside_the_poll_and_the_poll_inside_the_process() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.stage_cost", "--seconds", "4",
                           "--interval", "1s", "--warm-up", "8"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "MOCK_NVML_CONFIG"},
                          check=False)
    assert done.returncode == 0, done.stderr
    head, *stages = done.stdout.splitlines()
    found = re.fullmatch(r"h100: (\d+) polls at 1s: process ([\d.]+) ms CPU per poll, "
                         r"inside the poll ([\d.]+) ms", head)
    assert found, head
    polls, process, poll = int(found[1]), float(found[2]), float(found[3])
    assert 3 <= polls <= 6  # 4 s at 1 s, at its own pace: not back to back
    spent = {name: float(ms) for name, ms, _unit in (line.split() for line in stages)}
    assert {"device", "nvlink", "diagnosis", "host"} <= spent.keys()
    assert all(ms > 0 for ms in spent.values())
    # Each stage runs inside the poll, the poll inside the process (whose
    # CPU is counted in clock ticks: up to one 10 ms tick off, over the polls).
    assert sum(spent.values()) <= poll * 1.01
    assert poll <= process + 10.0 / polls


@pytest.mark.skipif(mock_missing() is not None, reason=mock_missing() or "")
def test_with_nvml_each_stage_says_its_share_in_the_c_calls_and_the_floor_runs_after() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.stage_cost", "--seconds", "4",
                           "--interval", "1s", "--warm-up", "8",
                           "--nvml"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={k: v for k, v in os.environ.items()
                                                      if k != "MOCK_NVML_CONFIG"}, check=False)
    assert done.returncode == 0, done.stderr
    head, *stages, floor = done.stdout.splitlines()
    found = re.fullmatch(r"h100: \d+ polls at 1s: process [\d.]+ ms CPU per poll, "
                         r"inside the poll ([\d.]+) ms \(in NVML ([\d.]+) ms\)", head)
    assert found, head
    assert 0 < float(found[2]) < float(found[1])
    shares = {}
    for line in stages:
        name, ms, _, _in, _nvml, in_ms, _ = line.split()
        shares[name] = (float(ms), float(in_ms))
    # Only the device reader makes the GPUs' field-values call and the bulk of
    # the others; every stage's time in NVML is inside its own.
    assert shares["device"][1] > 0
    assert all(in_ms <= ms for ms, in_ms in shares.values())
    assert shares["diagnosis"][1] == 0.0 and shares["host"][1] == 0.0
    found = re.fullmatch(r"floor: (\d+) polls at 1s: ([\d.]+) ms CPU per poll "
                         r"\(in NVML ([\d.]+) ms\)", floor)
    assert found, floor  # every C function the daemon called, replayed
    assert int(found[1]) >= 3 and 0 < float(found[3]) < float(found[2])
