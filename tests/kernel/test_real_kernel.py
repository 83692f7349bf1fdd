"""The daemon on this machine's real kernel, as the chart deploys it.

Real cgroups laid out as the kubelet (systemd driver) and slurmd lay them
out, real workload processes in them (one held by a CPU quota so that it is
throttled, one asleep, one under a memory limit, one Slurm job), and the
daemon itself started the way a container runtime starts the chart's pod:
in its own cgroup, in a private cgroup namespace and mount namespace, with a
root holding only what the pod spec mounts (the host's /proc and /sys
read-only under /host, the kubelet's pod-resources directory), as the pod
spec's user with every capability dropped. The pod spec (user, mounts, flags)
is the chart's as Helm renders it with its defaults, so chart and test cannot
drift. Only NVML is simulated (``node.host: real``): its GPU processes are the
PIDs started here, and the kubelet is a gRPC server speaking its proto.

Root is needed to make cgroups and namespaces; elsewhere the test skips,
saying why. CI runs as root.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from gpu_exporter.simulator.kubelet import PodResourcesServer
from gpu_exporter.simulator.tenants import Container, DeviceGrant, Pod, Tenants
from tests.exposition import samples
from tests.kernel import workloads as wl
from tests.procs import ROOT, closed_to_others, free_port

CHART = ROOT / "deploy" / "helm" / "gpu-exporter"
SANDBOX = Path(__file__).with_name("sandbox.py")
POD_RESOURCES = "/var/lib/kubelet/pod-resources"
MIB = 1024 * 1024
# Wide for a loaded CI machine: the first poll, then the diagnosis window.
SETTLE_S = 120.0


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the real-kernel test makes cgroups and namespaces: it needs root"
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    if wl.layout() is None:
        return "no cgroup v2 or hybrid cgroup tree at /sys/fs/cgroup"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


def pod(name: str, uid: str, gpu: int) -> Pod:
    return Pod(namespace="ml", name=name, uid=uid, containers=[
        Container(name="main", devices=[DeviceGrant(ids=[str(gpu)])])])


PODS = {"throttled": pod("throttled", "0a1b2c3d-0000-4000-8000-000000000001", 0),
        "asleep": pod("asleep", "0a1b2c3d-0000-4000-8000-000000000002", 1),
        "memory": pod("memory", "0a1b2c3d-0000-4000-8000-000000000003", 2)}
EXPORTER = pod("gpu-exporter", "0a1b2c3d-0000-4000-8000-0000000000ee", 0)
JOB, JOB_UID = "4242", 1004


def pod_cgroup(p: Pod) -> str:
    uid = p.uid.replace("-", "_")
    return (f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/"
            f"cri-containerd-{p.containers[0].container_id(p)}.scope")


def pod_workload(lay: wl.Layout, key: str, argv: list[str], uid: int,
                 **limits: Any) -> wl.Workload:
    path = pod_cgroup(PODS[key])
    where = {h: path for h in (lay.unified, lay.cpu, lay.memory) if h is not None}
    return wl.Workload(key, where, where, argv, uid, **limits)


def slurm_workload(lay: wl.Layout) -> wl.Workload:
    """slurmd's task/cgroup layout: v2 on a v2 host; on a hybrid host its v1
    plugin, the tasks staying in slurmd's unit in the unified hierarchy."""
    if lay.hybrid:
        assert lay.cpu is not None and lay.memory is not None
        job = f"slurm/uid_{JOB_UID}/job_{JOB}"
        paths = {lay.unified: "system.slice/slurmd.service", lay.cpu: job, lay.memory: job}
        leaves = {**paths, lay.cpu: f"{job}/step_0/task_0", lay.memory: f"{job}/step_0/task_0"}
    else:
        job = f"system.slice/slurmstepd.scope/job_{JOB}"
        paths = {lay.unified: job}
        leaves = {lay.unified: f"{job}/step_0/user/task_0"}
    return wl.Workload("slurm", paths, leaves, ["sleep", "3600"], JOB_UID,
                       memory_limit=256 * MIB)


