"""Every memory bound holds with distinct keys at scale: whatever the exporter
keeps from one poll to the next (a dict, set, list or deque held by a
collector, the NVML session, the poller, the history) stays bounded by what
is on the node now, not by what was ever on it. Processes come and go (each
PID once, each in a cgroup of its own, as a busy batch node's jobs do) for
hundreds of polls: every container reachable from the running exporter then
holds no more entries than a node this size needs, so no per-PID,
per-cgroup or per-label cache grows with the node's history.

The list of what the exporter keeps, with each one's bound and the test that
holds it, is ``tests/caches.py``; ``test_every_kept_container_is_registered``
fails when a new one appears without an entry.
"""

from __future__ import annotations

import ast
import os
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpu_exporter.simulator.model import Scenario
from tests.caches import CONTAINER_CALLS, KEPT, NOT_KEPT, SKIPPED_PACKAGES
from tests.simnode import DetailRun

LONG = os.environ.get("GPU_EXPORTER_LONG_TESTS") == "1"
GPUS = 1
POLLS = 1500 if LONG else 200
# A job lives this many seconds: 2 x GPUS x POLLS / LIFE distinct PIDs in all.
LIFE = 1
# What a node of this size needs at most in one container: every GPU's
# entries for every process alive in the last minute, every metric family's
# labels (a GPU's 18 NVLinks x 6 fields: 108)... far below the distinct keys the run feeds in.
BOUND = 150
ROOT = Path(__file__).resolve().parent.parent / "gpu_exporter"


def churn() -> Scenario:
    """GPUS GPUs, each running a new short job every LIFE seconds: a new PID in
    a new cgroup, with a child of its own (a data loader)."""
    timeline: list[dict[str, Any]] = []
    pid = 50000
    for at in range(0, POLLS + 1, LIFE):
        procs = []
        for gpu in range(GPUS):
            pid += 2
            cgroup = f"0::/system.slice/job-{pid}.scope"
            procs.append({"pid": pid, "comm": f"job{pid % 1000}", "gpus": [gpu],
                          # Each job's own share: the GPU's used memory moves
                          # with every change, and the process list is read again.
                          "gpu_memory_ratio": 0.1 + (pid % 7) / 100,
                          "sm_utilization": 0.5, "cpu_ratio": 0.8,
                          "state": "R", "cgroup": cgroup})
            procs.append({"pid": pid + 1, "ppid": pid, "comm": "loader", "cpu_ratio": 0.3,
                          "state": "S", "cgroup": cgroup})
        timeline.append({"at": float(at), "processes": procs})
    return Scenario(name="churn", node={"gpus": GPUS}, noise=False,
                    state={"utilization": 0.6}, timeline=timeline)


def _own(obj: object) -> bool:
    module = type(obj).__module__
    return module.startswith("gpu_exporter.") and not module.startswith(
        "gpu_exporter.simulator")


def containers(root: object, path: str = "exporter") -> Iterator[tuple[str, int]]:
    """Every dict, set, list and deque reachable from ``root`` through the
    exporter's own objects, with its size; each object once."""
    seen: set[int] = set()
    todo: deque[tuple[str, object]] = deque([(path, root)])
    while todo:
        where, obj = todo.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, dict | set | frozenset | list | tuple | deque):
            if not isinstance(obj, tuple | frozenset):
                yield where, len(obj)
            items = obj.items() if isinstance(obj, dict) else enumerate(obj)
            for key, value in list(items)[:BOUND + 1]:
                todo.append((f"{where}[{key!r:.40}]", value))
            continue
        if not _own(obj):
            continue
        attrs: dict[str, object] = dict(getattr(obj, "__dict__", {}))
        for cls in type(obj).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if hasattr(obj, slot):
                    attrs[slot] = getattr(obj, slot)
        for name, value in attrs.items():
            todo.append((f"{where}.{name}", value))


def test_nothing_kept_grows_with_processes_that_come_and_go() -> None:
    with DetailRun(churn(), poll={"interval": 1.0}) as run:
        run.poll()
        run.poll(POLLS, interval=1.0)
        snap = run.snapshot
        assert snap is not None
        exporter = run.exporter
        # The churn was seen: the newest jobs' processes are exported.
        pids = {lab["pid"] for lab, _ in snap.series("gpu_process_info")}
        assert pids and min(int(p) for p in pids) > 50000 + POLLS // 2, pids
        sizes = dict(containers(exporter))
    over = {where: n for where, n in sizes.items() if n > BOUND}
    assert not over, over
    assert len(sizes) > 100  # the walk reached the collectors' own state


def _kept_containers() -> set[str]:
    """Every container an object of gpu_exporter sets on itself in __init__
    (``self.x = {}``, ``dict()``, ``set()``, ``[]``, ``deque()`` ...), and
    every function cached for the process' life (@cache, @lru_cache), as
    "module:Class.attr" and "module:function"."""
    found: set[str] = set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent)
        if any(part in SKIPPED_PACKAGES for part in rel.parts):
            continue
        module = ".".join(rel.with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for init in cls.body:
                if not (isinstance(init, ast.FunctionDef) and init.name == "__init__"):
                    continue
                for node in ast.walk(init):
                    target, value = None, None
                    if isinstance(node, ast.Assign) and len(node.targets) == 1:
                        target, value = node.targets[0], node.value
                    elif isinstance(node, ast.AnnAssign):
                        target, value = node.target, node.value
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self" and _is_container(value)):
                        found.add(f"{module}:{cls.name}.{target.attr}")
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for deco in fn.decorator_list:
                call = deco.func if isinstance(deco, ast.Call) else deco
                name = call.id if isinstance(call, ast.Name) else getattr(call, "attr", "")
                if name in ("cache", "lru_cache"):
                    found.add(f"{module}:{fn.name}")
    return found


def _is_container(value: ast.expr | None) -> bool:
    if isinstance(value, ast.Dict | ast.Set | ast.List | ast.DictComp | ast.SetComp
                  | ast.ListComp):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name in CONTAINER_CALLS
    return False


def test_every_kept_container_is_registered() -> None:
    """A new dict, set or list an object keeps, or a new cached function,
    needs its entry in tests/caches.py: what bounds it, and the test that
    holds it (or why nothing outlives a poll)."""
    found = _kept_containers()
    listed = set(KEPT) | set(NOT_KEPT)
    assert not found - listed, f"not in tests/caches.py: {sorted(found - listed)}"
    assert not listed - found, f"in tests/caches.py, gone from the code: {sorted(listed - found)}"
    for name, entry in KEPT.items():
        test_file, _, test = entry.test.partition("::")
        text = (ROOT.parent / "tests" / test_file).read_text(encoding="utf-8")
        assert f"def {test}(" in text, (name, entry.test)


def test_the_registry_walk_finds_a_new_cache() -> None:
    """The check itself: a container set in __init__ is found."""
    tree = ast.parse("class A:\n    def __init__(self):\n        self.seen: dict = {}\n")
    init = tree.body[0].body[0]  # type: ignore[attr-defined]
    assert _is_container(init.body[0].value)
