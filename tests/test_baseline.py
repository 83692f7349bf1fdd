"""The node baseline: capture on a node, diff the same node (no drift) and a
changed one (each drift named), and the daemon's gpu_baseline_drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_exporter.baseline import DRIFTS, FIELDS
from tests.procs import run_cli
from tests.simnode import SimRun


@pytest.fixture(scope="module")
def healthy_baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("baseline") / "node-baseline.json"
    result = run_cli(["baseline", "capture", "--simulate", "healthy", "--out", str(path)])
    assert result.returncode == 0, result.stderr
    assert "wrote the baseline of 8 GPU(s)" in result.stdout
    return path


def test_capture_records_what_should_not_change(healthy_baseline: Path) -> None:
    data = json.loads(healthy_baseline.read_text())
    assert data["gpu_count"] == 8
    gpu3 = data["gpus"][3]
    assert gpu3["pcie_width_under_load"] == 16 and gpu3["pcie_generation_max"] == 5
    assert gpu3["driver_version"] == "580.159.04"
    assert gpu3["power_limit_watts"] == 700.0
    assert set(FIELDS) <= set(gpu3)


@pytest.mark.parametrize("scenario", ["healthy", "idle"])
def test_diff_of_an_unchanged_node_reports_no_drift(healthy_baseline: Path,
                                                    scenario: str) -> None:
    # Idle links downshift: the trained width is compared only under load.
    result = run_cli(["baseline", "diff", "--simulate", scenario, "--baseline",
                      str(healthy_baseline)])
    assert result.returncode == 0, result.stdout
    assert "no drift" in result.stdout


def test_diff_on_pcie_downtrained_reports_the_width_drift(healthy_baseline: Path) -> None:
    result = run_cli(["baseline", "diff", "--simulate", "pcie-downtrained", "--baseline",
                      str(healthy_baseline), "--json"])
    assert result.returncode == 1
    drifts = json.loads(result.stdout)["drifts"]
    assert [(d["gpu"], d["field"], d["expected"], d["found"]) for d in drifts] == [
        ("3", "pcie_width_under_load", 16, 8)]


def test_daemon_exports_drift_per_gpu_and_field(healthy_baseline: Path) -> None:
    with SimRun("power-capped", baseline_file=str(healthy_baseline)) as run:
        snap = run.poll(3)
    series = snap.series("gpu_baseline_drift")
    assert len(series) == 8 * len(FIELDS)
    on = [(lab["gpu"], lab["field"]) for lab, v in series if v == 1.0]
    assert on == [("2", "power_limit_watts")]
    assert (snap.derived(DRIFTS) or ())[0].found == 450.0


def test_diagnose_lists_the_drifts(healthy_baseline: Path) -> None:
    result = run_cli(["diagnose", "--simulate", "pcie-downtrained", "--baseline.file",
                      str(healthy_baseline)])
    assert "Drift from the node baseline:" in result.stdout
    assert "GPU 3 pcie_width_under_load: expected 16, found 8" in result.stdout


@pytest.mark.parametrize("content,expected", [
    ("not json", "not JSON"),
    ('{"format": "something-else", "gpus": []}', "not a gpu-exporter baseline"),
    ('{"format": "gpu-exporter-baseline/1", "gpus": [{"uuid": "x"}]}',
     "gpus.0.index: Field required"),
    ('{"format": "gpu-exporter-baseline/1", "gpus": [{"index": 0, "power_limit_watts": NaN}]}',
     "NaN is not a JSON number"),
    ('{"format": "gpu-exporter-baseline/1", "gpus": [{"index": "0"}]}',
     "gpus.0.index: Input should be a valid integer (got '0')"),
    ('{"format": "gpu-exporter-baseline/1", "gpus": [{"index": 0}, {"index": 0}]}',
     "a GPU index appears twice"),
    ('{"format": "gpu-exporter-baseline/1", "gpus": []}\n\udcff',
     "line 2, column 1: not UTF-8 text (byte 0xff)"),
    ("[" * 100_000, "nested deeper than 16 levels"),
])
def test_bad_baseline_file_exits_2_with_one_line(tmp_path: Path, content: str,
                                                 expected: str) -> None:
    path = tmp_path / "b.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))  # "\udcff": the byte 0xff
    for args in (["baseline", "diff", "--simulate", "healthy", "--baseline", str(path)],
                 ["--simulate", "healthy", "--baseline.file", str(path),
                  "--web.listen-address", "127.0.0.1:0"]):
        result = run_cli(args)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert expected in result.stderr.strip().splitlines()[-1]
