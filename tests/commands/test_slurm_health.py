"""``gpu-exporter slurm-health`` against a served exporter and a stand-in
scontrol (a script that keeps the node's state in a file and records every
argv it is given, as Slurm's scontrol would receive them). The same command
against a real slurmctld is in tests/kernel/test_real_slurm.py."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.commands import slurm_health as sh
from tests.procs import free_port, run_cli
from tests.simnode import SimRun, served

# scontrol as the program uses it: `show node N` prints Slurm's layout (the
# reason on a line of its own, stamped), `update` changes the state file.
FAKE_SCONTROL = textwrap.dedent("""\
    #!{python}
    import json, sys
    state_file, log_file = {state!r}, {log!r}
    with open(log_file, "a") as f:
        f.write(json.dumps(sys.argv[1:]) + "\\n")
    node = json.load(open(state_file))
    args = sys.argv[1:]
    if args[:2] == ["show", "node"]:
        if args[2] != node["name"]:
            print(f"Node {{args[2]}} not found", file=sys.stderr)
            sys.exit(1)
        state = "IDLE+DRAIN" if node["reason"] else "IDLE"
        print(f"NodeName={{node['name']}} Arch=x86_64 CoresPerSocket=2")
        print(f"   State={{state}} ThreadsPerCore=1 TmpDisk=0 Weights=1")
        if node["reason"]:
            print(f"   Reason={{node['reason']}} [root@2026-01-02T03:04:05]")
        sys.exit(0)
    if args[0] == "update":
        fields = dict(a.split("=", 1) for a in args[1:])
        if fields["state"] == "drain":
            node["reason"] = fields["reason"]
        elif fields["state"] == "resume":
            node["reason"] = None
        json.dump(node, open(state_file, "w"))
        sys.exit(0)
    sys.exit(2)
    """)


class FakeSlurm:
    def __init__(self, tmp: Path, name: str = "gpu01", reason: str | None = None) -> None:
        self.state = tmp / "node.json"
        self.log = tmp / "calls.log"
        self.binary = tmp / "scontrol"
        self.name = name
        self.set_reason(reason)
        self.binary.write_text(FAKE_SCONTROL.format(python=sys.executable, state=str(self.state),
                                                    log=str(self.log)))
        self.binary.chmod(0o755)

    def set_reason(self, reason: str | None) -> None:
        self.state.write_text(json.dumps({"name": self.name, "reason": reason}))

    @property
    def reason(self) -> str | None:
        return json.loads(self.state.read_text())["reason"]  # type: ignore[no-any-return]

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def updates(self) -> list[list[str]]:
        return [c for c in self.calls() if c[0] == "update"]


@pytest.fixture(scope="module")
def faulty() -> Iterator[str]:
    yield from served("ecc-uncorrectable")


@pytest.fixture(scope="module")
def healthy() -> Iterator[str]:
    yield from served("healthy")


def health(url: str, slurm: FakeSlurm, *extra: str) -> tuple[int, str, str]:
    result = run_cli(["slurm-health", "--url", url, "--node", slurm.name,
                      "--scontrol", str(slurm.binary), *extra])
    return result.returncode, result.stdout, result.stderr


def test_a_hardware_fault_drains_with_a_one_line_reason(faulty: str, tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path)
    code, out, err = health(faulty, slurm)
    assert code == sh.PROBLEM, err
    assert slurm.reason == "gpu-exporter: GPU 1 memory_errors/ecc_uncorrectable"
    # One argument per field: the reason reaches scontrol whole, never split
    # by a shell.
    assert slurm.updates() == [["update", "nodename=gpu01", "state=drain",
                                "reason=gpu-exporter: GPU 1 memory_errors/ecc_uncorrectable"]]
    assert out == "gpu01: drained: GPU 1 memory_errors/ecc_uncorrectable\n" and err == ""
    # The next run finds its own drain with the same reason: nothing to change.
    code, out, _ = health(faulty, slurm)
    assert code == sh.PROBLEM and len(slurm.updates()) == 1, out


def test_a_healthy_node_it_drained_is_resumed(healthy: str, tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path, reason="gpu-exporter: GPU 1 memory_errors/ecc_uncorrectable")
    code, out, err = health(healthy, slurm)
    assert code == sh.HEALTHY, err
    assert slurm.updates() == [["update", "nodename=gpu01", "state=resume"]]
    assert slurm.reason is None
    assert out.startswith("gpu01: resumed: the exporter sees 8 GPUs"), out


@pytest.mark.parametrize("reason", ["admin: maintenance", "Kill task failed",
                                    "gpu-exporter-ish: not ours"])
def test_a_node_drained_by_anyone_else_stays_drained(healthy: str, faulty: str, tmp_path: Path,
                                                     reason: str) -> None:
    slurm = FakeSlurm(tmp_path, reason=reason)
    code, out, _ = health(healthy, slurm)
    assert code == sh.HEALTHY and slurm.reason == reason and slurm.updates() == [], out
    assert "left drained: " + reason in out
    # A fault on an admin's drained node keeps the admin's reason.
    code, out, _ = health(faulty, slurm)
    assert code == sh.PROBLEM and slurm.reason == reason and slurm.updates() == [], out


def test_an_exporter_that_does_not_answer_changes_nothing(tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path)
    code, out, err = health(f"http://127.0.0.1:{free_port()}", slurm)
    assert code == sh.NOT_RUN and out == ""
    assert slurm.calls() == []  # not even asked: no drain, no resume
    assert err.count("\n") == 1 and err.startswith("gpu-exporter slurm-health: exporter not "
                                                   "read: cannot reach the exporter"), err
    assert err.rstrip().endswith("gpu01 left as it is"), err
    # Not even a drain it made itself is lifted on a check that did not run.
    slurm.set_reason("gpu-exporter: GPU 1 memory_errors/ecc_uncorrectable")
    code, _, _ = health(f"http://127.0.0.1:{free_port()}", slurm)
    assert code == sh.NOT_RUN and slurm.reason is not None


def test_gpus_the_exporter_cannot_see_drain_the_node(tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path)
    for url in served("fault-driver-not-loaded"):
        code, out, err = health(url, slurm)
    assert code == sh.PROBLEM and out.startswith("gpu01: drained: cannot see the GPUs"), err
    assert slurm.reason is not None and slurm.reason.startswith(
        "gpu-exporter: cannot see the GPUs: NVML is not available"), slurm.reason
    assert len(slurm.reason) <= sh.MAX_REASON


def test_a_check_judged_only_in_part_changes_nothing(tmp_path: Path) -> None:
    # Right after the exporter starts, its diagnosis window has not passed:
    # nothing is judged, so not even its own drain is lifted.
    slurm = FakeSlurm(tmp_path, reason="gpu-exporter: GPU 5 gpu_lost/hardware")
    with SimRun("healthy") as run:
        run.exporter.bind()
        assert run.exporter.server is not None
        run.exporter.server.start()
        run.poll(1)  # the diagnosis window has not passed: settling
        code, _, err = health(f"http://127.0.0.1:{run.exporter.port}", slurm)
    assert code == sh.NOT_RUN and "not judged" in err, err
    assert slurm.updates() == [] and slurm.reason is not None


def test_scontrol_that_fails_or_hangs_is_a_check_not_run(faulty: str, tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path, name="gpu01")
    code, _, err = health(faulty, slurm, "--node", "gpu99")  # the last --node wins
    assert code == sh.NOT_RUN and "Node gpu99 not found" in err, err
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    result = run_cli(["slurm-health", "--url", faulty, "--node", "gpu01", "--scontrol",
                      str(hang), "--timeout", "2s"], timeout=30)
    assert result.returncode == sh.NOT_RUN, result.stderr
    assert "did not answer in time" in result.stderr


@pytest.mark.parametrize("args,message", [
    (["--node", "gpu01 state=resume"], "not a Slurm node name"),
    (["--node", "a\nb"], "not a Slurm node name"),
    (["--timeout", "90s"], "at most 55 s"),
    (["--url", "ftp://x"], "only http:// and https://"),
])
def test_usage_errors_exit_2_in_one_line(args: list[str], message: str) -> None:
    result = run_cli(["slurm-health", *args])
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and result.stdout == ""


def test_the_reason_is_one_bounded_printable_line() -> None:
    hostile = "GPU 1 \x1b[31mred\x1b[0m\nState=resume " + "x" * 500
    reason = sh.reason_text(hostile)
    assert reason.startswith("gpu-exporter: GPU 1 [31mred [0m State=resume")
    assert len(reason) == sh.MAX_REASON and reason.isascii() and reason.isprintable()


def test_node_state_is_read_from_scontrols_layout() -> None:
    text = ("NodeName=gpu01 Arch=x86_64 CoresPerSocket=2\n"
            "   State=MIXED+DRAIN ThreadsPerCore=1\n"
            "   Reason=gpu-exporter: GPU 1 xid/79 [slurm@2026-01-02T03:04:05]\n")
    node = sh.parse_node(text)
    assert node == sh.NodeState(True, "gpu-exporter: GPU 1 xid/79") and node.ours
    assert not sh.parse_node("NodeName=gpu01\n   State=IDLE ThreadsPerCore=1\n").drained
    assert sh.parse_node("   State=DOWN+DRAIN+NOT_RESPONDING\n   Reason=admin [a@b]\n") == \
        sh.NodeState(True, "admin")
    with pytest.raises(sh.Unavailable):
        sh.parse_node("slurm_load_node error: Invalid node name specified")


def test_the_default_node_is_the_short_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sh.socket, "gethostname", lambda: "gpu01.cluster.example")
    assert sh.default_node() == "gpu01"
