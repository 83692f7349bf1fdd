"""A real one-node Slurm on this machine: Debian's slurmctld, slurmd,
slurmstepd and munge (unpacked into .tools/slurm by scripts/fetch-slurm.sh,
never installed) started as child processes, every file of theirs in a
temporary directory, no systemd, nothing system-wide.

slurmd runs with ``ProctrackType=proctrack/cgroup`` and
``TaskPlugin=task/cgroup`` (``CgroupPlugin=autodetect``: cgroup/v1 on a
hybrid host, v2 on a unified one), so jobs submitted with sbatch and srun
land in the cgroups slurmd itself makes (``/slurm_<node>/uid_U/job_J/...``
on v1: Debian builds Slurm for several slurmd per host). The exporter then
runs as root directly on the host's /proc and /sys (not in the chart's
sandbox of test_real_kernel.py: that test covers the pod; this one covers
Slurm's own layout), with only NVML simulated, its GPU processes being the
jobs' real PIDs, and must name each job from its cgroup and read the memory
limit slurmd set on it.

``gpu-exporter slurm-health`` then talks to the real slurmctld: a fault
drains the node with its reason in ``sinfo -R``, a healthy exporter resumes
it, an admin's drain stays, and an exporter that does not answer drains
nothing.

Root is needed (slurmd and cgroups); without it, or without the unpacked
packages, the test skips saying why. The node's name is unique to the run,
so the cgroups slurmd leaves (``slurm_<node>`` in each controller) are the
run's own and are removed at the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.exposition import samples
from tests.kernel import workloads as wl
from tests.procs import ROOT, closed_to_others, free_port
from tests.simnode import served

SLURM = ROOT / ".tools" / "slurm"
CGROUP = Path("/sys/fs/cgroup")
JOB_UID = 65534  # nobody: a job user that is not root
MIB = 1024 * 1024
JOB_MEMORY_MIB = 64
# Wide for a loaded machine; on an idle one the node is idle in ~3 s.
START_S = 60.0


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "a real slurmd runs jobs as other users and makes cgroups: it needs root"
    if not (SLURM / "complete").is_file():
        return ("Debian's Slurm packages are not unpacked: run ./scripts/fetch-slurm.sh "
                "(apt-get download could not fetch them)")
    if wl.layout() is None:
        return "no cgroup v2 or hybrid cgroup tree at /sys/fs/cgroup"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


@dataclass
class Cluster:
    node: str
    tmp: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def tool(self, name: str, *args: str, uid: int | None = None,
             timeout: float = 20) -> subprocess.CompletedProcess[str]:
        prefix = ([] if uid is None else
                  ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"])
        return subprocess.run([*prefix, str(SLURM / "bin" / name), *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout, check=False,
                              cwd=self.tmp / "jobs")

    def log(self, name: str) -> str:
        path = self.tmp / "log" / name
        return path.read_text(errors="replace") if path.exists() else ""

    def node_state(self) -> tuple[str, str]:
        """(state, reason) as ``sinfo -R`` and ``sinfo`` print them."""
        out = self.tool("sinfo", "-h", "-N", "-n", self.node, "-o", "%T|%E").stdout.strip()
        state, _, reason = out.partition("|")
        return state, reason


def _wait(what: str, ready: Callable[[], bool], cluster: Cluster,
          timeout: float = START_S) -> None:
    deadline = time.monotonic() + timeout
    while not _ready(ready):
        for p in cluster.procs:
            if p.poll() is not None:
                pytest.fail(f"{p.args[0]} exited {p.returncode} while waiting for {what}:\n"
                            + cluster.log("slurmd.log")[-3000:]
                            + cluster.log("slurmctld.log")[-2000:])
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} in {timeout:.0f} s:\n" + cluster.log("slurmd.log")[-3000:]
                        + cluster.log("slurmctld.log")[-2000:])
        time.sleep(0.2)


def _ready(ready: Callable[[], bool]) -> bool:
    """``ready()``, False where the Slurm tool it ran did not answer in time
    (slurmctld still starting on a loaded machine): _wait's own deadline
    says when to give up, with the daemons' logs."""
    try:
        return ready()
    except subprocess.TimeoutExpired:
        return False


