"""The node page (``/``): why this node is slow, for a person with a browser.

A node summary (NVML, driver, GPUs by state, findings by severity), then one
card per GPU: its findings with their evidence in plain units, the fix, the
commands that confirm it and the runbook entry; its processes; charts of its
last 15 minutes. What the exporter cannot see (NVML down, a lost GPU, polls
that stopped) is said in words where the numbers would be.

Self-contained: one HTML document with its style and a few lines of script
(no external asset, no build step), so it works offline and behind the
exporter's TLS and basic auth. It is rendered at most once per poll and served
from memory like /metrics; the script refreshes it by fetching the same page,
so a browser left open costs the exporter what a scrape costs.

Every string from NVML, /proc or a scenario goes through ``_text`` (control
characters and reordering marks shown as escapes, then HTML-escaped).
"""

from __future__ import annotations

import base64
import gzip
import re
import shlex
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpu_exporter.baseline import DRIFTS
from gpu_exporter.diagnosis import coverage
from gpu_exporter.diagnosis.engine import FINDINGS, INPUTS_MISSING, JOBS, Finding, explanation
from gpu_exporter.diagnosis.evidence import evidence_line, percent
from gpu_exporter.diagnosis.finding import Consequence
from gpu_exporter.diagnosis.jobs import HOST_WIDE, Job, unit_label
from gpu_exporter.diagnosis.table import SEVERITY_ORDER
from gpu_exporter.diagnosis.visibility import visibility
from gpu_exporter.facts.cadence import stale_after
from gpu_exporter.facts.safetext import html_escape, terminal_safe
from gpu_exporter.history import History, Window
from gpu_exporter.nvml.session import normalize_bus_id
from gpu_exporter.poll.readings import GpuReading, ProcessReading
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.web.app import Request, Response, accepts_gzip
from gpu_exporter.web.charts import MAX_POINTS, Line, chart

HTML = "text/html; charset=utf-8"
# Sent with every page: no MIME sniffing, no framing by another site.
SAFE_HEADERS = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY"}
RUNBOOK_PATH = "runbook"  # relative: the page may sit behind a path prefix


def _text(value: object) -> str:
    """An outside string as page text: visible escapes for controls, then HTML."""
    return html_escape(terminal_safe(value))


