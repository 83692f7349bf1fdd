"""What the exporter remembers of each GPU's hardware faults across its own
restarts and the node's reboots: the Xids, uncorrectable ECC errors, row
remaps (pending, failed) and losses of each GPU, keyed by the GPU's UUID
(an index names another board after a swap or a renumbering), each with when
it happened and in which *life* of the GPU: the boot (``boot_id``, read under
--path.procfs) and how many times the GPU had been lost and come back in it.

A fault seen in one life and again in a later one came back after a reset or
a reboot: the ``fault_recurred`` row (fault_rules.py). An Xid remembered from
before a restart is judged as if the exporter had never stopped (its row
holds for ``xid_hold`` from the Xid's own time).

What the kernel log's line adds is remembered with it: an Xid 74 per NVLink
it names (``Xid 74 on NVLink 14``), and an application Xid (Xid 13, which
comes in bursts of lines for one faulting process) per process, with its
pid, name and owner and the count of its lines, so a burst is one record
and never crowds out a hardware fault: at most ``MAX_PROCESS_FAULTS_PER_GPU``
process records per GPU, the oldest forgotten first.

The state file (--path.state-file; empty: remembered only while the exporter
runs) is JSON: the exporter writes it and reads it back, so it needs no YAML
(no anchors, no aliases, nothing a person writes), and the standard library's
reader, within safefile's bounds, is fast and strict. It is bounded (GPUs,
faults per GPU, bytes), written whole to a temporary file in its directory,
synced and renamed over the old one, so a crash leaves the old file or the
new one, never half of one. A file that is not a regular file (a symbolic
link, a FIFO), too large, not JSON, of the wrong shape (a wrong type, an
unknown key, a string with control characters) or of another node (none of
its GPUs is this node's) is refused in one log line, moved aside to
``<file>.refused`` (replacing an older one) for whoever wants to look, and
the memory starts over: a bad file never stops the exporter.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpu_exporter.diagnosis.memory_file import StateModel, ValidationError
from gpu_exporter.diagnosis.memory_limits import (
    MAX_FAULTS_PER_GPU,
    MAX_FILE_BYTES,
    MAX_GPUS,
    MAX_OWNER_CHARS,
    MAX_PROCESS_CHARS,
    MAX_PROCESS_FAULTS_PER_GPU,
    NO_BOOT_ID,
    RETENTION_S,
    STATE_FILE,
    VERSION,
    FaultKind,
)
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.host.boot import boot_id
from gpu_exporter.settings import safefile

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class Fault:
    """One kind of fault (an Xid by its code; an Xid 74 by its NVLink too,
    an application Xid by its process) in one life of a GPU."""

    kind: FaultKind
    code: int
    first: float  # unix time it first happened in that life
    last: float
    count: int  # times; for a process's Xid, the most of its lines the log held
    boot_id: str
    resets: int  # times the GPU had been lost and come back before that life
    link: int | None = None  # the NVLink an Xid 74 named
    pid: int | None = None  # the process an application Xid's line blamed
    process: str = ""  # "python3 (pid 4242)", printable ASCII only
    owner: str = ""  # its pod's container or Slurm job, as described for people

    @property
    def life(self) -> tuple[str, int]:
        return (self.boot_id, self.resets)

    @property
    def name(self) -> str:
        """How a person names it: ``Xid 79``, ``Xid 74 on NVLink 14``, ``ecc
        uncorrectable``."""
        if self.kind != "xid":
            return self.kind.replace("_", " ")
        return f"Xid {self.code}" + ("" if self.link is None else f" on NVLink {self.link}")

    @property
    def key(self) -> tuple[FaultKind, int, int | None, int | None, str]:
        """What tells two records of one life apart."""
        return (self.kind, self.code, self.link, self.pid, self.process)


@dataclass(frozen=True, slots=True)
class GpuPast:
    """What is remembered of one GPU, as the rules see it: its faults, oldest
    first, and the life it is in now."""

    faults: tuple[Fault, ...]
    life: tuple[str, int]

    def came_back(self, hardware_xids: Iterable[int]) -> list[tuple[Fault, Fault]]:
        """Each hardware fault of this life that the GPU also had in an earlier
        one: (the earliest earlier, this life's). A row remap that failed
        stays failed, so it never "comes back"; application and
        informational Xids are the job's or nobody's."""
        hardware = frozenset(hardware_xids)
        out: list[tuple[Fault, Fault]] = []
        for now in self.faults:
            if now.life != self.life or now.kind == "row_remap_failed" or (
                    now.kind == "xid" and now.code not in hardware):
                continue
            before = [f for f in self.faults if f.kind == now.kind and f.code == now.code
                      and f.life != self.life and f.first <= now.first]
            if before:
                out.append((min(before, key=lambda f: f.first), now))
        return out


@dataclass(slots=True)
class _Gpu:
    seen: float
    lost: bool = False
    resets: int = 0
    # When it last came back after a loss (0: never): an Xid from before then,
    # still among the readers' recent ones, belongs to an earlier life.
    back: float = 0.0
    faults: list[Fault] = field(default_factory=list)
    past: GpuPast | None = None  # built on demand, dropped on change


class FaultMemory:
    """Each GPU's faults, observed every poll from the diagnosis's signals and
    kept in the state file (``path``; None: in memory only)."""

    def __init__(self, path: Path | None, procfs: Path,
                 wall_clock: Callable[[], float]) -> None:
        self.path = path
        self._procfs = procfs
        self._wall = wall_clock
        self._gpus: dict[str, _Gpu] = {}
        # This boot's id, read at the first poll: a boot never changes under
        # a running exporter (a reboot ends the process), so the file is not
        # read again every poll.
        self._boot = NO_BOOT_ID
        self._boot_read = False
        self._loaded_foreign_check = False  # whether the loaded file awaits its host check
        self._dirty = False
        self._write_failing = False
        if path is not None:
            self._gpus = self._load(path)
            self._loaded_foreign_check = bool(self._gpus)

    # --- observing ---------------------------------------------------------------
    def observe(self, signals: Iterable[GpuSignals],
                per_process: Iterable[int] = ()) -> dict[str, GpuPast]:
        """Record what this poll's signals show of each GPU (not its MIG
        instances: they share its faults), the Xids of ``per_process`` codes
        (the application's) per process the kernel log blames, save the file
        if anything is new, and return each GPU's past by UUID."""
        by_process = frozenset(per_process)
        now = self._wall()
        if not self._boot_read:
            self._boot, self._boot_read = boot_id(self._procfs) or NO_BOOT_ID, True
        gpus = [s for s in signals if s.gpu_instance is None]
        if self._loaded_foreign_check and gpus:
            self._loaded_foreign_check = False
            if not {s.uuid for s in gpus} & set(self._gpus):
                assert self.path is not None
                self._refuse(self.path, "holds none of this node's GPUs (written on another "
                             "node, or every GPU was replaced)")
                self._gpus = {}
        for sig in gpus:
            self._observe_gpu(sig, now, by_process)
        self._forget(now)
        if self._dirty:
            self._dirty = False
            if self.path is not None:
                self._save(self.path)
        return {uuid: self._past(g) for uuid, g in self._gpus.items()}

    def _observe_gpu(self, sig: GpuSignals, now: float, by_process: frozenset[int]) -> None:
        if not _valid_uuid(sig.uuid):
            return  # a UUID the file could not hold back: not remembered
        g = self._gpus.get(sig.uuid)
        if g is None:
            g = self._gpus[sig.uuid] = _Gpu(seen=now)
            self._dirty = True
        g.seen = now
        reading = sig.gpu
        if not reading.up:
            if not g.lost:
                g.lost = True
                self._record(g, "gpu_lost", 0, now)
        elif g.lost:
            # Back after a loss (a reset, a driver reload, a reboot): a new life.
            g.lost, g.resets, g.back = False, g.resets + 1, now
            g.past = None
            self._dirty = True
        links = {(at, code): link for at, code, link in sig.xid_links}
        blamed = {(b.at, b.xid): b for b in sig.xid_blames if b.xid in by_process}
        for at, code, _instance in sig.xids:
            if at < g.back:
                continue
            b = blamed.get((at, code))
            if b is None:
                self._record(g, "xid", code, at, once=False, link=links.get((at, code)))
        lines: dict[tuple[int, int | None, str, str], tuple[float, int]] = {}
        for b in blamed.values():
            if b.at >= g.back:
                key = (b.xid, b.pid, _printable(b.process, MAX_PROCESS_CHARS),
                       _printable(b.owner.describe(), MAX_OWNER_CHARS) if b.owner else "")
                last, n = lines.get(key, (b.at, 0))
                lines[key] = (max(last, b.at), n + b.lines)
        for (code, pid, process, owner), (at, n) in lines.items():
            self._record_process(g, code, pid, process, owner, at, n)
        if reading.up:
            if (reading.ecc_uncorrected_volatile or 0) > 0:
                self._record(g, "ecc_uncorrectable", 0, now)
            if reading.remap_pending:
                self._record(g, "row_remap_pending", 0, now)
            if reading.remap_failed:
                self._record(g, "row_remap_failed", 0, now)

    def _record(self, g: _Gpu, kind: FaultKind, code: int, at: float,
                once: bool = True, link: int | None = None) -> None:
        """A fault of this life: a state (``once``) is recorded when first
        seen; an event (an Xid, each with its own time) counts once each,
        those no later than the last one counted being counted already (the
        readers hand the recent ones to every poll)."""
        life = (self._boot, g.resets)
        for i, f in enumerate(g.faults):
            if f.kind == kind and f.code == code and f.link == link and f.pid is None \
                    and not f.process and f.life == life:
                if once or at <= f.last:
                    return
                g.faults[i] = replace(f, last=at, count=min(f.count + 1, 10**9))
                break
        else:
            self._add(g, Fault(kind, code, at, at, 1, self._boot, g.resets, link=link))
        g.past = None
        self._dirty = True

    def _record_process(self, g: _Gpu, code: int, pid: int | None, process: str, owner: str,
                        at: float, lines: int) -> None:
        """A process's application Xid of this life: one record per (code,
        process), its count the most of its lines the readers held at once
        (the kernel log's lines since boot are handed to every poll, so a
        sum would count them again)."""
        life = (self._boot, g.resets)
        for i, f in enumerate(g.faults):
            if f.kind == "xid" and f.code == code and f.pid == pid and f.process == process \
                    and f.life == life:
                count = min(max(f.count, lines), 10**9)
                if at <= f.last and count == f.count and (owner == f.owner or not owner):
                    return
                g.faults[i] = replace(f, last=max(f.last, at), count=count,
                                      owner=owner or f.owner)
                break
        else:
            mine = [f for f in g.faults if f.process]
            if len(mine) >= MAX_PROCESS_FAULTS_PER_GPU:
                g.faults.remove(min(mine, key=lambda f: f.last))
            self._add(g, Fault("xid", code, at, at, min(lines, 10**9), self._boot, g.resets,
                               pid=pid, process=process or "?", owner=owner))
        g.past = None
        self._dirty = True

    @staticmethod
    def _add(g: _Gpu, fault: Fault) -> None:
        """Keep ``fault``; beyond the bound, forget the oldest record of a
        process's Xid first (the job's), then the oldest of any."""
        g.faults.append(fault)
        if len(g.faults) > MAX_FAULTS_PER_GPU:
            mine = [f for f in g.faults if f.process]
            g.faults.remove(min(mine or g.faults, key=lambda f: f.last))

    def _forget(self, now: float) -> None:
        for g in self._gpus.values():
            kept = [f for f in g.faults if now - f.last <= RETENTION_S]
            if len(kept) != len(g.faults):
                g.faults, g.past, self._dirty = kept, None, True
        while len(self._gpus) > MAX_GPUS:
            del self._gpus[min(self._gpus, key=lambda u: self._gpus[u].seen)]
            self._dirty = True

    def _past(self, g: _Gpu) -> GpuPast:
        if g.past is None or g.past.life != (self._boot, g.resets):
            g.past = GpuPast(tuple(sorted(g.faults, key=lambda f: f.first)),
                             (self._boot, g.resets))
        return g.past

    # --- the file ------------------------------------------------------------------
    def _load(self, path: Path) -> dict[str, _Gpu]:
        try:
            data = _read_json(path)
        except FileNotFoundError:
            return {}  # the first start: nothing remembered yet
        except safefile.FileRefused as exc:
            self._refuse(path, exc.problem)
            return {}
        try:
            state = StateModel.model_validate(data)
        except ValidationError as exc:
            where, problem = safefile.validation_problem(exc, "unknown key")
            self._refuse(path, f"{safefile.dotted(where)}: {problem}" if where else problem)
            return {}
        return {uuid: _Gpu(seen=g.seen, lost=g.lost, resets=g.resets, back=g.back,
                           faults=[Fault(**f.model_dump()) for f in g.faults])
                for uuid, g in state.gpus.items()}

    def _refuse(self, path: Path, problem: str) -> None:
        """One line: what is wrong with the file, and that the memory starts
        over (the file moved aside, where it can be)."""
        aside = path.with_name(path.name + ".refused")
        try:
            os.replace(path, aside)
            kept = f"moved to {safefile.one_line(str(aside))}"
        except OSError as exc:
            kept = f"could not be moved aside ({safefile.one_line(str(exc))})"
        log.warning("state file %s refused: %s; the GPUs' fault memory starts over (the file "
                    "%s)", safefile.one_line(str(path)), safefile.one_line(problem), kept)

    def _save(self, path: Path) -> None:
        data = {"version": VERSION, "gpus": {
            uuid: {"seen": g.seen, "lost": g.lost, "resets": g.resets, "back": g.back,
                   "faults": [{"kind": f.kind, "code": f.code, "first": f.first,
                               "last": f.last, "count": f.count, "boot_id": f.boot_id,
                               "resets": f.resets, **_details(f)} for f in g.faults]}
            for uuid, g in self._gpus.items()}}
        text = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
        try:
            write_atomically(path, text)
        except OSError as exc:
            if not self._write_failing:
                log.warning("cannot write the state file %s: %s; the GPUs' faults are "
                            "remembered only until the exporter stops",
                            safefile.one_line(str(path)), safefile.one_line(str(exc)))
            self._write_failing = True
            self._dirty = True  # tried again at the next change
            return
        if self._write_failing:
            log.info("state file %s written again", safefile.one_line(str(path)))
        self._write_failing = False


def _details(f: Fault) -> dict[str, Any]:
    """A record's line details, written only where it has them."""
    out: dict[str, Any] = {}
    if f.link is not None:
        out["link"] = f.link
    if f.process:
        out.update(pid=f.pid, process=f.process, owner=f.owner)
    return out


def _printable(text: str, limit: int) -> str:
    """``text`` as the file may hold it: printable ASCII (anything else, an
    escape sequence a process put in its name, as ``?``), at most ``limit``
    characters."""
    return "".join(c if " " <= c <= "~" else "?" for c in text[:limit])


# A UUID the file can hold: NVML's "GPU-" and up to 64 ASCII letters, digits
# and hyphens (asked of every GPU every poll: one match, not a loop).
_UUID = re.compile(r"GPU-[A-Za-z0-9-]{1,64}")


def _valid_uuid(uuid: str) -> bool:
    return _UUID.fullmatch(uuid) is not None


def _read_json(path: Path) -> Any:
    """The file's JSON value, refused unless it is a regular file (never
    followed through a symbolic link, never waited on as a FIFO) within the
    state file's bounds. FileNotFoundError: there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if os.path.islink(path):
            raise safefile.FileRefused(STATE_FILE, path, "is a symbolic link") from None
        raise safefile.FileRefused(STATE_FILE, path, f"cannot read: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise safefile.FileRefused(STATE_FILE, path, "is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    return safefile.parse_json(safefile.decode(safefile.within(data, path, STATE_FILE),
                                               path, STATE_FILE), path, STATE_FILE)


def write_atomically(path: Path, data: bytes) -> None:
    """``data`` as the whole of ``path``: written to a temporary file beside it,
    synced, then renamed over it (a crash leaves the old file or the new, never
    half), and the directory synced so the rename outlives a power cut."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
