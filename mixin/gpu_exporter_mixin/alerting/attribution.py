"""The recording rule that names the pod of each GPU process where the
exporter cannot read the kubelet's socket: ``gpu_process_info`` carries the
pod's UID from the process's cgroup, and kube-state-metrics' ``kube_pod_info``
carries the same UID (label ``uid``) with the namespace and name.

The one definition of the rule: docs/attribution.md quotes it, a test runs it
through promtool on sample series, and the rules generator
(``gpu_exporter_mixin.alerting``) ships it with the recording rules.
"""

from __future__ import annotations

from gpu_exporter_mixin.alerting.config import AlertConfig

POD_OF_PROCESS_RECORD = "gpu:gpu_process_info:kube_pod"

# kube_pod_info is one series per pod per kube-state-metrics replica (and
# carries pod IP, node and more): "max by" makes it one per pod UID before
# the join, so two replicas or a changed pod IP never make the join fail.
# group_left copies namespace and pod onto the process's series, replacing
# the target labels of the same name that some scrape setups attach. The
# processes are the exporter's own (``selector``, the mixin's configured
# matchers): another job's gpu_process_info is not joined.
def pod_of_process_expr(selector: str) -> str:
    matchers = ", ".join(m for m in (selector.strip().strip(","), 'pod_uid!=""') if m)
    return f"""\
gpu_process_info{{{matchers}}}
  * on (pod_uid) group_left (namespace, pod)
    max by (pod_uid, namespace, pod) (
      label_replace(kube_pod_info, "pod_uid", "$1", "uid", "(.+)")
    )"""


# As the default configuration writes it (docs/attribution.md quotes it).
POD_OF_PROCESS_EXPR = pod_of_process_expr(AlertConfig().selector)
