"""What the exporter process says in its log: the warning when it runs as root,
and JSON lines with --log.format json (one event per line, every line JSON)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_exporter.daemon.exporter import _holds_capabilities
from tests.procs import ROOT, free_port, wait_http

# Runs the command line with os.geteuid answering the first argument and the
# capability check the second: the root warning can be checked every way
# whoever runs the tests.
_AS_UID = ("import os, sys; uid = int(sys.argv.pop(1)); caps = sys.argv.pop(1) == '1'; "
           "os.geteuid = lambda: uid; import gpu_exporter.daemon.exporter as daemon; "
           "daemon._holds_capabilities = lambda: caps; "
           "from gpu_exporter.cli import main; sys.exit(main())")


def _run_until_ready(uid: int, *flags: str, scenario: str = "healthy",
                     capabilities: bool = True) -> tuple[int, list[str]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", _AS_UID, str(uid), str(int(capabilities)), "--simulate", scenario,
         "--web.listen-address", f"127.0.0.1:{port}", *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        wait_http(f"http://127.0.0.1:{port}/-/ready", timeout=30)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err.splitlines()


def test_running_as_root_is_warned_about_once_and_not_otherwise() -> None:
    code, lines = _run_until_ready(0)
    assert code == 0
    warnings = [line for line in lines if "running as root" in line]
    assert len(warnings) == 1 and "level=warning" in warnings[0], lines
    code, lines = _run_until_ready(1000)
    assert code == 0
    assert not [line for line in lines if "running as root" in line], lines
    # User 0 with every capability dropped (the Kubernetes DaemonSet, for the
    # kubelet's root-only socket) is what the deployment asks for: no warning.
    code, lines = _run_until_ready(0, capabilities=False)
    assert code == 0
    assert not [line for line in lines if "running as root" in line], lines


def test_the_capability_check_reads_this_process() -> None:
    status = Path("/proc/self/status").read_text()
    (line,) = [x for x in status.splitlines() if x.startswith("CapEff:")]
    assert _holds_capabilities() is (int(line.split()[1], 16) != 0)


def test_json_log_format_writes_one_json_event_per_line() -> None:
    code, lines = _run_until_ready(1000, "--log.format", "json")
    assert code == 0 and lines
    events = [json.loads(line) for line in lines]  # every line parses, none is logfmt
    for event in events:
        assert {"ts", "level", "logger", "msg"} <= event.keys(), event
    messages = [e["msg"] for e in events]
    assert any(m.startswith("listening on 127.0.0.1:") for m in messages), messages
    assert any("shutting down" in m for m in messages), messages


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_names_from_the_node_reach_the_log_escaped_and_long_ones_cut_short(
        tmp_path: Path, fmt: str) -> None:
    """A scenario's name and description (a recording's come from the node it
    recorded) with an escape sequence, a line break and a reordering mark, and
    100,000 characters of description: one log line, no raw control byte."""
    scenario = tmp_path / "evil.yaml"
    scenario.write_text('name: "evil\\e[2J"\ndescription: "\\e[31mred\\nFAKE LINE\\u202e '
                        + "x" * 100_000 + '"\n')
    code, lines = _run_until_ready(1000, "--log.format", fmt, scenario=str(scenario))
    assert code == 0
    said = [line for line in lines if "simulating scenario" in line]
    assert len(said) == 1, lines
    line = said[0]
    assert not any(ch in line for ch in "\x1b\u202e"), line
    assert len(line) < 1000 and "(100," in line, line
    assert ("evil\\u001b[2J" if fmt == "json" else "evil\\x1b[2J") in line, line
    assert not any("FAKE LINE" in other for other in lines
                                          if other is not line)


def test_the_logfmt_writer_escapes_every_control_character() -> None:
    import logging

    from gpu_exporter.daemon.logs import LogfmtFormatter

    record = logging.LogRecord("gpu_exporter.x", logging.INFO, __file__, 1, "process %s",
                               ('\x1b[31mx\t"y"\\z\r\n\u202e',), None)
    line = LogfmtFormatter().format(record)
    assert line.endswith(' msg="process \\x1b[31mx\\t\\"y\\"\\\\z\\r\\n\\u202e"'), line
    assert LogfmtFormatter().format(logging.LogRecord(
        "x", logging.INFO, __file__, 1, "plain", (), None)).endswith(" msg=plain")