STYLE = (
    ":root{color-scheme:light dark;--bg:#fff;--fg:#1b1f24;--muted:#59636e;--card:#f6f8fa;"
    "--line:#d1d9e0;--critical:#b3261e;--warning:#9a6700;--info:#0969da;--ok:#1a7f37;"
    "--l1:#0969da;--l2:#bc4c00;--ref:#818b98}"
    "@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9198a1;"
    "--card:#161b22;--line:#3d444d;--critical:#ff7b72;--warning:#d29922;--info:#58a6ff;"
    "--ok:#3fb950;--l1:#58a6ff;--l2:#ffa657;--ref:#9198a1}}"
    "*{box-sizing:border-box}"
    "body{margin:0 auto;padding:1em;max-width:72em;background:var(--bg);color:var(--fg);"
    "font:15px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif}"
    "h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin:0}h3{font-size:1em;margin:0}"
    "a{color:var(--info)}code,pre{font:13px/1.4 ui-monospace,'DejaVu Sans Mono',monospace}"
    "pre{margin:.2em 0;padding:.4em .6em;background:var(--bg);border:1px solid var(--line);"
    "border-radius:4px;overflow-x:auto;white-space:pre-wrap;word-break:break-all}"
    "nav{display:flex;flex-wrap:wrap;gap:.3em 1em;margin:.3em 0 1em}"
    ".summary{display:grid;grid-template-columns:repeat(auto-fit,minmax(13em,1fr));gap:.5em;"
    "margin:0 0 1em;padding:0}"
    ".summary div{background:var(--card);border:1px solid var(--line);border-radius:6px;"
    "padding:.5em .7em}.summary dt{color:var(--muted);font-size:.85em}"
    ".summary dd{margin:0;font-weight:600;overflow-wrap:anywhere}.summary div{min-width:0}"
    ".blind{border:2px solid var(--critical);border-radius:6px;padding:.7em 1em;"
    "margin:0 0 1em;font-weight:600}"
    ".gpu{background:var(--card);border:1px solid var(--line);border-radius:8px;"
    "padding:.8em 1em;margin:0 0 1em}"
    ".gpu>header{display:flex;flex-wrap:wrap;gap:.2em .8em;align-items:baseline}"
    ".gpu>header>*{min-width:0;overflow-wrap:anywhere}"
    ".facts{color:var(--muted);margin:.3em 0 .6em;overflow-wrap:anywhere}"
    ".finding{border-left:4px solid var(--line);padding:.1em 0 .1em .8em;margin:.7em 0}"
    ".finding.critical{border-color:var(--critical)}.finding.warning{border-color:var(--warning)}"
    ".finding.info{border-color:var(--info)}.finding p,.finding ul{margin:.25em 0}"
    ".sev{font-size:.8em;font-weight:700;text-transform:uppercase}"
    ".critical .sev,.bad{color:var(--critical)}.warning .sev,.warn{color:var(--warning)}"
    ".info .sev,.note{color:var(--info)}.ok{color:var(--ok)}.muted,.nodata{color:var(--muted)}"
    ".wrap{overflow-x:auto}.wrong{margin:0 0 1em}.wrong ul{margin:.3em 0;padding-left:1.2em}"
    "table{border-collapse:collapse;width:100%;font-size:.92em}"
    "th,td{border-bottom:1px solid var(--line);padding:.25em .5em;text-align:left;"
    "vertical-align:top}.procs th,.procs td{white-space:nowrap}td.num{text-align:right}"
    ".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(14em,1fr));gap:.6em;"
    "margin-top:.6em}"
    ".chart{margin:0}.chart figcaption{font-size:.85em;font-weight:600}"
    ".chart svg{display:block;width:100%;height:5em;background:var(--bg)}"
    ".frame{fill:none;stroke:var(--line)}polyline{fill:none;stroke-width:1.6;"
    "vector-effect:non-scaling-stroke}"
    "polyline.l1{stroke:var(--l1)}polyline.l2{stroke:var(--l2)}"
    "polyline.ref{stroke:var(--ref);stroke-dasharray:4 3}"
    "circle.l1{fill:var(--l1)}circle.l2{fill:var(--l2)}circle.ref{fill:var(--ref)}"
    ".axis{display:flex;justify-content:space-between;font-size:.75em;color:var(--muted)}"
    ".legend{display:flex;flex-wrap:wrap;gap:0 .8em;font-size:.8em}"
    ".key.l1{color:var(--l1)}.key.l2{color:var(--l2)}.key.ref{color:var(--muted)}"
    "#refreshed{color:var(--muted);font-size:.85em}"
)

# Refresh: fetch this same page (one cached body per poll) and swap <main>;
# on failure say so and keep what is shown. Credentials of a basic-auth or TLS
# client certificate session go along (same origin).
SCRIPT = (
    "(function(){var ms=%d*1000,note=document.getElementById('refreshed');"
    "function tick(){fetch(location.pathname,{cache:'no-store',credentials:'same-origin'})"
    ".then(function(r){if(!r.ok)throw new Error('HTTP '+r.status);return r.text();})"
    ".then(function(t){var d=new DOMParser().parseFromString(t,'text/html');"
    "var m=d.querySelector('main');if(m){document.querySelector('main').replaceWith(m);}"
    "note.textContent='Updated '+new Date().toLocaleTimeString();})"
    ".catch(function(e){note.textContent='Could not reach the exporter at '+"
    "new Date().toLocaleTimeString()+' ('+e.message+'): what is shown is older.';})"
    ".finally(function(){setTimeout(tick,ms);});}setTimeout(tick,ms);})();"
)

_SEVERITY_CLASS = {"critical": "bad", "warning": "warn", "info": "note"}


def _consequence_text(c: Consequence) -> str:
    """``GPU looks busy but its SMs mostly idle (utilization 100 %): a rank of
    the job lost its GPU ...``, for a consequence on another GPU."""
    what = c.row.summary if c.row is not None else "waits on the cause"
    seen = evidence_line(c.evidence)
    return f"{what}" + (f" ({seen})" if seen else "") + f": {c.why}"


