"""Keep the C allocator from growing one heap per thread.

glibc gives every thread that allocates a heap ("arena") of its own, up to
eight per core. The exporter's HTTP worker threads each render or compress a
/metrics body of a few hundred KiB now and then, so each of their arenas grows
to that high-water mark and keeps it: on the 8x H100 benchmark node RSS rose
by 4-5 MiB in the first few hundred polls after a burst of concurrent scrapes
and stayed there. Two arenas, what ``MALLOC_ARENA_MAX=2`` sets, held that to
about 1 MiB; one arena, the main heap every thread shares, takes another
0.4-0.5 MiB off (59.1 -> 58.7 MiB on that node, two runs each). Allocations
are made holding the GIL and the /metrics bodies are compressed once per poll
under a lock, so the threads hardly contend for the one heap. A
``MALLOC_ARENA_MAX`` the user set wins; other C libraries (musl) have no arenas
and no ``mallopt``, and nothing is done.
"""

from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 1


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process; True when the cap was set."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False  # glibc read it at start-up
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
