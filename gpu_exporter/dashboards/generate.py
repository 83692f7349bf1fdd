"""The dashboards' JSON files, written or checked."""

from __future__ import annotations

import json
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

from gpu_exporter.alerting.config import AlertConfig
from gpu_exporter.dashboards.build import fleet_dashboard, node_dashboard

NODE = Path("grafana/dashboards/gpu-node.json")
FLEET = Path("grafana/dashboards/gpu-fleet.json")


def to_json(dashboard: dm.Dashboard) -> str:
    for i, panel in enumerate(dashboard.panels or [], start=1):
        panel.id_val = i  # stable ids, in layout order
    return json.dumps(dashboard, cls=JSONEncoder, indent=2, ensure_ascii=False) + "\n"


def outputs(config: AlertConfig) -> dict[Path, str]:
    return {NODE: to_json(node_dashboard(config)), FLEET: to_json(fleet_dashboard(config))}


def differences(config: AlertConfig, root: Path = Path(".")) -> list[str]:
    problems = []
    for rel, text in outputs(config).items():
        path = root / rel
        if not path.exists():
            problems.append(f"{rel}: missing")
        elif path.read_text() != text:
            problems.append(f"{rel}: differs from the generator's output")
    return problems


def write(config: AlertConfig, root: Path = Path(".")) -> list[Path]:
    changed = []
    for rel, text in outputs(config).items():
        path = root / rel
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(rel)
    return changed