def _waiting_notes(findings: Sequence[Finding], jobs: Sequence[Job]) -> dict[int, str]:
    """GPU -> what it waits on, for the GPUs whose rows a cause on another GPU
    explains: their card points at that cause instead of saying nothing."""
    notes: dict[int, str] = {}
    for f in findings:
        for c in f.consequences:
            if c.gpu != f.gpu and f.row in HOST_WIDE:
                notes.setdefault(c.gpu, '<p class="warn">This GPU\'s job is slowed by a cause '
                                 f'of the host, reported once on GPU {f.gpu}: '
                                 f'<a href="#gpu-{f.gpu}-{f.row.anchor}">'
                                 f"{html_escape(f.row.summary)}</a>.</p>")
            elif c.gpu != f.gpu:
                notes.setdefault(c.gpu, f'<p class="warn">This GPU waits on GPU {f.gpu}: '
                                 f'<a href="#gpu-{f.gpu}-{f.row.anchor}">'
                                 f"{html_escape(f.row.summary)}</a>.</p>")
    for j in jobs:
        rank = j.straggler_rank
        if j.cause is None and rank is not None:
            for c in j.consequences:
                notes.setdefault(c.gpu, f'<p class="warn">This GPU waits on {rank.label}, '
                                 f"the straggler of {_text(j.name)}: "
                                 '<a href="#jobs">cause not seen</a>.</p>')
    return notes


def _root_unit(j: Job) -> str:
    """Where a job's root cause is: its cause's GPU or MIG instance, or its
    straggler's."""
    if j.cause is not None:
        return unit_label(j.cause.gpu, j.cause.gpu_instance)
    rank = j.straggler_rank
    return "" if rank is None else rank.label


def _jobs(jobs: Sequence[Job]) -> str:
    """Each job's GPUs with their ranks' states, and the one cause that
    explains the rest where one does (a straggler, a fault across GPUs)."""
    items = []
    for j in jobs:
        ranks = ", ".join(f"{r.label} {r.state}" for r in j.ranks)
        root = j.root_cause()
        if root is None:
            cause = '<span class="muted">no cause across its GPUs</span>'
        else:
            cause = (f'<span class="{_SEVERITY_CLASS[str(root["severity"])]}">'
                     f'{_text(_root_unit(j))}: {_text(root["summary"])}</span>')
            checked = root.get("checked")
            if isinstance(checked, list) and checked:
                cause += f" (checked: {_text(', '.join(str(c) for c in checked))})"
        under = "".join(f"<li>{unit_label(c.gpu, c.gpu_instance)}: "
                        f"{_text(_consequence_text(c))}</li>"
                        for c in j.consequences)
        items.append(f"<li><strong>{_text(j.name)}</strong>: {ranks}. Root cause: {cause}"
                     + (f'<ul class="explained">{under}</ul>' if under else "") + "</li>")
    return f'<section class="jobs" id="jobs"><h2>Jobs</h2><ul>{"".join(items)}</ul></section>'
_STATES = {"R": "running", "S": "sleeping", "D": "waiting on I/O (D)", "Z": "zombie",
           "T": "stopped", "t": "stopped by a tracer", "I": "idle", "X": "dead"}


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _pct(v: float | None) -> str:
    return "—" if v is None else percent(v)


def _gib(v: float | None) -> str:
    return "—" if v is None else f"{v / 2**30:.1f} GiB"


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


