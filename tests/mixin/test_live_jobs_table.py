"""The fleet dashboard's jobs table, live: a simulated node held by pods in
two namespaces, a Slurm job and no one, scraped by a real Prometheus (the
stack of tests/mixin/test_live_stack.py, its own instance here, so this node's load
never overlaps the checks there that healthy nodes fire nothing).

Proven: each workload with its GPUs, their utilization and its diagnoses,
worst first; All shows them all, the unallocated GPU included; a chosen
namespace its pods only; the active-diagnoses table follows the same choice.
"""

from __future__ import annotations

import json

import yaml

from gpu_exporter_mixin.dashboards.generate import FLEET
from gpu_exporter_mixin.dashboards.queries import panels, substitute
from tests.mixin.test_live_stack import JOB, ROOT, Stack, stack, wait_for

__all__ = ["stack"]  # the module-scoped fixture, this module's own instance


# A node held by pods in two namespaces, a Slurm job and no one: ml/train on
# GPUs 0-4, research/notebook-7 on GPU 7 with no process on it (the
# gpu_allocated_unused row), Slurm job 4242 on GPU 6, GPU 5 allocated to no one.
OWNERS_SCENARIO = {
    "name": "owners", "extends": "gpu-allocated-unused-no-process",
    "tenants": {
        "pods": [
            {"namespace": "ml", "name": "train", "uid": "2c3d4e5f-6071-4829-83a4-b5c6d7e8f901",
             "containers": [{"name": "trainer", "devices": [
                 {"resource": "nvidia.com/gpu", "ids": ["0", "1", "2", "3", "4"]}],
                 "pids": [24100, 24101, 24102, 24103, 24104]}]},
            {"namespace": "research", "name": "notebook-7",
             "uid": "3d4e5f60-7182-4a3b-94c5-d6e7f8091a2b",
             "containers": [{"name": "jupyter", "devices": [
                 {"resource": "nvidia.com/gpu", "ids": ["7"]}]}]}],
        "slurm_jobs": [{"job_id": 4242, "gpus": [6], "pids": [24106]}]}}
TRAIN = ("pod", "ml", "train", "trainer", "")
NOTEBOOK = ("pod", "research", "notebook-7", "jupyter", "")
SLURM_JOB = ("slurm job", "", "", "", "4242")
NO_ONE = ("nobody", "", "", "", "")


def test_the_jobs_table_names_each_workload_live(stack: Stack) -> None:
    """The fleet's jobs table on a live node: each workload with its GPUs,
    their utilization and its diagnoses, worst first; All shows them all, the
    unallocated GPU included; a chosen namespace its pods only. The
    active-diagnoses table follows the same choice."""
    path = stack.workdir / "owners.yaml"
    path.write_text(yaml.safe_dump(OWNERS_SCENARIO))
    instance = stack.start_exporter("owners", str(path))
    dash = json.loads((ROOT / FLEET).read_text())
    targets = {t["refId"]: t["expr"] for title, t in
               ((p["title"], t) for p in panels(dash) for t in p["targets"])
               if title == "Which jobs"}
    [by_row] = [t["expr"] for p in panels(dash) if p["title"] == "Active diagnoses by row"
                for t in p["targets"]]

    def table(namespace: str) -> dict[tuple[str, ...], list[float]]:
        values = {"cluster": ".*", "job": JOB, "instance": instance, "gpu": ".+",
                  "namespace": namespace, "datasource": "prometheus"}
        rows: dict[tuple[str, ...], list[float]] = {}
        for ref in "ABC":
            for series in stack.query(substitute(targets[ref], values)):
                m = series["metric"]
                key = tuple(m.get(k, "") for k in ("held_by", "namespace", "pod", "container",
                                                   "slurm_job_id"))
                rows.setdefault(key, []).append(float(series["value"][1]))
        return {k: v for k, v in rows.items() if len(v) == 3}

    def settled() -> dict[tuple[str, ...], list[float]] | None:
        got = table(".*")
        # The notebook's diagnosis holds after the diagnosis window; a rate
        # over $__rate_interval reads low until the counter is that old.
        return got if set(got) == {TRAIN, NOTEBOOK, SLURM_JOB, NO_ONE} \
            and got[NOTEBOOK][2] == 1 and got[TRAIN][1] > 0.8 else None

    try:
        everyone = wait_for("every workload in the jobs table, its GPUs busy", settled, 150)
        assert everyone[TRAIN][0] == 5 and everyone[TRAIN][2] == 0
        assert everyone[NOTEBOOK][:2] == [1, 0.0]
        assert everyone[SLURM_JOB][0] == 1 and everyone[SLURM_JOB][1] > 0.8
        assert everyone[NO_ONE][0] == 1  # GPU 5
        worst = max(everyone, key=lambda k: (everyone[k][2], -everyone[k][1]))
        assert worst == NOTEBOOK
        assert set(table("ml")) == {TRAIN}
        assert set(table("research")) == {NOTEBOOK}
        assert set(table("(ml|research)")) == {TRAIN, NOTEBOOK}
        assert table("nowhere") == {}
        for namespace, want in ((".*", 1), ("research", 1), ("ml", 0)):
            values = {"cluster": ".*", "job": JOB, "instance": instance, "gpu": ".+",
                      "namespace": namespace, "datasource": "prometheus"}
            rows = {(s["metric"]["symptom"], s["metric"]["cause"]): float(s["value"][1])
                    for s in stack.query(substitute(by_row, values))}
            assert rows.get(("gpu_allocated_unused", "no_process"), 0) == want, namespace
    finally:
        stack.stop_exporters(["owners"])
