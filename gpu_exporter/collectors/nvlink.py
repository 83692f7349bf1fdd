"""NVLink, on GPUs that have it: per-link state, error counters (CRC, replay,
recovery) and data throughput counters.

By default only each GPU's totals over its links are exported (7 series per
GPU instead of 108 on an 18-link H100): a fleet alerts on a GPU's links, and
the per-link series are one flag away (``--metrics.detail``).

The link state is a field value from R525 on; a driver that does not know the
field (R470) answers it NOT_SUPPORTED, and the state is read link by link with
nvmlDeviceGetNvLinkState, which every branch has (said in the log once).

On NVLink 5 (Blackwell) the links correct errors with FEC, and NVML counts
what FEC saw per link: effective errors (left in packets after FEC), symbol
errors (received symbols in error, corrected) and a bit-error rate for each
(fields 219-222). They are asked in the same call, from the branch that
defines them on (the coverage names them where a board lacks them,
collectors/board.py). From that branch on, Blackwell answers the CRC, replay
and recovery fields NOT_SUPPORTED ("Changes between v560 and v565"): there,
the FEC counts are the links' error counts.

A counter or rate field a GPU answers NOT_SUPPORTED on every link, while
some link is up, is not asked again on that GPU (said in the log once): the
board or driver lacks it. While every link is down, nothing says so: the
field is asked again.

A GPU lost part-way through its read adds no series (all its reads are done
before any series is made), like the device reader's."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from gpu_exporter.catalogs import board as fec_m
from gpu_exporter.catalogs import deep as m
from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.collectors.board import FEC_KEYS, FEC_SINCE
from gpu_exporter.facts.catalog_types import Metric
from gpu_exporter.facts.drivers import branch
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.errors import NvmlError
from gpu_exporter.nvml.session import Gpu, GpuGone, NvmlSession
from gpu_exporter.nvml.values import Ask
from gpu_exporter.poll.readings import NvlinkReading
from gpu_exporter.poll.snapshot import SnapshotBuilder

# One field-values call per GPU and poll reads every link: state, the three
# error counters and both throughput counters (per-link calls would be 4x18).
_PER_LINK = {
    c.FI_DEV_NVLINK_GET_STATE: ("state", ""),
    c.FI_DEV_NVLINK_ERROR_DL_REPLAY: ("errors", "replay"),
    c.FI_DEV_NVLINK_ERROR_DL_RECOVERY: ("errors", "recovery"),
    c.FI_DEV_NVLINK_ERROR_DL_CRC: ("errors", "crc"),
    c.FI_DEV_NVLINK_THROUGHPUT_DATA_TX: ("bytes", "tx"),
    c.FI_DEV_NVLINK_THROUGHPUT_DATA_RX: ("bytes", "rx"),
}

# NVLink 5's FEC counters and bit-error rates, per link, asked where the GPU
# has not answered them NOT_SUPPORTED (FEC_KEYS).
_FEC = {
    c.FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS: ("fec", "effective"),
    c.FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS: ("fec", "symbol"),
    c.FI_DEV_NVLINK_COUNT_EFFECTIVE_BER: ("ber", "effective"),
    c.FI_DEV_NVLINK_COUNT_SYMBOL_BER: ("ber", "symbol"),
}
_ALL_FIELDS = {**_PER_LINK, **_FEC}

# Each field but the state -> the key under which a GPU that answered it
# NOT_SUPPORTED on every link remembers so (Gpu.unsupported): FEC_KEYS' for
# the FEC fields (the coverage names those), of the same form for the others.
_ABSENT_KEY = {fid: FEC_KEYS.get(fid, f"nvlink_field_{fid}") for fid in _ALL_FIELDS
               if fid != c.FI_DEV_NVLINK_GET_STATE}

# The error counters' field ids -> the kind the diagnosis names each by.
_ERROR_KIND = {fid: detail for fid, (kind, detail) in _ALL_FIELDS.items()
               if kind in ("errors", "fec")}


# A link's answer that is a reading (NVML's errors are NvmlError, a pair not
# answered None), and the state field's answer for a link that is up.
_READINGS = {float}
_ACTIVE = float(c.NVLINK_STATE_ACTIVE)


def _readings(gpu: Gpu, fid: int, answers: list[Any], absent: dict[int, NvmlError],
              ) -> list[float | None]:
    """A field's answers link by link, None where a link answered no reading:
    NOT_SUPPORTED is noted in ``absent`` (the board or driver may lack the
    field), any other error counted; the GPU gone raises GpuGone."""
    out: list[float | None] = []
    for answer in answers:
        if isinstance(answer, NvmlError):
            if answer.device_gone:
                raise GpuGone(str(answer))
            if answer.capability_absent:
                absent[fid] = answer
            else:
                gpu.errors += 1
            answer = None
        out.append(answer)
    return out


def link_count(gpu: Gpu, d: Device) -> int:
    """NVML's link-count field, read once; 0 on GPUs without NVLink. A read
    that failed is 0 for this poll only: one failure at start-up must not
    hide a GPU's links for the life of the process."""
    cached = gpu.static.get("nvlink_count")
    if isinstance(cached, int):
        return cached
    # None: the call failed (counted, asked again next poll) or the driver
    # lacks it (Gpu.read asks no more).
    values = gpu.read("nvlink_count", d.field_values, [c.FI_DEV_NVLINK_LINK_COUNT]) or {}
    value = values.get(c.FI_DEV_NVLINK_LINK_COUNT)
    if value is None:
        return 0
    if isinstance(value, NvmlError):
        if value.device_gone:
            raise GpuGone(str(value))
        if not value.capability_absent:
            gpu.errors += 1
            return 0
    count = 0 if isinstance(value, NvmlError) else int(value)
    gpu.static["nvlink_count"] = count
    return count


