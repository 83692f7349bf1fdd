"""The simulator's inputs, validated: device profiles (what a GPU model is and
what it cannot do) and scenarios (a node of such GPUs and a timeline of
conditions on them).

Units in these files are the ones people read on ``nvidia-smi``: MiB, MHz, W,
degrees C and ratios 0-1. The simulator converts them to NVML's units (bytes, mW,
mJ, KB/s, percent) at its C boundary, exactly where a real driver would.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from gpu_exporter.nvml.constants import REASON_BITS
from gpu_exporter.nvml.errors import Return
from gpu_exporter.settings.config_types import Duration
from gpu_exporter.settings.sections import Parse, Section, setting
from gpu_exporter.simulator.drivers import BY_NAME, NEWEST, DriverBranch
from gpu_exporter.simulator.tenants import Tenants


class _MutableSection(Section):
    """No unknown key (as every section); not frozen: a test may change a
    loaded scenario's condition in place (unchecked)."""

    frozen = False


def _check_error_name(name: Any) -> Any:
    # Before the type's check: a value that is no text is refused by it.
    if isinstance(name, str) and name not in Return.__members__:
        raise ValueError(f"unknown NVML error {name!r}; known: " +
                         ", ".join(n for n in Return.__members__ if n != "SUCCESS"))
    return name


# An NVML error as Return names it: NOT_SUPPORTED.
ErrorName = Annotated[str, Parse(_check_error_name)]


def _known_reasons(what: str) -> Any:
    def check(v: list[str] | None) -> list[str] | None:
        for r in v or []:
            if r not in REASON_BITS:
                raise ValueError(f"unknown {what} reason {r!r}; known: {', '.join(REASON_BITS)}")
        return v
    return check


class Clocks(_MutableSection):
    sm: int
    graphics: int
    memory: int


class MigProfile(_MutableSection):
    """One GPU instance profile of a board, as nvmlDeviceGetGpuInstanceProfileInfoV
    describes it (``nvidia-smi mig -lgip`` prints the same table)."""

    profile: int = setting(ge=0, le=0x11)  # the NVML_GPU_INSTANCE_PROFILE_* it is asked by
    id: int = setting(ge=0)  # the profile ID its GPU instances carry (nvmlGpuInstanceGetInfo)
    name: str  # as NVML names it: "MIG 1g.10gb"
    slices: int = setting(gt=0)
    instances: int = setting(gt=0)
    multiprocessors: int = setting(gt=0)
    copy_engines: int = setting(ge=0)
    decoders: int = setting(0, ge=0)
    encoders: int = setting(0, ge=0)
    jpegs: int = setting(0, ge=0)
    ofas: int = setting(0, ge=0)
    memory_mib: int = setting(gt=0)  # memorySizeMB


class MigInstance(_MutableSection):
    """One MIG GPU instance with one compute instance. What NVML offers per
    instance: its memory (nvmlDeviceGetMemoryInfo on the MIG device) and, on
    boards with GPM (Hopper and newer), its activity (nvmlGpmMigSampleGet); a
    MIG device answers nvmlDeviceGetUtilizationRates NOT_SUPPORTED."""

    gpu_instance: int = setting(ge=0, le=64)
    # The GPU instance's profile ID; None: the board's one-slice profile. An ID
    # the board's table lacks is answered as such (a driver newer than the table).
    profile_id: int | None = setting(None, ge=0)
    compute_instance: int = setting(0, ge=0, le=64)
    memory_total_mib: int = setting(gt=0)
    memory_used_ratio: float = setting(0.0, ge=0, le=1)
    sm_active: float = setting(0.0, ge=0, le=1)
    # The instance's other GPM ratios; unset, they follow its SM activity in the
    # proportions of a well-fed GPU (occupancy 0.5/0.85, tensor 0.6/0.85 and
    # DRAM 0.45/0.85 of it), as the GPU's own do.
    sm_occupancy: float | None = setting(None, ge=0, le=1)
    tensor_active: float | None = setting(None, ge=0, le=1)
    dram_active: float | None = setting(None, ge=0, le=1)


class FanCondition(_MutableSection):
    """One fan as nvmlDeviceGetFanSpeed_v2 reports it: the speed the driver
    drives it at, in percent of its maximum noise-tolerance speed (it may
    exceed 100 %). ``stopped``: the fan does not turn (seized, unplugged, its
    tachometer reads 0), so the call answers 0 % however hot the GPU is, and the
    board's remaining fans carry its share of the heat. ``error``: the call
    answers this NVML error for the fan (nvidia-smi prints "ERR!")."""

    speed_ratio: float | None = setting(None, ge=0, le=2)  # None: the fan curve (load)
    stopped: bool = False
    error: ErrorName | None = None


