"""A verdict states its coverage: "healthy" only where every row of the table
was judged on every GPU. Otherwise ``diagnose``, /diagnosis and the node page
name the checks that could not run and why, grouped by reason across GPUs, and
``diagnose`` exits 5 ("checked only in part") unless a finding outranks it.

Held on NVIDIA's own mock NVML (every board file it ships: no simulator in the
process), on every driver branch the simulator emulates, and on the hostile
cases (a rule that raises, a reader switched off, a lost GPU, processes NVML
does not list, an exporter from before coverage was reported)."""

from __future__ import annotations

import json
import logging
import os
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.commands import npd
from gpu_exporter.commands.diagnose import simulate
from gpu_exporter.commands.report import (
    EXIT_BLIND,
    EXIT_CRITICAL,
    EXIT_HEALTHY,
    EXIT_IN_PART,
    EXIT_STATUSES,
    EXIT_WARNING,
    exit_status,
    render_text,
)
from gpu_exporter.diagnosis import rules
from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.coverage import answer, checks_text, gpu_list, reason_text
from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.facts.cadence import SAMPLES_EVERY_S
from gpu_exporter.settings.config_types import parse_duration
from gpu_exporter.simulator.drivers import BRANCHES
from tests.procs import ROOT, free_port, run_cli, start, wait_http
from tests.simnode import SimRun

_RECOVERY = {"recovery_action/gpu_reset", "recovery_action/node_reboot",
             "recovery_action/drain_p2p", "recovery_action/drain_and_reset"}
_GPM = {"utilization_inflated/small_kernels", "memory_bound/dram_bandwidth"}
_FABRIC = {"fabric_degraded/nvswitch_fabric"}
# What an H100 node's driver does not offer on each branch: the README's
# driver table (GPM came in R520, Hopper's in R525; fabric info in R550; the
# driver's recovery action in R565). A fact of the node, never a gap.
UNCHECKED_ON_H100: dict[str, set[str]] = {
    "R470": _GPM | _RECOVERY | _FABRIC, "R525": _RECOVERY | _FABRIC,
    "R535": _RECOVERY | _FABRIC, "R550": _RECOVERY, "R570": set(), "R580": set(),
}
# Rows whose subject the simulated node lacks: no kubelet, no fan on an H100
# SXM (cooled by the chassis), no C2C link (no Grace CPU). The starved rows, a
# CPU limit's included, are judged on its busy GPUs: a GPU kept busy is fed,
# whatever its host.
NOTHING_TO_CHECK = {"gpu_allocated_unused/no_process", "gpu_allocated_unused/runs_on_cpu",
                    "cooling_degraded/fan_stopped", "c2c_errors/link_integrity"}


def _scenario(tmp: Path, extends: str, **node: str) -> str:
    path = tmp / f"{extends}-{'-'.join(node.values())}.yaml"
    fields = ", ".join(f"{k}: {v}" for k, v in node.items())
    path.write_text(f"name: {path.stem}\ndescription: '{extends} with {fields}.'\n"
                    f"extends: {extends}\nnode: {{{fields}}}\n")
    return str(path)


def _keys(entries: list[dict[str, Any]]) -> set[str]:
    return {k for e in entries for k in e["checks"]}


# --- every driver branch, simulated --------------------------------------------------------

@pytest.mark.parametrize("branch", [b.name for b in BRANCHES])
def test_each_driver_branch_names_what_it_does_not_offer(branch: str, tmp_path: Path) -> None:
    """A healthy node on any branch is healthy (exit 0); what its driver does
    not offer is listed as a fact of the board and driver, not a gap."""
    result = run_cli(["diagnose", "--simulate", _scenario(tmp_path, "healthy", driver=branch)])
    out = result.stdout
    assert result.returncode == EXIT_HEALTHY, out
    assert out.startswith("No problems found: every GPU on this node looks healthy.")
    assert "Checked only in part" not in out
    facts = out.split("Not available on this node")[1].split("Nothing to check")[0] \
        if "Not available on this node" in out else ""
    # The checks only: readings and event types a board lacks are listed
    # beside them (tests/diagnosis/test_health_events.py).
    facts = "".join(line for line in facts.splitlines(keepends=True)
                    if not re.match(r"  GPUs? [^:]*: not available on ", line))
    facts = "" if facts.strip() == "(the board or driver does not offer it; not a gap):" \
        else facts
    for key in UNCHECKED_ON_H100[branch]:
        symptom, cause = key.split("/")
        assert re.search(rf"{symptom}[ /(][^:]*{cause}[^:]*: not available on NVIDIA H100 "
                         rf"80GB HBM3 / driver {branch}: ", facts), (key, out)
    if not UNCHECKED_ON_H100[branch]:
        assert not facts, out
    if UNCHECKED_ON_H100[branch] >= _RECOVERY:
        assert ("GPUs 0-7: recovery_action (gpu_reset, node_reboot, drain_p2p, "
                f"drain_and_reset): not available on NVIDIA H100 80GB HBM3 / driver {branch}: "
                f"NVML gives no recovery action (driver {branch} is older than R565, the first "
                "to have it)") in out


