"""The exporter caps glibc's malloc arenas (see gpu_exporter/malloc.py), unless
the user chose a cap with MALLOC_ARENA_MAX."""

from __future__ import annotations

import platform

import pytest

from gpu_exporter.malloc import limit_malloc_arenas


def test_a_cap_the_user_set_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False


def test_arenas_are_capped_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert limit_malloc_arenas() is (platform.libc_ver()[0] == "glibc")