class XidCondition(_MutableSection):
    """An Xid with the process the driver names for it in the kernel log
    ("NVRM: Xid (PCI:...): 13, pid=4242, name=python, ..."); NVML's event
    carries the code only."""

    code: int = setting(ge=0, le=1023)
    pid: int | None = setting(None, gt=0, lt=4194304)
    # The NVLink an Xid 74's line names ("NVLink: fatal error detected on link 14").
    link: int | None = setting(None, ge=0, le=63)


class Thresholds(_MutableSection):
    shutdown: int
    slowdown: int
    max_operating: int
    memory_max: int = 0


class DeviceProfile(_MutableSection):
    """One GPU model as NVML describes it."""

    key: str = ""
    name: str
    brand: int = 2
    architecture: int
    compute_capability: tuple[int, int]
    memory_total_mib: int
    memory_reserved_mib: int
    power_default_limit_w: float
    power_min_limit_w: float
    power_max_limit_w: float
    power_idle_w: float
    clocks_max_mhz: Clocks
    clocks_idle_mhz: Clocks
    clocks_application_mhz: Clocks
    temperature_thresholds_c: Thresholds
    temperature_idle_c: float = 32.0
    temperature_load_rise_c: float = 38.0
    memory_temperature_offset_c: float | None = 6.0  # None: no memory sensor
    # nvmlDeviceGetThermalSettings's sensors besides the GPU die's: "board"
    # (NVML_THERMAL_TARGET_BOARD, the board's ambient temperature) where the
    # board has that sensor. None of the built-in boards is known to.
    board_temperature_sensor: bool = False
    pcie_max_generation: int
    pcie_max_width: int
    pcie_idle_generation: int = 1
    fans: int = 0
    pstate_idle: int = 0
    vbios_version: str
    serial_base: int = 1650000000000
    # The nine classic reasons; newer drivers add board_limit and reliability.
    supported_clock_reasons: list[str] = setting(
        default_factory=lambda: [r for r in REASON_BITS if r not in ("board_limit", "reliability")],
        check=_known_reasons("clock"))
    # C functions (and field ids) this model answers NOT_SUPPORTED for.
    unsupported_calls: list[str] = setting(default_factory=list)
    unsupported_fields: list[int] = setting(default_factory=list)
    ecc: bool = True
    gpm: bool = False  # GPU Performance Monitoring (Hopper and newer)
    # Whether nvmlDeviceGetSamples fills the SM/memory clock buffers; an H100
    # (driver 580.159.04) answers NOT_FOUND for them, always.
    clock_samples: bool = True
    nvlinks: int = setting(0, ge=0, le=36)
    mig: bool = False
    # The board's GPU instance profiles, as its driver lists them.
    mig_profiles: list[MigProfile] = setting(default_factory=list)
    # Registers with an NVSwitch fabric (HGX/NVL systems): answers
    # nvmlDeviceGetGpuFabricInfoV; other boards answer NOT_SUPPORTED.
    fabric: bool = False
    # A Grace superchip's GPU (GH200, GB200): its NVLink chip-to-chip (C2C)
    # link to the CPU is on (nvmlDeviceGetC2cModeInfoV) and it answers the
    # C2C error fields; other boards answer NOT_SUPPORTED for both.
    c2c: bool = False
    # nvmlEventType* bits the board supports (Xid 0x8, ECC 0x1/0x2, power source
    # 0x80; the newer health types 0x200-0x8000 where its driver branch has them,
    # simulator/drivers.py EVENT_TYPE_SINCE)
    event_types: int = 0x8B


HealthEvent = Literal["ecc_single_bit", "ecc_double_bit", "power_source_change",
                      "ecc_single_bit_storm", "dram_retirement", "dram_retirement_failure",
                      "poison_non_fatal", "poison_fatal", "gpu_unavailable", "recovery_action"]


