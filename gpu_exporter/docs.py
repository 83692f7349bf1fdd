"""Documentation derived from the code: the README's metric list comes from the
catalog, never from a hand-kept copy."""

from __future__ import annotations

from gpu_exporter.catalog import CATALOG


def metrics_markdown() -> str:
    lines = ["| metric | type | labels | collector | meaning |",
             "|---|---|---|---|---|"]
    for m in CATALOG:
        labels = ", ".join(f"`{label}`" for label in m.labels) or "-"
        lines.append(f"| `{m.name}` | {m.kind} | {labels} | {m.collector} | {m.help} |")
    return "\n".join(lines) + "\n"
