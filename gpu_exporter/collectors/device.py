"""NVML device metrics: identity, health, utilization, memory, temperatures,
power, energy, clocks, P-state, fans, throttle reasons, PCIe, ECC, row
remapping and persistence mode, per GPU.

Static facts (identity, limits, maxima, thresholds) are read once per GPU; a
capability NVML does not support is asked for once and its series stays absent.
A lost GPU exports ``gpu_up 0`` while the others keep reporting.
"""

from __future__ import annotations

import logging
from typing import Self

from gpu_exporter.cadence import SLOW_READ_EVERY_POLLS
from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.collectors.plausible import accept, accept_counter, accept_slow_counter
from gpu_exporter.config import Settings
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.errors import NvmlError
from gpu_exporter.nvml.session import Gpu, GpuGone, GpuHung, NvmlGone, NvmlSession
from gpu_exporter.readings import GpuReading
from gpu_exporter.runtime import Runtime
from gpu_exporter.snapshot import SnapshotBuilder

log = logging.getLogger(__name__)

# Memory temperature and the volatile ECC totals are read every poll, in one
# call (the ECC totals took two nvmlDeviceGetTotalEccErrors calls); the PCIe
# byte counters cost the driver 0.1-0.3 ms each on an H100 (the field's own
# latencyUsec), so they are slow reads like the other counters below.
# The per-reason throttle time counters ride in the same call: one
# nvmlDeviceGetFieldValues answers them all, and a counter read every poll
# lets rate() see every nanosecond a reason held, whatever the scrape interval.
_ECC_VOLATILE_FIELDS = {"corrected": c.FI_DEV_ECC_SBE_VOL_TOTAL,
                        "uncorrected": c.FI_DEV_ECC_DBE_VOL_TOTAL}
_FIELDS = (c.FI_DEV_MEMORY_TEMP, c.FI_DEV_GET_GPU_RECOVERY_ACTION, *c.THROTTLE_TIME_FIELDS,
           *_ECC_VOLATILE_FIELDS.values())
_NS = 1e-9
_PCIE_BYTE_FIELDS = (c.FI_DEV_PCIE_COUNT_TX_BYTES, c.FI_DEV_PCIE_COUNT_RX_BYTES)
_PCIE_DIRECTION = {c.FI_DEV_PCIE_COUNT_TX_BYTES: "tx", c.FI_DEV_PCIE_COUNT_RX_BYTES: "rx"}

# Facts that change rarely, and counters that are costly to read, are re-read
# every SLOW_READ_EVERY_POLLS polls (20 s at the default 2 s interval; see
# gpu_exporter/cadence.py) and exported from
# the last read in between: ECC mode (changes only across a reset), ECC
# aggregate counters and remapped rows (re-read at once when a volatile ECC
# counter moves, the event that retires rows), persistence mode and application
# clocks (changed by an administrator), and the energy, PCIe replay and PCIe
# byte counters. Measured on an H100 80GB HBM3 (driver 580.159.04), CPU per
# call: energy 3.8-4.2 ms (the field-value route costs the same), PCIe replay
# counter 0.15 ms, ECC mode 0.15 ms, application clock 0.9-1.3 ms, while
# utilization, power, clocks and throttle reasons cost 1-10 us; reading the
# counters every 10 polls instead of every poll takes most of a poll's CPU away
# and a rate() over them is unchanged. nvmlDeviceGetPcieThroughput (which
# blocks 20 ms) is never called: PCIe bytes come from the field-value counters.


# Reasons with a time counter the GPU answers for: their state gauge is detail
# (the counter's rate says when and how much they held, between scrapes too).
_COUNTED = {reason: fid for fid, reason in c.THROTTLE_TIME_FIELDS.items()}