class GpuCondition(_MutableSection):
    """What is true of a GPU from some moment on. Every field is optional: a
    timeline step changes only what it names; unset values are derived from
    the load and the profile as a real GPU's would be."""

    utilization: float | None = setting(None, ge=0, le=1)
    memory_utilization: float | None = setting(None, ge=0, le=1)
    memory_used_ratio: float | None = setting(None, ge=0, le=1)
    temperature_c: float | None = None
    power_w: float | None = setting(None, ge=0)
    power_limit_w: float | None = setting(None, gt=0)
    throttle_reasons: list[str] | None = setting(None, check=_known_reasons("throttle"))
    sm_clock_mhz: int | None = setting(None, gt=0)
    application_sm_clock_mhz: int | None = setting(None, gt=0)
    pcie_link_generation: int | None = setting(None, ge=1, le=6)
    pcie_link_width: int | None = setting(None, ge=1, le=32)
    pcie_replays_per_s: float | None = setting(None, ge=0)
    pcie_tx_bytes_per_s: float | None = setting(None, ge=0)
    pcie_rx_bytes_per_s: float | None = setting(None, ge=0)
    ecc_enabled: bool | None = None
    ecc_corrected_volatile: int | None = setting(None, ge=0)
    ecc_uncorrected_volatile: int | None = setting(None, ge=0)
    remapped_rows_correctable: int | None = setting(None, ge=0)
    remapped_rows_uncorrectable: int | None = setting(None, ge=0)
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    persistence_mode: bool | None = None
    fan_ratio: float | None = setting(None, ge=0, le=2)
    # Fan by fan (board order); a list shorter than the board's fans leaves the
    # rest on the fan curve. Overrides fan_ratio for the fans it names.
    fans: list[FanCondition] | None = None
    # The air at the board's inlet: the GPU's own temperature rises with it
    # (one for one above the 25 C the profiles' figures assume), and a board
    # with a board sensor reports it there.
    inlet_temperature_c: float | None = setting(None, ge=-20, le=70)
    lost: bool | None = None
    # GPM activity ratios; unset ones follow the utilization as on a well-fed GPU.
    sm_active: float | None = setting(None, ge=0, le=1)
    sm_occupancy: float | None = setting(None, ge=0, le=1)
    tensor_active: float | None = setting(None, ge=0, le=1)
    dram_active: float | None = setting(None, ge=0, le=1)
    # Sub-second behaviour: with a period, utilization is a square wave between
    # 0 and 100 % whose duty cycle is ``utilization`` (bursty input).
    burst_period_s: float | None = setting(None, gt=0, le=10)
    nvlink_down: list[int] | None = None
    nvlink_crc_errors_per_s: float | None = setting(None, ge=0)
    nvlink_replay_errors_per_s: float | None = setting(None, ge=0)
    nvlink_recovery_errors_per_s: float | None = setting(None, ge=0)
    # NVLink 5 (Blackwell boards): errors FEC could not correct, and symbol
    # errors it corrected, per second on each erring link.
    nvlink_effective_errors_per_s: float | None = setting(None, ge=0)
    nvlink_symbol_errors_per_s: float | None = setting(None, ge=0)
    # The links the error rates above climb on (unset: every link that is up).
    nvlink_error_links: list[int] | None = None
    nvlink_bytes_per_s: float | None = setting(None, ge=0)  # per link and direction
    # Replays on a Grace board's C2C link to its CPU (ignored on other boards).
    c2c_replay_errors_per_s: float | None = setting(None, ge=0)
    mig_instances: list[MigInstance] | None = None
    # Xid errors the driver reports for this GPU at the step's time (events,
    # not state: each is delivered once): a code, or a code with the process
    # the driver names for it.
    xid: list[int | XidCondition] | None = None
    # Other health events the driver reports for this GPU at the step's time
    # (nvmlEventType names as gpu_events_total counts them; each delivered once,
    # where the board and its branch offer the type).
    nvml_events: list[HealthEvent] | None = None
    # The kernel's side of the GPU (sysfs): NUMA placement, the upstream
    # bridge/switch port's link, AER error rates.
    numa_node: int | None = setting(None, ge=0)
    upstream_link_generation: int | None = setting(None, ge=1, le=6)
    upstream_link_width: int | None = setting(None, ge=1, le=32)
    aer_correctable_per_s: float | None = setting(None, ge=0)
    aer_nonfatal_per_s: float | None = setting(None, ge=0)
    aer_fatal_per_s: float | None = setting(None, ge=0)
    # The driver's recovery action for the GPU (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION);
    # unset: none.
    recovery_action: Literal["none", "gpu_reset", "node_reboot", "drain_p2p",
                             "drain_and_reset"] | None = None
    # The GPU's registration with the NVSwitch fabric (boards with ``fabric``):
    # the probe's state, its error status once completed, the health summary.
    fabric_state: Literal["not_started", "in_progress", "completed"] | None = None
    fabric_status: ErrorName | None = None
    fabric_health: Literal["healthy", "unhealthy", "limited_capacity"] | None = None
    # Fault injection: C function name -> NVML error it returns from now on.
    errors: dict[str, ErrorName] | None = None
    # C function name -> seconds each call blocks before answering (a sick GPU).
    hangs: dict[str, float] | None = None


