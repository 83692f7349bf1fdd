"""The recording file format (``gpu-exporter record`` writes it, ``--simulate``
reads it): a scenario whose ``replay`` holds what every NVML call answered, poll
by poll, made checkable before anything replays it.

- ``recording: {format: 2, polls: N}`` is its first key: the format version and
  how many polls it holds;
- its last line, ``# end of recording: N polls, sha256 HEX``, is the SHA-256 of
  every byte before it: a file cut short anywhere, or changed by a byte, does
  not match;
- every recorded answer is validated (types, units, ranges, NVML's error
  names, GPU indices within the node): a recording that passes replays, one
  that does not is refused in one line, never replayed as a healthy node.

Format 1 (before the header and the end line) cannot be told from a file cut
short: it is refused with the advice to record again.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from gpu_exporter.nvml.constants import THROTTLE_TIME_FIELDS
from gpu_exporter.nvml.errors import Return
from gpu_exporter.settings import safefile
from gpu_exporter.settings.sections import (
    Parse,
    Section,
    StrictSection,
    ValidationError,
    setting,
)
from gpu_exporter.simulator.model import GpuCondition

FORMAT = 2
HEADER = "recording"
MAX_POLLS = 100_000
_END = re.compile(rb"# end of recording: (\d{1,9}) polls, sha256 ([0-9a-f]{64})\n\Z")
_HEADER_LINE = re.compile(rb"^recording:", re.MULTILINE)
RERECORD = "record it again with `gpu-exporter record`"


class RecordingRefused(ValueError):
    """What is wrong with a recording, and where (one line, without the file)."""


def seal(body: str, polls: int) -> str:
    """``body`` (a recording's YAML, header first) with its end line."""
    if not body.endswith("\n"):
        body += "\n"
    digest = hashlib.sha256(body.encode()).hexdigest()
    return f"{body}# end of recording: {polls} polls, sha256 {digest}\n"


def header(polls: int) -> dict[str, Any]:
    return {HEADER: {"format": FORMAT, "polls": polls}}


def looks_sealed(data: bytes) -> bool:
    """Whether the file says it is a recording of format 2 or later (a
    top-level ``recording:`` key): it is then checked as one."""
    return _HEADER_LINE.search(data) is not None


def check_seal(data: bytes) -> int:
    """The polls the end line counts, once the bytes before it match its SHA-256."""
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    end = _END.match(data, start)
    if end is None:
        raise RecordingRefused("cut short: its last line is not the end of a recording "
                               f"(\"# end of recording: N polls, sha256 ...\"); {RERECORD}, "
                               "or copy the whole file")
    if hashlib.sha256(data[:start]).hexdigest() != end.group(2).decode():
        raise RecordingRefused("corrupted: its bytes do not match the SHA-256 of its last "
                               f"line (changed since it was recorded); {RERECORD}")
    return int(end.group(1))


# --- what a recording holds ---------------------------------------------------------------
def _error_name(name: Any) -> Any:
    # Before the type's check: a value that is no text is refused by it.
    if isinstance(name, str) and name not in Return.__members__:
        raise ValueError(f"unknown NVML error {name[:40]!r}")
    return name


ErrorName = Annotated[str, Parse(_error_name)]  # as NVML names it: NOT_SUPPORTED
GpuIndex = int


class RecordedRates(StrictSection):
    """GPM's rates over the poll (ratios 0-1; PCIe in bytes per second)."""

    sm_active: float | None = setting(None, ge=0.0, le=1.0)
    sm_occupancy: float | None = setting(None, ge=0.0, le=1.0)
    tensor_active: float | None = setting(None, ge=0.0, le=1.0)
    dram_active: float | None = setting(None, ge=0.0, le=1.0)
    pcie_tx_bytes_per_s: float | None = setting(None, ge=0.0)
    pcie_rx_bytes_per_s: float | None = setting(None, ge=0.0)


class RecordedProcess(StrictSection):
    pid: int = setting(gt=0, lt=2**32)
    used_bytes: int = setting(ge=0)
    gpu_instance: int | None = setting(ge=0, lt=2**32)
    compute_instance: int | None = setting(ge=0, lt=2**32)
    graphics: bool


class RecordedMigSlot(StrictSection):
    uuid: str = setting("", max_length=128)
    gpu_instance: int = setting(0, ge=0, le=64)
    compute_instance: int = setting(0, ge=0, le=64)
    profile_id: int = setting(0, ge=0)
    memory_total: int = setting(0, ge=0)
    memory_used: int = setting(0, ge=0)
    sm_active: float = setting(0.0, ge=0.0, le=1.0)


_Text = setting(None, max_length=256)
def _ecc(v: dict[str, int] | None) -> dict[str, int] | None:
    for key, count in (v or {}).items():
        if re.fullmatch(r"[01]/[01]", key) is None or count < 0:
            raise ValueError(f"expected 'type/counter' (0 or 1 each) -> a count, got "
                             f"{key[:20]!r}: {count}")
    return v


def _throttle(v: dict[str, int] | None) -> dict[str, int] | None:
    known = set(THROTTLE_TIME_FIELDS.values())
    for reason, ns in (v or {}).items():
        if reason not in known or ns < 0:
            raise ValueError(f"expected a counted throttle reason ({', '.join(sorted(known))})"
                             f" -> nanoseconds, got {reason[:40]!r}: {ns}")
    return v


def _non_negative(v: dict[int, int] | None) -> dict[int, int] | None:
    for key, value in (v or {}).items():
        if key < 0 or value < 0:
            raise ValueError(f"expected non-negative keys and values, got {key}: {value}")
    return v


def _verdict(field: str) -> Callable[[str | None], str | None]:
    """The driver's verdicts replay as a scenario's condition: the values it takes."""
    def check(v: str | None) -> str | None:
        if v is not None:
            try:
                GpuCondition.model_validate({field: v})
            except ValidationError as exc:
                raise ValueError(exc.errors()[0]["msg"]) from None
        return v
    return check


_Mhz = dict[int, int]
_COUNTS = setting(None, check=_non_negative)


class RecordedGpu(StrictSection):
    """What changed on one GPU since the previous poll, in NVML's units (the
    recorder's keys; see gpu_exporter/recording.py)."""

    errors: dict[str, ErrorName] | None = None  # C function -> the error it answered
    lost: bool | None = None
    name: str | None = _Text
    uuid: str | None = _Text
    serial: str | None = _Text
    bus_id: str | None = _Text
    vbios: str | None = _Text
    architecture: str | None = _Text
    cc: str | None = setting(None, pattern=r"^\d{1,3}\.\d{1,3}$")
    util_pct: int | None = setting(None, ge=0, le=100)
    mem_util_pct: int | None = setting(None, ge=0, le=100)
    mem_total: int | None = setting(None, ge=0)
    mem_reserved: int | None = setting(None, ge=0)
    mem_used: int | None = setting(None, ge=0)
    temp_c: int | None = setting(None, ge=-273, le=1000)
    mem_temp_c: int | None = setting(None, ge=-273, le=1000)
    thresholds: dict[int, int] | None = _COUNTS
    pcie_tx_bytes: int | None = setting(None, ge=0)
    pcie_rx_bytes: int | None = setting(None, ge=0)
    ecc: dict[str, int] | None = setting(None, check=_ecc)  # "type/counter" -> count
    nvlink_count: int | None = setting(None, ge=0, le=36)
    recovery_action: str | None = setting(None, check=_verdict("recovery_action"))
    fabric_capable: bool | None = None
    fabric_state: str | None = setting(None, check=_verdict("fabric_state"))
    fabric_status: str | None = setting(None, check=_verdict("fabric_status"))
    fabric_health: str | None = setting(None, check=_verdict("fabric_health"))
    throttle_ns: dict[str, int] | None = setting(None, check=_throttle)
    field_errors: dict[int, ErrorName] | None = None
    power_mw: int | None = setting(None, ge=0)
    limit_mw: int | None = setting(None, ge=0)
    default_limit_mw: int | None = setting(None, ge=0)
    energy_mj: int | None = setting(None, ge=0)
    clocks_mhz: _Mhz | None = _COUNTS
    max_clocks_mhz: _Mhz | None = _COUNTS
    app_clocks_mhz: _Mhz | None = _COUNTS
    default_app_clocks_mhz: _Mhz | None = _COUNTS
    pstate: int | None = setting(None, ge=0, le=32)
    fans_pct: dict[int, int] | None = _COUNTS
    reasons: int | None = setting(None, ge=0, lt=2**64)
    supported_reasons: int | None = setting(None, ge=0, lt=2**64)
    pcie_gen: int | None = setting(None, ge=0, le=16)
    pcie_max_gen: int | None = setting(None, ge=0, le=16)
    pcie_width: int | None = setting(None, ge=0, le=64)
    pcie_max_width: int | None = setting(None, ge=0, le=64)
    pcie_replays: int | None = setting(None, ge=0)
    ecc_enabled: bool | None = None
    remapped: list[int] | None = setting(None, min_length=4, max_length=4)
    persistence: bool | None = None
    processes: list[RecordedProcess] | None = setting(None, max_length=4096)
    process_sm_pct: dict[int, int] | None = _COUNTS
    gpm_supported: bool | None = None
    rates: RecordedRates | None = None
    event_types: int | None = setting(None, ge=0, lt=2**64)
    nvlink_up: dict[int, bool] | None = None
    nvlink_errors: dict[int, dict[int, int]] | None = None
    nvlink_tx_kib: dict[int, int] | None = _COUNTS
    nvlink_rx_kib: dict[int, int] | None = _COUNTS
    mig_capable: bool | None = None
    mig_on: bool | None = None
    mig: dict[int, RecordedMigSlot] | None = None



class RecordedEvent(StrictSection):
    t: float = setting(ge=0.0)
    gpu: GpuIndex = setting(ge=0)
    xid: int = setting(ge=0, lt=2**32)
    # The MIG GPU instance NVML's event named (absent: the whole GPU).
    gpu_instance: int | None = setting(None, ge=0, lt=2**32)


class RecordedPoll(StrictSection):
    t: float = setting(ge=0.0)
    gpus: dict[GpuIndex, RecordedGpu]


class RecordedReplay(StrictSection):
    polls: list[RecordedPoll] = setting(min_length=1, max_length=MAX_POLLS)
    events: list[RecordedEvent] = setting(default_factory=list, max_length=MAX_POLLS)


class RecordingHeader(StrictSection):
    format: int
    polls: int = setting(ge=1, le=MAX_POLLS)


def check_document(doc: dict[str, Any], sealed_polls: int | None) -> None:
    """A parsed recording's header and replay, against each other, the node
    and its end line (``sealed_polls``: None without one)."""
    head = doc.get(HEADER)
    if head is None or sealed_polls is None:
        raise RecordingRefused(f"a recording without a format version (format 1, or cut "
                               f"short before its end line): {RERECORD}")
    if isinstance(head, dict) and isinstance(head.get("format"), int) \
            and head["format"] != FORMAT:
        raise RecordingRefused(f"{HEADER}.format: format {head['format']} is not one this "
                               f"gpu-exporter reads (format {FORMAT}); {RERECORD}, or "
                               "replay it with the gpu-exporter that recorded it")
    header_ = _validated(RecordingHeader, head, HEADER)
    replay = _validated(RecordedReplay, doc.get("replay"), "replay")
    counted = {"its header": header_.polls, "its end line": sealed_polls,
               "its replay": len(replay.polls)}
    if len(set(counted.values())) != 1:
        raise RecordingRefused("inconsistent: the polls it holds are counted "
                               + ", ".join(f"{n} by {where}" for where, n in counted.items()))
    node = doc.get("node")
    gpus = node.get("gpus", 8) if isinstance(node, dict) else 8
    if not isinstance(gpus, int) or isinstance(gpus, bool):
        return  # the scenario's own validation says what is wrong with it
    seen: set[int] = set()
    last = 0.0
    for k, poll in enumerate(replay.polls):
        if poll.t < last:
            raise RecordingRefused(f"replay.polls.{k}.t: {poll.t} is before the poll ahead "
                                   f"of it ({last})")
        last = poll.t
        for index, gpu in poll.gpus.items():
            if not 0 <= index < gpus:
                raise RecordingRefused(f"replay.polls.{k}.gpus.{index}: GPU {index} is not "
                                       f"on the node (node.gpus is {gpus})")
            if index not in seen:
                seen.add(index)
                missing = [f for f in ("errors", "lost") if getattr(gpu, f) is None]
                if missing:
                    raise RecordingRefused(f"replay.polls.{k}.gpus.{index}: the GPU's first "
                                           f"poll lacks {' and '.join(missing)}")
    for k, event in enumerate(replay.events):
        if not 0 <= event.gpu < gpus:
            raise RecordingRefused(f"replay.events.{k}.gpu: GPU {event.gpu} is not on the "
                                   f"node (node.gpus is {gpus})")


_M = TypeVar("_M", bound=Section)


def _validated(model: type[_M], value: Any, where: str) -> _M:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        loc, problem = safefile.validation_problem(exc, unknown="unknown field")
        raise RecordingRefused(f"{safefile.dotted((where, *loc))}: {problem}") from None