def scenario(pids: list[int]) -> str:
    """Four simulated H100s whose processes are the real ones: GPU 0's
    process holds memory while the GPU idles (its CPU quota starves it), the
    others train."""
    procs = [{"pid": pid, "comm": "python", "gpus": [gpu], "gpu_memory_ratio": 0.7,
              "sm_utilization": 0.02 if gpu == 0 else 0.9} for gpu, pid in enumerate(pids)]
    return yaml.safe_dump({
        "name": "real-kernel", "description": "NVML simulated over this machine's processes",
        "node": {"gpus": 4, "profile": "h100-sxm5-80gb", "host": "real"},
        "state": {"utilization": 0.96, "memory_used_ratio": 0.78},
        "gpus": {0: {"utilization": 0.03, "memory_used_ratio": 0.76}},
        "processes": procs, "expect": []})


def daemonset(values: dict[str, Any] | None = None) -> dict[str, Any]:
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values or {}, name="gpu", namespace="monitoring",
                                is_install=True)
    docs = [d for path, text in rendered.items() if not path.endswith("NOTES.txt")
            for d in yaml.safe_load_all(text) if d]
    [ds] = [d for d in docs if d.get("kind") == "DaemonSet"]
    return dict(ds["spec"]["template"]["spec"])


@dataclass
class PodRun:
    """What the chart's pod spec asks of the runtime, for this machine."""

    uid: int
    gid: int
    capabilities_dropped: list[str]
    args: list[str]
    mounts: list[tuple[str, str, bool]]  # host path, path inside, read only
    tmpfs: list[str]


def pod_run(spec: dict[str, Any], host_paths: dict[str, str]) -> PodRun:
    [container] = spec["containers"]
    sc = {**spec.get("securityContext", {}), **container.get("securityContext", {})}
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts, tmpfs = [], []
    for m in container.get("volumeMounts", []):
        volume = volumes[m["name"]]
        if "hostPath" in volume:
            host = volume["hostPath"]["path"]
            mounts.append((host_paths.get(host, host), m["mountPath"], bool(m.get("readOnly"))))
        elif "emptyDir" in volume:
            tmpfs.append(m["mountPath"])
        else:
            pytest.fail(f"the real-kernel test cannot lay volume {m['name']} ({volume})")
    return PodRun(int(sc.get("runAsUser", 0)), int(sc.get("runAsGroup", sc.get("runAsUser", 0))),
                  list(sc.get("capabilities", {}).get("drop", [])), list(container["args"]),
                  mounts, tmpfs)


@dataclass
class Node:
    layout: wl.Layout
    cgroups: wl.Cgroups
    workloads: dict[str, wl.Workload]
    kubelet_dir: Path
    tmp: Path


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    lay = wl.layout()
    assert lay is not None
    tmp = tmp_path_factory.mktemp("kernel")
    spin = [sys.executable, "-c", "while True: pass"]
    hold = [sys.executable, "-c", "import time; b = bytearray(32 << 20); time.sleep(3600)"]
    with wl.cgroups(lay, f"gpu-exporter-test-{os.getpid()}.slice") as made:
        found = {"throttled": pod_workload(lay, "throttled", spin, 1001, cpu_quota=0.05),
                 "asleep": pod_workload(lay, "asleep", ["sleep", "3600"], 1002),
                 "memory": pod_workload(lay, "memory", hold, 1003, memory_limit=128 * MIB),
                 "slurm": slurm_workload(lay)}
        for w in found.values():
            made.start(w)
        # The kubelet's directory and socket as the kubelet makes them: root's,
        # the socket writable by root alone.
        kubelet_dir = tmp / "pod-resources"
        kubelet_dir.mkdir(mode=0o755)
        old = os.umask(0o022)
        try:
            server = PodResourcesServer(str(kubelet_dir / "kubelet.sock"),
                                        Tenants(pods=list(PODS.values()))).start()
        finally:
            os.umask(old)
        try:
            yield Node(lay, made, found, kubelet_dir, tmp)
        finally:
            server.stop()


