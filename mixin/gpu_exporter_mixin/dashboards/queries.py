"""Reading the queries back out of a dashboard's JSON, and filling in the
variables Grafana would, so a test can run them against a real Prometheus."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

# What Grafana puts in place of its built-in variables.
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}


def panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that is not a row, rows' nested panels included."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def panel_queries(dashboard: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(panel title, refId, expr) for every query of every panel."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield panel["title"], target.get("refId", ""), target["expr"]


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """``expr`` with ``$name``, ``${name}`` and ``[[name]]`` replaced by
    ``values`` (then Grafana's built-ins); an unknown variable is an error."""
    table = {**BUILTINS, **values}

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        if name not in table:
            raise KeyError(f"no value for variable ${name} in {expr!r}")
        return table[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)|\[\[(\w+)\]\]", one, expr)
