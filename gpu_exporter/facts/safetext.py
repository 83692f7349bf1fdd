"""Text from the outside world (process names, GPU names and UUIDs, file
contents, what an exporter answered) made safe to show: every control
character and text-reordering mark appears as an escape (``\\x1b``, ``\\n``)
instead of acting. Terminals print it as is; HTML pages escape it for HTML on
top (a bidirectional override would reorder a page's text just as a terminal's)."""

from __future__ import annotations

import re

# What must not reach a terminal raw: C0 and C1 controls and DEL (escape
# sequences, line breaks that would forge a line of their own), and the Unicode
# marks that reorder or hide text (bidirectional overrides, zero-width ones).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(m: re.Match[str]) -> str:
    ch = m.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(value: object) -> str:
    """``value`` as text fit for a terminal: every control character and
    text-reordering mark is shown as an escape (``\\x1b``, ``\\n``) instead of
    acting. Process names, GPU names and UUIDs, file contents and anything an
    exporter answered pass through here before they are printed."""
    text = str(value)
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape_char, text)


_HTML = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;"})


def html_escape(text: str) -> str:
    """``text`` for HTML text and quoted attribute values: what
    ``html.escape(text)`` returns (a test holds the two equal). The stdlib
    module is not imported for it: importing ``html`` loads its table of
    2,231 named entities (about 0.3 MiB) that escaping never reads."""
    return text.translate(_HTML)