class NodePage:
    """The ``/`` route: renders the newest snapshot once, then serves it."""

    def __init__(self, latest: Callable[[], Snapshot | None], history: History,
                 links: Callable[[], Sequence[tuple[str, str]]],
                 interval: Callable[[], float], wall_clock: Callable[[], float] = time.time,
                 hostname: str | None = None) -> None:
        """``latest``: the poller's newest snapshot; ``interval``: the time
        between polls now (a reload may change it)."""
        self._latest = latest
        self._history = history
        self._links = links
        self._interval = interval
        self._wall = wall_clock
        self._host = hostname if hostname is not None else socket.gethostname()
        self._lock = threading.Lock()
        # The snapshot and blind sentence the cached bodies were rendered for
        # (the snapshot held, so its identity is never reused meanwhile).
        self._snap: Snapshot | None = None
        self._blind: object = None
        self._bodies: dict[bool, bytes] = {}

    def __call__(self, req: Request) -> Response:
        snap = self._latest()
        vis = visibility(snap, self._wall(), stale_after(self._interval()))
        # A page is the same until the next poll, unless the exporter goes
        # blind in between (polls stop: the sentence says for how long).
        blind = vis.get("blind")
        compressed = accepts_gzip(req.headers.get("accept-encoding", ""))
        with self._lock:
            if not self._bodies or snap is not self._snap or blind != self._blind:
                self._snap, self._blind = snap, blind
                self._bodies = {False: self.render(snap, vis).encode()}
            body = self._bodies.get(compressed)
            if body is None:
                body = self._bodies[compressed] = gzip.compress(self._bodies[False],
                                                                compresslevel=1)
        headers = {"Vary": "Accept-Encoding", "Cache-Control": "no-store",
                   "Content-Security-Policy": self._policy(), **SAFE_HEADERS}
        if compressed:
            headers["Content-Encoding"] = "gzip"
        return Response(200, body, HTML, headers)

    def _refresh(self) -> int:
        # As often as Prometheus scrapes by default: a 15-minute chart does not
        # need more, and each refresh after a new poll renders the page once.
        return max(15, round(self._interval()))

    def _policy(self) -> str:
        """Only this page's own script runs (named by its hash, so markup that
        slipped through escaping could run none), and it may only fetch this
        page; nothing is loaded from anywhere."""
        # Loaded the first time the page is served, not at start: hashlib (with
        # OpenSSL's digests behind it) costs about 0.7 MiB, and most nodes are
        # only ever scraped.
        import hashlib

        digest = base64.b64encode(hashlib.sha256(
            (SCRIPT % self._refresh()).encode()).digest()).decode()
        return (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
                "connect-src 'self'; base-uri 'none'; form-action 'none'; "
                "frame-ancestors 'none'")

    # --- the document -------------------------------------------------------
    def render(self, snap: Snapshot | None, vis: Mapping[str, Any]) -> str:
        refresh = self._refresh()
        nav = "".join(f'<a href="{html_escape(p.lstrip("/") or ".")}">{html_escape(t)}</a>'
                      for p, t in [*self._links(), (RUNBOOK_PATH, "Runbook"),
                                   ("/-/healthy", "Health")])
        return (
            "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width,initial-scale=1'>"
            f"<title>GPU node {_text(self._host)}</title><style>{STYLE}</style></head><body>"
            f"<header><h1>Why is {_text(self._host)} slow?</h1><nav>{nav}</nav></header>"
            f"<main>{self._main(snap, vis)}</main>"
            f"<footer><p id='refreshed'>Refreshes every {refresh} s.</p></footer>"
            f"<script>{SCRIPT % refresh}</script></body></html>")

    def _main(self, snap: Snapshot | None, vis: Mapping[str, Any]) -> str:
        blind = vis.get("blind")
        if snap is None:
            return ('<div class="blind" role="alert">No poll has completed yet: the exporter '
                    "has not read the GPUs so far. This page fills in after the first poll."
                    "</div>")
        on: tuple[Finding, ...] = snap.derived(FINDINGS) or ()
        findings = sorted(on, key=lambda f: (SEVERITY_ORDER[f.row.severity], f.gpu, f.row.key))
        gpus = snap.readings.gpus
        cov = coverage.answer(snap)
        parts = [self._summary(snap, vis, findings, cov)]
        if blind:
            parts.append(f'<div class="blind" role="alert">Cannot see the GPUs: {_text(blind)}. '
                         "With no readings there are no findings, so this node is not known "
                         "to be healthy.</div>")
        if findings:
            items = "".join(
                f'<li><span class="{_SEVERITY_CLASS[f.row.severity]}">'
                f'{f.row.severity}</span> <a href="#gpu-{f.gpu}-{f.row.anchor}">GPU {f.gpu}</a>: '
                f"{html_escape(f.row.summary)}</li>" for f in findings)
            parts.append(f'<section class="wrong"><h2>What is wrong</h2><ul>{items}</ul>'
                         "</section>")
        all_jobs: tuple[Job, ...] = snap.derived(JOBS) or ()
        jobs = [j for j in all_jobs if len(j.ranks) > 1 or j.root_cause()]
        if jobs:
            parts.append(_jobs(jobs))
        if not blind and gpus:
            parts.append(_coverage(cov))
        missing = snap.derived(INPUTS_MISSING) or ()
        if missing:
            parts.append('<p class="warn">The diagnosis went without these readers, so the '
                         f"rows that need them were not judged: {_text(', '.join(missing))}.</p>")
        drifts = snap.derived(DRIFTS) or ()
        if drifts:
            items = "".join(f"<li>GPU {d.gpu} {_text(d.field)}: expected {_text(d.expected)}, "
                            f"found {_text(d.found)}</li>" for d in drifts)
            parts.append(f"<section><h2>Drift from the node baseline</h2><ul>{items}</ul>"
                         "</section>")
        if gpus is None:
            parts.append('<p class="muted">The device reader is switched off: no GPU is read.'
                         "</p>")
        elif not gpus and not blind:
            parts.append('<p class="muted">NVML lists no GPU on this node.</p>')
        by_gpu: dict[int, list[Finding]] = {}
        for f in findings:
            by_gpu.setdefault(f.gpu, []).append(f)
        procs: dict[int, list[ProcessReading]] | None = None
        if snap.readings.processes is not None:
            procs = {}
            for p in snap.readings.processes:
                procs.setdefault(p.gpu, []).append(p)
        unchecked: dict[str, int] = {}
        for entry in cov["not_checked"]:
            for gpu in entry["gpus"]:
                unchecked[gpu] = unchecked.get(gpu, 0) + len(entry["checks"])
        notes = _waiting_notes(findings, all_jobs)
        for r in sorted((gpus or {}).values(), key=lambda g: g.index):
            parts.append(self._card(snap, r, by_gpu.get(r.index, []),
                                    None if procs is None else procs.get(r.index, []),
                                    unchecked.get(str(r.index), 0), notes.get(r.index, "")))
        return "".join(parts)

    def _summary(self, snap: Snapshot, vis: Mapping[str, Any],
                 findings: Sequence[Finding], cov: Mapping[str, Any]) -> str:
        gpus = snap.readings.gpus or {}
        up = sum(1 for g in gpus.values() if g.up)
        lost = len(gpus) - up
        drivers = sorted({g.driver_version for g in gpus.values() if g.driver_version})
        if vis.get("nvml_up"):
            nvml = '<span class="ok">answering</span>'
        else:
            nvml = '<span class="bad">not available</span>'
        state = f"{up} up" + (f', <span class="bad">{lost} lost</span>' if lost else "")
        counts = {sev: sum(1 for f in findings if f.row.severity == sev)
                  for sev in SEVERITY_ORDER}
        in_part = ' · <a class="warn" href="#coverage">checked only in part</a>'
        if findings:
            found = ", ".join(f'<span class="{_SEVERITY_CLASS[s]}">'
                              f"{n} {s}</span>" if n else f"{n} {s}" for s, n in counts.items())
            if not cov["complete"]:
                found += in_part
        elif vis.get("blind"):
            found = '<span class="bad">unknown: the GPUs cannot be seen</span>'
        elif not cov["complete"]:
            found = f"none in the checks that ran{in_part}"
        else:
            found = '<span class="ok">none: every GPU looks healthy</span>'
        age = self._wall() - snap.timestamp
        items = [("NVML", nvml), ("Driver", _text(", ".join(drivers)) or "unknown"),
                 ("GPUs", f"{len(gpus)}: {state}" if gpus else "none seen"),
                 ("Findings", found),
                 ("Last poll", f"{_ago(age)} ago ({_when(snap.timestamp)})")]
        body = "".join(f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in items)
        return f'<dl class="summary">{body}</dl>'

    def _card(self, snap: Snapshot, r: GpuReading, findings: Sequence[Finding],
              procs: Sequence[ProcessReading] | None, unchecked: int, waits: str = "") -> str:
        state = '<span class="ok">up</span>' if r.up else '<span class="bad">lost</span>'
        worst = ", ".join(f'<span class="{_SEVERITY_CLASS[f.row.severity]}">'
                          f"{f.row.severity}</span>" for f in findings[:1])
        head = (f"<header><h2>GPU {r.index}</h2><span>{_text(r.name) or 'unnamed'}</span>"
                f"<span>{state}</span>{worst}</header>")
        # Pod, namespace and container names come from the kubelet, job ids
        # from cgroup paths: escaped like every other external string.
        attribution = snap.readings.attribution
        owners = attribution.owners.get(r.index, ()) if attribution is not None else ()
        if owners:
            head += ('<p class="owner">Allocated to '
                     + ", ".join(_text(o.describe()) for o in owners) + "</p>")
        if not r.up:
            facts = ('<p class="bad">NVML cannot reach this GPU: it reads nothing from it '
                     "until it answers again. Its last readings are in the charts below.</p>")
        else:
            facts = f'<p class="facts">{self._facts(r)}</p>'
        if findings:
            found = "".join(self._finding(snap, f, _placeholders(f, r, procs))
                            for f in findings)
        elif waits:
            found = ""
        elif r.up and unchecked:
            found = ('<p class="warn">No finding in the checks that ran; '
                     f'<a href="#coverage">{_plural(unchecked, "check")} could not run</a> on '
                     "this GPU.</p>")
        elif r.up:
            found = '<p class="ok">No finding: nothing on this GPU matches the table.</p>'
        else:
            found = ""
        return (f'<section class="gpu" id="gpu-{r.index}">{head}{facts}{waits}{found}'
                f"{self._processes(r, procs)}{self._charts(r)}</section>")

    @staticmethod
    def _facts(r: GpuReading) -> str:
        bits = [f"utilization {_pct(r.utilization)}",
                f"memory {_gib(r.memory_used_bytes)} of {_gib(r.memory_total_bytes)}"]
        if r.power_watts is not None:
            limit = f" of {r.power_limit_watts:.0f} W" if r.power_limit_watts else ""
            bits.append(f"power {r.power_watts:.0f} W{limit}")
        if r.temperature_celsius is not None:
            slow = f" (slowdown at {r.slowdown_celsius:.0f} °C)" if r.slowdown_celsius else ""
            bits.append(f"{r.temperature_celsius:.0f} °C{slow}")
        sm, sm_max = r.clocks_hz.get("sm"), r.clocks_max_hz.get("sm")
        if sm is not None:
            bits.append(f"SM clock {sm / 1e6:.0f}" + (f" of {sm_max / 1e6:.0f}" if sm_max else "")
                        + " MHz")
        if r.pcie_generation is not None and r.pcie_width is not None:
            most = (f" (max Gen{r.pcie_generation_max} x{r.pcie_width_max})"
                    if r.pcie_generation_max and r.pcie_width_max else "")
            bits.append(f"PCIe Gen{r.pcie_generation} x{r.pcie_width}{most}")
        bits.append(f"bus {_text(r.pci_bus_id)}" if r.pci_bus_id else "")
        return " · ".join(b for b in bits if b) + f" · <code>{_text(r.uuid)}</code>"

    @staticmethod
    def _finding(snap: Snapshot, f: Finding, fill: Callable[[str], str]) -> str:
        row = f.row
        explained = {f"explains_{e.row.symptom}_{e.row.cause}" for e in f.explains}
        shown = {k: v for k, v in f.evidence.items() if k not in explained}
        evidence = "".join(f"<li>{_text(evidence_line({k: v}))}</li>" for k, v in shown.items())
        ev_block = f'<ul class="evidence">{evidence}</ul>' if evidence else ""
        also = "".join(f"<li>{_text(e.row.summary)}: {_text(explanation(e, f.evidence))}</li>"
                       for e in f.explains)
        also += "".join(f"<li>GPU {c.gpu}: {_text(_consequence_text(c))}</li>"
                        for c in f.consequences)
        also_block = (f'<p>It also explains:</p><ul class="explained">{also}</ul>'
                      if also else "")
        confirm = "".join(f"<pre>{html_escape(fill(c))}</pre>" for c in row.confirm)
        return (
            f'<article class="finding {row.severity}" id="gpu-{f.gpu}-{row.anchor}">'
            f'<span class="sev">{row.severity}</span> '
            f'<h3 class="what">{html_escape(row.summary)}</h3>'
            f'<p class="muted">symptom <code>{row.symptom}</code> → cause <code>{row.cause}'
            f"</code> · for {_ago(snap.timestamp - f.since)}</p>"
            f'<p class="evidence-head">Evidence:</p>{ev_block}{also_block}'
            f'<p class="fix"><strong>Fix:</strong> {html_escape(row.fix)}</p>'
            f"<p>Confirm on the node:</p>{confirm}"
            f'<p><a class="runbook" href="{RUNBOOK_PATH}#{row.anchor}">Runbook: '
            f"{row.anchor}</a></p></article>")

    @staticmethod
    def _processes(r: GpuReading, procs: Sequence[ProcessReading] | None) -> str:
        if procs is None:
            return '<p class="muted">Processes are not read (the processes reader is off).</p>'
        if not procs:
            return '<p class="muted">No process is using this GPU.</p>' if r.up else ""
        rows = []
        for p in procs:
            state = "—" if p.state is None else (
                f"{_text(p.state)} ({_STATES[p.state]})" if p.state in _STATES
                else _text(p.state))
            cpu = _pct(p.cpu_ratio)
            owner = []
            if p.pod_uid:
                owner.append(f"pod {_text(p.pod_uid)}")
            if p.container_id:
                owner.append(f"container {_text(p.container_id[:12])}")
            rows.append(
                f'<tr class="proc"><td class="num">{p.pid}</td><td>{_text(p.comm)}</td>'
                f'<td class="num">{_gib(p.memory_used_bytes)}</td>'
                f'<td class="num">{_pct(p.sm_utilization)}</td><td class="num">{cpu}</td>'
                f"<td>{state}</td><td>{' · '.join(owner) or '—'}</td></tr>")
        return ('<div class="wrap"><table class="procs"><caption class="muted">'
                f"{_plural(len(procs), 'process', 'processes')}</caption><tr><th>PID</th>"
                "<th>Command</th><th>GPU memory</th><th>SM</th><th>CPU</th><th>State</th>"
                f"<th>Pod / container</th></tr>{''.join(rows)}</table></div>")

    def _charts(self, r: GpuReading) -> str:
        window = self._history.window(r.index, MAX_POINTS)
        if window is None or not window.times:
            return '<p class="nodata">No history kept for this GPU yet.</p>'
        return f'<div class="charts">{"".join(_gpu_charts(r, window))}</div>'


