"""Everything the exporter keeps from one poll to the next in a container of
its own (a dict, set, list or deque an object sets on itself, a function
cached for the process' life), with what bounds it and the test that holds
it; and the containers an object sets on itself that outlive no poll (or no
request), with why. One place: ``tests/test_bounds.py`` finds every such
container in gpu_exporter/ by walking its syntax and fails on one missing
here or listed here and gone from the code.

A bound is what the node has now (its GPUs, their links, the processes
listed this poll), a fixed table of the product, or a number in the code;
never what the node ever had. ``test_bounds.py::
test_nothing_kept_grows_with_processes_that_come_and_go`` walks every
container reachable from a running exporter after hundreds of polls of
processes (each PID once, each in a cgroup of its own) coming and going.
"""

from __future__ import annotations

from dataclasses import dataclass

# Not walked: the simulator and the one-shot commands (they run for one
# command, not for the life of a daemon), and the generated protobuf code.
SKIPPED_PACKAGES = {"simulator", "commands", "podresources_v1"}
# The calls that make a container.
CONTAINER_CALLS = {"dict", "set", "list", "deque", "Counter", "defaultdict", "OrderedDict"}


@dataclass(frozen=True)
class Kept:
    bound: str
    test: str  # file::function under tests/


CHURN = "test_bounds.py::test_nothing_kept_grows_with_processes_that_come_and_go"
FLOOD = "host/test_kernel_log.py::test_a_flood_of_duplicate_lines_costs_bounded_memory"
PER_GPU = "one entry per GPU (or MIG instance) NVML lists now"