@dataclass(frozen=True, slots=True)
class _LinkPlan:
    """What one GPU's poll asks and where each answer goes, built once per GPU.

    With --metrics.detail a poll on an NVLink GPU adds 108 series (18 links x
    6 fields): keyword labels mapped to catalog order and str()ed per series
    cost more than the rest of the poll, so the label tuples (catalog order:
    GPU, link, type or direction) are made once, the first time they are
    exported (``link_labels``): without the flag, the default, they would be
    about 0.3 MiB of an eight-GPU node's memory for nothing.
    """

    index: int
    uuid: str
    links: int
    fields: frozenset[int]  # the field ids asked
    request: tuple[tuple[int, int], ...]  # (field id, link), the same tuple every poll
    ask: Ask  # the same, as the NVML layer is handed it
    # field id of a counter -> (the all-links metric, its label values)
    totals: dict[int, tuple[Metric, tuple[str, ...]]]
    # request's pairs a field at a time, with where their answers go: (field
    # id, its pairs link by link, metric, scale (None for the link state),
    # the error kind's (link, kind) keys, empty for a field that is none).
    # A field's links are read together: a poll of an 18-link GPU is some 130
    # answers, nearly always all good.
    groups: tuple[tuple[int, tuple[tuple[int, int], ...], Metric, float | None,
                        tuple[tuple[int, str], ...]], ...]
    # (field id, link) -> the per-link series' label values, the link state's
    # too; empty until a per-link series is first exported.
    labels: dict[tuple[int, int], tuple[str, ...]]

    def link_labels(self) -> dict[tuple[int, int], tuple[str, ...]]:
        if not self.labels:
            base = (str(self.index), self.uuid)
            for fid, (kind, detail) in _ALL_FIELDS.items():
                if fid not in self.fields and kind != "state":
                    continue  # not asked of this GPU (a state is, one way or the other)
                for link in range(self.links):
                    self.labels[fid, link] = (*base, str(link)) if kind == "state" \
                        else (*base, str(link), detail)
        return self.labels


# The scale that marks a packed bit-error rate in a plan's entries.
_PACKED = 0.0

# The key under which a GPU whose driver lacks the state field is remembered
# (Gpu.unsupported): its state is read with the per-link call from then on.
_STATE_FIELD = "nvlink_state_field"


def _asked(gpu: Gpu, driver: str) -> frozenset[int]:
    """The fields asked of the GPU: all but those it answered NOT_SUPPORTED
    on every link, and the FEC fields only from the branch that has them."""
    fec = branch(driver) >= FEC_SINCE
    asked = {fid for fid, key in _ABSENT_KEY.items()
             if key not in gpu.unsupported and (fec or fid not in _FEC)}
    if _STATE_FIELD not in gpu.unsupported:
        asked.add(c.FI_DEV_NVLINK_GET_STATE)
    return frozenset(asked)


# NVML counts NVLink throughput in KiB. A BER's scale is 0: its answer is
# packed, decoded rather than scaled.
_TARGET: dict[str, tuple[Metric, float | None]] = {
    "state": (m.NVLINK_LINK_UP, None), "errors": (m.NVLINK_ERRORS_TOTAL, 1.0),
    "bytes": (m.NVLINK_BYTES_TOTAL, 1024.0), "fec": (fec_m.NVLINK_FEC_ERRORS_TOTAL, 1.0),
    "ber": (fec_m.NVLINK_BIT_ERROR_RATE, _PACKED)}


