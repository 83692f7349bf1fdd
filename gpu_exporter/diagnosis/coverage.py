"""What the diagnosis could judge, so that "no finding" is called healthy only
where every check ran.

A rule that cannot judge answers None (``gpu_diagnosis_not_judged``). Which
rows those are comes from the engine, poll by poll; *why* is found here by
running the row's rule once more on a view of the same signals that notes
every value the rule read and found absent (a None, an empty process list, a
flag that is off). Nothing here lists which row needs which input: a rule
that changes, or a reader that starts filling a value, changes the answer by
itself. This runs only when someone asks (/diagnosis, the node page), never
in the poll.

Each absent value becomes a :class:`Gap` with a reason a person can act on,
of one of two kinds:

- *not checked*: the row's subject is there but its signal is not (the board
  or driver lacks the reading, a reader is switched off or failing, the
  kernel has no PSI, GPU memory is held by processes NVML does not list);
  such a gap makes the verdict "checked only in part";
- *nothing to check*: the row's subject is absent (no process uses the GPU,
  no workload on it runs under a CPU limit, no kubelet allocates it, a GPU
  without NVLink has no NVSwitch fabric, a board without fans has no fan to
  judge, the configuration does not expect persistence mode); the row ran and
  found nothing it could be about.

A lost GPU is one gap: nothing but its loss can be read from it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from gpu_exporter.cadence import SAMPLES_EVERY_S
from gpu_exporter.diagnosis.rules import RULES, Trend
from gpu_exporter.diagnosis.signals import READER_OF_SIGNAL, GpuSignals
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.snapshot import Slot, Snapshot
from gpu_exporter.thresholds import DiagnosisConfig

# The reader behind each top-level GpuSignals value (its fields declare their
# source; memory_used_ratio is a property of the device's reading): a value
# absent because its reader did not run is said as such.
_READER_OF_SIGNAL: dict[str, str] = {**READER_OF_SIGNAL, "memory_used_ratio": "device"}

# How a person names what NVML did not give (GpuReading's fields); a field not
# named here is said by its name.
_NVML_WORDS: dict[str, str] = {
    "utilization": "GPU utilization",
    "memory_used_bytes": "memory usage", "memory_total_bytes": "memory usage",
    "memory_used_ratio": "memory usage",
    "temperature_celsius": "temperature", "slowdown_celsius": "slowdown temperature",
    "power_watts": "power draw", "power_limit_watts": "power limit",
    "power_default_limit_watts": "default power limit",
    "clocks_hz": "SM clock", "clocks_max_hz": "maximum SM clock",
    "clocks_application_hz": "application clocks",
    "clocks_application_default_hz": "default application clocks",
    "throttle_reasons": "throttle reasons",
    "pcie_generation": "PCIe link state", "pcie_generation_max": "PCIe link state",
    "pcie_width": "PCIe link state", "pcie_width_max": "PCIe link state",
    "pcie_replays": "PCIe replay counter",
    "ecc_uncorrected_volatile": "ECC error counts (ECC off, or not on this board)",
    "remap_pending": "row remapping state", "remap_failed": "row remapping state",
    "persistence_mode": "persistence mode",
    "fan_speeds": "fan speed",
    "recovery_action": "recovery action (drivers R565 and newer)",
    "fabric_state": "NVSwitch fabric state (Hopper and newer in an NVSwitch system, drivers "
                    "R550 and newer)",
}
_HOST_WORDS: dict[str, str] = {
    "iowait_ratio": "no CPU iowait reading (/proc/stat)",
    "io_pressure_some": "no pressure stall information from the kernel (PSI, /proc/pressure)",
    "cpu_pressure_some": "no pressure stall information from the kernel (PSI, /proc/pressure)",
    "memory_pressure_full": "no pressure stall information from the kernel (PSI, "
                            "/proc/pressure)",
    "swap_bytes_per_s": "no swap activity reading (/proc/vmstat)",
}
_PROCESS_WORDS: dict[str, str] = {
    "cpu_ratio": "no CPU time read yet for its processes (/proc/PID/stat)",
    "affinity_local": "no CPU affinity read for its processes (/proc/PID/status)",
    "run_queue_wait_ratio": "no run queue wait read for its processes (/proc/PID/schedstat)",
}

_NVML = "NVML gives no "
LOST = "the GPU is lost: NVML cannot read it"
NOTHING_JUDGED = "its rule found nothing to judge"
# Where a row's key stands for all of them (the diagnosis did not run).
EVERY_CHECK = "every check"


@dataclass(frozen=True, slots=True)
class Gap:
    """Why one row could not be judged on one GPU."""

    gpu: int
    row: Row
    reason: str
    checkable: bool  # the subject is there: a check that could not run


@dataclass(frozen=True, slots=True)
class _Reason:
    text: str
    checkable: bool


# --- what a rule read and found absent ---------------------------------------------------

class _Reads:
    def __init__(self) -> None:
        self.absent: dict[str, object] = {}  # path -> the absent value, in read order


def _view(value: object, path: str, reads: _Reads) -> object:
    if value is None or value is False or (isinstance(value, list | tuple | dict)
                                           and not value):
        reads.absent.setdefault(path, value)
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _Traced(value, path + ".", reads)
    if isinstance(value, dict):
        return _TracedMap(value, path, reads)
    if isinstance(value, list | tuple) and dataclasses.is_dataclass(value[0]):
        return [_Traced(item, path + "[].", reads) for item in value]
    return value


class _Traced:
    """An object as a rule sees it, noting each absent value read from it."""

    __slots__ = ("_of", "_path", "_reads")

    def __init__(self, of: object, path: str, reads: _Reads) -> None:
        self._of, self._path, self._reads = of, path, reads

    def __getattr__(self, name: str) -> object:
        return _view(getattr(self._of, name), self._path + name, self._reads)


class _TracedMap(Mapping[str, object]):
    """A mapping (clocks by name) as a rule sees it: a missing key is absent."""

    def __init__(self, of: Mapping[str, object], path: str, reads: _Reads) -> None:
        self._of, self._path, self._reads = of, path, reads

    def __getitem__(self, key: str) -> object:
        return self._of[key]

    def get(self, key: str, default: object = None) -> object:
        value = self._of.get(key, default)
        if value is None:
            self._reads.absent.setdefault(f"{self._path}[{key}]", None)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._of)

    def __len__(self) -> int:
        return len(self._of)


def _absent_reads(row: Row, sig: GpuSignals, cfg: DiagnosisConfig) -> dict[str, object] | str:
    """The absent values the row's rule read for ``sig``, or why it failed.
    Counters are taken as they are (no increase over the window): only
    whether they are there matters, and the engine's own record stays
    untouched."""
    reads = _Reads()
    trend = Trend(lambda _name, value: value, 0.0)
    try:
        RULES[row](cast("GpuSignals", _Traced(sig, "", reads)),
                   cast("DiagnosisConfig", _Traced(cfg, "cfg.", reads)), trend)
    except Exception as exc:  # the engine logged it; here it is the reason
        return f"its rule failed: {type(exc).__name__}: {exc}"
    return reads.absent


# --- why ---------------------------------------------------------------------------------

class _Context:
    def __init__(self, sig: GpuSignals, cfg: DiagnosisConfig, missing: Sequence[str],
                 switched_off: Sequence[str]) -> None:
        self.sig, self.cfg = sig, cfg
        self.missing, self.switched_off = frozenset(missing), frozenset(switched_off)


def _reader_gap(reader: str, ctx: _Context) -> _Reason:
    if reader in ctx.switched_off:
        return _Reason(f"the {reader} reader is switched off (--no-collector.{reader})", True)
    return _Reason(f"the {reader} reader did not run this poll (failing: see "
                   f'gpu_exporter_collector_success{{collector="{reader}"}} and the log)', True)


def _explain(path: str, value: object, ctx: _Context) -> _Reason | None:
    """Why the rule went without ``path``; None for a value read that is no
    reason (an empty owner list, a mode that is off: data, not absence)."""
    if path.startswith("cfg."):
        if path == "cfg.expect_persistence" and value is False:
            return _Reason("persistence mode is not expected (diagnosis.expect_persistence: "
                           "false)", False)
        return None
    if path == "gpu_instance":
        return None  # a whole GPU, not a MIG instance: data, not absence
    head = path.split(".", 1)[0].split("[", 1)[0]
    reader = _READER_OF_SIGNAL.get(head)
    if reader is not None and reader in ctx.missing:
        return _reader_gap(reader, ctx)
    if value is False:
        if path == "allocations_known":
            return _Reason("no kubelet allocates this GPU (not a Kubernetes node, or its pod "
                           "resources socket is not mounted)", False)
        return None
    if head == "processes":
        if path == "processes":  # none listed
            used = ctx.sig.memory_used_ratio
            if used is not None and used > ctx.cfg.memory_held_ratio:
                return _Reason("GPU memory is held but NVML lists no process on it (another "
                               "PID namespace, or no permission)", True)
            return _Reason("no process is using this GPU", False)
        field = path.rsplit(".", 1)[-1]
        return _Reason(_PROCESS_WORDS.get(field, f"no {field} read for its processes"), True)
    if head == "workloads":
        unread = [w.problem for w in ctx.sig.workloads if w.problem is not None]
        if unread:  # a workload is there, its cgroup could not be read: a gap
            return _Reason(f"its workload's cgroup signals could not be read: {unread[0]}", True)
        if path == "workloads" or path.endswith(".cpu_limit_cores"):
            return _Reason("no workload on this GPU runs under a CPU limit", False)
        field = path.rsplit(".", 1)[-1]
        return _Reason(f"its workload's {field.replace('_', ' ')} is not read yet", True)
    if isinstance(value, list | tuple):
        return None  # an empty list that is not a missing subject (no owner, no Xid)
    if head == "host":
        field = path.rsplit(".", 1)[-1]
        return _Reason(_HOST_WORDS.get(field, f"no host {field.replace('_', ' ')} reading"),
                       True)
    if head == "sm_active":
        if ctx.sig.gpm_pending:
            return _Reason("GPM's first ratio is on its way (two samples "
                           f"{SAMPLES_EVERY_S:g} s apart)", True)
        return _Reason("NVML gives no GPM metrics (Hopper and newer, drivers R525 and newer)",
                       True)
    if head == "util_samples":
        return _Reason("NVML gives no utilization samples (nvmlDeviceGetSamples)", True)
    if head == "pcie":
        if path == "pcie":
            return _Reason("no sysfs entry for its PCI device", True)
        return _Reason("no PCIe AER error counts in sysfs" if path.endswith("aer_correctable")
                       else f"no {path.rsplit('.', 1)[-1].replace('_', ' ')} in sysfs", True)
    if head in ("gpu", "memory_used_ratio"):
        field = path.rsplit(".", 1)[-1].split("[", 1)[0]
        if field == "fan_speeds" and ctx.sig.gpu.fan_count == 0:
            return _Reason("NVML counts no fan on this GPU (cooled by the chassis)", False)
        if field == "fabric_state" and ctx.sig.nvlink_links == 0:
            return _Reason("NVML counts no NVLink on this GPU, so it is in no NVSwitch fabric",
                           False)
        return _Reason(_NVML + _NVML_WORDS.get(field, field.replace("_", " ")), True)
    return _Reason(f"no {path} reading", True)


def _row_reason(row: Row, sig: GpuSignals, ctx: _Context) -> _Reason:
    """Why ``row`` could not be judged on ``sig``'s GPU, in one reason."""
    if not sig.gpu.up:
        return _Reason(LOST, True)
    reads = _absent_reads(row, sig, ctx.cfg)
    if isinstance(reads, str):
        return _Reason(reads, True)
    found: list[_Reason] = []
    for path, value in reads.items():
        reason = _explain(path, value, ctx)
        if reason is not None and reason not in found:
            found.append(reason)
    if not found:
        return _Reason(NOTHING_JUDGED, True)
    # A row with a check that could not run is not checked, whatever else
    # it also found absent.
    kept = [r for r in found if r.checkable] or found
    return _Reason(_joined([r.text for r in kept]), kept[0].checkable)