class DeviceCollector(NvmlCollector):
    name = "device"
    description = ("NVML device metrics: utilization, memory, power, clocks, throttle reasons, "
                   "PCIe, ECC")
    settings = (lambda s: s.metrics.detail,)

    def __init__(self, session: NvmlSession, detail: bool = False) -> None:
        super().__init__(session)
        self.detail = detail

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        return cls(rt.session, rt.settings.metrics.detail)

    def reconfigure(self, settings: Settings) -> None:
        self.detail = settings.metrics.detail

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        readings: dict[int, GpuReading] = {}
        out.readings.gpus = readings
        if not self.session.ensure():
            return
        self.session.begin_poll()
        try:
            for gpu in self.session.gpus:
                readings[gpu.index] = self._collect_gpu(gpu, out)
        except NvmlGone as exc:
            # Nothing read this poll can be trusted; export no GPU series.
            self.session.mark_down(exc.error)
            readings.clear()
            out.discard(lambda name: name.startswith("gpu_") and
                        not name.startswith("gpu_exporter_"))

    def _collect_gpu(self, gpu: Gpu, out: SnapshotBuilder) -> GpuReading:
        if gpu.lost:
            self.session.try_recover(gpu)
        ident = gpu.identity
        labels = {"gpu": str(gpu.index), "uuid": ident.uuid}
        r = GpuReading(gpu.index, ident.uuid, up=False, name=ident.name,
                       pci_bus_id=ident.pci_bus_id,
                       driver_version=self.session.driver_version,
                       vbios_version=ident.vbios_version)
        out.add("gpu_info", 1, **labels, name=ident.name, pci_bus_id=ident.pci_bus_id,
                serial=ident.serial, driver_version=self.session.driver_version,
                vbios_version=ident.vbios_version,
                cuda_driver_version=self.session.cuda_driver_version,
                architecture=ident.architecture, compute_capability=ident.compute_capability)
        device = gpu.device
        if gpu.lost or gpu.hung or device is None:
            out.add("gpu_up", 0, **labels)
            return r
        # Read into a scratch builder so a GPU lost half-way contributes no
        # half-read values, only gpu_up 0.
        scratch = SnapshotBuilder(out.timestamp)
        gpu.errors = 0
        gpu.polls += 1
        try:
            self.session.run(gpu, lambda: _read_device(gpu, device, scratch, labels, r,
                                                       self.detail))
        except (GpuGone, GpuHung) as exc:
            if isinstance(exc, GpuGone):
                self.session.mark_lost(gpu, str(exc))
            out.add("gpu_up", 0, **labels)
            return GpuReading(gpu.index, ident.uuid, up=False, name=ident.name,
                              pci_bus_id=ident.pci_bus_id)
        self._errors += gpu.errors
        r.up = True
        out.merge(scratch)
        out.add("gpu_up", 1, **labels)
        return r