KEPT: dict[str, Kept] = {
    # --- per GPU, per link, per row: what the node has now ---------------
    "gpu_exporter.collectors.attribution:AttributionCollector._minors":
        Kept("one per GPU bus id NVML lists", CHURN),
    "gpu_exporter.collectors.attribution:AttributionCollector._uuids":
        Kept(PER_GPU + " (rebuilt each poll)", CHURN),
    "gpu_exporter.collectors.attribution:AttributionCollector._cpu_before":
        Kept("the workload cgroups seen at the last poll (replaced each poll)", CHURN),
    "gpu_exporter.collectors.attribution:AttributionCollector._pod_cpu_before":
        Kept("the allocated pods with no GPU process read at the last poll (replaced "
             "each poll)", CHURN),
    "gpu_exporter.collectors.attribution:AttributionCollector._memory_before":
        Kept("the workload cgroups seen at the last poll (replaced each poll)", CHURN),
    "gpu_exporter.collectors.attribution:AttributionCollector._memory_seen":
        Kept("the workload cgroups seen this poll (replaced each poll)", CHURN),
    "gpu_exporter.collectors.attribution:AttributionCollector._io_before":
        Kept("the I/O-limited workload cgroups seen at the last poll (replaced each poll)",
             CHURN),
    "gpu_exporter.collectors.attribution:AttributionCollector._io_seen":
        Kept("the I/O-limited workload cgroups seen this poll (replaced each poll)", CHURN),
    "gpu_exporter.collectors.gpm:GpmCollector._pairs": Kept(PER_GPU, CHURN),
    "gpu_exporter.collectors.gpm:GpmCollector._active_s":
        Kept(PER_GPU + " x the GPM metrics", CHURN),
    "gpu_exporter.collectors.host:_Sources.absent": Kept("the host's source files", CHURN),
    "gpu_exporter.collectors.host:_Sources.failing": Kept("the host's source files", CHURN),
    "gpu_exporter.collectors.host:_Sources.warned": Kept("the host's series", CHURN),
    "gpu_exporter.collectors.host:_Sources.counters": Kept("the host's counter series", CHURN),
    "gpu_exporter.collectors.host:HostCollector._counted": Kept("the host's series", CHURN),
    "gpu_exporter.collectors.host:HostCollector._capped": Kept("the host's series", CHURN),
    "gpu_exporter.collectors.host:HostCollector._cpu_topology":
        Kept("the host's CPUs, at most host.thermal.MAX_CPUS", CHURN),
    "gpu_exporter.collectors.nvlink:NvlinkCollector._last":
        Kept("per GPU UUID listed: its links x counter fields", CHURN),
    "gpu_exporter.collectors.pcie:PcieCollector._warned": Kept("the GPUs' sysfs files", CHURN),
    "gpu_exporter.collectors.network:NetworkCollector._warned":
        Kept("the NICs' and ports' sysfs files (one per file said), at most MAX_WARNED",
             "collectors/test_network_collector.py::test_a_garbled_file_counts_one_error_and_warns_once"),
    "gpu_exporter.collectors.network:NetworkCollector._places": Kept(PER_GPU, CHURN),
    "gpu_exporter.host.nics:Places.found":
        Kept("one per NIC and RDMA device the node lists now (forgotten when the list "
             "changes)", "host/test_nics.py::"
             "test_places_kept_between_polls_follow_a_nic_that_comes_or_moves"),
    "gpu_exporter.host.nics:Places._entries":
        Kept("the two device directories' entries now", "host/test_nics.py::"
             "test_places_kept_between_polls_follow_a_nic_that_comes_or_moves"),
    "gpu_exporter.collectors.pcie:PcieCollector._placements":
        Kept("one per GPU bus id (cleared when the GPUs change)", CHURN),
    "gpu_exporter.collectors.samples:SamplesCollector._last_seen": Kept(PER_GPU, CHURN),
    "gpu_exporter.collectors.samples:SamplesCollector._held": Kept(PER_GPU, CHURN),
    "gpu_exporter.collectors.samples:SamplesCollector._busy_s": Kept(PER_GPU, CHURN),
    "gpu_exporter.collectors.samples:SamplesCollector._rate_at": Kept(PER_GPU, CHURN),
    "gpu_exporter.collectors.samples:SamplesCollector._said": Kept(PER_GPU, CHURN),
    "gpu_exporter.collectors.xid:XidCollector._xids":
        Kept("per GPU x Xid code, codes bounded by the driver log's MAX_KEYS", CHURN),
    "gpu_exporter.collectors.xid:XidCollector._totals": Kept(PER_GPU, CHURN),
    "gpu_exporter.collectors.xid:XidCollector._lost": Kept(PER_GPU, CHURN),
    "gpu_exporter.collectors.xid:XidCollector._exported": Kept(PER_GPU, CHURN),
    "gpu_exporter.collectors.xid:XidCollector._events":
        Kept(PER_GPU + " x NVML event types", CHURN),
    "gpu_exporter.collectors.xid:XidCollector.recent": Kept("the newest 256 events", CHURN),
    "gpu_exporter.collectors.xid:XidCollector._registered": Kept(PER_GPU, CHURN),
    "gpu_exporter.diagnosis.place:PollTimeline.times":
        Kept("the poll times within the window plus its slack", CHURN),
    "gpu_exporter.diagnosis.engine:Diagnosis._places": Kept(PER_GPU, CHURN),
    "gpu_exporter.diagnosis.place:PlaceState.states": Kept("the table's rows", CHURN),
    "gpu_exporter.diagnosis.place:PlaceState.standings": Kept("the table's groups of rows", CHURN),
    "gpu_exporter.diagnosis.place:PlaceState.kept_every_poll":
        Kept("its groups' counters kept every poll, made anew when a group is judged", CHURN),
    "gpu_exporter.diagnosis.counters:Counters._kept":
        Kept(PER_GPU + " x the counters the rules take increases of", CHURN),
    "gpu_exporter.diagnosis.counters:Counter.readings":
        Kept("the readings within the window", CHURN),
    "gpu_exporter.diagnosis.counters:Counters._last":
        Kept("one per name the rules take increases of", CHURN),
    "gpu_exporter.diagnosis.counters:Counters.read_as_series":
        Kept("the names the table's rules read as readings (a fixed few)", CHURN),
    "gpu_exporter.diagnosis.engine:Diagnosis._last_owners": Kept(PER_GPU, CHURN),
    "gpu_exporter.diagnosis.engine:Diagnosis._last_instances":
        Kept(PER_GPU + " split into MIG instances (dropped when it is read whole)", CHURN),
    "gpu_exporter.diagnosis.engine:Diagnosis._failing": Kept("the table's rules", CHURN),
    "gpu_exporter.diagnosis.engine:Diagnosis._row_at": Kept("the table's rows", CHURN),
    "gpu_exporter.diagnosis.coverage:Reasons._held":
        Kept(PER_GPU + " (a GPU gone is forgotten: Reasons.forget)", CHURN),
    "gpu_exporter.diagnosis.memory:FaultMemory._gpus":
        Kept("MAX_GPUS (64) GPUs, each MAX_FAULTS_PER_GPU (24) faults",
             "diagnosis/test_fault_memory.py::test_the_memory_and_its_file_stay_within_their_bounds"),
    "gpu_exporter.collectors.device:DeviceCollector._offers": Kept(PER_GPU, CHURN),
    "gpu_exporter.daemon.exporter:Exporter._reloads_ok":
        Kept("the two sources a reload reads (settings, web config)", CHURN),
    "gpu_exporter.nvml.gpu:MissingCapabilities._said": Kept("the capabilities read", CHURN),
    "gpu_exporter.nvml.gpu:MissingCapabilities._gpus":
        Kept("the capabilities read x the GPUs", CHURN),
    "gpu_exporter.nvml.gpu:MissingCapabilities._pending":
        Kept("the capabilities read (emptied each poll)", CHURN),
    "gpu_exporter.nvml.session:NvmlSession.timeouts": Kept(PER_GPU, CHURN),
    "gpu_exporter.nvml.session:NvmlSession._abandoned":
        Kept("one poll thread per hung GPU at most", CHURN),
    "gpu_exporter.nvml.session:NvmlSession._returned": Kept(PER_GPU, CHURN),
    "gpu_exporter.nvml.session:NvmlSession.gpus": Kept(PER_GPU, CHURN),
    "gpu_exporter.nvml.session:NvmlSession._began":
        Kept("the readers of the pipeline (emptied each poll)", CHURN),
    "gpu_exporter.nvml.values:FieldValues._asks":
        Kept(PER_GPU + " x the readers that ask fields", CHURN),
    "gpu_exporter.nvml.values:FieldValues._shared":
        Kept("64 distinct requests at most, then emptied", CHURN),
    "gpu_exporter.nvml.values:GpuReads._status":
        Kept("the readers' asks of the GPU (emptied each poll)", CHURN),
    "gpu_exporter.nvml.values:FieldValues._gpus":
        Kept(PER_GPU + " (made anew when NVML finds its GPUs)", CHURN),
    "gpu_exporter.nvml.values:GpuReads.slow":
        Kept("the values a GPU's readers read on a cadence", CHURN),
    "gpu_exporter.nvml.values:GpuReads.called":
        Kept("the calls the GPU's readers make (emptied each poll)", CHURN),
    "gpu_exporter.nvml.values:GpuReads.charged":
        Kept("the readers of the pipeline (emptied each poll)", CHURN),
    "gpu_exporter.collectors.device:DeviceCollector._lacks":
        Kept(PER_GPU + ": what its board lacks, and what that was worked out from", CHURN),
    "gpu_exporter.collectors.values:CounterMemory._gpus":
        Kept(PER_GPU + " x its counter series (emptied when NVML finds its GPUs anew)",
             CHURN),
    "gpu_exporter.daemon.poller:Poller.stages": Kept("the stages of the pipeline", CHURN),
    "gpu_exporter.daemon.poller:Poller._failing": Kept("the stages of the pipeline", CHURN),
    "gpu_exporter.daemon.poller:Poller._errors_total": Kept("the stages of the pipeline", CHURN),
    "gpu_exporter.daemon.poller:Poller.listeners": Kept("set at start", CHURN),
    "gpu_exporter.daemon.poller:Poller.before_poll": Kept("set at start", CHURN),
    "gpu_exporter.daemon.poller:Poller._build_labels": Kept("three build labels", CHURN),
    "gpu_exporter.history:History._gpus":
        Kept("GPU indexes below the history's bound",
             "test_history.py::test_gpu_indexes_beyond_the_bound_are_not_kept"),
    "gpu_exporter.history:History._last_seen":
        Kept("GPU indexes below the history's bound; a GPU gone a window is dropped",
             "test_history.py::test_a_gpu_not_read_has_gaps_and_one_gone_for_a_window_is_dropped"),
    # --- per process, per cgroup, per Xid line: pruned or capped ----------
    "gpu_exporter.collectors.processes:ProcessesCollector._last_seen_us": Kept(PER_GPU, CHURN),
    "gpu_exporter.collectors.processes:ProcessesCollector._sm":
        Kept(PER_GPU + ": the processes of its last sample read", CHURN),
    "gpu_exporter.collectors.processes:ProcessesCollector._prev":
        Kept("the processes exported at the last poll (replaced each poll)", CHURN),
    "gpu_exporter.collectors.processes:ProcessesCollector._dropped": Kept(PER_GPU, CHURN),
    "gpu_exporter.collectors.processes:ProcessesCollector._labels":
        Kept("the processes exported at the last poll (replaced each poll)", CHURN),
    "gpu_exporter.collectors.processes:ProcessesCollector._local_cpus": Kept(PER_GPU, CHURN),
    "gpu_exporter.collectors.processes:ProcessesCollector._listed":
        Kept(PER_GPU + ": its last process list", CHURN),
    "gpu_exporter.host.procs:ProcessReader._cgroups":
        Kept("the processes listed this poll (retain())", CHURN),
    "gpu_exporter.host.procs:ProcessReader._cpulists": Kept("_CPULISTS_MAX, then cleared",
                                                            CHURN),
    "gpu_exporter.host.kmsg:KmsgReader._ready":
        Kept("the records one read chunk (256 KiB) held beyond a read's limit",
             "host/test_kmsg_reader.py::test_what_one_chunk_held_beyond_a_limit_is_all_that_waits"),
    "gpu_exporter.collectors.kmsg:KmsgCollector._culprits":
        Kept("one per driver-log line kept (MAX_KEYS)",
             FLOOD),
    "gpu_exporter.host.driver_log:DriverLog.xids":
        Kept("MAX_KEYS, further keys counted in overflow",
             FLOOD),
    "gpu_exporter.host.driver_log:DriverLog.sxids":
        Kept("MAX_KEYS, further keys counted in overflow",
             FLOOD),
    "gpu_exporter.host.driver_log:DriverLog.totals":
        Kept("MAX_TOTALS", FLOOD),
    "gpu_exporter.host.driver_log:DriverLog.uuids":
        Kept("MAX_UUIDS", FLOOD),
    "gpu_exporter.host.driver_log:DriverLog._cache":
        Kept("_CACHE lines, then cleared",
             FLOOD),
    # --- the HTTP side: per request input, capped ------------------------
    "gpu_exporter.web.app:App.routes": Kept("set at start", CHURN),
    "gpu_exporter.web.app:App.links": Kept("set at start", CHURN),
    "gpu_exporter.web.app:App.landing_sections": Kept("set at start", CHURN),
    "gpu_exporter.web.doctor:NodePage._bodies": Kept("one body per view of the newest poll",
                                                     CHURN),
    "gpu_exporter.web.gate:BasicAuth._users": Kept("the web config file's users",
                                                   "web/test_web_gate.py::test_successes_are_remembered_up_to_the_cache_size"),
    "gpu_exporter.web.gate:BasicAuth._cache":
        Kept("_CACHE_SIZE, oldest first out",
             "web/test_web_gate.py::test_successes_are_remembered_up_to_the_cache_size"),
    "gpu_exporter.web.gate:BasicAuth._failed":
        Kept("_CACHE_SIZE, oldest first out",
             "web/test_web_gate.py::test_failures_are_remembered_up_to_the_cache_size"),
    "gpu_exporter.web.render:LabelCache._prefixes":
        Kept("its limit of prefixes, then cleared",
             "web/test_http.py::test_remembered_value_texts_stay_bounded_and_correct"),
    "gpu_exporter.web.render:FamilyTexts._texts":
        Kept("one per family and format",
             "web/test_http.py::test_remembered_value_texts_stay_bounded_and_correct"),
    "gpu_exporter.web.server:ExporterHTTPServer._open":
        Kept("--web.max-connections",
             "web/test_http.py::test_at_the_connection_limit_the_longest_idle_connection_makes_room"),
    "gpu_exporter.web.server:http_date": Kept("maxsize=1", CHURN),
    "gpu_exporter.collectors.nvlink:_shape":
        Kept("the subsets of the NVLink fields a board answers x the link counts", CHURN),
    "gpu_exporter.diagnosis.precedence:_index": Kept("one call: the fixed table", CHURN),
    "gpu_exporter.settings.sections:_shape": Kept(
        "one per type the sections declare (from the code, not from a file)", CHURN),
}

