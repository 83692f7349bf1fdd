"""The systemd unit, checked with systemd-analyze: it verifies, its exposure
stays low, it runs unprivileged, and its environment file sets only real
settings."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.cli import parse_settings
from gpu_exporter.facts.cadence import DEFAULT_POLL_INTERVAL_S
from gpu_exporter.settings.config import load
from tests.deploy_files import (
    DEPLOY,
    UNIT,
    unit_entries,
    unit_values,
)

# --- systemd -------------------------------------------------------------------



def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("systemd-analyze not found: install Debian's systemd package "
                    "(apt-get install systemd) to check the unit")
    return found


def _analyze(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SYSTEMD_LOG_LEVEL": "notice", "SYSTEMD_PAGER": "", "NO_COLOR": "1"}
    return subprocess.run([systemd_analyze(), *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120, check=False)


@pytest.fixture
def checkable_unit(tmp_path: Path) -> Iterator[Path]:
    """A copy of the unit whose ExecStart exists on this machine (verify checks
    that it is executable); everything else is the unit as shipped."""
    exe = tmp_path / "bin" / "gpu-exporter"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    text = UNIT.read_text()
    (start,) = unit_values("ExecStart")
    shipped = start.split()[0]
    assert shipped in text
    unit = tmp_path / "units" / UNIT.name
    unit.parent.mkdir()
    unit.write_text(text.replace(shipped, str(exe)))
    # First prove systemd-analyze itself works here, on a trivial unit.
    probe = tmp_path / "units" / "probe.service"
    probe.write_text(f"[Unit]\nDescription=probe\n[Service]\nExecStart={exe}\n")
    sanity = _analyze(["verify", "--man=no", str(probe)], tmp_path)
    if sanity.returncode != 0:
        pytest.skip("systemd-analyze cannot verify units in this container (even a trivial "
                    f"one fails): {(sanity.stderr or sanity.stdout).strip()[:300]}")
    yield unit


def test_systemd_analyze_verify_passes_on_the_unit(checkable_unit: Path) -> None:
    result = _analyze(["verify", "--man=no", str(checkable_unit)], checkable_unit.parent)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # verify reports unknown keys and bad values as warnings with status 0.
    about_unit = [line for line in output.splitlines() if checkable_unit.name in line]
    assert about_unit == [], output


def test_systemd_analyze_verify_catches_mistakes(checkable_unit: Path) -> None:
    """The check above is not vacuous: a misspelt directive is reported."""
    broken = checkable_unit.with_name("broken.service")
    broken.write_text(checkable_unit.read_text().replace("NoNewPrivileges=", "NoNewPrivilges="))
    result = _analyze(["verify", "--man=no", str(broken)], broken.parent)
    assert "NoNewPrivilges" in result.stdout + result.stderr


def test_systemd_exposure_stays_low(checkable_unit: Path) -> None:
    result = _analyze(["security", "--offline=yes", "--threshold=25", "--no-pager",
                       str(checkable_unit)], checkable_unit.parent)
    if "--offline" in result.stderr and "unrecognized" in result.stderr:
        pytest.skip("this systemd-analyze has no --offline security check (systemd < 250)")
    # Exposure above 2.5 of 10 fails: the hardening must not erode silently.
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr


def test_unit_runs_unprivileged_and_hardened() -> None:
    entries = {(s, k): v for s, k, v in unit_entries()}
    service = {k: v for (s, k), v in entries.items() if s == "Service"}
    assert service["User"] not in ("", "root", "0")
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert service["ProtectHome"] == "yes"
    assert service["PrivateTmp"] == "yes"
    assert service["CapabilityBoundingSet"] == ""
    assert service["AmbientCapabilities"] == ""
    assert service["Restart"] == "on-failure"
    assert service["DevicePolicy"] == "closed"
    allowed = {v.split()[0]: v.split()[1] for v in unit_values("DeviceAllow")}
    assert "/dev/nvidiactl" in allowed and "char-nvidia-frontend" in allowed
    assert all("w" not in mode or dev in ("/dev/nvidiactl", "char-nvidia-frontend")
               for dev, mode in allowed.items())
    # Process attribution needs every PID of the host, GPU attribution the devices.
    assert "ProtectProc" not in service and "ProcSubset" not in service
    assert service.get("PrivateDevices", "no") == "no"
    (reload,) = unit_values("ExecReload")
    assert "-HUP" in reload and "$MAINPID" in reload
    sysusers = (DEPLOY / "systemd" / "gpu-exporter.sysusers").read_text()
    assert re.search(rf"^u {re.escape(service['User'])} ", sysusers, re.M)


def test_environment_file_sets_only_real_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    env_file = DEPLOY / "systemd" / "gpu-exporter.env"
    variables: dict[str, str] = {}
    for raw in env_file.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            variables[key] = value
    assert "GPU_EXPORTER_ARGS" in variables
    (start,) = unit_values("ExecStart")
    assert "$GPU_EXPORTER_ARGS" in start.split()
    (env_path,) = unit_values("EnvironmentFile")
    assert env_path.lstrip("-") == "/etc/default/gpu-exporter"
    for key, value in variables.items():
        if key.startswith("GPU_EXPORTER_") and key != "GPU_EXPORTER_ARGS":
            monkeypatch.setenv(key, value)
    settings = load({})
    assert settings.web.listen_address == variables["GPU_EXPORTER_WEB__LISTEN_ADDRESS"]
    parse_settings(shlex.split(variables["GPU_EXPORTER_ARGS"]))
    # It shows the knobs at their defaults: a 1 s poll there once doubled the
    # exporter's CPU on every node installed from it, against the measured 2 s.
    assert settings.poll.interval == DEFAULT_POLL_INTERVAL_S
    for key in variables:
        monkeypatch.delenv(key, raising=False)
    assert settings == load({})  # the same as without the file



