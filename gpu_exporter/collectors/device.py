"""NVML device metrics: identity, health, utilization, memory, temperatures,
power, energy, clocks, P-state, fans, throttle reasons, PCIe, ECC, row
remapping and persistence mode, per GPU.

Each GPU is read in one pass a poll: every value the poll wants that NVML
offers as a field (power, its limits, energy, memory temperature, ECC totals
and mode, remapped rows, the PCIe counters, the throttle time counters, the
recovery action, and the other readers' fields: NVLink's) in one
nvmlDeviceGetFieldValues call, each of the others through its own call, made
once however many values it answers (``nvml/values.py``). A value is read as
often as it can change (``cadence.Every``): the fast ones every poll, the
costly counters and the states that follow the load every 10 polls (those at
once when the GPU turns busy or idle), the facts that change only across a
reset, a reconfiguration or an event (ECC mode, persistence, application
clocks) every 30 polls and at once after an NVML event on the GPU or a reload,
the limits and maxima once. Remapped rows and the fabric probe, which change
without an NVML event the exporter could wait on (a probe completing, a
remap pending after errors), are read every 10 polls, remapped rows also at
once when a volatile ECC count moved. Between reads the last value is
exported again.

A capability NVML does not support is asked for once and its series stays
absent. A lost GPU exports ``gpu_up 0`` while the others keep reporting.

Measured on an H100 80GB HBM3 (driver 580.159.04), CPU per call: energy
3.8-4.2 ms (the field-value route costs the same), PCIe replay counter
0.15 ms, ECC mode 0.15 ms, application clock 0.9-1.3 ms, the PCIe byte
counters 0.1-0.3 ms each (the field's own latencyUsec), while utilization,
power, clocks and throttle reasons cost 1-10 us. nvmlDeviceGetPcieThroughput
(which blocks 20 ms) is never called: PCIe bytes come from the field counters.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Self

from gpu_exporter.catalogs import device as m
from gpu_exporter.collectors import board
from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.collectors.values import CounterMemory, Series
from gpu_exporter.facts.cadence import Every
from gpu_exporter.facts.catalog_types import Metric
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml import values as nv
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.errors import NvmlError
from gpu_exporter.nvml.session import (
    GPM_KEY,
    UTILIZATION_SAMPLES_KEY,
    Gpu,
    GpuGone,
    GpuHung,
    NvmlGone,
    NvmlSession,
)
from gpu_exporter.nvml.values import GpuReads, Request, Source
from gpu_exporter.poll.readings import GpuReading
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import SnapshotBuilder
from gpu_exporter.settings.config import Settings

log = logging.getLogger(__name__)


def _call(key: str, *calls: nv.Call, args: tuple[int, ...] = (), part: int | None = None,
          ) -> Source:
    return Source(key, calls=calls, args=args, part=part)


# --- where NVML answers each value ---------------------------------------------
UTILIZATION = _call("utilization", Device.utilization, part=0)
MEMORY_UTILIZATION = _call("memory_utilization", Device.utilization, part=1)
# (total, reserved, used); before R510 through the v1 call, which has no reserved.
MEMORY_TOTAL = _call("memory_total", Device.memory, Device.memory_v1, part=0)
MEMORY_RESERVED = _call("memory_reserved", Device.memory, Device.memory_v1, part=1)
MEMORY_USED = _call("memory_used", Device.memory, Device.memory_v1, part=2)
TEMPERATURE = _call("temperature", Device.temperature)
MEMORY_TEMPERATURE = Source("memory_temperature", c.FI_DEV_MEMORY_TEMP)
POWER_LIMIT = Source("power_limit", c.FI_DEV_POWER_CURRENT_LIMIT, calls=(Device.power_limit_watts,),
                     per=1000)
POWER = Source("power", c.FI_DEV_POWER_AVERAGE, calls=(Device.power_watts,), per=1000)
POWER_DEFAULT_LIMIT = Source("power_default_limit", c.FI_DEV_POWER_DEFAULT_LIMIT,
                             calls=(Device.power_default_limit_watts,), per=1000)
ENERGY = Source("energy", c.FI_DEV_TOTAL_ENERGY_CONSUMPTION, calls=(Device.energy_joules,),
                per=1000)
PCIE_REPLAYS = Source("pcie_replays", c.FI_DEV_PCIE_REPLAY_COUNTER, 1.0, (Device.pcie_replays,))
PCIE_GENERATION = _call("pcie_generation", Device.pcie_link_generation)
PCIE_WIDTH = _call("pcie_width", Device.pcie_link_width)
PCIE_GENERATION_MAX = _call("pcie_generation_max", Device.pcie_link_generation_max)
PCIE_WIDTH_MAX = _call("pcie_width_max", Device.pcie_link_width_max)
PSTATE = _call("pstate", Device.performance_state)
PERSISTENCE = _call("persistence_mode", Device.persistence_mode)
RECOVERY_ACTION = Source("recovery_action", c.FI_DEV_GET_GPU_RECOVERY_ACTION)
# Under the names R535 introduced first, then under the older ones: a driver
# before R535 lacks the new calls, and some answer the new supported mask
# NOT_SUPPORTED while the rest still answers.
REASONS = _call("clock_reasons", Device.clock_event_reasons, Device.clock_throttle_reasons)
REASONS_SUPPORTED = _call("clock_reasons_supported", Device.supported_clock_event_reasons,
                          Device.supported_clock_throttle_reasons)
# The fabric probe with its health summary first (R580), else without it (R550
# to R575); boards outside an NVSwitch fabric answer NOT_SUPPORTED.
FABRIC = _call("fabric", Device.fabric_info_v3, Device.fabric_info_v2)
CLOCK = {name: _call(f"clock_{name}", Device.clock_hz, args=(code,))
         for name, code in c.CLOCK_TYPES.items()}
CLOCK_MAX = {name: _call(f"clock_max_{name}", Device.max_clock_hz, args=(code,))
             for name, code in c.CLOCK_TYPES.items()}
CLOCK_APPLICATION = {name: _call(f"clock_app_{name}", Device.application_clock_hz, args=(code,))
                     for name, code in c.CLOCK_TYPES.items()}
CLOCK_APPLICATION_DEFAULT = {
    name: _call(f"clock_app_default_{name}", Device.default_application_clock_hz, args=(code,))
    for name, code in c.CLOCK_TYPES.items()}
THRESHOLD = {name: _call(f"temperature_threshold_{name}", Device.temperature_threshold,
                         args=(code,))
             for name, code in c.TEMPERATURE_THRESHOLDS.items()}
THROTTLE_TIME = {reason: Source(f"throttle_time_{reason}", fid, 1e-9)
                 for fid, reason in c.THROTTLE_TIME_FIELDS.items()}
PCIE_BYTES = {"tx": Source("pcie_tx_bytes", c.FI_DEV_PCIE_COUNT_TX_BYTES),
              "rx": Source("pcie_rx_bytes", c.FI_DEV_PCIE_COUNT_RX_BYTES)}
# ECC: the mode (whether to read the counts at all), the volatile totals every
# poll (nvmlDeviceGetTotalEccErrors where the field is missing), the aggregates
# and the remapped rows on their cadence, and at once when a volatile total
# moved (the event that grows the aggregates and retires rows).
ECC_MODE = Source("ecc_mode", c.FI_DEV_ECC_CURRENT, 1.0, (Device.ecc_mode,), part=0)
_ECC_FIELDS = {("corrected", "volatile"): c.FI_DEV_ECC_SBE_VOL_TOTAL,
               ("corrected", "aggregate"): c.FI_DEV_ECC_SBE_AGG_TOTAL,
               ("uncorrected", "volatile"): c.FI_DEV_ECC_DBE_VOL_TOTAL,
               ("uncorrected", "aggregate"): c.FI_DEV_ECC_DBE_AGG_TOTAL}
ECC_COUNT = {(tname, sname): Source(f"ecc_{tname}_{sname}", fid, 1.0, (Device.ecc_errors,),
                                    args=(c.ECC_TYPES[tname], c.ECC_SCOPES[sname]))
             for (tname, sname), fid in _ECC_FIELDS.items()}
_REMAP = Device.remapped_rows  # (correctable, uncorrectable, pending, failed)
REMAPPED = {"correctable": Source("remapped_correctable", c.FI_DEV_REMAPPED_COR, 1.0,
                                  (_REMAP,), part=0),
            "uncorrectable": Source("remapped_uncorrectable", c.FI_DEV_REMAPPED_UNC, 1.0,
                                    (_REMAP,), part=1)}
REMAP_PENDING = Source("remap_pending", c.FI_DEV_REMAPPED_PENDING, 1.0, (_REMAP,), part=2)
REMAP_FAILED = Source("remap_failed", c.FI_DEV_REMAPPED_FAILURE, 1.0, (_REMAP,), part=3)


@dataclass(frozen=True, slots=True)
class ValueRow:
    """One value of a GPU: the metric it is exported as (``series``: its label
    values after the GPU's), where NVML answers it, and how often it is read.

    ``ceiling``: the board's own figure the value is held against (power
    against its limit); where that is no reading this poll, the value is held
    against its metric's bounds alone, or left out with ``needs_ceiling``
    (memory used of a total that is garbage: the same answer). ``unknown``:
    NVML's answer for "it does not know" (absent, no error); ``detail``: read
    at all only with --metrics.detail.
    """

    metric: Metric
    source: Source
    series: tuple[str, ...] = ()
    every: Every = Every.POLL
    ceiling: Source | None = None
    unknown: float | None = None
    detail: bool = False
    needs_ceiling: bool = False


# The graphics clock runs in step with the SM clock on the boards a fleet runs
# (one clock domain): it is read with --metrics.detail only.
ROWS: tuple[ValueRow, ...] = (
    ValueRow(m.UTILIZATION_RATIO, UTILIZATION),
    ValueRow(m.MEMORY_CONTROLLER_UTILIZATION_RATIO, MEMORY_UTILIZATION),
    ValueRow(m.MEMORY_TOTAL_BYTES, MEMORY_TOTAL),
    ValueRow(m.MEMORY_USED_BYTES, MEMORY_USED, ceiling=MEMORY_TOTAL, needs_ceiling=True),
    ValueRow(m.MEMORY_RESERVED_BYTES, MEMORY_RESERVED, ceiling=MEMORY_TOTAL, needs_ceiling=True),
    ValueRow(m.TEMPERATURE_CELSIUS, TEMPERATURE, ("gpu",)),
    ValueRow(m.TEMPERATURE_CELSIUS, MEMORY_TEMPERATURE, ("memory",)),
    # NVML answers 0 for thresholds a board does not define.
    *(ValueRow(m.TEMPERATURE_THRESHOLD_CELSIUS, THRESHOLD[name], (name,), Every.ONCE, unknown=0)
      for name in c.TEMPERATURE_THRESHOLDS),
    ValueRow(m.POWER_LIMIT_WATTS, POWER_LIMIT),
    ValueRow(m.POWER_WATTS, POWER, ceiling=POWER_LIMIT),
    ValueRow(m.POWER_DEFAULT_LIMIT_WATTS, POWER_DEFAULT_LIMIT, every=Every.ONCE),
    ValueRow(m.ENERGY_JOULES_TOTAL, ENERGY, every=Every.SLOW),
    *(ValueRow(m.CLOCK_MAX_HERTZ, CLOCK_MAX[name], (name,), Every.ONCE, detail=name == "graphics")
      for name in c.CLOCK_TYPES),
    ValueRow(m.CLOCK_HERTZ, CLOCK["sm"], ("sm",), ceiling=CLOCK_MAX["sm"]),
    ValueRow(m.CLOCK_HERTZ, CLOCK["graphics"], ("graphics",), ceiling=CLOCK_MAX["graphics"],
        detail=True),
    ValueRow(m.CLOCK_HERTZ, CLOCK["memory"], ("memory",), Every.LOAD, CLOCK_MAX["memory"]),
    *(ValueRow(m.CLOCK_APPLICATION_HERTZ, CLOCK_APPLICATION[name], (name,), Every.FACT,
          CLOCK_MAX[name]) for name in c.CLOCK_TYPES),
    *(ValueRow(m.CLOCK_APPLICATION_DEFAULT_HERTZ, CLOCK_APPLICATION_DEFAULT[name], (name,),
          Every.ONCE) for name in c.CLOCK_TYPES),
    # 32 is NVML_PSTATE_UNKNOWN: the driver says it does not know, not a fault.
    ValueRow(m.PERFORMANCE_STATE, PSTATE, every=Every.LOAD, unknown=c.PSTATE_UNKNOWN),
    # A counter read every poll lets rate() see every nanosecond a reason held.
    *(ValueRow(m.THROTTLE_SECONDS_TOTAL, source, (reason,))
      for reason, source in THROTTLE_TIME.items()),
    ValueRow(m.PCIE_LINK_GENERATION, PCIE_GENERATION, every=Every.LOAD),
    ValueRow(m.PCIE_LINK_GENERATION_MAX, PCIE_GENERATION_MAX, every=Every.ONCE),
    ValueRow(m.PCIE_LINK_WIDTH, PCIE_WIDTH, every=Every.LOAD),
    ValueRow(m.PCIE_LINK_WIDTH_MAX, PCIE_WIDTH_MAX, every=Every.ONCE),
    ValueRow(m.PCIE_REPLAYS_TOTAL, PCIE_REPLAYS, every=Every.SLOW),
    *(ValueRow(m.PCIE_BYTES_TOTAL, source, (direction,), Every.SLOW)
      for direction, source in PCIE_BYTES.items()),
    ValueRow(m.PERSISTENCE_MODE_ENABLED, PERSISTENCE, every=Every.FACT),
)

# Reasons with a time counter: their state gauge is detail where the GPU
# answers the counter (its rate says when and how much they held, between
# scrapes too).
_COUNTED = {reason: source for reason, source in THROTTLE_TIME.items()}
_MAX_FANS = 16

Want = tuple[tuple[Source, Every], ...]
# Each cadence's polls by the member's id: Every.polls hashes the member with
# Enum's Python-level __hash__, and a pass asks it twice for each value read
# on a cadence (the members live as long as the process, and so do their ids).
_POLLS = {id(every): every.polls for every in Every}
# ECC's counts: the volatile totals every poll, the aggregates on their cadence.
_ECC_COUNTS: Want = tuple((source, Every.POLL if scope == "volatile" else Every.SLOW)
                          for (_, scope), source in ECC_COUNT.items())
_REMAPPED: Want = tuple((source, Every.SLOW) for source in REMAPPED.values())
# What a GPU's pass asks for besides its rows.
_ALSO_WANTED: Want = ((RECOVERY_ACTION, Every.POLL), (REASONS, Every.POLL),
                      (REASONS_SUPPORTED, Every.ONCE), (FABRIC, Every.SLOW),
                      (ECC_MODE, Every.FACT), (REMAP_PENDING, Every.SLOW),
                      (REMAP_FAILED, Every.SLOW), *_REMAPPED)
# When a volatile ECC count moved: the aggregates and what remaps rows, at once.
_AFTER_ECC_ERRORS: Want = (*((s, Every.SLOW) for (_, scope), s in ECC_COUNT.items()
                             if scope == "aggregate"),
                           (REMAP_PENDING, Every.SLOW), (REMAP_FAILED, Every.SLOW), *_REMAPPED)


@dataclass(frozen=True)
class _RowSet:
    """The rows read with or without --metrics.detail, and what a pass asks
    for from them: made once, not every poll for every GPU."""

    rows: tuple[ValueRow, ...]
    # Every poll (those not due answer from their last read)...
    wanted: Want
    # ...and the states that follow the load.
    with_load: Want

    @classmethod
    def of(cls, detail: bool) -> _RowSet:
        rows = tuple(row for row in ROWS if detail or not row.detail)
        return cls(rows, (*((row.source, row.every) for row in rows
                            if row.every is not Every.LOAD), *_ALSO_WANTED),
                   tuple((row.source, row.every) for row in rows if row.every is Every.LOAD))


_ROW_SETS = {detail: _RowSet.of(detail) for detail in (False, True)}


# Where NVML answers each value the diagnosis reads of a GPU, by the name the
# diagnosis reads it under (coverage.py): the value is not offered when one of
# its sources is not (ECC counts need the mode too), refused when one is.
# A GPU's fans are not offered only when none of them is.
_READ_AS: dict[str, tuple[Source, ...]] = {
    "utilization": (UTILIZATION,),
    "memory_used_bytes": (MEMORY_USED,), "memory_total_bytes": (MEMORY_TOTAL,),
    "temperature_celsius": (TEMPERATURE,), "slowdown_celsius": (THRESHOLD["slowdown"],),
    "power_watts": (POWER,), "power_limit_watts": (POWER_LIMIT,),
    "power_default_limit_watts": (POWER_DEFAULT_LIMIT,),
    **{f"clocks_hz[{name}]": (CLOCK[name],) for name in c.CLOCK_TYPES},
    **{f"clocks_max_hz[{name}]": (CLOCK_MAX[name],) for name in c.CLOCK_TYPES},
    **{f"clocks_application_hz[{name}]": (CLOCK_APPLICATION[name],) for name in c.CLOCK_TYPES},
    **{f"clocks_application_default_hz[{name}]": (CLOCK_APPLICATION_DEFAULT[name],)
       for name in c.CLOCK_TYPES},
    "throttle_reasons": (REASONS,),
    "pcie_generation": (PCIE_GENERATION,), "pcie_generation_max": (PCIE_GENERATION_MAX,),
    "pcie_width": (PCIE_WIDTH,), "pcie_width_max": (PCIE_WIDTH_MAX,),
    "pcie_replays": (PCIE_REPLAYS,),
    "ecc_uncorrected_volatile": (ECC_MODE, ECC_COUNT["uncorrected", "volatile"]),
    "remap_pending": (REMAP_PENDING,), "remap_failed": (REMAP_FAILED,),
    "persistence_mode": (PERSISTENCE,),
    "recovery_action": (RECOVERY_ACTION,), "fabric_state": (FABRIC,),
    # A Grace board's C2C link error counters (R575 and newer).
    "c2c_errors": tuple(board.C2C_ERRORS.values()),
}
# Other readers' capabilities of the GPU, as the session records them.
_OTHER_READERS = {"sm_active": GPM_KEY, "util_samples": UTILIZATION_SAMPLES_KEY}


def _not_offered(gpu: Gpu, fan_count: int | None) -> tuple[frozenset[str], frozenset[str]]:
    """What NVML does not offer on ``gpu`` for good, and what it refuses."""
    unavailable, refused = set(), set()
    for name, sources in _READ_AS.items():
        answers = [nv.offered(gpu, s) for s in sources]
        if None in answers:
            refused.add(name)
        elif False in answers:
            unavailable.add(name)
    if fan_count:
        answers = [nv.offered(gpu, _fan(fan)) for fan in range(fan_count)]
        if None in answers:
            refused.add("fan_speeds")
        elif not any(answers):
            unavailable.add("fan_speeds")
    if board.c2c_link(gpu) is False:  # no C2C link: its counters are not asked, nor offered
        refused.discard("c2c_errors")
        unavailable.add("c2c_errors")
    for name, key in _OTHER_READERS.items():
        if key in gpu.denied:
            refused.add(name)
        elif key in gpu.unsupported:
            unavailable.add(name)
    return frozenset(unavailable), frozenset(refused)


class DeviceCollector(NvmlCollector):
    name = "device"
    description = ("NVML device metrics: utilization, memory, power, clocks, throttle reasons, "
                   "PCIe, ECC")
    settings = (lambda s: s.metrics.detail,)

    def __init__(self, session: NvmlSession, detail: bool = False) -> None:
        super().__init__(session)
        self.detail = detail
        # GPU index -> (what the answer was worked out from, the answer).
        self._offers: dict[int, tuple[tuple[int, int, int | None],
                                      tuple[frozenset[str], frozenset[str]]]] = {}
        # GPU index -> its pass of this poll, planned by whichever reader of
        # the GPU asked its fields first: those of its first read are asked then.
        self._passes: dict[int, _GpuPass] = {}
        self._counters = CounterMemory()
        session.reads.want(self.name, lambda gpu, d: self._pass(gpu, d).first_fields)

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        return cls(rt.session, rt.settings.metrics.detail)

    def reconfigure(self, settings: Settings) -> None:
        self.detail = settings.metrics.detail
        # A reload may follow a change on the node: read every fact again.
        for gpu in self.session.gpus:
            self.session.reads.held_for(gpu).refresh()

    def close(self) -> None:
        self.session.reads.drop(self.name)

    def _pass(self, gpu: Gpu, device: Device) -> _GpuPass:
        """The GPU's pass of this poll, its first read planned."""
        reads = self.session.reads.of(gpu)
        held = self._passes.get(gpu.index)
        if held is None or held.reads is not reads or held.poll != reads.polls \
                or held.device is not device:
            held = self._passes[gpu.index] = _GpuPass(
                self.session.reads, reads, device, self.detail, self.session.driver_version)
            held.plan()
        return held

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        readings: dict[int, GpuReading] = {}
        out.readings.gpus = readings
        if not self.session.begin(self.name, out):
            self._passes.clear()
            return
        if len(self._passes) > len(self.session.gpus):
            self._passes.clear()
        self._counters.keep(self.session.generation)
        try:
            for gpu in self.session.gpus:
                readings[gpu.index] = self._collect_gpu(gpu, out)
        except NvmlGone as exc:
            # Nothing read this poll can be trusted; export no GPU series.
            self.session.mark_down(exc.error)
            readings.clear()
            out.discard_families(m.METRICS)

    def _not_offered(self, gpu: Gpu, fan_count: int | None
                     ) -> tuple[frozenset[str], frozenset[str]]:
        """What NVML leaves out on ``gpu`` for good, and refuses: it changes
        only when the GPU first answers so (the sets grow) or a reload
        forgets it, and is worked out again only then."""
        marks = (len(gpu.unsupported), len(gpu.denied), fan_count)
        held = self._offers.get(gpu.index)
        if held is None or held[0] != marks:
            held = self._offers[gpu.index] = (marks, _not_offered(gpu, fan_count))
        return held[1]

    def _collect_gpu(self, gpu: Gpu, out: SnapshotBuilder) -> GpuReading:
        if gpu.lost and self.session.try_recover(gpu):
            self._counters.forget(gpu.index)  # a GPU that came back may have been reset
        ident = gpu.identity
        base = (str(gpu.index), ident.uuid)
        r = GpuReading(gpu.index, ident.uuid, up=False, name=ident.name,
                       pci_bus_id=ident.pci_bus_id,
                       driver_version=self.session.driver_version,
                       vbios_version=ident.vbios_version)
        device = gpu.device
        place = ("", "", "", "") if gpu.lost or gpu.hung or device is None \
            else board.place(gpu, device)
        out.add_values(m.INFO, (*base, ident.name, ident.pci_bus_id, ident.serial,
                                self.session.driver_version, ident.vbios_version,
                                self.session.cuda_driver_version, ident.architecture,
                                ident.compute_capability, *place), 1)
        if gpu.lost or gpu.hung or device is None:
            out.add_values(m.UP, base, 0)
            return r
        gpu.errors = 0
        counters = self._counters.of(gpu.index)
        try:
            # A GPU lost half-way contributes no half-read values, only gpu_up 0.
            with out.all_or_nothing():
                self.session.run(gpu, lambda: self._pass(gpu, device).collect(
                    Series(out, gpu, base, counters), r))
        except (GpuGone, GpuHung) as exc:
            if isinstance(exc, GpuGone):
                self.session.mark_lost(gpu, str(exc))
            out.add_values(m.UP, base, 0)
            return GpuReading(gpu.index, ident.uuid, up=False, name=ident.name,
                              pci_bus_id=ident.pci_bus_id)
        self._errors += gpu.errors
        r.up = True
        r.unavailable, r.refused = self._not_offered(gpu, r.fan_count)
        out.add_values(m.UP, base, 1)
        return r