class PressureCondition(_MutableSection):
    """Linux PSI avg10 ratios for one resource."""

    some: float = setting(0.0, ge=0, le=1)
    full: float = setting(0.0, ge=0, le=1)


# The PortCounters the simulated HCAs keep (simulator/nicfs.py COUNTER_BITS).
PortCounter = Literal["symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                      "port_xmit_discards", "local_link_integrity_errors",
                      "excessive_buffer_overrun_errors", "port_xmit_wait"]


class RdmaNic(_MutableSection):
    """An RDMA device of the host (a ConnectX HCA, one port), simulator/nicfs.py."""

    name: str = setting(pattern=r"^mlx5_[0-9]{1,2}$")
    netdev: str | None = setting(None, pattern=r"^[a-z][a-z0-9]{1,14}$")
    # Behind this GPU's PCIe switch (PIX to it); None: on a host bridge of its
    # own on ``numa_node``.
    beside_gpu: int | None = setting(None, ge=0, le=63)
    numa_node: int = setting(0, ge=0, le=63)
    state: Literal["ACTIVE", "DOWN", "INIT", "ARMED"] = "ACTIVE"
    rate_gbps: float = setting(400.0, gt=0, le=3200)
    link_layer: Literal["InfiniBand", "Ethernet"] = "InfiniBand"
    # PortCounters' values at the start, and how fast each climbs (per second);
    # each stops at the top of its field (symbol_error 65535).
    counters: dict[PortCounter, int] = setting(default_factory=dict)
    errors_per_s: dict[PortCounter, float] = setting(
            default_factory=dict)


