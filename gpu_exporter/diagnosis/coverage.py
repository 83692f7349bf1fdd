"""What the diagnosis could judge, so that "no finding" is called healthy only
where every check this node offers ran.

A rule that cannot judge answers None. Which rows those are comes from the
engine, poll by poll; *why* is found here by running the row's rule once more
on a view of the same signals that notes every value the rule read and found
absent (a None, an empty process list, a flag that is off). Nothing here lists
which row needs which input: a rule that changes, or a reader that starts
filling a value, changes the answer by itself. That second run is made only
when a GPU's unjudged rows or what their reasons turn on change
(:class:`Reasons`), never every poll of a steady node.

Each absent value becomes a reason (:class:`Why`) a person can act on, of
one of three kinds (:class:`Kind`), all in one table (:data:`KIND_OF`):

- a *gap*: the check could not run now, and a working exporter on this
  hardware should close it (a reader switched off or failing, NVML refusing
  the exporter, a reading that failed, a GPU still settling or lost, the
  kernel's figures missing, GPU memory held by processes NVML does not list);
  such a gap makes the verdict "checked only in part" (``diagnose`` exits 5,
  node conditions are Unknown) and is counted by ``gpu_diagnosis_not_judged``;
- *unavailable*: the board or driver does not offer what the check reads
  (NVML answered NOT_SUPPORTED, or the driver branch lacks the function: the
  recovery action before R565, GPM before Hopper, utilization samples,
  application clocks): a fact of the node, said with the board and driver it
  holds for, never a reason for "checked only in part";
- *nothing to check*: the row's subject is absent (no process uses the GPU,
  no workload on it runs under a CPU limit, no kubelet allocates it, a GPU
  without NVLink has no NVSwitch fabric, a board without fans has no fan to
  judge, the configuration does not expect persistence mode); the row ran and
  found nothing it could be about.

A lost GPU is one gap: nothing but its loss can be read from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum, auto
from typing import Any, cast

from gpu_exporter.diagnosis import coverage_words
from gpu_exporter.diagnosis.allocation_rows import CLAIM_UNPLACED, SLURM_UNNAMED
from gpu_exporter.diagnosis.rules import RULES, Trend
from gpu_exporter.diagnosis.signals import READER_OF_SIGNAL, GpuSignals
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.facts.cadence import SAMPLES_EVERY_S
from gpu_exporter.poll.readings import GpuReading
from gpu_exporter.poll.snapshot import Slot, Snapshot
from gpu_exporter.settings.thresholds import DiagnosisConfig

# The reader behind each top-level GpuSignals value (its fields declare their
# source; memory_used_ratio is a property of the device's reading): a value
# absent because its reader did not run is said as such.
_READER_OF_SIGNAL: dict[str, str] = {**READER_OF_SIGNAL, "memory_used_ratio": "device"}

_NVML = "NVML gives no "
LOST = "the GPU is lost: NVML cannot read it"
NOTHING_JUDGED = "its rule found nothing to judge"
# Where a row's key stands for all of them (the diagnosis did not run).
EVERY_CHECK = "every check"


class Kind(StrEnum):
    """What a row that could not be judged says of the node."""

    # Could not now: a working exporter on this hardware should close it (a
    # reader switched off or failing, permission refused, a GPU still
    # settling or lost, a reading that failed): the verdict is "checked only
    # in part" (exit 5, node conditions Unknown).
    GAP = "gap"
    # The board or driver does not offer it (NVML answered NOT_SUPPORTED, or
    # this driver branch lacks the function): a fact of the node, listed as
    # such, never a reason for "checked only in part".
    UNAVAILABLE = "unavailable"
    # The row's subject is absent (no process, no fan, no NVLink): it ran
    # and found nothing it could be about.
    NO_SUBJECT = "nothing_to_check"


class Why(Enum):
    """Each reason a row can go unjudged for, as _explain finds it."""

    GPU_LOST = auto()
    RULE_FAILED = auto()
    NOTHING_JUDGED = auto()
    READER_OFF = auto()
    READER_FAILING = auto()
    PERSISTENCE_NOT_EXPECTED = auto()
    NO_KUBELET = auto()
    PROCESSES_UNLISTED = auto()
    NO_PROCESS = auto()
    PROCESS_NOT_READ = auto()
    NO_CPU_LIMIT = auto()
    WORKLOAD_NOT_READ = auto()
    WORKLOAD_CGROUP_UNREAD = auto()
    OWNER_CPU_NOT_READ = auto()
    SLURM_GPUS_UNNAMED = auto()
    CLAIM_POD_UNPLACED = auto()
    BOOT_GRACE = auto()
    HOST_NOT_READ = auto()
    GPM_PENDING = auto()
    GPM_NOT_OFFERED = auto()
    GPM_NOT_READ = auto()
    SAMPLES_NOT_OFFERED = auto()
    SAMPLES_NOT_READ = auto()
    NO_PCI_SYSFS = auto()
    PCI_SYSFS_NOT_READ = auto()
    NVML_NOT_OFFERED = auto()
    NVML_REFUSED = auto()
    NVML_NOT_READ = auto()
    NO_FAN = auto()
    NO_NVLINK = auto()
    NO_C2C = auto()
    NO_CPU_THERMAL_COUNTERS = auto()
    NO_RDMA = auto()
    OTHER_NOT_READ = auto()


# The one place each reason is classed: the verdict, /diagnosis, the node
# page, the node conditions and gpu_diagnosis_not_judged all follow it.
KIND_OF: dict[Why, Kind] = {
    Why.GPU_LOST: Kind.GAP,
    Why.RULE_FAILED: Kind.GAP,
    Why.NOTHING_JUDGED: Kind.GAP,
    Why.READER_OFF: Kind.GAP,
    Why.READER_FAILING: Kind.GAP,
    Why.PERSISTENCE_NOT_EXPECTED: Kind.NO_SUBJECT,
    Why.NO_KUBELET: Kind.NO_SUBJECT,
    Why.PROCESSES_UNLISTED: Kind.GAP,
    Why.NO_PROCESS: Kind.NO_SUBJECT,
    Why.PROCESS_NOT_READ: Kind.GAP,
    Why.WORKLOAD_CGROUP_UNREAD: Kind.GAP,
    Why.OWNER_CPU_NOT_READ: Kind.GAP,
    # No unprivileged source names them, on any node: a fact, not a gap.
    Why.SLURM_GPUS_UNNAMED: Kind.UNAVAILABLE,
    Why.CLAIM_POD_UNPLACED: Kind.UNAVAILABLE,
    # The node booted moments ago: like a GPU settling, closed by waiting.
    Why.BOOT_GRACE: Kind.GAP,
    Why.NO_CPU_LIMIT: Kind.NO_SUBJECT,
    Why.WORKLOAD_NOT_READ: Kind.GAP,
    # The kernel's figures (/proc, PSI): a setting of the node's kernel or
    # mounts that its operator can change, not a fact of the board.
    Why.HOST_NOT_READ: Kind.GAP,
    Why.GPM_PENDING: Kind.GAP,
    Why.GPM_NOT_OFFERED: Kind.UNAVAILABLE,
    Why.GPM_NOT_READ: Kind.GAP,
    Why.SAMPLES_NOT_OFFERED: Kind.UNAVAILABLE,
    Why.SAMPLES_NOT_READ: Kind.GAP,
    Why.NO_PCI_SYSFS: Kind.GAP,
    Why.PCI_SYSFS_NOT_READ: Kind.GAP,
    Why.NVML_NOT_OFFERED: Kind.UNAVAILABLE,
    Why.NVML_REFUSED: Kind.GAP,
    Why.NVML_NOT_READ: Kind.GAP,
    Why.NO_FAN: Kind.NO_SUBJECT,
    Why.NO_NVLINK: Kind.NO_SUBJECT,
    Why.NO_C2C: Kind.NO_SUBJECT,
    Why.NO_CPU_THERMAL_COUNTERS: Kind.NO_SUBJECT,
    Why.NO_RDMA: Kind.NO_SUBJECT,
    Why.OTHER_NOT_READ: Kind.GAP,
}
if set(KIND_OF) != set(Why):
    raise ImportError("coverage: every reason needs its kind: "
                      + ", ".join(sorted(w.name for w in set(Why) - set(KIND_OF))))


@dataclass(frozen=True, slots=True)
class Gap:
    """Why one row could not be judged on one GPU. ``on``: for a check the
    board or driver does not offer, which ("NVIDIA H100 80GB HBM3 / driver
    R550"); else ""."""

    gpu: int
    row: Row
    reason: str
    kind: Kind
    on: str = ""


@dataclass(frozen=True, slots=True)
class _Reason:
    text: str
    why: Why

    @property
    def kind(self) -> Kind:
        return KIND_OF[self.why]


# --- what a rule read and found absent ---------------------------------------------------

class _AbsentReads:
    def __init__(self) -> None:
        self.absent: dict[str, object] = {}  # path -> the absent value, in read order


def _view(value: object, path: str, reads: _AbsentReads) -> object:
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

    def __init__(self, of: object, path: str, reads: _AbsentReads) -> None:
        self._of, self._path, self._reads = of, path, reads

    def __getattr__(self, name: str) -> object:
        return _view(getattr(self._of, name), self._path + name, self._reads)


class _TracedMap(Mapping[str, object]):
    """A mapping (clocks by name) as a rule sees it: a missing key is absent."""

    def __init__(self, of: Mapping[str, object], path: str, reads: _AbsentReads) -> None:
        self._of, self._path, self._reads = of, path, reads

    def __getitem__(self, key: str) -> object:
        return self._of[key]

    def get(self, key: str, default: object = None) -> object:
        value = self._of.get(key, default)
        if value is None:
            self._reads.absent.setdefault(f"{self._path}[{key}]", None)
            return value
        return _view(value, f"{self._path}[{key}]", self._reads)

    def __iter__(self) -> Iterator[str]:
        return iter(self._of)

    def __len__(self) -> int:
        return len(self._of)


def _absent_reads(row: Row, sig: GpuSignals, cfg: DiagnosisConfig) -> dict[str, object] | str:
    """The absent values the row's rule read for ``sig``, or why it failed.
    Counters are taken as they are (no increase over the window): only
    whether they are there matters, and the engine's own record stays
    untouched."""
    reads = _AbsentReads()
    trend = Trend(lambda _name, value: value, 0.0)
    try:
        RULES[row](cast("GpuSignals", _Traced(sig, "", reads)),
                   cast("DiagnosisConfig", _Traced(cfg, "cfg.", reads)), trend)
    except Exception as exc:  # the engine logged it; here it is the reason
        return f"its rule failed: {type(exc).__name__}: {exc}"
    return reads.absent


# --- why ---------------------------------------------------------------------------------

# Facts of the node's schedulers, not of its board and driver.
_NOT_THE_BOARDS = frozenset({Why.SLURM_GPUS_UNNAMED, Why.CLAIM_POD_UNPLACED})


class _Context:
    def __init__(self, sig: GpuSignals, cfg: DiagnosisConfig, missing: Sequence[str],
                 switched_off: Sequence[str]) -> None:
        self.sig, self.cfg = sig, cfg
        self.missing, self.switched_off = frozenset(missing), frozenset(switched_off)


def _reader_gap(reader: str, ctx: _Context) -> _Reason:
    if reader in ctx.switched_off:
        return _Reason(f"the {reader} reader is switched off (--no-collector.{reader})",
                       Why.READER_OFF)
    return _Reason(f"the {reader} reader did not run this poll (failing: see "
                   f'gpu_exporter_collector_success{{collector="{reader}"}} and the log)',
                   Why.READER_FAILING)


def _nvml_reason(name: str, field: str, gpu: GpuReading) -> _Reason:
    """What NVML did not give under ``name`` (as GpuReading.unavailable names
    it): not offered on this board and driver, refused, or not read now."""
    if name in gpu.unavailable:
        return _Reason(_NVML + coverage_words.not_offered(field, gpu.driver_version),
                       Why.NVML_NOT_OFFERED)
    words = coverage_words.nvml(field)
    if name in gpu.refused:
        return _Reason(f"NVML refuses {words} to the exporter (no permission: run it with "
                       "access to the NVIDIA device nodes)", Why.NVML_REFUSED)
    return _Reason(_NVML + words, Why.NVML_NOT_READ)


def _explain(path: str, value: object, ctx: _Context) -> _Reason | None:
    """Why the rule went without ``path``; None for a value read that is no
    reason (an empty owner list, a mode that is off: data, not absence)."""
    if path.startswith("cfg."):
        if path == "cfg.expect_persistence" and value is False:
            return _Reason("persistence mode is not expected (diagnosis.expect_persistence: "
                           "false)", Why.PERSISTENCE_NOT_EXPECTED)
        return None
    if path == "gpu_instance":
        return None  # a whole GPU, not a MIG instance: data, not absence
    head = path.split(".", 1)[0].split("[", 1)[0]
    reader = _READER_OF_SIGNAL.get(head)
    if reader is not None and reader in ctx.missing:
        return _reader_gap(reader, ctx)
    if value is False:
        if path == "host.cpu_thermal_kept":
            return _Reason("the host's CPUs keep no thermal throttle counters (no "
                           "/sys/devices/system/cpu/cpu*/thermal_throttle: AMD, Arm and most "
                           "virtual machines)", Why.NO_CPU_THERMAL_COUNTERS)
        if path == "gpu_holders_known" or (path == "allocations_known"
                                           and not ctx.sig.gpu_holders_known):
            return _Reason(SLURM_UNNAMED, Why.SLURM_GPUS_UNNAMED)
        if path == "allocations_known":
            return _Reason("no kubelet allocates this GPU (not a Kubernetes node, or its pod "
                           "resources socket is not mounted)", Why.NO_KUBELET)
        return None
    if head == "processes":
        if path == "processes":  # none listed
            used = ctx.sig.memory_used_ratio
            if used is not None and used > ctx.cfg.memory_held_ratio:
                return _Reason("GPU memory is held but NVML lists no process on it (another "
                               "PID namespace, or no permission)", Why.PROCESSES_UNLISTED)
            return _Reason("no process is using this GPU", Why.NO_PROCESS)
        field = path.rsplit(".", 1)[-1]
        return _Reason(coverage_words.process(field), Why.PROCESS_NOT_READ)
    if head == "workloads":
        unread = [w.problem for w in ctx.sig.workloads if w.problem is not None]
        if unread:  # a workload is there, its cgroup could not be read: a gap
            return _Reason(f"its workload's cgroup signals could not be read: {unread[0]}",
                           Why.WORKLOAD_CGROUP_UNREAD)
        if path.endswith(".io_limited"):
            return _Reason("its workload's io.max could not be read (no io controller "
                           "enabled for its cgroup, or cgroup v1)", Why.WORKLOAD_NOT_READ)
        if path.endswith(".io_limit_used_ratio"):
            return _Reason("its workload's I/O against its io.max limit is not read (io.stat "
                           "unread, or the first poll: it takes two)", Why.WORKLOAD_NOT_READ)
        if path == "workloads" or path.endswith(".cpu_limit_cores"):
            return _Reason("no workload on this GPU runs under a CPU limit", Why.NO_CPU_LIMIT)
        field = path.rsplit(".", 1)[-1]
        return _Reason(f"its workload's {field.replace('_', ' ')} is not read yet",
                       Why.WORKLOAD_NOT_READ)
    if head == "owner_cpu":
        if path.endswith((".on_gpu", ".problem")):
            return None  # data: the pod has no process on a GPU, its cgroup was read
        problems = [c.problem for c in ctx.sig.owner_cpu.values() if c.problem is not None]
        if problems:
            return _Reason(f"the CPU use of the pod it is allocated to could not be read: "
                           f"{problems[0]}", Why.OWNER_CPU_NOT_READ)
        if path.endswith(".cpu_cores"):
            return _Reason("the CPU use of the pod it is allocated to is not read yet (it "
                           "takes two polls)", Why.OWNER_CPU_NOT_READ)
        pods = [o for o in ctx.sig.owners if o.pod]
        # owner_cpu[<owner>]: that owner's; owner_cpu (none placed): every pod's.
        if ("claim=''" not in path if "[" in path else pods and all(o.claim for o in pods)):
            return _Reason(CLAIM_UNPLACED, Why.CLAIM_POD_UNPLACED)
        return _Reason("the pod it is allocated to is not placed: its UID comes from the "
                       "kubelet's device-plugin checkpoint (device-plugins/"
                       "kubelet_internal_checkpoint beside the pod-resources socket; not "
                       "mounted or not readable)", Why.OWNER_CPU_NOT_READ)
    if head == "network":
        # NCCL_SOCKET_IFNAME and NCCL_IB_HCA are not read either: they are in
        # the job's environment, and /proc/<pid>/environ needs privilege the
        # exporter does not take. The rows judge the GPU's nearest device.
        return _Reason("no RDMA port near this GPU to judge (no RDMA device on the node, none "
                       "whose distance from the GPU sysfs tells, or no port of the node "
                       "ACTIVE to compare with; what NCCL was told to use, NCCL_IB_HCA, is "
                       "in the job's environment, which is not read)", Why.NO_RDMA)
    if isinstance(value, list | tuple):
        return None  # an empty list that is not a missing subject (no owner, no Xid)
    if head == "host":
        field = path.rsplit(".", 1)[-1]
        return _Reason(coverage_words.host(field), Why.HOST_NOT_READ)
    gpu = ctx.sig.gpu
    if head == "sm_active":
        if ctx.sig.gpm_pending:
            return _Reason("GPM's first ratio is on its way (two samples "
                           f"{SAMPLES_EVERY_S:g} s apart)", Why.GPM_PENDING)
        if head in gpu.unavailable:
            return _Reason(_NVML + coverage_words.not_offered("gpm", gpu.driver_version),
                           Why.GPM_NOT_OFFERED)
        return _Reason("NVML gave no GPM metrics this poll", Why.GPM_NOT_READ)
    if head == "util_samples":
        if head in gpu.unavailable:
            return _Reason("NVML gives no utilization samples (nvmlDeviceGetSamples)",
                           Why.SAMPLES_NOT_OFFERED)
        return _Reason("NVML gave no new utilization samples (nvmlDeviceGetSamples) this "
                       "poll", Why.SAMPLES_NOT_READ)
    if head == "pcie":
        if path == "pcie":
            return _Reason("no sysfs entry for its PCI device", Why.NO_PCI_SYSFS)
        return _Reason("no PCIe AER error counts in sysfs" if path.endswith("aer_correctable")
                       else f"no {path.rsplit('.', 1)[-1].replace('_', ' ')} in sysfs",
                       Why.PCI_SYSFS_NOT_READ)
    if head in ("gpu", "memory_used_ratio"):
        name = path.removeprefix("gpu.")
        field = name.split("[", 1)[0]
        if field == "fan_speeds" and gpu.fan_count == 0:
            return _Reason("NVML counts no fan on this GPU (cooled by the chassis)", Why.NO_FAN)
        if field == "fabric_state" and ctx.sig.nvlink_links == 0:
            return _Reason("NVML counts no NVLink on this GPU, so it is in no NVSwitch fabric",
                           Why.NO_NVLINK)
        if field == "c2c_errors" and not gpu.c2c_link:
            return _Reason("the GPU has no C2C link to a Grace CPU (NVML's C2C mode is off "
                           "or not offered)", Why.NO_C2C)
        if head == "memory_used_ratio":
            name = "memory_used_bytes"
        return _nvml_reason(name, field, gpu)
    if head == "nvlink_errors" and ctx.sig.nvlink_links == 0:
        return _Reason("NVML counts no NVLink on this GPU", Why.NO_NVLINK)
    return _Reason(f"no {path} reading", Why.OTHER_NOT_READ)


def _row_reason(row: Row, sig: GpuSignals, ctx: _Context) -> _Reason:
    """Why ``row`` could not be judged on ``sig``'s GPU, in one reason."""
    if not sig.gpu.up:
        return _Reason(LOST, Why.GPU_LOST)
    reads = _absent_reads(row, sig, ctx.cfg)
    if isinstance(reads, str):
        return _Reason(reads, Why.RULE_FAILED)
    found: list[_Reason] = []
    for path, value in reads.items():
        reason = _explain(path, value, ctx)
        if reason is not None and reason not in found:
            found.append(reason)
    if not found:
        return _Reason(NOTHING_JUDGED, Why.NOTHING_JUDGED)
    # A row with a check that could not run now is not checked, whatever
    # else it also found absent; one the board or driver does not offer is
    # not offered, whatever subject it also lacks.
    for kind in (Kind.GAP, Kind.UNAVAILABLE, Kind.NO_SUBJECT):
        kept = [r for r in found if r.kind is kind]
        if kept:
            return _Reason(_joined([r.text for r in kept]), kept[0].why)
    raise AssertionError("unreachable: every reason has a kind")


def _joined(texts: Sequence[str]) -> str:
    """One reason from several: what NVML does not give said once
    ("NVML gives no application clocks, default application clocks")."""
    nvml = [t.removeprefix(_NVML) for t in texts if t.startswith(_NVML)]
    rest = [t for t in texts if not t.startswith(_NVML)]
    return "; ".join(([_NVML + ", ".join(nvml)] if nvml else []) + rest)


# --- what the engine publishes -----------------------------------------------------------

# The longest a GPU's reasons are kept while what the rules read moves but
# nothing in their key does: a reason that changes on its own (a process's
# first CPU time read) is said within this long.
REASONS_KEPT_S = 30.0


class Reasons:
    """Per GPU, why each row the engine could not judge went unjudged. The
    reasons decide the verdict and gpu_diagnosis_not_judged, so the engine
    asks every poll; they are worked out (each such row's rule run once more,
    traced) only when the GPU's unjudged rows or what their reasons turn on
    changed, and at least every REASONS_KEPT_S while what the rules read
    moves (a reason is a function of it): a steady node pays nothing."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[tuple[object, ...], float, tuple[Gap, ...]]] = {}

    def of(self, sig: GpuSignals, rows: Sequence[Row], cfg: DiagnosisConfig,
           missing: Sequence[str], switched_off: Sequence[str], now: float,
           boot_grace_left: float = 0.0, read_since: float = float("inf")) -> tuple[Gap, ...]:
        """``boot_grace_left``: seconds until the rows that wait the boot
        grace (Row.boot_grace) judge; while above 0 that is their reason.
        ``read_since``: since when what the rules read of it held still."""
        if not rows:
            self._held.pop(sig.index, None)
            return ()
        gpu = sig.gpu
        used = sig.memory_used_ratio
        key = (tuple(rows), tuple(missing), tuple(switched_off), cfg, gpu.up, sig.gpm_pending,
               gpu.unavailable, gpu.refused, gpu.fan_count, gpu.name, gpu.driver_version,
               sig.nvlink_links, len(sig.processes), len(sig.workloads),
               sig.allocations_known, sig.gpu_holders_known,
               used is not None and used > cfg.memory_held_ratio,
               boot_grace_left > 0)
        held = self._held.get(sig.index)
        if held is not None and held[0] == key and (now - held[1] < REASONS_KEPT_S
                                                    or read_since <= held[1]):
            return held[2]
        ctx = _Context(sig, cfg, missing, switched_off)
        gaps = []
        for row in rows:
            reason = (_Reason(boot_grace_reason(boot_grace_left), Why.BOOT_GRACE)
                      if row.boot_grace and boot_grace_left > 0
                      else _row_reason(row, sig, ctx))
            on = (coverage_words.board_and_driver(gpu) if reason.kind is Kind.UNAVAILABLE
                  and reason.why not in _NOT_THE_BOARDS else "")
            gaps.append(Gap(sig.index, row, reason.text, reason.kind, on))
        self._held[sig.index] = (key, now, tuple(gaps))
        return self._held[sig.index][2]

    def forget(self, keep: Iterable[int]) -> None:
        """Drop the GPUs not in ``keep`` (gone from the node)."""
        kept = set(keep)
        for index in [i for i in self._held if i not in kept]:
            del self._held[index]


@dataclass(frozen=True, slots=True)
class Coverage:
    """One poll's record of what the diagnosis could not judge (published by
    the engine in :data:`COVERAGE`): each unjudged row and GPU with its
    reason, and the GPUs whose judged rows have not yet had their window
    (GPU -> seconds until they have)."""

    gpus: tuple[int, ...]
    gaps: tuple[Gap, ...]
    settling: Mapping[int, float]
    window: float


COVERAGE: Slot[Coverage] = Slot("diagnosis_coverage")


def boot_grace_reason(left: float) -> str:
    return (f"waiting for the boot grace ({left:.0f} s left): the node booted moments ago, and "
            "its PCIe links and NVSwitch fabric may still be training")


# --- as /diagnosis answers it ----------------------------------------------------------

def group(gaps: Iterable[Gap]) -> list[dict[str, Any]]:
    """Gaps grouped so an 8-GPU node reads in a few lines: one entry per
    reason (and board and driver, for a check not offered) and set of GPUs,
    with the checks it left out (in table order)."""
    by_reason: dict[tuple[str, str], dict[Row, set[int]]] = {}
    for g in gaps:
        by_reason.setdefault((g.reason, g.on), {}).setdefault(g.row, set()).add(g.gpu)
    order = {row: i for i, row in enumerate(ROWS)}
    groups: list[tuple[list[int], tuple[str, str], list[Row]]] = []
    for reason, rows in by_reason.items():
        by_gpus: dict[frozenset[int], list[Row]] = {}
        for row, on in rows.items():
            by_gpus.setdefault(frozenset(on), []).append(row)
        groups += [(sorted(on), reason, sorted(group_rows, key=order.__getitem__))
                   for on, group_rows in by_gpus.items()]
    # The widest first (a whole node's board or driver), then by GPU and row.
    groups.sort(key=lambda g: (-len(g[0]), g[0], order[g[2][0]]))
    return [{"gpus": [str(i) for i in on], "reason": reason,
             **({"on": board} if board else {}), "checks": [r.key for r in rows]}
            for on, (reason, board), rows in groups]


def answer(snap: Snapshot) -> dict[str, Any]:
    """The ``coverage`` object of /diagnosis: ``complete`` only when every
    check this node's boards and driver offer was judged on every GPU and
    each had its window; otherwise the checks that could not run now
    (``not_checked``), grouped by reason, and the GPUs still settling.
    ``not_available`` lists the checks a board or the driver does not offer
    (``on`` names them), ``nothing_to_check`` the rows whose subject is
    absent: neither is ever a reason for "checked only in part"."""
    cov = snap.derived(COVERAGE)
    gpus = sorted((snap.readings.gpus or {}).keys())
    unavailable = board_lacks(snap)
    if cov is None:
        why = ("the diagnosis did not run this poll (switched off with "
               "--no-diagnosis.enabled, or failing: see gpu_exporter_collector_success"
               '{collector="diagnosis"})')
        return {"complete": False, "checks_per_gpu": len(ROWS), "window_seconds": None,
                "not_checked": [{"gpus": [str(i) for i in gpus], "reason": why,
                                 "checks": [EVERY_CHECK]}],
                "not_available": unavailable, "nothing_to_check": [], "settling": None}
    not_checked = group(g for g in cov.gaps if g.kind is Kind.GAP)
    settling = None
    if cov.settling:
        settling = {"gpus": [str(i) for i in sorted(cov.settling)],
                    "seconds_left": round(max(cov.settling.values()), 1)}
    return {"complete": not not_checked and settling is None,
            "checks_per_gpu": len(ROWS), "window_seconds": cov.window,
            "not_checked": not_checked,
            "not_available": [*group(g for g in cov.gaps if g.kind is Kind.UNAVAILABLE),
                              *unavailable],
            "nothing_to_check": group(g for g in cov.gaps if g.kind is Kind.NO_SUBJECT),
            "settling": settling}


def board_lacks(snap: Snapshot) -> list[dict[str, Any]]:
    """The newest boards' readings and NVML event types the GPUs' boards or
    drivers do not offer, grouped by GPUs and board as :func:`group` groups
    the checks: facts of the hardware, never a reason for "checked only in
    part". Each GPU's list names only what a board of its class could offer
    (collectors/board.py): a T4 lists no Grace C2C link, an H100 no power
    smoothing."""
    by_what: dict[tuple[str, str], list[int]] = {}
    for index, r in sorted((snap.readings.gpus or {}).items()):
        for what in r.board_lacks:
            by_what.setdefault((what, coverage_words.board_and_driver(r)), []).append(index)
    groups: dict[tuple[tuple[int, ...], str], list[str]] = {}
    for (what, board), on in by_what.items():
        groups.setdefault((tuple(on), board), []).append(what)
    # No check of the table is lost with them ("checks" is empty): the
    # readings are named in the reason and listed under "readings".
    return [{"gpus": [str(i) for i in on], "reason": ", ".join(whats),
             "on": board, "checks": [], "readings": whats}
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


def entries(data: Mapping[str, Any], section: str) -> list[Mapping[str, Any]]:
    """The groups of a /diagnosis answer's coverage ``section``
    (not_checked, not_available, nothing_to_check); none where it has none."""
    cov = data.get("coverage")
    found = cov.get(section) if isinstance(cov, Mapping) else None
    return [e for e in found or () if isinstance(e, Mapping)]


def reason_text(entry: Mapping[str, Any]) -> str:
    """A group's reason as people read it; for a check not offered, where
    ("not available on NVIDIA T4 / driver R550: NVML gives no GPM metrics ...")."""
    on = entry.get("on")
    reason = str(entry.get("reason"))
    return f"not available on {on}: {reason}" if on else reason


def not_checked(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return entries(data, "not_checked")


def unchecked_keys(data: Mapping[str, Any]) -> set[str]:
    """The row keys (symptom/cause) some GPU could not check."""
    return {str(k) for e in not_checked(data) for k in e.get("checks") or ()}


__all__ = ["COVERAGE", "EVERY_CHECK", "KIND_OF", "Coverage", "Gap", "Kind", "Reasons", "Why",
           "answer", "checks_text", "entries", "gpu_list",
           "group", "incomplete", "not_checked", "reason_text", "unchecked_keys"]
