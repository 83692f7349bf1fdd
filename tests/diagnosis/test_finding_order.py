"""The findings in their order, through the real node page (parsed as HTML)
and `diagnose`'s text, held to the documented rule: most severe first
(README and commands/report.py: "most severe first"; the runbook's severities,
`critical` pages, `warning` opens a ticket, `info` is for dashboards), then by
GPU as the node numbers them (0, 1, 2 … 10, 11: the order of the page's GPU
cards), and the same order on the page and in the terminal.

The node has twelve GPUs so that the GPU numbers sort apart as text ("10"
before "2") and as numbers; every severity is present, and two GPUs share
each of the critical and warning findings. The expected order is written from
the rule above, not read from the code.

Bugs tried, each failing this file:

* ``diagnose`` sorting the GPU as the text /diagnosis carries it
  (``str(f["gpu"])`` in ``render_text``'s key; shipped until this test):
  GPU 10's warning printed before GPU 2's;
* the page's list sorted without its severity (``doctor.py``'s key starting
  at ``f.gpu``): GPU 1's critical finding after GPU 0's warnings;
* the page's GPU cards in the order NVML listed them reversed.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import NamedTuple

import pytest

from gpu_exporter.commands.report import render_text
from gpu_exporter.simulator import load_scenario
from gpu_exporter.web.app import Request
from tests.simnode import SimRun

# `mixed` (critical on GPU 1; warnings on 2, 3, 6, 7; info on 4) on twelve
# GPUs, with GPU 11's memory as broken as GPU 1's and GPU 10 capped as GPU 2.
SCENARIO = """\
name: finding-order
description: Findings of every severity on GPUs whose numbers sort apart as text.
extends: mixed
node: {gpus: 12, profile: h100-sxm5-80gb}
gpus:
  10:
    power_limit_w: 450
    throttle_reasons: [sw_power_cap]
  11:
    ecc_uncorrected_volatile: 1
    remapped_rows_uncorrectable: 1
    remap_pending: true
"""
# Written from the rule: severity, then the GPU's number.
EXPECTED = [("critical", 1), ("critical", 11),
            ("warning", 2), ("warning", 3), ("warning", 6), ("warning", 7), ("warning", 10),
            ("info", 4)]
SEVERITIES = ("critical", "warning", "info")  # the runbook's, most severe first


class Page(HTMLParser):
    """The "What is wrong" list as (severity, GPU) and the GPU cards' order."""

    def __init__(self) -> None:
        super().__init__()
        self.wrong: list[tuple[str, int]] = []
        self.cards: list[int] = []
        self._in_wrong = self._in_li = self._in_h2 = False
        self._li = ""
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        # The list of findings, not the account of checks that could not run
        # (a section of the same class, with its own id).
        if tag == "section" and dict(attrs) == {"class": "wrong"}:
            self._in_wrong = True
        elif tag == "li" and self._in_wrong:
            self._in_li, self._li = True, ""
        elif tag == "h2":
            self._in_h2 = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._in_wrong = False
        elif tag == "li" and self._in_li:
            self._in_li = False
            found = re.match(r"(\w+) GPU (\d+):", self._li)
            assert found, self._li
            self.wrong.append((found[1], int(found[2])))
        elif tag == "h2":
            self._in_h2 = False

    def handle_data(self, data: str) -> None:
        if self._in_li:
            self._li += data
        elif self._in_h2 and (card := re.fullmatch(r"GPU (\d+)", data.strip())):
            self.cards.append(int(card[1]))


class Outputs(NamedTuple):
    page: Page
    terminal: list[tuple[str, int]]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outputs]:
    path: Path = tmp_path_factory.mktemp("order") / "finding-order.yaml"
    path.write_text(SCENARIO)
    logging.disable(logging.ERROR)
    try:
        with SimRun(load_scenario(str(path))) as run:
            run.poll(40)
            app = run.exporter.app
            html = app.handle(Request("/", "", {})).body.decode()
            data = json.loads(app.handle(Request("/diagnosis", "", {})).body)
    finally:
        logging.disable(logging.NOTSET)
    page = Page()
    page.feed(html)
    text = render_text(data["findings"], False, [], None, data.get("coverage"))
    heads = [(m[1].lower(), int(m[2]))
             for m in re.finditer(r"^(CRITICAL|WARNING|INFO)\s+GPU (\d+) ", text, re.M)]
    yield Outputs(page, heads)


def test_the_scenario_has_what_the_order_is_tried_on(outputs: Outputs) -> None:
    assert sorted(outputs.page.wrong) == sorted(EXPECTED)
    assert {sev for sev, _ in outputs.page.wrong} == set(SEVERITIES)


def test_the_pages_list_is_most_severe_first_then_by_gpu_number(outputs: Outputs) -> None:
    assert outputs.page.wrong == EXPECTED


def test_diagnose_prints_the_same_order(outputs: Outputs) -> None:
    assert outputs.terminal == EXPECTED


def test_the_gpu_cards_follow_the_gpus_numbers(outputs: Outputs) -> None:
    assert outputs.page.cards == list(range(12))
