"""Documentation derived from the code: the README's metric list comes from the
catalog, never from a hand-kept copy."""

from __future__ import annotations

import re

from gpu_exporter.catalog import metrics_markdown
from gpu_exporter.cli import _FLAGS, METRICS_DETAIL_HELP
from gpu_exporter.pipeline import COLLECTORS
from gpu_exporter.thresholds import DiagnosisConfig
from gpu_exporter_mixin.series_budget import series_markdown


def flags_markdown() -> str:
    lines = ["| flag | YAML key | environment variable | meaning |", "|---|---|---|---|",
             "| `--config.file` | - | - | YAML configuration file. |"]
    for flag, dest, text, _metavar in _FLAGS:
        env = "GPU_EXPORTER_" + dest.replace(".", "__").upper()
        lines.append(f"| `{flag}` | `{dest}` | `{env}` | {text} |")
    lines.append("| `--[no-]metrics.detail` | `metrics.detail` | `GPU_EXPORTER_METRICS__DETAIL` "
                 f"| {METRICS_DETAIL_HELP} |")
    lines.append("| `--[no-]diagnosis.enabled` | `diagnosis.enabled` | "
                 "`GPU_EXPORTER_DIAGNOSIS__ENABLED` | "
                 f"{DiagnosisConfig.model_fields['enabled'].description} (default on). |")
    for name, info in COLLECTORS.items():
        state = "on" if info.default else "off"
        env = f"GPU_EXPORTER_COLLECTORS__{name.upper()}"
        lines.append(f"| `--[no-]collector.{name}` | `collectors.{name}` | `{env}` | "
                     f"{info.description} (default {state}). |")
    return "\n".join(lines) + "\n"


GENERATED = {"metrics": metrics_markdown, "flags": flags_markdown, "series": series_markdown}
_BLOCK = re.compile(r"(<!-- BEGIN GENERATED: (\w+) -->\n)(.*?)(<!-- END GENERATED -->)", re.S)


def render(text: str) -> str:
    """``text`` with every generated block replaced by its current content."""
    return _BLOCK.sub(lambda m: m.group(1) + GENERATED[m.group(2)]() + m.group(4), text)