class HostCondition(_MutableSection):
    """The host around the GPUs. Like GpuCondition, a timeline step changes only
    the fields it names. Rates are per second; ratios 0-1."""

    cpus: int | None = setting(None, ge=1, le=4096)
    numa_nodes: int | None = setting(None, ge=1, le=64)
    cpu_busy_ratio: float | None = setting(None, ge=0, le=1)  # user+system share of all CPUs
    iowait_ratio: float | None = setting(None, ge=0, le=1)
    steal_ratio: float | None = setting(None, ge=0, le=1)
    pressure_cpu: PressureCondition | None = None
    pressure_memory: PressureCondition | None = None
    pressure_io: PressureCondition | None = None
    # False: a kernel without PSI (no /proc/pressure, no cgroup *.pressure files)
    psi_available: bool | None = None
    schedstat_available: bool | None = None  # False: no /proc/PID/schedstat
    # Whether the kernel does per-task delay accounting (kernel.task_delayacct,
    # off by default since Linux 5.14): /proc/PID/stat's delayacct_blkio_ticks
    # counts only then.
    delay_accounting: bool | None = None
    memory_total_bytes: int | None = setting(None, gt=0)
    memory_available_ratio: float | None = setting(None, ge=0, le=1)
    # Share of the memory in total that stops being available each second (a
    # leak, a cache without a bound), from the start of the scenario.
    memory_available_drop_ratio_per_s: float | None = setting(None, ge=0, le=1)
    swap_total_bytes: int | None = setting(None, ge=0)
    swap_used_ratio: float | None = setting(None, ge=0, le=1)
    swap_in_bytes_per_s: float | None = setting(None, ge=0)
    swap_out_bytes_per_s: float | None = setting(None, ge=0)
    load1: float | None = setting(None, ge=0)
    context_switches_per_s: float | None = setting(None, ge=0)
    # block device name -> busy ratio (share of time with I/O in flight)
    disks: dict[str, float] | None = None
    # interface name -> receive drops per second / receive errors per second
    net_rx_drops_per_s: dict[str, float] | None = None
    net_rx_errors_per_s: dict[str, float] | None = None
    # The CPUs' thermal throttle counters (/sys/devices/system/cpu/cpu*/
    # thermal_throttle): False for CPUs that keep none (AMD, Arm, most VMs);
    # throttle events per second on each core and each package, and the share
    # of time each core spends throttled (*_throttle_total_time_ms).
    cpu_thermal_counters: bool | None = None
    cpu_thermal_throttles_per_s: float | None = setting(None, ge=0)
    cpu_thermal_throttled_ratio: float | None = setting(None, ge=0, le=1)
    # The RDMA devices (None: one 400 Gb/s HCA behind each of the first eight
    # GPUs' switches, as on an HGX board; []: none, a node without RDMA).
    rdma: list[RdmaNic] | None = None
    # /proc/uptime when the scenario starts (it grows with the scenario's
    # time; read from the scenario's host only, a timeline step does not
    # reboot), and /proc/sys/kernel/random/boot_id: another id is another boot.
    uptime_s: float | None = setting(None, ge=0, le=10 * 365 * 86400)
    boot_id: str | None = setting(
        None, pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class ProcessCondition(_MutableSection):
    """A process on the host; with ``gpus`` it holds a context on those GPUs."""

    pid: int = setting(gt=1, lt=4194304)
    comm: str = setting(min_length=1, max_length=15)
    ppid: int = 1
    gpus: list[int] = setting(default_factory=list)
    type: Literal["compute", "graphics"] = "compute"
    gpu_memory_ratio: float = setting(0.0, ge=0, le=1)  # share of each GPU's memory it holds
    # Share of each GPU's memory it adds per second from the scenario's start
    # (a leak, a cache without bound), up to all of it.
    gpu_memory_growth_ratio_per_s: float = setting(0.0, ge=0, le=1)
    sm_utilization: float | None = setting(None, ge=0, le=1)  # None: no samples from NVML
    cpu_ratio: float = setting(0.0, ge=0)  # CPUs' worth of time it burns (1.5 = 1.5 cores)
    # R running or runnable, S asleep until an event, D blocked in the kernel
    # (uninterruptible: waiting for I/O), Z, T, I. A timeline step that lists the
    # process again with another state changes it from then on; its counters
    # (CPU time, switches, schedstat) go on from where they were.
    state: Literal["R", "S", "D", "Z", "T", "I"] = "S"
    threads: int = setting(1, ge=1)
    rss_bytes: int = setting(512 * 1024 * 1024, ge=0)
    run_queue_wait_ratio: float = setting(0.0, ge=0)  # waiting-to-run time per wall second
    # How often it gives up the CPU to wait (each wake-up from sleep is one):
    # a process asleep for good does not wake at all. Not given: a thousand
    # wake-ups per CPU's worth of time it burns (a millisecond on the CPU per
    # wake-up, as a server answering small requests runs): a process runs only
    # by waking, and one that burns no CPU time never woke.
    voluntary_ctxt_switches_per_s: float | None = setting(None, ge=0)
    nonvoluntary_ctxt_switches_per_s: float = setting(0.0, ge=0)
    # a cpulist like "0-31,64-95"; None: its workload's cpuset, else the GPU's local CPUs
    cpus_allowed: str | None = None
    # Seconds of block I/O delay per second (delayacct_blkio_ticks, counted only
    # with the host's delay_accounting); None: all of its time while in D, else none.
    blkio_delay_ratio: float | None = setting(None, ge=0, le=1)
    cgroup: str = "0::/user.slice"
    # The user it runs as (/proc/PID/status's Uid); None: its tenant's (the
    # Slurm job's user, the container's run_as_uid), else 1000.
    uid: int | None = setting(None, ge=0, lt=2**32)
    # MIG placement when the GPU is split: (gpu_instance, compute_instance).
    mig: tuple[int, int] | None = None
    exits_at: Duration | None = None  # the process ends at this time

    def _check(self) -> None:
        if self.voluntary_ctxt_switches_per_s is None:
            # Derived, not given: kept out of the fields given.
            self.__dict__["voluntary_ctxt_switches_per_s"] = \
                WAKEUPS_PER_CPU_SECOND * self.cpu_ratio

    @property
    def wakeups_per_s(self) -> float:
        """Its voluntary context switches per second, given or derived."""
        rate = self.voluntary_ctxt_switches_per_s
        return WAKEUPS_PER_CPU_SECOND * self.cpu_ratio if rate is None else rate


# Wake-ups a process that gives no rate makes per second of CPU time it burns.
WAKEUPS_PER_CPU_SECOND = 1000.0

GpuSelector = Literal["all"] | list[int]

# NVML as a whole, from some moment on: "ok", or the error every call (init
# included) returns. "lib_rm_version_mismatch" is a driver upgraded underneath a
# running process: the loaded library no longer matches the kernel module.
NvmlCondition = Literal["ok", "driver_not_loaded", "no_permission", "lib_rm_version_mismatch"]


class Step(_MutableSection):
    at: Duration = setting(0.0, ge=0)
    gpus: GpuSelector = "all"
    set: GpuCondition = GpuCondition()
    host: HostCondition | None = None
    # When given, replaces the whole process list from this moment on.
    processes: list[ProcessCondition] | None = None
    # When given, NVML as a whole from this moment on (node-level fault).
    nvml: NvmlCondition | None = None


def _known_branch(v: str | None) -> str | None:
    if v is not None and v not in BY_NAME:
        raise ValueError(f"unknown driver branch {v!r}; known: {', '.join(BY_NAME)}")
    return v


class Node(_MutableSection):
    # Which simulated machine this is: GPU UUIDs derive from it, so scenarios of
    # the same node (healthy, then with a fault) show the same GPUs.
    id: str = "sim-node-01"
    gpus: int = setting(8, ge=0, le=64)
    # A built-in profile's name, a profile file, or the profile itself (recordings).
    profile: str | dict[str, Any] = "h100-sxm5-80gb"
    driver_version: str = "580.159.04"
    cuda_driver_version: int = 13000
    # The driver branch whose NVML this node answers with (simulator/drivers.py):
    # the C symbols it exports, the field ids and struct versions it knows.
    # Unset: the newest branch. Setting it also sets driver_version and
    # cuda_driver_version to the branch's unless the scenario names them.
    driver: str | None = setting(None, check=_known_branch)
    # NVML as a whole: "ok", or the error nvmlInit returns ("library_missing"
    # makes the library itself absent).
    nvml: Literal["ok", "library_missing", "driver_not_loaded", "no_permission",
                  "lib_rm_version_mismatch"] = "ok"
    # Each GPU's device minor (/dev/nvidia<minor>, in the driver's /proc files),
    # by NVML index; unset: the same as the index. The driver numbers minors in
    # probe order, NVML its indices in PCI order: they need not agree.
    device_minors: list[int] | None = None
    # Whose /proc, /sys and kernel log the exporter reads: the simulated
    # node's ("simulated"), or this machine's as the exporter's flags say
    # ("real": only NVML is simulated, its processes are this machine's PIDs;
    # the real-kernel tests run the daemon so, in a container-like sandbox).
    host: Literal["simulated", "real"] = "simulated"

    def _check(self) -> None:
        if self.driver is not None:
            # The branch's versions, where the scenario names none (derived:
            # kept out of the fields given).
            branch = BY_NAME[self.driver]
            if "driver_version" not in self.model_fields_set:
                self.__dict__["driver_version"] = branch.driver_version
            if "cuda_driver_version" not in self.model_fields_set:
                self.__dict__["cuda_driver_version"] = branch.cuda_driver_version
        minors = self.device_minors
        if minors is not None and (len(minors) != self.gpus or len(set(minors)) != len(minors)
                                   or min(minors, default=0) < 0):
            raise ValueError("device_minors: one distinct minor per GPU")

    @property
    def branch(self) -> DriverBranch:
        return NEWEST if self.driver is None else BY_NAME[self.driver]


class Expectation(_MutableSection):
    """A finding the scenario is built to produce (the tests hold it to that)."""

    gpu: int = setting(ge=0)
    symptom: str
    cause: str


class ReplayPoll(_MutableSection):
    t: float = setting(ge=0)
    # GPU index -> what each NVML call answered at this poll (NVML units); only
    # what changed since the previous poll.
    gpus: dict[int, dict[str, Any]] = setting(default_factory=dict)


class Replay(_MutableSection):
    """What a recorded node answered, poll by poll (``gpu-exporter record``)."""

    polls: list[ReplayPoll] = setting(min_length=1)
    events: list[dict[str, Any]] = setting(default_factory=list)


class KernelLogLine(_MutableSection):
    """Lines the kernel log has besides the Xids NVML delivers (those are
    logged by themselves): ``at`` seconds from the scenario's start, negative
    for before the exporter started (at boot: ``-86400``). Either a raw
    ``message`` as the kernel prints it (``{bus}`` is GPU ``gpu``'s bus id as
    the driver writes it, ``0000:18:00``), or an Xid (``xid``, ``gpu`` and the
    process the driver names: ``pid``, ``name``; an Xid 74's NVLink: ``link``)
    in the driver's format; NVML
    never delivers these. ``repeat`` logs it that many times, 1 ms apart (a
    flood); ``facility`` 1 is a line user space wrote to /dev/kmsg."""

    at: float = setting(0.0, ge=-86400.0)
    message: str | None = setting(None, max_length=1000)
    gpu: int | None = setting(None, ge=0)
    xid: int | None = setting(None, ge=0, le=1023)
    pid: int | None = setting(None, gt=0, lt=4194304)
    name: str = setting("", max_length=64)
    detail: str = setting("", max_length=200)
    link: int | None = setting(None, ge=0, le=63)
    repeat: int = setting(1, ge=1, le=1_000_000)
    facility: int = setting(0, ge=0, le=23)

    def _check(self) -> None:
        if (self.message is None) == (self.xid is None):
            raise ValueError("give either message or xid")
        if self.xid is not None and self.gpu is None:
            raise ValueError("an xid line needs its gpu")


class KernelLog(_MutableSection):
    """The node's kernel log (/dev/kmsg) beyond the driver's own Xid lines.
    ``lost``: records the ring buffer overwrote before the first one left."""

    lines: list[KernelLogLine] = setting(default_factory=list)
    lost: int = setting(0, ge=0)


class Scenario(_MutableSection):
    name: str
    description: str = ""
    node: Node = Node()
    # Starting condition of every GPU, then per-GPU overrides, then the timeline.
    state: GpuCondition = GpuCondition()
    gpus: dict[int, GpuCondition] = setting(default_factory=dict)
    host: HostCondition = HostCondition()
    processes: list[ProcessCondition] = setting(default_factory=list)
    timeline: list[Step] = setting(default_factory=list)
    noise: bool = True
    # Jitter on every rate and ratio the node reports (host, processes,
    # workloads' cgroups, the GPUs' utilization, power and PCIe traffic): each
    # is scaled by a factor drawn anew every second within 1 +- jitter,
    # repeatably for a given seed. 0: the values exactly as set.
    jitter: float = setting(0.0, ge=0, le=0.5)
    seed: int = setting(0, ge=0)
    # What the diagnosis must find, and nothing else; None: not declared.
    expect: list[Expectation] | None = None
    replay: Replay | None = None
    # Who runs on the node: pods the simulated kubelet serves, Slurm jobs, and
    # each workload's own cgroup signals (its processes are in ``processes``).
    tenants: Tenants | None = None
    # The kernel log's lines besides the driver's Xids (simulator/kmsg.py).
    kernel_log: KernelLog = KernelLog()

    def _check(self) -> None:
        if self.node.nvml == "library_missing":
            for k, step in enumerate(self.timeline):
                if step.nvml is not None:
                    raise ValueError(f"timeline[{k}].nvml: the library is missing for the whole "
                                     "run (node.nvml library_missing); use driver_not_loaded "
                                     "for an NVML that comes back")
        n = self.node.gpus
        for k, line in enumerate(self.kernel_log.lines):
            if line.gpu is not None and not 0 <= line.gpu < n:
                raise ValueError(f"kernel_log.lines[{k}].gpu: index {line.gpu} is outside "
                                 f"0..{n - 1}")
        for i in self.gpus:
            if not 0 <= i < n:
                raise ValueError(f"gpus: index {i} is outside 0..{n - 1}")
        for k, step in enumerate(self.timeline):
            if step.gpus != "all":
                for i in step.gpus:
                    if not 0 <= i < n:
                        raise ValueError(f"timeline[{k}].gpus: index {i} is outside 0..{n - 1}")
        lists = [("processes", self.processes)] + [
            (f"timeline[{k}].processes", s.processes) for k, s in enumerate(self.timeline)
            if s.processes is not None]
        for where, procs in lists:
            seen: set[int] = set()
            for proc in procs:
                if proc.pid in seen:
                    raise ValueError(f"{where}: pid {proc.pid} appears twice")
                seen.add(proc.pid)
                for i in proc.gpus:
                    if not 0 <= i < n:
                        raise ValueError(f"{where}: pid {proc.pid} uses GPU {i}, outside "
                                         f"0..{n - 1}")