# Set on an object that lives one poll, one call or one file.
NOT_KEPT: dict[str, str] = {
    "gpu_exporter.attribution.gpu_owners:DeviceIndex._by_uuid": "built for one poll's lookup",
    "gpu_exporter.attribution.gpu_owners:DeviceIndex._by_index": "built for one poll's lookup",
    "gpu_exporter.attribution.gpu_owners:DeviceIndex._legacy": "built for one poll's lookup",
    "gpu_exporter.attribution.gpu_owners:DeviceIndex._by_minor": "built for one poll's lookup",
    "gpu_exporter.attribution.gpu_owners:DeviceIndex._by_profile": "built for one poll's lookup",
    "gpu_exporter.collectors.device:_GpuPass.values": "one GPU's pass of one poll",
    "gpu_exporter.collectors.device:_GpuPass._fresh": "one GPU's pass of one poll",
    "gpu_exporter.collectors.device:_GpuPass._due": "one GPU's pass of one poll",
    "gpu_exporter.diagnosis.coverage:_AbsentReads.absent": "one coverage report",
    "gpu_exporter.diagnosis.counters:Counters.consulted":
        "the increases one group of rules asked in one poll",
    "gpu_exporter.diagnosis.counters:Counters.node_consulted":
        "the node's counters one group of rules asked in one poll",
    "gpu_exporter.host.pci:_Reader.problems": "one read of a device's sysfs files",
    "gpu_exporter.host.nics:_Notes.problems": "one read of the NICs' and ports' sysfs files",
    "gpu_exporter.settings.safeyaml:_BoundedComposer._heights": "one file's load",
    "gpu_exporter.settings.safeyaml:_BoundedComposer._anchored": "one file's load",
    "gpu_exporter.settings.sections:_Problem.items": "one validation error",
    "gpu_exporter.poll.snapshot:SnapshotBuilder._families": "one poll's snapshot",
    "gpu_exporter.poll.snapshot:_Samples._formed": "one poll's snapshot, as its samples are read",
    "gpu_exporter.poll.snapshot:SnapshotBuilder._published": "one poll's snapshot",
}
