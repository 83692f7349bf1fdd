"""The package list in pyproject.toml is explicit (auto-discovery trips over
deploy/, grafana/, alerts/): it must name every package, or an installed
wheel would lack modules the editable checkout has."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _dotted(folder: Path) -> str:
    return str(folder.relative_to(ROOT)).replace("/", ".")


def test_every_package_is_listed() -> None:
    """Code packages (an __init__.py) and data folders (YAML only, such as the
    built-in scenarios) are both listed: setuptools warns about, and may skip,
    a folder it finds but was not told about."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    code = {_dotted(p.parent) for p in (ROOT / "gpu_exporter").rglob("__init__.py")}
    data = {_dotted(p.parent) for p in (ROOT / "gpu_exporter").rglob("*.yaml")}
    assert listed == code | data


def test_package_data_covers_every_yaml_file() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = config["tool"]["setuptools"]["package-data"]
    yaml_files = list((ROOT / "gpu_exporter").rglob("*.yaml"))
    assert any(p.parent.name == "scenarios" for p in yaml_files)
    assert any(p.parent.name == "profiles" for p in yaml_files)
    missed = [p for p in yaml_files
              if not any(p.match(pattern) for pattern in package_data.get(_dotted(p.parent), []))]
    assert not missed
