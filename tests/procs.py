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
# promise is an exit within a second (about 0.3-0.5 s on an idle machine: the
# signal is noticed within 0.2 s, the server and poller stop at once). The bound
# is wider for loaded CI machines, where the interpreter's own start of exit can
# lag; a server that waited for its clients took 10 s with one kept-alive
# connection and 57 s with 20 slow-header clients, far outside it.
STOP_BOUND_S = 2.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_cli(args: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
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
    """Send ``signum`` and check the exporter exits 0 within STOP_BOUND_S."""
    proc.send_signal(signum)
    t0 = time.monotonic()
    code = proc.wait(timeout=10)
    stopped_in = time.monotonic() - t0
    assert code == 0
    assert stopped_in < STOP_BOUND_S, f"exit took {stopped_in:.2f}s"