def _joined(texts: Sequence[str]) -> str:
    """One reason from several: what NVML does not give said once
    ("NVML gives no application clocks, default application clocks")."""
    nvml = [t.removeprefix(_NVML) for t in texts if t.startswith(_NVML)]
    rest = [t for t in texts if not t.startswith(_NVML)]
    return "; ".join(([_NVML + ", ".join(nvml)] if nvml else []) + rest)


# --- what the engine publishes -----------------------------------------------------------

class Coverage:
    """One poll's record of what the diagnosis could not judge (published by
    the engine in :data:`COVERAGE`): the rows per GPU, the signals they were
    judged on, and the GPUs whose judged rows have not yet had their window.
    The reasons are worked out on first use."""

    def __init__(self, gpus: Sequence[int], unjudged: Mapping[int, Sequence[Row]],
                 signals: Mapping[int, GpuSignals], settling: Mapping[int, float],
                 cfg: DiagnosisConfig, missing: Sequence[str],
                 switched_off: Sequence[str]) -> None:
        self.gpus = tuple(gpus)
        self.unjudged = unjudged
        self.settling = settling  # GPU -> seconds until its judged rows had their window
        self.window = cfg.window
        self._signals = signals
        self._cfg = cfg
        self._missing = tuple(missing)
        self._switched_off = tuple(switched_off)
        self._gaps: tuple[Gap, ...] | None = None
        self._lock = threading.Lock()

    def gaps(self) -> tuple[Gap, ...]:
        with self._lock:
            if self._gaps is None:
                out = []
                for gpu in self.gpus:
                    rows = self.unjudged.get(gpu, ())
                    if not rows:
                        continue
                    ctx = _Context(self._signals[gpu], self._cfg, self._missing,
                                   self._switched_off)
                    for row in rows:
                        reason = _row_reason(row, ctx.sig, ctx)
                        out.append(Gap(gpu, row, reason.text, reason.checkable))
                self._gaps = tuple(out)
            return self._gaps