@functools.cache
def _shape(fields: frozenset[int], links: int) -> tuple[
        tuple[tuple[int, int], ...], Ask,
        tuple[tuple[int, tuple[tuple[int, int], ...], Metric, float | None,
                    tuple[tuple[int, str], ...]], ...]]:
    """What a plan asks of ``links`` links, and its groups: made once for
    every GPU of the same links and fields, not once per GPU (some 250 small
    tuples on an 18-link GPU). Bounded: the subsets of a dozen fields a
    board answers, times the link counts NVML reports."""
    request = tuple((fid, link) for fid in _ALL_FIELDS if fid in fields
                    for link in range(links))
    groups = tuple(
        (fid, request[at * links:(at + 1) * links], *_TARGET[_ALL_FIELDS[fid][0]],
         tuple((link, _ERROR_KIND[fid]) for link in range(links)) if fid in _ERROR_KIND else ())
        for at, fid in enumerate(fid for fid in _ALL_FIELDS if fid in fields))
    return request, Ask.every_poll(request), groups


def _plan(gpu: Gpu, links: int, driver: str) -> _LinkPlan:
    # The plan lives in gpu.static with the link count it was made for: both
    # are made anew when the GPU is (after a reset, Gpu.static is emptied).
    plan = gpu.static.get("nvlink_plan")
    fields = _asked(gpu, driver)
    if isinstance(plan, _LinkPlan) and plan.fields == fields:
        return plan
    base = (str(gpu.index), gpu.identity.uuid)
    request, ask, groups = _shape(fields, links)
    all_links = {"errors": m.NVLINK_ERRORS_ALL_LINKS_TOTAL, "bytes": m.NVLINK_BYTES_ALL_LINKS_TOTAL,
                 "fec": fec_m.NVLINK_FEC_ERRORS_ALL_LINKS_TOTAL}
    totals: dict[int, tuple[Metric, tuple[str, ...]]] = {
        fid: (all_links[kind], (*base, detail))
        for fid, (kind, detail) in _ALL_FIELDS.items() if fid in fields and kind in all_links}
    plan = _LinkPlan(gpu.index, gpu.identity.uuid, links, fields, request, ask, totals,
                     groups, {})
    gpu.static["nvlink_plan"] = plan
    return plan


# The per-link families: the per-link label tuples are made where one is kept.
_PER_LINK_FAMILIES = (m.NVLINK_ERRORS_TOTAL, m.NVLINK_BYTES_TOTAL, fec_m.NVLINK_FEC_ERRORS_TOTAL,
                      fec_m.NVLINK_BIT_ERROR_RATE)

