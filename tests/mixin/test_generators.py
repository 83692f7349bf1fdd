"""The alert and dashboard generators are tools: they run from anywhere with
--config and --out (nothing looked up next to the code), and the exporter
itself never imports them or the dashboard SDK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpu_exporter_mixin.alerting import __main__ as alerts_main
from gpu_exporter_mixin.alerting.generate import RUNBOOK
from gpu_exporter_mixin.dashboards import __main__ as dashboards_main
from gpu_exporter_mixin.dashboards.generate import NODE

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("main,sample", [(alerts_main.main, RUNBOOK),
                                         (dashboards_main.main, NODE)])
def test_generator_runs_outside_the_checkout(main: object, sample: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    # From another directory, with the checkout's settings passed in: the same
    # files as the committed ones, written under --out, then --check is clean.
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    config = str(ROOT / "alerts" / "config.yaml")
    assert callable(main)
    assert main(["--config", config, "--out", str(out)]) == 0
    assert (out / sample).read_text() == (ROOT / sample).read_text()
    assert main(["--config", config, "--out", str(out), "--check"]) == 0
    (out / sample).write_text("edited\n")
    assert main(["--config", config, "--out", str(out), "--check"]) == 1
    assert str(sample) in capsys.readouterr().err


def test_generator_without_a_config_uses_the_defaults(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no alerts/config.yaml here
    assert alerts_main.main(["--out", str(tmp_path)]) == 0
    assert "job=\"gpu-exporter\"" in (tmp_path / "alerts" / "gpu-exporter.rules.yml").read_text()


def test_a_bad_config_is_one_line_and_exit_2(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("selector: [\n")
    assert alerts_main.main(["--config", str(bad), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0]


def test_the_exporter_imports_no_generator_and_no_dashboard_sdk() -> None:
    code = ("import sys, gpu_exporter.cli, gpu_exporter.daemon.exporter, "
            "gpu_exporter.daemon.pipeline; "
            "bad = sorted(m for m in sys.modules if m.startswith(('gpu_exporter_mixin', "
            "'grafana_foundation_sdk', 'promql_parser', 'markdown_it', 'psutil'))); "
            "print(bad); raise SystemExit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
