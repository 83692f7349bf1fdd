"""A GPU's values in one pass: every field a poll wants of the GPU in one
nvmlDeviceGetFieldValues call, the rest through their own calls, each call
made once however many values it answers, every value in base units.

A :class:`Source` says how NVML answers one value: as a field (NVML's
``NVML_FI_DEV_*`` id and the scale from its unit to the base unit) where the
driver branch has the field, else through its own call (an adapter method,
which converts), or through a chain of calls (a newer one, then its older
name). A field that a branch answers NOT_SUPPORTED in its own return code is
never asked again on that GPU, and its value comes from the call from then on,
in the same poll: nothing is lost on a branch without the field, and nothing is
asked twice on one with it.

What the readers read of a GPU between polls lives here too, one
:class:`GpuReads` per GPU in the session's :class:`FieldValues`: the values
read on a cadence, and this poll's field values. Each reader that asks fields
hands the layer what it asks of a GPU as data, an :class:`Ask` (its fields and
their cadences, :meth:`FieldValues.ask`), for this poll and the next; the
layer works out which of them are due when the GPU's one call is made. The
first reader of a GPU in a poll, whichever it is, makes that call with every
reader's due fields, and the others take their answers from it. So the
readers share nothing through the GPU, the order they run in does not matter,
and the layer never calls back into a reader.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.errors import NvmlError
from gpu_exporter.nvml.gpu import Gpu, GpuGone

log = logging.getLogger(__name__)

Call = Callable[..., Any]
Request = tuple[tuple[int, int], ...]
Answers = dict[tuple[int, int], float | NvmlError]
# An Ask entry's cadence for a value read once per GPU (kept in Gpu.static).
ONCE = 0
# What GpuReads.status() gives for a value to be read this poll (any other
# entry is the value as last read).
DUE: Any = object()
# An Ask's due requests kept: the cadences make a handful of them.
_REQUESTS_HELD = 64


@dataclass(frozen=True, eq=False)
class Source:
    """How NVML answers one value of a GPU (compared by identity: one per value).

    ``key`` names it in the GPU's memory of what it cannot answer and of its
    slow reads (and in the log). ``calls`` are adapter methods, called with the
    device and ``args``; the first that is not absent for good answers. A
    field's answer times ``scale`` over ``per`` is the value in base units.
    ``part`` picks one value of a call that answers several (utilization's
    GPU and memory shares, memory's total, reserved and used).
    """

    key: str
    field: int | None = None
    scale: float = 1.0
    calls: tuple[Call, ...] = ()
    # The field's unit per base unit (1000 for mW): divided, as the adapter's
    # own conversions divide, so both routes give the same float.
    per: float = 1.0
    args: tuple[int, ...] = ()
    part: int | None = None

    def __post_init__(self) -> None:
        if self.field is None and not self.calls:
            raise ValueError(f"{self.key}: neither a field nor a call")

    # Made once: every poll asks for them of every value of every GPU.
    @cached_property
    def field_key(self) -> str:
        return f"field_{self.field}"

    @cached_property
    def _call_keys(self) -> tuple[str, ...]:
        args = f"({', '.join(map(str, self.args))})" if self.args else ""
        return tuple(fn.__name__ + args for fn in self.calls)

    def call_key(self, index: int) -> str:
        """How the GPU remembers the index-th call of the chain."""
        return self._call_keys[index]


@dataclass(frozen=True, eq=False)
class Ask:
    """What one reader asks of a GPU, handed to the layer as data, never as a
    function it calls back. Each entry: the (field id, scope id) pair its
    value is asked as (None: a value read through its own call, whose cadence
    the layer keeps all the same), the key its value is held under, the key
    that marks its field absent on a GPU ("" for none), and how often it is
    read in polls (1: every poll; ONCE: once per GPU).

    Compared by identity: a reader makes one per shape of what it asks."""

    entries: tuple[tuple[tuple[int, int] | None, str, str, int], ...]
    # A due request -> itself: the same tuple each poll that asks the same
    # (the field-values call prepares its array once per distinct tuple).
    _requests: dict[Request, Request] = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def every_poll(cls, pairs: Request) -> Ask:
        """Fields asked every poll whatever the GPU answered before."""
        ask = cls(tuple((pair, "", "", 1) for pair in pairs))
        ask._requests[pairs] = pairs
        return ask

    @cached_property
    def always(self) -> Request | None:
        """The request itself where every entry is a field asked every poll
        (nothing to work out per poll), else None."""
        if all(pair is not None and not absent and polls == 1
               for pair, _, absent, polls in self.entries):
            return self.request([pair for pair, _, _, _ in self.entries if pair is not None])
        return None

    def request(self, pairs: list[tuple[int, int]]) -> Request:
        made = tuple(dict.fromkeys(pairs))
        held = self._requests.get(made)
        if held is None:
            if len(self._requests) >= _REQUESTS_HELD:
                self._requests.clear()
            held = self._requests[made] = made
        return held


def _field_answer(gpu: Gpu, source: Source, answer: float | NvmlError | None) -> tuple[bool, Any]:
    """(answered, the value in base units). Not answered: the field is absent
    for good on this GPU (its call answers instead), or failed this once."""
    if answer is None:
        return False, None
    if isinstance(answer, NvmlError):
        if answer.device_gone:
            raise GpuGone(str(answer))
        if answer.capability_absent:
            gpu.unsupported.add(source.field_key)
            gpu.missing.note(gpu.index, source.field_key, NvmlError(
                answer.code, f"nvmlDeviceGetFieldValues({source.key})"))
            return False, None
        gpu.errors += 1
        if source.field_key not in gpu.warned:
            gpu.warned.add(source.field_key)
            log.warning("GPU %d: reading %s failed: %s", gpu.index, source.key,
                        NvmlError(answer.code, f"nvmlDeviceGetFieldValues({source.key})"))
        return True, None
    return True, answer * source.scale / source.per


def read(fields: FieldValues, gpu: Gpu, device: Device, sources: Iterable[Source], *,
         reader: str, pairs: Request | None = None) -> dict[Source, Any]:
    """``sources``' values (None where there is none this poll): their fields
    from this poll's field values of the GPU (``reader``'s share of them),
    the others through their own calls. ``pairs``: field_pairs() of
    ``sources``, where the caller worked it out already.

    Raises GpuGone when the GPU itself went away.
    """
    wanted = list(sources)
    unsupported = gpu.unsupported
    own = field_pairs(gpu, wanted) if pairs is None else pairs
    answers: Answers = fields.answers(gpu, device, reader, own) if own else {}
    # A driver without the call at all (or refusing it): every value through its own.
    batched = "field_values" not in unsupported
    values: dict[Source, Any] = {}
    called: dict[tuple[tuple[Call, ...], tuple[int, ...]], Any] = {}
    reads = fields.of(gpu)
    for source in wanted:
        if source in values:
            continue
        if batched and source.field is not None and source.field_key not in unsupported:
            answer = answers.get((source.field, 0))
            if type(answer) is float:  # the common case, inline: a value
                values[source] = answer * source.scale / source.per
                continue
            answered, value = _field_answer(gpu, source, answer)
            if answered or source.field_key not in unsupported:
                values[source] = value
                continue
        if not source.calls:
            values[source] = None
            continue
        key = (source.calls, source.args)
        if key not in called:
            called[key] = _call(reads, device, source)
        whole = called[key]
        values[source] = whole if whole is None or source.part is None else whole[source.part]
    return values


def field_pairs(gpu: Gpu, sources: Iterable[Source]) -> Request:
    """The (field id, 0) pairs ``sources`` are asked as, once each: none
    where the GPU lacks the field-values call, nor for a field it lacks."""
    unsupported = gpu.unsupported
    if "field_values" in unsupported:
        return ()
    return tuple(dict.fromkeys(
        (s.field, 0) for s in sources
        if s.field is not None and s.field_key not in unsupported))


def _call(reads: GpuReads, device: Device, source: Source) -> Any:
    """The first call of the chain that answers; the next is tried only where
    the one before is absent for good (NOT_SUPPORTED, a symbol this branch
    lacks), never after a refusal (the older call is refused the same way)."""
    gpu = reads.gpu
    for index, fn in enumerate(source.calls):
        key = source.call_key(index)
        value = reads.call(key, fn, device, *source.args)
        if value is not None or key not in gpu.unsupported or key in gpu.denied:
            return value
    return None


def offered(gpu: Gpu, source: Source) -> bool | None:
    """Whether NVML offers ``source`` on this GPU: False where every route to
    it is absent for good (its field and each of its calls answered
    NOT_SUPPORTED, or this driver lacks the symbol: a fact of the board and
    driver), None where NVML refused one of them (NO_PERMISSION: a matter of
    the exporter's access, not of the board), True otherwise (read, or failed
    only this once)."""
    unsupported, denied = gpu.unsupported, gpu.denied
    keys = [source.call_key(i) for i in range(len(source.calls))]
    if source.field is not None:
        keys.append(source.field_key)
    if any(key in denied for key in keys) or (source.field is not None
                                              and "field_values" in denied):
        return None
    field_gone = (source.field is None or source.field_key in unsupported
                  or "field_values" in unsupported)
    return not (field_gone and all(key in unsupported for key in keys[:len(source.calls)]))


class GpuReads:
    """What the readers read of one GPU between polls (made anew with the
    GPU: at discovery, and when it comes back from being lost)."""

    def __init__(self, gpu: Gpu) -> None:
        self.gpu = gpu
        # Polls this GPU has been read in: the clock of the reads on a cadence.
        self.polls = 0
        # The session's poll this GPU was last read in.
        self.poll = -1
        # Values read on a cadence, by key: (the poll they were read at, the
        # epoch then, the value).
        self.slow: dict[str, tuple[int, int, object]] = {}
        # Bumped where something may have changed what the slow reads hold (an
        # NVML event on the GPU, a reload): each of them is read again at once.
        self.epoch = 0
        # This poll's field values: the answers, the pairs asked, whether the
        # one call that asked them failed, and the readers told so.
        self.answers: Answers | None = None
        self.asked: AbstractSet[tuple[int, int]] = frozenset()
        self.failed = False
        self.charged: set[str] = set()
        # This poll's answers of calls by key (call()), for every reader.
        self.called: dict[str, object] = {}
        # The last call's request and the providers' requests it was made of:
        # the same tuple where they ask the same (the array for a request is
        # prepared once per distinct tuple; an NVLink GPU's holds some 130 pairs).
        self.made_of: tuple[Request, ...] = ()
        self.request: Request = ()
        self.request_pairs: frozenset[tuple[int, int]] = frozenset()  # the request's, as a set
        # status() of each Ask this poll, and the (polls, epoch) it was worked
        # out at: worked out once a poll however many readers ask.
        self._status: dict[Ask, tuple[list[Any], Request]] = {}
        self._status_at = (-1, -1)

    def begin(self, poll: int) -> None:
        self.poll = poll
        self.polls += 1
        self.answers = None
        self.failed = False
        self.charged.clear()
        self.called.clear()

    def call(self, key: str, fn: Callable[..., Any], *args: object) -> Any:
        """Gpu.read(), made once a poll for every reader of the GPU: the first
        to ask makes the call, whichever it is, and the others take its answer."""
        if key in self.called:
            return self.called[key]
        value = self.called[key] = self.gpu.read(key, fn, *args)
        return value

    def status(self, ask: Ask) -> tuple[list[Any], Request]:
        """For each of ``ask``'s entries, its value as last read where it is
        not due this poll, else DUE; and the due fields' pairs, as the GPU's
        field-values call asks them (none for a field the GPU lacks, nor where
        it lacks the call). Worked out from what the GPU held when the poll
        began, however late a reader asks."""
        at = (self.polls, self.epoch)
        if at != self._status_at:
            self._status.clear()
            self._status_at = at
        held_now = self._status.get(ask)
        if held_now is not None:
            return held_now
        gpu = self.gpu
        static, slow, polls_now, epoch = gpu.static, self.slow, self.polls, self.epoch
        unsupported = gpu.unsupported
        status: list[Any] = []
        pairs: list[tuple[int, int]] = []
        # due() and held() inline: a device pass has some 40 entries.
        for pair, key, absent, polls in ask.entries:
            if polls == ONCE:
                if key in static:
                    status.append(static[key])
                    continue
            elif polls != 1:
                held = slow.get(key)
                if held is not None and polls_now - held[0] < polls and held[1] == epoch:
                    status.append(held[2])
                    continue
            status.append(DUE)
            if pair is not None and absent not in unsupported:
                pairs.append(pair)
        request = () if "field_values" in unsupported else ask.request(pairs)
        held_now = self._status[ask] = (status, request)
        return held_now

    def request_of(self, ask: Ask) -> Request:
        """The pairs ``ask`` has due this poll."""
        always = ask.always
        if always is not None:
            return () if "field_values" in self.gpu.unsupported else always
        return self.status(ask)[1]

    # --- values read on a cadence -------------------------------------------
    def due(self, key: str, every: int) -> bool:
        """Whether the value read on a cadence under ``key`` is to be read this
        poll: never read, read ``every`` polls ago or more, or read before the
        last event that may have changed it (refresh())."""
        held = self.slow.get(key)
        return held is None or self.polls - held[0] >= every or held[1] != self.epoch

    def hold(self, key: str, every: int, value: object) -> None:
        """Keep ``value``, read this poll, until it is due again; None forgets
        it (asked again next poll). GPUs start their cadence at different
        offsets, so their slow reads fall on different polls."""
        if value is None:
            self.slow.pop(key, None)
            return
        start = self.polls - (self.gpu.index % every if key not in self.slow else 0)
        self.slow[key] = (start, self.epoch, value)

    def held(self, key: str) -> object | None:
        """The value last kept under ``key``, or None."""
        held = self.slow.get(key)
        return None if held is None else held[2]

    def forget(self, key: str) -> None:
        """A held value that was no reading: asked again next poll."""
        self.slow.pop(key, None)

    def refresh(self) -> None:
        """Something happened to the GPU (an NVML event, a reload): every
        value read on a cadence is read again at its reader's next poll.
        Safe from another thread: one integer written."""
        self.epoch += 1

    def slow_read(self, key: str, fn: Callable[..., Any], *args: object, every: int,
                  now: bool = False) -> Any:
        """Like Gpu.read(), but a value read less than ``every`` polls ago (and
        since the last refresh()) is answered again without asking NVML,
        unless ``now``. For facts that change rarely: NVML calls are the cost
        of a poll on a real node."""
        if not now and not self.due(key, every):
            return self.held(key)
        value = self.gpu.read(key, fn, *args)
        self.hold(key, every, value)
        return value


class FieldValues:
    """The session's reads of its GPUs: each GPU's :class:`GpuReads`, the
    poll the session is in, and what each reader wants of a GPU's fields."""

    def __init__(self) -> None:
        self.poll = 0
        self._gpus: dict[int, GpuReads] = {}
        # GPU index -> reader -> what it asks of the GPU. Kept by index, not
        # with the GPU's reads: a GPU made anew is asked what it was asked
        # before at once, and each reader hands its Ask again as it reads.
        self._asks: dict[int, dict[str, Ask]] = {}
        # A GPU's whole request -> it and its pairs as a set, shared by the GPUs
        # that ask the same.
        self._shared: dict[Request, tuple[Request, frozenset[tuple[int, int]]]] = {}

    def ask(self, gpu: Gpu, reader: str, ask: Ask | None) -> None:
        """What ``reader`` asks of the GPU from now on (None: nothing): the
        one call the first reader of the GPU makes in a poll holds its due
        fields. A reader hands it as it reads, and what the next poll will
        ask where that changed, so whichever reader comes first next poll
        asks for all."""
        asks = self._asks.setdefault(gpu.index, {})
        if ask is None:
            asks.pop(reader, None)
        else:
            asks[reader] = ask

    def drop(self, reader: str) -> None:
        """The reader is gone: nothing is asked for it any more."""
        for asks in self._asks.values():
            asks.pop(reader, None)

    def next_poll(self) -> None:
        self.poll += 1

    def track(self, gpus: Iterable[Gpu]) -> None:
        """These GPUs, found anew: nothing read of any GPU before is kept."""
        self._gpus = {gpu.index: GpuReads(gpu) for gpu in gpus}
        self._asks = {index: asks for index, asks in self._asks.items() if index in self._gpus}

    def renew(self, gpu: Gpu) -> None:
        """The GPU came back (it may have been reset): nothing read before is kept."""
        self._gpus[gpu.index] = GpuReads(gpu)

    def held_for(self, gpu: Gpu) -> GpuReads:
        """The GPU's reads as they stand (its poll not begun)."""
        reads = self._gpus.get(gpu.index)
        if reads is None or reads.gpu is not gpu:
            reads = self._gpus[gpu.index] = GpuReads(gpu)
        return reads

    def of(self, gpu: Gpu) -> GpuReads:
        """The GPU's reads, this poll's begun where no reader began it yet."""
        reads = self.held_for(gpu)
        if reads.poll != self.poll:
            reads.begin(self.poll)
        return reads

    def answers(self, gpu: Gpu, device: Device, reader: str, request: Request) -> Answers:
        """This poll's answers for the GPU's fields, ``request``'s among them.
        The first reader to ask makes the one call with every reader's due
        pairs; a pair no Ask held is asked in a call of its own. A failed call
        is a read error of each reader it answered."""
        reads = self.of(gpu)
        if reads.answers is None:
            wanted = tuple(reads.request_of(ask)
                           for ask in self._asks.get(gpu.index, {}).values())
            if wanted != reads.made_of:
                request = tuple(dict.fromkeys(pair for asked in wanted for pair in asked))
                # One copy for every GPU of the same shape (an NVLink GPU's
                # request holds some 130 pairs, its set some 8 KiB).
                shared = self._shared.get(request)
                if shared is None:
                    if len(self._shared) >= _REQUESTS_HELD:
                        self._shared.clear()
                    shared = self._shared[request] = (request, frozenset(request))
                reads.request, reads.request_pairs = shared
                reads.made_of = wanted
            reads.answers, reads.failed = self._call(gpu, device, reads.request)
            reads.asked = reads.request_pairs
        answers = reads.answers
        # A provider's request as it provided it was asked whole: nothing to look up.
        if not any(request is made for made in reads.made_of):
            missing = tuple(pair for pair in request if pair not in reads.asked)
            if missing:
                more, failed = self._call(gpu, device, missing)
                answers = reads.answers = {**answers, **more}
                reads.asked = reads.asked | frozenset(missing)
                gpu.errors += failed
        if reads.failed and reader not in reads.charged:
            reads.charged.add(reader)
            gpu.errors += 1
        return answers

    @staticmethod
    def _call(gpu: Gpu, device: Device, request: Request) -> tuple[Answers, bool]:
        """One nvmlDeviceGetFieldValues call: its answers, and whether it
        failed this once (counted by the caller)."""
        if not request or "field_values" in gpu.unsupported:
            return {}, False
        errors = gpu.errors
        answers = gpu.read("field_values", device.scoped_field_values, request)
        failed = gpu.errors > errors
        gpu.errors = errors
        return answers or {}, failed
