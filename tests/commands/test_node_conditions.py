"""``gpu-exporter diagnose --format npd`` as node-problem-detector runs it.

NPD's custom plugin monitor (pkg/custompluginmonitor in
kubernetes/node-problem-detector) reads at most 4096 bytes of a plugin's
stdout, trims the spaces around it, cuts it at ``max_output_length`` and turns
the exit status into the condition's status: 0 OK (False), 1 NonOK (True),
anything else Unknown. ``npd_condition`` below does the same, and the config
shipped in deploy/node-problem-detector/ is held to what NPD's config loader
checks before it starts."""

from __future__ import annotations

import json
import logging
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.commands import npd
from gpu_exporter.commands.diagnose import simulate
from gpu_exporter.diagnosis import rules
from gpu_exporter.diagnosis import table as t
from tests.procs import ROOT, free_port, run_cli
from tests.simnode import SimRun

CONFIG_PATH = ROOT / "deploy" / "node-problem-detector" / "gpu-exporter-monitor.json"
CONFIG: dict[str, Any] = json.loads(CONFIG_PATH.read_text())
MAX_OUTPUT = CONFIG["pluginConfig"]["max_output_length"]
# NPD's maxCustomPluginBufferBytes.
NPD_READ_BYTES = 4096
GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")


def npd_condition(result: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    """The condition status and message NPD makes of one plugin run."""
    output = result.stdout.encode()[:NPD_READ_BYTES].decode(errors="replace").strip()
    # NPD cuts at max_output_length; a message must fit before that.
    assert len(output) <= MAX_OUTPUT, output
    status = {0: "False", 1: "True"}.get(result.returncode, "Unknown")
    return status, output


def go_seconds(text: str) -> float:
    assert GO_DURATION.match(text), text
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)(ns|us|µs|ms|s|m|h)",
                                                              text))


RULES = {rule["condition"]: rule for rule in CONFIG["rules"]}
CONDITION_OF = {rule["condition"]: rule["args"][rule["args"].index("--condition") + 1]
                for rule in CONFIG["rules"]}


# --- the config, as NPD's loader checks it -------------------------------------


def test_the_config_passes_npds_own_checks() -> None:
    """ApplyConfiguration and Validate in pkg/custompluginmonitor/types."""
    assert CONFIG["plugin"] == "custom"
    glob = CONFIG["pluginConfig"]
    timeout = go_seconds(glob["timeout"])
    assert go_seconds(glob["invoke_interval"]) > timeout
    assert glob["concurrency"] >= len(CONFIG["rules"])  # every condition each interval
    defaults = {c["type"] for c in CONFIG["conditions"]}
    for rule in CONFIG["rules"]:
        assert rule["type"] == "permanent"
        assert rule["condition"] in defaults  # a permanent rule needs its default
        assert go_seconds(rule["timeout"]) <= timeout
        # The plugin's own wait for the exporter ends before NPD kills it.
        assert go_seconds(rule["timeout"]) > 5.0
        assert rule["path"] == "/opt/gpu-exporter/bin/gpu-exporter"  # docs/deploy.md's venv
    assert {c["reason"] for c in CONFIG["conditions"]}.isdisjoint(
        {r["reason"] for r in CONFIG["rules"]})
    assert MAX_OUTPUT >= npd.MAX_MESSAGE


def test_the_config_maps_every_class_to_one_condition() -> None:
    assert sorted(CONDITION_OF.values()) == sorted(npd.CONDITIONS)
    assert set(CONDITION_OF) == {"GPUHardwareFault", "GPUThrottled", "GPULinkDegraded",
                                 "GPUExporterCannotSee"}
    for rule in CONFIG["rules"]:
        assert rule["args"][0] == "diagnose"
        assert rule["args"][rule["args"].index("--url") + 1] == "http://127.0.0.1:9835"


# --- the command, run as NPD runs it, against a served exporter ---------------------


@pytest.fixture(scope="module")
def served_mixed() -> Iterator[SimRun]:
    with SimRun("mixed") as run:
        run.exporter.bind()
        assert run.exporter.server is not None
        run.exporter.server.start()
        run.poll(60)
        yield run


def run_rule(condition: str, url: str) -> subprocess.CompletedProcess[str]:
    """The config's rule for ``condition``, as NPD executes it, at ``url``."""
    args = list(RULES[condition]["args"])
    args[args.index("--url") + 1] = url
    return run_cli(args, timeout=go_seconds(RULES[condition]["timeout"]) * 4)


