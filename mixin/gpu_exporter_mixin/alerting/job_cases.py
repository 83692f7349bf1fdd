"""The promtool case of GpuJobStragglerNode: jobs spread over nodes, each
node's GPUs held by the job's Slurm id (gpu_job_info) or by one pod of the
job's controller (gpu_allocation_info, with kube-state-metrics'
kube_pod_owner), one job of each with a slow node and others that must stay
silent."""

from __future__ import annotations

from gpu_exporter_mixin.alerting.case_model import (
    Case,
    Check,
    Fire,
    Series,
    busy_seconds,
    gpu,
    node,
    steps,
)
from gpu_exporter_mixin.alerting.config import AlertConfig
from gpu_exporter_mixin.alerting.rules import AlertRule

GPUS_PER_NODE = 1


def job_straggler_case(rule: AlertRule, config: AlertConfig) -> Case:
    """Job 100 over four nodes, the last falling from 95 % to 30 % at the onset:
    its 2m rate passes 20 points below the job's median (75 %) about 37 s
    later, so the alert is pending from the first evaluation after that and
    fires ``for`` later: silent at onset + ``for``, firing a minute after.

    The others never fire: a balanced job with one node 17.5 points below its
    median (inside the absolute floor, its spread being near 0), a job whose
    nodes are spread evenly (its median absolute deviation is wide), a job over
    two nodes (no median to stand out from), and a job idle as a whole."""
    iv = 5.0
    onset = 300.0
    end = onset + rule.for_s + 300
    pre, post = steps(iv, onset) - 1, steps(iv, end - onset)
    total = pre + post + 1
    series: list[Series] = []
    slow_name = "job100-node-d"

    def job(job_id: int, shares: list[list[tuple[float, int]]]) -> list[str]:
        names = [f"job{job_id}-node-{chr(ord('a') + i)}" for i in range(len(shares))]
        for name, busy in zip(names, shares, strict=True):
            for i in range(GPUS_PER_NODE):
                g = gpu(name, i)
                series.append(busy_seconds(g, iv, busy))
                series.append(Series("gpu_job_info", {**g, "slurm_job_id": str(job_id),
                                                      "slurm_uid": "1000"}, f"1x{total}"))
        return names

    def pods(kind: str, name: str, shares: list[list[tuple[float, int]]]) -> list[str]:
        """One pod per node, ``name-i``, owned by the controller ``kind/name``."""
        names = [f"{name}-node-{chr(ord('a') + i)}" for i in range(len(shares))]
        for i, (node_name, busy) in enumerate(zip(names, shares, strict=True)):
            g = gpu(node_name, 0)
            pod = f"{name}-{i}"
            series.append(busy_seconds(g, iv, busy))
            series.append(Series("gpu_allocation_info", {
                **g, "namespace": "ml", "pod": pod, "container": "trainer",
                "resource": "nvidia.com/gpu"}, f"1x{total}"))
            series.append(Series("kube_pod_owner", {
                "cluster": g["cluster"], "job": "kube-state-metrics",
                "instance": "kube-state-metrics:8080", "namespace": "ml", "pod": pod,
                "uid": f"uid-{pod}", "owner_kind": kind, "owner_name": name,
                "owner_is_controller": "true"}, f"1x{total}"))
        return names

    steady = [(0.95, total)]
    job(100, [steady, steady, steady, [(0.95, pre), (0.3, post)]])
    # The pods of a training job over nodes are one job: their containers
    # differ, their controller is the same. A Deployment's replicas are not.
    pods("PyTorchJob", "train", [steady, steady, steady, [(0.95, pre), (0.3, post)]])
    pods("ReplicaSet", "serve", [steady, steady, steady, [(0.95, pre), (0.3, post)]])
    job(200, [steady, [(0.9, total)], [(0.85, total)], [(0.95, pre), (0.7, post)]])
    job(300, [steady, [(0.75, total)], [(0.55, total)], [(0.35, total)]])
    job(400, [steady, [(0.95, pre), (0.2, post)]])
    job(500, [[(0.3, total)], [(0.3, total)], [(0.3, pre), (0.05, post)]])
    fire = Fire({**node(slow_name), "owner": "slurm job 100"}, 0.3, keyed=True)
    pod_fire = Fire({**node("train-node-d"), "owner": "ml/PyTorchJob/train"}, 0.3, keyed=True)
    return Case(f"GpuJobStragglerNode: the node of a job over nodes far below the job's "
                f"median fires {rule.for_s:.0f} s after it falls past the floor; not a "
                "balanced job's lesser gap, an evenly spread job, a two-node job, an "
                "idle job or a Deployment's replicas; a job of pods over nodes by its "
                "controller", iv, series, [
                    Check(onset + rule.for_s, rule.name),
                    Check(onset + rule.for_s + 60, rule.name, (fire, pod_fire)),
                ])
