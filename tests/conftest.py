from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpu_exporter.nvml import adapter


@pytest.fixture(autouse=True)
def _no_library_left_installed() -> Iterator[None]:
    """Each test starts and ends with pynvml pointing at no library."""
    adapter.install_library(None)
    yield
    adapter.install_library(None)
