"""`gpu-exporter record` writes what every NVML call answered; `--simulate
recording.yaml` replays it: the same metric families and values."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.simulator import load_scenario
from tests.procs import run_cli
from tests.simnode import SimRun

# Not recorded: the sub-second sample buffers (and the busy time integrated
# from them), the host side, the exporter itself.
SKIP = ("gpu_exporter_", "gpu_utilization_samples", "gpu_power_samples",
        "gpu_sm_clock_samples", "gpu_busy_seconds", "gpu_host_", "gpu_process_", "gpu_pcie_aer",
        "gpu_numa")


def comparable(snap: Snapshot) -> dict[tuple[str, tuple[str, ...]], float]:
    out = {}
    for name, samples in snap.samples.items():
        if name.startswith(SKIP):
            continue
        for s in samples:
            out[(name, s.labels)] = s.value
    return out


@pytest.mark.parametrize("scenario", ["mixed", "mig-h100", "xid-79"])
def test_recording_replays_to_the_same_metrics(tmp_path: Path, scenario: str) -> None:
    out = tmp_path / "node.yaml"
    result = run_cli(["record", "--simulate", scenario, "--duration", "15s", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    assert "recorded 16 polls" in result.stdout
    recording = load_scenario(str(out))
    assert recording.replay is not None and len(recording.replay.polls) == 16

    # Who holds the GPUs (the kubelet, the workloads' cgroups) is the host
    # side, not recorded: both runs go without it, so the rows that need a
    # workload's own signals are unjudged alike and only NVML's side is compared.
    without_owners = {"collectors": {"attribution": False}}
    with SimRun(scenario, **without_owners) as run:
        original = comparable(run.poll(15))
    with SimRun(recording, **without_owners) as run:
        replayed = comparable(run.poll(15))
    assert set(replayed) == set(original)
    mismatched = {k: (original[k], replayed[k]) for k in original
                  if replayed[k] != pytest.approx(original[k], rel=1e-9, abs=1e-9)}
    assert not mismatched


def test_recording_keeps_error_codes(tmp_path: Path) -> None:
    scenario = tmp_path / "broken.yaml"
    scenario.write_text("name: broken\nnode: {gpus: 2, profile: rtx-4090}\n"
                        "state: {utilization: 0.9, errors: {nvmlDeviceGetTemperature: UNKNOWN}}\n")
    out = tmp_path / "node.yaml"
    assert run_cli(["record", "--simulate", str(scenario), "--duration", "3s", "--out",
                    str(out)]).returncode == 0
    text = out.read_text()
    assert "nvmlDeviceGetTemperature: UNKNOWN" in text
    assert "nvmlDeviceGetEccMode: NOT_SUPPORTED" in text
    with SimRun(load_scenario(str(out))) as run:
        snap = run.poll(3)
    assert [lab["sensor"] for lab, _ in snap.series("gpu_temperature_celsius")] == []
    assert not snap.series("gpu_ecc_enabled")
    assert snap.series("gpu_fan_speed_ratio")


def test_record_without_nvml_exits_2_with_one_line(tmp_path: Path) -> None:
    scenario = tmp_path / "nodriver.yaml"
    scenario.write_text("name: nodriver\nnode: {gpus: 1, nvml: driver_not_loaded}\n")
    result = run_cli(["record", "--simulate", str(scenario), "--duration", "2s", "--out",
                      str(tmp_path / "x.yaml")])
    assert result.returncode == 2
    assert "kernel driver is not loaded" in result.stderr.strip().splitlines()[-1]