# The table's commands name the process and the device by these words.
_PLACEHOLDER = re.compile(r"\b(PID|BUS_ID)\b")


def _placeholders(f: Finding, r: GpuReading,
                  procs: Sequence[ProcessReading] | None) -> Callable[[str], str]:
    """What fills a finding's commands in: PID is the process its evidence
    names, else the GPU's process holding the most memory; BUS_ID the GPU's
    PCI address as sysfs and lspci write it. Each is quoted for the shell (a
    process or bus ID is outside text); a word with nothing known stays."""
    pid = str(f.evidence.get("process_pid", ""))
    if not pid and procs:
        pid = str(max(procs, key=lambda p: p.memory_used_bytes or 0.0).pid)
    values = {"PID": pid, "BUS_ID": normalize_bus_id(r.pci_bus_id) if r.pci_bus_id else ""}

    def fill(command: str) -> str:
        return _PLACEHOLDER.sub(lambda m: shlex.quote(terminal_safe(values[m.group(1)]))
                                if values[m.group(1)] else m.group(1), command)
    return fill


def _coverage(cov: Mapping[str, Any]) -> str:
    """The checks that could not run, one item per reason and set of GPUs; the
    GPUs still settling; and, folded, the checks the boards or driver do not
    offer and those that had nothing to check."""
    def item(entry: Mapping[str, Any]) -> str:
        checks = coverage.checks_text(entry['checks'])
        return (f"<li>{_text(coverage.gpu_list(entry['gpus']))}: "
                + (f"<code>{_text(checks)}</code>: " if checks else "")
                + f"{_text(coverage.reason_text(entry))}</li>")

    items = []
    settling = cov.get("settling")
    if settling:
        items.append(f"<li>{_text(coverage.gpu_list(settling['gpus']))}: still watching: a "
                     f"finding needs {cov['window_seconds']:g} s of polls, "
                     f"{settling['seconds_left']:g} s to go.</li>")
    items += [item(e) for e in cov["not_checked"]]
    out = ""
    if items:
        out = ('<section class="wrong" id="coverage"><h2>Checked only in part</h2>'
               "<p>These checks could not run: finding nothing in the others says nothing "
               f"about them.</p><ul>{''.join(items)}</ul></section>")
    offered = [item(e) for e in cov["not_available"]]
    if offered:
        out += ('<details class="muted wrong"><summary>Checks this node\'s boards or driver do '
                f"not offer ({len(offered)})</summary><ul>{''.join(offered)}</ul></details>")
    quiet = [item(e) for e in cov["nothing_to_check"]]
    if quiet:
        out += ('<details class="muted wrong"><summary>Checks with nothing to check on this '
                f"node ({len(quiet)})</summary><ul>{''.join(quiet)}</ul></details>")
    return out


