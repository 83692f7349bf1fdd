"""The node page (``/``) and the served runbook, read as HTML: what a person
sees when a GPU is wrong, when the exporter cannot see, and what a hostile
process name can (not) do to the page. The same page in a real browser:
tests/web/test_node_page_browser.py."""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.diagnosis.evidence import percent
from gpu_exporter.simulator import load_scenario
from gpu_exporter.simulator.model import Scenario
from gpu_exporter.web.app import Request, Response
from tests.simnode import SimRun


def get(run: SimRun, path: str, headers: dict[str, str] | None = None) -> Response:
    return run.exporter.app.handle(Request(path, "", headers or {}))


class Elements(HTMLParser):
    """Every element's tag and attributes, and the page's visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text.append(data)

    def visible(self) -> str:
        return " ".join(" ".join(self.text).split())


def parse(body: bytes) -> Elements:
    page = Elements()
    page.feed(body.decode())
    return page


@pytest.mark.parametrize(("comm", "shown"), [
    # The kernel keeps 15 characters of a name: enough for markup with a handler.
    ("<img/onerror=a>", "<img/onerror=a>"),
    ("<b>x</b>\\e[31m\\u202e", "<b>x</b>\\x1b[31m\\u202e"),
])
def test_a_hostile_process_name_stays_text(tmp_path: Path, comm: str, shown: str) -> None:
    """A process named with markup, an escape sequence or a reordering mark
    shows as those characters: no element of its own, nothing acting."""
    scenario = tmp_path / "evil-name.yaml"
    scenario.write_text(
        "name: evil-name\ndescription: A process named to inject markup.\n"
        "extends: memory-held-sm-idle-process-stalled\n"
        f'process_changes:\n  24107: {{comm: "{comm}"}}\n')
    with SimRun(str(scenario)) as run:
        run.poll(60)
        body = get(run, "/").body
    page = parse(body)
    assert [tag for tag, _ in page.tags if tag in ("script", "img", "b")] == ["script"]  # ours
    assert not any(k.startswith("on") for _, attrs in page.tags for k in attrs)
    # In the process table and in the finding's evidence.
    assert page.visible().count(shown) >= 2, page.visible()
    assert "\x1b" not in body.decode() and "\u202e" not in body.decode()


def test_each_finding_shows_summary_evidence_fix_confirm_and_runbook() -> None:
    with SimRun("mixed") as run:
        run.poll(120)
        findings = run.exporter.poller.latest.derived(FINDINGS) or ()
        page_source = get(run, "/").body.decode()
        page = parse(page_source.encode())
        runbook = parse(get(run, "/runbook").body)
    text = page.visible()
    anchors = {attrs.get("id") for _, attrs in runbook.tags}
    links = [attrs["href"] for tag, attrs in page.tags
             if tag == "a" and "runbook" in (attrs.get("class") or "")]
    assert len(findings) >= 5
    # The commands that confirm a finding name the GPU's own device and process:
    # no placeholder left where the card shows both.
    confirm = [html.unescape(m) for m in re.findall(r"<pre>(.*?)</pre>", page_source)]
    assert not [c for c in confirm if re.search(r"\b(PID|BUS_ID)\b", c)], confirm
    assert "lspci -vv -s 0000:5d:00.0 | grep -E 'LnkCap|LnkSta'" in confirm  # GPU 3, x8
    assert "py-spy dump --pid 24107" in confirm  # GPU 7's stalled process
    for f in findings:
        assert f.row.summary in text and f.row.fix in text
        for command in f.row.confirm:
            filled = command.replace("BUS_ID", "0000:5d:00.0").replace("PID", "24107")
            assert command in confirm or filled in confirm, command
        assert f"runbook#{f.row.anchor}" in links
        assert f.row.anchor in anchors, f"/runbook has no #{f.row.anchor}"
    assert "power limit 450 W" in text and "pcie link width 8" in text
    # Processes with what is known of their owner.
    assert "24100 python 58.6 GiB" in text
    assert "pod 6f1d3c2a-9b7e-4c1d-8e2f-0a1b2c3d4e5f" in text


def test_every_runbook_section_of_the_table_is_served() -> None:
    with SimRun("healthy") as run:
        resp = get(run, "/runbook")
    assert resp.status == 200 and resp.content_type.startswith("text/html")
    ids = {attrs.get("id") for _, attrs in parse(resp.body).tags}
    assert {row.anchor for row in t.ROWS} <= ids
    assert "How the diagnosis picks one root cause" in parse(resp.body).visible()


def _section(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def test_the_runbook_quotes_the_thresholds_the_exporter_runs_with() -> None:
    """Rendered by the exporter from the table, not copied from the docs: a
    site's own threshold is the one its node's runbook states."""
    row = t.IDLE_DATA_PIPELINE_IO
    with SimRun("healthy", diagnosis={"iowait_high": 0.35}) as run:
        text = parse(get(run, "/runbook").body).visible()
    section = _section(text, row.anchor, "Confirm on the node")
    assert "host's iowait (at least 35 %)" in section, section
    for command in row.confirm:
        assert command in text
    assert row.fix in text and row.escalate in text


def test_the_runbook_and_docs_runbook_say_the_same_of_every_row() -> None:
    """The exporter's page and the mixin's docs/runbook.md are two renderings of
    one table and one guide: every row's fix, escalation and confirming commands,
    every Xid of every tier and every precedence pair appear in both."""
    from gpu_exporter.diagnosis.precedence import PRECEDENCE
    from gpu_exporter.facts.xids import TIERS
    from gpu_exporter.settings.thresholds import DiagnosisConfig

    docs = (Path(__file__).resolve().parents[2] / "docs" / "runbook.md").read_text()
    with SimRun("healthy") as run:
        page = parse(get(run, "/runbook").body)
    text = page.visible()
    for row in t.ROWS:
        for words in (row.fix, row.escalate, row.summary, *row.confirm):
            assert words in docs and words in text, words
    cfg = DiagnosisConfig()
    for tier in TIERS:
        tier_text = _section(text, f"Xid tier: {tier}", "Xid tier" if tier != TIERS[-1] else
                             "How the diagnosis")
        for code in getattr(cfg, f"{tier}_xids"):
            assert f" {code} " in f" {tier_text} ", (tier, code)
    links = {attrs["href"] for tag, attrs in page.tags if tag == "a" and attrs.get("href")}
    for edge in PRECEDENCE:
        if not edge.restates and edge.cause is not t.GPU_LOST:
            assert f"#{edge.consequence.anchor}" in links
            assert edge.why in docs and edge.why in text


def test_what_the_exporter_cannot_see_is_said_in_words() -> None:
    with SimRun("fault-driver-not-loaded") as run:
        assert "No poll has completed yet" in parse(get(run, "/").body).visible()
        run.poll(10)
        text = parse(get(run, "/").body).visible()
    assert "Cannot see the GPUs: NVML is not available: the NVIDIA kernel driver is not " \
           "loaded" in text
    assert "not known to be healthy" in text and "none: every GPU looks healthy" not in text

    with SimRun("gpu-lost") as run:
        run.poll(60)
        text = parse(get(run, "/").body).visible()
        assert "NVML cannot reach this GPU" in text
        assert "not read now (last" in text  # its charts keep the readings it had
        # Polls stop: the newest one no longer speaks for now.
        run.clock.advance(120)
        stale = parse(get(run, "/").body).visible()
    assert "Cannot see the GPUs: the exporter's newest poll is 120s old" in stale
    assert "Last poll 2 min ago" in stale


def _on_branch(scenario: str, driver: str) -> Scenario:
    data = load_scenario(scenario).model_dump(exclude_unset=True)
    data.setdefault("node", {})["driver"] = driver
    return Scenario.model_validate(data)


def test_a_node_checked_only_in_part_is_not_called_healthy() -> None:
    """A reader switched off: the page says which checks could not run on
    which GPUs, once per reason, and no card says "nothing matches". A
    driver before R565, which gives no recovery action, is a fact of the
    node: the page calls the healthy node healthy and lists it, folded."""
    with SimRun("healthy", collectors={"gpm": False}) as run:
        run.poll(40)
        text = parse(get(run, "/").body).visible().replace(" : ", ": ")
    assert "healthy" not in text.replace("not known to be healthy", "")
    assert "Findings none in the checks that ran · checked only in part" in text
    assert ("GPUs 0-7: utilization_inflated/small_kernels, memory_bound/dram_bandwidth: the "
            "gpm reader is switched off (--no-collector.gpm)") in text
    assert text.count("No finding in the checks that ran; 2 checks could not run on this "
                      "GPU.") == 8
    assert "nothing on this GPU matches the table" not in text

    with SimRun(_on_branch("healthy", "R535")) as run:
        run.poll(40)
        old = parse(get(run, "/").body).visible().replace(" : ", ": ")
        coverage = json.loads(get(run, "/diagnosis").body)["coverage"]
    assert "Findings none: every GPU looks healthy" in old
    assert "checked only in part" not in old
    # Each group /diagnosis lists, counted on the page: the recovery action,
    # the fabric's health and the newest boards' readings the H100 lacks.
    assert len(coverage["not_available"]) >= 3
    assert ("Checks this node's boards or driver do not offer "
            f"({len(coverage['not_available'])})") in old
    assert ("GPUs 0-7: recovery_action (gpu_reset, node_reboot, drain_p2p, drain_and_reset): "
            "not available on NVIDIA H100 80GB HBM3 / driver R535: NVML gives no recovery "
            "action (driver R535 is older than R565, the first to have it)") in old
    # The checks with no subject here are said, apart: no kubelet on this node.
    assert len(coverage["nothing_to_check"]) >= 2
    assert ("Checks with nothing to check on this node "
            f"({len(coverage['nothing_to_check'])})") in old

    with SimRun(_on_branch("healthy", "R580")) as run:
        run.poll(5)  # the window is still filling
        early = parse(get(run, "/").body).visible()
        run.poll(35)
        settled = parse(get(run, "/").body).visible()
    assert "GPUs 0-7: still watching: a finding needs 30 s of polls" in early
    assert "every GPU looks healthy" not in early
    assert "Findings none: every GPU looks healthy" in settled
    assert "Checked only in part" not in settled


def test_a_hostile_bus_id_or_process_in_a_command_stays_one_quoted_word() -> None:
    """The page fills a command's PID and BUS_ID from NVML and /proc: quoted
    for the shell (and escaped for HTML afterwards), so a copied command runs
    only what the table wrote."""
    from gpu_exporter.diagnosis.engine import Finding
    from gpu_exporter.poll.readings import GpuReading, ProcessReading
    from gpu_exporter.web.doctor import _placeholders

    gpu = GpuReading(index=3, uuid="GPU-x", up=True, pci_bus_id="00000000:5D:00.0$(reboot)")
    finding = Finding(3, "GPU-x", t.PCIE_ERRORS, {}, 0.0)
    procs = [ProcessReading(gpu=3, pid=41, comm="a", memory_used_bytes=1.0, sm_utilization=0.0),
             ProcessReading(gpu=3, pid=42, comm="b", memory_used_bytes=9.0, sm_utilization=0.0)]
    fill = _placeholders(finding, gpu, procs)
    assert fill("cat /sys/bus/pci/devices/BUS_ID/aer_dev_correctable") == \
        "cat /sys/bus/pci/devices/'0000:5d:00.0$(reboot)'/aer_dev_correctable"
    assert fill("top -H -p PID") == "top -H -p 42"  # the process holding the most memory
    named = Finding(3, "GPU-x", t.IDLE_PROCESS_STALLED, {"process_pid": "41"}, 0.0)
    assert _placeholders(named, gpu, procs)("py-spy dump --pid PID") == "py-spy dump --pid 41"
    # Nothing known: the word stays, for the reader to fill in.
    assert _placeholders(finding, GpuReading(index=0, uuid="u", up=True), None)(
        "lspci -s BUS_ID; top -p PID") == "lspci -s BUS_ID; top -p PID"


def test_a_card_counts_its_processes_and_shows_cpu_as_its_evidence_does(
        tmp_path: Path) -> None:
    """Two processes read "2 processes"; a stalled process's CPU reads the
    same in its finding's evidence and in the process table (one rounding
    rule, one formatter: it read 0 % in one and 1 % in the other)."""
    scenario = tmp_path / "two-procs.yaml"
    scenario.write_text(
        "name: two-procs\ndescription: 'GPU 7 stalled, with a helper process beside it.'\n"
        "extends: mixed\nprocess_changes:\n  24107: {cpu_ratio: 0.0044, state: S}\n"
        "processes:\n"
        # Stuck at a barrier: it wakes twice a second, as mixed's GPU 7 does.
        "  - {pid: 24107, comm: python, gpus: [7], gpu_memory_ratio: 0.7, sm_utilization: 0.0,"
        " cpu_ratio: 0.0044, state: S, voluntary_ctxt_switches_per_s: 2}\n"
        "  - {pid: 24207, comm: helper, gpus: [7], gpu_memory_ratio: 0.06, sm_utilization: 0.0,"
        " cpu_ratio: 0.0, state: S}\n")
    with SimRun(str(scenario)) as run:
        snap = run.poll(60)
        body = get(run, "/").body.decode()
    [stalled] = [f for f in snap.derived(FINDINGS) or () if f.row.cause == "process_stalled"]
    card = re.search(r'<section class="gpu" id="gpu-7">(.*?)</section>', body, re.S)
    assert card is not None
    assert '<caption class="muted">2 processes</caption>' in card.group(1)
    row = re.search(r'<tr class="proc"><td class="num">24107</td>(.*?)</tr>', card.group(1))
    assert row is not None
    cpu_cell = re.findall(r'<td class="num">([^<]*)</td>', row.group(1))[-1]
    assert f"process cpu {cpu_cell}" in html.unescape(card.group(1)), stalled.evidence


@given(st.floats(min_value=0.0, max_value=1.0))
def test_a_share_reads_the_same_rounded_or_not(ratio: float) -> None:
    """The evidence keeps ratios to 0.1 %; shown, they read as the raw value."""
    assert percent(round(ratio, 3)) == percent(ratio)


def test_rendered_once_per_poll_and_served_compressed() -> None:
    with SimRun("mixed") as run:
        run.poll(5)
        first, again = get(run, "/"), get(run, "/")
        assert first.body is again.body  # one rendering per poll
        zipped = get(run, "/", {"accept-encoding": "gzip"})
        assert zipped.headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(zipped.body) == first.body
        run.poll(1)
        assert get(run, "/").body is not first.body


def test_charts_have_points_for_every_gpu_that_answered() -> None:
    with SimRun("gpu-lost") as run:
        run.poll(30)
        body = get(run, "/").body.decode()
    cards = re.findall(r'<section class="gpu" id="gpu-(\d+)">(.*?)</section>', body)
    assert len(cards) == 8
    for _, card in cards:
        charts = re.findall(r'<figure class="chart">(.*?)</figure>', card)
        assert len(charts) == 5
        for c in charts:
            points = re.findall(r'<polyline class="l\d" points="([^"]+)"', c)
            assert points and all(len(p.split()) >= 2 for p in points), c



def _axes(card: str) -> list[tuple[str, str, list[float]]]:
    """Each chart of a card: its time axis's start, its value axis, and the x
    of every point drawn."""
    out = []
    for c in re.findall(r'<figure class="chart">(.*?)</figure>', card):
        axis = re.search(r'<div class="axis"><span>&minus;([^<]+)</span><span>0 to ([^<]+)'
                         r"</span><span>now</span></div>", c)
        assert axis is not None, c
        xs = [float(p.split(",")[0]) for pts in re.findall(r'points="([^"]+)"', c)
              for p in pts.split()]
        out.append((axis.group(1), html.unescape(axis.group(2)), xs))
    return out


@pytest.mark.parametrize(("seconds", "interval", "back", "first_x"), [
    (30, 2.0, "60 s", 150.0),  # a minute at least: 30 s fill the right half
    (300, 5.0, "5 min", 0.0),  # the time collected spans the whole chart
    (1200, 10.0, "15 min", 0.0),  # never more than the 15 minutes kept
])
def test_the_charts_span_the_time_collected_and_every_axis_says_its_unit(
        seconds: int, interval: float, back: str, first_x: float) -> None:
    with SimRun("healthy") as run:
        run.poll(seconds, interval=interval)
        body = get(run, "/").body.decode()
    card = re.search(r'<section class="gpu" id="gpu-0">(.*?)</section>', body, re.S)
    assert card is not None
    axes = _axes(card.group(1))
    assert len(axes) == 5
    units = []
    for start, top, xs in axes:
        assert start == back
        assert min(xs) == pytest.approx(first_x, abs=8.0) and max(xs) == pytest.approx(300.0)
        units.append(top.split(" ", 1)[1])
    assert units == ["%", "W", "MHz", "°C", "% of max"]


def test_only_the_pages_own_script_may_run() -> None:
    """The Content-Security-Policy names the page's one script by its hash: a
    script that slipped through escaping would not run, nothing loads from
    elsewhere, and the refresh may fetch only this exporter."""
    with SimRun("healthy") as run:
        run.poll()
        resp = get(run, "/")
        runbook = get(run, "/runbook")
    policy = resp.headers["Content-Security-Policy"]
    scripts = re.findall(r"<script>(.*?)</script>", resp.body.decode(), re.S)
    assert len(scripts) == 1
    assert "Refreshes every 15 s." in resp.body.decode()  # the default 1 s interval
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert "script-src" not in runbook.headers["Content-Security-Policy"]
    for r in (resp, runbook):
        assert r.headers["X-Content-Type-Options"] == "nosniff"