@dataclass
class Daemon:
    url: str
    proc: subprocess.Popen[str]
    run: PodRun


def daemon_args(run: PodRun, port: int) -> list[str]:
    """The chart's flags, and what only a test changes: where it listens (no
    network namespace here: never all interfaces), NVML simulated, a short
    diagnosis window."""
    args = [a for a in run.args if not a.startswith("--web.listen-address")]
    return [*args, f"--web.listen-address=127.0.0.1:{port}", "--simulate=/tmp/scenario.yaml",
            "--config.file=/tmp/config.yml", "--poll.interval=1s"]


def daemon_files(node: Node) -> dict[str, str]:
    pids = [node.workloads[k].pid for k in ("throttled", "asleep", "memory", "slurm")]
    return {"/tmp/scenario.yaml": scenario(pids),
            "/tmp/config.yml": "diagnosis:\n  window: 10s\n  clear_after: 10s\n"}


# What the pod's root holds besides its mounts: the system's programs and
# libraries, the exporter's checkout (its virtual environment) and Python.
KEEP = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", str(ROOT),
        *sorted({sys.base_prefix, os.path.realpath(sys.base_prefix)})]
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
EXPORTER_BIN = str(Path(sys.executable).with_name("gpu-exporter"))


def start_daemon(node: Node, run: PodRun, name: str) -> Daemon:
    port = free_port()
    root = node.tmp / f"root-{name}"
    root.mkdir()
    exporter_cgroups = [str(node.cgroups.make(h, f"{pod_cgroup(EXPORTER)}-{name}"))
                        for h in node.cgroups.hierarchies()]
    spec = {
        "cgroups": exporter_cgroups, "root": str(root), "keep": KEEP,
        "mounts": run.mounts, "tmpfs": run.tmpfs, "files": daemon_files(node),
        "uid": run.uid, "gid": run.gid, "cwd": str(ROOT), "env": ENV,
        "argv": [EXPORTER_BIN, *daemon_args(run, port)]}
    spec_file = node.tmp / f"spec-{name}.json"
    spec_file.write_text(json.dumps(spec))
    proc = subprocess.Popen([sys.executable, str(SANDBOX), str(spec_file)], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return Daemon(f"http://127.0.0.1:{port}", proc, run)


def oci_config(node: Node, run: PodRun, name: str, port: int) -> dict[str, Any]:
    """The OCI runtime config a CRI runtime would hand runc for the chart's
    pod: its user with no capability, a read-only root, the pod's mounts,
    its own mount and cgroup namespaces, the host's PID namespace."""
    files = node.tmp / f"files-{name}"
    files.mkdir()
    mounts: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev", "ro"]},
        # The pod's emptyDirs before the checkout: one under /tmp (CI's clone)
        # is bound on top of the pod's /tmp, not hidden by it.
        *({"destination": p, "type": "tmpfs", "source": "tmpfs",
           "options": ["nosuid", "nodev", "mode=1777", "size=16m"]} for p in run.tmpfs),
        *({"destination": p, "type": "bind", "source": p, "options": ["rbind", "ro"]}
          for p in KEEP if os.path.isdir(p) and not os.path.islink(p)),
        *({"destination": inside, "type": "bind", "source": host,
           "options": ["rbind", "ro" if ro else "rw"]} for host, inside, ro in run.mounts)]
    for inside, text in daemon_files(node).items():
        (files / Path(inside).name).write_text(text)
        mounts.append({"destination": inside, "type": "bind",
                       "source": str(files / Path(inside).name), "options": ["bind", "ro"]})
    none: list[str] = []
    return {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": {"uid": run.uid, "gid": run.gid},
                    "args": [EXPORTER_BIN, *daemon_args(run, port)],
                    "env": [f"{k}={v}" for k, v in ENV.items()], "cwd": str(ROOT),
                    "capabilities": {k: none for k in ("bounding", "effective", "inheritable",
                                                       "permitted", "ambient")},
                    "noNewPrivileges": True},
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "gpu-exporter",
        "mounts": mounts,
        "linux": {"namespaces": [{"type": t} for t in ("mount", "cgroup", "ipc", "uts")],
                  "cgroupsPath": f"/{node.cgroups.parent}/{pod_cgroup(EXPORTER)}-{name}"}}


