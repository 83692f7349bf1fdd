"""``/runbook``: the runbook served by the exporter, so a finding's link on the
node page works on a node with no internet. Rendered here from the diagnosis
table (one section per row, headed by the row's anchor) and the diagnosis
guide (``diagnosis/guide.py``: the Xid tiers, how one root cause is picked),
with the thresholds the exporter runs with. The mixin renders the same table
and guide into docs/runbook.md, with each row's alert beside it; alerts link
there (``runbook_url_base``)."""

from __future__ import annotations

import re
from collections.abc import Callable

from gpu_exporter.diagnosis import guide
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.facts.safetext import html_escape
from gpu_exporter.settings.thresholds import DiagnosisConfig
from gpu_exporter.web.app import Request, Response
from gpu_exporter.web.doctor import HTML, SAFE_HEADERS, STYLE

_RUNBOOK_STYLE = (
    "main table{margin:.5em 0 1em}main h1{margin-top:1.4em}main h2{margin-top:1.2em;"
    "padding-top:.4em;border-top:1px solid var(--line)}:target{background:var(--card)}"
)
_HEADERS = {
    "Cache-Control": "max-age=3600", **SAFE_HEADERS,
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"}
# The guide's two marks, on text already escaped for HTML.
_CODE = re.compile(r"`([^`]+)`")
_EMPHASIS = re.compile(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])")


def slug(title: str) -> str:
    """A heading's anchor as GitHub makes it for docs/runbook.md (lower case,
    punctuation dropped, spaces as hyphens): the same links work in both."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _text(text: str) -> str:
    return _EMPHASIS.sub(r"<em>\1</em>", _CODE.sub(r"<code>\1</code>", html_escape(text)))


def _link(row: Row) -> str:
    return f'<a href="#{row.anchor}"><code>{html_escape(row.key)}</code></a>'


def _inline(text: guide.Inline) -> str:
    return "".join(_text(piece) if isinstance(piece, str) else _link(piece) for piece in text)


def _block(block: guide.Block) -> str:
    if isinstance(block, guide.Table):
        head = "".join(f"<th>{_text(h)}</th>" for h in block.header)
        body = "".join("<tr>" + "".join(f"<td>{_inline(cell)}</td>" for cell in row) + "</tr>"
                       for row in block.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f"<p>{_inline(block)}</p>"


def _heading(level: int, title: str, anchor: str | None = None) -> str:
    return f'<h{level} id="{html_escape(anchor or slug(title))}">{_text(title)}</h{level}>'


def _row_section(row: Row, cfg: DiagnosisConfig) -> str:
    when = "on at once" if row.immediate else "on after its condition held for the window"
    confirm = html_escape("\n".join(row.confirm))
    return "".join((
        _heading(2, row.anchor, row.anchor),
        f"<p><strong>{_text(row.summary)}.</strong> Severity <strong>{row.severity}</strong>"
        f" · symptom <code>{row.symptom}</code> → cause <code>{row.cause}</code> · {when}.</p>",
        f"<p><strong>What the exporter sees.</strong> {_text(row.evidence_text(cfg))}</p>",
        f"<p><strong>Confirm on the node.</strong></p><pre><code>{confirm}</code></pre>",
        f"<p><strong>Fix.</strong> {_text(row.fix)}</p>",
        f"<p><strong>Escalate.</strong> {_text(row.escalate)}</p>",
    ))


def body(cfg: DiagnosisConfig) -> str:
    """The runbook's HTML, thresholds as ``cfg`` sets them."""
    out = [
        _heading(1, "GPU exporter runbook"),
        "<p>One section per row of the exporter's symptom → cause table: what the exporter "
        "sees, how to confirm it on the node (replace <code>PID</code> with the process and "
        "<code>BUS_ID</code> with the GPU's PCI bus id from <code>gpu_info</code>), the fix, "
        "and when to escalate. The thresholds are the ones this exporter runs with. Severity "
        "<code>critical</code> pages, <code>warning</code> opens a ticket, <code>info</code> "
        "is for dashboards.</p>",
        _block(guide.Table(("row", "severity", "summary"),
                           tuple(((row,), (row.severity,), (row.summary,)) for row in ROWS))),
        _heading(1, "Diagnoses"),
        *(_row_section(row, cfg) for row in ROWS),
        _heading(1, guide.XIDS_TITLE),
        _block(guide.XIDS_INTRO),
    ]
    for tier in guide.TIERS:
        out += [_heading(2, f"Xid tier: {tier}"),
                _block(("Reported by ", guide.xid_row(tier), f" · told: {guide.WHO[tier]}.")),
                _block(guide.xid_table(cfg, tier))]
    for part in guide.how_the_diagnosis_decides(cfg):
        out += [_heading(part.level, part.title), *(_block(b) for b in part.blocks)]
    return "".join(out)


class Runbook:
    """The ``/runbook`` handler: the page for the running diagnosis settings,
    rendered once per configuration (a reload may change the thresholds)."""

    def __init__(self, diagnosis: Callable[[], DiagnosisConfig]) -> None:
        self._diagnosis = diagnosis
        self._page: tuple[DiagnosisConfig, bytes] | None = None

    def page(self) -> bytes:
        cfg = self._diagnosis()
        if self._page is None or self._page[0] != cfg:
            html = ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
                    "<meta name='viewport' content='width=device-width,initial-scale=1'>"
                    f"<title>GPU exporter runbook</title><style>{STYLE}{_RUNBOOK_STYLE}</style>"
                    "</head><body><nav><a href='.'>Back to the node page</a></nav>"
                    f"<main>{body(cfg)}</main></body></html>")
            self._page = (cfg, html.encode())
        return self._page[1]

    def __call__(self, req: Request) -> Response:
        return Response(200, self.page(), HTML, _HEADERS)