class NvlinkCollector(NvmlCollector):
    name = "nvlink"
    description = "NVLink state, errors and throughput, per GPU (per link with --metrics.detail)"

    def __init__(self, session: NvmlSession) -> None:
        super().__init__(session)
        # GPU UUID -> field id -> each link's last good reading of the counter
        # (None: none yet): a link whose read fails one poll keeps its share of
        # the all-links total, so the total never dips (a dip would read as a
        # counter reset).
        self._last: dict[str, dict[int, list[float | None]]] = {}

    def close(self) -> None:
        self.session.reads.drop(self.name)

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        found: dict[int, NvlinkReading] = {}
        out.readings.nvlink = found
        if not self.session.begin(self.name, out):
            return
        each = self.session.each_gpu()
        for gpu, d in each:
            with each:
                self._collect_gpu(gpu, d, out, found)
        self._errors = each.errors

    def _collect_gpu(self, gpu: Gpu, d: Device, out: SnapshotBuilder,
                     found: dict[int, NvlinkReading]) -> None:
        links = link_count(gpu, d)
        fields = self.session.reads
        if not links:
            fields.ask(gpu, self.name, None)
            return
        driver = self.session.driver_version
        plan = _plan(gpu, links, driver)
        # Handed to the NVML layer as data: the GPU's one field-values call
        # holds these pairs, whichever reader of the GPU makes it.
        fields.ask(gpu, self.name, plan.ask)
        answers = fields.answers(gpu, d, self.name, plan.request)
        # The per-link series are made only where they are exported
        # (--metrics.detail): 108 of them on an 18-link GPU. The totals and the
        # reading come from the same answers either way. They are added once
        # every read is done: a GPU lost part-way adds none.
        per_link = plan.link_labels() if any(out.keeps(f) for f in _PER_LINK_FAMILIES) \
            else None
        series: list[tuple[Metric, tuple[str, ...], float]] = []
        states: dict[int, bool] = {}
        last = self._counters(plan)
        errors: dict[tuple[int, str], float] = {}
        rates: dict[tuple[int, str], float] = {}
        # Field id -> its NOT_SUPPORTED answer, and the ids some link answered.
        absent: dict[int, NvmlError] = {}
        read: set[int] = set()
        get = answers.get
        for fid, pairs, metric, scale, error_keys in plan.groups:
            values: list[Any] = list(map(get, pairs))
            clean = set(map(type, values)) == _READINGS  # every link answered a reading
            if not clean:
                values = _readings(gpu, fid, values, absent)
                if values.count(None) == len(values):
                    continue
            read.add(fid)
            if scale is None:
                for link, value in enumerate(values):
                    if value is not None:
                        states[link] = value == _ACTIVE
            elif scale == _PACKED:
                for link, value in enumerate(values):
                    if value is None:
                        continue
                    if not value.is_integer() or value < 0:
                        gpu.errors += 1  # not the packed form nvml.h describes
                        continue
                    rate = c.nvlink_ber(int(value))
                    if per_link is not None:
                        series.append((metric, per_link[pairs[link]], rate))
                    rates[link, _FEC[fid][1]] = rate
            else:
                if scale != 1.0:
                    values = [None if value is None else value * scale for value in values]
                held = last[fid]
                if clean:
                    held[:links] = values
                    if error_keys:
                        errors.update(zip(error_keys, values, strict=True))
                else:
                    for link, value in enumerate(values):
                        if value is not None:
                            held[link] = value
                    if error_keys:
                        errors.update((key, value) for key, value
                                      in zip(error_keys, values, strict=True) if value is not None)
                if per_link is not None:
                    series.extend((metric, per_link[pair], value) for pair, value
                                  in zip(pairs, values, strict=True) if value is not None)
        state_absent = absent.pop(c.FI_DEV_NVLINK_GET_STATE, None)
        if state_absent is not None and not states:
            # A driver before R525: the field is unknown; ask link by link from now on.
            gpu.unsupported.add(_STATE_FIELD)
            gpu.missing.note(gpu.index, _STATE_FIELD, NvmlError(
                state_absent.code, "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_GET_STATE)"))
        if _STATE_FIELD in gpu.unsupported:
            states = self._states_by_call(gpu, d, links)
        # A link up answers for the board: what it answers NOT_SUPPORTED, the
        # board or driver lacks.
        if any(states.values()):
            self._forget_absent(gpu, absent, read)
        if state_absent is not None or absent:
            # What the GPU lacks is not asked next poll, by any reader first.
            fields.ask(gpu, self.name, _plan(gpu, links, driver).ask)
        add = out.add_values
        for metric, labels, number in series:
            add(metric, labels, number)
        if out.keeps(m.NVLINK_LINK_UP):
            link_labels = plan.link_labels()
            for link, active in states.items():
                add(m.NVLINK_LINK_UP, link_labels[c.FI_DEV_NVLINK_GET_STATE, link], active)
        base = (str(gpu.index), plan.uuid)
        add(m.NVLINK_LINKS, base, links)
        up = sum(states.values())
        if states:  # never a 0 that only means "not read"
            add(m.NVLINK_LINKS_ACTIVE, base, up)
        for fid, (metric, labels) in plan.totals.items():
            # [:links]: a GPU back from a reset with fewer links has its
            # other links' last readings kept aside, not counted.
            kept = [v for v in last[fid][:links] if v is not None]
            if kept:
                add(metric, labels, sum(kept))
        worst: dict[str, float] = {}
        for (_link, kind), rate in rates.items():
            worst[kind] = max(rate, worst.get(kind, 0.0))
        for kind, rate in worst.items():
            add(fec_m.NVLINK_BIT_ERROR_RATE_WORST_LINK, (*base, kind), rate)
        found[gpu.index] = NvlinkReading(links, up, errors, rates)

    @staticmethod
    def _forget_absent(gpu: Gpu, absent: dict[int, NvmlError], read: set[int]) -> None:
        """A field no link answered, NOT_SUPPORTED: the board or driver lacks
        it; it is not asked again on this GPU (the plan is made anew)."""
        for fid, error in absent.items():
            if fid in read:
                continue
            gpu.unsupported.add(_ABSENT_KEY[fid])
            gpu.missing.note(gpu.index, _ABSENT_KEY[fid], NvmlError(
                error.code, f"nvmlDeviceGetFieldValues(field {fid})"))

    def _counters(self, plan: _LinkPlan) -> dict[int, list[float | None]]:
        """The GPU's last good counter readings, one per link of the plan
        (those of links it no longer has kept aside)."""
        last = self._last.setdefault(plan.uuid, {})
        for fid in plan.totals:
            held = last.setdefault(fid, [])
            held.extend([None] * (plan.links - len(held)))  # nothing where it has as many
        return last

    @staticmethod
    def _states_by_call(gpu: Gpu, d: Device, links: int) -> dict[int, bool]:
        """Each link's state through nvmlDeviceGetNvLinkState, but a link whose
        call failed; {} where the call is absent too (the series stay absent:
        once it answered NOT_SUPPORTED, Gpu.read asks no more)."""
        states: dict[int, bool] = {}
        for link in range(links):
            active = gpu.read("nvlink_state_call", d.nvlink_active, link)
            if active is not None:
                states[link] = active
        return states
