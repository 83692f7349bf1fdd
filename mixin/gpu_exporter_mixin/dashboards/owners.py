"""Whose GPU it is, in the dashboards' PromQL: the Kubernetes container the
kubelet allocated it to (``gpu_allocation_info``) or the Slurm job on it
(``gpu_job_info``), and the fleet dashboard's ``$namespace`` choice.

What the choice shows: **All** shows every GPU, whoever holds it, Slurm jobs'
GPUs and GPUs no one holds included; a chosen namespace (or several) shows only
the GPUs allocated to pods in it. A Slurm job or an unallocated GPU has no
namespace, so no chosen namespace shows it.

``namespace``, ``pod`` and ``container`` are also the target labels the
Prometheus Operator puts on every series it scrapes, naming the exporter's own
pod: a GPU's series other than ``gpu_allocation_info`` (whose labels the
ServiceMonitor's ``honorLabels`` keeps) may carry them, and must not be read as
the GPU's owner. Every query here drops them from those series first.
"""

from __future__ import annotations

from dataclasses import dataclass

# gpu_allocation_info's owner labels: the same names as the Operator's target labels.
POD_LABELS = ("namespace", "pod", "container")
SLURM_LABEL = "slurm_job_id"
# Which kind of workload holds the GPUs of a row of the jobs table.
HELD_BY = "held_by"
BY_POD, BY_SLURM, BY_NOBODY = "pod", "slurm job", "nobody"


def without_pod_labels(expr: str) -> str:
    """``expr`` without namespace, pod and container (set to empty, which
    drops a label): on the exporter's own series they name the exporter's pod."""
    for name in POD_LABELS:
        expr = f'label_replace({expr}, "{name}", "", "", "")'
    return expr


@dataclass(frozen=True)
class Owners:
    """Owner queries over the series ``sel`` selects (the dashboard's
    filters), joined on ``key`` (the labels of one GPU, cluster first)."""

    sel: str
    key: str
    cluster: str

    @property
    def allocations(self) -> str:
        return f"gpu_allocation_info{{{self.sel}}}"

    @property
    def chosen_allocations(self) -> str:
        """Allocations to pods in the chosen namespaces."""
        return f'gpu_allocation_info{{{self.sel}, namespace=~"$namespace"}}'

    @property
    def jobs(self) -> str:
        return f"gpu_job_info{{{self.sel}}}"

    def only_under_all(self, expr: str) -> str:
        """``expr`` (with no namespace label) when the choice is All, else
        nothing. label_replace's regex is anchored like a matcher's, so the
        choice as its regex matches the empty namespace only when it is All
        (``.*``): then each cluster's flag series carries namespace="all" and
        ``unless`` removes nothing; otherwise the flag's namespace is empty,
        like ``expr``'s, and ``unless`` removes all of it."""
        flag = (f'label_replace(group by ({self.cluster}) (gpu_info{{{self.sel}}}), '
                f'"namespace", "all", "", "$namespace")')
        return f"({expr}\nunless on ({self.cluster}, namespace) {flag})"

    def holders(self) -> str:
        """One series (value 1) per GPU and workload holding it, with the
        GPU's key labels, ``held_by``, and namespace/pod/container or
        slurm_job_id, as the namespace choice shows them: pods in the chosen
        namespaces; under All also Slurm jobs, and one series with no owner
        labels for each GPU no one holds."""
        k = self.key
        pods = (f'label_replace(max by ({k}, {", ".join(POD_LABELS)}) '
                f'({self.chosen_allocations}), "{HELD_BY}", "{BY_POD}", "", "")')
        slurm = (f'label_replace(max by ({k}, {SLURM_LABEL}) ({self.jobs}), '
                 f'"{HELD_BY}", "{BY_SLURM}", "", "")')
        nobody = (f'label_replace(max by ({k}) (gpu_info{{{self.sel}}}) unless on ({k}) '
                  f'({self.allocations} or {self.jobs}), "{HELD_BY}", "{BY_NOBODY}", "", "")')
        return (f"{pods}\nor {self.only_under_all(slurm)}\n"
                f"or {self.only_under_all(nobody)}")

    def shown(self, expr: str) -> str:
        """``expr`` (series keyed by GPU) for the GPUs the namespace choice shows."""
        return f"({expr})\nand on ({self.key}) ({self.holders()})"

    def with_owner(self, expr: str, key: str | None = None, chosen: bool = False) -> str:
        """``expr`` with whose GPU it is: the namespace, pod and container the
        kubelet allocated the GPU (or MIG device, with ``key`` naming it) to, or
        the Slurm job on it; rows with no known owner keep their labels, less
        the exporter pod's. A GPU shared by several pods names one of them
        (bottomk keeps one allocation per GPU, so the join never fails on a
        shared GPU). With ``chosen``, only the rows the namespace choice shows,
        each GPU named by a pod of a chosen namespace."""
        k = key or self.key
        bare = without_pod_labels(f"({expr})")
        alloc = self.chosen_allocations if chosen else self.allocations
        pods = (f"{bare} * on ({k}) group_left ({', '.join(POD_LABELS)}) "
                f"bottomk by ({k}) (1, {alloc})")
        slurm = (f"{bare} * on ({k}) group_left ({SLURM_LABEL}) "
                 f"bottomk by ({k}) (1, {self.jobs})")
        nobody = f"({bare} unless on ({k}) ({self.allocations} or {self.jobs}))"
        if chosen:
            slurm, nobody = self.only_under_all(slurm), self.only_under_all(nobody)
        return f"{pods}\nor {slurm}\nor {nobody}"

    def per_workload(self, utilization: str, shown: int) -> tuple[str, str, str]:
        """The jobs table's columns, one row per workload (its cluster,
        ``held_by`` and owner labels; under All, one row per cluster for the
        GPUs no one holds): the GPUs it holds (a MIG device counts as its
        GPU), their mean ``utilization`` (a per-GPU expression), and the
        diagnoses active on them. Only the ``shown`` worst rows: the most
        diagnoses first, then the least busy."""
        k = self.key
        by = ", ".join((self.cluster, HELD_BY, *POD_LABELS, SLURM_LABEL))
        held = f"({self.holders()})"
        gpus = f"count by ({by}) {held}"
        util = f"avg by ({by}) (\n{held}\n* on ({k}) group_left () {utilization})"
        # Each GPU's active diagnoses, 0 for a GPU with none (a row that does
        # not hold is not exported at the default settings).
        per_gpu = (f"(count by ({k}) (gpu_diagnosis_active{{{self.sel}}} == 1) "
                   f"or max by ({k}) (gpu_info{{{self.sel}}}) * 0)")
        diagnoses = f"sum by ({by}) (\n{held}\n* on ({k}) group_left () {per_gpu})"
        # Diagnoses weigh 1 each; idleness at most 0.5, so it only orders ties.
        worst = f"topk({shown}, {diagnoses}\n+ (1 - {util}) / 2)"
        gpus, util, diagnoses = (f"({x})\nand on ({by}) {worst}" for x in (gpus, util, diagnoses))
        return gpus, util, diagnoses
