"""The node and fleet dashboards.

Thresholds that mirror the exporter's diagnosis come from the same settings as
the alerts (``alerts/config.yaml``, its ``diagnosis:`` thresholds included), so
a red cell and an alert agree.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import dashboard as dm

from gpu_exporter.diagnosis.table import ROWS
from gpu_exporter_mixin.alerting.config import AlertConfig
from gpu_exporter_mixin.alerting.owner_rules import (
    ENERGY_RECORD,
    JOB_DEVIATION_RECORD,
    JOB_NODE_RECORD,
    JOB_STRAGGLER_RECORD,
)
from gpu_exporter_mixin.dashboards.owners import BY_NOBODY, HELD_BY, Owners, without_pod_labels
from gpu_exporter_mixin.dashboards.panels import (
    BLUE,
    GREEN,
    ORANGE,
    RED,
    Common,
    Filters,
    Layout,
    Q,
    Steps,
    bars,
    graph,
    grid,
    on_off,
    row,
    single,
    timeline,
    variables,
)

THROTTLE_SYMPTOMS = ("throttled_under_load", "clocks_capped")
THROTTLE_CAUSES = ", ".join(r.cause for r in ROWS if r.symptom in THROTTLE_SYMPTOMS)
THROTTLE_MATCH = "|".join(THROTTLE_SYMPTOMS)
TAGS = ["gpu", "gpu-exporter", "nvidia"]
# Rows of the fleet's jobs table: the worst workloads, bounded for a fleet
# of thousands of pods.
JOBS_SHOWN = 20
# Joules over the time range: the energy rate per owner summed over one-minute
# steps. A step finds no sample before an owner's series began or after it
# ended, so a job that ran ten minutes of a six-hour range counts ten minutes
# (an average over the range times its seconds would count six hours).
ENERGY_STEP_S = 60


def joules(selector: str) -> str:
    """Joules of each series of the energy record over the range."""
    return (f"sum_over_time({ENERGY_RECORD}{{{selector}}}[$__range:{ENERGY_STEP_S}s]) "
            f"* {ENERGY_STEP_S}")


ENERGY_HELP = (
    "Joules each workload's GPUs used over the dashboard's time range, from the recording "
    f"rule {ENERGY_RECORD} (the rate of gpu_energy_joules_total) summed over one-minute "
    "steps. A GPU with one owner counts whole (split whole); a GPU several own is split by "
    "their processes' share of its SM time (split sm_share; such owners are named by Slurm "
    "job, or by pod UID and container ID: the kubelet does not say which container runs "
    "which process); where NVML gives no per-process samples it is shown unsplit (split "
    "unknown, no owner), and GPUs no one holds as split unowned.")


def _dashboard(uid: str, title: str, description: str) -> db.Dashboard:
    return db.Dashboard(title).uid(uid).description(description).tags(TAGS) \
        .time("now-6h", "now").refresh("30s").timezone("browser").editable() \
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)


def node_dashboard(config: AlertConfig) -> dm.Dashboard:
    # The label filters every query below carries (cluster label as configured).
    f = Filters.of(config)
    NODE, GPU, GPU_KEY = f.node, f.gpu, f.gpu_key
    owners = Owners(GPU, GPU_KEY, f.cluster)
    d = config.diagnosis
    fleet_link = db.DashboardLink("GPU fleet").type(dm.DashboardLinkType.LINK) \
        .url(f"/d/{config.fleet_dashboard_uid}/{config.fleet_dashboard_uid}") \
        .include_vars(True).keep_time(True)
    b = _dashboard(config.node_dashboard_uid, "GPU node",
                   "One GPU node: what is wrong (active diagnoses), then each GPU's "
                   "utilization, memory, power, clocks, throttling, temperature, PCIe and "
                   "memory errors, its processes, and the host around it.") \
        .variables(variables(config, multi_instance=False)).link(fleet_link)

    b = b.with_row(row("Health"))
    b = b.with_panel(single(Common(
        "Active diagnoses",
        "How many symptom → cause rows of the exporter's diagnosis table are active on the "
        "selected GPUs (gpu_diagnosis_active == 1). Zero is healthy; see the table beside it "
        "and the runbook for each row.",
        "short", [Q(f"count(gpu_diagnosis_active{{{GPU}}} == 1) or vector(0)", "active",
                    instant=True)],
        Steps(GREEN, ((1, ORANGE),)), Layout(4, 6))))
    b = b.with_panel(single(Common(
        "NVML",
        "Whether the exporter could initialise NVML (gpu_exporter_nvml_up). DOWN means it "
        "sees no GPU: the driver is not loaded or mismatched.",
        "short", [Q(f"min(gpu_exporter_nvml_up{{{NODE}}})", "NVML", instant=True)],
        Steps(RED, ((1, GREEN),)), Layout(3, 6))).mappings(on_off("DOWN", "OK", GREEN)))
    b = b.with_panel(single(Common(
        "Not judged here",
        "How many rows of the diagnosis table the exporter could not judge now on the "
        "selected GPUs (gpu_diagnosis_not_judged): a reader switched off or failing, "
        "permission refused, a GPU settling or lost. Their 0 means unknown, not OK; the table "
        "beside lists them. A check the board or driver does not offer (no GPM before "
        "Hopper, no recovery action before R565) is a fact of the node, not counted here: "
        "gpu-exporter diagnose and the node page list it.",
        "short", [Q(f"count(gpu_diagnosis_not_judged{{{GPU}}} == 1) or vector(0)",
                    "not judged", instant=True)],
        Steps(GREEN, ((1, BLUE),)), Layout(3, 6))))
    b = b.with_panel(grid(Common(
        "Active diagnoses: what is wrong and why, and what is not judged",
        "Every active row of the diagnosis table (state active): which GPU, the symptom and "
        "the cause the exporter blames, and whose GPU it is when known; the alert of the same "
        "name and its runbook section say how to confirm and fix it. Rows the exporter cannot "
        "judge on that GPU show as not judged, never as OK.",
        "short", [Q(owners.with_owner(
                        f"label_replace(gpu_diagnosis_active{{{GPU}}} == 1, \"state\", "
                        f"\"active\", \"\", \"\") or label_replace(gpu_diagnosis_not_judged"
                        f"{{{GPU}}} == 1, \"state\", \"not judged\", \"\", \"\")"),
                    instant=True, table=True)],
        Steps(GREEN, ((1, ORANGE),)), Layout(14, 6)),
        columns={"gpu": "GPU", "symptom": "symptom", "cause": "cause", "state": "state",
                 "namespace": "namespace", "pod": "pod", "container": "container",
                 "slurm_job_id": "Slurm job"},
        hide=("Time", "Value", "__name__", "job", "instance")))

    b = b.with_row(row("GPU $gpu", repeat="gpu"))
    b = b.with_panel(graph(Common(
        "Utilization beside SM activity",
        "NVML utilization is the share of time any kernel ran; SM active and occupancy "
        "(GPM, Hopper and newer) say how much of the chip worked. High utilization with "
        "low SM activity means small kernels or sync points, not a busy GPU. Utilization "
        "and SM activity are rates of their time counters: every second between two "
        "scrapes counts, not one poll's view.",
        "percentunit", [
            Q(f"rate(gpu_busy_seconds_total{{{GPU}}}[$__rate_interval])", "utilization"),
            Q(f"rate(gpu_sm_active_seconds_total{{{GPU}}}[$__rate_interval])", "SM active"),
            Q(f"gpu_sm_occupancy_ratio{{{GPU}}}", "SM occupancy"),
        ], Steps(RED, ((d.idle_utilization, ORANGE), (d.busy_utilization, GREEN))),
        Layout(8), min=0, max=1), thresholds_line=True))
    b = b.with_panel(graph(Common(
        "Memory used",
        "Framebuffer memory used as a share of the GPU's total (gpu_memory_used_bytes / "
        "gpu_memory_total_bytes). Above "
        f"{d.memory_near_full_ratio:.0%} the next larger allocation may fail.",
        "percentunit", [
            Q(f"gpu_memory_used_bytes{{{GPU}}} / on ({GPU_KEY}) "
              f"gpu_memory_total_bytes{{{GPU}}}", "used"),
        ], Steps(GREEN, ((0.9, ORANGE), (d.memory_near_full_ratio, RED))),
        Layout(8), min=0, max=1), thresholds_line=True))
    b = b.with_panel(graph(Common(
        "Power against its limit",
        "Board power draw beside the enforced power limit and the board's default limit. "
        "Draw pinned at a limit below the default means the GPU was capped.",
        "watt", [
            Q(f"gpu_power_watts{{{GPU}}}", "draw"),
            Q(f"gpu_power_limit_watts{{{GPU}}}", "limit"),
            Q(f"gpu_power_default_limit_watts{{{GPU}}}", "default limit"),
        ], Steps(GREEN), Layout(8), min=0)))
    b = b.with_panel(graph(Common(
        "Clocks against max",
        "SM and memory clocks beside their maximum. A busy GPU far below its max clock "
        "is throttled or capped: the throttle reasons panel says why.",
        "hertz", [
            Q(f'gpu_clock_hertz{{{GPU}, clock="sm"}}', "SM"),
            Q(f'gpu_clock_max_hertz{{{GPU}, clock="sm"}}', "SM max"),
            Q(f'gpu_clock_hertz{{{GPU}, clock="memory"}}', "memory"),
            Q(f'gpu_clock_max_hertz{{{GPU}, clock="memory"}}', "memory max"),
        ], Steps(GREEN), Layout(8), min=0)))
    b = b.with_panel(timeline(Common(
        "Throttle reasons",
        "Why the clocks are held back, over time. gpu_idle is normal on an idle GPU; "
        "sw_power_cap, hw_slowdown, sw_thermal, hw_thermal and hw_power_brake on a busy GPU "
        "cost performance.",
        "short", [Q(f"gpu_throttle_reason_active{{{GPU}}}", "{{reason}}")],
        Steps(GREEN, ((1, ORANGE),)), Layout(8)), on_off("off", "active", ORANGE)))
    b = b.with_panel(graph(Common(
        "Time throttled per reason",
        "Share of each interval a reason held the clocks down, from NVML's per-reason "
        "clock event time counters: a throttle that comes and goes between scrapes shows "
        "at its true share, where the reasons panel sees only the polls Prometheus kept.",
        "percentunit", [
            Q(f"rate(gpu_throttle_seconds_total{{{GPU}}}[$__rate_interval])", "{{reason}}"),
        ], Steps(GREEN, ((0.1, ORANGE), (0.5, RED))), Layout(8), min=0, max=1)))
    b = b.with_panel(graph(Common(
        "Temperature against its slowdown threshold",
        "GPU and memory temperature beside the GPU's own slowdown and shutdown thresholds "
        "(per SKU, from NVML; never a fixed 83 °C). Within "
        f"{config.fleet.temperature.margin_celsius:g} °C of slowdown the clocks are at risk.",
        "celsius", [
            Q(f'gpu_temperature_celsius{{{GPU}, sensor="gpu"}}', "GPU"),
            Q(f'gpu_temperature_celsius{{{GPU}, sensor="memory"}}', "memory"),
            Q(f'gpu_temperature_threshold_celsius{{{GPU}, threshold="slowdown"}}', "slowdown"),
            Q(f'gpu_temperature_threshold_celsius{{{GPU}, threshold="shutdown"}}', "shutdown"),
        ], Steps(GREEN), Layout(8))))
    b = b.with_panel(graph(Common(
        "PCIe link width and generation against max",
        "Current PCIe link width and generation beside the maximum the GPU supports. An "
        "idle GPU downshifts its link to save power (often to Gen1): judge the link only "
        "while the GPU is busy.",
        "none", [
            Q(f"gpu_pcie_link_width{{{GPU}}}", "width"),
            Q(f"gpu_pcie_link_width_max{{{GPU}}}", "width max"),
            Q(f"gpu_pcie_link_generation{{{GPU}}}", "generation"),
            Q(f"gpu_pcie_link_generation_max{{{GPU}}}", "generation max"),
        ], Steps(GREEN), Layout(8), min=0)))
    b = b.with_panel(graph(Common(
        "PCIe traffic",
        "Bytes per second over the GPU's PCIe link, host to device (rx) and device to host "
        "(tx), from NVML's PCIe byte counters.",
        "Bps", [Q(f"rate(gpu_pcie_bytes_total{{{GPU}}}[$__rate_interval])", "{{direction}}")],
        Steps(GREEN), Layout(8), min=0)))
    b = b.with_panel(graph(Common(
        "PCIe replays and AER errors",
        "PCIe replays (the GPU resent a packet) and the kernel's AER error counts, per "
        "second. Any steady rate points at a marginal riser, cable or slot.",
        "cps", [
            Q(f"rate(gpu_pcie_replays_total{{{GPU}}}[$__rate_interval])", "replays"),
            Q(f"rate(gpu_pcie_aer_errors_total{{{GPU}}}[$__rate_interval])", "AER {{severity}}"),
        ], Steps(GREEN, ((0.001, ORANGE), (1, RED))), Layout(8), min=0)))
    b = b.with_panel(graph(Common(
        "ECC errors and row remapping",
        "Volatile ECC error counts since the last driver load, rows remapped, and whether "
        "a remap is pending (reset needed) or failed (RMA). Any uncorrectable error pages.",
        "short", [
            Q(f'gpu_ecc_errors_total{{{GPU}, scope="volatile"}}', "ECC {{type}}"),
            Q(f"gpu_remapped_rows_total{{{GPU}}}", "remapped rows {{type}}"),
            Q(f"gpu_row_remap_pending{{{GPU}}}", "remap pending"),
            Q(f"gpu_row_remap_failed{{{GPU}}}", "remap failed"),
        ], Steps(GREEN, ((1, RED),)), Layout(8), min=0)))
    b = b.with_panel(single(Common(
        "Xid errors in the time range",
        "Xid errors the driver reported for this GPU in the dashboard's time range: all codes "
        "(from gpu_xid_errors_all_total, which starts at 0, so the first Xid counts) and each "
        "code seen. Hardware/driver Xids page on-call ("
        + ", ".join(str(x) for x in d.hardware_xids) + "); application Xids go to "
        "the job's owner (" + ", ".join(str(x) for x in d.application_xids) + "). "
        "The runbook's Xid tables say what each means.",
        "short", [
            # All codes from the total that starts at 0; then each code. A code's
            # series appears at its first Xid, at 1, which increase() cannot see:
            # it counts from 0 where it did not exist at the range's start.
            Q(f'label_replace(sum(increase(gpu_xid_errors_all_total{{{GPU}}}[$__range])), '
              f'"xid", "all codes", "", "") '
              f"or sum by (xid) (clamp_min(gpu_xid_errors_total{{{GPU}}} - "
              f"(gpu_xid_errors_total{{{GPU}}} offset $__range "
              f"or gpu_xid_errors_total{{{GPU}}} * 0), 0)) > 0", "Xid {{xid}}", instant=True),
        ],
        Steps(GREEN, ((1, RED),)), Layout(8)), text=True))

    b = b.with_row(row("Processes"))
    b = b.with_panel(grid(Common(
        "GPU processes",
        "Every process with a context on the selected GPUs: its GPU memory and SM share, "
        "the CPU it burns and how long it waits on the CPU run queue per second. A process "
        "holding memory with no SM share and no CPU is stalled; high run-queue wait means "
        "CPU contention.",
        "short", [
            # Without the exporter pod's namespace/pod/container (Prometheus
            # Operator target labels), so each row merges with its owner's (E).
            Q(without_pod_labels(f"gpu_process_memory_used_bytes{{{GPU}}}"),
              instant=True, table=True),
            Q(without_pod_labels(f"gpu_process_sm_utilization_ratio{{{GPU}}}"),
              instant=True, table=True),
            Q(without_pod_labels(
                f"rate(gpu_process_cpu_seconds_total{{{GPU}}}[$__rate_interval])"),
              instant=True, table=True),
            Q(without_pod_labels(
                f"rate(gpu_process_run_queue_wait_seconds_total{{{GPU}}}[$__rate_interval])"),
              instant=True, table=True),
            Q(owners.with_owner(f"gpu_process_info{{{GPU}}}",
                                f"{GPU_KEY}, gpu_instance, compute_instance"),
              instant=True, table=True),
        ], Steps(GREEN, ((d.run_queue_wait_high, ORANGE),)), Layout(24, 9)),
        columns={"gpu": "GPU", "pid": "PID", "comm": "process",
                 "namespace": "namespace", "pod": "pod", "container": "container",
                 "slurm_job_id": "Slurm job",
                 "Value #A": "GPU memory", "Value #B": "SM", "Value #C": "CPU (cores)",
                 "Value #D": "run-queue wait (s/s)"},
        units={"Value #A": "bytes", "Value #B": "percentunit", "Value #C": "short",
               "Value #D": "short"},
        hide=("Time", "__name__", "job", "instance", "uuid", "gpu_instance",
              "compute_instance", "Value #E", "type", "container_id", "pod_uid")))

    b = b.with_panel(grid(Common(
        "Energy by workload in the time range", ENERGY_HELP,
        "joule", [Q(f"sum by (gpu, owner, split) ({joules(GPU)})", instant=True, table=True)],
        Steps(GREEN), Layout(24, 7)),
        columns={"gpu": "GPU", "owner": "owner", "split": "split", "Value": "energy"},
        units={"Value": "joule"}, hide=("Time",)))

    b = b.with_row(row("Host beside GPU idle time"))
    b = b.with_panel(graph(Common(
        "GPU idle time",
        "Share of time each selected GPU ran no kernel (1 - the rate of its busy time). "
        "Read it against the host panels: idle GPUs while the host waits on I/O, CPU or "
        "swap point at the input pipeline.",
        "percentunit", [Q(f"1 - rate(gpu_busy_seconds_total{{{GPU}}}[$__rate_interval])",
                          "GPU {{gpu}}")],
        Steps(GREEN, ((0.5, ORANGE), (1 - d.idle_utilization, RED))), Layout(6), 0, 1),
        thresholds_line=True))
    b = b.with_panel(graph(Common(
        "Host CPU iowait",
        "Share of CPU time spent waiting on I/O over each interval (rates of the CPU time "
        "counters). High iowait while GPUs idle: the data pipeline waits on storage.",
        "percentunit", [Q(f"rate(gpu_host_cpu_iowait_seconds_total{{{NODE}}}[$__rate_interval])"
                          f" / rate(gpu_host_cpu_seconds_total{{{NODE}}}[$__rate_interval])",
                          "iowait")],
        Steps(GREEN, ((d.iowait_high, ORANGE),)), Layout(6), 0, 1), thresholds_line=True))
    b = b.with_panel(graph(Common(
        "Host pressure (PSI)",
        "Linux pressure stall information: the share of each interval in which some or all "
        "tasks stalled on CPU, memory or I/O (rate of the stall time counters).",
        "percentunit", [Q(f"rate(gpu_host_pressure_stalled_seconds_total{{{NODE}}}"
                          "[$__rate_interval])", "{{resource}} {{kind}}")],
        Steps(GREEN, ((d.io_pressure_high, ORANGE),)), Layout(6), 0, 1), thresholds_line=True))
    b = b.with_panel(graph(Common(
        "Host swap",
        "Swap in use and pages swapped in and out per second. Any steady swap traffic on a "
        "training node stalls the data loaders.",
        "bytes", [
            Q(f"gpu_host_swap_used_bytes{{{NODE}}}", "swap used"),
            Q(f"rate(gpu_host_swap_bytes_total{{{NODE}}}[$__rate_interval])",
              "swap {{direction}} per second"),
        ], Steps(GREEN, ((d.swap_bytes_per_s, ORANGE),)), Layout(6), min=0))
        # The swap traffic is a rate: bytes per second, not bytes.
        .override_by_query("B", [dm.DynamicConfigValue(id_val="unit", value="Bps")]))
    return b.build()


def fleet_dashboard(config: AlertConfig) -> dm.Dashboard:
    # The label filters every query below carries (cluster label as configured).
    f = Filters.of(config)
    FLEET, FLEET_GPU, GPU_KEY = f.node, f.gpu, f.gpu_key
    owners = Owners(FLEET_GPU, GPU_KEY, f.cluster)
    s = config.fleet.straggler
    d = config.diagnosis
    node_link = db.DashboardLink("GPU node").type(dm.DashboardLinkType.LINK) \
        .url(f"/d/{config.node_dashboard_uid}/{config.node_dashboard_uid}") \
        .include_vars(True).keep_time(True)
    b = _dashboard(config.fleet_dashboard_uid, "GPU fleet",
                   "Every GPU node at once: GPUs by state, which nodes and which jobs, "
                   "throttled GPUs, downtrained links, stragglers and driver versions.") \
        .variables(variables(config, multi_instance=True, namespace=True)).link(node_link)

    b = b.with_row(row("State"))
    state_colors = {"critical": RED, "warning": ORANGE, "info": BLUE, "idle": "text",
                    "ok": GREEN}
    panel = bars(Common(
        "GPUs by state",
        "GPUs by their worst active diagnosis: critical, warning, info, or none (ok when "
        "working, idle when not). From the recording rule instance:gpu_health_state:count.",
        "short", [Q(f"sum by (state) (instance:gpu_health_state:count{{{FLEET}}})", "{{state}}",
                    instant=True)],
        Steps(GREEN), Layout(8, 7), min=0))
    for state, color in state_colors.items():
        panel = panel.override_by_name(state, [dm.DynamicConfigValue(
            id_val="color", value={"mode": "fixed", "fixedColor": color})])
    b = b.with_panel(panel)
    b = b.with_panel(single(Common(
        "GPUs",
        "GPUs the exporters enumerate on the selected nodes.",
        "short", [Q(f"sum(instance:gpu_info:count{{{FLEET}}})", "GPUs", instant=True)],
        Steps(BLUE), Layout(4, 7))))
    b = b.with_panel(single(Common(
        "Throttled GPUs",
        "Busy GPUs held back by their clocks (diagnosis rows throttled_under_load and "
        f"clocks_capped: {THROTTLE_CAUSES}).",
        "short", [Q(f'count(gpu_diagnosis_active{{{FLEET_GPU}, '
                    f'symptom=~"{THROTTLE_MATCH}"}} == 1) or vector(0)',
                    "throttled", instant=True)],
        Steps(GREEN, ((1, ORANGE),)), Layout(4, 7))))
    b = b.with_panel(single(Common(
        "Downtrained links",
        "Busy GPUs whose PCIe link trained below its maximum width or generation.",
        "short", [Q(f'count(gpu_diagnosis_active{{{FLEET_GPU}, symptom="pcie_downtrained"}} '
                    f"== 1) or vector(0)", "downtrained", instant=True)],
        Steps(GREEN, ((1, ORANGE),)), Layout(4, 7))))
    b = b.with_panel(single(Common(
        "Stragglers",
        f"GPUs whose utilization is below {s.below_ratio:.0%} of their siblings' average "
        f"while the siblings are busy (above {s.siblings_busy:.0%}).",
        "short", [Q(f"count(gpu:gpu_utilization_ratio:straggler{{{FLEET_GPU}}}) or vector(0)",
                    "stragglers", instant=True)],
        Steps(GREEN, ((1, ORANGE),)), Layout(4, 7))))

    # Which nodes, in which cluster: every selected node with its GPUs, how
    # many have an active diagnosis, and its average utilization.
    by_node = f"{f.cluster}, instance"
    b = b.with_row(row("Nodes"))
    b = b.with_panel(grid(Common(
        "Nodes by cluster",
        "Every selected node, by cluster: the GPUs it reports, how many of them have an "
        "active diagnosis (critical, warning or info), and its average GPU utilization.",
        "short", [
            Q(f"sum by ({by_node}) (instance:gpu_info:count{{{FLEET}}})",
              instant=True, table=True),
            Q(f"sum by ({by_node}) (instance:gpu_health_state:count{{{FLEET}, "
              f'state=~"critical|warning|info"}})\n'
              f"or sum by ({by_node}) (instance:gpu_info:count{{{FLEET}}}) * 0",
              instant=True, table=True),
            Q(f"max by ({by_node}) (instance:gpu_utilization_ratio:avg{{{FLEET}}})",
              instant=True, table=True),
        ], Steps(GREEN, ((1, ORANGE),)), Layout(24, 8)),
        columns={f.cluster: "cluster", "instance": "node", "Value #A": "GPUs",
                 "Value #B": "GPUs with a diagnosis", "Value #C": "utilization"},
        units={"Value #C": "percentunit"}))

    # Which jobs: each workload holding GPUs (a pod's container, a Slurm job),
    # worst first.
    gpus, util, diagnoses = owners.per_workload(
        f"rate(gpu_busy_seconds_total{{{FLEET_GPU}}}[$__rate_interval])", JOBS_SHOWN)
    b = b.with_panel(grid(Common(
        "Which jobs",
        f"The {JOBS_SHOWN} workloads worst off on the selected nodes, by cluster: each "
        "Kubernetes container (namespace, pod, container, from gpu_allocation_info) or Slurm "
        "job (gpu_job_info) holding GPUs, how many GPUs it holds, their mean utilization "
        "(the rate of busy time) and how many diagnoses are active on them; most diagnoses "
        f"first, then the least busy. Under All, the GPUs no one holds are one row ({BY_NOBODY}) "
        "per cluster; a chosen namespace shows its pods only.",
        "short", [Q(gpus, instant=True, table=True), Q(util, instant=True, table=True),
                  Q(diagnoses, instant=True, table=True)],
        Steps(GREEN, ((1, ORANGE),)), Layout(24, 9)),
        columns={f.cluster: "cluster", HELD_BY: "held by", "namespace": "namespace",
                 "pod": "pod", "container": "container", "slurm_job_id": "Slurm job",
                 "Value #A": "GPUs", "Value #B": "utilization", "Value #C": "diagnoses"},
        units={"Value #B": "percentunit"}, sort_by="diagnoses"))

    # Energy per owner: pods (owners "namespace/pod/container") follow the
    # namespace choice; Slurm jobs, pods known by UID, unsplit and unowned GPUs
    # show under All only.
    by_owner = f"{f.cluster}, owner, split"
    in_namespace = joules(FLEET_GPU + ', owner=~"($namespace)/.+"')
    not_a_pod = joules(FLEET_GPU + ', owner!~".+/.+"')
    pods = f"sum by ({by_owner}) ({in_namespace})"
    rest = f"sum by ({by_owner}) ({not_a_pod})"
    b = b.with_panel(grid(Common(
        "Energy by workload",
        f"The {JOBS_SHOWN} workloads that used the most energy on the selected nodes. "
        + ENERGY_HELP + " A chosen namespace shows its pods only.",
        "joule", [Q(f"topk({JOBS_SHOWN}, {pods}\nor {owners.only_under_all(rest)})",
                    instant=True, table=True)],
        Steps(GREEN), Layout(24, 8)),
        columns={f.cluster: "cluster", "owner": "owner", "split": "split", "Value": "energy"},
        units={"Value": "joule"}, hide=("Time",), sort_by="energy"))

    b = b.with_row(row("Which GPUs"))
    b = b.with_panel(grid(Common(
        "Throttled GPUs",
        "Each throttled GPU and the cause the exporter blames "
        f"({THROTTLE_CAUSES}), with whose GPU it is; the namespace choice applies.",
        "short", [Q(owners.with_owner(f'gpu_diagnosis_active{{{FLEET_GPU}, '
                                      f'symptom=~"{THROTTLE_MATCH}"}} == 1', chosen=True),
                    instant=True, table=True)],
        Steps(GREEN, ((1, ORANGE),)), Layout(8, 8)),
        columns={f.cluster: "cluster", "instance": "node", "gpu": "GPU", "cause": "cause",
                 "namespace": "namespace", "pod": "pod", "container": "container",
                 "slurm_job_id": "Slurm job"},
        hide=("Time", "Value", "__name__", "job", "uuid", "symptom")))
    down = f'(gpu_diagnosis_active{{{FLEET_GPU}, symptom="pcie_downtrained"}} == 1)'
    b = b.with_panel(grid(Common(
        "Downtrained links",
        "Each busy GPU whose PCIe link runs below its maximum: width and generation now "
        "against what the GPU supports.",
        "none", [
            Q(f"gpu_pcie_link_width{{{FLEET_GPU}}} and on ({GPU_KEY}) {down}",
              instant=True, table=True),
            Q(f"gpu_pcie_link_width_max{{{FLEET_GPU}}} and on ({GPU_KEY}) {down}",
              instant=True, table=True),
            Q(f"gpu_pcie_link_generation{{{FLEET_GPU}}} and on ({GPU_KEY}) {down}",
              instant=True, table=True),
            Q(f"gpu_pcie_link_generation_max{{{FLEET_GPU}}} and on ({GPU_KEY}) {down}",
              instant=True, table=True),
        ], Steps(GREEN), Layout(8, 8)),
        columns={f.cluster: "cluster", "instance": "node", "gpu": "GPU", "Value #A": "width",
                 "Value #B": "width max", "Value #C": "generation",
                 "Value #D": "generation max"},
        hide=("Time", "__name__", "job", "uuid")))
    b = b.with_panel(grid(Common(
        "Stragglers",
        "Each straggler GPU: its utilization against the average of its siblings on the "
        "same node.",
        "percentunit", [
            Q(f"gpu:gpu_utilization_ratio:straggler{{{FLEET_GPU}}}", instant=True, table=True),
            Q(f"gpu:gpu_utilization_ratio:siblings_avg{{{FLEET_GPU}}} and on ({GPU_KEY}) "
              f"gpu:gpu_utilization_ratio:straggler{{{FLEET_GPU}}}", instant=True, table=True),
        ], Steps(RED, ((s.siblings_busy * s.below_ratio, ORANGE), (s.siblings_busy, GREEN))),
        Layout(8, 8)),
        columns={f.cluster: "cluster", "instance": "node", "gpu": "GPU",
                 "Value #A": "utilization",
                 "Value #B": "siblings' average"},
        hide=("Time", "__name__", "job", "uuid")))

    b = _jobs_over_nodes(b, config, f)

    b = b.with_row(row("Fleet"))
    b = b.with_panel(grid(Common(
        "Driver versions",
        "GPUs per NVIDIA driver version on the selected nodes. More than one version is "
        "drift (alert GpuDriverVersionDrift names the odd nodes).",
        "short", [Q(f"count by ({f.cluster}, driver_version) (gpu_info{{{FLEET}}})",
                    instant=True, table=True)],
        Steps(GREEN), Layout(6, 8)),
        columns={f.cluster: "cluster", "driver_version": "driver", "Value": "GPUs"},
        hide=("Time",)))
    b = b.with_panel(graph(Common(
        "Utilization by node",
        "Average GPU utilization of each node.",
        "percentunit", [Q(f"instance:gpu_utilization_ratio:avg{{{FLEET}}}",
                           f"{{{{{f.cluster}}}}} {{{{instance}}}}")],
        Steps(RED, ((d.idle_utilization, ORANGE), (d.busy_utilization, GREEN))),
        Layout(10, 8), 0, 1), thresholds_line=True))
    b = b.with_panel(grid(Common(
        "Active diagnoses by row",
        "GPUs per symptom → cause row of the diagnosis table and cluster, over the selected "
        "nodes and the GPUs the namespace choice shows (All: every GPU).",
        "short", [Q(f"count by ({f.cluster}, symptom, cause) (\n"
                    + owners.shown(f"gpu_diagnosis_active{{{FLEET_GPU}}} == 1") + "\n)",
                    instant=True, table=True)],
        Steps(GREEN, ((1, ORANGE),)), Layout(8, 8)),
        columns={f.cluster: "cluster", "symptom": "symptom", "cause": "cause", "Value": "GPUs"},
        hide=("Time",)))
    return b.build()


# The fleet's panels on jobs spread over nodes: they show data only where a
# job holds GPUs on several nodes (tests/mixin/test_fleet_jobs.py runs them).
JOBS_OVER_NODES = "Jobs over nodes"
JOB_STRAGGLER_NODES = "Straggler nodes of jobs"
JOB_PANELS = (JOBS_OVER_NODES, JOB_STRAGGLER_NODES)


def _jobs_over_nodes(b: db.Dashboard, config: AlertConfig, f: Filters) -> db.Dashboard:
    """Each job over nodes with each node's share of it, and the nodes that
    straggle (GpuJobStragglerNode's)."""
    js = config.fleet.job_straggler
    # The node-level records only, so every selector carries the dashboard's
    # filters: the job's median is a node's share less its deviation from it.
    node_in_job = f"{f.cluster}, owner, instance, job"
    nodes = f"{JOB_NODE_RECORD}{{{f.node}}}"
    deviation = f"{JOB_DEVIATION_RECORD}{{{f.node}}}"
    median = f"{nodes} - {deviation}"
    in_a_job = f"{nodes} and on ({node_in_job}) {deviation}"
    columns = {f.cluster: "cluster", "owner": "owner", "instance": "node",
               "Value #A": "node's utilization", "Value #B": "job's median node"}
    hide = ("Time", "__name__", "job")
    # Orange below the busy gate (a job's median node there has no straggler).
    colours = Steps(ORANGE, ((js.job_busy, GREEN),))
    b = b.with_row(row("Jobs over nodes"))
    b = b.with_panel(grid(Common(
        JOBS_OVER_NODES,
        f"Each job holding GPUs on {js.min_nodes} nodes or more (one Slurm job id, or one "
        "pod owner, on every node): each node's share of the job, the mean utilization "
        "of the job's GPUs on it, beside the job's median node. A node far below its "
        "job's median slows every other node of a synchronous job.",
        "percentunit", [
            Q(in_a_job, instant=True, table=True),
            Q(median, instant=True, table=True),
        ], colours, Layout(14, 9)),
        columns=columns, units={"Value #A": "percentunit", "Value #B": "percentunit"},
        hide=hide))
    straggler = f"{JOB_STRAGGLER_RECORD}{{{f.node}}}"
    return b.with_panel(grid(Common(
        JOB_STRAGGLER_NODES,
        "The node of each job over nodes whose share is far below the job's median node "
        f"(by more than {js.mad_multiplier:.15g} times the median absolute deviation of "
        f"the job's nodes, and by at least {js.min_gap:.0%}, while the median node is busier "
        f"than {js.job_busy:.0%}): alert GpuJobStragglerNode. The node's own exporter "
        "(its node dashboard, gpu-exporter diagnose) says why.",
        "percentunit", [
            Q(straggler, instant=True, table=True),
            Q(f"{median}\nand on ({node_in_job}) {straggler}", instant=True, table=True),
        ], colours, Layout(10, 9)),
        columns=columns, units={"Value #A": "percentunit", "Value #B": "percentunit"},
        hide=hide))