@pytest.mark.parametrize("branch", ["R470", "R550", "R580"])
def test_the_coverage_is_what_the_engine_could_not_judge(branch: str, tmp_path: Path) -> None:
    """/diagnosis's coverage holds each unjudged row and GPU exactly once;
    gpu_diagnosis_not_judged exports exactly its gaps (none on a healthy
    node, whatever its driver lacks)."""
    data = simulate(_scenario(tmp_path, "healthy", driver=branch), None, None)
    cov = data["coverage"]
    assert cov["not_checked"] == []
    assert _keys(cov["not_available"]) == UNCHECKED_ON_H100[branch]
    assert {e["on"] for e in cov["not_available"]} <= {f"NVIDIA H100 80GB HBM3 / driver {branch}"}
    assert _keys(cov["nothing_to_check"]) == NOTHING_TO_CHECK
    assert cov["complete"] is True
    pairs = [(g, k) for section in ("not_checked", "not_available", "nothing_to_check")
             for e in cov[section] for g in e["gpus"] for k in e["checks"]]
    assert len(pairs) == len(set(pairs))
    with SimRun(_load(tmp_path, branch), metrics={"detail": True}) as run:
        run.poll(40)
        assert _not_judged(run.scrape()) == set()


def test_the_metric_counts_the_gaps_the_verdict_counts(tmp_path: Path) -> None:
    """A reader switched off on a driver that lacks other checks: the metric
    holds exactly the rows the reader's absence left unjudged, none of those
    the driver does not offer."""
    config = tmp_path / "no-gpm.yaml"
    config.write_text("collectors:\n  gpm: false\n")
    cov = simulate(_scenario(tmp_path, "healthy", driver="R550"), config, None)["coverage"]
    assert _keys(cov["not_checked"]) == _GPM and _keys(cov["not_available"]) == _RECOVERY
    from gpu_exporter.simulator import load_scenario
    with SimRun(load_scenario(_scenario(tmp_path, "healthy", driver="R550")),
                collectors={"gpm": False}) as run:
        run.poll(40)
        assert _not_judged(run.scrape()) == {(str(g), k) for g in range(8) for k in _GPM}


def _not_judged(metrics: str) -> set[tuple[str, str]]:
    return {(g, f"{s}/{c}") for c, g, s in re.findall(
        r'^gpu_diagnosis_not_judged\{cause="(\w+)",gpu="(\d+)",symptom="(\w+)"', metrics, re.M)}


def _load(tmp: Path, branch: str) -> Any:
    from gpu_exporter.simulator import load_scenario
    return load_scenario(_scenario(tmp, "healthy", driver=branch))


def test_a_board_without_gpm_or_nvlink_lists_them_as_facts(tmp_path: Path) -> None:
    data = simulate(_scenario(tmp_path, "healthy", profile="a100-pcie-40gb"), None, None)
    cov = data["coverage"]
    # Before Hopper NVML has no GPM: not offered by the board, not a gap.
    assert not _GPM & _keys(cov["not_checked"])
    gpm = [e for e in cov["not_available"] if set(e["checks"]) == _GPM]
    assert gpm and gpm[0]["reason"].startswith("NVML gives no GPM metrics")
    assert gpm[0]["on"].startswith("NVIDIA A100") and gpm[0]["on"].endswith("/ driver R580")
    # A GPU with no NVLink is in no NVSwitch fabric: nothing to check, not a gap.
    fabric = [e for e in cov["nothing_to_check"] if e["checks"] == sorted(_FABRIC)]
    assert fabric and "no NVLink" in fabric[0]["reason"]


