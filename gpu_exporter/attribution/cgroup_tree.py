"""Where a cgroup path from ``/proc/PID/cgroup`` lies in the mounted cgroup
tree, the way the kernel gives it, without privileges.

The kernel prints a process's cgroup relative to the *reader's* cgroup
namespace root. On cgroup v2 nodes containerd and CRI-O give every
non-privileged container a private cgroup namespace, so from inside the
exporter's pod another pod's process reads
``0::/../../kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope``
(``hostPID`` and a bind mount of the host's /proc change nothing). The host's
tree, bound into the pod (``--path.sysfs=/host/sys``), is rooted at the host's
root cgroup. To place such a path, the exporter finds its own namespace root
in that tree: the directory whose ``cgroup.procs`` lists its own PID (as its
PID namespace numbers it, which is how the kernel lists them to it), less the
part of its own printed path below that root. Every path is then joined to
that root and must stay inside the mounted hierarchy.

Layouts: cgroup v2 (``cgroup.controllers`` at the root), hybrid (v1
controllers, cgroup v2 at ``unified/`` holding the pressure files, common on
older distributions and some VMs) and v1 only. The v1 hierarchies read are
the ``cpu`` one (CFS quota and throttling) and the ``memory`` one (limit,
usage, failures at the limit); each is found by its own files, not its name
(``cpu,cpuacct`` or ``cpu`` alike).

What cannot be placed is said, once per workload, with a reason a person can
act on (:class:`Problem`), never silently absent.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from gpu_exporter.attribution.procfiles import read_bounded_or_errno, read_text_bounded

# What marks each hierarchy's root: a v2 root lists its controllers; a v1
# hierarchy is told by a file only its controller has.
_V2_MARK = "cgroup.controllers"
_V1_MARKS = {"cpu": "cpu.cfs_quota_us", "memory": "memory.limit_in_bytes"}
# The search for the exporter's own cgroup: a node with many pods has a few
# thousand cgroups, rarely nested more than eight deep; past these bounds the
# tree is not a node's and the search gives up (said as NAMESPACE_ROOT_UNKNOWN).
SEARCH_MAX_DIRS = 20_000
SEARCH_MAX_DEPTH = 12
# /proc/self/cgroup of a process is a line per hierarchy: well under this.
_SELF_LIMIT = 64 * 1024


class Problem(Enum):
    """Why a workload's cgroup signals could not be read, each a gap a working
    exporter on this node should close (the chart's mounts, its user)."""

    NO_TREE = "no cgroup tree at {root} (mount the host's /sys and set --path.sysfs)"
    OUTSIDE = ("its cgroup lies outside the cgroup tree mounted at {root}: the exporter runs in "
               "a private cgroup namespace and that tree is its own (mount the host's /sys and "
               "set --path.sysfs)")
    NAMESPACE_ROOT_UNKNOWN = ("its cgroup is given relative to the exporter's cgroup namespace "
                              "and the exporter's own cgroup is not in the tree at {root} "
                              "(mount the host's /sys and set --path.sysfs)")
    NOT_FOUND = "its cgroup is not in the tree at {root} (gone, or not the host's tree)"
    DENIED = "permission denied reading its cgroup files under {root}"
    NO_FILES = "its cgroup under {root} has no pressure, CPU or memory files"

    def say(self, root: str) -> str:
        return self.value.format(root=root)


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """One mounted hierarchy and where the exporter's cgroup namespace root
    lies in it (``ns_root``: path elements from the hierarchy's root; None
    when the exporter's own cgroup is not in it)."""

    kind: str  # "unified", "cpu" or "memory"
    mount: str
    ns_root: tuple[str, ...] | None

    def directory(self, printed: str) -> str | Problem:
        """The directory of a cgroup path as /proc/PID/cgroup prints it to the
        exporter, or why it cannot be placed."""
        if not printed.startswith("/") or "\0" in printed:
            return Problem.NOT_FOUND
        parts = [p for p in printed.split("/") if p and p != "."]
        if ".." in parts and self.ns_root is None:
            return Problem.NAMESPACE_ROOT_UNKNOWN
        placed = list(self.ns_root or ())
        for part in parts:
            if part == "..":
                if not placed:  # above the mounted hierarchy's root
                    return Problem.OUTSIDE
                placed.pop()
            else:
                placed.append(part)
        return os.path.join(self.mount, *placed)


@dataclass(frozen=True, slots=True)
class CgroupTree:
    """The hierarchies found under the cgroup mount (``root``): the unified
    one (v2, or hybrid's ``unified/``) and v1's cpu and memory ones."""

    root: str
    layout: str  # "v2", "hybrid", "v1" or "none"
    unified: Hierarchy | None
    cpu: Hierarchy | None
    memory: Hierarchy | None

    def problem_text(self, problem: Problem) -> str:
        return problem.say(self.root)


def _is_file(path: str) -> bool:
    try:
        return os.path.isfile(path)
    except (OSError, ValueError):
        return False


def _v1_hierarchies(root: str) -> dict[str, str]:
    """kind -> the v1 hierarchy's mount directory under ``root``."""
    found: dict[str, str] = {}
    try:
        names = sorted(e.name for e in os.scandir(root) if e.is_dir())
    except OSError:
        return found
    for name in names:
        for kind, mark in _V1_MARKS.items():
            if kind not in found and _is_file(os.path.join(root, name, mark)):
                found[kind] = os.path.join(root, name)
    return found


def parse_self_cgroup(text: str) -> dict[str, str]:
    """A /proc/PID/cgroup file's paths by hierarchy: "unified" for the "0::"
    line, and each v1 controller's name ("cpu", "cpuacct", "memory"...) for
    the line that lists it."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and not controllers:
            paths.setdefault("unified", path)
            continue
        for controller in controllers.split(","):
            if controller:
                paths.setdefault(controller, path)
    return paths


def _lists_pid(directory: str, pid: int) -> bool:
    text = read_text_bounded(os.path.join(directory, "cgroup.procs"), 4 * 1024 * 1024)
    return text is not None and str(pid) in text.split()


def _walk(mount: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    """The hierarchy's directories breadth first, within the search bounds."""
    queue: deque[tuple[str, tuple[str, ...]]] = deque([(mount, ())])
    seen = 0
    while queue and seen < SEARCH_MAX_DIRS:
        directory, parts = queue.popleft()
        seen += 1
        yield directory, parts
        if len(parts) >= SEARCH_MAX_DEPTH:
            continue
        try:
            children = sorted(e.name for e in os.scandir(directory)
                              if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        queue.extend((os.path.join(directory, c), (*parts, c)) for c in children)


def find_namespace_root(mount: str, own: str | None, pid: int,
                        hint: tuple[str, ...] | None = None) -> tuple[str, ...] | None:
    """Where the exporter's cgroup namespace root lies in this hierarchy: its
    own cgroup (the directory listing ``pid``) less ``own``, its path as the
    kernel prints it to itself. None when its cgroup is not in the tree.
    ``hint``: where it lies in another hierarchy, tried first (a runtime
    puts a container at the same path in each)."""
    if own is None or not own.startswith("/"):
        return None
    own_parts = tuple(p for p in own.split("/") if p)
    if ".." in own_parts:
        return None  # moved out of its own namespace root: nothing to anchor on
    # No namespace of its own (a host install, hostPID with host cgroupns):
    # its printed path is its place in the tree.
    for root in ((), hint) if hint else ((),):
        if _lists_pid(os.path.join(mount, *root, *own_parts), pid):
            return root
    for directory, parts in _walk(mount):
        if parts[len(parts) - len(own_parts):] != own_parts or len(parts) < len(own_parts):
            continue
        if _lists_pid(directory, pid):
            return parts[:len(parts) - len(own_parts)]
    return None


def discover(cgroup_root: Path | str, self_cgroup: str | None = None,
             pid: int | None = None) -> CgroupTree:
    """The hierarchies under ``cgroup_root`` (``<sysfs>/fs/cgroup``) and the
    exporter's namespace root in each. ``self_cgroup`` is the exporter's own
    /proc/self/cgroup text (read when not given); ``pid`` its PID."""
    root = os.fspath(cgroup_root)
    if self_cgroup is None:
        self_cgroup = read_text_bounded("/proc/self/cgroup", _SELF_LIMIT) or ""
    if pid is None:
        pid = os.getpid()
    own = parse_self_cgroup(self_cgroup)
    unified_mount: str | None = None
    if _is_file(os.path.join(root, _V2_MARK)):
        unified_mount, layout = root, "v2"
    elif _is_file(os.path.join(root, "unified", _V2_MARK)):
        unified_mount, layout = os.path.join(root, "unified"), "hybrid"
    v1 = _v1_hierarchies(root)
    if unified_mount is None:
        layout = "v1" if v1 else "none"
    elif unified_mount != root and not v1:
        layout = "v2"  # cgroup2 at unified/ with no v1 controller beside it

    found: list[tuple[str, ...]] = []

    def hierarchy(kind: str, mount: str | None, own_key: str) -> Hierarchy | None:
        if mount is None:
            return None
        ns_root = find_namespace_root(mount, own.get(own_key), pid,
                                      found[0] if found else None)
        if ns_root:
            found.append(ns_root)
        return Hierarchy(kind, mount, ns_root)

    return CgroupTree(root, layout, hierarchy("unified", unified_mount, "unified"),
                      hierarchy("cpu", v1.get("cpu"), "cpu"),
                      hierarchy("memory", v1.get("memory"), "memory"))


def read_file(directory: str, name: str) -> str | int:
    """A cgroup file's text, or the errno that kept it (ENOENT when it is not
    there, EACCES when not permitted)."""
    data = read_bounded_or_errno(os.path.join(directory, name))
    return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
