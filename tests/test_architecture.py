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

    config = tree / "gpu_exporter" / "settings" / "config.py"
    # A function-local import counts as much as a top-level one.
    config.write_text(config.read_text() + "\n\ndef _probe() -> None:\n"
                      "    from gpu_exporter.collectors import base  # noqa: F401\n")
    broken = _lint(tree)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "gpu_exporter.settings is not allowed to import gpu_exporter.collectors" \
        in broken.stdout
    assert "gpu_exporter.settings.config -> gpu_exporter.collectors" in broken.stdout


def test_a_module_in_no_layer_breaks_the_contract(tmp_path: Path) -> None:
    """The contract is exhaustive: a new module at the top of gpu_exporter/
    must be given its layer, or the check fails naming it."""
    tree = _copy(tmp_path / "src")
    (tree / "gpu_exporter" / "stray.py").write_text('"""In no layer."""\n')
    broken = _lint(tree)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "gpu_exporter.stray" in broken.stdout


# What may stand loose at the package root: the entry point, and the two
# stages that are one module each (the baseline check and the node page's
# history, beside the diagnosis and the collectors). Everything else lives in
# the package of its part of the data flow (ARCHITECTURE.md, "The repository").
ROOT_MODULES = {"__init__", "__main__", "cli", "baseline", "history"}


def test_the_package_root_holds_only_the_entry_point_and_single_module_stages() -> None:
    loose = {p.stem for p in (ROOT / "gpu_exporter").glob("*.py")}
    assert loose <= ROOT_MODULES, f"loose modules at gpu_exporter/: {sorted(loose - ROOT_MODULES)}"


# Test folders that mirror something other than a package of gpu_exporter:
# the mixin, the deployment files, the scenario generator, and the tests that
# run the exporter on the real kernel (cgroups, namespaces, Slurm).
OTHER_TREES = {"mixin": ROOT / "mixin" / "gpu_exporter_mixin",
               "deploy": ROOT / "deploy",
               "scenario_generator": ROOT / "scenario_generator",
               "kernel": None}
# What sits beside the tests and holds none (fixtures, golden files, caches).
NOT_TESTS = {"fixtures", "golden", "__pycache__"}


def test_the_test_folders_mirror_the_package() -> None:
    """The tests of gpu_exporter/<package>/ live in tests/<package>/, so a
    module's tests are found by its path, not by grep: every test folder is
    a package of the exporter or one of the trees named above, and every
    package the exporter has is tested in a folder of its name."""
    package = ROOT / "gpu_exporter"
    folders = {p.name for p in (ROOT / "tests").iterdir()
               if p.is_dir() and p.name not in NOT_TESTS}
    packages = {p.parent.name for p in package.glob("*/__init__.py")}
    for name in sorted(folders):
        tests = list((ROOT / "tests" / name).glob("test_*.py"))
        assert tests, f"tests/{name}/ holds no tests"
        assert (ROOT / "tests" / name / "__init__.py").is_file(), name
        if name in OTHER_TREES:
            tree = OTHER_TREES[name]
            assert tree is None or tree.is_dir(), f"tests/{name}/ mirrors {tree}, gone"
        else:
            assert name in packages, f"tests/{name}/ is no package of gpu_exporter"
    # The catalogs declare series and hold no code of their own: they are
    # tested where their series are read (collectors) and budgeted (the root).
    untested = packages - folders - {"catalogs"}
    assert not untested, f"packages with no tests/<name>/: {sorted(untested)}"


# The longest a module of the exporter may grow: one a reader takes in whole.
# A module over it has more than one job and is split along them.
MODULE_LINES = 700


def test_no_module_of_the_exporter_is_over_the_line_limit() -> None:
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "gpu_exporter").rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES}
    assert not long, f"modules over {MODULE_LINES} lines: {long}"
