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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_exporter.collectors.host import HostCollector
from gpu_exporter.collectors.pcie import PcieCollector
from gpu_exporter.daemon.poller import Poller
from gpu_exporter.host import cpu, disks, memory, network, pressure
from gpu_exporter.host import procs as procs_module
from gpu_exporter.host.pci import AER_SEVERITIES
from gpu_exporter.nvml.session import Gpu, Identity, NvmlSession, normalize_bus_id
from gpu_exporter.poll.catalog import CATALOG
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.simulator.model import Scenario
from gpu_exporter.web.render import LabelCache, render
from tests.simnode import SimRun, VirtualClock
from tests.simulator.test_chaos import check_exposition

LONG = os.environ.get("GPU_EXPORTER_LONG_TESTS") == "1"
FUZZ = settings(max_examples=200 if LONG else 15, derandomize=not LONG, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

FIXTURES = Path(__file__).parents[1] / "fixtures"


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
# Faults that replace every line of a file: what is left holds nothing of it.
REPLACING = ("empty", "bytes", "text")
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


# --- what each reader makes of each broken file -----------------------------------------------

Key = tuple[str, frozenset[tuple[str, str]]]  # a series: its name and labels


def _key(name: str, **labels: str) -> Key:
    return name, frozenset(labels.items())


@dataclass(frozen=True)
class Source:
    """One host file, how its reader reads it, and the series it makes."""

    name: str
    read: Callable[[Path], Any]
    series: Callable[[Any], dict[Key, float]]  # the reader's result -> series and values
    families: tuple[str, ...]
    match: dict[str, str] = field(default_factory=dict)  # labels of its series in a family

    def mine(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match.items())


def _cpu_series(t: cpu.CpuTimes) -> dict[Key, float]:
    out = {_key("gpu_host_cpu_seconds_total"): t.total}
    for mode in ("iowait", "steal"):
        if mode in t.seconds:
            out[_key(f"gpu_host_cpu_{mode}_seconds_total")] = t.seconds[mode]
    if t.context_switches is not None:
        out[_key("gpu_host_context_switches_total")] = t.context_switches
    return out


def _memory_series(m: memory.MemInfo) -> dict[Key, float]:
    out = {_key("gpu_host_memory_total_bytes"): m.total_bytes,
           _key("gpu_host_swap_used_bytes"): m.swap_used_bytes}
    if m.available_bytes is not None:
        out[_key("gpu_host_memory_available_bytes")] = m.available_bytes
    return out


def _pressure_series(resource: str) -> Callable[[pressure.Pressure], dict[Key, float]]:
    def series(p: pressure.Pressure) -> dict[Key, float]:
        out = {}
        for kind, stall in (("some", p.some), ("full", p.full)):
            if stall is not None:
                out[_key("gpu_host_pressure_ratio", resource=resource, kind=kind)] = stall.avg10
                out[_key("gpu_host_pressure_stalled_seconds_total", resource=resource,
                         kind=kind)] = stall.total_seconds
        return out
    return series


HOST_SOURCES = (
    Source("stat", cpu.read_cpu_times, _cpu_series,
           ("gpu_host_cpu_seconds_total", "gpu_host_cpu_iowait_seconds_total",
            "gpu_host_cpu_steal_seconds_total", "gpu_host_context_switches_total")),
    Source("meminfo", memory.read_meminfo, _memory_series,
           ("gpu_host_memory_total_bytes", "gpu_host_memory_available_bytes",
            "gpu_host_swap_used_bytes")),
    Source("vmstat", memory.read_swap_activity,
           lambda s: {} if s is None else {
               _key("gpu_host_swap_bytes_total", direction="in"): s.in_bytes,
               _key("gpu_host_swap_bytes_total", direction="out"): s.out_bytes},
           ("gpu_host_swap_bytes_total",)),
    Source("loadavg", cpu.read_loadavg,
           lambda a: {_key("gpu_host_load_average", window=w): v
                      for w, v in (("1m", a.load1), ("5m", a.load5), ("15m", a.load15))},
           ("gpu_host_load_average",)),
    Source("diskstats", disks.read_diskstats,
           lambda d: {_key("gpu_host_disk_busy_seconds_total", device=n): v
                      for n, v in d.busy_seconds.items()},
           ("gpu_host_disk_busy_seconds_total",)),
    Source("net/dev", network.read_netdev,
           lambda n: {k: v for name, c in n.items() for k, v in (
               (_key("gpu_host_network_receive_errors_total", interface=name), c.errors),
               (_key("gpu_host_network_receive_drops_total", interface=name), c.drops))},
           ("gpu_host_network_receive_errors_total", "gpu_host_network_receive_drops_total")),
    *(Source(f"pressure/{r}", lambda p, r=r: pressure.read_pressure(p, r),
             _pressure_series(r),
             ("gpu_host_pressure_ratio", "gpu_host_pressure_stalled_seconds_total"),
             {"resource": r}) for r in pressure.RESOURCES),
)
# Counters the collector holds at their last reading when the kernel's count
# steps back (proc(5): iowait "is not reliable").
HELD = {_key("gpu_host_cpu_iowait_seconds_total"), _key("gpu_host_cpu_steal_seconds_total")}


def _exported(snap: Snapshot) -> dict[Key, float]:
    return {(name, frozenset(labels.items())): value
            for name in {f for s in HOST_SOURCES for f in s.families}
            for labels, value in snap.series(name)}


def check_host_sources(proc: Path, snap: Snapshot, errors: float,
                       held: dict[Key, float], replaced: set[str]) -> None:
    """Each host file as its reader reads it now against what the poll
    exported: a value it read is exported as read (or absent and counted, when
    no host can report it); a file it cannot read leaves its series absent and
    is counted; only a file that does not exist is absent without a count.
    A file whose every line was replaced (emptied, random bytes or text) that
    reads without an error must give series: reading to nothing is the silent
    success a broken file must never be. ``errors``: the host collector's error
    count this poll added."""
    exported = _exported(snap)
    must_count = 0
    for source in HOST_SOURCES:
        try:
            result = source.read(proc)
        except FileNotFoundError:
            result, failed = None, "missing"
        except (OSError, ValueError):
            result, failed = None, "unreadable"
        else:
            failed = ""
        if failed:
            present = [k for k in exported if k[0] in source.families and source.mine(dict(k[1]))]
            assert not present, f"{source.name} is {failed}, yet {present} exported"
            must_count += failed == "unreadable"
            continue
        series = source.series(result)
        assert series or source.name not in replaced, \
            f"{source.name} was replaced and reads to nothing, without an error"
        for key, value in series.items():
            if key not in exported:
                must_count += 1  # a value no host can report: absent, and counted
                continue
            want = max(value, held[key]) if key in HELD and key in held else value
            assert exported[key] == want, (source.name, key, exported[key], want)
    for key in HELD & exported.keys():
        held[key] = exported[key]
    assert errors >= must_count, (f"{must_count} host series absent for an unreadable file or "
                                  f"value, but {errors:g} errors counted")


def _text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode(errors="replace").strip()
    except OSError:
        return None


def check_pcie_sources(sysfs: Path, gpus: list[Gpu], snap: Snapshot, errors: float,
                       first: bool) -> None:
    """Each GPU's per-poll sysfs attributes (the links' current speed and width,
    the AER counters; at the first poll also the links' maxima and the NUMA
    node, read once and kept): an attribute that exists but whose series is
    absent was counted. "Unknown" (a link that is down) is no error."""
    must_count = 0
    for gpu in gpus:
        entry = f"{sysfs}/bus/pci/devices/{normalize_bus_id(gpu.identity.pci_bus_id)}"
        if not os.path.exists(entry):
            continue
        labels = {"gpu": str(gpu.index), "uuid": gpu.identity.uuid}
        directory = os.path.realpath(entry)
        upstream = os.path.dirname(directory)
        # The port above: the parent directory when it is a PCI device (a bridge).
        bridge = re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]",
                              os.path.basename(upstream))
        ports = [("gpu", directory)] + ([("upstream", upstream)] if bridge else [])
        wanted: list[tuple[str, str, dict[str, str]]] = []
        for port, d in ports:
            wanted += [(f"{d}/current_link_speed", "gpu_pcie_sysfs_link_generation",
                        {"port": port}),
                       (f"{d}/current_link_width", "gpu_pcie_sysfs_link_width", {"port": port})]
            if first:
                wanted += [(f"{d}/max_link_speed", "gpu_pcie_sysfs_link_generation_max",
                            {"port": port}),
                           (f"{d}/max_link_width", "gpu_pcie_sysfs_link_width_max",
                            {"port": port})]
        wanted += [(f"{directory}/aer_dev_{sev}", "gpu_pcie_aer_errors_total",
                    {"severity": sev}) for sev, _ in AER_SEVERITIES]
        for path, name, extra in wanted:
            if not os.path.lexists(path) or _text(path) == "Unknown":
                continue
            if snap.get(name, **labels, **extra) is None:
                must_count += 1
        if first and os.path.lexists(f"{directory}/numa_node") and \
                _text(f"{directory}/numa_node") != "-1":
            (info,) = [lab for lab, _ in snap.series("gpu_numa_info")
                       if lab["gpu"] == str(gpu.index)]
            must_count += info["numa_node"] == "-1"
    assert errors >= must_count, (f"{must_count} sysfs attributes exist but their series are "
                                  f"absent, yet {errors:g} errors counted")


