"""Every driver branch a fleet still runs (simulator/drivers.py): the exporter
exports exactly what that branch's NVML can answer, reads throttle reasons
through the older calls where the newer ones are missing or unsupported, and
the throttling diagnoses work on every branch. The nodes run with
--metrics.detail: the question is what a branch can read, the detail
families included."""

from __future__ import annotations

import logging
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.simulator import load_scenario
from gpu_exporter.simulator.drivers import BRANCHES, BY_NAME, NEWEST
from gpu_exporter.simulator.model import Scenario
from tests.simnode import SimRun

DETAIL = {"detail": True}
README = Path(__file__).resolve().parents[2] / "README.md"

_GPM = {"gpu_sm_active_ratio", "gpu_sm_occupancy_ratio", "gpu_tensor_active_ratio",
        "gpu_dram_active_ratio", "gpu_gpm_nvlink_bytes_per_second",
        "gpu_gpm_pcie_bytes_per_second", "gpu_sm_active_seconds_total",
        "gpu_tensor_active_seconds_total", "gpu_dram_active_seconds_total"}
_PCIE_BYTES = {"gpu_pcie_bytes_total"}
# What each branch cannot give on an H100 node, against the newest branch.
_FABRIC, _RECOVERY = {"gpu_fabric_state", "gpu_fabric_health_issue"}, {"gpu_recovery_action"}
LOSES: dict[str, set[str]] = {
    # The NVLink link state field came in R525: R470 reads it link by link.
    "R470": _GPM | _PCIE_BYTES | _FABRIC | _RECOVERY | {"gpu_memory_reserved_bytes"},
    "R525": _PCIE_BYTES | _FABRIC | _RECOVERY,
    "R535": _PCIE_BYTES | _FABRIC | _RECOVERY,
    "R550": _PCIE_BYTES | _RECOVERY,
    "R570": set(),
    "R580": set(),
}


# What each branch exports beyond the newest one: nothing. The rows its driver
# leaves unjudged are a fact of the node, listed by diagnose and /diagnosis
# as not available, not gaps for gpu_diagnosis_not_judged.
GAINS: dict[str, set[str]] = {name: set() for name in LOSES}


def on_branch(scenario: str, branch: str | None, **node: Any) -> Scenario:
    data = load_scenario(scenario).model_dump(exclude_unset=True)
    data.setdefault("node", {}).update(node)
    if branch is not None:
        data["node"]["driver"] = branch
    return Scenario.model_validate(data)


def families(text: str) -> set[str]:
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


@cache
def exported(scenario: str, branch: str) -> tuple[frozenset[str], str]:
    with SimRun(on_branch(scenario, branch), metrics=DETAIL) as run:
        run.poll(40)
        text = run.scrape()
    return frozenset(families(text)), text


def test_every_branch_named_and_ordered() -> None:
    assert [b.name for b in BRANCHES] == list(LOSES)
    assert [b.number for b in BRANCHES] == sorted(b.number for b in BRANCHES)
    assert NEWEST.name == "R580"
    for branch in BRANCHES:  # each release named is one of its branch
        assert branch.driver_version.startswith(f"{branch.number}.")


def test_a_scenario_names_a_branch_and_gets_its_versions() -> None:
    sc = on_branch("healthy", "R470")
    assert (sc.node.driver_version, sc.node.cuda_driver_version) == ("470.256.02", 11040)
    pinned = on_branch("healthy", "R535", driver_version="535.104.05")
    assert pinned.node.driver_version == "535.104.05"
    with pytest.raises(ValueError, match="unknown driver branch 'R999'"):
        on_branch("healthy", "R999")


@pytest.mark.parametrize("branch", list(LOSES))
def test_each_branch_exports_exactly_what_it_can_read(branch: str) -> None:
    newest, _ = exported("healthy", NEWEST.name)
    got, text = exported("healthy", branch)
    assert LOSES[branch] <= newest  # what a branch loses is there on the newest one
    assert set(got) == (newest - LOSES[branch]) | GAINS[branch]
    assert f'driver_version="{BY_NAME[branch].driver_version}"' in text
    # Throttle reasons on every GPU, whichever calls the branch has.
    assert len(re.findall(r'^gpu_throttle_reason_active\{gpu="0"', text, re.M)) == 9


