"""Hostile names from the other places names come from, one character class
at a time, through every output that shows them.

test_hostile_strings.py tries a process's name (the process sets it). Here:

* a pod's name, as the kubelet's pod resources answer gives it (the exporter
  takes it as sent; a kubelet is trusted for the allocation, not for the
  text): pod ``ml/finetune`` of ``memory-held-sm-idle-cpu-limit-throttled``,
  whose GPUs 2 and 3 have findings, is renamed. It shows in the exposition
  (``gpu_allocation_info{pod}``), on the node page ("Allocated to"), in
  ``diagnose``'s owner line and in /diagnosis's ``owners``;
* a GPU's name, as NVML answers ``nvmlDeviceGetName``: every GPU of
  ``mixed``. It shows in the exposition (``gpu_info{name}``) and on the node
  page (each card's head); /diagnosis and ``diagnose`` do not carry it.

A Slurm job reaches the exporter only by its number in a cgroup path (read as
digits), never by its name, so no Slurm text is tried here.

Each class alone (a newline, a double quote, a backslash, an escape code, a
C1 CSI, markup), then all of them mixed. What each output must do is its
format's rule: the exposition parses back to one value (backslash, double
quote and newline escaped by the text format, control characters made
visible); the page's markup characters are text and no control character
reaches it; the terminal gets no control character and the owner stays on
its line; the JSON parses back to the very name.

Bugs tried, each failing this file: the node page's "Allocated to" line
without its escaping (``doctor.py``: ``o.describe()`` for
``_text(o.describe())``): the page cases of the pod name's newline, escape
code, CSI, markup and mixed fail; ``diagnose``'s owner line printed raw
(``report.py`` without ``safe`` there): the terminal cases of the newline,
escape code, CSI and mixed fail; the GPU card's head showing ``r.name``
unescaped: the page cases of the GPU name's newline, escape code, CSI, markup
and mixed fail. (The double quote and backslash are the exposition's to
escape, which prometheus_client does; the JSON's, which ``json`` does.)
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from collections.abc import Iterator
from html import unescape
from html.parser import HTMLParser
from typing import NamedTuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_exporter.commands.report import render_text
from gpu_exporter.simulator import SimulatedNode, load_scenario
from gpu_exporter.simulator.model import Scenario
from gpu_exporter.web.app import Request
from tests.simnode import SimRun

# Each name starts with "nm" and ends with "zz", so it can be found however
# an output escapes what lies between.
CLASSES = {
    "newline": "nm\nzz",
    "double quote": 'nm"zz',
    "backslash": "nm\\zz",
    "escape code": "nm\x1b[31mzz",
    "C1 CSI": "nm\x9b2Jzz",
    "markup": "nm<b>x</b>zz",
}
CLASSES["mixed"] = "nm" + "".join(v[2:-2] for v in CLASSES.values()) + "zz"
FOUND = re.compile(r"nm.{1,80}?zz", re.S)


def _raw_controls(text: str, allowed: str = "") -> list[str]:
    return [hex(ord(ch)) for ch in text
            if ch not in allowed and (unicodedata.category(ch) in ("Cc", "Cf"))]


class Source(NamedTuple):
    scenario: str
    label: str  # the exposition's label that carries the name
    outputs: tuple[str, ...]


SOURCES = {
    "pod name": Source("memory-held-sm-idle-cpu-limit-throttled", "pod",
                       ("metrics", "page", "terminal", "json")),
    "GPU name": Source("mixed", "name", ("metrics", "page")),
}


def _scenario(source: str, name: str) -> Scenario:
    sc = load_scenario(SOURCES[source].scenario)
    if source != "pod name":
        return sc
    assert sc.tenants is not None
    # model_copy does not validate: the name reaches the kubelet as sent.
    pods = [p.model_copy(update={"name": name}) if p.name == "finetune" else p
            for p in sc.tenants.pods]
    assert pods != sc.tenants.pods
    return sc.model_copy(update={"tenants": sc.tenants.model_copy(update={"pods": pods})})


def _gpu_named(source: str, name: str):  # type: ignore[no-untyped-def]
    def prepare(node: SimulatedNode) -> None:
        if source == "GPU name":
            node.world.profile = node.world.profile.model_copy(update={"name": name})
    return prepare


class Seen(NamedTuple):
    source: str
    name: str
    out: dict[str, str]


_SEEN: dict[tuple[str, str], Seen] = {}


def _seen(source: str, cls: str) -> Seen:
    """Each source and class run once for all the outputs read from it."""
    if (source, cls) not in _SEEN:
        name = CLASSES[cls]
        logging.disable(logging.ERROR)
        try:
            with SimRun(_scenario(source, name), prepare=_gpu_named(source, name)) as run:
                run.poll(40)
                app = run.exporter.app
                out = {key: app.handle(Request(path, "", {})).body.decode()
                       for key, path in (("metrics", "/metrics"), ("page", "/"),
                                         ("json", "/diagnosis"))}
        finally:
            logging.disable(logging.NOTSET)
        answer = json.loads(out["json"])
        out["terminal"] = render_text(answer["findings"], color=False,
                                      coverage=answer.get("coverage"))
        _SEEN[(source, cls)] = Seen(source, name, out)
    return _SEEN[(source, cls)]


def _cases(output: str) -> list[tuple[str, str]]:
    return [(source, cls) for source, s in SOURCES.items() if output in s.outputs
            for cls in CLASSES]


def _ids(output: str) -> list[str]:
    return [f"{source}-{cls}" for source, cls in _cases(output)]


@pytest.fixture(scope="module", autouse=True)
def _forget() -> Iterator[None]:
    yield
    _SEEN.clear()


@pytest.mark.parametrize(("source", "cls"), _cases("metrics"), ids=_ids("metrics"))
def test_the_exposition_parses_back_to_one_value(source: str, cls: str) -> None:
    seen = _seen(source, cls)
    label = SOURCES[seen.source].label
    values = {s.labels[label] for family in text_string_to_metric_families(seen.out["metrics"])
              for s in family.samples if FOUND.fullmatch(s.labels.get(label, ""))}
    assert len(values) == 1, values
    (value,) = values
    assert not _raw_controls(value, allowed="\n"), repr(value)
    if seen.name.isprintable():
        assert value == seen.name


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


@pytest.mark.parametrize(("source", "cls"), _cases("page"), ids=_ids("page"))
def test_the_node_page_shows_the_name_as_text(source: str, cls: str) -> None:
    seen = _seen(source, cls)
    page = seen.out["page"]
    tags = _Tags()
    tags.feed(page)
    assert "b" not in tags.tags, "the name's <b> became markup"
    assert not _raw_controls(page, allowed="\n"), "a control character reached the page"
    shown = FOUND.findall(unescape(page))
    assert shown, "the page does not show the name"
    for text in shown:
        assert "\n" not in text, repr(text)  # a newline in a name is shown, not obeyed


@pytest.mark.parametrize(("source", "cls"), _cases("terminal"), ids=_ids("terminal"))
def test_the_terminal_gets_no_control_character(source: str, cls: str) -> None:
    seen = _seen(source, cls)
    text = seen.out["terminal"]
    assert not _raw_controls(text, allowed="\n"), _raw_controls(text, allowed="\n")
    owners = [line for line in text.splitlines() if line.startswith("  owner:")]
    assert owners and all(FOUND.search(line) for line in owners), text


@pytest.mark.parametrize(("source", "cls"), _cases("json"), ids=_ids("json"))
def test_the_json_gives_back_the_name(source: str, cls: str) -> None:
    seen = _seen(source, cls)
    answer = json.loads(seen.out["json"])
    pods = {o["pod"] for f in answer["findings"] for o in f.get("owners") or ()}
    assert seen.name in pods, pods