COVERAGE: Slot[Coverage] = Slot("diagnosis_coverage")


# --- as /diagnosis answers it ----------------------------------------------------------

def group(gaps: Iterable[Gap]) -> list[dict[str, Any]]:
    """Gaps grouped so an 8-GPU node reads in a few lines: one entry per
    reason and set of GPUs, with the checks it left out (in table order)."""
    by_reason: dict[str, dict[Row, set[int]]] = {}
    for g in gaps:
        by_reason.setdefault(g.reason, {}).setdefault(g.row, set()).add(g.gpu)
    order = {row: i for i, row in enumerate(ROWS)}
    groups: list[tuple[list[int], str, list[Row]]] = []
    for reason, rows in by_reason.items():
        by_gpus: dict[frozenset[int], list[Row]] = {}
        for row, on in rows.items():
            by_gpus.setdefault(frozenset(on), []).append(row)
        groups += [(sorted(on), reason, sorted(group_rows, key=order.__getitem__))
                   for on, group_rows in by_gpus.items()]
    # The widest first (a whole node's board or driver), then by GPU and row.
    groups.sort(key=lambda g: (-len(g[0]), g[0], order[g[2][0]]))
    return [{"gpus": [str(i) for i in on], "reason": reason, "checks": [r.key for r in rows]}
            for on, reason, rows in groups]


