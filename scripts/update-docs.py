#!/usr/bin/env python3
"""Rewrite the generated blocks of README.md (metric list, flags) from the code."""

from pathlib import Path

from gpu_exporter_mixin.docs import render

readme = Path(__file__).resolve().parent.parent / "README.md"
readme.write_text(render(readme.read_text()))
print(f"updated {readme}")
