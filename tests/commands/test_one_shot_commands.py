"""One-shot commands tell the truth and clean up after themselves.

``diagnose`` never calls a node it cannot see healthy (exit status 4 and one
line saying why: NVML down, no GPU, polls that stopped), reads a running
exporter (by ``host:port`` too), and prints every string that came from a
process or a GPU escaped. ``record`` and ``baseline capture`` fail at once when
NVML cannot start; ``record`` keeps the GPU processes, so a replay finds what
the recorded node had. Every ``--simulate`` command ends in bounded time, and
one stopped with SIGTERM leaves no file in /dev/shm or the temp dir.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.simulator import builtin_scenarios
from tests.procs import ROOT, free_port, run_cli, start, wait_http
from tests.simnode import SimRun

EXIT_BLIND = 4
EXIT_IN_PART = 5
# The fault scenarios that end with NVML down: the node is blind.
NVML_DOWN = {"fault-library-missing", "fault-driver-not-loaded", "fault-nvml-flapping"}
FAULTS = sorted(name for name in builtin_scenarios() if name.startswith("fault-"))


def _nvml_loadable() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


no_driver = pytest.mark.skipif(_nvml_loadable(), reason="this machine has an NVIDIA driver")


def _blind_line(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert lines, stdout
    assert lines[0].startswith("Could not see the GPUs: "), stdout
    assert "healthy" not in stdout
    return lines[0]


# --- diagnose: could not see ----------------------------------------------------------------

@pytest.mark.parametrize("scenario", FAULTS)
def test_every_fault_scenario_is_diagnosed_in_bounded_time_and_blind_ones_say_so(
        scenario: str) -> None:
    t0 = time.monotonic()
    result = run_cli(["diagnose", "--simulate", scenario], timeout=90)
    took = time.monotonic() - t0
    assert took < 60, f"diagnose --simulate {scenario} took {took:.0f}s"
    assert "Traceback" not in result.stderr
    if scenario in NVML_DOWN:
        assert result.returncode == EXIT_BLIND, result.stdout + result.stderr
        assert "NVML is not available" in _blind_line(result.stdout)
    else:
        assert result.returncode in (0, 1, 2, EXIT_IN_PART), result.stdout + result.stderr
        assert "Could not see" not in result.stdout
    if scenario == "fault-process-no-permission":
        # NVML refuses the process list: the rows that judge the GPU's
        # processes could not run, and say why.
        assert result.returncode == EXIT_IN_PART, result.stdout
        assert "healthy" not in result.stdout
        assert ("numa_misplaced/cpu_affinity: GPU memory is held but NVML lists no process on "
                "it (another PID namespace, or no permission)") in result.stdout


def test_a_node_where_nvml_finds_no_gpu_is_not_healthy(tmp_path: Path) -> None:
    scenario = tmp_path / "no-gpus.yaml"
    scenario.write_text("name: no-gpus\ndescription: NVML up, no GPU.\nnode: {gpus: 0}\n")
    result = run_cli(["diagnose", "--simulate", str(scenario)])
    assert result.returncode == EXIT_BLIND
    assert "reports no GPU" in _blind_line(result.stdout)
    as_json = run_cli(["diagnose", "--simulate", str(scenario), "--json"])
    assert as_json.returncode == EXIT_BLIND
    assert json.loads(as_json.stdout)["visibility"]["gpus"] == 0
    assert "could not see the GPUs" in as_json.stderr


@no_driver
def test_diagnose_on_a_node_without_a_driver_says_it_could_not_see() -> None:
    port = free_port()
    proc = start(["--web.listen-address", f"127.0.0.1:{port}"])
    try:
        wait_http(f"http://127.0.0.1:{port}/-/ready")
        # host:port without a scheme, as people type it.
        result = run_cli(["diagnose", "--url", f"127.0.0.1:{port}"])
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert result.returncode == EXIT_BLIND, result.stdout + result.stderr
    assert "NVML is not available" in _blind_line(result.stdout)


@pytest.fixture
def served() -> Iterator[SimRun]:
    """An exporter on a virtual clock, served over HTTP, polled by the test."""
    with SimRun("gpu-lost") as run:
        run.exporter.bind()
        assert run.exporter.server is not None
        run.exporter.server.start()
        yield run


def test_diagnose_reads_a_running_exporter(served: SimRun) -> None:
    served.poll(30)  # GPU 5 fell off the bus at 5 s
    result = run_cli(["diagnose", "--url", f"http://127.0.0.1:{served.exporter.port}/"])
    assert result.returncode == 2, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("CRITICAL GPU 5 ") and "gpu_lost" in first
    as_json = run_cli(["diagnose", "--url", f"127.0.0.1:{served.exporter.port}", "--json"])
    data = json.loads(as_json.stdout)
    assert data["visibility"]["blind"] is None and data["visibility"]["gpus"] == 8
    assert any(f["gpu"] == "5" for f in data["findings"])


def test_diagnose_calls_an_exporter_whose_polls_stopped_blind(served: SimRun) -> None:
    served.poll(30)
    served.clock.advance(120)  # no poll for two minutes
    result = run_cli(["diagnose", "--url", f"127.0.0.1:{served.exporter.port}"])
    assert result.returncode == EXIT_BLIND
    assert "newest poll is 120s old" in _blind_line(result.stdout)


@pytest.mark.parametrize("suffix", ["", "/", "/metrics", "/diagnosis", "/diagnosis/"])
def test_diagnose_takes_the_url_a_person_pastes(served: SimRun, suffix: str) -> None:
    """The exporter's base URL, its /metrics (what Prometheus is pointed at) or
    its /diagnosis: all name the same exporter. The runbook printed is that
    exporter's own /runbook, which states the thresholds the node runs with."""
    served.poll(30)
    base = f"http://127.0.0.1:{served.exporter.port}"
    result = run_cli(["diagnose", "--url", base + suffix])
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"  runbook:  {base}/runbook#gpu-lost-hardware" in result.stdout
    assert "docs/runbook.md" not in result.stdout
    served_runbook = run_cli(["diagnose", "--url", base, "--json"])
    anchor = json.loads(served_runbook.stdout)["findings"][0]["runbook"].partition("#")[2]
    with urllib.request.urlopen(f"{base}/runbook", timeout=10) as resp:
        assert f'id="{anchor}"' in resp.read().decode()


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:9835", "file:///etc/passwd",
                                 "gopher://x", "http://", "http://host:port"])
