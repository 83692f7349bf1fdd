"""``gpu-exporter fleet``: many simulated GPU nodes at once, in several
clusters, for trying the rules, dashboards and a Prometheus setup at fleet size
without a GPU.

Each node is the real exporter (``gpu-exporter --simulate``) in its own process
on its own 127.0.0.1 port: NVML is one library per process, so one process is
one node. The nodes' faults come from the node kinds below, spread over the
fleet so every fleet panel and fleet alert has something to show; a few nodes
change during the run (a GPU leaks memory, a node comes back from a reboot with
a GPU missing). With ``--jobs``, some healthy nodes of each cluster run Slurm
jobs spread over several nodes (one job id on all of a job's nodes): a job with
one slow node, whose GPUs work at a third of the others' pace while its data
reads stall, or a balanced one. The targets go to one Prometheus file_sd file
per cluster, with the cluster label and the node's name as ``instance``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpu_exporter.simulator import ScenarioError, load_scenario

# The driver most of the fleet runs (the built-in scenarios'), and the one a
# node that missed the rolling upgrade still runs.
OLD_DRIVER = "570.86.15"


@dataclass(frozen=True)
class Expect:
    """A fleet alert the node's kind makes fire: on one GPU, or the node."""

    alert: str
    gpu: int | None = None


@dataclass(frozen=True)
class NodeKind:
    """What a node of the fleet simulates, and which fleet alerts that fires."""

    name: str
    scenario: str  # a built-in scenario the node's own extends
    description: str
    min_gpus: int = 1  # the scenario's faults sit on GPUs below this
    fixed_gpus: bool = False  # its faults need the scenario's own GPU count
    overrides: dict[str, Any] = field(default_factory=dict)  # merged into the node's scenario
    # A node that changes during the run: restarted (a reboot) with this many
    # fewer GPUs at the change time.
    loses_gpus: int = 0
    expects: tuple[Expect, ...] = ()


def _leak_timeline(steps: int = 12, every_s: int = 10) -> list[dict[str, Any]]:
    """GPU 0's used memory climbs from 30 % to 78 % in ``steps`` steps: fast
    enough to predict a full GPU, never past the near-full diagnosis."""
    return [{"at": f"{i * every_s}s", "gpus": [0],
             "set": {"memory_used_ratio": round(0.30 + 0.04 * i, 2)}}
            for i in range(steps + 1)]


KINDS: dict[str, NodeKind] = {k.name: k for k in (
    NodeKind("healthy", "healthy", "every GPU training, nothing wrong"),
    NodeKind("idle", "idle", "nothing running: the GPUs idle"),
    NodeKind("mixed", "mixed", "several faults at once: ECC, power cap, PCIe x8, thermal "
             "throttling, a straggler (GPU 7) near nothing else", min_gpus=8, fixed_gpus=True,
             expects=(Expect("GpuStraggler", 7), Expect("GpuTemperatureNearSlowdown", 6))),
    NodeKind("old-driver", "healthy", f"healthy, but on driver {OLD_DRIVER}: driver drift",
             overrides={"node": {"driver_version": OLD_DRIVER}},
             expects=(Expect("GpuDriverVersionDrift"),)),
    NodeKind("leak", "healthy", "GPU 0's memory grows steadily from the start",
             overrides={"timeline": _leak_timeline()},
             expects=(Expect("GpuMemoryGrowingSteadily", 0),)),
    NodeKind("gpu-vanishes", "healthy", "reboots at the change time with one GPU missing",
             min_gpus=2, loses_gpus=1, expects=(Expect("GpuCountDropped"),)),
)}

# Jobs spread over nodes (--jobs): each job's shape, and how many nodes each
# job spans. A shape's nodes are healthy nodes of the plan taken over by it.
JOB_SHAPES = {
    "straggler": "one node of the job works at a third of the others' pace, its data "
                 "reads stalling (GpuJobStragglerNode names it)",
    "balanced": "every node of the job works at the same pace (nothing fires)",
}
JOB_NODES = 4
# The first Slurm job id the fleet's jobs take, one more for each job.
FIRST_JOB_ID = 8001
_JOB_PID = 24100