class _GpuPass:
    """One GPU's values this poll. What is due is read in as few NVML calls
    as the branch allows: the first read holds every field of the poll (the
    other readers' too); a second is made only for what this poll's answers
    make due (the load changed, ECC counts moved), and holds calls only,
    unless ECC counts first became readable."""

    def __init__(self, fields: nv.FieldValues, reads: GpuReads, device: Device, detail: bool,
                 driver: str = "") -> None:
        self.board = board.wanted(driver)
        self.fields = fields
        self.reads = reads
        self.gpu = reads.gpu
        self.poll = reads.polls
        self.device = device
        self.detail = detail
        # Every source asked for this poll -> its value (read now, or held).
        self.values: dict[Source, Any] = {}
        self._fresh: set[Source] = set()  # read this poll
        self._due: dict[Source, Every] = {}
        self.first_fields: Request = ()
        self.fan_count: int | None = None
        self._ecc_on = False
        self._c2c = False

    # --- reading ------------------------------------------------------------
    def want(self, sources: Iterable[tuple[Source, Every]], now: bool = False) -> None:
        """Ask for these: those due (or all, ``now``) are read at the next
        read(), the others answer from their last read."""
        reads, fresh, due, values = self.reads, self._fresh, self._due, self.values
        static, once, poll = self.gpu.static, Every.ONCE, Every.POLL
        for source, every in sources:
            if source in fresh or source in due or (not now and source in values):
                continue
            if every is once:
                if source.key in static:
                    values[source] = static[source.key]
                    continue
            elif every is not poll and not now and not reads.due(source.key, _POLLS[id(every)]):
                values[source] = reads.held(source.key)
                continue
            due[source] = every

    def read(self) -> None:
        due, self._due = self._due, {}
        if not due:
            return
        values = nv.read(self.fields, self.gpu, self.device, due, reader=DeviceCollector.name)
        self._fresh.update(due)
        for source, every in due.items():
            value = values.get(source)
            self.values[source] = value
            if every is Every.ONCE:
                if value is not None:
                    self.gpu.static[source.key] = value
            elif every is not Every.POLL:
                self.reads.hold(source.key, _POLLS[id(every)], value)

    def forget(self, source: Source) -> None:
        """A held value that was no reading: asked again next poll."""
        self.reads.forget(source.key)
        self.gpu.static.pop(source.key, None)

    # --- the pass -----------------------------------------------------------
    def plan(self) -> None:
        """What the first read asks: the values due this poll, from what the
        GPU held when the poll began; first_fields, the fields among them."""
        self._ecc_on = bool(self.reads.held(ECC_MODE.key))
        self.want(_ROW_SETS[self.detail].wanted)
        self.want(self.board)
        self._c2c = board.c2c_link(self.gpu) is True
        if self._c2c:
            self.want(board.C2C_ERROR_WANTS)
        if self._ecc_on:
            self.want(_ECC_COUNTS)
        self.fan_count = self._fan_count()
        if self.fan_count:
            self.want((_fan(fan), Every.POLL) for fan in range(self.fan_count))
        self.first_fields = nv.field_pairs(self.gpu, self._due)

    def collect(self, out: Series, r: GpuReading) -> None:
        reads = self.reads
        row_set = _ROW_SETS[self.detail]
        ecc_on = self._ecc_on
        r.fan_count = self.fan_count
        self.read()
        # What this poll's answers make due: the states that follow the load
        # when the GPU turned busy or idle; the ECC counts when ECC is on and
        # they were not asked (the first poll); the aggregates and remapped
        # rows at once when a volatile count moved.
        busy = _busy(self.values.get(UTILIZATION))
        turned = busy is not None and busy != reads.held("load_busy")
        self.want(row_set.with_load, now=turned)
        if turned or "load_busy" not in reads.slow:
            reads.hold("load_busy", Every.LOAD.polls, busy)
        mode = self.values.get(ECC_MODE)
        if mode and not ecc_on:
            self.want(_ECC_COUNTS)
        if not self._c2c and board.c2c_link(self.gpu) is not False:
            self.want(board.C2C_ERROR_WANTS)  # the link first read, or not yet told
        self.read()
        if mode and self._volatile_moved():
            self.want(_AFTER_ECC_ERRORS, now=True)
            self.read()
        self._export(row_set.rows, out, r)

    def _fan_count(self) -> int | None:
        gpu = self.gpu
        fans = gpu.static_read("fan_count", Device.fan_count, self.device)
        if fans is None and "fan_count" in gpu.unsupported:
            # Drivers before R510 have no nvmlDeviceGetNumFans: count the fans
            # that answer instead.
            fans = gpu.static_read("fan_count_probed", _probe_fans, self.device)
        return fans

    def _volatile_moved(self) -> bool:
        volatile = tuple(self.values.get(ECC_COUNT[tname, "volatile"])
                         for tname in c.ECC_TYPES)
        before = self.reads.held("ecc_volatile_seen")
        self.reads.hold("ecc_volatile_seen", 1, volatile)
        return before is not None and before != volatile

    # --- the series -----------------------------------------------------------
    def _export(self, rows: tuple[ValueRow, ...], out: Series, r: GpuReading) -> None:
        ok: dict[Source, float] = {}
        values = self.values
        for row in rows:
            value = values.get(row.source)
            if value is None or value == row.unknown:
                continue
            if row.metric.kind == "counter":
                added = out.counter(row.metric, value, *row.series)
            else:
                ceiling = ok.get(row.ceiling) if row.ceiling is not None else None
                if ceiling is None and row.needs_ceiling:
                    continue
                added = out.gauge(row.metric, value, *row.series, ceiling=ceiling)
            if added is None:
                if row.every is not Every.POLL:
                    self.forget(row.source)
                continue
            ok[row.source] = added
        r.utilization = ok.get(UTILIZATION)
        r.memory_utilization = ok.get(MEMORY_UTILIZATION)
        r.memory_total_bytes = ok.get(MEMORY_TOTAL)
        r.memory_used_bytes = ok.get(MEMORY_USED)
        r.memory_reserved_bytes = ok.get(MEMORY_RESERVED)
        r.temperature_celsius = ok.get(TEMPERATURE)
        r.slowdown_celsius = ok.get(THRESHOLD["slowdown"])
        r.power_limit_watts = ok.get(POWER_LIMIT)
        r.power_watts = ok.get(POWER)
        r.power_default_limit_watts = ok.get(POWER_DEFAULT_LIMIT)
        for name in c.CLOCK_TYPES:
            _put(r.clocks_hz, name, ok.get(CLOCK[name]))
            _put(r.clocks_max_hz, name, ok.get(CLOCK_MAX[name]))
            _put(r.clocks_application_hz, name, ok.get(CLOCK_APPLICATION[name]))
            _put(r.clocks_application_default_hz, name, ok.get(CLOCK_APPLICATION_DEFAULT[name]))
        r.pcie_generation = _int(ok.get(PCIE_GENERATION))
        r.pcie_generation_max = _int(ok.get(PCIE_GENERATION_MAX))
        r.pcie_width = _int(ok.get(PCIE_WIDTH))
        r.pcie_width_max = _int(ok.get(PCIE_WIDTH_MAX))
        r.pcie_replays = ok.get(PCIE_REPLAYS)
        persistence = ok.get(PERSISTENCE)
        r.persistence_mode = None if persistence is None else bool(persistence)
        for fan in range(_MAX_FANS):
            source = _FANS.get(fan)
            if source is None:
                break
            if source not in values:
                continue  # this fan failed to answer; the next may still
            speed = out.gauge(m.FAN_SPEED_RATIO, values[source], str(fan))
            if speed is not None:
                r.fan_speeds[fan] = speed
        self._export_reasons(out, r)
        self._export_memory_health(out, r)
        self._export_verdicts(out, r)

    def _export_reasons(self, out: Series, r: GpuReading) -> None:
        gpu, values = self.gpu, self.values
        supported, active = values.get(REASONS_SUPPORTED), values.get(REASONS)
        if (supported is None and active is not None
                and REASONS_SUPPORTED.call_key(1) in gpu.unsupported):
            # No call gives the supported mask on this driver: the nine classic
            # reasons, and any other bit the driver sets (an active bit is never
            # dropped). A mask that failed only this once is asked for again instead.
            supported = c.CLASSIC_REASONS_MASK | active
        if supported is None or active is None:
            return
        names = set()
        for bit, reason in c.CLOCK_EVENT_REASONS.items():
            if supported & bit:
                on = bool(active & bit)
                if on:
                    names.add(reason)
                counter = _COUNTED.get(reason)
                counted = counter is not None and counter.field_key not in gpu.unsupported
                if self.detail or not counted:
                    out.state(m.THROTTLE_REASON_ACTIVE, on, reason)
        r.throttle_reasons = frozenset(names)

    def _export_memory_health(self, out: Series, r: GpuReading) -> None:
        values = self.values
        mode = values.get(ECC_MODE)
        if mode is not None:
            r.ecc_enabled = bool(mode)
            out.state(m.ECC_ENABLED, bool(mode))
        if mode:
            for (tname, sname), source in ECC_COUNT.items():
                count = out.counter(m.ECC_ERRORS_TOTAL, values.get(source), tname, sname)
                if count is None:
                    if sname != "volatile" and source in values:
                        self.forget(source)
                    continue
                if tname == "uncorrected" and sname == "volatile":
                    r.ecc_uncorrected_volatile = count
        pending, failed = values.get(REMAP_PENDING), values.get(REMAP_FAILED)
        for kind, source in REMAPPED.items():
            value = values.get(source)
            if value is not None and out.counter(m.REMAPPED_ROWS_TOTAL, value, kind) is None:
                self.forget(source)
        if pending is not None and failed is not None:
            r.remap_pending, r.remap_failed = bool(pending), bool(failed)
            out.state(m.ROW_REMAP_PENDING, bool(pending))
            out.state(m.ROW_REMAP_FAILED, bool(failed))

    def _export_verdicts(self, out: Series, r: GpuReading) -> None:
        action_code = self.values.get(RECOVERY_ACTION)
        if action_code is not None:
            action = c.RECOVERY_ACTIONS.get(int(action_code), f"code_{int(action_code)}")
            r.recovery_action = action
            out.state(m.RECOVERY_ACTION, 1, action)
        fabric = self.values.get(FABRIC)
        if fabric is not None:
            r.fabric_state, r.fabric_status, r.fabric_health = (fabric.state, fabric.status,
                                                                 fabric.health)
            out.state(m.FABRIC_STATE, 1, fabric.state, fabric.status.lower(),
                      fabric.health or "unknown")
            board.export_fabric_issues(fabric, out)
        board.export(self.gpu, self.values, out, r)


def _busy(utilization: float | None) -> bool | None:
    """Whether the GPU runs work, for the reads that follow the load."""
    return None if utilization is None else utilization > 0.0


def _put(into: dict[str, float], key: str, value: float | None) -> None:
    if value is not None:
        into[key] = value


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


_FANS: dict[int, Source] = {}


def _fan(fan: int) -> Source:
    source = _FANS.get(fan)
    if source is None:
        source = _FANS[fan] = _call(f"fan_{fan}", Device.fan_speed_ratio, args=(fan,))
    return source


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