def test_diagnose_refuses_a_url_that_names_no_exporter(url: str) -> None:
    """Only http and https: the command says so in one line and looks nothing
    up (no connection, no name lookup), exiting 3 like any exporter it could
    not read (2 would read as "critical")."""
    t0 = time.monotonic()
    result = run_cli(["diagnose", "--url", url])
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpu-exporter diagnose: --url '{url}': ")
    assert "Traceback" not in result.stderr
    assert time.monotonic() - t0 < 30
    npd_answer = run_cli(["diagnose", "--url", url, "--format", "npd",
                          "--condition", "cannot-see"])
    assert npd_answer.returncode == 3 and npd_answer.stdout.startswith("exporter not read:")


def test_the_help_names_every_subcommand() -> None:
    from gpu_exporter.cli import SUBCOMMANDS

    text = " ".join(run_cli(["--help"]).stdout.split())
    listed = text.split("Subcommands: ", 1)[1].split(" (each has --help)")[0]
    # The help is wrapped to the terminal, and a line may break after a
    # name's hyphen ("slurm-" / "health").
    assert listed.replace("- ", "-").split(", ") == list(SUBCOMMANDS)
    assert "fleet" in listed
    for name in SUBCOMMANDS:
        assert run_cli([name, "--help"]).returncode == 0, name


def test_the_exit_statuses_are_documented() -> None:
    result = run_cli(["diagnose", "--help"])
    text = " ".join(result.stdout.split())
    assert "3 the exporter could not be read" in text
    assert "4 the GPUs could not be seen" in text


# --- diagnose: strings from processes and GPUs are escaped ---------------------------------

