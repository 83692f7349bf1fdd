"""Verdicts from every state the exporter can be in: no answer may pass for
healthy unless the exporter saw every GPU and ran every check of its kind.

The principle (docs/node-conditions.md, "The protocol"): a condition is OK
(exit 0, False) only when the exporter sees every GPU, ran every check the
boards and driver offer that raises it, and found nothing; Unknown (exit 3)
when it could not see the GPUs or could not run a check of that class (a
reader switched off or failing, the diagnosis off or failing, a window
still filling); ``cannot-see`` is True when the GPUs cannot be seen and
Unknown when any check could not run. ``diagnose`` exits 0 only for a node
fully checked and clear, 4 when it cannot see the GPUs, 5 when it found
nothing but could not check everything (commands/report.py). ``/diagnosis``
passes for healthy only with no finding, nothing blind and ``coverage``
complete.

The expected answer of each cell below is written from that principle and
from which reader each class's rows read (the table in node-conditions.md:
hardware faults read the device and Xid readers; throttling, the device
reader; degraded links, the device and PCIe readers), not from running the
code. The healthy scenario is the control: every check passes there, so a
state that is not OK is so because of the state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.collectors.device import DeviceCollector
from gpu_exporter.collectors.xid import XidCollector
from gpu_exporter.commands import npd
from gpu_exporter.commands.diagnose import blind_reason, simulate
from gpu_exporter.commands.report import EXIT_BLIND, EXIT_HEALTHY, EXIT_IN_PART, exit_status
from gpu_exporter.diagnosis import rules
from gpu_exporter.diagnosis.coverage import incomplete

HW, THR, LINK, SEE = npd.HARDWARE_FAULT, npd.THROTTLED, npd.LINK_DEGRADED, npd.CANNOT_SEE
OK, TRUE, UNKNOWN = "OK", "True", "Unknown"

# state -> (the scenario, a config file's text, a duration or None, what to break),
# then the answer each class must give and diagnose's exit status.
STATES: dict[str, tuple[tuple[str, str, float | None, str], dict[str, str], int]] = {
    # The control: everything seen and checked, nothing found.
    "fully checked": (("healthy", "", None, ""),
                      {HW: OK, THR: OK, LINK: OK, SEE: OK}, EXIT_HEALTHY),
    # Nothing judged: no class may be OK, nor True (nothing was found).
    "diagnosis off": (("healthy", "diagnosis:\n  enabled: false\n", None, ""),
                      {HW: UNKNOWN, THR: UNKNOWN, LINK: UNKNOWN, SEE: UNKNOWN}, EXIT_IN_PART),
    # Every rule raising: the diagnosis ran but judged nothing.
    "diagnosis failing": (("healthy", "", None, "rules"),
                          {HW: UNKNOWN, THR: UNKNOWN, LINK: UNKNOWN, SEE: UNKNOWN},
                          EXIT_IN_PART),
    # One second in: no row has had its window.
    "settling": (("healthy", "", 1.0, ""),
                 {HW: UNKNOWN, THR: UNKNOWN, LINK: UNKNOWN, SEE: UNKNOWN}, EXIT_IN_PART),
    # The Xid reader off: the Xid rows (hardware faults) are not judged; the
    # device reader still judges throttling and the link.
    "xid reader off": (("healthy", "collectors:\n  xid: false\n", None, ""),
                       {HW: UNKNOWN, THR: OK, LINK: OK, SEE: UNKNOWN}, EXIT_IN_PART),
    # The Xid reader failing every poll: as switched off.
    "xid reader failing": (("healthy", "", None, "xid"),
                           {HW: UNKNOWN, THR: OK, LINK: OK, SEE: UNKNOWN}, EXIT_IN_PART),
    # The device reader failing: no GPU is read at all, so none is seen.
    "device reader failing": (("healthy", "", None, "device"),
                              {HW: UNKNOWN, THR: UNKNOWN, LINK: UNKNOWN, SEE: TRUE}, EXIT_BLIND),
    # NVML down: the GPUs cannot be seen.
    "NVML down": (("fault-driver-not-loaded", "", None, ""),
                  {HW: UNKNOWN, THR: UNKNOWN, LINK: UNKNOWN, SEE: TRUE}, EXIT_BLIND),
}
NPD_STATUS = {npd.OK: OK, npd.PROBLEM: TRUE, npd.UNKNOWN: UNKNOWN}


def _broken(*_: object) -> Any:
    raise RuntimeError("broken on purpose")


def _answer(state: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    (scenario, config_text, duration, breaks), _, _ = STATES[state]
    if breaks == "rules":
        for row in list(rules.RULES):
            monkeypatch.setitem(rules.RULES, row, _broken)
    elif breaks == "xid":
        monkeypatch.setattr(XidCollector, "collect", _broken)
    elif breaks == "device":
        monkeypatch.setattr(DeviceCollector, "collect", _broken)
    config = None
    if config_text:
        config = tmp_path / "config.yaml"
        config.write_text(config_text)
    logging.disable(logging.ERROR)
    try:
        return simulate(scenario, config, duration)
    finally:
        logging.disable(logging.NOTSET)


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    out = {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for state in STATES:
            with monkeypatch.context() as m:
                out[state] = _answer(state, tmp_path_factory.mktemp("state"), m)
    yield out


CELLS = [(state, condition) for state in STATES for condition in npd.CONDITIONS]


@pytest.mark.parametrize(("state", "condition"), CELLS)
def test_each_condition_from_each_state(state: str, condition: str,
                                        answers: dict[str, dict[str, Any]]) -> None:
    data = answers[state]
    status, message = npd.verdict(condition, data)
    assert NPD_STATUS[status] == STATES[state][1][condition], message


@pytest.mark.parametrize("state", STATES)
def test_diagnose_and_the_diagnosis_route_from_each_state(
        state: str, answers: dict[str, dict[str, Any]]) -> None:
    data = answers[state]
    expected = STATES[state][2]
    # What `gpu-exporter diagnose` exits with for this answer (its last line).
    assert exit_status(data["findings"], blind_reason(data), incomplete(data)) == expected
    # /diagnosis passes for healthy only when fully checked and clear.
    healthy = not data["findings"] and blind_reason(data) is None and not incomplete(data)
    assert healthy == (expected == EXIT_HEALTHY)


def test_a_problem_found_outranks_a_check_that_could_not_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mixed` has an uncorrectable ECC error on GPU 1: with the Xid reader
    off it is still a hardware fault, never Unknown."""
    config = tmp_path / "config.yaml"
    config.write_text("collectors:\n  xid: false\n")
    logging.disable(logging.ERROR)
    try:
        data = simulate("mixed", config, None)
    finally:
        logging.disable(logging.NOTSET)
    assert npd.verdict(HW, data)[0] == npd.PROBLEM
    assert npd.verdict(SEE, data)[0] == npd.UNKNOWN
