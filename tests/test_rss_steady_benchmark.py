"""The pure parts of the steady-state memory benchmark (benchmarks/rss_steady.py):
the line fits its slopes come from, the boards with fewer GPUs (as NVIDIA's
mock presents them), the simulated nodes with N MIG instances (as the
simulator reads them), and the summaries of its sample files. The
measurements themselves belong in BENCHMARKS.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.daemon_probe import MOCK_LIBRARY, board, mock_missing
from benchmarks.rss_steady import (
    NVITOP,
    OURS,
    gpus_seen,
    growth_summary,
    least_squares,
    mig_scenario,
    mig_seen,
    read_records,
    steady_summary,
    subset_board,
    tail_slope_per_hour,
)
from gpu_exporter.simulator import load_scenario

MISSING = mock_missing()
needs_mock = pytest.mark.skipif(
    MISSING is not None,
    reason=f"NVIDIA's mock NVML is absent: {(MISSING or '').partition(chr(10))[0]}")


def test_least_squares_matches_a_fit_done_by_hand() -> None:
    # Points (0, 1), (1, 3), (2, 4), (3, 8): mean x 1.5, mean y 4;
    # Sxy = (-1.5)(-3) + (-0.5)(-1) + (0.5)(0) + (1.5)(4) = 11, Sxx = 5.
    slope, intercept = least_squares([0, 1, 2, 3], [1, 3, 4, 8])
    assert slope == pytest.approx(2.2)
    assert intercept == pytest.approx(4 - 2.2 * 1.5)


def test_least_squares_refuses_what_has_no_line() -> None:
    with pytest.raises(ValueError):
        least_squares([1], [2])
    with pytest.raises(ValueError):
        least_squares([2, 2, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        least_squares([1, 2], [1, 2, 3])


def test_the_tail_slope_sees_only_the_last_window() -> None:
    # Climbing 1 MiB a minute for 20 minutes, then flat for 10: the start-up
    # climb must not leak into the steady slope.
    climb = [(t, 30 + t / 60) for t in range(0, 1200, 10)]
    flat = [(t, 50.0) for t in range(1200, 1810, 10)]
    assert tail_slope_per_hour(climb + flat, 600) == pytest.approx(0.0, abs=1e-9)
    # 1 MiB per 10 minutes throughout is 6 MiB an hour.
    leak = [(t, 40 + t / 600) for t in range(0, 1810, 10)]
    assert tail_slope_per_hour(leak, 600) == pytest.approx(6.0)


def test_a_smaller_board_keeps_its_first_devices_and_their_topology() -> None:
    doc = yaml.safe_load(board("h100").path.read_text())
    two = subset_board(doc, 2)
    assert [d["index"] for d in two["devices"]] == [0, 1]
    kept = [bdf for rc in two["pcie_topology"]["root_complexes"] for bdf in rc["devices"]]
    assert kept == [d["pci"]["bus_id"] for d in doc["devices"][:2]]
    # Everything else of the board stays: the same GPU, the same links.
    assert two["device_defaults"] == doc["device_defaults"]
    assert two["nvlink"] == doc["nvlink"]
    assert len(doc["devices"]) == 8  # the original is not changed
    for n in (0, 9):
        with pytest.raises(ValueError):
            subset_board(doc, n)


@needs_mock
@pytest.mark.parametrize("gpus", [1, 4])
def test_the_mock_presents_exactly_the_gpus_of_a_smaller_board(tmp_path: Path,
                                                                 gpus: int) -> None:
    base = board("h100")
    doc = yaml.safe_load(base.path.read_text())
    (tmp_path / MOCK_LIBRARY).symlink_to(base.path.parent.parent / MOCK_LIBRARY)
    config = tmp_path / "board.yaml"
    config.write_text(yaml.safe_dump(subset_board(doc, gpus)))
    probe = ("import json, pynvml as n\n"
             "n.nvmlInit()\n"
             "print(json.dumps([n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(i))\n"
             "                  for i in range(n.nvmlDeviceGetCount())]))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path),
                                           "MOCK_NVML_CONFIG": str(config)})
    assert done.returncode == 0, done.stderr[-2000:]
    uuids = json.loads(done.stdout.strip().splitlines()[-1])
    assert uuids == [d["uuid"] for d in doc["devices"][:gpus]]


@pytest.mark.parametrize("instances", [0, 5, 7, 8, 56])
def test_the_simulator_reads_a_node_with_that_many_mig_instances(tmp_path: Path,
                                                                   instances: int) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(mig_scenario(instances)))
    scenario = load_scenario(str(path))
    per_gpu = {g: len(s.mig_instances) for g, s in scenario.gpus.items() if s.mig_instances}
    assert sum(per_gpu.values()) == instances
    assert all(n <= 7 for n in per_gpu.values())  # an H100 holds seven 1g.10gb
    assert scenario.node.gpus == 8
    assert not scenario.processes


def test_too_many_instances_for_the_node_is_refused() -> None:
    with pytest.raises(ValueError):
        mig_scenario(57)
    with pytest.raises(ValueError):
        mig_scenario(-1)


def test_gpus_and_mig_instances_are_counted_once_each_from_an_exposition() -> None:
    body = (b'gpu_temp{gpu="0",uuid="GPU-aa-01"} 40\n'
            b'gpu_power{gpu="0",uuid="GPU-aa-01"} 100\n'
            b'gpu_temp{gpu="1",uuid="GPU-aa-02"} 41\n'
            b'mig_mem{gpu="1",uuid="GPU-aa-02",mig_uuid="MIG-bb-01"} 1\n'
            b'mig_mem{gpu="1",uuid="GPU-aa-02",mig_uuid="MIG-bb-02"} 1\n')
    assert gpus_seen(body) == 2
    assert mig_seen(body) == 2


def test_the_summaries_read_a_sample_file(tmp_path: Path) -> None:
    lines = [{"phase": "steady", "gpus": 8, "event": "start"}]
    for t in range(0, 1810, 10):
        # ours climbs for 5 minutes then holds; nvitop-exporter leaks 2 MiB/h.
        lines.append({"phase": "steady", "gpus": 8, "t": float(t),
                      "rss": {OURS: 30 + min(t, 300) / 100, NVITOP: 40 + t / 1800}})
    for gpus, ours, theirs in ((1, 30.0, 40.0), (2, 30.5, 41.0), (4, 31.5, 43.0)):
        for t in range(0, 190, 10):
            # One outlier early in each run: only the last minute's median counts.
            bump = 5.0 if t == 60 else 0.0
            lines.append({"phase": "per-gpu", "gpus": gpus, "t": float(t),
                          "rss": {OURS: ours + bump, NVITOP: theirs}})
    path = tmp_path / "samples.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    records = read_records([path])
    steady = steady_summary(records)
    assert steady[OURS]["rss_mib"] == pytest.approx(33.0)
    assert steady[OURS]["slope_mib_per_h"] == pytest.approx(0.0, abs=1e-9)
    assert steady[NVITOP]["slope_mib_per_h"] == pytest.approx(2.0)
    assert steady[OURS]["minutes"] == pytest.approx(30.0)
    # nvitop-exporter's last 10 minutes: 40 + 1200/1800 .. 40 + 1800/1800.
    assert steady[NVITOP]["window_median_mib"] == pytest.approx(40 + 1500 / 1800)
    assert steady[NVITOP]["window_min_mib"] == pytest.approx(40 + 1200 / 1800)
    assert steady[NVITOP]["window_max_mib"] == pytest.approx(41.0)
    ends, fits = growth_summary(records)
    assert ends[OURS] == {1: 30.0, 2: 30.5, 4: 31.5}
    assert fits[OURS][0] == pytest.approx(0.5)
    assert fits[NVITOP][0] == pytest.approx(1.0)
    assert growth_summary(records, "per-mig", "instances") == ({OURS: {}, NVITOP: {}}, {})