def test_a_board_without_fans_has_none_to_check_and_a_failing_fan_is_a_gap(
        tmp_path: Path) -> None:
    fan = {"cooling_degraded/fan_stopped"}
    passive = simulate(_scenario(tmp_path, "healthy", profile="a100-pcie-40gb"), None, None)
    entry = [e for e in passive["coverage"]["nothing_to_check"] if fan <= set(e["checks"])]
    assert entry and entry[0]["reason"].startswith("NVML counts no fan on this GPU")
    assert not fan & _keys(passive["coverage"]["not_checked"])
    # A board with fans (two on an RTX 4090) whose every fan answers an error
    # could not be checked.
    path = tmp_path / "fans-failing.yaml"
    path.write_text("name: fans-failing\ndescription: 'Fans answer an error.'\n"
                    "extends: healthy\nnode: {profile: rtx-4090}\n"
                    "gpus: {0: {fans: [{error: UNKNOWN}, {error: UNKNOWN}]}}\n")
    failing = simulate(str(path), None, None)["coverage"]
    entry = [e for e in failing["not_checked"] if fan <= set(e["checks"])]
    assert entry and entry[0]["gpus"] == ["0"], failing
    assert entry[0]["reason"] == "NVML gives no fan speed"
    assert not fan & _keys([e for e in failing["nothing_to_check"] if "0" in e["gpus"]])


# --- the exit status and its precedence ---------------------------------------------------

def test_a_finding_outranks_a_check_that_could_not_run() -> None:
    critical = [{"severity": "critical"}]
    warning = [{"severity": "warning"}]
    assert exit_status(critical, None, in_part=True) == EXIT_CRITICAL
    assert exit_status(warning, None, in_part=True) == EXIT_WARNING
    assert exit_status([], None, in_part=True) == EXIT_IN_PART
    assert exit_status([], None, in_part=False) == EXIT_HEALTHY
    assert exit_status(critical, "NVML is not available", in_part=True) == EXIT_BLIND


def test_a_lost_gpu_is_critical_and_its_unread_checks_are_named() -> None:
    result = run_cli(["diagnose", "--simulate", "gpu-lost"])
    assert result.returncode == EXIT_CRITICAL, result.stdout
    assert result.stdout.startswith("CRITICAL GPU 5 ")
    assert "Checked only in part: no other problems found in the checks that ran" in result.stdout
    lost = [ln for ln in result.stdout.splitlines() if ln.startswith("  GPU 5: ")]
    assert len(lost) == 1 and lost[0].endswith(": the GPU is lost: NVML cannot read it")


def test_the_exit_statuses_and_their_precedence_are_documented() -> None:
    help_text = " ".join(run_cli(["diagnose", "--help"]).stdout.split())
    assert "5 checked only in part" in help_text
    assert "2 before 1 before 5" in help_text
    readme = (ROOT / "README.md").read_text()
    codes = [code for code, _ in EXIT_STATUSES]
    assert codes == [0, 1, 2, 3, 4, 5]
    for code, text in EXIT_STATUSES:
        assert f"| {code} | {text} |" in readme, code
        assert f"{code} {text}" in help_text, code


def test_an_answer_without_coverage_is_never_healthy() -> None:
    """An exporter from before coverage was reported cannot say every check ran."""
    text = render_text([], color=False, coverage=None)
    assert "healthy" not in text and text.startswith("Checked only in part")


# --- why, for the hostile cases ----------------------------------------------------------

def test_a_reader_switched_off_is_named_where_a_row_needed_it(tmp_path: Path) -> None:
    config = tmp_path / "no-gpm.yaml"
    config.write_text("collectors:\n  gpm: false\n")
    cov = simulate("healthy", config, None)["coverage"]
    assert cov["not_checked"] == [{
        "gpus": [str(i) for i in range(8)], "checks": [r.key for r in t.ROWS if r.key in _GPM],
        "reason": "the gpm reader is switched off (--no-collector.gpm)"}]