def test_the_configs_rules_read_the_local_exporter(served_mixed: SimRun) -> None:
    url = f"http://127.0.0.1:{served_mixed.exporter.port}"
    got = {condition: npd_condition(run_rule(condition, url)) for condition in RULES}
    assert got["GPUHardwareFault"] == ("True", "GPU 1 memory_errors/ecc_uncorrectable")
    assert got["GPUThrottled"] == ("True", "GPU 2 throttled_under_load/power_cap; "
                                           "GPU 6 throttled_under_load/thermal")
    assert got["GPULinkDegraded"] == ("True", "GPU 3 pcie_downtrained/link_degraded")
    assert got["GPUExporterCannotSee"] == ("False", "the exporter sees 8 GPUs")


def test_an_exporter_that_does_not_answer_is_unknown_never_ok() -> None:
    result = run_rule("GPUHardwareFault", f"http://127.0.0.1:{free_port()}")
    status, message = npd_condition(result)
    assert status == "Unknown" and message.startswith("exporter not read:"), message
    assert result.returncode == npd.UNKNOWN


# --- the scenarios: healthy, mixed, a lost GPU, NVML down ----------------------------

EXPECTED = {
    "healthy": {"hardware-fault": "False", "throttled": "False", "link-degraded": "False",
                "cannot-see": "False"},
    "mixed": {"hardware-fault": "True", "throttled": "True", "link-degraded": "True",
              "cannot-see": "False"},
    # The lost GPU is a hardware fault; whether it is also throttled or its
    # link degraded cannot be checked on a GPU NVML cannot read.
    "gpu-lost": {"hardware-fault": "True", "throttled": "Unknown", "link-degraded": "Unknown",
                 "cannot-see": "Unknown"},
    # NVML down: nothing is known about the GPUs, and that the exporter cannot
    # see them is itself the problem.
    "fault-driver-not-loaded": {"hardware-fault": "Unknown", "throttled": "Unknown",
                                "link-degraded": "Unknown", "cannot-see": "True"},
}
STATUS = {npd.OK: "False", npd.PROBLEM: "True", npd.UNKNOWN: "Unknown"}


@pytest.mark.parametrize("scenario", EXPECTED)
def test_each_scenario_gives_the_protocols_statuses(scenario: str) -> None:
    data = simulate(scenario, None, None)
    for condition, expected in EXPECTED[scenario].items():
        status, message = npd.verdict(condition, data)
        assert STATUS[status] == expected, (condition, message)
        assert 0 < len(message) <= npd.MAX_MESSAGE and "\n" not in message
        assert message.isascii() and message.isprintable()
    if scenario == "gpu-lost":
        assert npd.verdict(npd.HARDWARE_FAULT, data)[1] == "GPU 5 gpu_lost/hardware"


# The command itself, end to end (the served exporter above gives False).
@pytest.mark.parametrize("scenario,condition", [
    ("gpu-lost", "hardware-fault"), ("fault-driver-not-loaded", "throttled"),
])
def test_the_command_exits_with_the_protocols_status(scenario: str, condition: str) -> None:
    result = run_cli(["diagnose", "--simulate", scenario, "--format", "npd",
                      "--condition", condition])
    status, message = npd_condition(result)
    assert status == EXPECTED[scenario][condition], (result.returncode, message,
                                                     result.stderr)
    assert result.stdout.count("\n") == 1 and result.stderr == ""


def test_checks_it_could_not_run_make_their_conditions_unknown(tmp_path: Path) -> None:
    """A condition is Unknown where a check that raises it could not run on
    some GPU, cannot-see wherever any check could not; a problem still found
    stays a problem."""
    config = tmp_path / "no-host.yaml"
    config.write_text("collectors:\n  host: false\n")
    # GPU 7 holds memory and idles: why (storage, CPUs, swap) needs the host.
    mixed = simulate("mixed", config, None)
    status, message = npd.verdict(npd.CANNOT_SEE, mixed)
    assert status == npd.UNKNOWN, message
    # Every GPU holding a job misses the host CPUs' heat; GPU 7 (idle, holding
    # memory) also misses why it idles. The reason comes first in the line.
    assert re.match(r"GPUs? [\d, -]+: [^;]*not run: the host reader is swit", message), message
    # No hardware, throttling or link row reads the host: those found stay found.
    assert npd.verdict(npd.THROTTLED, mixed)[0] == npd.PROBLEM
    # On the healthy node only the host CPUs' heat and the host's memory
    # climb, causes of no condition, need the host reader: every condition is
    # OK but cannot-see, which says what could not run.
    healthy = simulate("healthy", config, None)
    for condition in (npd.HARDWARE_FAULT, npd.THROTTLED, npd.LINK_DEGRADED):
        assert npd.verdict(condition, healthy)[0] == npd.OK, condition
    status, message = npd.verdict(npd.CANNOT_SEE, healthy)
    assert status == npd.UNKNOWN and "2 checks not run: the host reader" in message