def answer(snap: Snapshot, diagnosis_on: bool | None = None) -> dict[str, Any]:
    """The ``coverage`` object of /diagnosis: ``complete`` only when every
    row was judged on every GPU and each had its window; otherwise the checks
    that could not run, grouped by reason, and the GPUs still settling.
    ``nothing_to_check`` lists the rows whose subject is absent (never a
    reason for "checked only in part")."""
    cov = snap.derived(COVERAGE)
    gpus = sorted((snap.readings.gpus or {}).keys())
    unavailable = not_available(snap)
    if cov is None:
        why = ("the diagnosis did not run this poll (switched off with "
               "--no-diagnosis.enabled, or failing: see gpu_exporter_collector_success"
               '{collector="diagnosis"})')
        return {"complete": False, "checks_per_gpu": len(ROWS), "window_seconds": None,
                "not_checked": [{"gpus": [str(i) for i in gpus], "reason": why,
                                 "checks": [EVERY_CHECK]}],
                "nothing_to_check": [], "settling": None, "not_available": unavailable}
    gaps = cov.gaps()
    not_checked = group(g for g in gaps if g.checkable)
    settling = None
    if cov.settling:
        settling = {"gpus": [str(i) for i in sorted(cov.settling)],
                    "seconds_left": round(max(cov.settling.values()), 1)}
    return {"complete": not not_checked and settling is None,
            "checks_per_gpu": len(ROWS), "window_seconds": cov.window,
            "not_checked": not_checked,
            "nothing_to_check": group(g for g in gaps if not g.checkable),
            "settling": settling, "not_available": unavailable}