def test_a_rule_that_raises_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> rules.Verdict:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setitem(rules.RULES, t.THERMAL, broken)
    logging.disable(logging.ERROR)
    try:
        with SimRun("healthy") as run:
            snap = run.poll(5)
            cov = answer(snap)
    finally:
        logging.disable(logging.NOTSET)
    [entry] = [e for e in cov["not_checked"] if e["checks"] == [t.THERMAL.key]]
    assert entry["reason"] == "its rule failed: ZeroDivisionError: division by zero"


def test_the_reasons_are_not_worked_out_every_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll judges each row once per GPU; a row's rule runs once more, for
    its reason, when a GPU's unjudged rows change, not at every poll of a
    steady node, and not again however often /diagnosis is asked."""
    calls = []
    fabric = rules.RULES[t.FABRIC_DEGRADED]

    def counted(*args: Any) -> rules.Verdict:
        calls.append(1)
        return fabric(*args)

    monkeypatch.setitem(rules.RULES, t.FABRIC_DEGRADED, counted)
    with SimRun(_load_node("healthy", driver="R470")) as run:
        run.poll(3)  # 4 polls of 8 GPUs: judged 32 times, and its reasons worked out
        assert 4 * 8 < len(calls) <= 4 * 8 + 8 * 4
        before = len(calls)
        snap = run.poll(5)  # steady: only the polls' own judgements
        assert len(calls) == before + 5 * 8
        first = answer(snap)
        assert answer(snap) == first
        assert len(calls) == before + 5 * 8
    assert _keys(first["not_available"]) == UNCHECKED_ON_H100["R470"]


def _load_node(scenario: str, **node: str) -> Any:
    from gpu_exporter.simulator import load_scenario
    from gpu_exporter.simulator.model import Scenario

    data = load_scenario(scenario).model_dump(exclude_unset=True)
    data.setdefault("node", {}).update(node)
    return Scenario.model_validate(data)


def test_group_lines_read_for_people() -> None:
    assert gpu_list(["0", "1", "2", "3", "4", "5", "6", "7"]) == "GPUs 0-7"
    assert gpu_list(["5"]) == "GPU 5"
    assert gpu_list(["0", "1", "2", "5", "7"]) == "GPUs 0-2, 5, 7"
    assert checks_text(["recovery_action/gpu_reset", "recovery_action/node_reboot",
                        "clocks_capped/application_clocks"]) == \
        "recovery_action (gpu_reset, node_reboot), clocks_capped/application_clocks"


# --- while the window fills ----------------------------------------------------------------

def test_a_verdict_before_the_window_filled_is_not_healthy() -> None:
    with SimRun("healthy") as run:
        snap = run.poll(10)
        early = answer(snap)
        assert early["complete"] is False
        settling = early["settling"]
        # 10 s into the 30 s window. The rows that read a rate judge from the second
        # poll; those that read GPM from its second sample, SAMPLES_EVERY_S later.
        assert settling["gpus"] == [str(i) for i in range(8)]
        assert 20.0 <= settling["seconds_left"] <= 20.0 + SAMPLES_EVERY_S
        text = render_text([], color=False, coverage=early)
        assert (f"GPUs 0-7: still watching: a finding needs 30 s of polls, "
                f"{settling['seconds_left']} s to go") in text
        # The command it suggests runs as printed: --wait takes a duration,
        # long enough for the window left.
        wait = re.search(r"diagnose --wait (\S+)\)", text)
        assert wait, text
        assert parse_duration(wait.group(1)) >= settling["seconds_left"]
        assert "healthy" not in text
        snap = run.poll(25)
        assert answer(snap)["settling"] is None and answer(snap)["complete"] is True


def test_a_row_whose_reading_is_on_its_way_keeps_its_gpu_settling() -> None:
    # mixed's GPU 4 looks busy while its SMs idle: only GPM's SM activity,
    # a ratio of two samples SAMPLES_EVERY_S apart, shows it. Its row waits on
    # that first ratio and then the window; the GPU is settling until both
    # could have passed, so a diagnose --wait cannot end before the finding.
    window = 5.0
    with SimRun("mixed", diagnosis={"window": window}) as run:
        early = run.poll(1)
        assert (4, "small_kernels") not in {
            (f.gpu, f.row.cause) for f in early.derived(FINDINGS) or ()}
        settling = answer(early)["settling"]
        assert "4" in settling["gpus"]
        assert settling["seconds_left"] > window
        # Waiting is not lacking: the check is said to be on its way, not
        # missing from NVML.
        reasons = [e["reason"] for e in answer(early)["not_checked"] if "4" in e["gpus"]
                   and "utilization_inflated/small_kernels" in e["checks"]]
        assert reasons and reasons[0].startswith("GPM's first ratio is on its way"), reasons
        for _ in range(60):
            if answer(snap := run.poll(1))["settling"] is None:
                break
        found = {(f.gpu, f.row.cause) for f in snap.derived(FINDINGS) or ()}
        assert (4, "small_kernels") in found


# --- NVIDIA's mock NVML, every board file it ships -----------------------------------------

def _mock_dir() -> Path | None:
    """NVIDIA's mock NVML: $GPU_EXPORTER_MOCKNVML or <repo>/../shared/nvidia-mocknvml."""
    configured = os.environ.get("GPU_EXPORTER_MOCKNVML")
    path = Path(configured) if configured else ROOT.parent / "shared" / "nvidia-mocknvml"
    return path if (path / "libnvidia-ml.so.1").is_file() else None