@pytest.mark.parametrize("branch", list(LOSES))
@pytest.mark.parametrize("scenario,cause", [
    ("throttled-under-load-power-cap", "power_cap"),
    ("throttled-under-load-thermal", "thermal"),
    ("throttled-under-load-power-brake", "power_brake"),
])
def test_throttling_diagnoses_on_every_branch(branch: str, scenario: str, cause: str) -> None:
    _, text = exported(scenario, branch)
    assert re.search(r'^gpu_diagnosis_active\{[^}]*cause="' + cause +
                     r'"[^}]*symptom="throttled_under_load"[^}]*\} 1\.0$', text, re.M), text


def test_processes_listed_through_the_older_calls() -> None:
    """Drivers before R535 have only the _v2 process lists."""
    with SimRun(on_branch("memory-held-sm-idle-cpu-contention", "R525"), metrics=DETAIL) as run:
        run.poll(5)
        text = run.scrape()
        asked = run.node.library.missing
    assert "nvmlDeviceGetComputeRunningProcesses_v3" in asked
    assert re.search(r"^gpu_process_memory_used_bytes\{", text, re.M)


def test_supported_mask_not_supported_falls_back_to_the_older_call(
        caplog: pytest.LogCaptureFixture) -> None:
    """The driver answers the new supported-reasons call NOT_SUPPORTED while
    the older one and the active reasons answer: the reasons stay exported."""
    sc = on_branch("throttled-under-load-power-cap", None)
    sc.state.errors = {"nvmlDeviceGetSupportedClocksEventReasons": "NOT_SUPPORTED"}
    with caplog.at_level(logging.INFO), SimRun(sc, metrics=DETAIL) as run:
        run.poll(40)
        text = run.scrape()
        calls = run.node.library.calls
    assert calls["nvmlDeviceGetSupportedClocksThrottleReasons"] == 8  # once per GPU
    assert re.search(r'^gpu_throttle_reason_active\{gpu="\d",reason="sw_power_cap",[^}]*\} 1\.0',
                     text, re.M)
    assert re.search(r'cause="power_cap"[^}]*symptom="throttled_under_load"[^}]*\} 1\.0', text)
    said = [r for r in caplog.records if "nvmlDeviceGetSupportedClocksEventReasons" in
            r.getMessage()]
    assert len(said) == 1, "one line for the node, not one per GPU or per poll"


def test_active_bits_exported_without_any_supported_mask() -> None:
    """Neither supported-mask call answers: the nine classic reasons are
    exported from the active mask, so throttling is still seen."""
    sc = on_branch("throttled-under-load-power-cap", "R525")
    sc.state.errors = {"nvmlDeviceGetSupportedClocksThrottleReasons": "NOT_SUPPORTED"}
    with SimRun(sc, metrics=DETAIL) as run:
        run.poll(40)
        text = run.scrape()
    reasons = re.findall(r'^gpu_throttle_reason_active\{gpu="0",reason="(\w+)"', text, re.M)
    assert len(reasons) == 9 and "sw_power_cap" in reasons
    assert re.search(r'cause="power_cap"[^}]*symptom="throttled_under_load"[^}]*\} 1\.0', text)


def test_fans_counted_without_nvmlDeviceGetNumFans() -> None:
    newest = exported_profile("rtx-4090", NEWEST.name)
    old = exported_profile("rtx-4090", "R470")
    fans = re.findall(r'^gpu_fan_speed_ratio\{fan="(\d)",gpu="0"', newest, re.M)
    assert fans and fans == re.findall(r'^gpu_fan_speed_ratio\{fan="(\d)",gpu="0"', old, re.M)


def exported_profile(profile: str, branch: str) -> str:
    with SimRun(on_branch("healthy", branch, profile=profile), metrics=DETAIL) as run:
        run.poll(5)
        return run.scrape()


def test_readme_states_the_minimum_driver_and_each_branch_loss() -> None:
    text = README.read_text()
    assert "minimum driver" in text.lower()
    section = text[text.index("## Driver branches"):]
    section = section[:section.find("\n## ", 4)]
    for name, lost in LOSES.items():
        row = next((line for line in section.splitlines() if line.startswith(f"| {name} ")),
                   None)
        assert row is not None, name
        named = set(re.findall(r"`(gpu_\w+)`", row))
        assert named == lost, (name, named ^ lost)


