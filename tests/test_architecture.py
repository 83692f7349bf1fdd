"""The layers contract is live: ./scripts/test.sh runs `lint-imports`, and an
import that breaks a layer makes it fail (here: config reaching up into the
collectors, the cycle config -> collectors -> config of old)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT), "--no-cache", "--no-logo"], cwd=tree, env=env,
                          capture_output=True, text=True, check=False, timeout=120)


def _copy(tree: Path) -> Path:
    """The exporter and the mixin with the contracts, in a tree of their own."""
    for package in ("gpu_exporter", "mixin/gpu_exporter_mixin"):
        shutil.copytree(ROOT / package, tree / Path(package).name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_contract_is_kept_and_fails_on_an_upward_import(tmp_path: Path) -> None:
    tree = _copy(tmp_path / "src")
    kept = _lint(tree)
    assert kept.returncode == 0, kept.stdout + kept.stderr

    config = tree / "gpu_exporter" / "config.py"
    # A function-local import counts as much as a top-level one.
    config.write_text(config.read_text() + "\n\ndef _probe() -> None:\n"
                      "    from gpu_exporter.collectors import base  # noqa: F401\n")
    broken = _lint(tree)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "gpu_exporter.config is not allowed to import gpu_exporter.collectors" \
        in broken.stdout


def test_a_module_in_no_layer_breaks_the_contract(tmp_path: Path) -> None:
    """The contract is exhaustive: a new module at the top of gpu_exporter/
    must be given its layer, or the check fails naming it."""
    tree = _copy(tmp_path / "src")
    (tree / "gpu_exporter" / "stray.py").write_text('"""In no layer."""\n')
    broken = _lint(tree)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "gpu_exporter.stray" in broken.stdout
