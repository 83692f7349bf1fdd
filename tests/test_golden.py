"""Golden end-to-end test: the real exporter on the simulated `healthy` node,
served over HTTP, compared with a committed exposition. Values that depend on
the machine running the test (durations, Python version) are masked.

Update after an intended change with: UPDATE_GOLDEN=1 ./scripts/test.sh -k golden
"""

from __future__ import annotations

import re
import subprocess
import urllib.request
from pathlib import Path

from tests.golden_files import check_golden
from tests.simnode import SimRun
from tests.tools import tool

GOLDEN = Path(__file__).parent / "golden" / "healthy.prom"

# Families whose values measure this machine, not the simulated node.
_MACHINE_DEPENDENT = re.compile(
    r"^(gpu_exporter_collector_duration_seconds|gpu_exporter_poll_duration_seconds)")


def normalize(text: str) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith(("process_", "python_")) or line.startswith(
                ("# HELP process_", "# TYPE process_", "# HELP python_", "# TYPE python_")):
            continue
        if _MACHINE_DEPENDENT.match(line):
            line = line.rsplit(" ", 1)[0] + " <measured>"
        if line.startswith("gpu_exporter_build_info{"):
            line = re.sub(r'(nvml_binding_version|python_version)="[^"]*"', r'\1="<x>"', line)
        out.append(line)
    return "\n".join(out) + "\n"


def scrape_healthy() -> str:
    """/metrics after 30 s of the scenario. The test drives every poll: the
    exporter serves HTTP without its background poller, so the scrape sees the
    30th poll and no other."""
    with SimRun("healthy") as run:
        run.poll(30)
        run.serve()
        with urllib.request.urlopen(f"http://127.0.0.1:{run.exporter.port}/metrics") as resp:
            assert resp.status == 200
            return str(resp.read().decode())


def test_healthy_metrics_match_golden() -> None:
    check_golden(GOLDEN, lambda: normalize(scrape_healthy()),
                 "UPDATE_GOLDEN=1 ./scripts/test.sh -k golden")


def test_healthy_metrics_pass_promtool(tmp_path: Path) -> None:
    promtool = tool("promtool")
    text = scrape_healthy()
    result = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                            capture_output=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == ""
