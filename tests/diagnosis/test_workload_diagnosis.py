"""Each job judged by its own cgroup, end to end: the two-tenant node of the
simulator through `gpu-exporter diagnose --simulate ... --json`, the pod
throttled by its CPU limit, and the owner named in every place a finding
reaches a person, escaped for each (terminal, HTML, exposition)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gpu_exporter.commands.report import render_text
from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.poll.readings import GpuOwner
from gpu_exporter.simulator import load_scenario
from gpu_exporter.simulator.tenants import Container, DeviceGrant, Pod, Tenants
from tests.simnode import SimRun

POD_A = {"namespace": "ml", "pod": "train-a", "container": "trainer"}


def diagnose_json(*args: str, statuses: tuple[int, ...] = (0, 1)) -> dict[str, object]:
    result = subprocess.run([sys.executable, "-m", "gpu_exporter", "diagnose", *args, "--json"],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode in statuses, result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


def test_two_tenants_data_pipeline_io_on_pod_as_gpus_only_naming_pod_a() -> None:
    data = diagnose_json("--simulate", "two-tenant-node")
    findings = data["findings"]
    assert isinstance(findings, list)
    got = sorted((f["gpu"], f["symptom"], f["cause"]) for f in findings)
    assert got == [(str(g), "memory_held_sm_idle", "data_pipeline_io") for g in range(4)]
    for f in findings:
        assert f["owners"] == [POD_A]
        # Judged on the pod's own I/O pressure; the host's stays below.
        assert f["evidence"]["workload_io_pressure_some_ratio"] >= 0.2
        assert f["evidence"]["host_cpu_iowait_ratio"] < 0.2


def test_without_the_jobs_cgroups_their_processes_state_still_names_storage(
        tmp_path: Path) -> None:
    # Without the jobs' own cgroups (attribution off) the starving pod raises
    # nothing host-wide; its processes, blocked in D for the window, are
    # their own evidence (the most specific read), with no owner named.
    config = tmp_path / "config.yaml"
    config.write_text("collectors: {attribution: false}\n")
    data = diagnose_json("--simulate", "two-tenant-node", "--config.file", str(config),
                         statuses=(1,))
    found = sorted((f["gpu"], f["cause"]) for f in data["findings"])
    assert found == [(g, "data_pipeline_io") for g in "0123"]
    for f in data["findings"]:
        assert f["evidence"]["process_state"] == "D" and f["owners"] == []
        assert f["evidence"]["host_cpu_iowait_ratio"] < 0.35  # the host's says nothing
    # ... and says that the rows that judge a GPU's owner could not run (the
    # warnings outrank "checked only in part": exit 1).
    coverage = data["coverage"]
    assert isinstance(coverage, dict)
    assert {e["reason"] for e in coverage["not_checked"]} == {
        "the attribution reader is switched off (--no-collector.attribution)"}


def test_the_throttled_pods_gpus_only_with_the_pod_named() -> None:
    with SimRun("memory-held-sm-idle-cpu-limit-throttled") as run:
        snap = run.poll(60)
    findings = snap.derived(FINDINGS) or ()
    assert sorted((f.gpu, f.row.cause) for f in findings) == [
        (2, "cpu_limit_throttled"), (3, "cpu_limit_throttled")]
    for f in findings:
        assert f.owners == (GpuOwner("ml", "finetune", "trainer"),)
        assert f.evidence["workload_cpu_throttled_ratio"] >= 0.6
        assert f.evidence["workload_cpu_limit_cores"] == 4


def test_owner_names_are_escaped_for_the_terminal() -> None:
    finding = {"gpu": "0", "uuid": "GPU-0", "symptom": "s", "cause": "c",
               "severity": "warning", "summary": "x", "evidence": {}, "fix": "f",
               "runbook": "r", "owners": [{"namespace": "ml\x1b[2J", "pod": "a\nFAKE LINE",
                                           "container": "c\u202e"}]}
    text = render_text([finding], color=False)
    assert "\x1b" not in text and "\u202e" not in text
    assert "owner:    ml\\x1b[2J/a\\nFAKE LINE/c\\u202e" in text


def _hostile_owner_run() -> SimRun:
    # The kubelet's answer is not trusted: names the API server would refuse
    # still reach the exporter's socket client, and must not break a page.
    pod = Pod.model_construct(
        namespace='ml"<b>', name="</td><script>x</script>", uid="0" * 8 + "-0000-4000-8000-"
        + "0" * 12, qos="burstable", containers=[Container.model_construct(
            name='c\\"\n', devices=[DeviceGrant(resource="nvidia.com/gpu", ids=["0"])],
            cpu_limit=None, pids=[], cgroup=Container.model_fields["cgroup"].default)])
    base = load_scenario("healthy")
    tenants = Tenants.model_construct(pods=[pod], slurm_jobs=[], free_devices=[])
    return SimRun(base.model_copy(update={"tenants": tenants}))


def test_owner_names_are_escaped_for_html_and_the_exposition() -> None:
    with _hostile_owner_run() as run:
        run.poll(2)
        port = run.serve()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as resp:
            page = resp.read().decode()
    # (the page has a script of its own: the pod's must arrive as text)
    assert "<script>x</script>" not in page and '"<b>' not in page
    assert "Allocated to ml&quot;&lt;b&gt;/&lt;/td&gt;&lt;script&gt;x&lt;/script&gt;/c" in page
    [allocation] = [s for fam in text_string_to_metric_families(text) for s in fam.samples
                    if s.name == "gpu_allocation_info"]
    assert allocation.labels["namespace"] == 'ml"<b>'
    assert allocation.labels["pod"] == "</td><script>x</script>"
    assert allocation.labels["container"] == 'c\\"\n'


def test_the_fix_names_the_process_the_evidence_names() -> None:
    # The table's commands say PID; diagnose's text gives the process itself
    # where the finding names one, and leaves the word where it names none
    # (or names something that is not a process number).
    finding = {"gpu": "0", "uuid": "GPU-0", "symptom": "s", "cause": "c",
               "severity": "warning", "summary": "x", "runbook": "r",
               "fix": "Attach py-spy dump --pid PID to see where it waits (PIDs)"}
    named = render_text([{**finding, "evidence": {"process_pid": "4242"}}], color=False)
    assert "fix:      Attach py-spy dump --pid 4242 to see where it waits (PIDs)" in named
    for evidence in ({}, {"process_pid": "1; rm -rf /"}):
        text = render_text([{**finding, "evidence": evidence}], color=False)
        assert "--pid PID to see" in text
