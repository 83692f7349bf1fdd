"""Host faults: processes exiting in the middle of a read, /proc and /sys files
that cannot be read or make no sense, and a fixture filesystem fuzzed by
hypothesis. The exporter never crashes and never fails a scrape; what it could
not read is reported through ``gpu_exporter_collector_success`` and
``gpu_exporter_collector_errors_total``, and the rest is still exported.

A fixed seed and a small budget in CI; ``GPU_EXPORTER_LONG_TESTS=1`` runs a
longer, randomised budget.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_exporter.catalog import CATALOG
from gpu_exporter.collectors.host import HostCollector
from gpu_exporter.collectors.pcie import PcieCollector
from gpu_exporter.host import procs as procs_module
from gpu_exporter.nvml.session import Gpu, Identity, NvmlSession
from gpu_exporter.poller import Poller
from gpu_exporter.simulator.model import Scenario
from gpu_exporter.snapshot import Snapshot
from gpu_exporter.web.render import LabelCache, render
from tests.simnode import SimRun, VirtualClock
from tests.test_chaos import check_exposition

LONG = os.environ.get("GPU_EXPORTER_LONG_TESTS") == "1"
FUZZ = settings(max_examples=200 if LONG else 15, derandomize=not LONG, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

FIXTURES = Path(__file__).parent / "fixtures"


def _node(processes: int = 3) -> Scenario:
    return Scenario(name="host-faults", node={"gpus": 2}, state={"utilization": 0.9},
                    processes=[{"pid": 900 + i, "comm": f"train{i}", "gpus": [i % 2],
                                "gpu_memory_ratio": 0.2, "cpu_ratio": 1.0, "state": "R"}
                               for i in range(processes)])


def _collector(snap: Snapshot, name: str) -> tuple[float | None, float | None]:
    return (snap.get("gpu_exporter_collector_success", collector=name),
            snap.get("gpu_exporter_collector_errors_total", collector=name))


def _pids(snap: Snapshot) -> set[str]:
    return {lab["pid"] for lab, _ in snap.series("gpu_process_info")}


# --- processes exiting mid-read -------------------------------------------------------------
def test_a_process_exiting_in_the_middle_of_its_read_is_skipped_silently(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with SimRun(_node()) as run:
        assert _pids(run.poll()) == {"900", "901", "902"}
        run.exporter.poller.before_poll.clear()  # freeze the simulated /proc
        gone = run.node.procfs / "901"
        real_read = procs_module.read_text

        def read_then_exit(path: Path | str) -> str:
            text = real_read(path)
            if str(path) == str(gone / "stat"):
                shutil.rmtree(gone)  # the process exits after its stat was read
            return text

        monkeypatch.setattr(procs_module, "read_text", read_then_exit)
        snap = run.poll(1)
    assert _pids(snap) == {"900", "902"}
    assert _collector(snap, "processes") == (1.0, 0.0)  # exits are normal, not errors


def test_a_process_whose_files_turn_unreadable_is_counted_and_the_rest_exported() -> None:
    with SimRun(_node()) as run:
        run.poll()
        run.exporter.poller.before_poll.clear()
        status = run.node.procfs / "901" / "status"
        status.unlink()
        status.mkdir()  # reading it fails with EISDIR, as a hidepid=1 /proc fails with EACCES
        snap = run.poll(1)
    success, errors = _collector(snap, "processes")
    assert success == 1.0 and errors is not None and errors >= 1
    assert _pids(snap) == {"900", "902"}
    assert snap.series("gpu_power_watts")


def test_malformed_per_process_files_are_counted_not_fatal() -> None:
    with SimRun(_node()) as run:
        run.poll()
        run.exporter.poller.before_poll.clear()
        (run.node.procfs / "900" / "stat").write_text("900 (train0 R 1 2\n")  # truncated
        (run.node.procfs / "902" / "status").write_text("Cpus_allowed_list:\tbanana\n")
        snap = run.poll(1)
    success, errors = _collector(snap, "processes")
    assert success == 1.0 and errors == 2.0
    assert _pids(snap) == {"901"}


# --- unreadable and malformed host files ----------------------------------------------------
@pytest.mark.parametrize("fault", ["directory", "symlink-loop", "garbage", "empty"])
def test_a_host_file_that_cannot_be_read_is_counted_and_the_rest_exported(fault: str) -> None:
    with SimRun(_node(), metrics={"detail": True}) as run:
        run.poll()
        run.exporter.poller.before_poll.clear()
        meminfo = run.node.procfs / "meminfo"
        meminfo.unlink()
        if fault == "directory":
            meminfo.mkdir()
        elif fault == "symlink-loop":
            meminfo.symlink_to(meminfo)
        elif fault == "garbage":
            meminfo.write_bytes(b"\xff\xfe MemTotal: lots kB\n\x00")
        else:
            meminfo.write_text("")
        snap = run.poll(1)
        errors_before = _collector(snap, "host")[1]
        snap = run.poll(1)
    success, errors = _collector(snap, "host")
    assert success == 1.0
    assert errors is not None and errors_before is not None and errors > errors_before >= 1
    assert not snap.series("gpu_host_memory_total_bytes")
    assert snap.series("gpu_host_load_average") and snap.series("gpu_host_pressure_ratio")
    assert snap.series("gpu_power_watts")


def test_a_host_root_where_nothing_can_be_read_fails_the_collector_not_the_poll() -> None:
    with SimRun(_node()) as run:
        run.poll()
        run.exporter.poller.before_poll.clear()
        for entry in run.node.procfs.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        snap = run.poll(1)
    assert _collector(snap, "host")[0] == 0.0
    assert _collector(snap, "device")[0] == 1.0
    assert snap.series("gpu_power_watts")


def test_malformed_sysfs_files_are_counted_and_other_gpus_still_reported() -> None:
    session = NvmlSession()
    session.gpus = [Gpu(0, None, Identity(0, uuid="GPU-0", pci_bus_id="00000000:18:00.0")),
                    Gpu(1, None, Identity(1, uuid="GPU-1", pci_bus_id="00000000:2A:00.0"))]
    clock = VirtualClock()
    poller = Poller([PcieCollector(session, FIXTURES / "sys" / "malformed")], 1.0, None,
                    wall_clock=clock, monotonic=clock)
    snap = poller.poll_once()
    success, errors = _collector(snap, "pcie")
    assert success == 1.0 and errors is not None and errors >= 1
    check_exposition(render(snap, False, LabelCache()).decode(), openmetrics=False)


# --- a fixture filesystem fuzzed by hypothesis ----------------------------------------------
def _files(root: Path) -> list[str]:
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(out)


def _fixture_tree() -> Iterator[tuple[Path, Path]]:
    with tempfile.TemporaryDirectory(prefix="gpu-exporter-fuzz-") as tmp:
        proc, sys_ = Path(tmp) / "proc", Path(tmp) / "sys"
        shutil.copytree(FIXTURES / "proc" / "normal", proc, symlinks=True)
        shutil.copytree(FIXTURES / "sys" / "switch", sys_, symlinks=True)
        yield proc, sys_


PROC_FILES = _files(FIXTURES / "proc" / "normal")
SYS_FILES = _files(FIXTURES / "sys" / "switch")

mutation = st.one_of(
    st.tuples(st.just("empty")),
    st.tuples(st.just("truncate"), st.integers(0, 200)),
    st.tuples(st.just("bytes"), st.binary(max_size=80)),
    st.tuples(st.just("text"), st.text(max_size=60)),
    st.tuples(st.just("numbers"), st.sampled_from(
        ["-1", "0", "1e400", "nan", "18446744073709551616", "99999999999999999999999999",
         "0x10", "", " "])),
    st.tuples(st.just("delete")),
    st.tuples(st.just("directory")),
    st.tuples(st.just("symlink-loop")),
)
file_faults = st.lists(st.tuples(st.sampled_from(["proc", "sys"]), st.integers(0, 10**6),
                                 mutation), max_size=8)


def _mutate(path: Path, how: tuple[Any, ...]) -> None:
    if path.is_symlink():
        path.unlink()  # an earlier fault's loop: this fault starts from an empty file
        path.write_bytes(b"")
    if not path.exists() or path.is_dir():
        return  # deleted, or turned into a directory, by an earlier fault
    kind = how[0]
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncate":
        path.write_bytes(path.read_bytes()[: how[1]])
    elif kind == "bytes":
        path.write_bytes(how[1])
    elif kind == "text":
        path.write_text(how[1], encoding="utf-8", errors="replace")
    elif kind == "numbers":
        path.write_text(re.sub(r"\d+", how[1], path.read_text(errors="replace")))
    elif kind == "delete":
        path.unlink()
    elif kind == "directory":
        path.unlink()
        path.mkdir()
    elif kind == "symlink-loop":
        path.unlink()
        path.symlink_to(path)


@FUZZ
@given(faults=st.lists(file_faults, min_size=3, max_size=3))
def test_fuzzed_proc_and_sys_never_crash_and_failures_are_reported(
        faults: list[list[tuple[str, int, tuple[Any, ...]]]]) -> None:
    session = NvmlSession()
    session.gpus = [Gpu(0, None, Identity(0, uuid="GPU-0", pci_bus_id="00000000:18:00.0")),
                    Gpu(1, None, Identity(1, uuid="GPU-1", pci_bus_id="00000000:2A:00.0"))]
    clock = VirtualClock()
    for proc, sys_ in _fixture_tree():
        collectors = [HostCollector(proc, clock), PcieCollector(session, sys_)]
        poller = Poller(collectors, 1.0, None, wall_clock=clock, monotonic=clock)
        errors_seen = {"host": 0.0, "pcie": 0.0}
        last_counts: dict[tuple[str, tuple[str, ...]], float] = {}
        for poll_faults in faults:
            for tree, pick, how in poll_faults:
                root, names = (proc, PROC_FILES) if tree == "proc" else (sys_, SYS_FILES)
                _mutate(root / names[pick % len(names)], how)
            clock.advance(1.0)
            snap = poller.poll_once()  # never raises
            for name in ("host", "pcie"):
                success, errors = _collector(snap, name)
                assert success in (0.0, 1.0)
                assert errors is not None and errors >= errors_seen[name]  # a counter
                errors_seen[name] = errors
            check_exposition(render(snap, False, LabelCache()).decode(), openmetrics=False)
            check_exposition(render(snap, True, LabelCache()).decode(), openmetrics=True)
            _every_host_value_is_plausible(snap, last_counts)


def _every_host_value_is_plausible(snap: Snapshot,
                                   last: dict[tuple[str, tuple[str, ...]], float]) -> None:
    """Every host series within its metric's bounds, available memory within
    the total, and no counter lower than its last exported value unless its
    resets are documented."""
    for family in CATALOG:
        bounds, name = family.bounds, family.name
        if bounds is None or not name.startswith("gpu_host_"):
            continue
        for labels, value in snap.series(name):
            assert bounds.low <= value <= bounds.high, (name, labels, value)
            key = (name, tuple(labels.values()))
            if name.endswith("_total") and not bounds.resets:
                assert value >= last.get(key, value), (name, labels, value, last[key])
            last[key] = value
    total = snap.get("gpu_host_memory_total_bytes")
    available = snap.get("gpu_host_memory_available_bytes")
    if total is not None and available is not None:
        assert available <= total


@FUZZ
@given(polls=st.lists(st.lists(st.tuples(
    st.sampled_from([f for f in PROC_FILES if "/" not in f or f.startswith(("net", "pressure"))]),
    st.integers(0, 10**6),
    st.one_of(st.integers(-2**64, 2**65), st.sampled_from(["nan", "inf", "-0", "1e30", "0.5"]))),
    max_size=6), min_size=3, max_size=4))
def test_fuzzed_numbers_in_proc_are_never_exported_out_of_range(
        polls: list[list[tuple[str, int, int | str]]]) -> None:
    """Any number of /proc's host files replaced by any other (negative,
    past 64 bits, NaN), poll after poll: the host series that are exported
    stay in their ranges, and its counters never go backwards."""
    clock = VirtualClock()
    for proc, _sys in _fixture_tree():
        collector = HostCollector(proc, clock)
        poller = Poller([collector], 1.0, None, wall_clock=clock, monotonic=clock)
        last: dict[tuple[str, tuple[str, ...]], float] = {}
        for changes in polls:
            for name, pick, number in changes:
                path = proc / name
                text = path.read_text()
                spans = [m.span() for m in re.finditer(r"\d+(\.\d+)?", text)]
                start, end = spans[pick % len(spans)]
                path.write_text(f"{text[:start]}{number}{text[end:]}")
            clock.advance(1.0)
            snap = poller.poll_once()
            _every_host_value_is_plausible(snap, last)


@FUZZ
@given(faults=st.lists(st.lists(st.tuples(st.integers(0, 10**6), mutation), max_size=6),
                       min_size=3, max_size=3))
def test_fuzzed_simulated_node_files_under_the_whole_exporter(
        faults: list[list[tuple[int, tuple[Any, ...]]]]) -> None:
    """The real exporter (every collector) on a simulated node whose /proc and /sys
    are broken a little more every poll."""
    with SimRun(_node()) as run:
        run.poll()
        run.exporter.poller.before_poll.clear()
        files = [*(Path("proc") / f for f in _files(run.node.procfs)),
                 *(Path("sys") / f for f in _files(run.node.sysfs))]
        for poll_faults in faults:
            for pick, how in poll_faults:
                rel = files[pick % len(files)]
                root = run.node.procfs if rel.parts[0] == "proc" else run.node.sysfs
                _mutate(root / Path(*rel.parts[1:]), how)
            snap = run.poll(1)  # never raises
            for lab, value in snap.series("gpu_exporter_collector_success"):
                assert value in (0.0, 1.0), lab
            assert _collector(snap, "device")[0] == 1.0  # NVML is not the host
            assert len(snap.series("gpu_up")) == 2
            check_exposition(run.scrape(), openmetrics=False)
