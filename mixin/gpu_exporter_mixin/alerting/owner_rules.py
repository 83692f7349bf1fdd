"""The recording rules that name whose work a GPU does: its owner (a pod's
container or a Slurm job), the energy each owner used, and a job spread over
nodes with its straggler node."""

from __future__ import annotations

from gpu_exporter_mixin.alerting.config import AlertConfig
from gpu_exporter_mixin.alerting.rule_types import (
    NODE_LABELS,
    UTILIZATION_RECORD,
    Exprs,
    RecordingRule,
)

OWNER_RECORD = "gpu:gpu_owner:info"


def owner_rule(x: Exprs) -> RecordingRule:
    """One series per GPU and owner, its ``owner`` label naming whose GPU it
    is: ``namespace/pod/container`` from gpu_allocation_info (each container
    holding it), or ``slurm job <id>`` from gpu_job_info."""
    pods = (f'label_join({x.m("gpu_allocation_info")}, "owner", "/", "namespace", "pod", '
            f'"container")')
    slurm = (f'label_replace({x.m("gpu_job_info")}, "owner", "slurm job $1", "slurm_job_id", '
             f'"(.+)")')
    return RecordingRule(OWNER_RECORD, f"max by ({x.gpu_key}, owner) (\n  {pods}\n  or {slurm}\n)",
                         "Whose each GPU is: one series per container it is allocated to or "
                         "Slurm job on it, the owner label naming it.")


# Joules per owner, as a rate (joules per second, watts): the energy counter's
# rate over the window, whole for a GPU with one owner, split by the owners'
# SM shares on a GPU with several, and said to be unsplit where the exporter
# has no shares for it. Over a range, joules = avg_over_time(record) * seconds.
# Where power smoothing holds a floor (gpu_power_smoothing_enabled 1), the
# draw the floor holds up is no owner's work, yet it is in the owners' split:
# the energy counter cannot tell it apart. A GPU held at floor F while its
# work draws W < F burns F - W for the floor, W for the work; the counter sees
# F either way, and W is measured nowhere. Taking F x seconds off would take
# the work's W with it (all of a busy GPU's F, when W > F and nothing is
# held), so the rule does not; docs/attribution.md says how to read it.
ENERGY_RATE_WINDOW = "5m"
ENERGY_RECORD = f"gpu_owner:gpu_energy_joules:rate{ENERGY_RATE_WINDOW}"
# What the split cannot subtract it can still say: the energy rate of a GPU
# whose draw stayed at power smoothing's floor over the window (within the
# power reading's noise), all of which may be the floor's rather than work.
ENERGY_AT_FLOOR_RECORD = f"gpu:gpu_energy_joules:rate{ENERGY_RATE_WINDOW}_at_floor"
# The draw the driver holds at the floor reads a little above it.
FLOOR_NOISE = 1.02


def energy_rules(x: Exprs) -> list[RecordingRule]:
    """``ENERGY_RECORD`` per GPU and owner, its ``split`` label saying how:
    ``whole`` (the GPU has one owner), ``sm_share`` (several, split by
    gpu_owner_sm_share_ratio), ``unknown`` (several and no shares: the GPU's
    whole rate, with no owner) or ``unowned`` (no one holds the GPU: what it
    burns idle or for work no scheduler gave it)."""
    rate = f"rate({x.m('gpu_energy_joules_total')}[{ENERGY_RATE_WINDOW}])"
    owners = f"count by ({x.gpu_key}) ({OWNER_RECORD})"
    share = x.m("gpu_owner_sm_share_ratio")
    return [
        RecordingRule(
            ENERGY_RECORD,
            f"{OWNER_RECORD}\n  * on ({x.gpu_key}) group_left ()\n"
            f"    ({rate} and on ({x.gpu_key}) {owners} == 1)",
            "Energy per owner (J/s) of GPUs with one owner: the GPU's whole rate.",
            {"split": "whole"}),
        RecordingRule(
            ENERGY_RECORD,
            f"{share}\n  * on ({x.gpu_key}) group_left ()\n"
            f"    ({rate} and on ({x.gpu_key}) {owners} > 1)",
            "Energy per owner (J/s) of GPUs with several owners, split by their processes' "
            "share of the GPU's SM time.", {"split": "sm_share"}),
        RecordingRule(
            ENERGY_RECORD,
            f"{rate}\n  and on ({x.gpu_key}) {owners} > 1\n"
            f"  unless on ({x.gpu_key}) {share}",
            "Energy (J/s) of GPUs with several owners that cannot be split (NVML gives no "
            "per-process samples): the GPU's whole rate, no owner.", {"split": "unknown"}),
        RecordingRule(
            ENERGY_RECORD,
            f"{rate}\n  unless on ({x.gpu_key}) {OWNER_RECORD}",
            "Energy (J/s) of GPUs no one holds: the GPU's whole rate, no owner.",
            {"split": "unowned"}),
        RecordingRule(
            ENERGY_AT_FLOOR_RECORD,
            f"{rate}\n  <= on ({x.gpu_key}) group_left ()\n"
            f"    ({x.m('gpu_power_floor_watts')} * {FLOOR_NOISE:g}\n"
            f"      and on ({x.gpu_key}) {x.m('gpu_power_smoothing_enabled')} == 1)",
            "Energy (J/s) of GPUs whose draw stayed at power smoothing's floor over the "
            "window: all of it may be the floor's, not its owners' work (an upper bound; "
            "absent where the GPU drew above its floor or smoothing is off)."),
    ]


