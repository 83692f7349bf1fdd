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
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.errors import NvmlError
from gpu_exporter.nvml.session import Gpu, GpuGone

log = logging.getLogger(__name__)

Call = Callable[..., Any]
Request = tuple[tuple[int, int], ...]
Answers = dict[tuple[int, int], float | NvmlError]


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


def read(gpu: Gpu, device: Device, sources: Iterable[Source], *,
         also: Request = ()) -> tuple[dict[Source, Any], Answers]:
    """``sources``' values (None where there is none this poll), and the
    answers to the (field id, scope id) pairs of ``also`` (another reader's
    fields, asked in the same call).

    Raises GpuGone when the GPU itself went away.
    """
    wanted = list(sources)
    unsupported = gpu.unsupported
    # A driver without the call at all (or refusing it): every value through its own.
    batched = "field_values" not in unsupported
    own = tuple(dict.fromkeys(
        (s.field, 0) for s in wanted
        if batched and s.field is not None and s.field_key not in unsupported))
    request = _request(gpu, own, also)
    answers: Answers = {}
    if request:
        answers = gpu.read("field_values", device.scoped_field_values, request) or {}
        batched = "field_values" not in unsupported
    values: dict[Source, Any] = {}
    called: dict[tuple[tuple[Call, ...], tuple[int, ...]], Any] = {}
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
            called[key] = _call(gpu, device, source)
        whole = called[key]
        values[source] = whole if whole is None or source.part is None else whole[source.part]
    return values, answers


def _request(gpu: Gpu, own: Request, also: Request) -> Request:
    """The pairs of one nvmlDeviceGetFieldValues call: ``own``, then those of
    ``also`` not among them. The same tuple as the GPU's last call where it
    asks the same: a poll's call holds some 130 pairs on an NVLink GPU, and
    the array for a request is prepared once per distinct tuple."""
    last_own, last_also, last = gpu.field_request
    if own == last_own and also == last_also:
        return last
    request = tuple(dict.fromkeys(own + also)) if also else own
    gpu.field_request = (own, also, request)
    return request


def _call(gpu: Gpu, device: Device, source: Source) -> Any:
    """The first call of the chain that answers; the next is tried only where
    the one before is absent for good (NOT_SUPPORTED, a symbol this branch
    lacks), never after a refusal (the older call is refused the same way)."""
    for index, fn in enumerate(source.calls):
        key = source.call_key(index)
        value = gpu.read(key, fn, device, *source.args)
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


def fields(gpu: Gpu, device: Device, request: Sequence[tuple[int, int]]) -> Answers | None:
    """One nvmlDeviceGetFieldValues call of its own (None where it failed)."""
    return gpu.read("field_values", device.scoped_field_values, tuple(request))
