"""The small part of Prometheus' alert templating the rules use, rendered in
Python too, so the promtool unit tests can expect exact annotations without
anyone copying them by hand.

Supported actions: ``{{ $labels.NAME }}``, ``{{ $value }}`` with one of the
pipes ``humanizePercentage`` or ``humanize1024``, ``{{ printf "%.Nf" $value }}``,
and ``{{ with $labels.NAME }}...{{ . }}...{{ end }}`` (the text only where the
label is set, ``{{ . }}`` its value).
Anything else is a programming error here, so a template Prometheus would
render differently can never slip into the rules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

_ACTION = re.compile(r"\{\{(.*?)\}\}")
_LABEL = re.compile(r"^\s*\$labels\.([A-Za-z_][A-Za-z0-9_]*)\s*$")
_PIPE = re.compile(r"^\s*\$value\s*\|\s*(humanizePercentage|humanize1024)\s*$")
_PRINTF = re.compile(r'^\s*printf\s+"%\.(\d)f"\s+\$value\s*$')
_WITH = re.compile(r"\{\{\s*with\s+\$labels\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}(.*?)"
                   r"\{\{\s*end\s*\}\}", re.S)
_DOT = re.compile(r"\{\{\s*\.\s*\}\}")


def with_label(name: str, text: str) -> str:
    """``text`` only where label ``name`` is set; ``{{ . }}`` in it is the value."""
    return "{{ with $labels." + name + " }}" + text + "{{ end }}"


DOT = "{{ . }}"


def label(name: str) -> str:
    return "{{ $labels." + name + " }}"


PERCENT = "{{ $value | humanizePercentage }}"
BYTES1024 = "{{ $value | humanize1024 }}"


def fixed(decimals: int) -> str:
    return '{{ printf "%.' + str(decimals) + 'f" $value }}'


def _go_g4(v: float) -> str:
    """Go's ``fmt.Sprintf("%.4g", v)`` for the finite values alerts carry."""
    text = f"{v:.4g}"
    if "e" in text:  # Go writes at least two exponent digits, as Python does
        mantissa, exp = text.split("e")
        sign = exp[0]
        digits = exp[1:].lstrip("0").rjust(2, "0")
        text = f"{mantissa}e{sign}{digits}"
    return text


def humanize_percentage(v: float) -> str:
    return _go_g4(v * 100) + "%"


def humanize1024(v: float) -> str:
    if abs(v) <= 1 or math.isnan(v) or math.isinf(v):
        return _go_g4(v)
    prefix = ""
    for p in ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"):
        if abs(v) < 1024:
            break
        prefix = p
        v /= 1024
    return _go_g4(v) + prefix


def check(template: str) -> None:
    """Raise ValueError on an action this module cannot render."""
    template = _WITH.sub(lambda m: _DOT.sub("", m.group(2)), template)
    for action in _ACTION.findall(template):
        if not (_LABEL.match(action) or _PIPE.match(action) or _PRINTF.match(action)):
            raise ValueError(f"unsupported template action {{{{{action}}}}} in {template!r}")


def render(template: str, labels: Mapping[str, str], value: float) -> str:
    """What Prometheus renders for ``template`` on an alert with these labels and value."""
    # Go's "with" skips its block for an empty value; "{{ . }}" in it is the
    # label's value (the cases here carry no "{{" in label values).
    template = _WITH.sub(lambda m: "" if not labels.get(m.group(1)) else
                         _DOT.sub(lambda _: labels[m.group(1)], m.group(2)), template)

    def one(match: re.Match[str]) -> str:
        action = match.group(1)
        if m := _LABEL.match(action):
            return labels.get(m.group(1), "")
        if m := _PIPE.match(action):
            return humanize_percentage(value) if m.group(1) == "humanizePercentage" \
                else humanize1024(value)
        if m := _PRINTF.match(action):
            return f"{value:.{int(m.group(1))}f}"
        raise ValueError(f"unsupported template action {{{{{action}}}}}")

    return _ACTION.sub(one, template)


def duration(seconds: float) -> str:
    """A Prometheus duration: 3600 -> 1h, 90 -> 1m30s, 0.5 -> 500ms."""
    if seconds <= 0:
        return "0s"
    ms = round(seconds * 1000)
    out = ""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000),
                       ("ms", 1)):
        if ms >= size:
            out += f"{ms // size}{unit}"
            ms %= size
    return out


def prose_duration(seconds: float) -> str:
    """For people: 600 -> "10 minutes", 3600 -> "1 hour", 3 -> "3 seconds"."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}{'' if n == 1 else 's'}"
    return duration(seconds)
