"""A hostile process name, one character class at a time, through every
output a person or a program reads: the exposition (/metrics), the node
page's HTML, diagnose's terminal text and /diagnosis's JSON.

A process sets its own name (prctl PR_SET_NAME takes any byte but NUL), so
GPU 7's stalled process of ``memory-held-sm-idle-process-stalled`` is
renamed to each string below and named by its finding. Each class alone,
so that a fix for one (escaping quotes) cannot hide a miss of another
(a newline, an escape code). What each output must do is the format's own
rule, not this exporter's:

* exposition: a label value escapes backslash, double quote and newline
  (the Prometheus text format), so the text parses back to the same value,
  and nothing else of the line is changed;
* HTML: the page parses, the name's markup characters are text, not markup;
* terminal: no control character reaches the terminal raw (an escape code
  would recolour or move the cursor; a right-to-left override reorders
  what follows), and the finding's own lines stay one line each;
* JSON: the answer parses, and the name is a string.
"""

from __future__ import annotations

import json
import unicodedata
from html.parser import HTMLParser

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_exporter.commands.report import render_text
from gpu_exporter.simulator import load_scenario
from gpu_exporter.web.app import Request
from tests.simnode import SimRun

STALLED_PID = 24107
# One class each: the name around it is plain, so the class alone is tried.
CLASSES = {
    "newline": "py\nthon",
    "carriage return": "py\rthon",
    "double quote": 'py"thon',
    "backslash": "py\\thon",
    "escape code": "py\x1b[31mx",
    "C1 control (CSI)": "py\x9bthon",
    "delete": "py\x7fthon",
    "right-to-left override": "py\u202ethon",
    "markup": "<b>py</b>",
    "ampersand": "py&amp;x",
    "tab": "py\tthon",
}


def scenario(name: str):  # type: ignore[no-untyped-def]
    sc = load_scenario("memory-held-sm-idle-process-stalled")
    procs = [p.model_copy(update={"comm": name}) if p.pid == STALLED_PID else p
             for p in sc.processes]
    return sc.model_copy(update={"processes": procs})


@pytest.fixture(scope="module", params=list(CLASSES), ids=list(CLASSES))
def outputs(request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    name = CLASSES[request.param]
    with SimRun(scenario(name)) as run:
        run.poll(40)
        app = run.exporter.app
        out = {path: app.handle(Request(path, "", {})).body.decode()
               for path in ("/metrics", "/", "/diagnosis")}
        answer = json.loads(out["/diagnosis"])
        out["terminal"] = render_text(answer["findings"], color=False,
                                      coverage=answer.get("coverage"))
    return name, out


def test_the_exposition_parses_back_to_the_name(outputs: tuple[str, dict[str, str]]) -> None:
    name, out = outputs
    names = [s.labels.get("comm") for family in text_string_to_metric_families(out["/metrics"])
             for s in family.samples if s.labels.get("pid") == str(STALLED_PID)]
    assert names, "no series names the stalled process"
    # The exporter may make the name printable, but never breaks the format:
    # what parses back is one value per series, the same in each.
    assert len(set(names)) == 1, names
    # A label value a person reads in Grafana carries no control character:
    # the exporter writes them as visible escapes, the format escapes the rest.
    # (A newline is the format's to escape, and it does: the value parsed back.)
    assert not [ch for ch in names[0] if unicodedata.category(ch) == "Cc" and ch != "\n"], \
        repr(names[0])
    if name.isprintable():
        assert names[0] == name


def test_the_node_page_shows_the_name_as_text(outputs: tuple[str, dict[str, str]]) -> None:
    _, out = outputs

    class Tags(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tags: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.tags.append(tag)

    tags = Tags()
    tags.feed(out["/"])
    assert str(STALLED_PID) in out["/"]
    # The name's <b> is text: the page has no <b> element of a process's making.
    assert "b" not in tags.tags
    for raw in ("\x1b", "\x9b", "\x7f"):
        assert raw not in out["/"]


def test_the_terminal_gets_no_control_character(outputs: tuple[str, dict[str, str]]) -> None:
    _, out = outputs
    text = out["terminal"]
    bad = [ch for ch in text if ch not in "\n" and (
        unicodedata.category(ch) in ("Cc", "Cf") or ch == "\u202e")]
    assert not bad, [hex(ord(ch)) for ch in bad]
    # The finding names the process, on its own line.
    assert [line for line in text.splitlines() if f"process pid {STALLED_PID}" in line and
            "process comm " in line], text


def test_the_json_parses_and_keeps_the_name_a_string(
        outputs: tuple[str, dict[str, str]]) -> None:
    name, out = outputs
    answer = json.loads(out["/diagnosis"])
    findings = [f for f in answer["findings"] if f.get("cause") == "process_stalled"]
    assert findings, answer["findings"]
    # JSON escapes what it must: the name comes back as the process set it.
    assert findings[0]["evidence"]["process_comm"] == name
    for f in findings:
        for value in f.get("evidence", {}).values():
            assert isinstance(value, (str, int, float)), value
