"""Real cgroups and real processes on this machine's kernel, laid out as the
kubelet (systemd cgroup driver) and slurmd lay them out, for the real-kernel
tests. Everything lives under one parent cgroup of its own in each hierarchy,
removed at the end; nothing else of the machine is touched."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class Layout:
    """This machine's hierarchies: the unified one and v1's cpu and memory
    ones (None on a pure cgroup v2 host, where the unified one has them)."""

    unified: Path
    cpu: Path | None
    memory: Path | None

    @property
    def hybrid(self) -> bool:
        return self.cpu is not None


def layout() -> Layout | None:
    if (CGROUP / "cgroup.controllers").is_file():
        return Layout(CGROUP, None, None)
    if not (CGROUP / "unified" / "cgroup.controllers").is_file():
        return None
    found: dict[str, Path] = {}
    for entry in sorted(CGROUP.iterdir()):
        for kind, mark in (("cpu", "cpu.cfs_quota_us"), ("memory", "memory.limit_in_bytes")):
            if kind not in found and (entry / mark).is_file():
                found[kind] = entry
    if len(found) < 2:
        return None
    return Layout(CGROUP / "unified", found["cpu"], found["memory"])


@dataclass
class Workload:
    """One container or Slurm job: its cgroup in each hierarchy and its process."""

    name: str
    paths: dict[Path, str]  # hierarchy -> the workload's cgroup under the test's parent
    leaves: dict[Path, str]  # hierarchy -> where its process is put (a task's leaf)
    argv: list[str]
    uid: int
    cpu_quota: float | None = None  # CPUs
    memory_limit: int | None = None  # bytes
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


class Cgroups:
    """Makes cgroups under ``/<parent>`` in each hierarchy and removes them."""

    def __init__(self, lay: Layout, parent: str) -> None:
        self.layout = lay
        self.parent = parent
        self._made: list[Path] = []
        self.workloads: list[Workload] = []

    def hierarchies(self) -> list[Path]:
        return [h for h in (self.layout.unified, self.layout.cpu, self.layout.memory) if h]

    def make(self, hierarchy: Path, path: str) -> Path:
        """``/<parent>/<path>`` in ``hierarchy``; on cgroup v2 the controllers
        are passed down to it, as systemd does for its slices."""
        directory = hierarchy / self.parent
        self._mkdir(directory)
        for part in [p for p in path.split("/") if p]:
            if hierarchy == self.layout.unified and not self.layout.hybrid:
                self._enable(directory)
            directory = directory / part
            self._mkdir(directory)
        return directory

    def _mkdir(self, directory: Path) -> None:
        if not directory.is_dir():
            directory.mkdir()
            self._made.append(directory)

    @staticmethod
    def _enable(directory: Path) -> None:
        wanted = {"cpu", "memory", "io"} & set(
            (directory / "cgroup.controllers").read_text().split())
        with contextlib.suppress(OSError):
            (directory / "cgroup.subtree_control").write_text(
                " ".join(f"+{c}" for c in sorted(wanted)))

    def limit(self, w: Workload) -> None:
        lay = self.layout
        if w.cpu_quota is not None:
            quota = int(w.cpu_quota * CPU_PERIOD_US)
            if lay.cpu is not None:
                (lay.cpu / self.parent / w.paths[lay.cpu].lstrip("/") / "cpu.cfs_quota_us"
                 ).write_text(str(quota))
            else:
                (lay.unified / self.parent / w.paths[lay.unified].lstrip("/") / "cpu.max"
                 ).write_text(f"{quota} {CPU_PERIOD_US}")
        if w.memory_limit is not None:
            if lay.memory is not None:
                (lay.memory / self.parent / w.paths[lay.memory].lstrip("/")
                 / "memory.limit_in_bytes").write_text(str(w.memory_limit))
            else:
                (lay.unified / self.parent / w.paths[lay.unified].lstrip("/") / "memory.max"
                 ).write_text(str(w.memory_limit))

    def start(self, w: Workload) -> None:
        self.workloads.append(w)
        for hierarchy in self.hierarchies():
            self.make(hierarchy, w.paths[hierarchy])
        self.limit(w)
        leaves = [self.make(h, w.leaves[h]) for h in self.hierarchies()]
        # Stopped until it is in its cgroups, so its first instruction counts there.
        w.proc = subprocess.Popen(
            ["setpriv", f"--reuid={w.uid}", f"--regid={w.uid}", "--clear-groups", "--",
             *w.argv], start_new_session=True, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for leaf in leaves:
            (leaf / "cgroup.procs").write_text(str(w.proc.pid))

    def close(self) -> None:
        for w in self.workloads:
            if w.proc is not None and w.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(w.proc.pid, signal.SIGKILL)
                w.proc.wait(timeout=10)
        # Deepest first; a cgroup whose last task just died may still be busy
        # for a moment. What a runtime made below the parent, in any
        # hierarchy (runc makes its cgroup in every v1 controller), goes too.
        made = set(self._made)
        for hierarchy in [CGROUP, *sorted(CGROUP.iterdir())]:
            top = hierarchy / self.parent
            if top.is_dir():
                made.update(p for p in top.rglob("*") if p.is_dir())
                made.add(top)
        for directory in sorted(made, key=lambda p: len(p.parts), reverse=True):
            for _ in range(50):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


@contextlib.contextmanager
def cgroups(lay: Layout, parent: str) -> Iterator[Cgroups]:
    made = Cgroups(lay, parent)
    try:
        yield made
    finally:
        made.close()
