"""The rows of a GPU allocated to a pod and left unused: no process uses it,
or the pod's code runs on the CPU (the job works, and its GPU does not,
which explains the first: ``precedence.py``). They judge a GPU by whom it is
allocated to and by its workload's own cgroup. ``table.py`` lists them in the
table; their rules are in ``allocation_rules.py``."""

from __future__ import annotations

from gpu_exporter.catalogs import attribution, deep
from gpu_exporter.catalogs import device as dev
from gpu_exporter.catalogs import processes as procs
from gpu_exporter.diagnosis.row import Row

# Whom the GPU is allocated to, and whether anything uses it.
_ALLOCATED_READS = (attribution.ALLOCATION_INFO, procs.PROCESS_MEMORY_USED_BYTES,
                    dev.UTILIZATION_RATIO, deep.MIG_SM_ACTIVE_RATIO, dev.MEMORY_USED_BYTES,
                    deep.MIG_MEMORY_USED_BYTES)

ALLOCATED_UNUSED = Row(
    "gpu_allocated_unused", "no_process", "warning",
    "GPU allocated to a pod but no process uses it",
    "The kubelet has allocated the GPU (or MIG instance) to a container, and for the whole "
    "diagnosis window ({window}) no process held a context on it, its utilization stayed "
    "below {idle_utilization} and its memory below {memory_held_ratio}: a reserved GPU "
    "doing nothing. A job between phases looks the same for a while.",
    "Ask the pod's owner whether it still needs the GPU; delete idle notebooks and "
    "finished jobs that keep their pods, or let an idle-culling policy do it.",
    ("kubectl get pod -n NAMESPACE POD -o wide", "nvidia-smi",
     "kubectl logs -n NAMESPACE POD -c CONTAINER --tail=50"),
    "Escalate to the team that owns the namespace when the GPU stays reserved for hours.",
    per_instance=True, reads=_ALLOCATED_READS,
    load_gate="a GPU doing work is used, whether or not its process can be seen")

ALLOCATED_RUNS_ON_CPU = Row(
    "gpu_allocated_unused", "runs_on_cpu", "warning",
    "GPU allocated to a pod whose code runs on the CPU instead",
    "The kubelet has allocated the GPU (or MIG instance) to a container through the device "
    "plugin, and for the diagnosis window ({window}) no process of its pod held a context "
    "on any GPU of the node, the GPU's utilization stayed below {idle_utilization} and its "
    "memory below {memory_held_ratio}, while the pod's own cgroup kept CPUs busy, at least "
    "{allocated_cpu_busy_cores} of them on average: the job runs, on the CPU (CUDA not "
    "visible in its container, a framework fallen back to the CPU, the wrong device in its "
    "code). A pod that uses little CPU is merely idle (the no_process row); one with a "
    "process on a GPU is judged by the rows of a starved GPU. Where the pod cannot be "
    "placed (its UID is read from the kubelet's device-plugin checkpoint, which does not "
    "list devices allocated through a ResourceClaim) or its cgroup not read, the row is "
    "not judged.",
    "Check in the container that the framework sees the GPU (nvidia-smi; "
    "torch.cuda.is_available()); install the framework's CUDA build, give the pod the "
    "runtime class or environment the device plugin expects (NVIDIA_VISIBLE_DEVICES must "
    "not be void or none), and move the model and its tensors to the GPU in the code.",
    ("kubectl exec -n NAMESPACE POD -c CONTAINER -- nvidia-smi",
     "kubectl exec -n NAMESPACE POD -c CONTAINER -- python -c "
     "'import torch; print(torch.cuda.is_available())'",
     "kubectl top pod -n NAMESPACE POD --containers"),
    "Escalate to the job owner (the pod named in the finding); to the platform team when "
    "no pod on the node sees its GPU.",
    per_instance=True,
    reads=_ALLOCATED_READS,
    load_gate="a GPU doing work is used, whether or not its process can be seen")

# Why the runs-on-CPU row (and the allocated-unused row) cannot be judged
# for the owners no unprivileged source places (coverage.py says it).
SLURM_UNNAMED = ("Slurm jobs run on this node, and no unprivileged source the exporter reads "
                 "says which GPUs a Slurm job holds (slurmctld's allocation needs its API; "
                 "cgroup v2 keeps the job's device rules in a BPF program; cgroup v1's "
                 "devices.list is not read): a Slurm job is seen only through its processes, "
                 "so one with none on its GPU is not seen")
CLAIM_UNPLACED = ("the GPU is allocated through a ResourceClaim (DRA): the pod-resources "
                  "API names its pod by name, its cgroup is named by the pod's UID, and the "
                  "kubelet's device-plugin checkpoint, which gives that UID, lists "
                  "device-plugin grants only; no unprivileged source places the claim's pod")
