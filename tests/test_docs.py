"""The README's generated parts match the code, and what it names exists."""

from __future__ import annotations

import re
from pathlib import Path

from gpu_exporter_mixin.docs import render

ROOT = Path(__file__).resolve().parent.parent


def test_readme_generated_blocks_are_current() -> None:
    text = (ROOT / "README.md").read_text()
    assert render(text) == text, "run: .venv/bin/python scripts/update-docs.py"


def test_every_path_the_readme_names_exists() -> None:
    text = (ROOT / "README.md").read_text()
    for path in re.findall(r"\./(scripts/[\w./-]+)", text):
        assert (ROOT / path).exists(), path
    for path in re.findall(r"`(gpu_exporter/[\w./-]+)`", text):
        assert (ROOT / path).exists(), path


def test_every_path_the_architecture_names_exists() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = re.findall(r"`((?:gpu_exporter|mixin|tests|scripts)/[\w./-]+)`", text)
    assert len(named) > 20
    for path in named:
        assert (ROOT / path).exists(), path
