"""Finding the real Prometheus tools the tests use (promtool, prometheus,
amtool, alertmanager). The test command puts Debian's builds on PATH through
.tools/bin; run under it (GPU_EXPORTER_REQUIRE_TOOLS=1) a missing tool fails
the test instead of skipping it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def tool(name: str) -> str:
    local = ROOT / ".tools" / "bin" / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found:
        return found
    message = f"{name} not found; ./scripts/fetch-prometheus.sh puts it in .tools/bin"
    if os.environ.get("GPU_EXPORTER_REQUIRE_TOOLS") == "1":
        pytest.fail(message)
    pytest.skip(message)
