"""The exporter caps glibc's malloc arenas (see gpu_exporter/daemon/malloc.py), unless
the user chose a cap with MALLOC_ARENA_MAX."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from gpu_exporter.daemon.malloc import ARENAS, limit_malloc_arenas


def test_a_cap_the_user_set_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False


def test_arenas_are_capped_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert limit_malloc_arenas() is (platform.libc_ver()[0] == "glibc")


# Counts the heaps (arenas) glibc made after six threads allocated at the same time.
_ARENA_PROBE = r"""
import ctypes, sys, tempfile, threading
from gpu_exporter.daemon.malloc import ARENAS, limit_malloc_arenas
if sys.argv[1] == "capped":
    assert limit_malloc_arenas()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
everyone = threading.Barrier(6)
def allocate():
    block = libc.malloc(4096)
    everyone.wait()  # all six hold an arena at once: none is handed back and reused
    libc.free(block)
threads = [threading.Thread(target=allocate) for _ in range(6)]
for t in threads: t.start()
for t in threads: t.join()
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
libc.fclose.argtypes = (ctypes.c_void_p,)
with tempfile.NamedTemporaryFile(suffix=".xml") as f:
    stream = libc.fopen(f.name.encode(), b"w")
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    print(open(f.name).read().count("<heap nr="))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="arenas are glibc's")
@pytest.mark.skipif((os.cpu_count() or 1) * 8 < 4, reason="glibc allows too few arenas here")
def test_threads_that_allocate_share_the_capped_arenas() -> None:
    def heaps(mode: str) -> int:
        env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
        out = subprocess.run([sys.executable, "-c", _ARENA_PROBE, mode], env=env,
                             capture_output=True, text=True, check=True, timeout=60)
        return int(out.stdout.strip())

    assert heaps("capped") <= ARENAS
    # Without the cap each allocating thread gets a heap of its own: the probe
    # tells the two apart, so the assertion above can fail.
    assert heaps("uncapped") > ARENAS
