"""The package lists in pyproject.toml and mixin/pyproject.toml are explicit
(auto-discovery trips over deploy/, grafana/, alerts/): each must name every
package, or an installed wheel would lack modules the editable checkout has.
And the exporter's wheel, the one its image installs, holds the exporter only:
no generator, no dashboard SDK code, nothing of the mixin."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIXIN = ROOT / "mixin"


def _dotted(folder: Path, root: Path = ROOT) -> str:
    return str(folder.relative_to(root)).replace("/", ".")


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


def test_the_mixin_lists_every_package() -> None:
    config = tomllib.loads((MIXIN / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    code = {_dotted(p.parent, MIXIN) for p in (MIXIN / "gpu_exporter_mixin").rglob("__init__.py")}
    assert listed == code


def test_the_exporter_declares_no_generator() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert set(config["scripts"]) == {"gpu-exporter"}
    assert "generators" not in config.get("optional-dependencies", {})
    mixin = tomllib.loads((MIXIN / "pyproject.toml").read_text())["project"]
    assert set(mixin["scripts"]) == {"gpu-exporter-alerts", "gpu-exporter-dashboards"}
    assert "gpu-exporter" in mixin["dependencies"]


def test_the_runtime_wheel_holds_the_exporter_only(tmp_path: Path) -> None:
    """Built from what the image copies (pyproject.toml, README.md and
    gpu_exporter/, see the Dockerfile), in a clean directory so no earlier
    build's leftovers can slip in."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "gpu_exporter", src / "gpu_exporter",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "--disable-pip-version-check", "--wheel-dir", str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("gpu_exporter-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpu_exporter/cli.py" in names and "gpu_exporter/commands/diagnose.py" in names
    tops = {n.split("/")[0] for n in names}
    assert tops == {"gpu_exporter", wheel.name.removesuffix("-py3-none-any.whl") + ".dist-info"}
    generators = [n for n in names
                  if any(part in n for part in ("alerting", "dashboards", "mixin", "grafana",
                                                "promql", "series_budget", "runbook.html"))
                  or n.endswith(("/docs.py", ".libsonnet", ".jsonnet"))]
    assert generators == []
    metadata = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    # What installing the exporter brings (the test tools' extra aside).
    requires = [line for line in metadata.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert any("nvidia-ml-py" in line for line in requires)
    assert not any(dep in line for line in requires
                   for dep in ("grafana", "promql", "markdown"))
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "gpu-exporter-alerts" not in entry_points
    assert "gpu-exporter-dashboards" not in entry_points