def test_nvlink_state_read_link_by_link_without_the_state_field(
        caplog: pytest.LogCaptureFixture) -> None:
    """R470 does not know the link state field (R525): each link's state comes
    from nvmlDeviceGetNvLinkState, a link down shows, and the loss of the field
    is said once for the node."""
    sc = on_branch("healthy", "R470")
    sc.state.nvlink_down = [3]
    with caplog.at_level(logging.INFO), SimRun(sc, metrics=DETAIL) as run:
        run.poll(5)
        text = run.scrape()
        calls = run.node.library.calls
    up = re.findall(r'^gpu_nvlink_link_up\{gpu="0",link="(\d+)",[^}]*\} (\S+)$', text, re.M)
    assert len(up) == 18 and dict(up)["3"] == "0.0" and dict(up)["4"] == "1.0"
    assert re.search(r'^gpu_nvlink_links_active\{gpu="0",[^}]*\} 17\.0$', text, re.M)
    assert calls["nvmlDeviceGetNvLinkState"] == 8 * 18 * 6  # every link, GPU and poll
    said = [r for r in caplog.records if "NVML_FI_DEV_NVLINK_GET_STATE" in r.getMessage()]
    assert len(said) == 1


def test_no_link_state_at_all_leaves_the_state_series_absent() -> None:
    """Neither the field nor the per-link call answers: no link_up series and
    no links_active (a 0 there would read as every link down)."""
    sc = on_branch("healthy", "R470")
    sc.state.errors = {"nvmlDeviceGetNvLinkState": "NOT_SUPPORTED"}
    with SimRun(sc, metrics=DETAIL) as run:
        run.poll(5)
        text = run.scrape()
        calls = run.node.library.calls
    assert not re.search(r"^gpu_nvlink_link(_up|s_active)\{", text, re.M)
    assert re.search(r'^gpu_nvlink_links\{gpu="0",[^}]*\} 18\.0$', text, re.M)
    assert re.search(r'^gpu_nvlink_errors_all_links_total\{gpu="0",', text, re.M)
    assert calls["nvmlDeviceGetNvLinkState"] == 8  # asked once per GPU, not every poll
    assert re.search(r'^gpu_exporter_collector_errors_total\{collector="nvlink"\} 0\.0$',
                     text, re.M)


def _busy(text: str) -> tuple[dict[str, float], dict[str, str]]:
    """GPU -> busy seconds, and GPU -> the source its counter comes from."""
    busy = {gpu: float(v) for gpu, v in re.findall(
        r'^gpu_busy_seconds_total\{gpu="(\d)",[^}]*\} (\S+)$', text, re.M)}
    source = dict(re.findall(r'^gpu_busy_source_info\{gpu="(\d)",source="(\w+)"', text, re.M))
    return busy, source


@pytest.mark.parametrize("branch", list(LOSES))
def test_utilization_is_never_missing(branch: str, caplog: pytest.LogCaptureFixture) -> None:
    """Where the driver keeps no utilization samples (some boards, vGPU, NVIDIA's
    mock library), the busy counter comes from the 1-second utilization rate
    at each poll, says so in gpu_busy_source_info and once in the log; where
    it keeps them, from the samples. Either way rate() of it is the GPU's
    utilization (0.96 in this scenario, with its noise)."""
    _, text = exported("healthy", branch)
    busy, source = _busy(text)
    assert set(source.values()) == {"samples"} and len(busy) == 8
    sc = on_branch("healthy", branch)
    sc.state.errors = {"nvmlDeviceGetSamples": "NOT_SUPPORTED"}
    with caplog.at_level(logging.INFO), SimRun(sc) as run:
        run.poll(40)
        text = run.scrape()
    busy, source = _busy(text)
    assert set(source.values()) == {"utilization_rate"} and len(source) == 8
    assert all(0.85 * 40 <= seconds <= 40 for seconds in busy.values()), busy
    said = [r for r in caplog.records if "utilization_rate" in r.getMessage()]
    assert len(said) == 1, "one line for the node, not one per GPU or per poll"