def start_daemon_runc(node: Node, run: PodRun, name: str, runc: str) -> Daemon:
    port = free_port()
    bundle = node.tmp / f"bundle-{name}"
    rootfs = bundle / "rootfs"
    rootfs.mkdir(parents=True)
    for link in ("/bin", "/sbin", "/lib", "/lib64"):
        if os.path.islink(link):  # merged /usr
            os.symlink(os.readlink(link), rootfs / link.lstrip("/"))
    (bundle / "config.json").write_text(json.dumps(oci_config(node, run, name, port)))
    proc = subprocess.Popen([runc, "--root", str(node.tmp / "runc"), "run", "--bundle",
                             str(bundle), f"gpu-exporter-{name}-{os.getpid()}"], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    return Daemon(f"http://127.0.0.1:{port}", proc, run)


def scrape(daemon: Daemon) -> str | None:
    try:
        with urllib.request.urlopen(daemon.url + "/metrics", timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def wait_metrics(daemon: Daemon, ready: Callable[[str], bool]) -> str:
    """The first scrape ``ready`` accepts; the daemon's output if it exits or
    none comes in time."""
    deadline = time.monotonic() + SETTLE_S
    text = None
    while time.monotonic() < deadline:
        if daemon.proc.poll() is not None:
            out = daemon.proc.stdout.read() if daemon.proc.stdout else ""
            pytest.fail(f"the daemon exited {daemon.proc.returncode}:\n{out}")
        text = scrape(daemon)
        if text is not None and ready(text):
            return text
        time.sleep(0.5)
    pytest.fail(f"no scrape was ready in {SETTLE_S:.0f} s; the last:\n{text}")


def stop(daemon: Daemon) -> str:
    daemon.proc.terminate()
    try:
        out, _ = daemon.proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        daemon.proc.kill()
        out, _ = daemon.proc.communicate()
    return out or ""


def value(text: str, name: str, **labels: str) -> float | None:
    found = [v for got, v in samples(text, name)
             if all(got.get(k) == want for k, want in labels.items())]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def keys(node: Node, key: str) -> dict[str, str]:
    """The labels that name a workload's series."""
    if key == "slurm":
        return {"slurm_job_id": JOB}
    p = PODS[key]
    return {"pod_uid": p.uid, "container_id": p.containers[0].container_id(p)}


def all_read(text: str) -> bool:
    """Every workload's cgroup read, and the kubelet asked at least once."""
    return (value(text, "gpu_exporter_workload_cgroups", state="read") == 4
            and value(text, "gpu_exporter_pod_resources_state", state="starting") == 0)


@pytest.fixture(scope="module")
def chart_pod(node: Node) -> PodRun:
    # The node's directories the chart names, here the test's own.
    state = node.tmp / "state"
    state.mkdir(mode=0o755, exist_ok=True)
    return pod_run(daemonset(), {"/var/lib/kubelet/pod-resources": str(node.kubelet_dir),
                                 "/var/lib/gpu-exporter": str(state)})


def test_the_chart_runs_it_with_least_privilege_and_the_hosts_files(chart_pod: PodRun) -> None:
    # What the rest of this file relies on, said first: the chart drops every
    # capability and mounts the host's /proc, /sys and the kubelet's directory.
    assert chart_pod.capabilities_dropped == ["ALL"]
    inside = {m[1]: m for m in chart_pod.mounts}
    assert inside["/host/proc"][0] == "/proc" and inside["/host/proc"][2]
    assert inside["/host/sys"][0] == "/sys" and inside["/host/sys"][2]
    assert POD_RESOURCES in inside
    assert "--path.procfs=/host/proc" in chart_pod.args
    assert "--path.sysfs=/host/sys" in chart_pod.args


def test_the_chart_pod_names_every_workload_and_reads_its_cgroup(
        node: Node, chart_pod: PodRun) -> None:
    daemon = start_daemon(node, chart_pod, "chart")
    try:
        text = wait_metrics(daemon, all_read)
        out = ""
    finally:
        out = stop(daemon)
    lay = node.layout
    assert value(text, "gpu_exporter_cgroup_layout_info",
                 layout="hybrid" if lay.hybrid else "v2", namespace="private") == 1, out
    for state in ("no_tree", "outside", "namespace_root_unknown", "not_found", "denied",
                  "no_files"):
        assert value(text, "gpu_exporter_workload_cgroups", state=state) == 0, state
    # Every workload named: pods by the kubelet (the chart's user reads its
    # socket) and by their processes' cgroups, the Slurm job by its cgroup.
    assert value(text, "gpu_exporter_pod_resources_state", state="ok") == 1
    for gpu, key in enumerate(("throttled", "asleep", "memory")):
        assert value(text, "gpu_allocation_info", gpu=str(gpu), namespace="ml", pod=key,
                     container="main") == 1, key
    assert value(text, "gpu_job_info", gpu="3", slurm_job_id=JOB, slurm_uid=str(JOB_UID)) == 1
    for key in ("throttled", "asleep", "memory", "slurm"):
        labels = keys(node, key)
        assert value(text, "gpu_workload_cpu_periods_total", **labels) is not None, key
        assert value(text, "gpu_workload_memory_used_bytes", **labels) is not None, key
        # The Slurm job of a hybrid host has no cgroup of its own in the
        # unified hierarchy (its tasks stay in slurmd's unit there), so no
        # pressure of its own; every container has.
        has_pressure = key != "slurm" or not lay.hybrid
        got = value(text, "gpu_workload_pressure_stalled_seconds_total", **labels,
                    resource="cpu", kind="some")
        assert (got is not None) == has_pressure, key
    throttled = keys(node, "throttled")
    assert value(text, "gpu_workload_cpu_limit_cores", **throttled) == pytest.approx(0.05)
    assert (value(text, "gpu_workload_cpu_throttled_periods_total", **throttled) or 0) > 0
    assert value(text, "gpu_workload_cpu_limit_cores", **keys(node, "asleep")) is None
    assert value(text, "gpu_workload_memory_limit_bytes", **keys(node, "memory")) == 128 * MIB
    assert value(text, "gpu_workload_memory_limit_bytes", **keys(node, "slurm")) == 256 * MIB
    assert value(text, "gpu_workload_memory_limit_bytes", **keys(node, "asleep")) is None


def test_diagnose_finds_the_throttled_workload_and_nothing_else(
        node: Node, chart_pod: PodRun) -> None:
    daemon = start_daemon(node, chart_pod, "diagnose")
    try:
        wait_metrics(daemon, all_read)
        result = diagnose(daemon)
    finally:
        out = stop(daemon)
    assert result.stdout, result.stderr + out
    report = json.loads(result.stdout)
    found = sorted((f["gpu"], f["cause"]) for f in report["findings"])
    assert found == [("0", "cpu_limit_throttled")], (report["findings"], out)
    # No silent gap: whatever could not be checked names its reason, and no
    # workload signal is among them, but for one the kernel decides: io.max
    # exists only under cgroup v2 (a hybrid host's blkio limits are not read),
    # and there the I/O limit rows are not judged and say so.
    io_limit = {f"{symptom}/io_limit_throttled"
                for symptom in ("memory_held_sm_idle", "memory_held_sm_underfed")}
    for gap in report["coverage"]["not_checked"]:
        if node.layout.hybrid and set(gap["checks"]) <= io_limit:
            assert "io.max" in gap["reason"] and "cgroup v1" in gap["reason"], gap
            continue
        assert "cgroup" not in json.dumps(gap), gap


def test_a_non_root_user_with_no_capabilities_reads_every_cgroup(
        node: Node, chart_pod: PodRun) -> None:
    # The chart's mounts and flags as an unprivileged user: the cgroup tree is
    # world-readable; only the kubelet's socket is not, and that is said.
    # The checkout (its virtual environment) must be reachable by that user:
    # a clone in a private directory (mktemp -d is 0700) is not.
    closed = closed_to_others()
    if closed is not None:
        pytest.skip(f"{closed} is not searchable by other users: user 65534 cannot reach "
                    "the exporter's checkout there")
    run = dataclasses.replace(chart_pod, uid=65534, gid=65534)
    daemon = start_daemon(node, run, "nobody")
    try:
        text = wait_metrics(daemon, all_read)
    finally:
        stop(daemon)
    assert value(text, "gpu_exporter_pod_resources_state", state="unreadable") == 1
    assert value(text, "gpu_job_info", gpu="3", slurm_job_id=JOB) == 1
    throttled = keys(node, "throttled")
    assert (value(text, "gpu_workload_cpu_throttled_periods_total", **throttled) or 0) > 0


def test_without_the_hosts_sys_the_gap_is_named(node: Node, chart_pod: PodRun) -> None:
    # The pod's own /sys shows no host cgroup: each workload is counted as
    # unread with its reason, never as nothing to check.
    run = dataclasses.replace(
        chart_pod, args=[a for a in chart_pod.args if not a.startswith("--path.sysfs")],
        mounts=[m for m in chart_pod.mounts if m[1] != "/host/sys"])
    daemon = start_daemon(node, run, "nosys")
    try:
        text = wait_metrics(daemon, lambda t: value(
            t, "gpu_exporter_workload_cgroups", state="read") == 0 and value(
            t, "gpu_exporter_workload_cgroups", state="no_tree") == 4)
        result = diagnose(daemon)
    finally:
        out = stop(daemon)
    assert value(text, "gpu_workload_cpu_periods_total", **keys(node, "throttled")) is None
    report = json.loads(result.stdout)
    reasons = [g["reason"] for g in report["coverage"]["not_checked"]]
    assert any("cgroup signals could not be read: no cgroup tree at /sys/fs/cgroup" in r
               for r in reasons), (reasons, out)
    # Not "nothing to check": there is a workload, and its signals are missing.
    assert not any("CPU limit" in g["reason"] for g in report["coverage"]["nothing_to_check"])


def diagnose(daemon: Daemon) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpu_exporter", "diagnose", "--url", daemon.url, "--json",
         "--wait", f"{SETTLE_S:.0f}s"], capture_output=True, text=True, cwd=ROOT,
        timeout=SETTLE_S + 60, check=False)


