"""Thresholds and windows of the diagnosis rules, with the defaults an
experienced SRE would start from. Set under ``diagnosis:`` in the config file
(e.g. ``diagnosis: {window: 1m, iowait_high: 0.3}``)."""

from __future__ import annotations

from typing import Annotated

from gpu_exporter.facts.xids import XidTier, codes
from gpu_exporter.settings.config_types import Duration, Flag
from gpu_exporter.settings.sections import Section, setting


class DiagnosisConfig(Section):
    enabled: Annotated[bool, Flag()] = setting(
        True, description="Judge the symptom -> cause table every poll (gpu_diagnosis_active, "
        "/diagnosis and the node page's findings); off, the exporter only reads")
    window: Duration = setting(
        30.0, ge=0, description="How long a row's condition must hold before the row turns on")
    clear_after: Duration = setting(
        30.0, ge=0, description="How long a row's condition must stay clear before the row "
        "turns off (no flapping)")
    hold_ratio: float = setting(
        0.9, gt=0, le=1, description="Share of the polls within the window at which the "
        "condition must hold (tolerates one odd poll)")

    memory_held_ratio: float = setting(
        0.5, gt=0, le=1, description="GPU memory used above this share counts as held")
    idle_utilization: float = setting(
        0.10, ge=0, le=1, description="GPU utilization below this counts as idle")
    # A GPU kept busy at least this share of the time is fed: a starved one
    # idles more (docs/diagnosis.md, "Judged at every load at which it can exist").
    busy_utilization: float = setting(
        0.75, ge=0, le=1, description="GPU utilization below this, with memory held, counts "
        "as under-fed; at or above it, as busy")
    iowait_high: float = setting(
        0.20, ge=0, le=1, description="Host iowait at or above this counts as waiting on I/O")
    io_pressure_high: float = setting(
        0.20, ge=0, le=1, description="I/O pressure (PSI some, the job's own or the host's) at "
        "or above this counts as waiting on I/O")
    cpu_pressure_high: float = setting(
        0.30, ge=0, le=1, description="CPU pressure (PSI some, the job's own or the host's) at "
        "or above this counts as CPU contention")
    run_queue_wait_high: float = setting(
        0.30, ge=0, description="Seconds per second a GPU process waits on the run queue at or "
        "above which it waits for a CPU")
    swap_bytes_per_s: float = setting(
        1024 * 1024, ge=0, description="Swap-in plus swap-out, in bytes per second, at or above "
        "which the host counts as swapping")
    memory_pressure_full: float = setting(
        0.0, ge=0, le=1, description="Memory pressure (PSI full) above which the host counts "
        "as swapping")
    stalled_cpu_ratio: float = setting(
        0.05, ge=0, description="CPUs' worth of time below which a sleeping or blocked GPU "
        "process counts as stalled")
    # A pod left idle burns a few hundredths of a CPU; a job computing on the
    # CPU keeps at least one busy (PyTorch and NumPy use every core they get).
    allocated_cpu_busy_cores: float = setting(
        1.0, gt=0, description="CPUs' worth of time at or above which the pod of an allocated "
        "GPU with no process on any GPU counts as running its code on the CPU")
    stalled_wakeups_per_s: float = setting(
        3.0, ge=0, description="Wake-ups per second (voluntary context switches) at or above "
        "which an asleep GPU process waits for work (an idle server), not on something that "
        "never comes")
    cpu_throttled_high: float = setting(
        0.25, ge=0, le=1, description="Share of its CPU-limit periods in which a workload was "
        "throttled, at or above which its limit starves it")
    memory_limit_used_ratio: float = setting(
        0.95, gt=0, le=1, description="A workload using this share of its memory limit "
        "(memory.max) or more is at its limit")
    io_limit_used_ratio: float = setting(
        0.9, gt=0, le=1, description="A workload whose reads or writes on a device move this "
        "share of its io.max limit there (bytes or I/Os per second) or more runs at its "
        "I/O limit")
    reclaim_bytes_per_s: float = setting(
        1024 * 1024, ge=0, description="Bytes per second the kernel reclaims from a workload "
        "at its memory limit at or above which the limit starves it (or any hit of the limit)")
    steal_high: float = setting(
        0.15, ge=0, le=1, description="Share of CPU time the hypervisor takes (steal) at or "
        "above which a VM's CPUs starve the GPU's feeders")
    power_cap_draw_ratio: float = setting(
        0.90, gt=0, le=1, description="A power cap binds while the GPU draws this share of "
        "its limit or more")
    fan_stopped_ratio: float = setting(
        0.01, ge=0, le=1, description="A fan at or under this speed has stopped")
    fan_spinning_ratio: float = setting(
        0.10, ge=0, le=1, description="A fan at or above this speed spins: beside it, a "
        "stopped fan of the same board is a fault")
    fan_warm_margin_celsius: float = setting(
        30.0, ge=0, description="A stopped fan is a fault while the GPU is within this of its "
        "slowdown temperature (consumer boards stop their fans on purpose only while cool)")
    burst_low: float = setting(
        0.10, ge=0, le=1, description="Sub-second utilization samples at or below this count "
        "as the low of a burst")
    burst_high: float = setting(
        0.90, ge=0, le=1, description="Sub-second utilization samples at or above this count "
        "as the high of a burst")
    thermal_margin_celsius: float = setting(
        3.0, ge=0, description="A busy GPU this close to its own slowdown threshold counts as "
        "throttled by heat")
    clock_below_max_ratio: float = setting(
        0.95, gt=0, le=1, description="An SM clock below this share of its maximum, or a power "
        "limit below this share of the board's default, counts as capped")
    pcie_errors_per_window: float = setting(
        1.0, ge=0, description="PCIe replays or AER correctable errors within the window at "
        "or above which the link counts as failing")
    # NVIDIA's DCGM health check fails a link at 100 CRC errors per second
    # ("CRC errors only matter at rates of 100+ per second") and at any replay
    # or recovery error: these are its limits.
    nvlink_crc_errors_per_s: float = setting(
        100.0, ge=0, description="CRC errors per second on one NVLink link, over the window, "
        "at or above which the link counts as failing (below that the link's replays absorb "
        "them at little cost; NVIDIA's DCGM health check fails a link at the same rate)")
    nvlink_replays_per_window: float = setting(
        1.0, ge=0, description="NVLink replay or recovery errors on one link within the "
        "window at or above which the link counts as failing (each is traffic resent or a "
        "link retrained; DCGM fails a link on any)")
    c2c_errors_per_window: float = setting(
        1.0, ge=0, description="Errors (error interrupts, replays, back-to-back replays) on "
        "the GPU's C2C link to its Grace CPU within the window at or above which the link "
        "counts as failing (an on-board link that is sound reports none)")
    # A sound link can count a stray symbol error now and then: the default
    # asks for more than a few within the window.
    rdma_errors_per_window: float = setting(
        10.0, ge=0, description="Symbol errors, link-downed events, link error recoveries, "
        "local link integrity and receive errors on one port of the GPU's nearest RDMA "
        "device within the window at or above which the port counts as failing")
    memory_near_full_ratio: float = setting(
        0.95, gt=0, le=1, description="GPU memory used above this share counts as near full")
    memory_full_within: Duration = setting(
        3600.0, gt=0, description="GPU memory that grows steadily over the window and, at "
        "that rate, fills what processes can allocate within this long counts as filling")
    host_memory_full_within: Duration = setting(
        3600.0, gt=0, description="Host memory in use that grows steadily over the window "
        "and, at that rate, leaves none available (MemAvailable) within this long counts as "
        "running out")
    memory_bound_dram_active: float = setting(
        0.70, gt=0, le=1, description="GPM's DRAM bandwidth use at or above which, on a GPU "
        "whose SMs are active and whose tensor pipes are not, its work counts as memory-bound")
    cpu_thermal_throttled_ratio: float = setting(
        0.01, gt=0, le=1, description="Share of the window the host's cores spent throttled "
        "for heat (where the kernel counts the time) at or above which the CPUs count as "
        "throttled")
    inflated_utilization: float = setting(
        0.80, ge=0, le=1, description="NVML utilization above this, with GPM's SM activity "
        "below inflated_sm_active, counts as inflated")
    inflated_sm_active: float = setting(
        0.30, ge=0, le=1, description="GPM's SM activity below which a high NVML utilization "
        "counts as inflated")
    # xids.py is the table these default to.
    hardware_xids: tuple[int, ...] = setting(
        codes("hardware"), description="Xids that page on-call and the hardware team")
    application_xids: tuple[int, ...] = setting(
        codes("application"), description="Xids that tell the job's owner (a warning)")
    informational_xids: tuple[int, ...] = setting(
        codes("informational"), description="Xids for dashboards only; a code in no list "
        "is informational")
    xid_hold: Duration = setting(
        900.0, ge=0, description="How long an Xid keeps its row on")
    # PCIe links train, and Fabric Manager brings the NVSwitch fabric up,
    # during the first minutes after boot: judged then, a link still training
    # would page someone for nothing.
    boot_grace: Duration = setting(
        300.0, ge=0, description="How long after the node boots the PCIe, NVLink "
        "and C2C link rows and the NVSwitch fabric row wait before they judge (links and the "
        "fabric still train while the node boots); read from /proc/uptime")
    expect_persistence: bool = setting(
        True, description="Report a GPU whose persistence mode is off")
    # Short dips keep the explanation; a cause that has stopped no longer
    # explains what persists.
    explained_within: Duration = setting(
        10.0, ge=0, description="A cause explains another row's signals (swapping -> iowait) "
        "only while its own condition held within this long")

    def _check(self) -> None:
        """An Xid is in one tier at most."""
        seen: dict[int, str] = {}
        for tier in ("hardware", "application", "informational"):
            for code in getattr(self, f"{tier}_xids"):
                if code in seen and seen[code] != tier:
                    raise ValueError(f"Xid {code} is in both {seen[code]}_xids and "
                                     f"{tier}_xids")
                seen[code] = tier

    def xid_tier(self, code: int) -> XidTier:
        """The tier this configuration puts ``code`` in (unknown: informational)."""
        if code in self.hardware_xids:
            return "hardware"
        if code in self.application_xids:
            return "application"
        return "informational"

    def prose(self) -> dict[str, str]:
        """Every setting as the table's prose quotes it: ratios as percent,
        durations in s/min, the Xid list spelled out."""
        out: dict[str, str] = {}
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if name in _DURATIONS:
                out[name] = _duration(float(value))
            elif name.endswith("_xids"):
                out[name] = ", ".join(str(x) for x in value)
            elif name in ("swap_bytes_per_s", "reclaim_bytes_per_s"):
                out[name] = f"{value / 2**20:g} MiB/s"
            elif name.endswith("_celsius"):
                out[name] = f"{value:g} °C"
            elif name == "run_queue_wait_high":
                out[name] = f"{value:g} s per second"
            elif name == "stalled_cpu_ratio":
                out[name] = f"{value * 100:g} %"
            elif isinstance(value, bool):
                out[name] = "yes" if value else "no"
            elif info.bounds.le == 1:
                out[name] = f"{value * 100:g} %"
            else:
                out[name] = f"{value:g}"
        return out


_DURATIONS = frozenset({"window", "clear_after", "xid_hold", "explained_within",
                        "boot_grace", "memory_full_within", "host_memory_full_within"})


def _duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
