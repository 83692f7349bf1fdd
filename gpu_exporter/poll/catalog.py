"""Every metric the exporter can export: the one source of truth for names, types,
labels and help text. The exposition, the README's metric list, the dashboards'
checks and the tests all read this table.

Each area keeps its entries in its own module under ``gpu_exporter.catalogs``;
this module joins them in exposition order.
"""

from __future__ import annotations

from gpu_exporter.catalogs import (
    attribution,
    board,
    deep,
    device,
    diagnosis,
    exporter,
    host,
    kernel,
    network,
    pcie,
    processes,
)
from gpu_exporter.facts.catalog_types import GPU, Kind, Metric

CATALOG: tuple[Metric, ...] = (
    *device.METRICS,
    *board.METRICS,
    *deep.METRICS,
    *kernel.METRICS,
    *processes.METRICS,
    *attribution.METRICS,
    *pcie.METRICS,
    *network.METRICS,
    *host.METRICS,
    *diagnosis.METRICS,
    *exporter.METRICS,
)

BY_NAME: dict[str, Metric] = {m.name: m for m in CATALOG}
# Families exported only with --metrics.detail.
DETAIL: frozenset[str] = frozenset(m.name for m in CATALOG if m.detail)
if len(BY_NAME) != len(CATALOG):  # pragma: no cover - a programming error
    raise RuntimeError("duplicate metric name in catalog")


def metric(name: str) -> Metric:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"metric {name!r} is not in the catalog") from None


def metrics_markdown() -> str:
    """The catalog as a Markdown table (the README's metric list, `catalog`)."""
    lines = ["| metric | type | labels | collector | meaning |",
             "|---|---|---|---|---|"]
    for m in CATALOG:
        labels = ", ".join(f"`{label}`" for label in m.labels) or "-"
        detail = " Exported with `--metrics.detail` only." if m.detail else ""
        lines.append(f"| `{m.name}` | {m.kind} | {labels} | {m.collector} | {m.help}{detail} |")
    return "\n".join(lines) + "\n"


__all__ = ["BY_NAME", "CATALOG", "DETAIL", "GPU", "Kind", "Metric", "metric", "metrics_markdown"]
