"""Running promtool's unit tests a share of test groups at a time.

The diagnosis file holds some 50 test groups, each evaluating every rule over
about half an hour of samples: one promtool run of the whole file took minutes
on a slow 2-core machine, past any one test's timeout. Each file's groups are
run a share at a time instead, each share a test of its own, so a slow machine
fails no share on time and a broken expectation still fails the share that
holds it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.tools import tool

# Test groups per promtool run.
GROUPS_PER_RUN = 8

Share = tuple[str, int, int]  # (test file's name, share, shares)


def shares(test_files: list[Path]) -> list[Share]:
    """(file name, share, shares) for each promtool run; the groups are
    counted from the file's text (the top-level ``- name:`` items of its
    ``tests:``), so collecting parses no YAML."""
    runs = []
    for path in test_files:
        groups = len(re.findall(r"^- name:", path.read_text(), flags=re.MULTILINE))
        count = max(1, -(-groups // GROUPS_PER_RUN))
        runs += [(path.name, share, count) for share in range(count)]
    return runs


def share_ids(runs: list[Share]) -> list[str]:
    return [f"{name}-{i + 1}of{n}" for name, i, n in runs]


def run_share(path: Path, share: int, count: int, workdir: Path) -> None:
    """Run one share of ``path``'s test groups with promtool in ``workdir``;
    fail with promtool's own report."""
    doc = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    groups = doc["tests"]
    # The shares cover every group once, whatever the text count said.
    size = -(-len(groups) // count)
    doc["tests"] = groups[share * size:(share + 1) * size]
    assert doc["tests"] or share > 0, f"{path.name} holds no test group"
    if not doc["tests"]:
        return
    # The rule files as the file names them, from wherever this share runs.
    doc["rule_files"] = [str((path.parent / f).resolve()) for f in doc["rule_files"]]
    run = workdir / path.name
    run.write_text(yaml.safe_dump(doc, sort_keys=False, width=10_000))
    result = subprocess.run([tool("promtool"), "test", "rules", run.name], cwd=workdir,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-4000:]