def job_kind(job_id: int, gpus: int, slow: bool) -> NodeKind:
    """A healthy node whose every GPU a training rank of Slurm job ``job_id``
    holds; ``slow``: its ranks wait on their data (I/O-bound reads), so its
    GPUs work at about 30 % while the job's other nodes stay busy."""
    pids = [_JOB_PID + i for i in range(gpus)]
    busy = 0.3 if slow else 0.91
    proc = {"comm": "python", "gpu_memory_ratio": 0.74, "sm_utilization": busy,
            "cpu_ratio": 0.3 if slow else 1.2, "state": "D" if slow else "R"}
    job: dict[str, Any] = {"job_id": job_id, "gpus": list(range(gpus)), "pids": pids}
    overrides: dict[str, Any] = {
        "processes": [{"pid": pid, "gpus": [i], **proc} for i, pid in enumerate(pids)],
        "tenants": {"slurm_jobs": [job]}}
    if not slow:
        return NodeKind("job", "healthy", f"a node of Slurm job {job_id}, busy",
                        overrides=overrides)
    # The job's own cgroup stalls on I/O: the node's diagnosis reads it first
    # and names the cause (memory_held_sm_underfed/data_pipeline_io).
    job["cgroup"] = {"io_some": 0.38, "io_full": 0.2}
    overrides["state"] = {"utilization": 0.3}
    overrides["host"] = {"iowait_ratio": 0.31, "pressure_io": {"some": 0.38, "full": 0.2},
                         "cpu_busy_ratio": 0.25}
    return NodeKind("job-slow", "healthy",
                    f"the slow node of Slurm job {job_id}: its data reads stall",
                    overrides=overrides, expects=(Expect("GpuJobStragglerNode"),))


def parse_jobs(text: str) -> dict[str, int]:
    """``straggler=1,balanced=2`` -> jobs of each shape, per cluster."""
    jobs: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, count = part.partition("=")
        if name not in JOB_SHAPES:
            raise FleetError(f"--jobs: unknown job shape {name!r} "
                             f"(known: {', '.join(JOB_SHAPES)})")
        try:
            jobs[name] = int(count) if count else 1
        except ValueError:
            raise FleetError(f"--jobs: {part!r}: the count must be a whole number") from None
        if jobs[name] < 0:
            raise FleetError(f"--jobs: {part!r}: the count must not be negative")
    return jobs


def place_jobs(nodes: list[FleetNode], jobs: dict[str, int],
               job_nodes: int = JOB_NODES) -> list[FleetNode]:
    """The plan with ``jobs`` (per cluster) spread over its healthy nodes,
    ``job_nodes`` nodes each, in plan order; a straggler job's last node is
    its slow one. A FleetError where a cluster has too few healthy nodes."""
    if job_nodes < 3:
        raise FleetError("--job-nodes must be at least 3: of two nodes, neither stands "
                         "out from the job's median")
    wanted = sum(jobs.values()) * job_nodes
    out = list(nodes)
    job_id = FIRST_JOB_ID
    for cluster in dict.fromkeys(n.cluster for n in nodes):
        healthy = [i for i, n in enumerate(out)
                   if n.cluster == cluster and n.kind.name == "healthy"]
        if len(healthy) < wanted:
            raise FleetError(f"--jobs: {cluster} has {len(healthy)} healthy node(s), the "
                             f"jobs need {wanted}: raise --nodes or the healthy weight of "
                             "--scenario-mix")
        free = iter(healthy)
        for shape, count in jobs.items():
            for _ in range(count):
                members = [next(free) for _ in range(job_nodes)]
                for k, i in enumerate(members):
                    node = out[i]
                    gpus = node.gpus or load_scenario(node.kind.scenario).node.gpus
                    slow = shape == "straggler" and k == job_nodes - 1
                    out[i] = FleetNode(node.name, node.cluster,
                                       job_kind(job_id, gpus, slow), node.gpus)
                job_id += 1
    return out


