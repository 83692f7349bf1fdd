"""The daemon as shipped against every board file of NVIDIA's mock NVML: an NVML
nobody on this project wrote, loaded by the real code path, no simulator in
the process. For each board: it starts, every default family the board
supports is there with values in sane units, utilization is there, no reader
fails, and `gpu-exporter diagnose` answers with a verdict status.

What the board supports is read from NVIDIA's board file (NVLink links,
architecture, fabric); families that only appear on an event, a workload, a
kubelet, MIG or the host's PCI devices are named below with the reason they
are absent here, so a family that goes missing for any other reason fails.
Skipped, with the reason, where the mock is not beside the repository (see
benchmarks/daemon_probe.py for where it is looked for)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from benchmarks.daemon_probe import Board, Daemon, board, free_port, get, mock_boards, mock_missing
from gpu_exporter.collectors import board as board_words
from gpu_exporter.daemon import pipeline
from gpu_exporter.facts.cadence import DEFAULT_POLL_INTERVAL_S, SAMPLES_EVERY_S
from gpu_exporter.poll.catalog import BY_NAME, CATALOG

ROOT = Path(__file__).resolve().parent.parent
MISSING = mock_missing()
BOARDS = mock_boards() if MISSING is None else ["(none)"]
pytestmark = pytest.mark.skipif(
    MISSING is not None,
    reason=f"NVIDIA's mock NVML is absent: {(MISSING or '').partition(chr(10))[0]}")

# On every board, for every GPU.
EVERY_BOARD = (
    "gpu_up", "gpu_info", "gpu_power_watts", "gpu_power_limit_watts",
    "gpu_power_default_limit_watts", "gpu_energy_joules_total", "gpu_temperature_celsius",
    "gpu_temperature_threshold_celsius", "gpu_memory_used_bytes", "gpu_memory_total_bytes",
    "gpu_memory_reserved_bytes", "gpu_memory_controller_utilization_ratio", "gpu_clock_hertz",
    "gpu_clock_max_hertz", "gpu_performance_state", "gpu_throttle_reason_active",
    "gpu_throttle_seconds_total", "gpu_pcie_link_generation", "gpu_pcie_link_width",
    "gpu_pcie_link_generation_max", "gpu_pcie_link_width_max", "gpu_pcie_replays_total",
    "gpu_ecc_enabled", "gpu_ecc_errors_total", "gpu_remapped_rows_total",
    "gpu_persistence_mode_enabled", "gpu_mig_mode_enabled", "gpu_xid_errors_all_total",
)
# Utilization, from the sample buffer or (where NVML has no samples, as the
# mock) from the 1 s utilization rate: one of them for every GPU.
UTILIZATION = ("gpu_busy_seconds_total", "gpu_utilization_ratio")
NVLINK = ("gpu_nvlink_links", "gpu_nvlink_links_active", "gpu_nvlink_bytes_all_links_total",
          "gpu_nvlink_errors_all_links_total")
GPM = ("gpu_sm_active_seconds_total", "gpu_tensor_active_seconds_total",
       "gpu_dram_active_seconds_total", "gpu_sm_occupancy_ratio")
FABRIC = ("gpu_fabric_state",)
# The Grace C2C link's mode (GB200, GB300: the board file's nvlink.c2c_enabled).
C2C = ("gpu_c2c_enabled",)
# Power smoothing's switch: a field whose id means it from R580 on (the board
# file's driver_version); the mock answers it 0 (off) on every board.
SMOOTHING = ("gpu_power_smoothing_enabled",)
# NVLink 5's FEC counts and bit-error rates: fields of R565 and newer (NVML's
# change log), asked on a GPU with NVLink links; the mock answers them there.
FEC = ("gpu_nvlink_fec_errors_all_links_total", "gpu_nvlink_bit_error_rate_worst_link")
# The coverage's words for the readings only a Grace superchip has, and for
# those only a Blackwell board has (nvml.h: power smoothing and the platform
# info "For Blackwell or newer"; the FEC counts are NVLink 5's).
GRACE_ONLY = ("the Grace C2C link", "C2C link errors")
BLACKWELL_ONLY = ("power smoothing", "the power-smoothing floor", "the rack location",
                  board_words.FEC_WORDS)
# Default families absent here by nature, not by failure.
ABSENT_HERE = {
    "gpu_xid_errors_total": "per Xid code: appears at a GPU's first Xid",
    "gpu_events_total": "appears at the first ECC or power-source event",
    "gpu_nvswitch_sxid_errors_total": "per switch and SXid code: appears at the first SXid",
    "gpu_owner_sm_share_ratio": "only on a GPU with more than one owner",
    "gpu_fan_speed_ratio": "data-center boards have no fans (nvmlDeviceGetNumFans 0)",
    "gpu_pcie_bytes_total": "the mock declines the PCIe byte-counter fields",
    "gpu_recovery_action": "a field of drivers 570 and newer; the mock's drivers are older",
    "gpu_numa_info": "read from the GPU's PCI device in /sys, which this host does not have",
    "gpu_pcie_aer_errors_total": "read from the GPU's PCI device in /sys",
    "gpu_diagnosis_active": "a finding's series: an idle board has none",
    "gpu_diagnosis_input_missing": "only while a reader's input is missing",
    "gpu_baseline_drift": "only with --baseline.file",
    "gpu_c2c_links": "the mock answers the C2C link fields NOT_SUPPORTED",
    "gpu_c2c_errors_total": "the mock answers the C2C error fields NOT_SUPPORTED",
    "gpu_repair_pending": "the mock answers nvmlDeviceGetRepairStatus NOT_SUPPORTED",
    "gpu_unrepairable_memory": "the mock answers the unrepairable-memory flag NOT_SUPPORTED",
    "gpu_power_floor_watts": "only while power smoothing is on (the mock says it is off)",
    "gpu_fabric_health_issue": "the mock's fabric reports no health-mask flag",
}
ABSENT_PREFIXES = {
    "gpu_mig_": "only with MIG instances",
    "gpu_process_": "only with GPU processes (the mock lists none)",
    "gpu_allocation_info": "only with a kubelet",
    "gpu_job_info": "only with Slurm jobs",
    "gpu_workload_": "only with a kubelet or Slurm job",
    "gpu_nic_": "per physical NIC (a test host's interfaces are virtual, left out) or NIC "
                "driver line in the kernel log",
    "gpu_rdma_": "per RDMA port: a test host has none",
    "gpu_network_devices_left_out": "only past the bound of NICs and RDMA devices",
    "gpu_host_cpu_thermal_": "only on CPUs that keep thermal throttle counters (a virtual "
                             "machine's keep none)",
}


def _capabilities(b: Board) -> set[str]:
    doc = yaml.safe_load(b.path.read_text())
    defaults = doc.get("device_defaults") or {}
    nvlink = doc.get("nvlink") or {}
    found = set()
    if nvlink.get("links_per_gpu") and (nvlink.get("switches") or any(
            (d or {}).get("nvlink") for d in doc.get("devices") or [])):
        found.add("nvlink")
    if str(defaults.get("architecture", "")).lower() in ("hopper", "blackwell"):
        found.add("gpm")
    if defaults.get("fabric"):
        found.add("fabric")
    if nvlink.get("c2c_enabled"):
        found.add("c2c")
    driver = str((doc.get("system") or {}).get("driver_version", "0"))
    if int(driver.partition(".")[0]) >= 580:
        found.add("smoothing")
    if "nvlink" in found and int(driver.partition(".")[0]) >= board_words.FEC_SINCE:
        found.add("fec")
    if str(defaults.get("architecture", "")).lower() == "blackwell":
        found.add("blackwell")
    return found


_OPTIONAL = (("nvlink", NVLINK), ("gpm", GPM), ("fabric", FABRIC), ("c2c", C2C),
             ("smoothing", SMOOTHING), ("fec", FEC))


def _families(body: bytes) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for line in body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        pairs = {}
        for part in labels.rstrip("}").split('",') if labels else ():
            key, _, text = part.partition('="')
            pairs[key] = text.rstrip('"')
        out[name].append((pairs, float(value)))
    return out


def _in_range(name: str, value: float, memory_bytes: int) -> bool:
    if math.isnan(value) or math.isinf(value):
        return False
    if name.endswith("_watts"):
        return 0 <= value < 2000
    if name.endswith("_celsius"):
        return 0 <= value <= 120
    if name.startswith("gpu_memory_") and name.endswith("_bytes"):
        return 0 <= value <= memory_bytes
    if name.endswith("_ratio"):
        return 0 <= value <= 1
    if name.endswith("_hertz"):
        # GDDR boards report memory clocks near 10 GHz (the L40S board: 10,001 MHz).
        return 0 < value < 20e9
    if name == "gpu_pcie_link_generation" or name == "gpu_pcie_link_generation_max":
        return 1 <= value <= 6
    if name == "gpu_pcie_link_width" or name == "gpu_pcie_link_width_max":
        return 1 <= value <= 32
    return value >= 0  # counters, states, info series


# Polls until every reader has read twice: GPM's rates need two samples, taken
# every SAMPLES_EVERY_S.
POLLS = 2 + math.ceil(SAMPLES_EVERY_S / DEFAULT_POLL_INTERVAL_S)


def _polled_enough(d: Daemon, timeout: float = 60.0) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        _, body = get(d.port)
        polls = _families(body).get("gpu_exporter_polls_total")
        if polls and polls[0][1] >= POLLS:
            return body
        assert time.monotonic() < deadline, d.stderr_tail()
        time.sleep(0.2)


def _lists_only_what_the_board_could_offer(
        capabilities: set[str], families: dict[str, list[tuple[dict[str, str], float]]],
        answer: dict[str, object], gpus: set[str]) -> None:
    """The coverage's not-available readings name nothing a board of this
    class could never offer, and do name what it could and did not."""
    coverage = answer["coverage"]
    assert isinstance(coverage, dict)
    listed: dict[str, set[str]] = defaultdict(set)
    for group in coverage["not_available"]:
        for reading in group.get("readings") or ():
            listed[reading] |= set(group["gpus"])
    if "c2c" not in capabilities:
        assert not set(GRACE_ONLY) & set(listed), sorted(listed)
    if "blackwell" not in capabilities:
        assert not set(BLACKWELL_ONLY) & set(listed), sorted(listed)
    # A Grace board whose C2C counts the mock does not answer lists them, on every GPU.
    if "c2c" in capabilities and "gpu_c2c_errors_total" not in families:
        assert listed["C2C link errors"] == gpus
    # The FEC counts: exported, or listed where a board of the class could have them.
    fec_absent = not set(FEC) & set(families)
    could = {"blackwell", "fec"} <= capabilities
    assert (board_words.FEC_WORDS in listed) == (could and fec_absent), sorted(listed)


@pytest.mark.parametrize("name", BOARDS)
def test_the_daemon_on_each_board_of_nvidias_mock(name: str) -> None:
    b = board(name)
    port = free_port()
    d = Daemon("gpu-exporter", [sys.executable, "-m", "gpu_exporter", "--web.listen-address",
                                f"127.0.0.1:{port}"], port, b.env())
    try:
        d.wait_ready()
        body = _polled_enough(d)
        diagnose = subprocess.run(
            [sys.executable, "-m", "gpu_exporter", "diagnose", "--url",
             f"http://127.0.0.1:{port}", "--json"],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    finally:
        stop_s, status = d.stop()
    assert status == 0, d.stderr_tail()
    families = _families(body)
    gpus = {labels["gpu"] for labels, _ in families["gpu_info"]}
    assert len(gpus) == b.gpus, (len(gpus), b.gpus)
    assert {labels["name"] for labels, _ in families["gpu_info"]} == {b.product}

    # Every reader ran without an error.
    assert {labels["collector"]: v for labels, v in families["gpu_exporter_collector_success"]
            if v != 1} == {}
    assert [labels["collector"] for labels, v in families["gpu_exporter_collector_errors_total"]
            if v != 0] == []
    assert families["gpu_exporter_nvml_up"][0][1] == 1

    # What the board supports is there, for every GPU.
    capabilities = _capabilities(b)
    required = list(EVERY_BOARD)
    for capability, names in _OPTIONAL:
        if capability in capabilities:
            required += names
    missing = {n: sorted(gpus - {labels.get("gpu", "") for labels, _ in families.get(n, [])})
               for n in required}
    assert {n: g for n, g in missing.items() if g} == {}, name
    utilization = {labels.get("gpu", "") for n in UTILIZATION for labels, _ in
                   families.get(n, [])}
    assert utilization >= gpus, f"{name}: no utilization series for GPUs " \
                                f"{sorted(gpus - utilization)}"
    # ... and nothing it does not support pretends to be.
    for capability, names in _OPTIONAL:
        if capability not in capabilities:
            assert not set(names) & set(families), (name, capability)

    # Every default family is either there or absent for a reason named above.
    default_on = {k.name for k in pipeline.COLLECTORS.values() if k.default}
    unexplained = [m.name for m in CATALOG
                   if m.collector in default_on and not m.detail and m.name not in families
                   and m.name not in required and m.name not in ABSENT_HERE
                   and m.name not in NVLINK + GPM + FABRIC + C2C + SMOOTHING + FEC + UTILIZATION
                   and not m.name.startswith(tuple(ABSENT_PREFIXES))]
    assert unexplained == [], name
    assert [n for n in families if n not in BY_NAME] == []  # nothing outside the catalog

    # Values in their units.
    wrong = [(n, labels, v) for n, found in families.items() for labels, v in found
             if not _in_range(n, v, b.memory_bytes)]
    assert wrong == [], wrong[:5]

    # diagnose reads the exporter and gives a verdict: 0 nothing found, 1 warnings,
    # 2 critical, 5 nothing found but some checks could not run yet (a window
    # not yet full); never 3 (unreachable) or 4 (blind) with the GPUs in view.
    assert diagnose.returncode in (0, 1, 2, 5), diagnose.stderr[-2000:]
    answer = json.loads(diagnose.stdout)
    seen = answer["visibility"]
    assert (seen["nvml_up"], seen["gpus"], seen["gpus_answering"], seen["blind"]) == (
        True, b.gpus, b.gpus, None), seen
    _lists_only_what_the_board_could_offer(capabilities, families, answer, gpus)
    assert stop_s < 5


# A window short enough for every check to have run within a test's seconds.
_SHORT_WINDOWS = "diagnosis: {window: 2s, clear_after: 2s}\n"


@pytest.mark.skipif("gb200" not in BOARDS, reason="the mock has no GB200 board file")
def test_diagnose_finds_a_healthy_gb200_healthy_on_the_mock(tmp_path: Path) -> None:
    """Every check judged on every GPU (coverage complete), nothing found:
    `diagnose` exits 0, not 5 (checked only in part) or a finding's status."""
    config = tmp_path / "config.yaml"
    config.write_text(_SHORT_WINDOWS)
    b = board("gb200")
    port = free_port()
    d = Daemon("gpu-exporter", [sys.executable, "-m", "gpu_exporter", "--web.listen-address",
                                f"127.0.0.1:{port}", "--config.file", str(config)], port, b.env())
    try:
        d.wait_ready()
        deadline = time.monotonic() + 60
        while not json.loads(get(port, "/diagnosis")[1])["coverage"]["complete"]:
            assert time.monotonic() < deadline, d.stderr_tail()
            time.sleep(0.5)
        done = subprocess.run(
            [sys.executable, "-m", "gpu_exporter", "diagnose", "--url",
             f"http://127.0.0.1:{port}"],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    finally:
        d.stop()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "No problems found" in done.stdout
