"""A healthy node under construction: its board, its GPUs' workloads (bare
processes, device-plugin pods, Slurm jobs on cgroup v1 or v2, MIG instances
held by pods) and its host (CPUs, NUMA, a VM, PSI or not). Causes and
confounders change it before it becomes a scenario.

Everything here is what a well-running node looks like: busy GPUs fed by
processes that run, a quiet host. The figures are drawn with room on every
side, so nothing about a healthy node sits near a cause.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Literal

from gpu_exporter.simulator.model import DeviceProfile

GIB = 1024**3
MIB = 1024**2
Tenant = Literal["bare", "pod", "slurm-v1", "slurm-v2", "mig"]
# A GPU its job keeps busy: utilization drawn here, clear of a starved one's
# (host_causes.STARVED) by more than the jitter moves either.
FED = (0.86, 0.98)
TENANTS: tuple[Tenant, ...] = ("bare", "pod", "slurm-v1", "slurm-v2", "mig")


@dataclass(frozen=True)
class HostShape:
    cpus: int
    numa_nodes: int
    psi: bool  # /proc/pressure and the cgroups' *.pressure exist
    schedstat: bool
    vm: bool  # a virtual machine: its CPUs may be stolen by the hypervisor
    swap: bool  # the host has swap space
    delay_accounting: bool

    def describe(self) -> str:
        parts = [f"{self.cpus} CPUs", f"{self.numa_nodes} NUMA"]
        parts += [name for name, on in (("VM", self.vm), ("no PSI", not self.psi),
                                         ("no schedstat", not self.schedstat),
                                         ("swap", self.swap)) if on]
        return ", ".join(parts)


@dataclass
class Instance:
    """A MIG instance of the target GPU, held by a pod (or by no one)."""

    gpu_instance: int
    profile_id: int
    memory_mib: int
    slot: int  # its MIG device index on the GPU (the device plugin's "gpu:slot")
    memory_used_ratio: float
    sm_active: float
    pid: int | None  # its process
    owner: str | None


@dataclass
class Gpu:
    index: int
    condition: dict[str, Any]
    pid: int | None  # the GPU's main process (None: MIG instances' own, or none)
    owner: str | None  # who holds it
    workload: dict[str, Any] | None  # its pod container's or Slurm job's cgroup condition
    instances: list[Instance] = field(default_factory=list)


class NodeBuilder:
    """One node; ``target`` is the GPU a case's first cause is on."""

    def __init__(self, rng: random.Random, board_key: str, board: DeviceProfile,
                 tenant: Tenant, host: HostShape, gpus: int, target: int,
                 target_util: float) -> None:
        self.rng = rng
        self.board_key = board_key
        self.board = board
        self.tenant = tenant
        self.shape = host
        self.target = target
        self.count = gpus
        self.util = target_util  # the target GPU's utilization (or instance activity)
        self.host: dict[str, Any] = self._quiet_host()
        self.timeline: list[dict[str, Any]] = []
        self.processes: dict[int, dict[str, Any]] = {}
        self.pods: list[dict[str, Any]] = []
        self.slurm_jobs: list[dict[str, Any]] = []
        self.free_devices: list[str] = []
        # Each tenant's user, drawn apart from the case's other draws (a
        # stream of its own, seeded from the case's, leaves every other draw
        # of a seed as it was).
        self._uid_rng = random.Random(repr(self.rng.getstate()[1][:4]))
        self._uids: set[int] = set()
        self.jitter = 0.0
        # The GPUs of the multi-GPU job the target is a rank of (empty: none).
        self.job_gpus: list[int] = []
        self.gpus = [self._healthy_gpu(i, target_util if i == target else None)
                     for i in range(gpus)]

    # --- the healthy node ----------------------------------------------------------
    def u(self, lo: float, hi: float) -> float:
        return self.rng.uniform(lo, hi)

    def _quiet_host(self) -> dict[str, Any]:
        s = self.shape
        io_some = self.u(0.0, 0.03)
        host: dict[str, Any] = {
            "cpus": s.cpus, "numa_nodes": s.numa_nodes, "psi_available": s.psi,
            "schedstat_available": s.schedstat, "delay_accounting": s.delay_accounting,
            "cpu_busy_ratio": self.u(0.1, 0.4), "iowait_ratio": self.u(0.001, 0.01),
            "steal_ratio": self.u(0.0, 0.02) if s.vm else 0.0,
            "pressure_cpu": {"some": self.u(0.005, 0.06), "full": 0.0},
            "pressure_io": {"some": io_some, "full": io_some / 3},
            "pressure_memory": {"some": 0.0, "full": 0.0},
            "memory_total_bytes": self.rng.choice([256, 512, 1024, 2048]) * GIB,
            "memory_available_ratio": self.u(0.4, 0.8),
            "swap_total_bytes": self.rng.choice([16, 32, 64]) * GIB if s.swap else 0,
            "swap_used_ratio": self.u(0.0, 0.05) if s.swap else 0.0,
            "swap_in_bytes_per_s": 0.0, "swap_out_bytes_per_s": 0.0,
            "load1": s.cpus * self.u(0.1, 0.4),
        }
        return host

    def local_cpus(self, gpu: int) -> tuple[int, int]:
        """First and last CPU of the GPU's NUMA node (as the simulator places it)."""
        nodes = self.shape.numa_nodes
        per_node = max(1, -(-self.count // nodes))
        node = min(nodes - 1, gpu // per_node)
        per = self.shape.cpus // nodes
        return node * per, (node + 1) * per - 1

    def remote_cpus(self, gpu: int) -> str:
        """A cpulist on another NUMA node than the GPU's."""
        lo, hi = self.local_cpus(gpu)
        per = hi - lo + 1
        other = (lo // per + 1) % self.shape.numa_nodes
        start = other * per
        return f"{start}-{start + per - 1}"

    def _process(self, pid: int, gpu: int, util: float, memory: float) -> dict[str, Any]:
        """The process that drives a GPU at ``util``: a busy GPU's runs flat out
        launching work; a lightly loaded GPU's (a small model, latency-bound
        inference) spends its time waiting on the GPU or for requests, with
        CPU to spare."""
        light = util < 0.6
        return {"pid": pid, "comm": "python", "gpus": [gpu],
                "state": self.rng.choice(["R", "S"]) if light else "R",
                "cpu_ratio": self.u(0.2, 0.7) if light else self.u(1.0, 2.5),
                "threads": self.rng.randint(16, 64),
                "gpu_memory_ratio": round(memory * 0.97, 4),
                "sm_utilization": round(util, 3),
                "run_queue_wait_ratio": self.u(0.0, 0.04),
                "voluntary_ctxt_switches_per_s": self.u(200, 2000) if light else self.u(50, 400),
                "nonvoluntary_ctxt_switches_per_s": self.u(1, 30),
                "rss_bytes": self.rng.randint(4, 32) * GIB}

    def _healthy_gpu(self, i: int, util: float | None) -> Gpu:
        busy = util if util is not None else self.u(*FED)
        memory = self.u(0.35, 0.85)
        cond: dict[str, Any] = {"utilization": round(busy, 4),
                                "memory_used_ratio": round(memory, 4)}
        if self.tenant == "mig" and i == self.target:
            return self._mig_gpu(i, cond)
        pid = 4000 + 10 * i
        self.processes[pid] = self._process(pid, i, busy, memory)
        owner, workload = self._owner_for(i, [pid])
        return Gpu(i, cond, pid, owner, workload)

    def _owner_for(self, i: int, pids: list[int]) -> tuple[str | None, dict[str, Any] | None]:
        """Give GPU ``i``'s processes to a workload of the case's tenant shape."""
        cgroup = self._quiet_cgroup()
        if self.tenant in ("pod", "mig"):
            name = f"train-{i}"
            container: dict[str, Any] = {
                "name": "trainer", "pids": pids, "cgroup": cgroup,
                "run_as_uid": self.new_uid(),
                "devices": [{"resource": "nvidia.com/gpu", "ids": [str(i)]}],
                "cpu_limit": float(self.rng.choice([16, 24, 32, 48]))}
            if self.rng.random() < 0.5:
                limit = self.rng.choice([64, 128, 256]) * GIB
                container["memory_limit_bytes"] = limit
                cgroup["memory_anon_bytes"] = int(limit * self.u(0.2, 0.55))
                cgroup["memory_file_bytes"] = int(limit * self.u(0.05, 0.2))
            self.pods.append({"namespace": "ml", "name": name, "uid": _uid(self.rng),
                              "containers": [container]})
            return f"ml/{name}/trainer", cgroup
        if self.tenant in ("slurm-v1", "slurm-v2"):
            job_id = 5000 + i
            # Each job its own CPUs on its GPU's NUMA node, as slurmd's
            # task/cgroup plugin binds them.
            lo, hi = self.local_cpus(i)
            sharing = max(1, -(-self.count // self.shape.numa_nodes))
            width = (hi - lo + 1) // sharing
            first = lo + (i % sharing) * width
            job: dict[str, Any] = {"job_id": job_id, "uid": self.new_uid(),
                                   "cgroup_version": int(self.tenant[-1]),
                                   "gpus": [i], "pids": pids, "cgroup": cgroup,
                                   "cpus": f"{first}-{first + width - 1}"}
            self.slurm_jobs.append(job)
            return f"slurm job {job_id}", cgroup
        return None, None

    def new_uid(self) -> int:
        """A user no other tenant of the case runs as (1001-59999: the
        range useradd gives out, less the first user every scenario has)."""
        while True:
            uid = self._uid_rng.randint(1001, 59999)
            if uid not in self._uids:
                self._uids.add(uid)
                return uid

    def _quiet_cgroup(self) -> dict[str, Any]:
        return {"cpu_some": self.u(0.0, 0.05), "io_some": self.u(0.0, 0.03),
                "cpu_throttled_ratio": self.u(0.0, 0.02)}

    def _mig_gpu(self, i: int, cond: dict[str, Any]) -> Gpu:
        """The target GPU split into two or three instances, each held by a pod
        whose process runs on it; instance activity is the case's load."""
        profiles = {m.slices: m for m in self.board.mig_profiles if m.profile in (0, 1, 2)}
        sizes = self.rng.choice([(3, 3), (2, 2, 3), (1, 2, 3)])
        gpu = Gpu(i, cond, None, None, None)
        for slot, slices in enumerate(sizes):
            prof = profiles[slices]
            gi = 1 + slot
            pid = 4000 + 10 * i + slot + 1
            activity = self.util if slot == 0 else self.u(0.5, 0.9)
            used = self.u(0.3, 0.8)
            inst = Instance(gi, prof.id, prof.memory_mib, slot, used, activity, pid, None)
            self.processes[pid] = {**self._process(pid, i, activity, 0.0), "mig": [gi, 0]}
            gpu.instances.append(inst)
        for inst in gpu.instances:
            inst.owner = self._instance_pod(i, inst)
        return gpu

    def _instance_pod(self, i: int, inst: Instance) -> str:
        name = f"infer-{i}-{inst.slot}"
        # The device plugin's mixed strategy: one resource per MIG profile
        # ("nvidia.com/mig-3g.40gb"); its index IDs name "<gpu>:<mig index>".
        profile = next(m.name for m in self.board.mig_profiles if m.id == inst.profile_id)
        resource = "nvidia.com/mig-" + profile.removeprefix("MIG ")
        container = {"name": "server", "pids": [] if inst.pid is None else [inst.pid],
                     "cgroup": self._quiet_cgroup(), "run_as_uid": self.new_uid(),
                     "devices": [{"resource": resource, "ids": [f"{i}:{inst.slot}"]}],
                     "cpu_limit": float(self.rng.choice([4, 8]))}
        self.pods.append({"namespace": "serve", "name": name, "uid": _uid(self.rng),
                          "containers": [container]})
        return f"serve/{name}/server"

    # --- what causes change --------------------------------------------------------
    @property
    def tgt(self) -> Gpu:
        return self.gpus[self.target]

    def main(self, gpu: int | None = None) -> dict[str, Any] | None:
        """GPU ``gpu``'s (the target's) main process, None on a MIG GPU."""
        g = self.gpus[self.target if gpu is None else gpu]
        return None if g.pid is None else self.processes[g.pid]

    def owners(self, gpu: int | None = None) -> frozenset[str] | None:
        """Who holds the whole GPU: its workload, or every instance's pod."""
        g = self.gpus[self.target if gpu is None else gpu]
        names = {g.owner} if g.owner else {i.owner for i in g.instances if i.owner}
        return frozenset(self._with_user(n) for n in names if n) or None

    def _with_user(self, owner: str) -> str:
        """A Slurm job as the exporter names it, with its user (the uid the
        case gave it: its cgroup v1 path, its processes' real uid on v2)."""
        if not owner.startswith("slurm job "):
            return owner
        return f"{owner} (uid {self.spec_of(owner)['uid']})"

    def pod_of(self, owner: str) -> dict[str, Any]:
        ns, name, _ = owner.split("/")
        return next(p for p in self.pods if p["namespace"] == ns and p["name"] == name)

    def container(self, gpu: int | None = None) -> dict[str, Any] | None:
        """The pod container or Slurm job holding GPU ``gpu`` (the target), as
        the scenario will have it (changes to it stick)."""
        g = self.gpus[self.target if gpu is None else gpu]
        return None if g.owner is None else self.spec_of(g.owner)

    def spec_of(self, owner: str) -> dict[str, Any]:
        if owner.startswith("slurm job "):
            job_id = int(owner.removeprefix("slurm job "))
            return next(j for j in self.slurm_jobs if j["job_id"] == job_id)
        _, _, name = owner.split("/")
        pod = self.pod_of(owner)
        container: dict[str, Any] = next(c for c in pod["containers"] if c["name"] == name)
        return container

    def form_job(self, gpus: list[int]) -> None:
        """Make GPUs ``gpus`` the ranks of one job: one pod with a container
        per rank (each its own cgroup, limits and processes, as a job's
        launcher starts them), or one Slurm job holding them all (one cgroup,
        the union of their cpusets)."""
        ranks = sorted(gpus)
        self.job_gpus = ranks
        if self.tenant == "pod":
            name = f"ddp-{ranks[0]}"
            containers = []
            for k, i in enumerate(ranks):
                g = self.gpus[i]
                assert g.owner is not None
                old = self.pod_of(g.owner)
                self.pods.remove(old)
                container = {**old["containers"][0], "name": f"rank-{k}"}
                containers.append(container)
                g.owner = f"ml/{name}/rank-{k}"
            self.pods.append({"namespace": "ml", "name": name, "uid": _uid(self.rng),
                              "containers": containers})
            return
        assert self.tenant in ("slurm-v1", "slurm-v2")
        olds = [self.spec_of(f"slurm job {5000 + i}") for i in ranks]
        for old in olds:
            self.slurm_jobs.remove(old)
        job = {**olds[0], "gpus": ranks, "pids": [p for o in olds for p in o["pids"]],
               "cpus": ",".join(o["cpus"] for o in olds)}
        self.slurm_jobs.append(job)
        for i, old in zip(ranks, olds, strict=True):
            self.gpus[i].owner = f"slurm job {job['job_id']}"
            self.gpus[i].workload = job["cgroup"]
            # srun binds each task to its own CPUs: its GPU's socket.
            main = self.main(i)
            assert main is not None
            main["cpus_allowed"] = old["cpus"]

    @property
    def cgroup_read(self) -> bool:
        """The target's workload has a cgroup v2 the exporter reads."""
        return self.tenant in ("pod", "slurm-v2", "mig")

    def at(self, seconds: float, **condition: Any) -> None:
        """From ``seconds`` on, the target GPU's ``condition`` changes."""
        self.timeline.append({"at": seconds, "gpus": [self.target], "set": condition})

    # --- the scenario --------------------------------------------------------------
    def scenario(self, name: str) -> dict[str, Any]:
        gpus: dict[int, dict[str, Any]] = {}
        for g in self.gpus:
            cond = dict(g.condition)
            if g.instances:
                cond["mig_instances"] = [
                    {"gpu_instance": inst.gpu_instance, "profile_id": inst.profile_id,
                     "compute_instance": 0, "memory_total_mib": inst.memory_mib,
                     "memory_used_ratio": round(inst.memory_used_ratio, 4),
                     "sm_active": round(inst.sm_active, 4)} for inst in g.instances]
                used = sum(inst.memory_used_ratio * inst.memory_mib for inst in g.instances)
                cond["memory_used_ratio"] = round(used / self.board.memory_total_mib, 4)
                for inst in g.instances:
                    if inst.pid is not None and inst.pid in self.processes:
                        share = inst.memory_used_ratio * inst.memory_mib * 0.97
                        usable = self.board.memory_total_mib - self.board.memory_reserved_mib
                        self.processes[inst.pid]["gpu_memory_ratio"] = round(share / usable, 5)
            gpus[g.index] = cond
        tenants: dict[str, Any] | None = None
        if self.pods or self.slurm_jobs or self.free_devices:
            tenants = {"pods": self.pods, "slurm_jobs": self.slurm_jobs}
        data: dict[str, Any] = {
            "name": name, "node": {"gpus": len(self.gpus), "profile": self.board_key,
                                   "id": f"gen-{name}"},
            "gpus": gpus, "host": self.host, "processes": list(self.processes.values()),
            "timeline": sorted(self.timeline, key=lambda s: float(s["at"])),
            "jitter": round(self.jitter, 3), "seed": self.rng.randint(0, 2**31),
        }
        if tenants is not None:
            data["tenants"] = tenants
        return data


def _uid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"