MOCK = _mock_dir()
MOCK_BOARDS = sorted(p.stem.removeprefix("mock-nvml-config-")
                     for p in (MOCK / "configs").glob("mock-nvml-config-*.yaml")) if MOCK else []
needs_mock = pytest.mark.skipif(
    MOCK is None, reason="NVIDIA's mock NVML is not at $GPU_EXPORTER_MOCKNVML or "
    f"{ROOT.parent / 'shared' / 'nvidia-mocknvml'}")


@pytest.fixture(scope="module")
def mock_exporters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """The exporter as a process of its own on each board file, all at once,
    with a short window so each settles in seconds."""
    assert MOCK is not None
    config = tmp_path_factory.mktemp("mock") / "fast.yaml"
    config.write_text("poll: {interval: 0.5s}\ndiagnosis: {window: 2s, clear_after: 2s}\n")
    procs, ports = [], {}
    try:
        for board in MOCK_BOARDS:
            port = ports[board] = free_port()
            procs.append(start(
                ["--web.listen-address", f"127.0.0.1:{port}", "--config.file", str(config),
                 "--log.level", "error"],
                env={"LD_LIBRARY_PATH": str(MOCK), "MOCK_NVML_CONFIG":
                     str(MOCK / "configs" / f"mock-nvml-config-{board}.yaml")}))
        for port in ports.values():
            wait_http(f"http://127.0.0.1:{port}/-/ready", timeout=60)
        yield ports
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def _board_and_driver(board: str) -> str:
    """``NVIDIA H100 80GB HBM3 / driver R550``, as the board file says it."""
    assert MOCK is not None
    text = (MOCK / "configs" / f"mock-nvml-config-{board}.yaml").read_text()
    name = re.search(r'^  name: "([^"]+)"', text, re.M)
    driver = re.search(r'^  driver_version: "(\d+)\.', text, re.M)
    assert name and driver, board
    return f"{name[1]} / driver R{driver[1]}"


# What NVIDIA's mock answers NOT_SUPPORTED for on every board file it ships
# (its README: no utilization samples; application clocks of the SM and the
# recovery-action field are not in its tables), and GPM, which NVML offers
# from Hopper on only.
_MOCK_NOT_OFFERED = {"utilization_bursty/input_starvation", "clocks_capped/application_clocks",
                     *_RECOVERY}
_PRE_HOPPER = {"a100", "l40s", "t4"}
# The Grace boards: the mock answers their C2C mode (on) but not the C2C error
# fields 231-233 (R575 and newer) its tables lack.
_GRACE = {"gb200", "gb300"}
_C2C = {"c2c_errors/link_integrity"}