# Every kind, so every fleet panel and alert shows something; mostly healthy.
DEFAULT_MIX = "healthy=3,idle=1,mixed=1,old-driver=1,leak=1,gpu-vanishes=1"
# Seconds after the start before CPU is measured.
WARMUP_S = 15.0


class FleetError(Exception):
    """A wrong fleet argument (one line for the user)."""


def parse_mix(text: str) -> dict[str, int]:
    """``healthy=3,mixed=1`` -> weights by kind, in the order given."""
    mix: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, weight = part.partition("=")
        if name not in KINDS:
            raise FleetError(f"--scenario-mix: unknown node kind {name!r} "
                             f"(known: {', '.join(KINDS)})")
        try:
            mix[name] = int(weight) if weight else 1
        except ValueError:
            raise FleetError(f"--scenario-mix: {part!r}: the weight must be a whole "
                             "number") from None
        if mix[name] < 0:
            raise FleetError(f"--scenario-mix: {part!r}: the weight must not be negative")
    if not any(mix.values()):
        raise FleetError("--scenario-mix: no kind with a positive weight")
    return mix


@dataclass(frozen=True)
class FleetNode:
    name: str  # the instance label and the simulated node's id
    cluster: str
    kind: NodeKind
    gpus: int | None  # None: the scenario's own count


def _apportion(nodes: int, mix: dict[str, int]) -> list[str]:
    """``nodes`` kinds in proportion to the mix's weights, each weighted kind at
    least once when there are enough nodes, interleaved (a, b, c, a, b, a...)."""
    weighted = [(k, w) for k, w in mix.items() if w > 0]
    total = sum(w for _, w in weighted)
    counts = {k: (1 if nodes >= len(weighted) else 0) for k, _ in weighted}
    # The rest by largest remainder of each kind's share.
    rest = nodes - sum(counts.values())
    shares = {k: rest * w / total for k, w in weighted}
    for k in counts:
        counts[k] += int(shares[k])
    left = nodes - sum(counts.values())
    for k in sorted(shares, key=lambda k: shares[k] - int(shares[k]), reverse=True)[:left]:
        counts[k] += 1
    order: list[str] = []
    while any(counts.values()):
        for k in counts:
            if counts[k]:
                order.append(k)
                counts[k] -= 1
    return order


def plan(nodes: int, clusters: Sequence[str], mix: dict[str, int],
         gpus: int | None = None) -> list[FleetNode]:
    """``nodes`` nodes shared among the clusters, each cluster's of the mix's
    kinds in proportion to their weights, so every cluster has some of every
    kind when it has enough nodes."""
    if nodes < 1:
        raise FleetError("--nodes must be at least 1")
    if not clusters:
        raise FleetError("--clusters: at least one cluster")
    if len(set(clusters)) != len(clusters):
        raise FleetError("--clusters: a cluster is named twice")
    for cluster in clusters:  # a file name and part of each node's name
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", cluster):
            raise FleetError(f"--clusters: {cluster!r}: letters, digits, '.', '_' and '-' "
                             "only, at most 63")
    out = []
    for i, cluster in enumerate(clusters):
        size = nodes // len(clusters) + (1 if i < nodes % len(clusters) else 0)
        for j, kind_name in enumerate(_apportion(size, mix)):
            kind = KINDS[kind_name]
            n = None if kind.fixed_gpus or gpus is None else max(gpus, kind.min_gpus)
            out.append(FleetNode(f"{cluster}-node-{j + 1:03d}", cluster, kind, n))
    return out