def not_available(snap: Snapshot) -> list[dict[str, Any]]:
    """What the GPUs' boards or drivers do not offer (health readings, event
    types), grouped by GPUs and board: facts of the hardware, never a reason
    for "checked only in part"."""
    by_what: dict[tuple[str, str], list[str]] = {}
    for index, r in sorted((snap.readings.gpus or {}).items()):
        for what in r.unavailable:
            by_what.setdefault((what, r.name), []).append(str(index))
    groups: dict[tuple[tuple[str, ...], str], list[str]] = {}
    for (what, board), on in by_what.items():
        groups.setdefault((tuple(on), board), []).append(what)
    return [{"gpus": list(on), "reason": f"not available on {board}", "readings": whats}
            for (on, board), whats in groups.items()]


# --- read back by the commands ------------------------------------------------------------

def gpu_list(gpus: Sequence[object]) -> str:
    """``GPU 3``, ``GPUs 0-7``, ``GPUs 0-2, 5``: a group's GPUs for people."""
    numbers = sorted({int(str(g)) for g in gpus if str(g).isdigit()})
    others = sorted({str(g) for g in gpus if not str(g).isdigit()})
    runs: list[str] = []
    start = prev = None
    for n in numbers:
        if prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            runs.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = n
    if start is not None:
        runs.append(f"{start}" if start == prev else f"{start}-{prev}")
    items = runs + others
    single = len(numbers) + len(others) == 1
    return ("GPU " if single else "GPUs ") + ", ".join(items)


def checks_text(checks: Sequence[object]) -> str:
    """``recovery_action (gpu_reset, node_reboot)``: a group's checks, those
    of one symptom written once."""
    by_symptom: dict[str, list[str]] = {}
    for key in checks:
        symptom, _, cause = str(key).partition("/")
        by_symptom.setdefault(symptom, []).append(cause)
    parts = []
    for symptom, causes in by_symptom.items():
        causes = [c for c in causes if c]
        if not causes:
            parts.append(symptom)
        elif len(causes) == 1:
            parts.append(f"{symptom}/{causes[0]}")
        else:
            parts.append(f"{symptom} ({', '.join(causes)})")
    return ", ".join(parts)


def incomplete(data: Mapping[str, Any]) -> bool:
    """Whether a /diagnosis answer says the checks ran only in part. An
    answer without ``coverage`` (an exporter from before it was reported)
    cannot say that every check ran: it counts as in part."""
    cov = data.get("coverage")
    if not isinstance(cov, Mapping):
        return True
    return cov.get("complete") is not True


def not_checked(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    cov = data.get("coverage")
    entries = cov.get("not_checked") if isinstance(cov, Mapping) else None
    return [e for e in entries or () if isinstance(e, Mapping)]


def unchecked_keys(data: Mapping[str, Any]) -> set[str]:
    """The row keys (symptom/cause) some GPU could not check."""
    return {str(k) for e in not_checked(data) for k in e.get("checks") or ()}


__all__ = ["COVERAGE", "EVERY_CHECK", "Coverage", "Gap", "answer", "checks_text", "gpu_list",
           "group", "incomplete", "not_checked", "unchecked_keys"]