@needs_mock
@pytest.mark.parametrize("board", MOCK_BOARDS)
def test_on_every_mock_board_a_healthy_node_is_healthy_and_says_what_it_lacks(
        board: str, mock_exporters: dict[str, int]) -> None:
    url = f"http://127.0.0.1:{mock_exporters[board]}"
    result = run_cli(["diagnose", "--url", url, "--wait", "60s"])
    out = result.stdout
    # What the board or driver does not offer is a fact, not a gap: healthy.
    assert result.returncode == EXIT_HEALTHY, out + result.stderr
    assert out.startswith("No problems found: every GPU on this node looks healthy.")
    on = _board_and_driver(board)
    assert ("utilization_bursty/input_starvation: not available on "
            f"{on}: NVML gives no utilization samples") in out
    with urllib.request.urlopen(url + "/diagnosis", timeout=10) as resp:
        data = json.load(resp)
    cov = data["coverage"]
    assert cov["complete"] is True and cov["settling"] is None and cov["not_checked"] == []
    # Before Hopper: no GPM, and no fabric state on a board with NVLink (the
    # A100's; the L40S and T4 have none, so no fabric to check).
    expected = (_MOCK_NOT_OFFERED | (_GPM if board in _PRE_HOPPER else set())
                | (_FABRIC if board == "a100" else set()) | (_C2C if board in _GRACE else set()))
    assert _keys(cov["not_available"]) == expected
    assert {e["on"] for e in cov["not_available"]} == {on}
    # Nothing the verdict counts as a gap, so nothing gpu_diagnosis_not_judged counts.
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        assert _not_judged(resp.read().decode()) == set()
    # A value a driver branch brought: the words say whether this driver is
    # older than that branch, or has the call and the GPU answers it not
    # supported (no driver update brings it). The mock's boards run both.
    driver = int(on.rsplit(" R", 1)[1])
    for words, since in [("recovery action", 565)] + (
            [("C2C link error counts", 575)] if board in _GRACE else []):
        said = (f"driver R{driver} is older than R{since}, the first to have it"
                if driver < since else f"driver R{driver} has it; this GPU answers it not "
                "supported")
        assert f"{words} ({said})" in out, (board, out)
    # The driver's version is known: never the fallback "drivers R565 and newer".
    assert re.search(r"drivers R\d+ and newer", out) is None, out
    if board in _PRE_HOPPER:  # the board's own words say why, not the driver
        assert "GPM metrics (Hopper and newer)" in out, out
        assert "GPM metrics (Hopper and newer;" not in out, out
    entries = cov["not_available"] + cov["nothing_to_check"]
    for e in entries:
        checks = checks_text(e["checks"])
        assert e["reason"] and f"{gpu_list(e['gpus'])}: " + (f"{checks}: " if checks else "") \
            + reason_text(e) in out
    # An 8-GPU node reads in a few lines (one per reason, whatever the GPUs:
    # a pre-Hopper board without RDMA or thermal counters has the most).
    assert len(entries) <= 14
    # Every node condition is OK: exit 0 in NPD's protocol, the condition False.
    for condition in npd.CONDITIONS:
        verdict = run_cli(["diagnose", "--url", url, "--format", "npd", "--condition",
                           condition])
        assert verdict.returncode == npd.OK, (condition, verdict.stdout)


@needs_mock
def test_on_a_mock_board_a_reader_switched_off_is_still_a_gap(tmp_path: Path) -> None:
    """The same board with the GPM reader off: its check could not run now
    (exit 5, cannot-see Unknown), beside what the board lacks."""
    assert MOCK is not None
    config = tmp_path / "fast.yaml"
    config.write_text("poll: {interval: 0.5s}\ndiagnosis: {window: 2s, clear_after: 2s}\n")
    port = free_port()
    proc = start(["--web.listen-address", f"127.0.0.1:{port}", "--config.file", str(config),
                  "--no-collector.gpm", "--log.level", "error"],
                 env={"LD_LIBRARY_PATH": str(MOCK),
                      "MOCK_NVML_CONFIG": str(MOCK / "configs" / "mock-nvml-config-h100.yaml")})
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/-/ready", timeout=60)
        result = run_cli(["diagnose", "--url", url, "--wait", "60s"])
        assert result.returncode == EXIT_IN_PART, result.stdout
        assert ("GPUs 0-7: utilization_inflated/small_kernels, memory_bound/dram_bandwidth: the "
                "gpm reader is switched off (--no-collector.gpm)") in result.stdout
        assert f"not available on {_board_and_driver('h100')}" in result.stdout
        verdict = run_cli(["diagnose", "--url", url, "--format", "npd", "--condition",
                           npd.CANNOT_SEE])
        assert verdict.returncode == npd.UNKNOWN, verdict.stdout
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            assert _not_judged(resp.read().decode()) == {(str(g), k) for g in range(8)
                                                         for k in _GPM}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
