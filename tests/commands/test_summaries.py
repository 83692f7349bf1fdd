"""Every summary sentence from every node state: the node page's summary and
`diagnose`'s text (what it prints against a running exporter: /diagnosis
rendered, and its exit status).

The rule (docs/node-conditions.md, "The protocol"; README, "The node page"):
a node is called healthy only when the exporter saw every GPU, ran every
check, and found nothing. Where it could not see (NVML down, no GPU, the
device reader off, polls that stopped) it says so and why; where some checks
could not run (a reader off, a window still filling) it says "checked only in
part"; a problem found is counted by severity. Each state has its own
sentence and exit status, so a person and a script can tell them apart.

The expected sentence of each state is written from that rule, not from
running the code. Bugs tried, each failing this file:

* the page calling a node checked only in part healthy (the
  ``not cov["complete"]`` branch of ``DoctorPage._summary`` removed):
  ``[xid reader off]``, ``[settling]`` fail;
* ``diagnose`` calling it healthy (``render_text`` without ``and complete``):
  the same two;
* the staleness check dropped from ``visibility`` (``elif age > stale_after``
  never true): ``[polls stopped]`` and ``[faulty, then polls stopped]`` fail;
* the device reader switched off said to be "NVML is not available" (as it
  was until this test: the exporter never asks NVML then): ``[device reader
  off]`` fails.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from gpu_exporter.commands.diagnose import blind_reason
from gpu_exporter.commands.report import (
    EXIT_BLIND,
    EXIT_CRITICAL,
    EXIT_HEALTHY,
    EXIT_IN_PART,
    exit_status,
    render_text,
)
from gpu_exporter.diagnosis.coverage import incomplete
from gpu_exporter.simulator import load_scenario
from gpu_exporter.web.app import Request
from tests.simnode import SimRun

NO_GPU = "name: no-gpu\ndescription: NVML answers and lists no GPU.\n" \
         "node: {gpus: 0, profile: h100-sxm5-80gb}\n"


class State(NamedTuple):
    scenario: str  # a built-in scenario, or "no-gpu" (NO_GPU above)
    seconds: float  # polled for this long, one poll a second
    silent: float  # then no poll for this long (the page is read after)
    settings: dict[str, Any]
    # What each output must say: the page's "Findings" line, the reason the
    # page gives when it cannot see (None: it can), diagnose's first line,
    # and diagnose's exit status.
    page: str
    page_blind: str | None
    terminal: str
    status: int


STATES = {
    "healthy": State("healthy", 40, 0, {},
                     "none: every GPU looks healthy", None,
                     "No problems found: every GPU on this node looks healthy.", EXIT_HEALTHY),
    "faulty": State("mixed", 40, 0, {},
                    "1 critical, 4 warning, 1 info", None,
                    "CRITICAL GPU 1", EXIT_CRITICAL),
    "NVML down": State("fault-driver-not-loaded", 40, 0, {},
                       "unknown: the GPUs cannot be seen", "kernel driver is not loaded",
                       "Could not see the GPUs: NVML is not available", EXIT_BLIND),
    "no GPU": State("no-gpu", 40, 0, {},
                    "unknown: the GPUs cannot be seen", "reports no GPU",
                    "Could not see the GPUs: NVML is up but reports no GPU", EXIT_BLIND),
    "device reader off": State("healthy", 40, 0, {"collectors": {"device": False}},
                               "unknown: the GPUs cannot be seen", "device reader is switched off",
                               "Could not see the GPUs: the device reader is switched off",
                               EXIT_BLIND),
    "polls stopped": State("healthy", 40, 600, {},
                           "unknown: the GPUs cannot be seen", "polls have stopped",
                           "Could not see the GPUs: the exporter's newest poll is 600s old",
                           EXIT_BLIND),
    # Findings from ten minutes ago are counted, but the node is not judged by them.
    "faulty, then polls stopped": State("mixed", 40, 600, {},
                                        "1 critical, 4 warning, 1 info", "polls have stopped",
                                        "Could not see the GPUs: the exporter's newest poll",
                                        EXIT_BLIND),
    "xid reader off": State("healthy", 40, 0, {"collectors": {"xid": False}},
                            "none in the checks that ran · checked only in part", None,
                            "Checked only in part: no problems found in the checks that ran",
                            EXIT_IN_PART),
    "settling": State("healthy", 1, 0, {},
                      "none in the checks that ran · checked only in part", None,
                      "Checked only in part: no problems found in the checks that ran",
                      EXIT_IN_PART),
}

TAG = re.compile(r"<[^>]+>")


def _text(html: str) -> str:
    return TAG.sub("", html).replace("&#x27;", "'")


class Outputs(NamedTuple):
    findings_line: str
    blind: str | None
    page: str
    terminal: str
    status: int


def _outputs(state: State, tmp: Path) -> Outputs:
    if state.scenario == "no-gpu":
        (tmp / "no-gpu.yaml").write_text(NO_GPU)
        scenario = load_scenario(str(tmp / "no-gpu.yaml"))
    else:
        scenario = load_scenario(state.scenario)
    with SimRun(scenario, **state.settings) as run:
        run.poll(state.seconds)
        run.clock.advance(state.silent)
        app = run.exporter.app
        page = app.handle(Request("/", "", {})).body.decode()
        data = json.loads(app.handle(Request("/diagnosis", "", {})).body)
    line = re.search(r"<dt>Findings</dt><dd>(.*?)</dd>", page)
    assert line, "the page has no Findings line"
    blind = re.search(r'<div class="blind"[^>]*>(.*?)</div>', page)
    blind_why = blind_reason(data)
    terminal = render_text(data["findings"], False, data.get("baseline_drifts", []), blind_why,
                           data.get("coverage"))
    return Outputs(_text(line.group(1)), None if blind is None else _text(blind.group(1)),
                   _text(page), terminal,
                   exit_status(data["findings"], blind_why, incomplete(data)))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outputs]]:
    logging.disable(logging.ERROR)
    try:
        yield {name: _outputs(state, tmp_path_factory.mktemp("state"))
               for name, state in STATES.items()}
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize("name", STATES)
def test_the_node_pages_summary_from_each_state(name: str,
                                                outputs: dict[str, Outputs]) -> None:
    state, out = STATES[name], outputs[name]
    assert out.findings_line == state.page
    if state.page_blind is None:
        assert out.blind is None, out.blind
    else:
        assert out.blind is not None and state.page_blind in out.blind, out.blind
        assert "not known to be healthy" in out.blind
    if state.status != EXIT_HEALTHY:
        assert "looks healthy" not in out.page


@pytest.mark.parametrize("name", STATES)
def test_diagnoses_summary_and_exit_status_from_each_state(
        name: str, outputs: dict[str, Outputs]) -> None:
    state, out = STATES[name], outputs[name]
    assert out.terminal.splitlines()[0].startswith(state.terminal), out.terminal
    assert out.status == state.status
    if state.status != EXIT_HEALTHY:
        assert "healthy" not in out.terminal.lower(), out.terminal
        assert not re.search(r"\bOK\b", out.terminal), out.terminal


def test_each_state_says_something_of_its_own(outputs: dict[str, Outputs]) -> None:
    """No two states read alike on the page (its summary and why it cannot
    see) or in the terminal, but for the two that differ only in why some
    checks could not run, which the lines beneath the first say."""
    pages = {(o.findings_line, o.blind) for o in outputs.values()}
    assert len(pages) == len(outputs) - 1  # xid reader off and settling share the summary
    terminals = {o.terminal for o in outputs.values()}
    assert len(terminals) == len(outputs)
    off, settling = outputs["xid reader off"].terminal, outputs["settling"].terminal
    assert "xid" in off.lower() and "still watching" in settling