def _read_device(gpu: Gpu, d: Device, out: SnapshotBuilder, labels: dict[str, str],
                 r: GpuReading, detail: bool = False) -> None:
    # Every reading passes collectors/plausible.py before it is exported or
    # handed to the diagnosis: NVML's "not available" sentinels and impossible
    # values leave the series absent for this poll and count a read error.
    util = gpu.read("utilization", d.utilization)
    if util is not None:
        if accept(gpu, "gpu_utilization_ratio", util[0]):
            r.utilization = util[0]
            out.add("gpu_utilization_ratio", util[0], **labels)
        if accept(gpu, "gpu_memory_controller_utilization_ratio", util[1]):
            r.memory_utilization = util[1]
            out.add("gpu_memory_controller_utilization_ratio", util[1], **labels)

    mem = gpu.read("memory_v2", d.memory)
    if mem is None and "memory_v2" in gpu.unsupported:
        mem = gpu.read("memory_v1", d.memory_v1)
    if mem is not None and accept(gpu, "gpu_memory_total_bytes", mem[0]):
        total, reserved, used = mem
        r.memory_total_bytes = total
        out.add("gpu_memory_total_bytes", total, **labels)
        if accept(gpu, "gpu_memory_used_bytes", used, total):
            r.memory_used_bytes = used
            out.add("gpu_memory_used_bytes", used, **labels)
        if "memory_v2" not in gpu.unsupported and accept(gpu, "gpu_memory_reserved_bytes",
                                                         reserved, total):
            out.add("gpu_memory_reserved_bytes", reserved, **labels)

    temp = gpu.read("temperature", d.temperature)
    if temp is not None and accept(gpu, "gpu_temperature_celsius", temp, series=":gpu"):
        r.temperature_celsius = temp
        out.add("gpu_temperature_celsius", temp, **labels, sensor="gpu")
    for name, code in c.TEMPERATURE_THRESHOLDS.items():
        value = gpu.static_read(f"temperature_threshold_{name}", d.temperature_threshold, code)
        # NVML answers 0 for thresholds a board does not define.
        if value and accept(gpu, "gpu_temperature_threshold_celsius", value, series=":" + name):
            out.add("gpu_temperature_threshold_celsius", value, **labels, threshold=name)
            if name == "slowdown":
                r.slowdown_celsius = value

    fields = gpu.read("field_values", d.field_values, _FIELDS)
    if fields is not None:
        _add_fields(gpu, fields, out, labels, r)
    counters = gpu.slow_read("pcie_byte_fields", d.field_values, _PCIE_BYTE_FIELDS,
                             every=SLOW_READ_EVERY_POLLS)
    if counters is not None:
        _add_fields(gpu, counters, out, labels, r)

    # The limit first: power is held against it.
    limit = gpu.read("power_limit", d.power_limit_watts)
    if limit is not None and not accept(gpu, "gpu_power_limit_watts", limit):
        limit = None
    if limit is not None:
        r.power_limit_watts = limit
        out.add("gpu_power_limit_watts", limit, **labels)
    power = gpu.read("power_usage", d.power_watts)
    if power is not None and accept(gpu, "gpu_power_watts", power, limit):
        r.power_watts = power
        out.add("gpu_power_watts", power, **labels)
    default_limit = gpu.static_read("power_default_limit", d.power_default_limit_watts)
    if default_limit is not None and accept(gpu, "gpu_power_default_limit_watts",
                                            default_limit):
        r.power_default_limit_watts = default_limit
        out.add("gpu_power_default_limit_watts", default_limit, **labels)
    energy = gpu.slow_read("energy", d.energy_joules, every=SLOW_READ_EVERY_POLLS)
    if energy is not None and accept_slow_counter(gpu, "gpu_energy_joules_total", energy,
                                                  cache_key="energy"):
        out.add("gpu_energy_joules_total", energy, **labels)

    for name, code in c.CLOCK_TYPES.items():
        series = ":" + name
        # The graphics clock runs in step with the SM clock on the boards a
        # fleet runs (one clock domain): its series are detail, its reading
        # is kept either way.
        shown = detail or name != "graphics"
        # The maximum first: the clocks are held against it.
        top = gpu.static_read(f"clock_max_{name}", d.max_clock_hz, code)
        if top is not None and not accept(gpu, "gpu_clock_max_hertz", top, series=series):
            top = None
        if top is not None:
            r.clocks_max_hz[name] = top
            if shown:
                out.add("gpu_clock_max_hertz", top, **labels, clock=name)
        cur = gpu.read(f"clock_{name}", d.clock_hz, code)
        if cur is not None and accept(gpu, "gpu_clock_hertz", cur, top, series):
            r.clocks_hz[name] = cur
            if shown:
                out.add("gpu_clock_hertz", cur, **labels, clock=name)
        app = gpu.slow_read(f"clock_app_{name}", d.application_clock_hz, code,
                            every=SLOW_READ_EVERY_POLLS)
        if app is not None and accept(gpu, "gpu_clock_application_hertz", app, top, series):
            r.clocks_application_hz[name] = app
            out.add("gpu_clock_application_hertz", app, **labels, clock=name)
        default_app = gpu.static_read(f"clock_app_default_{name}",
                                      d.default_application_clock_hz, code)
        if default_app is not None and accept(gpu, "gpu_clock_application_default_hertz",
                                              default_app, series=series):
            r.clocks_application_default_hz[name] = default_app
            out.add("gpu_clock_application_default_hertz", default_app, **labels, clock=name)

    pstate = gpu.read("pstate", d.performance_state)
    # 32 is NVML_PSTATE_UNKNOWN: the driver says it does not know, not a fault.
    if pstate is not None and pstate != c.PSTATE_UNKNOWN and accept(
            gpu, "gpu_performance_state", pstate):
        out.add("gpu_performance_state", pstate, **labels)

    fans = gpu.static_read("fan_count", d.fan_count)
    if fans is None and "fan_count" in gpu.unsupported:
        # Drivers before R510 have no nvmlDeviceGetNumFans: count the fans
        # that answer instead.
        fans = gpu.static_read("fan_count_probed", _probe_fans, d)
    for fan in range(fans or 0):
        speed = gpu.read(f"fan_{fan}", d.fan_speed_ratio, fan)
        if speed is not None and accept(gpu, "gpu_fan_speed_ratio", speed, series=f":{fan}"):
            out.add("gpu_fan_speed_ratio", speed, **labels, fan=str(fan))

    # Under the names R535 introduced first, then under the older ones: a
    # driver before R535 lacks the new calls, and some answer the new supported
    # mask NOT_SUPPORTED while the rest still answers.
    supported = gpu.read_first(
        ("clock_reasons_supported", d.supported_clock_event_reasons),
        ("clock_reasons_supported_legacy", d.supported_clock_throttle_reasons), static=True)
    active = gpu.read_first(("clock_reasons", d.clock_event_reasons),
                            ("clock_reasons_legacy", d.clock_throttle_reasons))
    if (supported is None and active is not None
            and "clock_reasons_supported_legacy" in gpu.unsupported):
        # No call gives the supported mask on this driver: the nine classic
        # reasons, and any other bit the driver sets (an active bit is never
        # dropped). A mask that failed only this once is asked for again instead.
        supported = c.CLASSIC_REASONS_MASK | active
    if supported is not None and active is not None:
        names = set()
        for bit, reason in c.CLOCK_EVENT_REASONS.items():
            if supported & bit:
                on = bool(active & bit)
                if on:
                    names.add(reason)
                counted = reason in _COUNTED and f"field_{_COUNTED[reason]}" not in gpu.unsupported
                if detail or not counted:
                    out.add("gpu_throttle_reason_active", on, **labels, reason=reason)
        r.throttle_reasons = frozenset(names)

    _read_pcie(gpu, d, out, labels, r)
    _read_memory_health(gpu, d, out, labels, r, fields)

    # The fabric probe with its health summary first (R580), else without it
    # (R550 to R575); boards outside an NVSwitch fabric answer NOT_SUPPORTED.
    fabric = gpu.slow_read("fabric_info_v3", d.fabric_info_v3, every=SLOW_READ_EVERY_POLLS)
    if fabric is None and "fabric_info_v3" in gpu.unsupported:
        fabric = gpu.slow_read("fabric_info_v2", d.fabric_info_v2, every=SLOW_READ_EVERY_POLLS)
    if fabric is not None:
        r.fabric_state, r.fabric_status, r.fabric_health = (fabric.state, fabric.status,
                                                             fabric.health)
        out.add("gpu_fabric_state", 1, **labels, state=fabric.state,
                status=fabric.status.lower(), health=fabric.health or "unknown")

    persistence = gpu.slow_read("persistence_mode", d.persistence_mode,
                                every=SLOW_READ_EVERY_POLLS)
    if persistence is not None:
        r.persistence_mode = persistence
        out.add("gpu_persistence_mode_enabled", persistence, **labels)


