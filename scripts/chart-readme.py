#!/usr/bin/env python3
"""Write the values table of deploy/helm/gpu-exporter/README.md from the
chart's values.schema.json (descriptions, types) and values.yaml (defaults).

    scripts/chart-readme.py           rewrite the table
    scripts/chart-readme.py --check   exit 1 if the README's table is not current
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent.parent / "deploy" / "helm" / "gpu-exporter"
BEGIN = "<!-- BEGIN GENERATED: values -->"
END = "<!-- END GENERATED: values -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rows(schema: dict[str, Any], values: Any, prefix: str = "") -> list[str]:
    out = []
    for name, prop in schema.get("properties", {}).items():
        key = f"{prefix}{name}"
        default = values.get(name) if isinstance(values, dict) else None
        kind = prop.get("type", "")
        if "enum" in prop:
            kind += " (" + ", ".join(str(v) for v in prop["enum"]) + ")"
        if "properties" in prop:
            out.append(f"| `{key}` | {kind} | | {_cell(prop['description'])} |")
            out.extend(rows(prop, default, key + "."))
            continue
        shown = json.dumps(default, ensure_ascii=False)
        out.append(f"| `{key}` | {kind} | `{_cell(shown)}` | {_cell(prop['description'])} |")
    return out


def table() -> str:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    head = ["| key | type | default | description |", "|---|---|---|---|"]
    return "\n".join([BEGIN, *head, *rows(schema, values), END])


def render(readme: str) -> str:
    start, end = readme.index(BEGIN), readme.index(END) + len(END)
    return readme[:start] + table() + readme[end:]


def main(argv: list[str]) -> int:
    path = CHART / "README.md"
    text = path.read_text()
    wanted = render(text)
    if "--check" in argv:
        if wanted != text:
            print(f"{path}: the values table is not current; run scripts/chart-readme.py",
                  file=sys.stderr)
            return 1
        return 0
    if wanted != text:
        path.write_text(wanted)
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
