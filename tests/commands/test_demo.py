"""``./scripts/demo.sh`` shows what the README promises, on a cold and loaded
machine too: every finding of the ``mixed`` scenario. It does not sleep a
guessed time: ``diagnose --wait`` asks /diagnosis until every check has been
judged for its whole window (``coverage.settling`` empty), which takes as long
as the machine needs. A cold start on a loaded machine once printed 1 of the 6
findings: diagnose ran at about 11.5 s, the findings settled at about 13 s."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.commands.diagnose import fetch_settled
from gpu_exporter.simulator import load_scenario
from tests.procs import ROOT, free_port, run_cli, start, wait_http

MIXED = [(str(e.gpu), e.symptom, e.cause) for e in load_scenario("mixed").expect]
DEMO_CONFIG = ROOT / "scripts" / "demo-config.yaml"


def _finding_lines(out: str) -> list[tuple[str, str, str]]:
    """(gpu, symptom, cause) of each finding's head line in diagnose's text."""
    found = []
    for line in out.splitlines():
        words = line.split()
        # CRITICAL GPU 1 (GPU-...)  memory_errors -> ecc_uncorrectable
        if len(words) == 7 and words[0] in ("CRITICAL", "WARNING", "INFO") and words[5] == "->":
            found.append((words[2], words[4], words[6]))
    return found


@pytest.fixture
def loaded() -> Iterator[None]:
    """Every core busy with a loop at the demo's own priority: a loaded machine."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "gpu-exporter").exists(),
                    reason="the demo runs .venv's exporter (./scripts/test.sh makes .venv)")
def test_the_demo_prints_every_mixed_finding_cold_and_loaded(tmp_path: Path,
                                                             loaded: None) -> None:
    """The script as a new user runs it, with nothing compiled yet (bytecode
    goes to an empty cache), every core busy, and polls 5 s apart instead of
    2 s (the environment outranks the demo's config file): the findings
    settle about 15 s after the start, later than any fixed sleep the demo
    had, and it still prints them all."""
    env = {**os.environ, "PORT": str(free_port()), "PYTHONPYCACHEPREFIX": str(tmp_path / "pyc"),
           "NO_COLOR": "1", "GPU_EXPORTER_POLL__INTERVAL": "5s"}
    demo = subprocess.Popen([str(ROOT / "scripts" / "demo.sh")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0,
                            start_new_session=True)
    out, deadline = "", time.monotonic() + 180
    try:
        assert demo.stdout is not None
        fd = demo.stdout.fileno()
        while "Ctrl-C to stop." not in out and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                out += chunk.decode(errors="replace")
    finally:
        os.killpg(demo.pid, signal.SIGINT)
        demo.wait(timeout=30)
    assert "Ctrl-C to stop." in out, out
    assert sorted(_finding_lines(out)) == sorted(MIXED), out
    assert "still watching" not in out


def test_diagnose_waits_for_the_window_not_for_readiness() -> None:
    """The demo's wait, against the exporter as its own process: ready after
    one poll, the findings settle a window later, and diagnose --wait prints
    them all."""
    port = free_port()
    proc = start(["--simulate", "mixed", "--web.listen-address", f"127.0.0.1:{port}",
                  "--config.file", str(DEMO_CONFIG), "--log.level", "error"])
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/-/ready", timeout=60)
        with urllib.request.urlopen(url + "/diagnosis", timeout=10) as resp:
            first = json.load(resp)
        result = run_cli(["diagnose", "--url", url, "--wait", "120s"])
        with urllib.request.urlopen(url + "/diagnosis", timeout=10) as resp:
            after = json.load(resp)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # Ready is not settled: the window had not passed at the first answer.
    assert first["coverage"]["settling"] is not None
    assert first["coverage"]["complete"] is False
    assert after["coverage"]["settling"] is None
    assert result.returncode == 2, result.stdout + result.stderr  # an ECC error is critical
    assert sorted(_finding_lines(result.stdout)) == sorted(MIXED), result.stdout


def test_wait_asks_again_until_settled_and_gives_up_with_the_last_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[object] = [
        ConnectionError("cannot reach the exporter"),  # not listening yet
        ConnectionError("answered HTTP 503"),  # no poll yet
        {"findings": [], "coverage": {"settling": {"gpus": ["0"], "seconds_left": 3.0}}},
        {"findings": [], "coverage": {"settling": None, "complete": True}},
    ]
    now = [0.0]

    def fake_fetch(url: str, timeout: float = 5.0, **_: object) -> dict[str, object]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, dict)
        return answer

    def sleep(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr("gpu_exporter.commands.diagnose.fetch", fake_fetch)
    data = fetch_settled("http://x", 60.0, clock=lambda: now[0], sleep=sleep)
    assert data["coverage"]["complete"] is True and not answers
    # Past the deadline: the last answer, still settling, says so itself.
    answers[:] = [{"findings": [], "coverage": {"settling": {"gpus": ["0"]}}}] * 5
    data = fetch_settled("http://x", 1.0, clock=lambda: now[0], sleep=sleep)
    assert data["coverage"]["settling"] == {"gpus": ["0"]}
    # An exporter that never answers: the last error.
    answers[:] = [ConnectionError("cannot reach")] * 5
    with pytest.raises(ConnectionError):
        fetch_settled("http://x", 1.0, clock=lambda: now[0], sleep=sleep)