_MAX_FANS = 16


def _probe_fans(d: Device) -> int:
    """How many fans answer nvmlDeviceGetFanSpeed_v2, counting from fan 0."""
    for fan in range(_MAX_FANS):
        try:
            d.fan_speed_ratio(fan)
        except NvmlError as exc:
            if exc.device_gone:
                raise
            return fan
    return _MAX_FANS


def _add_fields(gpu: Gpu, fields: dict[int, float | NvmlError], out: SnapshotBuilder,
                labels: dict[str, str], r: GpuReading) -> None:
    for fid, value in fields.items():
        key = f"field_{fid}"
        if key in gpu.unsupported:
            continue
        if isinstance(value, NvmlError):
            # Each field carries its own return code; one unsupported field
            # must not hide the others.
            if value.capability_absent:
                gpu.unsupported.add(key)
            elif value.device_gone:
                raise GpuGone(str(value))
            else:
                gpu.errors += 1
            continue
        if fid == c.FI_DEV_GET_GPU_RECOVERY_ACTION:
            action = c.RECOVERY_ACTIONS.get(int(value), f"code_{int(value)}")
            r.recovery_action = action
            out.add("gpu_recovery_action", 1, **labels, action=action)
        elif fid == c.FI_DEV_MEMORY_TEMP:
            if accept(gpu, "gpu_temperature_celsius", value, series=":memory"):
                out.add("gpu_temperature_celsius", value, **labels, sensor="memory")
        elif fid in c.THROTTLE_TIME_FIELDS:
            reason = c.THROTTLE_TIME_FIELDS[fid]
            if accept_counter(gpu, "gpu_throttle_seconds_total", value * _NS, ":" + reason):
                out.add("gpu_throttle_seconds_total", value * _NS, **labels, reason=reason)
        elif fid in _PCIE_DIRECTION:
            direction = _PCIE_DIRECTION[fid]
            if accept_slow_counter(gpu, "gpu_pcie_bytes_total", value, ":" + direction,
                                   cache_key="pcie_byte_fields"):
                out.add("gpu_pcie_bytes_total", value, **labels, direction=direction)


