"""Documentation derived from the code: the README's metric list comes from the
catalog, never from a hand-kept copy."""

from __future__ import annotations

import re

from gpu_exporter.commands.client import options_markdown
from gpu_exporter.commands.report import EXIT_STATUSES, PRECEDENCE
from gpu_exporter.daemon.pipeline import COLLECTORS
from gpu_exporter.poll.catalog import metrics_markdown
from gpu_exporter.settings.config import flag_settings
from gpu_exporter_mixin.series_budget import series_markdown


def flags_markdown() -> str:
    """The flag table: each setting's row from its declaration (config.py), each
    reader's from its class; the same words --help prints."""
    lines = ["| flag | YAML key | environment variable | meaning |", "|---|---|---|---|",
             "| `--config.file` | - | - | YAML configuration file. |"]
    for s in flag_settings():
        flag = f"--[no-]{s.flag.removeprefix('--')}" if s.boolean else s.flag
        lines.append(f"| `{flag}` | `{s.key}` | `{s.environment}` | {s.help} |")
    for name, kind in COLLECTORS.items():
        env = f"GPU_EXPORTER_COLLECTORS__{name.upper()}"
        lines.append(f"| `--[no-]collector.{name}` | `collectors.{name}` | `{env}` | "
                     f"{kind.flag_help()} |")
    return "\n".join(lines) + "\n"


def exit_statuses_markdown() -> str:
    """`gpu-exporter diagnose`'s exit statuses, as its --help says them."""
    lines = ["| exit status | meaning |", "|---|---|"]
    lines += [f"| {code} | {text} |" for code, text in EXIT_STATUSES]
    return "\n".join(lines) + f"\n\n{PRECEDENCE} A usage error exits 2, as with every " \
        "command.\n"


GENERATED = {"metrics": metrics_markdown, "flags": flags_markdown, "series": series_markdown,
             "exit-statuses": exit_statuses_markdown, "diagnose-client": options_markdown}
_BLOCK = re.compile(r"(<!-- BEGIN GENERATED: ([\w-]+) -->\n)(.*?)(<!-- END GENERATED -->)", re.S)


def render(text: str) -> str:
    """``text`` with every generated block replaced by its current content."""
    return _BLOCK.sub(lambda m: m.group(1) + GENERATED[m.group(2)]() + m.group(4), text)