def _write_conf(tmp: Path, node: str) -> None:
    libs = [str(SLURM / line) for line in (SLURM / "lib-path").read_text().split()]
    cpus = os.cpu_count() or 1
    (tmp / "slurm.conf").write_text("\n".join([
        "ClusterName=gpuexportertest",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={tmp}/munge/munge.socket",
        f"PluginDir={libs[-1]}",
        f"StateSaveLocation={tmp}/state", f"SlurmdSpoolDir={tmp}/spool",
        f"SlurmctldPidFile={tmp}/slurmctld.pid", f"SlurmdPidFile={tmp}/slurmd.pid",
        f"SlurmctldLogFile={tmp}/log/slurmctld.log", f"SlurmdLogFile={tmp}/log/slurmd.log",
        "SlurmdDebug=debug",
        "ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        "ReturnToService=2", "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs={cpus} "
        "RealMemory=1024 State=UNKNOWN",
        f"PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP", ""]))
    # The job's memory is constrained, so slurmd writes its limit into the
    # job's own cgroup: what the exporter must read back.
    (tmp / "cgroup.conf").write_text("\n".join([
        "CgroupPlugin=autodetect", f"CgroupMountpoint={CGROUP}", "IgnoreSystemd=yes",
        "ConstrainCores=no", "ConstrainRAMSpace=yes", "ConstrainDevices=no", ""]))


def _slurm_cgroups(node: str) -> list[Path]:
    return sorted(CGROUP.glob(f"*/slurm_{node}")) + sorted(
        CGROUP.glob(f"system.slice/{node}_slurmstepd.scope"))


