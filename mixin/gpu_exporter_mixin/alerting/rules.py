"""Every alerting and recording rule, built from the diagnosis table plus the
settings in ``alerts/config.yaml``.

Three groups of alerts:

- one per table row, on ``gpu_diagnosis_active == 1`` (names, severities,
  summaries, fixes and anchors from ``ROWS``);
- the exporter's own health (target down, NVML down, a collector failing,
  stale polls);
- fleet rules that need many series (a straggler GPU, driver version drift, the
  GPU count on a node dropping, temperature near the GPU's own slowdown
  threshold, GPU memory growing for hours).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gpu_exporter.diagnosis.table import ROWS, Row, Severity
from gpu_exporter_mixin.alerting.attribution import POD_OF_PROCESS_RECORD, pod_of_process_expr
from gpu_exporter_mixin.alerting.config import AlertConfig, AlertConfigError
from gpu_exporter_mixin.alerting.owner_rules import (
    JOB_STRAGGLER_RECORD,
    OWNER_RECORD,
    energy_rules,
    job_rules,
    owner_rule,
)
from gpu_exporter_mixin.alerting.rule_types import (
    UTILIZATION_RATE_WINDOW,
    UTILIZATION_RECORD,
    Exprs,
    RecordingRule,
)
from gpu_exporter_mixin.alerting.templates import (
    BYTES1024,
    DOT,
    PERCENT,
    duration,
    fixed,
    label,
    prose_duration,
    with_label,
)

Scope = Literal["gpu", "node", "fleet"]

# The labels that name one exporter, and one GPU of it, within a cluster. The
# cluster label (its name configurable, ``cluster_label``) comes first: every
# aggregation keeps it, so the same rules serve one Prometheus per cluster and a
# central store holding many (where no series has it, ``by`` simply omits it).

GROUP_RECORDING = "gpu-exporter.recording"
GROUP_DIAGNOSIS = "gpu-exporter.diagnosis"
GROUP_EXPORTER = "gpu-exporter.exporter"
GROUP_FLEET = "gpu-exporter.fleet"

WHERE_GPU = f"GPU {label('gpu')} ({label('uuid')}) on {label('instance')}"


@dataclass(frozen=True)
class AlertRule:
    name: str
    group: str
    severity: Severity
    expr: str
    for_s: float
    summary: str
    description: str  # a template (see templates.py)
    likely_cause: str
    fix: str
    anchor: str
    scope: Scope
    meaning: str  # the runbook's "what it means"
    confirm: tuple[str, ...]
    escalate: str
    row: Row | None = None
    # Labels beside severity that Alertmanager routes on (xid_tier: who acts).
    labels: dict[str, str] = field(default_factory=dict)


def _for(config: AlertConfig, name: str, default: float) -> float:
    return float(config.for_overrides.get(name, default))


def _severity(config: AlertConfig, name: str, default: Severity) -> Severity:
    return config.severity_overrides.get(name, default)


def _row_for(config: AlertConfig, row: Row) -> float:
    return float(config.for_overrides.get(row.key, config.diagnosis_for.of(row.severity)))


def _row_severity(config: AlertConfig, row: Row) -> Severity:
    return config.severity_overrides.get(row.key, row.severity)


# --- one alert per table row -------------------------------------------------


def row_matchers(row: Row) -> str:
    return f'symptom="{row.symptom}", cause="{row.cause}"'


def with_owner(x: Exprs, expr: str) -> str:
    """``expr`` (at most one series per GPU) once per owner of the GPU, with
    its ``owner`` label; a GPU with no known owner keeps its series as it is.
    The owners are the many side of the join, so a GPU shared by several pods
    gives one alert per pod and never a join error."""
    return (f"{OWNER_RECORD} * on ({x.gpu_key}) group_left (symptom, cause) (\n  {expr}\n)\n"
            f"or (\n  {expr}\n) unless on ({x.gpu_key}) {OWNER_RECORD}")


def _row_alert(config: AlertConfig, x: Exprs, row: Row) -> AlertRule:
    name = row.alert_name
    severity = _row_severity(config, row)
    for_s = _row_for(config, row)
    held = ("reported at once by the exporter" if row.immediate
            else f"held for the exporter's diagnosis window "
                 f"({config.diagnosis.prose()['window']})")
    evidence = row.evidence_text(config.diagnosis)
    description = (
        f"{WHERE_GPU}{with_label('owner', f' (allocated to {DOT})')}: {evidence} The "
        f"exporter's diagnosis "
        f"gpu_diagnosis_active{{symptom=\"{row.symptom}\", cause=\"{row.cause}\"}} is "
        f"{fixed(0)}: {held}, then for {prose_duration(for_s)} here.")
    cause = row.cause.replace("_", " ")
    return AlertRule(
        name=name, group=GROUP_DIAGNOSIS, severity=severity,
        expr=with_owner(x, f"{x.m('gpu_diagnosis_active', row_matchers(row))} == 1"),
        for_s=for_s, summary=row.summary, description=description,
        likely_cause=f"{cause}: {evidence}",
        fix=row.fix, anchor=row.anchor, scope="gpu",
        meaning=(f"{row.summary}. The exporter reports symptom {row.symptom} on this GPU and "
                 f"blames cause {row.cause}: the evidence it sees is below."),
        confirm=row.confirm,
        escalate=row.escalate, row=row,
        labels={"xid_tier": row.xid_tier} if row.xid_tier else {})


# --- the exporter's own health -----------------------------------------------

EXPORTER_CONFIRM = (
    "systemctl status gpu-exporter",
    "journalctl -u gpu-exporter --since '-1h'",
    "curl -s http://localhost:9835/metrics | grep '^gpu_exporter_'",
)


def _exporter_alerts(config: AlertConfig, x: Exprs) -> list[AlertRule]:
    e = config.exporter
    node_where = label("instance")
    out = [
        AlertRule(
            name="GpuExporterDown", group=GROUP_EXPORTER,
            severity=_severity(config, "GpuExporterDown", "critical"),
            expr=f"{x.m('up')} == 0",
            for_s=_for(config, "GpuExporterDown", e.down_for),
            summary="The GPU exporter on a GPU node cannot be scraped",
            description=(f"Prometheus has failed to scrape the GPU exporter at {node_where} "
                         f"(job {label('job')}, up {fixed(0)}) for {prose_duration(e.down_for)}: "
                         "nothing "
                         "watches this node's GPUs, and its GPU alerts are inhibited."),
            likely_cause="The exporter process stopped or crashed, the node is down or "
                         "unreachable, or a firewall or network policy blocks the scrape.",
            fix="Check that the node is up and the exporter runs (systemctl status "
                "gpu-exporter, or the DaemonSet pod); read its log for the reason it stopped; "
                "restart it. If the node itself is down, handle it as a node outage.",
            anchor="exporter-down", scope="node",
            meaning="Prometheus cannot scrape the exporter (up == 0). While it lasts no GPU "
                    "alert of this node can fire, so this alert pages.",
            confirm=EXPORTER_CONFIRM,
            escalate="Escalate to the node's owners when the node itself is unreachable."),
        AlertRule(
            name="GpuExporterNvmlDown", group=GROUP_EXPORTER,
            severity=_severity(config, "GpuExporterNvmlDown", "critical"),
            expr=f"{x.m('gpu_exporter_nvml_up')} == 0",
            for_s=_for(config, "GpuExporterNvmlDown", e.nvml_down_for),
            summary="The GPU exporter cannot initialise NVML: it sees no GPU",
            description=(f"The GPU exporter at {node_where} answers, but NVML has failed to "
                         f"initialise for {prose_duration(e.nvml_down_for)} "
                         f"(gpu_exporter_nvml_up {fixed(0)}): no GPU of this node is "
                         "watched."),
            likely_cause="The NVIDIA driver is not loaded, the driver was upgraded without a "
                         "reboot (NVML/driver version mismatch), libnvidia-ml.so.1 is missing "
                         "in the exporter's container, or the exporter lacks access to "
                         "/dev/nvidia*.",
            fix="Run nvidia-smi on the node: if it fails too, reload the driver or reboot the "
                "node (after an upgrade); if it works, fix the exporter's container (driver "
                "libraries mounted, device nodes visible).",
            anchor="exporter-nvml-down", scope="node",
            meaning="The exporter runs but NVML does not: on a GPU node that means either the "
                    "driver is broken (the GPUs are unusable) or the exporter is blind. "
                    "Either way the node's GPUs are unmonitored, so this alert pages.",
            confirm=("nvidia-smi", "lsmod | grep nvidia", "dmesg -T | grep -i nvrm",
                     "journalctl -u gpu-exporter --since '-1h' | grep -i nvml"),
            escalate="Escalate to whoever owns the node image when the driver does not load "
                     "after a reboot."),
        AlertRule(
            name="GpuExporterCollectorFailing", group=GROUP_EXPORTER,
            severity=_severity(config, "GpuExporterCollectorFailing", "warning"),
            expr=f"{x.m('gpu_exporter_collector_success')} == 0",
            for_s=_for(config, "GpuExporterCollectorFailing", e.collector_failing_for),
            summary="A GPU exporter collector keeps failing",
            description=(f"The {label('collector')} collector of the GPU exporter at "
                         f"{node_where} has failed every poll (success {fixed(0)}) for "
                         f"{prose_duration(e.collector_failing_for)}: its metrics are "
                         "missing or stale, and the diagnoses that need them are blind."),
            likely_cause="An NVML call the collector needs fails on this driver or GPU, a "
                         "/proc or /sys file it reads is missing in the container, or a bug.",
            fix="Read the exporter's log for the collector's error; mount the host's /proc and "
                "/sys if the container lacks them; disable the collector "
                "(--no-collector.NAME) if this hardware cannot support it.",
            anchor="exporter-collector-failing", scope="node",
            meaning="One collector fails on every poll (gpu_exporter_collector_success == 0); "
                    "the others still work.",
            confirm=("journalctl -u gpu-exporter --since '-1h' | grep -i collector",
                     "curl -s http://localhost:9835/metrics | "
                     "grep gpu_exporter_collector_success"),
            escalate="Escalate to the exporter's maintainers with the log line when the "
                     "failure is not explained by the node's setup."),
        AlertRule(
            name="GpuExporterPollsStale", group=GROUP_EXPORTER,
            severity=_severity(config, "GpuExporterPollsStale", "warning"),
            expr=(f"time() - {x.m('gpu_exporter_last_poll_timestamp_seconds')} > "
                  f"{e.stale_poll_seconds:.15g}"),
            for_s=_for(config, "GpuExporterPollsStale", e.stale_for),
            summary="The GPU exporter serves stale readings: its polls stopped",
            description=(f"The GPU exporter at {node_where} last finished a poll "
                         f"{fixed(0)} seconds ago (more than {e.stale_poll_seconds:.15g} s for "
                         f"{prose_duration(e.stale_for)}): its GPU metrics are old."),
            likely_cause="An NVML call hangs (a sick GPU or driver), the poll loop is stuck, "
                         "or the node's clock jumped.",
            fix="Check the exporter's log for poll timeouts (gpu_exporter_nvml_timeouts_total) "
                "and nvidia-smi's response time; a hung driver usually needs the GPU reset or "
                "the node rebooted; restart the exporter otherwise.",
            anchor="exporter-polls-stale", scope="node",
            meaning="The exporter answers scrapes, but the time of its last completed poll "
                    "(gpu_exporter_last_poll_timestamp_seconds) stays in the past.",
            confirm=("time nvidia-smi",
                     "curl -s http://localhost:9835/metrics | "
                     "grep -E 'gpu_exporter_(last_poll|nvml_timeouts)'",
                     "timedatectl"),
            escalate="Escalate to hardware when nvidia-smi hangs too."),
    ]
    return out


# --- fleet rules -------------------------------------------------------------


def recording_rules(config: AlertConfig) -> list[RecordingRule]:
    x = Exprs(config)
    # Utilization as the rate of the busy-time counter: every second between
    # two scrapes counts, where the gauge keeps one poll in each scrape. Only
    # for GPUs still exported ("and" the counter now): the rate of a GPU that
    # vanished keeps falling for a window over its last samples, and would
    # read as a straggler.
    busy = x.m('gpu_busy_seconds_total')
    # The rate is taken once, by the group's first rule, and the rules after it
    # read that record (rules in a group run in order, at one evaluation time):
    # taken in each of them, it was ten rates over every GPU of the fleet per
    # evaluation, and the group's slowest evaluation at 1,008 GPUs passed 1 s.
    util = UTILIZATION_RECORD
    per_gpu_diag = x.m("gpu_diagnosis_active")
    severity_of: dict[Severity, list[Row]] = {"critical": [], "warning": [], "info": []}
    for row in ROWS:
        severity_of[_row_severity(config, row)].append(row)
    levels: list[tuple[Severity, int]] = [("critical", 3), ("warning", 2), ("info", 1)]
    worst_parts = [
        f"{x.m('gpu_diagnosis_active', row_matchers(row))} * {weight}"
        for sev, weight in levels for row in severity_of[sev]]
    # Every GPU the exporter lists, at 0 where no row is active: an exporter
    # exports only its active rows (all of them, at 0 where they do not hold,
    # with --metrics.detail only), and a GPU with none is still ok or idle.
    worst = ("max by (" + x.gpu_key + ") (\n  " + "\n  or ".join(worst_parts) + "\n)\n"
             f"or max by ({x.gpu_key}) ({x.m('gpu_info')}) * 0")
    idle = config.fleet.idle_utilization
    rules = [
        RecordingRule(
            UTILIZATION_RECORD, f"rate({busy}[{UTILIZATION_RATE_WINDOW}]) and {busy}",
            f"Utilization of each GPU still exported: the rate of its busy time over "
            f"{UTILIZATION_RATE_WINDOW}."),
        RecordingRule(
            "instance:gpu_info:count", f"count by ({x.node_key}) ({x.m('gpu_info')})",
            "GPUs NVML enumerates on each node."),
        RecordingRule(
            "instance:gpu_utilization_ratio:avg", f"avg by ({x.node_key}) ({util})",
            "Average GPU utilization of each node."),
        RecordingRule(
            "gpu:gpu_utilization_ratio:siblings_avg",
            f"(\n  {util} * 0 + on ({x.node_key}) group_left () sum by ({x.node_key}) ({util})\n"
            f"  - {util}\n)\n/ (\n  {util} * 0 + on ({x.node_key}) group_left () "
            f"count by ({x.node_key}) ({util})\n  - 1 > 0\n)",
            "Average utilization of the other GPUs on the same node (absent on one-GPU nodes)."),
        RecordingRule(
            "gpu:gpu_utilization_ratio:straggler",
            f"{util}\n  < gpu:gpu_utilization_ratio:siblings_avg * "
            f"{config.fleet.straggler.below_ratio:.15g}\nand gpu:gpu_utilization_ratio:siblings_avg"
            f" > {config.fleet.straggler.siblings_busy:.15g}",
            "Utilization of GPUs far below their busy siblings' (stragglers only)."),
        RecordingRule(
            "gpu:gpu_diagnosis_severity:max", worst,
            "Worst active diagnosis of each GPU: 0 none, 1 info, 2 warning, 3 critical."),
    ]
    states = [("critical", "== 3"), ("warning", "== 2"), ("info", "== 1")]
    for state, cond in states:
        rules.append(RecordingRule(
            "instance:gpu_health_state:count",
            f"count by ({x.node_key}) (gpu:gpu_diagnosis_severity:max {cond})",
            f"GPUs per node whose worst active diagnosis is {state}.", {"state": state}))
    rules += [
        RecordingRule(
            "instance:gpu_health_state:count",
            f"count by ({x.node_key}) (\n  gpu:gpu_diagnosis_severity:max == 0\n"
            f"  and on ({x.gpu_key}) {util} < {idle:.15g}\n)",
            "GPUs per node with no active diagnosis that sit idle.", {"state": "idle"}),
        RecordingRule(
            "instance:gpu_health_state:count",
            f"count by ({x.node_key}) (\n  gpu:gpu_diagnosis_severity:max == 0\n"
            f"  and on ({x.gpu_key}) {util} >= {idle:.15g}\n)",
            "GPUs per node with no active diagnosis that are working.", {"state": "ok"}),
        RecordingRule(
            "instance:gpu_diagnosis_active:count",
            f"count by ({x.node_key}, symptom, cause) ({per_gpu_diag} == 1)",
            "GPUs per node and table row with the row active."),
        RecordingRule(
            "driver_version:gpu_info:count",
            f"count by ({x.cluster}, driver_version) ({x.m('gpu_info')})",
            "GPUs per cluster and driver version."),
        RecordingRule(
            "fleet:gpu_driver_versions:count",
            f"count by ({x.cluster}) (driver_version:gpu_info:count)",
            "Distinct driver versions in each cluster."),
        # Where the exporter cannot read the kubelet's socket, kube-state-metrics
        # names the pod of each GPU process by its UID (docs/attribution.md).
        owner_rule(x),
        RecordingRule(
            POD_OF_PROCESS_RECORD, pod_of_process_expr(x.selector),
            "Each GPU process with the namespace and name of its pod, joined by pod UID with "
            "kube-state-metrics' kube_pod_info (empty without kube-state-metrics)."),
        *energy_rules(x),
        *job_rules(config, x),
    ]
    return rules


def _fleet_alerts(config: AlertConfig, x: Exprs) -> list[AlertRule]:
    f = config.fleet
    mem = x.m("gpu_memory_used_bytes")
    leak_range = duration(f.memory_leak.range)
    temp = x.m("gpu_temperature_celsius", 'sensor="gpu"')
    slowdown = x.m("gpu_temperature_threshold_celsius", 'threshold="slowdown"')
    return [
        AlertRule(
            name="GpuStraggler", group=GROUP_FLEET,
            severity=_severity(config, "GpuStraggler", "warning"),
            expr="gpu:gpu_utilization_ratio:straggler",
            for_s=_for(config, "GpuStraggler", f.straggler.for_),
            summary="One GPU works far less than its busy siblings on the same node",
            description=(f"{WHERE_GPU} runs at {PERCENT} utilization, below "
                         f"{f.straggler.below_ratio:.0%} of the average of the node's other "
                         f"GPUs, which are busy (above {f.straggler.siblings_busy:.0%}), for "
                         f"{prose_duration(f.straggler.for_)}. In a synchronous job every "
                         "rank waits for it."),
            likely_cause="This GPU's rank is starved or slowed (its data loader, its CPU "
                         "cores, its NUMA placement, its PCIe link or clocks), or its process "
                         "died while the others wait.",
            fix="Compare this GPU with its siblings on the node dashboard: throttle reasons, "
                "clocks, PCIe link, its process's CPU and run-queue wait; fix what differs "
                "(the matching diagnosis alert usually names it).",
            anchor="straggler", scope="gpu",
            meaning="One GPU's utilization is far below the average of the other GPUs on the "
                    "same node while they are busy. Data-parallel training runs at the pace of "
                    "its slowest rank, so one straggler slows the whole job.",
            confirm=("nvidia-smi dmon -s pucm -d 1", "nvidia-smi pmon -c 1",
                     "nvidia-smi topo -m"),
            escalate="Escalate to the job owner when the GPU is healthy and only its rank "
                     "lags; to hardware when its link or clocks differ from its siblings'."),
        _job_straggler_alert(config),
        AlertRule(
            name="GpuDriverVersionDrift", group=GROUP_FLEET,
            severity=_severity(config, "GpuDriverVersionDrift", "warning"),
            expr=(f"count by ({x.node_key}, driver_version) ({x.m('gpu_info')})\n"
                  f"unless on ({x.cluster}, driver_version)\n"
                  f"  topk by ({x.cluster}) (1, driver_version:gpu_info:count)"),
            for_s=_for(config, "GpuDriverVersionDrift", f.driver_drift.for_),
            summary="A node runs a different NVIDIA driver than most of the fleet",
            description=(f"{label('instance')} runs driver {label('driver_version')} on "
                         f"{fixed(0)} GPU(s), while most GPUs of its cluster run another "
                         "version (see the fleet dashboard's driver versions)."),
            likely_cause="The node missed a rolling driver upgrade, was reimaged from an old "
                         "image, or is a canary that was never rolled forward or back.",
            fix="Bring the node to the fleet's driver version through the normal image or "
                "package pipeline (drain, upgrade, reboot); audit how it diverged.",
            anchor="driver-version-drift", scope="node",
            meaning="More than one NVIDIA driver version runs in the fleet, and this node is "
                    "not on the most common one. Mixed drivers make jobs behave differently "
                    "from node to node and hide regressions.",
            confirm=("nvidia-smi --query-gpu=driver_version --format=csv,noheader",
                     "cat /proc/driver/nvidia/version"),
            escalate="Escalate to whoever owns node images when the drift is not a planned "
                     "canary."),
        AlertRule(
            name="GpuCountDropped", group=GROUP_FLEET,
            severity=_severity(config, "GpuCountDropped", "warning"),
            expr=("instance:gpu_info:count\n  < max_over_time(instance:gpu_info:count["
                  f"{duration(f.gpu_count.window)}])"),
            for_s=_for(config, "GpuCountDropped", f.gpu_count.for_),
            summary="A node reports fewer GPUs than it did",
            description=(f"{label('instance')} now reports {fixed(0)} GPU(s), fewer than the "
                         f"most it reported in the last {prose_duration(f.gpu_count.window)}."),
            likely_cause="A GPU fell off the bus and disappeared after a driver reload or "
                         "reboot, a GPU was disabled or passed through to a VM, or it failed to "
                         "enumerate at boot (power, riser, PCIe training).",
            fix="Compare nvidia-smi -L and lspci with the node's inventory; check dmesg for "
                "Xid 79 and PCIe errors; drain the node and reseat or replace the missing GPU.",
            anchor="gpu-count-dropped", scope="node",
            meaning="The number of GPUs the exporter enumerates on a node (gpu_info) fell "
                    "below the most it reported recently. A GPU that is merely lost still "
                    "counts (GpuLostHardware pages for it); this catches GPUs that vanished.",
            confirm=("nvidia-smi -L", "lspci | grep -i nvidia",
                     "dmesg -T | grep -iE 'xid|fallen off|pcie'"),
            escalate="Escalate to hardware."),
        AlertRule(
            name="GpuTemperatureNearSlowdown", group=GROUP_FLEET,
            severity=_severity(config, "GpuTemperatureNearSlowdown", "warning"),
            expr=(f"{temp}\n  >= on ({x.gpu_key})\n"
                  f"  ({slowdown} > 0) - {f.temperature.margin_celsius:.15g}"),
            for_s=_for(config, "GpuTemperatureNearSlowdown", f.temperature.for_),
            summary="GPU temperature is close to its own slowdown threshold",
            description=(f"{WHERE_GPU} is at {fixed(0)} °C, within "
                         f"{f.temperature.margin_celsius:.15g} °C of its own slowdown threshold "
                         f"(gpu_temperature_threshold_celsius{{threshold=\"slowdown\"}}), for "
                         f"{prose_duration(f.temperature.for_)}; past it the GPU cuts its "
                         "clocks."),
            likely_cause="Poor airflow (blocked inlet, failed fan, clogged filter), a hot "
                         "aisle or rack position, or a neighbour heating this GPU.",
            fix="Check airflow, fans and filters and compare with the GPU's neighbours in the "
                "chassis; move load or cap power (nvidia-smi -pl) while investigating.",
            anchor="temperature-near-slowdown", scope="gpu",
            meaning="The GPU's temperature is within a margin of the slowdown threshold its "
                    "own SKU reports (it differs by model: never a fixed 83 °C). It will "
                    "throttle on the next warm spell.",
            confirm=("nvidia-smi -q -d TEMPERATURE",
                     "nvidia-smi --query-gpu=temperature.gpu,clocks.sm,"
                     "clocks_throttle_reasons.active --format=csv",
                     "ipmitool sdr type Fan"),
            escalate="Escalate to the datacenter team for cooling or chassis faults."),
        AlertRule(
            name="GpuMemoryGrowingSteadily", group=GROUP_FLEET,
            severity=_severity(config, "GpuMemoryGrowingSteadily", "warning"),
            expr=(f"deriv({mem}[{leak_range}]) * 3600 > {f.memory_leak.min_bytes_per_hour:.15g}\n"
                  f"and on ({x.gpu_key})\n"
                  f"predict_linear({mem}[{leak_range}], {f.memory_leak.horizon:.15g})\n"
                  f"  > on ({x.gpu_key}) {x.m('gpu_memory_total_bytes')}"),
            for_s=_for(config, "GpuMemoryGrowingSteadily", f.memory_leak.for_),
            summary="GPU memory has grown steadily for hours: a leak",
            description=(f"GPU memory used on {WHERE_GPU} has grown by {BYTES1024}B per hour "
                         f"over the last {prose_duration(f.memory_leak.range)} and, at this "
                         "rate, fills the GPU within "
                         f"{prose_duration(f.memory_leak.horizon)}."),
            likely_cause="A process keeps allocating without freeing: tensors kept alive "
                         "(accumulated losses with their graphs, growing caches), a growing "
                         "number of contexts or streams, or an inference server loading "
                         "models without unloading them.",
            fix="Find the process that grows (nvidia-smi --query-compute-apps) and fix the "
                "leak (detach tensors you keep, bound caches); restart it at a safe point "
                "before it runs out of memory.",
            anchor="memory-growing-steadily", scope="gpu",
            meaning="The GPU's used memory rises steadily over hours and, extrapolated, "
                    "exceeds the GPU's total: the job will fail with out-of-memory.",
            confirm=("nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory "
                     "--format=csv",
                     "nvidia-smi --query-gpu=memory.used,memory.total --format=csv -l 60"),
            escalate="Escalate to the job owner."),
    ]


def _job_straggler_alert(config: AlertConfig) -> AlertRule:
    js = config.fleet.job_straggler
    return AlertRule(
        name="GpuJobStragglerNode", group=GROUP_FLEET,
        severity=_severity(config, "GpuJobStragglerNode", "warning"),
        expr=JOB_STRAGGLER_RECORD,
        for_s=_for(config, "GpuJobStragglerNode", js.for_),
        summary="One node of a job spread over nodes works far less than the job's others",
        description=(f"{label('instance')} runs {label('owner')}'s GPUs at {PERCENT} "
                     "utilization on average, far below the job's median node (by more "
                     f"than {js.mad_multiplier:.15g} times the median absolute deviation of "
                     f"its nodes, and by at least {js.min_gap:.0%}), for "
                     f"{prose_duration(js.for_)}. Every other node of a synchronous job "
                     "waits for it."),
        likely_cause="Something on this node slows its ranks, and the node's own "
                     "diagnosis usually names it on its GPUs: its data reads stall "
                     "(memory_held_sm_underfed or _idle -> data_pipeline_io, "
                     "io_limit_throttled), its CPUs "
                     "starve the ranks (-> cpu_contention, cpu_limit_throttled, cpu_steal, "
                     "host_swapping, memory_limit_reclaim), its clocks are held back "
                     "(throttled_under_load -> power_cap, thermal, power_brake, hw_slowdown), "
                     "or its link is degraded (pcie_downtrained); with no diagnosis, its "
                     "network to the other nodes or a rank that died while the others wait.",
        fix="Ask the node's exporter why: gpu-exporter diagnose on the node (or its node "
            "dashboard, or the diagnosis alerts on the same instance) names the cause on "
            "its GPUs; fix that, or drain the node and requeue the job on healthy ones.",
        anchor="job-straggler-node", scope="node",
        meaning="A job holds GPUs on several nodes (the same Slurm job id, or the same pod "
                "owner, on each). Each node's share of the job is the mean utilization of "
                "the job's GPUs on it; this node's is far below the job's median node. "
                "Data-parallel training runs at the pace of its slowest node, so the whole "
                "job runs at this node's pace.",
        confirm=("gpu-exporter diagnose",
                 "nvidia-smi dmon -s pucm -d 1 -c 10",
                 "vmstat 1 5",
                 "scontrol show job -d <job id>"),
        escalate="Escalate to hardware when the node's GPUs, links or clocks differ from "
                 "the job's other nodes'; to the job owner when only its ranks lag.")


def alert_rules(config: AlertConfig) -> list[AlertRule]:
    x = Exprs(config)
    rules = [_row_alert(config, x, row) for row in ROWS]
    rules += _exporter_alerts(config, x)
    rules += _fleet_alerts(config, x)
    names = [r.name for r in rules]
    if len(set(names)) != len(names):  # pragma: no cover - a programming error
        raise RuntimeError("duplicate alert name")
    # A row's alert is named by its row key; its derived name is not a key.
    known = {r.name for r in rules if r.row is None} | {row.key for row in ROWS}
    unknown = (set(config.for_overrides) | set(config.severity_overrides)) - known
    if unknown:
        raise AlertConfigError(
            "alerts/config.yaml names unknown alerts: " + ", ".join(sorted(unknown))
            + " (a table row's alert is named by its row key, symptom/cause)")
    return rules
