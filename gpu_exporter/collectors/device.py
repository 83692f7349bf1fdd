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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Self

from gpu_exporter.catalogs import device as m
from gpu_exporter.collectors import board
from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.collectors.device_rows import (
    ECC_COUNT,
    ECC_MODE,
    FABRIC,
    READ_AS,
    REASONS,
    REASONS_SUPPORTED,
    RECOVERY_ACTION,
    REMAP_FAILED,
    REMAP_PENDING,
    REMAPPED,
    ROWS,
    THROTTLE_TIME,
    UTILIZATION,
    ValueRow,
)
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


# Reasons with a time counter: their state gauge is detail where the GPU
# answers the counter (its rate says when and how much they held, between
# scrapes too). Each reason's bit, its name, and its counter where it has one.
_REASON_BITS = tuple((bit, reason, THROTTLE_TIME.get(reason))
                     for bit, reason in c.CLOCK_EVENT_REASONS.items())
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

# A row as its export reads it, unpacked once: (metric, source, series, a
# counter, ceiling, unknown, needs_ceiling, forgotten when no reading (read on
# a cadence), kept as a ceiling of a later row, the reading's field, its key,
# convert).
_Export = tuple[Metric, Source, tuple[str, ...], bool, Source | None, float | None, bool, bool,
                bool, str | None, str | None, Callable[[float], Any] | None]


def _export_of(row: ValueRow, ceilings: frozenset[Source]) -> _Export:
    name, key = row.field or (None, None)
    return (row.metric, row.source, row.series, row.metric.kind == "counter", row.ceiling,
            row.unknown, row.needs_ceiling, row.every is not Every.POLL, row.source in ceilings,
            name, key, row.convert)


@dataclass(frozen=True)
class _Plan:
    """What a pass asks for at its start, for one set of rows (with or without
    --metrics.detail), board values, ECC counts, C2C counters and fans: made
    once for each such set, not every poll for every GPU. Each value appears
    once, so the first read needs no bookkeeping of what was asked already."""

    # (source, how often), in the order asked...
    wants: tuple[tuple[Source, Every], ...]
    # ...and the same as the NVML layer is handed it: which are due this poll
    # is worked out there (GpuReads.status()), whichever reader asks first.
    ask: nv.Ask

    @classmethod
    def of(cls, wants: Iterable[tuple[Source, Every]]) -> _Plan:
        unique: dict[Source, Every] = {}
        for source, every in wants:
            unique.setdefault(source, every)  # the first asked wins, as in want()
        return cls(tuple(unique.items()), nv.Ask(tuple(
            (None if s.field is None else (s.field, 0), s.key,
             "" if s.field is None else s.field_key,
             nv.ONCE if e is Every.ONCE else e.polls) for s, e in unique.items())))


@dataclass(frozen=True)
class _RowSet:
    """The rows read with or without --metrics.detail, and what a pass asks
    for from them: made once, not every poll for every GPU."""

    # Every poll (those not due answer from their last read)...
    wanted: Want
    # ...and the states that follow the load.
    with_load: Want
    # The rows as their export reads them.
    exports: tuple[_Export, ...]

    @classmethod
    def of(cls, detail: bool) -> _RowSet:
        rows = tuple(row for row in ROWS if detail or not row.detail)
        ceilings = frozenset(row.ceiling for row in rows if row.ceiling is not None)
        return cls((*((row.source, row.every) for row in rows
                            if row.every is not Every.LOAD), *_ALSO_WANTED),
                   tuple((row.source, row.every) for row in rows if row.every is Every.LOAD),
                   tuple(_export_of(row, ceilings) for row in rows))


_ROW_SETS = {detail: _RowSet.of(detail) for detail in (False, True)}
# (detail, the board's values (board.wanted()'s tuple, by its id: Every's
# hash is Python's), ECC on, C2C link, fans) -> the plan, and the board's values
# it was made with (held, so their id is not another tuple's).
_PLANS: dict[tuple[bool, int, bool, bool, int], tuple[_Plan, Want]] = {}