@FUZZ
@given(faults=st.lists(file_faults, min_size=3, max_size=3))
def test_fuzzed_proc_and_sys_each_file_gives_a_value_or_an_absent_counted_series(
        faults: list[list[tuple[str, int, tuple[Any, ...]]]]) -> None:
    """Fixture trees broken a little more every poll (truncated, garbage, odd
    numbers, deleted, directories, symlink loops): each reader's result on each
    file is exported as read, or its series is absent and the read counted in
    gpu_exporter_collector_errors_total; never absent without a count while
    the file is there. And every host value stays in range."""
    session = NvmlSession()
    session.gpus = [Gpu(0, None, Identity(0, uuid="GPU-0", pci_bus_id="00000000:18:00.0")),
                    Gpu(1, None, Identity(1, uuid="GPU-1", pci_bus_id="00000000:2A:00.0"))]
    clock = VirtualClock()
    for proc, sys_ in _fixture_tree():
        collectors = [HostCollector(proc, clock), PcieCollector(session, sys_)]
        poller = Poller(collectors, 1.0, None, wall_clock=clock, monotonic=clock, detail=True)
        errors_seen = {"host": 0.0, "pcie": 0.0}
        last_counts: dict[tuple[str, tuple[str, ...]], float] = {}
        held: dict[Key, float] = {}
        replaced: set[str] = set()
        for poll, poll_faults in enumerate(faults):
            for tree, pick, how in poll_faults:
                root, names = (proc, PROC_FILES) if tree == "proc" else (sys_, SYS_FILES)
                _mutate(root / names[pick % len(names)], how)
                if tree == "proc" and how[0] in REPLACING:
                    replaced.add(names[pick % len(names)])
            clock.advance(1.0)
            snap = poller.poll_once()
            added = {}
            for name in ("host", "pcie"):
                errors = _collector(snap, name)[1]
                assert errors is not None and errors >= errors_seen[name]  # a counter
                added[name], errors_seen[name] = errors - errors_seen[name], errors
            check_host_sources(proc, snap, added["host"], held, replaced)
            check_pcie_sources(sys_, session.gpus, snap, added["pcie"], first=poll == 0)
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
    are broken a little more every poll: each host file and GPU sysfs
    attribute is exported as read, or absent and counted."""
    with SimRun(_node(), metrics={"detail": True}) as run:
        first = run.poll()
        run.exporter.poller.before_poll.clear()
        seen = {name: _collector(first, name)[1] or 0.0 for name in ("host", "pcie")}
        held: dict[Key, float] = {}
        replaced: set[str] = set()
        files = [*(Path("proc") / f for f in _files(run.node.procfs)),
                 *(Path("sys") / f for f in _files(run.node.sysfs))]
        for poll_faults in faults:
            for pick, how in poll_faults:
                rel = files[pick % len(files)]
                root = run.node.procfs if rel.parts[0] == "proc" else run.node.sysfs
                _mutate(root / Path(*rel.parts[1:]), how)
                if rel.parts[0] == "proc" and how[0] in REPLACING:
                    replaced.add(str(Path(*rel.parts[1:])))
            snap = run.poll(1)
            added = {}
            for name in ("host", "pcie"):
                errors = _collector(snap, name)[1]
                assert errors is not None and errors >= seen[name]  # a counter
                added[name], seen[name] = errors - seen[name], errors
            check_host_sources(run.node.procfs, snap, added["host"], held, replaced)
            check_pcie_sources(run.node.sysfs, run.exporter.session.gpus, snap,
                               added["pcie"], first=False)
            assert _collector(snap, "device")[0] == 1.0  # NVML is not the host
            assert len(snap.series("gpu_up")) == 2
            check_exposition(run.scrape(), openmetrics=False)