JOB_OWNER_RECORD = "gpu:gpu_job_owner:info"
JOB_NODE_RECORD = "owner_instance:gpu_utilization_ratio:avg"
JOB_MEDIAN_RECORD = "owner:gpu_utilization_ratio:median_node"
JOB_DEVIATION_RECORD = "owner_instance:gpu_utilization_ratio:median_deviation"
JOB_MAD_RECORD = "owner:gpu_utilization_ratio:median_abs_deviation"
JOB_STRAGGLER_RECORD = "owner_instance:gpu_utilization_ratio:job_straggler"


def job_owner_rule(config: AlertConfig, x: Exprs) -> RecordingRule:
    """Whose job each GPU works for, over nodes: a Slurm job has one id on
    every node (``OWNER_RECORD`` names it so already); a pod is one node's
    part of a job, which is its controller where kube-state-metrics names one
    of a job's kinds (``kube_pod_owner``), ``namespace/Kind/name``. Any other
    GPU keeps its owner from ``OWNER_RECORD``."""
    kinds = "|".join(config.fleet.job_straggler.pod_job_kinds)
    pod_key = f"{x.cluster}, namespace, pod"
    # One series per pod and controller, whatever kube-state-metrics replicas
    # or extra labels: a pod has one controller.
    controller = (f"group by ({pod_key}, owner_kind, owner_name) (\n"
                  f'      kube_pod_owner{{owner_kind=~"{kinds}", owner_is_controller="true"}}\n'
                  "    )")
    of_job = (f"max by ({x.gpu_key}, owner) (\n"
              "  label_join(\n"
              f"    {x.m('gpu_allocation_info')}\n"
              f"    * on ({pod_key}) group_left (owner_kind, owner_name)\n"
              f"    {controller},\n"
              '    "owner", "/", "namespace", "owner_kind", "owner_name"\n'
              "  )\n"
              ")")
    return RecordingRule(
        JOB_OWNER_RECORD,
        f"{of_job}\nor\n{OWNER_RECORD} unless on ({x.gpu_key}) {of_job}",
        "Whose job each GPU works for across nodes: a pod's controller of a job kind "
        "(kube-state-metrics' kube_pod_owner), else the GPU's owner.")


def job_rules(config: AlertConfig, x: Exprs) -> list[RecordingRule]:
    """A job spread over nodes, by its owner over nodes (``JOB_OWNER_RECORD``):
    each node's share of the job, and the node far below the job's median by
    a robust spread. PromQL has quantile() but no median absolute deviation:
    the deviations from the median are recorded per node, and the median of
    their absolute values taken over them."""
    js = config.fleet.job_straggler
    owner_key = f"{x.cluster}, owner"
    node_in_job = f"{x.cluster}, owner, {', '.join(NODE_LABELS)}"
    spread = (f"clamp_min({JOB_MAD_RECORD} * {js.mad_multiplier:.15g}, "
              f"{js.min_gap:.15g})")
    return [
        job_owner_rule(config, x),
        RecordingRule(
            JOB_NODE_RECORD,
            f"avg by ({node_in_job}) (\n"
            f"  {JOB_OWNER_RECORD} * on ({x.gpu_key}) group_left () {UTILIZATION_RECORD}\n)",
            "Each node's share of each owner's work: the mean utilization of the owner's "
            "GPUs on the node."),
        RecordingRule(
            JOB_MEDIAN_RECORD,
            f"quantile by ({owner_key}) (0.5, {JOB_NODE_RECORD})\n"
            f"and on ({owner_key})\n"
            f"  count by ({owner_key}) ({JOB_NODE_RECORD}) >= {js.min_nodes}",
            f"The median node's utilization of each job over {js.min_nodes} nodes or more."),
        RecordingRule(
            JOB_DEVIATION_RECORD,
            f"{JOB_NODE_RECORD}\n  - on ({owner_key}) group_left () {JOB_MEDIAN_RECORD}",
            "How far each node of a job over nodes is from the job's median node (below it: "
            "negative); the share less this is the median, with the node's labels."),
        RecordingRule(
            JOB_MAD_RECORD,
            f"quantile by ({owner_key}) (0.5, abs({JOB_DEVIATION_RECORD}))",
            "The median absolute deviation of each job's nodes from its median node."),
        RecordingRule(
            JOB_STRAGGLER_RECORD,
            f"{JOB_NODE_RECORD}\n"
            f"  < on ({owner_key}) group_left ()\n"
            f"    ({JOB_MEDIAN_RECORD} - {spread})\n"
            f"and on ({owner_key}) {JOB_MEDIAN_RECORD} > {js.job_busy:.15g}",
            "Nodes of a busy job over nodes far below the job's median node (stragglers "
            "only): below it by more than the job's median absolute deviation times "
            f"{js.mad_multiplier:.15g}, and by at least {js.min_gap:.15g}."),
    ]