def test_a_hardware_check_that_failed_makes_hardware_fault_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that could not run now on a node whose board and driver offer
    it (its rule raised) leaves its condition Unknown, the others OK."""
    def broken(*_: object) -> rules.Verdict:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setitem(rules.RULES, t.ECC_UNCORRECTABLE, broken)
    logging.disable(logging.ERROR)
    try:
        data = simulate("healthy", None, None)
    finally:
        logging.disable(logging.NOTSET)
    status, message = npd.verdict(npd.HARDWARE_FAULT, data)
    assert status == npd.UNKNOWN and "its rule failed" in message, message
    assert npd.verdict(npd.THROTTLED, data)[0] == npd.OK


@pytest.mark.parametrize("branch", ["R470", "R535", "R550"])
def test_a_check_the_driver_does_not_offer_leaves_its_condition_ok(
        tmp_path: Path, branch: str) -> None:
    """A driver before R565 gives no recovery action (and R470 no GPM, before
    R550 no fabric state): a fact of the node, not a check that could not run.
    A healthy node on it is OK for every condition, exit 0 in the protocol."""
    for condition in npd.CONDITIONS:
        result = run_cli(["diagnose", "--simulate", str(_on_branch(tmp_path, "healthy", branch)),
                          "--format", "npd", "--condition", condition])
        status, message = npd_condition(result)
        assert (status, result.returncode) == ("False", npd.OK), (condition, message)


def test_a_diagnosis_that_did_not_run_is_neither_ok_nor_a_problem(tmp_path: Path) -> None:
    config = tmp_path / "no-diagnosis.yaml"
    config.write_text("diagnosis:\n  enabled: false\n")
    data = simulate("healthy", config, None)
    assert not data["findings"]
    for condition in npd.CONDITIONS:
        status, message = npd.verdict(condition, data)
        assert status == npd.UNKNOWN, (condition, message)
        assert "the diagnosis did not run" in message, message


def _on_branch(tmp: Path, scenario: str, branch: str) -> Path:
    path = tmp / f"{scenario}-{branch}.yaml"
    path.write_text(f"name: {scenario}-{branch}\ndescription: {scenario} on {branch}.\n"
                    f"extends: {scenario}\nnode: {{driver: {branch}}}\n")
    return path


# --- the message ---------------------------------------------------------------


def test_a_hostile_answer_gives_one_short_printable_line() -> None:
    evil = {"visibility": {"blind": None, "gpus": 8},
            "findings": [{"gpu": f"{i}\x1b[2J\n", "symptom": "memory_errors",
                          "cause": "ecc_uncorrectable"} for i in range(40)]}
    status, message = npd.verdict(npd.HARDWARE_FAULT, evil)
    assert status == npd.PROBLEM
    assert len(message) <= npd.MAX_MESSAGE and message.endswith("...")
    assert message.isascii() and message.isprintable()
    blind = {"visibility": {"blind": "é" * 500 + "\r\n\x00"}, "findings": []}
    status, message = npd.verdict(npd.CANNOT_SEE, blind)
    assert status == npd.PROBLEM and message.isprintable() and len(message) <= 80
    # A /diagnosis from before coverage was reported cannot say every check ran.
    status, message = npd.verdict(npd.THROTTLED, {"findings": []})
    assert status == npd.UNKNOWN and "which checks ran" in message


def test_every_row_of_the_table_has_its_condition() -> None:
    """Hardware faults, throttling and link problems are conditions of the
    node; problems of the job on it are not."""
    by_condition: dict[str | None, set[str]] = {}
    for row, condition in npd.ROW_CONDITION.items():
        by_condition.setdefault(condition, set()).add(row.symptom)
    assert by_condition[npd.HARDWARE_FAULT] == {"memory_errors", "xid_error", "gpu_lost",
                                                "recovery_action", "cooling_degraded",
                                                "fault_recurred"}
    assert by_condition[npd.THROTTLED] == {"throttled_under_load", "clocks_capped"}
    assert by_condition[npd.LINK_DEGRADED] == {"pcie_downtrained", "pcie_errors",
                                               "nvlink_errors", "c2c_errors",
                                               "fabric_degraded", "network_degraded",
                                               "network_errors"}
    assert {"memory_held_sm_idle", "gpu_allocated_unused"} <= by_condition[None]


def test_npd_format_needs_its_condition() -> None:
    result = run_cli(["diagnose", "--simulate", "healthy", "--format", "npd"])
    assert result.returncode == 2 and "--condition" in result.stderr
