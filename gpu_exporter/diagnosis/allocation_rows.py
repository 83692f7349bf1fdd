"""The row of a GPU allocated to a pod whose code runs on the CPU: the job
works, and its GPU does not. ``table.py`` lists it in the table beside the
allocated-and-unused row it explains (``precedence.py``); its rule is in
``allocation_rules.py``."""

from __future__ import annotations

from gpu_exporter.diagnosis.row import Row

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
    reads=("gpu_allocation_info", "gpu_process_memory_used_bytes", "gpu_utilization_ratio",
           "gpu_mig_sm_active_ratio", "gpu_memory_used_bytes", "gpu_mig_memory_used_bytes"),
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