def scenario_doc(node: FleetNode, changed: bool = False) -> dict[str, Any]:
    """The node's own scenario: its kind's, under the node's name, with its GPU
    count (one GPU fewer after the change, for a kind that loses one)."""
    kind = node.kind
    doc: dict[str, Any] = {"name": node.name, "extends": kind.scenario,
                           "description": f"{node.name} in {node.cluster}: {kind.description}"}
    node_part: dict[str, Any] = {"id": node.name}
    gpus = node.gpus
    if changed and kind.loses_gpus:
        gpus = (gpus or load_scenario(kind.scenario).node.gpus) - kind.loses_gpus
    if gpus is not None:
        node_part["gpus"] = gpus
        # The built-in processes sit on GPUs the smaller node may not have.
        doc.update({"processes": [], "expect": []})
    for key, value in kind.overrides.items():
        if key == "node":
            node_part.update(value)
        else:
            doc[key] = value
    doc["node"] = node_part
    return doc


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def listen_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports, free now, below the kernel's ephemeral range
    where it leaves room.

    A port picked by binding port 0 comes from the ephemeral range, where the
    kernel also takes the local ports of outgoing connections: with 128 nodes
    starting one after the other, Prometheus's scrapes of the first nodes took
    ports planned for later ones ("address already in use"). Below the range
    only a listener that names the port can take it. Every socket stays bound
    until all are chosen, so no port is handed out twice."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    first = 10000
    held: list[socket.socket] = []
    try:
        if low - first >= 2 * count:
            port = random.randrange(first, low - 2 * count)
            while len(held) < count and port < low:
                s = socket.socket()
                try:
                    s.bind((host, port))
                    held.append(s)
                except OSError:
                    s.close()
                port += 1
        while len(held) < count:  # no room below the range: the kernel's choice
            s = socket.socket()
            s.bind((host, 0))
            held.append(s)
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


def stop_process(process: subprocess.Popen[Any], grace_s: float = 10.0) -> None:
    """SIGTERM (unless it has already exited), up to ``grace_s`` to exit, then
    SIGKILL: a node that ignores SIGTERM must not outlive the fleet."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a running process (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_bytes(pid: int) -> int:
    """Resident memory of a running process (Linux /proc); 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass
class RunningNode:
    node: FleetNode
    port: int
    scenario_file: Path
    process: subprocess.Popen[bytes] | None = None
    changed: bool = False
    # CPU seconds of this node's earlier processes (before a restart).
    cpu_before: float = 0.0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        live = _cpu_seconds(self.process.pid) if self.process else 0.0
        return self.cpu_before + live


