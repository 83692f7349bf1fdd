"""``/runbook``: the runbook served by the exporter, so a finding's link on the
node page works on a node with no internet. The body is the same runbook as
docs/runbook.md, rendered to HTML by the alert generator from the diagnosis
table (gpu_exporter/web/runbook.html, package data; a test keeps it equal to
a fresh generation). Alerts keep linking to their configurable
``runbook_url_base``."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from gpu_exporter.web.app import Request, Response
from gpu_exporter.web.doctor import HTML, SAFE_HEADERS, STYLE

_RUNBOOK_STYLE = (
    "main table{margin:.5em 0 1em}main h1{margin-top:1.4em}main h2{margin-top:1.2em;"
    "padding-top:.4em;border-top:1px solid var(--line)}:target{background:var(--card)}"
)


@cache
def page() -> bytes:
    body = files("gpu_exporter.web").joinpath("runbook.html").read_text(encoding="utf-8")
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width,initial-scale=1'>"
            f"<title>GPU exporter runbook</title><style>{STYLE}{_RUNBOOK_STYLE}</style>"
            "</head><body><nav><a href='.'>Back to the node page</a></nav>"
            f"<main>{body}</main></body></html>").encode()


def runbook(req: Request) -> Response:
    return Response(200, page(), HTML, {
        "Cache-Control": "max-age=3600", **SAFE_HEADERS,
        "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                   "base-uri 'none'; form-action 'none'; "
                                   "frame-ancestors 'none'"})