RUNC = ROOT / ".tools" / "bin" / "runc"


@pytest.mark.skipif(os.environ.get("GPU_EXPORTER_LONG_TESTS") != "1",
                    reason="the runc form is a long test (GPU_EXPORTER_LONG_TESTS=1)")
def test_under_runc_the_chart_pod_reads_every_workload(node: Node, chart_pod: PodRun) -> None:
    runc = shutil.which("runc") or (str(RUNC) if RUNC.exists() else None)
    if runc is None:
        pytest.skip("runc is not installed and Debian's could not be fetched "
                    "(scripts/fetch-runc.sh)")
    daemon = start_daemon_runc(node, chart_pod, "runc", runc)
    try:
        text = wait_metrics(daemon, all_read)
        result = diagnose(daemon)
    finally:
        out = stop(daemon)
    assert value(text, "gpu_exporter_pod_resources_state", state="ok") == 1, out
    assert value(text, "gpu_job_info", gpu="3", slurm_job_id=JOB) == 1
    throttled = keys(node, "throttled")
    assert (value(text, "gpu_workload_cpu_throttled_periods_total", **throttled) or 0) > 0
    found = sorted((f["gpu"], f["cause"]) for f in json.loads(result.stdout)["findings"])
    assert found == [("0", "cpu_limit_throttled")], (result.stdout, out)