class Fleet:
    """The fleet's processes: started, changed once, measured, stopped."""

    def __init__(self, nodes: list[FleetNode], workdir: Path, targets_dir: Path,
                 cluster_label: str = "cluster", exporter_args: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.targets_dir = targets_dir
        self.cluster_label = cluster_label
        self.exporter_args = list(exporter_args)
        self.nodes = [RunningNode(n, port, workdir / f"{n.name}.yaml")
                      for n, port in zip(nodes, listen_ports(len(nodes)), strict=True)]
        self.clusters = sorted({n.cluster for n in nodes})

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        for rn in self.nodes:
            self._launch(rn)
        self.write_targets()

    def _launch(self, rn: RunningNode) -> None:
        doc = scenario_doc(rn.node, rn.changed)
        rn.scenario_file.write_text(yaml.safe_dump(doc, sort_keys=False))
        # A scenario that does not load is a bug of this module: fail here, not
        # in a child's log.
        load_scenario(str(rn.scenario_file))
        log = (self.workdir / f"{rn.node.name}.log").open("ab")
        with log:
            rn.process = subprocess.Popen(
                [sys.executable, "-m", "gpu_exporter", "--simulate", str(rn.scenario_file),
                 "--web.listen-address", rn.address, *self.exporter_args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def change(self) -> list[str]:
        """The run's state change: nodes of a kind that loses GPUs reboot with
        fewer (same address, same name). The names of the nodes changed."""
        changed = []
        for rn in self.nodes:
            if rn.node.kind.loses_gpus and not rn.changed:
                rn.cpu_before = rn.cpu_seconds()
                if rn.process is not None:
                    stop_process(rn.process)
                rn.changed = True
                self._launch(rn)
                changed.append(rn.node.name)
        return changed

    def write_targets(self) -> None:
        """One file_sd file per cluster, written atomically."""
        for cluster in self.clusters:
            groups = [{"targets": [rn.address],
                       "labels": {self.cluster_label: cluster, "instance": rn.node.name,
                                  "scenario": rn.node.kind.name}}
                      for rn in self.nodes if rn.node.cluster == cluster]
            path = self.targets_dir / f"{cluster}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(groups, indent=1))
            tmp.replace(path)

    def exited(self) -> list[str]:
        return [f"{rn.node.name} (exit {rn.process.returncode})" for rn in self.nodes
                if rn.process is not None and rn.process.poll() is not None]

    def cpu_seconds(self) -> float:
        return sum(rn.cpu_seconds() for rn in self.nodes)

    def rss_bytes(self) -> int:
        return sum(_rss_bytes(rn.process.pid) for rn in self.nodes if rn.process)

    def gpu_count(self) -> int:
        total = 0
        for rn in self.nodes:
            n = rn.node.gpus or load_scenario(rn.node.kind.scenario).node.gpus
            total += n - (rn.node.kind.loses_gpus if rn.changed else 0)
        return total

    def stop(self) -> None:
        for rn in self.nodes:  # all asked at once, then awaited
            if rn.process is not None and rn.process.poll() is None:
                rn.process.terminate()
        for rn in self.nodes:
            if rn.process is not None:
                stop_process(rn.process)


def cpu_line(fleet: Fleet, cpu: float, wall: float) -> str:
    n = len(fleet.nodes)
    share = cpu / wall if wall > 0 else 0.0
    rss_mib = fleet.rss_bytes() / n / 2**20
    return (f"fleet: {n} nodes, {fleet.gpu_count()} GPUs: {share:.0%} of a core in all, "
            f"{share / n:.1%} of a core and {rss_mib:.0f} MiB per node "
            f"({wall:.0f} s measured)")


def main(argv: Sequence[str], parser_cls: type[argparse.ArgumentParser]) -> int:
    p = parser_cls(prog="gpu-exporter fleet",
                   description="Run many simulated GPU nodes (each the real exporter on a "
                               "simulated node, on its own 127.0.0.1 port) in several "
                               "clusters, and write Prometheus file_sd target files with "
                               "their cluster labels.")
    p.add_argument("--nodes", type=int, default=8, help="how many nodes (default 8)")
    p.add_argument("--clusters", default="cluster-a,cluster-b",
                   help="cluster names, comma-separated (default cluster-a,cluster-b)")
    p.add_argument("--scenario-mix", default=DEFAULT_MIX,
                   help="node kinds and their weights (default " + DEFAULT_MIX + "); kinds: "
                        + "; ".join(f"{k.name}: {k.description}" for k in KINDS.values()))
    p.add_argument("--jobs", default="",
                   help="Slurm jobs spread over nodes, per cluster, by shape (e.g. "
                        "straggler=1,balanced=1; default none), each on --job-nodes of the "
                        "cluster's healthy nodes; shapes: "
                        + "; ".join(f"{k}: {v}" for k, v in JOB_SHAPES.items()))
    p.add_argument("--job-nodes", type=int, default=JOB_NODES,
                   help=f"nodes each job spans (default {JOB_NODES})")
    p.add_argument("--gpus", type=int, default=None,
                   help="GPUs per node (default: each scenario's own, 8); mixed keeps 8")
    p.add_argument("--cluster-label", default="cluster",
                   help="the label naming the cluster in the target files (default cluster)")
    p.add_argument("--targets-dir", type=Path, default=Path("fleet-targets"),
                   help="where the file_sd files go, one per cluster: CLUSTER.json "
                        "(default ./fleet-targets)")
    p.add_argument("--workdir", type=Path, default=None,
                   help="where the nodes' scenario files and logs go (default: TARGETS_DIR/"
                        "nodes)")
    p.add_argument("--change-after", type=float, default=120.0,
                   help="seconds after the start when nodes change state (default 120)")
    p.add_argument("--duration", type=float, default=None,
                   help="stop after this many seconds (default: run until interrupted)")
    p.add_argument("--warmup", type=float, default=WARMUP_S,
                   help=f"seconds after the start before CPU is measured (default {WARMUP_S:g}):"
                        " a node's start is not what it costs running")
    p.add_argument("--report-every", type=float, default=60.0,
                   help="print the fleet's CPU use this often, in seconds (default 60)")
    p.add_argument("exporter_args", nargs=argparse.REMAINDER,
                   help="after --: flags for every node's exporter (e.g. -- --poll.interval "
                        "5s --config.file exporter.yml)")
    args = p.parse_args(argv)
    extra = [a for a in args.exporter_args if a != "--"]
    try:
        if args.gpus is not None and args.gpus < 1:
            raise FleetError("--gpus must be at least 1")
        nodes = plan(args.nodes, [c.strip() for c in args.clusters.split(",") if c.strip()],
                     parse_mix(args.scenario_mix), args.gpus)
        nodes = place_jobs(nodes, parse_jobs(args.jobs), args.job_nodes)
    except FleetError as exc:
        p.error(str(exc))
    workdir = args.workdir or args.targets_dir / "nodes"
    fleet = Fleet(nodes, workdir, args.targets_dir, args.cluster_label, extra)
    stopping: list[int] = []

    def stop(signum: int, frame: object) -> None:
        stopping.append(signum)

    old: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.signal(sig, stop)
    try:
        try:
            fleet.start()
        except ScenarioError as exc:
            print(f"gpu-exporter fleet: error: {exc}", file=sys.stderr)
            return 2
        for rn in fleet.nodes:
            print(f"{rn.node.cluster}\t{rn.node.name}\t{rn.address}\t{rn.node.kind.name}",
                  flush=True)
        print(f"targets: {', '.join(str(args.targets_dir / f'{c}.json') for c in fleet.clusters)}",
              flush=True)
        started = time.monotonic()
        # CPU is measured from the end of the warm-up: the nodes' start (Python
        # and its imports) is not what a running node costs.
        measure_from, cpu0 = started + args.warmup, 0.0
        next_report = measure_from + args.report_every
        changed = measuring = False
        while not stopping:
            now = time.monotonic()
            if args.duration is not None and now - started >= args.duration:
                break
            if not measuring and now >= measure_from:
                measuring, cpu0 = True, fleet.cpu_seconds()
            if not changed and now - started >= args.change_after:
                changed = True
                names = fleet.change()
                if names:
                    print(f"changed: {', '.join(names)} rebooted with fewer GPUs", flush=True)
            if measuring and now >= next_report:
                print(cpu_line(fleet, fleet.cpu_seconds() - cpu0, now - measure_from),
                      flush=True)
                next_report += args.report_every
            dead = fleet.exited()
            if dead:
                print(f"gpu-exporter fleet: nodes exited: {', '.join(dead)}; their logs are "
                      f"in {workdir}", file=sys.stderr)
                return 1
            time.sleep(0.5)
        if measuring:
            print(cpu_line(fleet, fleet.cpu_seconds() - cpu0, time.monotonic() - measure_from),
                  flush=True)
        return 0
    finally:
        fleet.stop()
        for sig, handler in old.items():
            signal.signal(sig, handler)
