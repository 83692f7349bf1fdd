"""The benchmark runner's quick mode on the smallest node: it runs end to end
and produces a well-formed table and report. Numbers are never asserted here —
timing belongs in BENCHMARKS.md, not in a test that must pass on any machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.daemon_probe import board, mock_missing
from benchmarks.fleet_scale import RuleGroupLog
from benchmarks.run import (
    BEGIN,
    COLUMNS,
    END,
    SCRAPE_EVERY_S,
    Result,
    headline_rows,
    median_result,
)
from benchmarks.scenarios import ALL, HEADLINE, Config, scenario

ROOT = Path(__file__).resolve().parent.parent


def test_configs_cover_the_nodes_and_process_counts_and_parse_back() -> None:
    names = {c.name for c in ALL}
    assert names == {f"{n}/{p}p" for n in ("1gpu", "8gpu", "8x7mig") for p in (0, 64, 512)}
    for c in ALL:
        assert Config.parse(c.name) == c


def test_generated_scenarios_spread_processes_over_gpus_and_instances() -> None:
    sc = scenario(Config(8, 64, mig=True))
    assert sc.node.gpus == 8 and len(sc.processes) == 64
    assert {p.gpus[0] for p in sc.processes} == set(range(8))
    assert all(p.mig is not None for p in sc.processes)
    assert all(len(g.mig_instances or []) == 7 for g in sc.gpus.values())


def test_quick_run_on_one_gpu_writes_a_well_formed_table(tmp_path: Path) -> None:
    report = tmp_path / "BENCHMARKS.md"
    report.write_text("# Benchmarks\n\nhand-written text stays\n")
    raw = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--configs", "1gpu/0p",
         "--polls", "3", "--drift-polls", "30", "--output", str(report), "--json", str(raw)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]

    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    header = lines[0].split()
    assert header[0] == "exporter" and "RSS" in lines[0]
    rows = [line.split() for line in lines[2:] if line.split()[0] in ("ours", "nvitop")]
    assert {r[0] for r in rows} == {"ours", "nvitop"}
    assert all(r[1] == "1gpu/0p" for r in rows)

    results = json.loads(raw.read_text())
    assert {r["exporter"] for r in results} == {"ours", "nvitop"}
    for r in results:
        assert r["error"] == ""
        assert r["polls"] == 3
        assert r["series"] > 0 and r["bytes_plain"] > 0
        assert r["cpu_ms"] > 0 and r["nvml_calls_per_gpu"] > 0
        assert r["drift"]["polls"] > 0

    text = report.read_text()
    assert "hand-written text stays" in text
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    table = [line for line in text.splitlines() if line.startswith("| exporter |")]
    assert table and table[0].count("|") == len(COLUMNS) + 1
    assert "| ours | 1gpu/0p |" in text and "| nvitop | 1gpu/0p |" in text


def _poll_on_gpu(*args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.poll_on_gpu", "--warmup", "2", "--window", "8",
         *args], cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
        env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr[-3000:]
    got, end = json.JSONDecoder().raw_decode(result.stdout)
    tables = result.stdout[end:]
    for header in ("| measure | value |", "| NVML function | calls per GPU-poll |",
                   "| collector | wall ms, last poll |"):
        assert header in tables
    assert isinstance(got, dict)
    # Whole polls measured, every C call of them counted once per GPU-poll:
    # each function's figure is a whole number of calls over GPUs x polls.
    per = got["gpus"] * got["polls"]
    calls = got["nvml_calls_by_function"]
    assert got["polls"] >= 3 and calls
    # The Xid event set is drained once a poll, not once a GPU.
    assert abs(calls.get("nvmlEventSetWait_v2", 0) * got["gpus"] - 1) < 1e-9
    for name, value in calls.items():
        assert abs(value * per - round(value * per)) < 1e-6, name
    assert abs(sum(calls.values()) - got["nvml_calls_per_gpu_poll"]) < 1e-9
    assert got["cpu_ms_per_gpu_poll"] > 0 and 10 < got["rss_mib"] <= got["rss_peak_mib"]
    assert got["stop_status"] == 0 and got["stop_ms"] > 0
    assert "device" in got["collector_ms_last_poll"]
    return got


def test_poll_on_gpu_measures_the_daemon_on_a_simulated_node() -> None:
    got = _poll_on_gpu("--simulate", "healthy")
    assert got["gpus"] == 8


@pytest.mark.skipif(mock_missing() is not None, reason="NVIDIA's mock NVML is absent: "
                    + (mock_missing() or "").partition(chr(10))[0])
def test_poll_on_gpu_measures_the_daemon_on_nvidias_mock_nvml() -> None:
    t4 = board("t4")
    got = _poll_on_gpu(env=t4.env())
    assert (got["gpus"], got["gpu"]) == (t4.gpus, t4.product)
    assert got["driver"]


def test_poll_on_gpu_says_so_when_no_gpu_answers() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.poll_on_gpu", "--warmup", "0", "--window", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/nonexistent"})
    assert result.returncode == 2
    assert "poll_on_gpu: no GPU answered through NVML on this node" in result.stderr
    assert "Traceback" not in result.stderr


def _result(exporter: str, **numbers: float) -> Result:
    r = Result(exporter, HEADLINE.name, HEADLINE.gpus, HEADLINE.processes, HEADLINE.mig,
               latency=False)
    for name, value in numbers.items():
        setattr(r, name, value)
    return r


def test_cpu_per_second_is_the_poll_over_the_interval_plus_a_scrape_every_15_s() -> None:
    r = _result("ours", interval_s=2.0, cpu_ms=12.0, own_ms=8.0, scrape_cpu_fresh_ms=3.0)
    assert r.cpu_per_s_ms() == 12.0 / 2 + 3.0 / SCRAPE_EVERY_S
    assert r.cpu_per_s_ms(own=True) == 8.0 / 2 + 3.0 / SCRAPE_EVERY_S


def test_headline_judges_each_ratio_against_its_target() -> None:
    ours = _result("ours", interval_s=2.0, own_ms=6.0, cpu_ms=9.0, rss_mib=40.0,
                   p99_32_ms=20.0)
    ours.series = 8 * 90
    nvitop = _result("nvitop", interval_s=1.0, own_ms=6.0, cpu_ms=8.0, rss_mib=41.0,
                     p99_32_ms=2000.0)
    nvitop.series = 8 * 65
    rows = {row[0]: row for row in headline_rows([ours, nvitop]) or []}
    cpu = rows["CPU ms/s, exporter's own (simulator subtracted)"]
    assert cpu[3] == "0.50" and cpu[5] == "met"  # 3.0 / 6.0 ms/s, no scrape CPU
    assert rows["RSS MiB"][5] == "met"
    assert rows["series per GPU"][1] == "90.0" and rows["series per GPU"][5] == "met"
    ours.rss_mib, ours.series, ours.own_ms = 42.0, 8 * 101, 6.2
    rows = {row[0]: row for row in headline_rows([ours, nvitop]) or []}
    assert rows["RSS MiB"][5] == "**missed**"
    assert rows["series per GPU"][5] == "**missed**"
    assert rows["CPU ms/s, exporter's own (simulator subtracted)"][5] == "**missed**"
    assert headline_rows([ours]) is None  # nothing to compare with


def test_repeats_report_the_median_of_every_figure() -> None:
    runs = [_result("ours", own_ms=v, rss_mib=r) for v, r in ((5.0, 50.0), (9.0, 48.0),
                                                              (6.0, 49.0))]
    runs[0].drift = {"polls": 10}
    m = median_result(runs)
    assert (m.own_ms, m.rss_mib, m.repeats) == (6.0, 49.0, 3)
    assert m.drift == {"polls": 10}


class _Groups:
    """A central store whose rules API answers one snapshot after another."""

    def __init__(self, *answers: list[dict[str, object]]) -> None:
        self.answers = list(answers)

    def rule_groups(self) -> list[dict[str, object]]:
        return self.answers.pop(0)


def _group(started: str, took: float, rules: dict[str, float]) -> dict[str, object]:
    return {"name": "recording", "lastEvaluation": started, "evaluationTime": took,
            "rules": [{"name": n, "evaluationTime": t} for n, t in rules.items()]}


def test_the_fleet_benchmark_counts_each_rule_evaluation_once_and_names_its_slowest() -> None:
    log = RuleGroupLog()
    store = _Groups(
        [_group("0001-01-01T00:00:00Z", 0.0, {})],  # not evaluated yet: not counted
        [_group("2026-11-23T10:00:00Z", 0.2, {"a": 0.15, "b": 0.05})],
        [_group("2026-11-23T10:00:00Z", 0.2, {"a": 0.15, "b": 0.05})],  # the same, read again
        [_group("2026-11-23T10:00:15Z", 1.3, {"a": 0.1, "b": 1.2})],
        [_group("2026-11-23T10:00:30Z", 0.3, {"a": 0.2, "b": 0.1})])
    for _ in range(5):
        log.read(store)  # type: ignore[arg-type]
    got = log.summary()["recording"]
    assert got["evaluations"] == 3
    assert got["median_s"] == 0.3
    assert (got["max_s"], got["max_rule"], got["max_rule_s"]) == (1.3, "b", 1.2)
    assert got["over_target"] == 1
