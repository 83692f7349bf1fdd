"""Running the exporter as a real process for CLI tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# How long a stop (SIGTERM, SIGINT) with clients connected may take. The
# promise is an exit within half a second (about 0.1 s on an idle machine: the
# signal wakes the main thread at once, the server and poller stop at once, and
# no thread waits in NVML: the Xid reader drains its event set in the poll). The bound
# is wider for loaded CI machines, where the interpreter's own start of exit can
# lag; a server that waited for its clients took 10 s with one kept-alive
# connection and 57 s with 20 slow-header clients, far outside it.
STOP_BOUND_S = 2.5


def closed_to_others(path: Path = ROOT) -> Path | None:
    """The first of ``path`` and its parents that other users cannot search
    (a clone in ``mktemp -d``, mode 0700), or None: a test that runs the
    checkout's code or tools as another user cannot run there."""
    for part in (path, *path.parents):
        if not part.stat().st_mode & 0o001:
            return part
    return None


def stop_bound_s() -> float:
    """STOP_BOUND_S, widened in proportion when the run queue is longer than
    twice the cores (a flake check under busy loops and parallel test runs saw
    load averages of 20-30 on 2 cores and stops of 4.8 s: every process got a
    tenth of a core). A server that waits for its clients still takes 10 s or
    more on an idle machine, far outside the bound there."""
    cores = os.cpu_count() or 1
    return STOP_BOUND_S * max(1.0, os.getloadavg()[0] / (2 * cores))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# A one-shot command's own deadline is a guard against hangs, not a promise
# about speed: under heavy load a simulated diagnose window took over 30 s.
RUN_CLI_TIMEOUT_S = 120.0


def run_cli(args: Sequence[str],
            timeout: float = RUN_CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_exporter", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, check=False)


def start(args: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gpu_exporter", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, **(env or {})})


def wait_http(url: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return str(resp.read().decode())
        except (urllib.error.URLError, ConnectionError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def assert_stops_in_time(proc: subprocess.Popen[str], signum: int) -> None:
    """Send ``signum`` and check the exporter exits 0 within stop_bound_s()."""
    bound = stop_bound_s()
    proc.send_signal(signum)
    t0 = time.monotonic()
    code = proc.wait(timeout=max(10.0, 4 * bound))
    stopped_in = time.monotonic() - t0
    assert code == 0
    assert stopped_in < bound, f"exit took {stopped_in:.2f}s (bound {bound:.1f}s)"