def _remove_cgroups(node: str) -> None:
    for top in _slurm_cgroups(node):
        for directory in sorted((p for p in [top, *top.rglob("*")] if p.is_dir()),
                                key=lambda p: len(p.parts), reverse=True):
            for _ in range(50):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # Jobs are submitted as user 65534 with the checkout's Slurm (.tools):
    # that user must reach it.
    closed = closed_to_others()
    if closed is not None:
        pytest.skip(f"{closed} is not searchable by other users: user 65534 cannot run "
                    "the checkout's Slurm tools there")
    # Not pytest's temporary directory: that one is root's alone, and the
    # job's user (and srun, sbatch as that user) must read slurm.conf.
    tmp = Path(tempfile.mkdtemp(prefix="gpu-exporter-slurm-"))
    node = f"gpuexptest{os.getpid()}"
    for sub in ("munge", "state", "spool", "log"):
        (tmp / sub).mkdir(mode=0o700)
    # Jobs run as nobody: their working directory must be theirs to enter.
    (tmp / "jobs").mkdir(mode=0o777)
    tmp.chmod(0o755)
    (tmp / "munge").chmod(0o755)
    key = tmp / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    _write_conf(tmp, node)
    libs = ":".join(str(SLURM / line) for line in (SLURM / "lib-path").read_text().split())
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
           "SLURM_CONF": str(tmp / "slurm.conf"), "LD_LIBRARY_PATH": libs}
    c = Cluster(node, tmp, env)
    sbin = SLURM / "sbin"
    try:
        def daemon(argv: list[str], log: str) -> None:
            with open(tmp / "log" / log, "wb") as out:
                c.procs.append(subprocess.Popen(argv, env=env, stdout=out,
                                                stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL,
                                                start_new_session=True))

        daemon([str(sbin / "munged"), "-F", "-f", f"--socket={tmp}/munge/munge.socket",
                f"--key-file={key}", f"--pid-file={tmp}/munge/munged.pid",
                f"--log-file={tmp}/log/munged.log", f"--seed-file={tmp}/munge/seed"],
               "munged.out")
        _wait("munge socket", (tmp / "munge" / "munge.socket").exists, c)
        daemon([str(sbin / "slurmctld"), "-D", "-i"], "slurmctld.out")
        # -N: this slurmd is the node of that name (a unique one: its cgroups
        # are this run's own); -d: slurmstepd by its own name (see
        # scripts/fetch-slurm.sh).
        daemon([str(sbin / "slurmd"), "-D", "-N", node, "-d", str(sbin / "slurmstepd")],
               "slurmd.out")
        _wait("idle node", lambda: c.node_state()[0] == "idle", c)
        yield c
    finally:
        if c.procs:
            c.tool("scancel", "--full", "-w", node)
        for p in reversed(c.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(c.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        # Jobs whose slurmstepd did not end them (a crash) are ended here.
        for pid in _job_pids_left(node):
            os.kill(pid, signal.SIGKILL)
        _remove_cgroups(node)
        shutil.rmtree(tmp, ignore_errors=True)


def _job_pids_left(node: str) -> list[int]:
    pids = []
    for top in _slurm_cgroups(node):
        for procs in top.rglob("cgroup.procs"):
            pids += [int(p) for p in procs.read_text().split()]
    return sorted(set(pids))


@dataclass
class Job:
    job_id: str
    step: str
    pid: int  # the job's sleep


def _sleep_of(c: Cluster, job_id: str) -> int | None:
    listed = c.tool("scontrol", "listpids", job_id).stdout.splitlines()[1:]
    for line in listed:
        pid = line.split()[0]
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "sleep":
                return int(pid)
        except OSError:
            continue
    return None


@pytest.fixture(scope="module")
def jobs(cluster: Cluster) -> Iterator[list[Job]]:
    c = cluster
    batch = c.tool("sbatch", "--parsable", f"--mem={JOB_MEMORY_MIB}", "-o", "/dev/null",
                   "--wrap", "exec sleep 600", uid=JOB_UID)
    assert batch.returncode == 0, batch.stderr
    batch_id = batch.stdout.strip().split(";")[0]
    # srun stays in the foreground while its step runs: its own job, step 0.
    srun = subprocess.Popen(
        ["setpriv", f"--reuid={JOB_UID}", f"--regid={JOB_UID}", "--clear-groups", "--",
         str(SLURM / "bin" / "srun"), f"--mem={JOB_MEMORY_MIB}", "-J", "interactive",
         "sleep", "600"], env=c.env, cwd=c.tmp / "jobs", stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        def srun_id() -> str | None:
            out = c.tool("squeue", "-h", "-n", "interactive", "-o", "%i").stdout.split()
            return out[0] if out else None

        _wait("srun's job", lambda: srun_id() is not None, c)
        found: dict[str, int] = {}

        def both_running() -> bool:
            for job_id in (batch_id, str(srun_id())):
                pid = _sleep_of(c, job_id)
                if pid is not None:
                    found[job_id] = pid
            return len(found) == 2

        _wait("both jobs' processes", both_running, c)
        yield [Job(batch_id, "batch", found[batch_id]),
               Job(str(srun_id()), "0", found[str(srun_id())])]
    finally:
        # Cancelled first: srun then ends at once, as its step has.
        running = c.tool("squeue", "-h", "-u", str(JOB_UID), "-o", "%i").stdout.split()
        if running:
            c.tool("scancel", *running)
        srun.terminate()
        try:
            srun.wait(timeout=15)
        except subprocess.TimeoutExpired:
            srun.kill()


def _scenario(pids: list[int]) -> str:
    procs = [{"pid": pid, "comm": "sleep", "gpus": [gpu], "gpu_memory_ratio": 0.5,
              "sm_utilization": 0.9} for gpu, pid in enumerate(pids)]
    return yaml.safe_dump({
        "name": "real-slurm", "description": "NVML simulated over a real Slurm's job processes",
        "node": {"gpus": len(pids), "profile": "h100-sxm5-80gb", "host": "real"},
        "state": {"utilization": 0.9, "memory_used_ratio": 0.5},
        "processes": procs, "expect": []})


def _value(text: str, name: str, **labels: str) -> float | None:
    found = [v for got, v in samples(text, name)
             if all(got.get(k) == want for k, want in labels.items())]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def test_every_job_is_named_from_the_cgroup_slurmd_made(cluster: Cluster, jobs: list[Job],
                                                         tmp_path: Path) -> None:
    # What slurmd did, from the kernel: each job's process in the job's own
    # memory cgroup (task/cgroup ran; on this host's hybrid tree, cgroup/v1).
    for job in jobs:
        text = Path(f"/proc/{job.pid}/cgroup").read_text()
        assert f"/slurm_{cluster.node}/uid_{JOB_UID}/job_{job.job_id}/step_{job.step}" in text \
            or f"/{cluster.node}_slurmstepd.scope/job_{job.job_id}/step_{job.step}" in text, \
            (text, cluster.log("slurmd.log")[-3000:])
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(_scenario([j.pid for j in jobs]))
    config = tmp_path / "config.yml"
    config.write_text("diagnosis:\n  window: 10s\n")
    port = free_port()
    daemon = subprocess.Popen(
        [sys.executable, "-m", "gpu_exporter", f"--simulate={scenario}",
         f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}",
         "--poll.interval=1s"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    text = ""
    try:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline and daemon.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                            timeout=5) as resp:
                    text = resp.read().decode()
            except OSError:
                text = ""
            if all(_value(text, "gpu_workload_memory_limit_bytes", slurm_job_id=j.job_id)
                   is not None for j in jobs):
                break
            time.sleep(0.5)
    finally:
        daemon.terminate()
        out, _ = daemon.communicate(timeout=20)
    for gpu, job in enumerate(jobs):
        assert _value(text, "gpu_job_info", gpu=str(gpu), slurm_job_id=job.job_id,
                      slurm_uid=str(JOB_UID), slurm_step=job.step) == 1, (job, out, text[-3000:])
        # The job's own cgroup, read: the limit is the one slurmd wrote for
        # --mem, not the host's.
        assert _value(text, "gpu_workload_memory_limit_bytes",
                      slurm_job_id=job.job_id) == JOB_MEMORY_MIB * MIB, job
        assert _value(text, "gpu_workload_memory_used_bytes", slurm_job_id=job.job_id), job


# --- gpu-exporter slurm-health against the real slurmctld --------------------------------


@pytest.fixture(scope="module")
def faulty() -> Iterator[str]:
    yield from served("ecc-uncorrectable")


@pytest.fixture(scope="module")
def healthy() -> Iterator[str]:
    yield from served("healthy")


def _health(c: Cluster, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpu_exporter", "slurm-health", "--url", url, "--node", c.node,
         "--scontrol", str(SLURM / "bin" / "scontrol")], capture_output=True, text=True,
        cwd=ROOT, timeout=60, check=False, env={**os.environ, **c.env})


def _drained(state: str) -> bool:
    return state.startswith("drain")


def test_a_fault_drains_the_node_and_health_resumes_it(cluster: Cluster, faulty: str,
                                                       healthy: str) -> None:
    c = cluster
    assert not _drained(c.node_state()[0])
    result = _health(c, faulty)
    assert result.returncode == 1, result.stderr
    state, reason = c.node_state()
    assert _drained(state), (state, reason)
    assert reason == "gpu-exporter: GPU 1 memory_errors/ecc_uncorrectable"
    result = _health(c, healthy)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{c.node}: resumed:"), result.stdout
    state, reason = c.node_state()
    assert not _drained(state) and reason == "none", (state, reason)


def test_an_admins_drain_stays_when_healthy(cluster: Cluster, healthy: str,
                                            faulty: str) -> None:
    c = cluster
    set_drain = c.tool("scontrol", "update", f"nodename={c.node}", "state=drain",
                       "reason=admin: maintenance")
    assert set_drain.returncode == 0, set_drain.stderr
    try:
        for url in (healthy, faulty):
            result = _health(c, url)
            assert result.returncode in (0, 1), result.stderr
            state, reason = c.node_state()
            assert _drained(state) and reason == "admin: maintenance", (url, state, reason)
    finally:
        c.tool("scontrol", "update", f"nodename={c.node}", "state=resume")


def test_an_exporter_that_does_not_answer_drains_nothing(cluster: Cluster) -> None:
    c = cluster
    result = _health(c, f"http://127.0.0.1:{free_port()}")
    assert result.returncode == 3 and "left as it is" in result.stderr, result.stderr
    state, reason = c.node_state()
    assert not _drained(state) and reason == "none", (state, reason)