def _last(values: Sequence[float | None]) -> float | None:
    for v in reversed(values):
        if v is not None:
            return v
    return None


def _fmt(v: float | None, scale: float, unit: str) -> str:
    if v is None:
        return "not read"
    if unit == "%":  # a ratio: the one rule for shares (evidence.percent)
        return percent(v)
    return f"{v * scale:.0f} {unit}".rstrip()


def _now(values: Sequence[float | None], scale: float, unit: str) -> str:
    """The newest value; for a series no longer read (a lost GPU), the last one
    it had, said as such."""
    if values and values[-1] is not None:
        return _fmt(values[-1], scale, unit)
    last = _last(values)
    return "not read" if last is None else f"not read now (last {_fmt(last, scale, unit)})"


def _gpu_charts(r: GpuReading, w: Window) -> list[str]:
    s = w.series
    now = w.times[-1]
    out = []
    util, sm_active = s["utilization"], s["sm_active"]
    out.append(chart("Utilization beside SM activity", w.times, now, [
        Line("utilization", util, "l1", _now(util, 100, "%")),
        Line("SM activity", sm_active, "l2",
             _now(sm_active, 100, "%") if any(v is not None for v in sm_active)
             else "not measured on this GPU")], 1.0, "100 %"))
    power, limit = s["power_watts"], s["power_limit_watts"]
    top = max([v for v in (*power, *limit) if v is not None] or [1.0]) * 1.05
    out.append(chart("Power against its limit", w.times, now, [
        Line("power", power, "l1", _now(power, 1, "W")),
        Line("limit", limit, "ref", _now(limit, 1, "W"))], top, f"{top:.0f} W"))
    clock = s["sm_clock_hz"]
    clock_max = r.clocks_max_hz.get("sm")
    ref = [clock_max] * len(w.times) if clock_max else [None] * len(w.times)
    top = max([v for v in (*clock, clock_max or 0.0) if v is not None] or [1.0]) * 1.05
    out.append(chart("SM clock against its max", w.times, now, [
        Line("SM clock", clock, "l1", _now(clock, 1e-6, "MHz")),
        Line("max", ref, "ref", _fmt(clock_max, 1e-6, "MHz"))], top, f"{top / 1e6:.0f} MHz"))
    temp = s["temperature_celsius"]
    slow = r.slowdown_celsius
    top = max([v for v in (*temp, slow or 0.0) if v is not None] or [1.0]) * 1.1
    out.append(chart("Temperature against slowdown", w.times, now, [
        Line("temperature", temp, "l1", _now(temp, 1, "°C")),
        Line("slowdown", [slow] * len(w.times), "ref", _fmt(slow, 1, "°C"))],
        top, f"{top:.0f} °C"))
    gen, width = s["pcie_generation"], s["pcie_width"]
    gen_max = r.pcie_generation_max or max([v for v in gen if v is not None] or [1.0])
    width_max = r.pcie_width_max or max([v for v in width if v is not None] or [1.0])
    gen_ratio = [None if v is None else v / gen_max for v in gen]
    width_ratio = [None if v is None else v / width_max for v in width]
    g, wd = gen[-1], width[-1]
    out.append(chart("PCIe link against its max", w.times, now, [
        Line("generation", gen_ratio, "l1",
             "not read" if g is None else f"Gen{g:.0f} of Gen{gen_max:.0f}"),
        Line("width", width_ratio, "l2",
             "not read" if wd is None else f"x{wd:.0f} of x{width_max:.0f}")],
        1.0, "100 % of max"))
    return out
