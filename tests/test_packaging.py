"""The package list in pyproject.toml is explicit (auto-discovery trips over
deploy/, grafana/, alerts/): it must name every package, or an installed
wheel would lack modules the editable checkout has."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_listed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {str(p.parent.relative_to(ROOT)).replace("/", ".")
             for p in (ROOT / "gpu_exporter").rglob("__init__.py")}
    assert listed == found


def test_package_data_covers_the_builtin_scenarios_and_profiles() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["gpu_exporter.simulator"]
    base = ROOT / "gpu_exporter" / "simulator"
    data = {p.relative_to(base).as_posix() for pattern in patterns for p in base.glob(pattern)}
    assert any(d.startswith("scenarios/") for d in data)
    assert any(d.startswith("profiles/") for d in data)
    assert not [p for p in base.rglob("*.yaml") if p.relative_to(base).as_posix() not in data]