def _plan(detail: bool, board_wants: Want, ecc_on: bool, c2c: bool, fans: int) -> _Plan:
    key = (detail, id(board_wants), ecc_on, c2c, fans)
    held = _PLANS.get(key)
    if held is None:
        held = _PLANS[key] = _Plan.of((
            *_ROW_SETS[detail].wanted, *board_wants,
            *(board.C2C_ERROR_WANTS if c2c else ()), *(_ECC_COUNTS if ecc_on else ()),
            *((_fan(fan), Every.POLL) for fan in range(fans)))), board_wants
    return held[0]


# A GPU's board_lacks: the GPU, what it was worked out from, the answer.
_Lacks = tuple[Gpu, tuple[int, bool | None, object, object], tuple[str, ...]]

# Other readers' capabilities of the GPU, as the session records them.
_OTHER_READERS = {"sm_active": GPM_KEY, "util_samples": UTILIZATION_SAMPLES_KEY}


def _not_offered(gpu: Gpu, fan_count: int | None) -> tuple[frozenset[str], frozenset[str]]:
    """What NVML does not offer on ``gpu`` for good, and what it refuses."""
    unavailable, refused = set(), set()
    for name, sources in READ_AS.items():
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
        self._lacks: dict[int, _Lacks] = {}
        self._counters = CounterMemory()

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
        held = _GpuPass(self.session.reads, self.session.reads.of(gpu), device, self.detail,
                        self.session.driver_version, self._lacks)
        held.plan()
        return held

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        readings: dict[int, GpuReading] = {}
        out.readings.gpus = readings
        if not self.session.begin(self.name, out):
            return
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
            with out.all_or_nothing(), self.session.step(gpu):
                self._pass(gpu, device).collect(Series(out, gpu, base, counters), r)
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
                 driver: str = "", lacks: dict[int, _Lacks] | None = None) -> None:
        self.board = board.wanted(driver)
        self.lacks = {} if lacks is None else lacks
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
        self._pairs: Request | None = None  # the next read's fields, where known
        self.fan_count: int | None = None
        self._ecc_on = False
        self._c2c: bool | None = False  # board.c2c_link() when the pass began

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
        due = self._due
        if not due:
            return
        self._due = {}
        # The first read asks what plan() worked out the fields of.
        pairs, self._pairs = self._pairs, None
        values = nv.read(self.fields, self.gpu, self.device, due, reader=DeviceCollector.name,
                         pairs=pairs)
        self.values.update(values)  # one value for each source asked
        self._fresh.update(due)
        static, reads, poll, once = self.gpu.static, self.reads, Every.POLL, Every.ONCE
        for source, every in due.items():
            if every is poll:
                continue
            value = values.get(source)
            if every is once:
                if value is not None:
                    static[source.key] = value
            else:
                reads.hold(source.key, _POLLS[id(every)], value)

    def forget(self, source: Source) -> None:
        """A held value that was no reading: asked again next poll."""
        self.reads.forget(source.key)
        self.gpu.static.pop(source.key, None)

    # --- the pass -----------------------------------------------------------
    def plan(self) -> None:
        """What the first read asks: the values due this poll, from what the
        GPU held when the poll began, and the fields among them.
        The NVML layer is handed the plan's Ask, so a reader of the GPU that
        comes first asks these fields too."""
        gpu, reads = self.gpu, self.reads
        self._ecc_on = bool(reads.held(ECC_MODE.key))
        self._c2c = board.c2c_link(gpu)
        self.fan_count = self._fan_count()
        plan = _plan(self.detail, self.board, self._ecc_on, self._c2c is True,
                     self.fan_count or 0)
        self.fields.ask(gpu, DeviceCollector.name, plan.ask)
        status, request = reads.status(plan.ask)
        due, values, due_now = self._due, self.values, nv.DUE
        for (source, every), held in zip(plan.wants, status, strict=True):
            if held is due_now:
                due[source] = every
            else:
                values[source] = held
        self._pairs = request

    def ask_next(self) -> None:
        """Hand the NVML layer what the next poll's first read will ask, where
        this poll's answers changed it (ECC turned on, a C2C link found): a
        reader of the GPU that comes before this one next poll asks it."""
        ecc_on, c2c = bool(self.reads.held(ECC_MODE.key)), board.c2c_link(self.gpu) is True
        if ecc_on != self._ecc_on or c2c != (self._c2c is True):
            self.fields.ask(self.gpu, DeviceCollector.name, _plan(
                self.detail, self.board, ecc_on, c2c, self.fan_count or 0).ask)

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
        # A link not yet told of may be now (its mode and count first read);
        # one told of, or told absent, stays so.
        if self._c2c is None and board.c2c_link(self.gpu) is not False:
            self.want(board.C2C_ERROR_WANTS)
        self.read()
        if mode and self._volatile_moved():
            self.want(_AFTER_ECC_ERRORS, now=True)
            self.read()
        self._export(row_set.exports, out, r)
        self.ask_next()

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
    def _export(self, exports: tuple[_Export, ...], out: Series, r: GpuReading) -> None:
        ceilings: dict[Source, float] = {}
        values = self.values
        for (metric, source, series, counter, ceiling, unknown, needs_ceiling, held, is_ceiling,
             name, key, convert) in exports:
            value = values.get(source)
            if value is None or value == unknown:
                continue
            if counter:
                added = out.counter(metric, value, *series)
            else:
                top = ceilings.get(ceiling) if ceiling is not None else None
                if top is None and needs_ceiling:
                    continue
                added = out.gauge(metric, value, *series, ceiling=top)
            if added is None:
                if held:
                    self.forget(source)
                continue
            if is_ceiling:
                ceilings[source] = added
            if name is not None:  # the row's reading: the one copy into GpuReading
                kept = added if convert is None else convert(added)
                if key is None:
                    setattr(r, name, kept)
                else:
                    getattr(r, name)[key] = kept
        for fan in range(_MAX_FANS):
            fan_source = _FANS.get(fan)
            if fan_source is None:
                break
            if fan_source not in values:
                continue  # this fan failed to answer; the next may still
            speed = out.gauge(m.FAN_SPEED_RATIO, values[fan_source], str(fan))
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
        unsupported = gpu.unsupported
        for bit, reason, counter in _REASON_BITS:
            if supported & bit:
                on = bool(active & bit)
                if on:
                    names.add(reason)
                counted = counter is not None and counter.field_key not in unsupported
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
        board.export(self.values, out, r)
        r.board_lacks = self._board_lacks(r.c2c_link)

    def _board_lacks(self, c2c_link: bool | None) -> tuple[str, ...]:
        """board.lacks(), worked out again only when what it is worked out
        from changed: the GPU, what it answered NOT_SUPPORTED (the set grows,
        or a reload forgets it), its C2C mode, its event mask and links."""
        gpu = self.gpu
        static = gpu.static
        marks = (len(gpu.unsupported), c2c_link, static.get("event_types"),
                 static.get("nvlink_count"))
        held = self.lacks.get(gpu.index)
        if held is None or held[0] is not gpu or held[1] != marks:
            held = self.lacks[gpu.index] = (gpu, marks, board.lacks(gpu, c2c_link))
        return held[2]


def _busy(utilization: float | None) -> bool | None:
    """Whether the GPU runs work, for the reads that follow the load."""
    return None if utilization is None else utilization > 0.0


_FANS: dict[int, Source] = {}


def _fan(fan: int) -> Source:
    source = _FANS.get(fan)
    if source is None:
        source = _FANS[fan] = Source(f"fan_{fan}", calls=(Device.fan_speed_ratio,), args=(fan,))
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