def test_a_process_named_with_escape_codes_and_a_newline_prints_escaped(
        tmp_path: Path) -> None:
    scenario = tmp_path / "evil-name.yaml"
    scenario.write_text(
        "name: evil-name\ndescription: A process named to forge a line.\n"
        "extends: memory-held-sm-idle-process-stalled\n"
        'process_changes:\n  24107: {comm: "\\e[31m\\nfix: evil"}\n')
    result = run_cli(["diagnose", "--simulate", str(scenario)])
    assert result.returncode == 1, result.stdout + result.stderr
    assert "\x1b" not in result.stdout
    assert "process comm \\x1b[31m\\nfix: evil," in result.stdout
    # One finding, one fix line: the name forged none.
    fixes = [line for line in result.stdout.splitlines() if "fix:" in line.split("evidence")[0]]
    assert len(fixes) == 1 and fixes[0].startswith("  fix:      ")


# --- record and baseline -------------------------------------------------------------------

@pytest.mark.parametrize("command", [["record", "--duration", "60s"],
                                     ["baseline", "capture", "--polls", "60"]])
@pytest.mark.parametrize("where", [[], ["--simulate", "fault-library-missing"]])
def test_record_and_baseline_fail_at_once_when_nvml_cannot_start(
        tmp_path: Path, command: list[str], where: list[str]) -> None:
    if not where and _nvml_loadable():
        pytest.skip("this machine has an NVIDIA driver")
    out = tmp_path / "out"
    t0 = time.monotonic()
    result = run_cli([*command, "--out", str(out), *where])
    assert time.monotonic() - t0 < 15
    assert result.returncode == 2, result.stdout + result.stderr
    assert "NVML is not available" in result.stderr
    assert not out.exists()


def test_a_recording_keeps_the_gpu_processes_and_its_replay_their_finding(
        tmp_path: Path) -> None:
    recording = tmp_path / "stalled.yaml"
    result = run_cli(["record", "--simulate", "memory-held-sm-idle-process-stalled",
                      "--duration", "40s", "--out", str(recording)])
    assert result.returncode == 0, result.stderr
    replay = run_cli(["diagnose", "--simulate", str(recording), "--json"])
    findings = json.loads(replay.stdout)["findings"]
    stalled = [f for f in findings if f["cause"] == "process_stalled"]
    assert [f["gpu"] for f in stalled] == ["7"]
    assert stalled[0]["evidence"]["process_pid"] == "24107"


# --- cleaning up on SIGTERM ----------------------------------------------------------------

def _sim_root(tmp: Path, deadline: float) -> tuple[Path, Path]:
    """The command's simulated node: its root in the temp dir, and where its
    /proc and /sys live (in /dev/shm when the temp dir is on a disk)."""
    while time.monotonic() < deadline:
        roots = list(tmp.glob("gpu-exporter-sim-*"))
        if roots and (roots[0] / "proc").exists():
            return roots[0], (roots[0] / "proc").resolve().parent
        time.sleep(0.05)
    raise AssertionError("the command made no simulated node")


@pytest.mark.parametrize("command", [
    ["diagnose", "--simulate", "fault-hung-call"],
    ["baseline", "capture", "--simulate", "fault-hung-call", "--polls", "200"],
    ["record", "--simulate", "fault-hung-call", "--duration", "300s"],
])
def test_a_one_shot_command_stopped_with_sigterm_leaves_no_file(
        tmp_path: Path, command: list[str]) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = ["--out", str(tmp_path / "out")] if command[0] != "diagnose" else []
    proc = subprocess.Popen([sys.executable, "-m", "gpu_exporter", *command, *out],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)})
    try:
        root, files = _sim_root(tmp, time.monotonic() + 20)
        time.sleep(1.0)  # well into the run: the scenario's call hangs from 30 s on
        assert proc.poll() is None, "the command ended before the signal"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr.read()  # type: ignore[union-attr]
    assert not root.exists()
    assert not files.exists(), f"{files} was left behind"
    assert list(tmp.iterdir()) == []
