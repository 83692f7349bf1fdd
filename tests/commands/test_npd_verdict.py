"""node-problem-detector's answer (commands/npd.py ``verdict``) from
/diagnosis answers written by hand: each state of the answer against each
condition, and the exact line NPD puts on the Node. Fast on purpose, beside
tests/commands/test_node_conditions.py, which runs the command on simulated nodes:
mutation testing runs these per changed line."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_exporter.commands import npd
from gpu_exporter.commands.npd import (
    CANNOT_SEE,
    HARDWARE_FAULT,
    LINK_DEGRADED,
    OK,
    PROBLEM,
    THROTTLED,
    UNKNOWN,
    one_line,
    verdict,
)
from gpu_exporter.diagnosis.coverage import EVERY_CHECK

COMPLETE = {"complete": True}


def answer(findings: list[dict[str, Any]] | None = None, coverage: Any = COMPLETE,
           blind: str | None = None, gpus: int | None = 8) -> dict[str, Any]:
    data: dict[str, Any] = {"visibility": {"blind": blind, "gpus": gpus},
                            "findings": findings or []}
    if coverage is not None:
        data["coverage"] = coverage
    return data


def finding(gpu: object, key: str) -> dict[str, Any]:
    symptom, cause = key.split("/")
    return {"gpu": gpu, "symptom": symptom, "cause": cause}


ECC = "memory_errors/ecc_uncorrectable"
THERMAL = "throttled_under_load/thermal"
PCIE = "pcie_downtrained/link_degraded"


def test_a_checked_healthy_node_is_ok_for_every_condition_with_its_words() -> None:
    data = answer()
    assert verdict(HARDWARE_FAULT, data) == (OK, "no GPU hardware fault")
    assert verdict(THROTTLED, data) == (OK, "no GPU throttling")
    assert verdict(LINK_DEGRADED, data) == (OK, "no degraded GPU link")
    assert verdict(CANNOT_SEE, data) == (OK, "the exporter sees 8 GPUs")
    assert verdict(CANNOT_SEE, answer(gpus=None)) == (OK, "the exporter sees the GPUs")
    no_visibility = {"findings": [], "coverage": COMPLETE}
    assert verdict(CANNOT_SEE, no_visibility) == (OK, "the exporter sees the GPUs")


def test_each_problem_raises_only_its_own_condition_listed_in_gpu_order() -> None:
    row_of = {row.key: condition for row, condition in npd.ROW_CONDITION.items()}
    assert row_of[ECC] == HARDWARE_FAULT and row_of[THERMAL] == THROTTLED
    assert row_of[PCIE] == LINK_DEGRADED
    data = answer([finding(10, ECC), finding(2, THERMAL), finding(2, ECC), finding(9, PCIE),
                   finding(1, "memory_held_sm_idle/data_pipeline_io")])
    assert verdict(HARDWARE_FAULT, data) == (
        PROBLEM, "GPU 2 memory_errors/ecc_uncorrectable; GPU 10 memory_errors/ecc_uncorrectable")
    assert verdict(THROTTLED, data) == (PROBLEM, "GPU 2 throttled_under_load/thermal")
    assert verdict(LINK_DEGRADED, data) == (PROBLEM, "GPU 9 pcie_downtrained/link_degraded")
    # a workload's own problem is no condition of the node; neither is a finding without a GPU
    assert verdict(CANNOT_SEE, data) == (OK, "the exporter sees 8 GPUs")
    assert verdict(HARDWARE_FAULT, answer([{"symptom": "memory_errors",
                                            "cause": "ecc_uncorrectable"}])) == (
        PROBLEM, "GPU ? memory_errors/ecc_uncorrectable")


def test_a_node_whose_gpus_are_unseen_is_a_problem_for_cannot_see_unknown_for_the_rest() -> None:
    data = answer(blind="NVML is not available: driver not loaded", gpus=None)
    assert verdict(CANNOT_SEE, data) == (
        PROBLEM, "cannot see the GPUs: NVML is not available: driver not loaded")
    for condition in (HARDWARE_FAULT, THROTTLED, LINK_DEGRADED):
        assert verdict(condition, data) == (
            UNKNOWN, "cannot see the GPUs: NVML is not available: driver not loaded")
    # a fault found on what it does see outranks the unseen rest
    seen_fault = answer([finding(0, ECC)], blind="GPU 3 lost")
    assert verdict(HARDWARE_FAULT, seen_fault) == (PROBLEM,
                                                   "GPU 0 memory_errors/ecc_uncorrectable")


def test_an_exporter_not_read_is_unknown() -> None:
    assert verdict(THROTTLED, None) == (UNKNOWN, "exporter not read: no answer")
    assert verdict(CANNOT_SEE, answer(), "connection refused") == (
        UNKNOWN, "exporter not read: connection refused")
    assert verdict(HARDWARE_FAULT, None, "timed out") == (UNKNOWN, "exporter not read: timed out")


def gap(gpus: list[object], checks: list[str], reason: str) -> dict[str, Any]:
    return {"gpus": gpus, "checks": checks, "reason": reason}


def test_a_check_that_could_not_run_leaves_only_its_conditions_unknown() -> None:
    coverage = {"complete": False, "not_checked": [
        gap([0, 1, 2], [THERMAL], "the reader failed"),
        gap([5], [ECC, "memory_errors/row_remap_pending"], "NVML error"),
    ]}
    data = answer(coverage=coverage)
    assert verdict(THROTTLED, data) == (
        UNKNOWN, "GPUs 0-2: throttled_under_load/thermal not run: the reader failed")
    assert verdict(HARDWARE_FAULT, data) == (UNKNOWN, "GPU 5: 2 checks not run: NVML error")
    assert verdict(LINK_DEGRADED, data) == (OK, "no degraded GPU link")
    assert verdict(CANNOT_SEE, data) == (
        UNKNOWN, "GPUs 0-2: throttled_under_load/thermal not run: the reader failed; GPU 5: "
        "2 c...")
    # every check of a GPU not run counts for each condition
    every = answer(coverage={"complete": False, "not_checked": [
        gap([3], [EVERY_CHECK], "GPU lost")]})
    for condition in npd.CONDITIONS:
        assert verdict(condition, every) == (UNKNOWN, "GPU 3: every check not run: GPU lost")


def test_gpus_still_settling_come_first_and_a_complete_answer_is_not_read_further() -> None:
    settling = answer(coverage={"complete": False, "settling": {"gpus": [4, 5]},
                                "not_checked": [gap([1], [THERMAL], "off")]})
    assert verdict(THROTTLED, settling) == (
        UNKNOWN, "GPUs 4-5: still settling; GPU 1: throttled_under_load/thermal not run: off")
    assert verdict(HARDWARE_FAULT, settling) == (UNKNOWN, "GPUs 4-5: still settling")
    # the gaps of a complete answer are old news: it says every check ran
    complete = answer(coverage={"complete": True, "not_checked": [gap([1], [THERMAL], "off")]})
    assert verdict(THROTTLED, complete) == (OK, "no GPU throttling")
    # in part, but nothing of this condition and nothing settling: OK
    other = answer(coverage={"complete": False, "not_checked": [gap([1], [PCIE], "off")]})
    assert verdict(THROTTLED, other) == (OK, "no GPU throttling")
    assert verdict(CANNOT_SEE, other)[0] == UNKNOWN


def test_an_answer_that_does_not_say_what_ran_is_unknown() -> None:
    for coverage in (None, "complete", ["complete"]):
        data = answer(coverage=coverage)
        for condition in npd.CONDITIONS:
            assert verdict(condition, data) == (
                UNKNOWN, "the exporter does not say which checks ran (an older version)")
    # "in part" naming no check and no GPU (or only malformed ones): not OK either
    for odd in ({"complete": "yes"}, {"complete": False, "not_checked": ["x", 3]},
                {"complete": False, "not_checked": [], "settling": "GPU 3"}):
        for condition in npd.CONDITIONS:
            assert verdict(condition, answer(coverage=odd)) == (
                UNKNOWN, "checked only in part; the exporter does not say which checks")
    # a group that names no check of this condition is not this condition's gap
    named = answer(coverage={"complete": False, "not_checked": [gap([], [], "r")]})
    assert verdict(THROTTLED, named) == (OK, "no GPU throttling")


@pytest.mark.parametrize(("text", "line"), [
    ("plain", "plain"),
    ("a\nb\r\nc\td", "a b c d"),
    ("  many   spaces  ", "many spaces"),
    ("é\x1b[2Jx", "[2Jx"),
    ("x" * 80, "x" * 80),
    ("x" * 81, "x" * 77 + "..."),
    ("word " * 20, "word " * 15 + "wo..."),
])
def test_one_line_is_printable_ascii_within_npds_length(text: str, line: str) -> None:
    assert one_line(text) == line
    assert len(one_line(text)) <= npd.MAX_MESSAGE
    assert one_line("abcdef", 5) == "ab..."