def _read_pcie(gpu: Gpu, d: Device, out: SnapshotBuilder, labels: dict[str, str],
               r: GpuReading) -> None:
    r.pcie_generation = _link(gpu, "gpu_pcie_link_generation",
                              gpu.read("pcie_gen", d.pcie_link_generation))
    r.pcie_generation_max = _link(gpu, "gpu_pcie_link_generation_max",
                                  gpu.static_read("pcie_gen_max", d.pcie_link_generation_max))
    r.pcie_width = _link(gpu, "gpu_pcie_link_width", gpu.read("pcie_width", d.pcie_link_width))
    r.pcie_width_max = _link(gpu, "gpu_pcie_link_width_max",
                             gpu.static_read("pcie_width_max", d.pcie_link_width_max))
    for name, value in (("gpu_pcie_link_generation", r.pcie_generation),
                        ("gpu_pcie_link_generation_max", r.pcie_generation_max),
                        ("gpu_pcie_link_width", r.pcie_width),
                        ("gpu_pcie_link_width_max", r.pcie_width_max)):
        if value is not None:
            out.add(name, value, **labels)
    replays = gpu.slow_read("pcie_replays", d.pcie_replays, every=SLOW_READ_EVERY_POLLS)
    if replays is not None and accept_slow_counter(gpu, "gpu_pcie_replays_total", replays,
                                                   cache_key="pcie_replays"):
        r.pcie_replays = replays
        out.add("gpu_pcie_replays_total", replays, **labels)


def _link(gpu: Gpu, name: str, value: int | None) -> int | None:
    """A PCIe link reading, or None where there is none or it is implausible."""
    return value if value is not None and accept(gpu, name, value) else None


def _volatile_ecc(gpu: Gpu, d: Device, fields: dict[int, float | NvmlError] | None,
                  tname: str, tcode: int) -> int | None:
    """A volatile ECC total from this poll's field values; where the driver has
    no such field (or the field-values call itself is not there), from
    nvmlDeviceGetTotalEccErrors. None after the field's own error (counted
    with the fields)."""
    fid = _ECC_VOLATILE_FIELDS[tname]
    value = None if fields is None else fields.get(fid)
    if value is not None and not isinstance(value, NvmlError):
        return int(value)
    if fields is None or value is None or f"field_{fid}" in gpu.unsupported:
        return gpu.read(f"ecc_{tname}_volatile", d.ecc_errors, tcode, c.ECC_SCOPES["volatile"])
    return None


def _read_memory_health(gpu: Gpu, d: Device, out: SnapshotBuilder, labels: dict[str, str],
                        r: GpuReading, fields: dict[int, float | NvmlError] | None) -> None:
    every = SLOW_READ_EVERY_POLLS
    mode = gpu.slow_read("ecc_mode", d.ecc_mode, every=every)
    # A volatile ECC counter that moved since the last poll may have retired a
    # row or grown the aggregates: those slow reads are then taken now.
    moved = False
    if mode is not None:
        r.ecc_enabled = mode[0]
        out.add("gpu_ecc_enabled", mode[0], **labels)
        if mode[0]:
            volatile = {tname: _volatile_ecc(gpu, d, fields, tname, tcode)
                        for tname, tcode in c.ECC_TYPES.items()}
            before = gpu.slow.get("ecc_volatile_seen")
            moved = before is not None and before[1] != volatile
            gpu.slow["ecc_volatile_seen"] = (gpu.polls, volatile)
            for tname, tcode in c.ECC_TYPES.items():
                for sname, scode in c.ECC_SCOPES.items():
                    if sname == "volatile":
                        count = volatile[tname]
                    else:
                        count = gpu.slow_read(f"ecc_{tname}_{sname}", d.ecc_errors, tcode,
                                              scode, every=every, now=moved)
                    if count is None or not accept_slow_counter(
                            gpu, "gpu_ecc_errors_total", count, f":{sname}/{tname}",
                            "" if sname == "volatile" else f"ecc_{tname}_{sname}"):
                        continue
                    if tname == "uncorrected" and sname == "volatile":
                        r.ecc_uncorrected_volatile = count
                    out.add("gpu_ecc_errors_total", count, **labels, type=tname, scope=sname)
    rows = gpu.slow_read("remapped_rows", d.remapped_rows, every=every, now=moved)
    if rows is not None:
        corr, unc, pending, failed = rows
        r.remap_pending, r.remap_failed = pending, failed
        if accept_slow_counter(gpu, "gpu_remapped_rows_total", corr, ":correctable",
                               "remapped_rows"):
            out.add("gpu_remapped_rows_total", corr, **labels, type="correctable")
        if accept_slow_counter(gpu, "gpu_remapped_rows_total", unc, ":uncorrectable",
                               "remapped_rows"):
            out.add("gpu_remapped_rows_total", unc, **labels, type="uncorrectable")
        out.add("gpu_row_remap_pending", pending, **labels)
        out.add("gpu_row_remap_failed", failed, **labels)
