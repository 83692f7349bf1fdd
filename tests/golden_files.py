"""Golden files: committed expected outputs, compared byte for byte.

A golden file is only ever written on request (``UPDATE_GOLDEN=1``), never by
the test that checks it: a missing golden fails with the command that creates
it, so a test cannot pass by recording whatever the code happens to print. The
update mode asks for two renders that agree before it writes, so an update run
at an unlucky moment cannot commit a half-baked file.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

import pytest


def updating() -> bool:
    return os.environ.get("UPDATE_GOLDEN") == "1"


def check_golden(path: Path, render: Callable[[], str], update_command: str) -> None:
    """Compare ``render()`` with the golden file at ``path``."""
    text = render()
    if updating():
        again = render()
        assert text == again, ("two renders differ; the output is not deterministic, so no "
                               "golden file was written:\n" + _diff(text, again))
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"golden file {path.name} is missing; create it with: {update_command}")
    expected = path.read_text()
    assert text == expected, (f"output differs from {path.name} (accept an intended change "
                              f"with: {update_command}):\n" + _diff(expected, text))


def _diff(expected: str, got: str) -> str:
    lines = difflib.unified_diff(expected.splitlines(), got.splitlines(), "golden", "now",
                                 lineterm="", n=1)
    return "\n".join(list(lines)[:80])
