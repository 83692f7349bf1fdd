"""Outside text shown safely (gpu_exporter/facts/safetext.py): nothing that
acts on a terminal or reorders a page's text gets through, and the HTML escape
is the standard library's."""

from __future__ import annotations

import html
import re

from hypothesis import given
from hypothesis import strategies as st

from gpu_exporter.facts.safetext import html_escape, terminal_safe

# What a terminal acts on or a page reorders by, written here from the Unicode
# and ECMA-48 definitions rather than read from the module: C0 and C1
# controls, DEL, the zero-width and directional marks, the line and paragraph
# separators, the directional embeddings, overrides and isolates, the BOM.
ACTING = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


def test_terminal_safe_escapes_controls_and_reordering_marks() -> None:
    assert terminal_safe("plain name-1.0") == "plain name-1.0"
    assert terminal_safe("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert terminal_safe("x\r\ny\tz\x00\x7f\x9b") == "x\\r\\ny\\tz\\x00\\x7f\\x9b"
    assert terminal_safe("evil\u202egnp.exe\u200b") == "evil\\u202egnp.exe\\u200b"


@given(st.text())
def test_nothing_that_acts_gets_through_and_safe_text_is_kept(text: str) -> None:
    shown = terminal_safe(text)
    assert ACTING.search(shown) is None
    if ACTING.search(text) is None:
        assert shown == text


@given(st.text() | st.sampled_from(["<script>alert('x')</script>", 'a"b', "&amp;", "\x00<"]))
def test_html_escape_is_the_standard_librarys(text: str) -> None:
    assert html_escape(text) == html.escape(text)
