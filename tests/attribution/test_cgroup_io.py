"""A workload's I/O limit and traffic from cgroup v2's io.max and io.stat:
read as the kernel writes them, refused whole when garbled, hostile or
huge, and the share of a limit a workload used computed between two reads;
the simulator's files follow a limit applied partway through a run only
from then on, and the exporter exports what it read."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.attribution.cgroup_pressure import (
    MAX_IO_DEVICES,
    CgroupPaths,
    IoCounters,
    IoLimit,
    io_limit_use,
    parse_io_max,
    parse_io_stat,
    read_signals,
)
from gpu_exporter.attribution.cgroup_tree import discover
from gpu_exporter.attribution.procfiles import SMALL_FILE
from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.coverage import answer
from gpu_exporter.simulator import load_scenario
from gpu_exporter.simulator.cgroupfs import IO_SIZE, TenantFs, pod_placement
from gpu_exporter.simulator.tenants import Tenants
from tests.simnode import SimRun

# As a 6.x kernel prints them (block/blk-throttle.c, block/blk-cgroup.c).
IO_MAX = ("8:0 rbps=max wbps=1048576 riops=max wiops=max\n"
          "259:0 rbps=2097152 wbps=max riops=500 wiops=max\n")
IO_STAT = ("8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n"
           "259:0 rbytes=1000000 wbytes=0 rios=10 wios=0 dbytes=512 dios=1\n")


def test_io_max_as_the_kernel_writes_it() -> None:
    assert parse_io_max(IO_MAX) == {
        "8:0": IoLimit(wbps=1048576),
        "259:0": IoLimit(rbps=2097152, riops=500)}


@pytest.mark.parametrize("text", ["", "\n", "8:0 rbps=max wbps=max riops=max wiops=max\n"])
def test_io_max_without_a_limit_is_read_as_none_limited(text: str) -> None:
    # Read and understood: no device limited, which is not "not read" (None).
    assert parse_io_max(text) == {}


def test_keys_a_newer_kernel_adds_are_skipped_not_refused() -> None:
    assert parse_io_max("8:0 rbps=100 latency=5 foo=bar\n") == {"8:0": IoLimit(rbps=100)}
    assert parse_io_stat("8:0 rbytes=1 wbytes=2 rios=3 wios=4 cost.usage=7\n") == {
        "8:0": IoCounters(1, 2, 3, 4)}


def test_io_stat_as_the_kernel_writes_it() -> None:
    assert parse_io_stat(IO_STAT) == {"8:0": IoCounters(4096, 8192, 1, 2),
                                      "259:0": IoCounters(1000000, 0, 10, 0)}


HOSTILE_IO_MAX = [
    "hello world\n",
    "8:0 rbps=-1\n",  # negative
    "8:0 rbps=" + "9" * 30 + "\n",  # beyond any counter
    "8:0 rbps=+5\n",
    "8:0 rbps=1_000\n",
    "8:0 rbps=\uff11\uff12\n",  # fullwidth digits: another script's
    "8:0 rbps=1.5\n",
    "8:0 rbps=\n",
    "8:0 rbps\n",  # no value
    "sda rbps=100\n",  # a device name, not its number
    "8: rbps=100\n",
    "8:0:1 rbps=100\n",
    "8:0 rbps=100\n8:0 wbps=100\n",  # a device twice
    "8:0 rbps=100 rbps=200\n",  # a key twice
    "8:0 rbps=100\x00\n",
    "".join(f"8:{i} rbps=100\n" for i in range(MAX_IO_DEVICES + 1)),  # too many devices
]


@pytest.mark.parametrize("text", HOSTILE_IO_MAX)
def test_a_garbled_io_max_is_refused_whole(text: str) -> None:
    assert parse_io_max(text) is None


@pytest.mark.parametrize("text", [
    "8:0 rbytes=1 wbytes=2 rios=3\n",  # a counter missing
    "8:0 rbytes=-1 wbytes=2 rios=3 wios=4\n",
    "8:0 rbytes=max wbytes=2 rios=3 wios=4\n",  # "max" is io.max's word, not a count
    "garbage\n",
    "8:0 rbytes=1 wbytes=2 rios=3 wios=4\n8:0 rbytes=1 wbytes=2 rios=3 wios=4\n",
])
def test_a_garbled_io_stat_is_refused_whole(text: str) -> None:
    assert parse_io_stat(text) is None


def _cgroup(root: Path, files: dict[str, str | bytes]) -> CgroupPaths:
    (root / "cgroup.controllers").write_text("cpu io memory\n")
    job = root / "job"
    job.mkdir()
    for name, text in files.items():
        (job / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return CgroupPaths(unified="/job")


def test_files_read_from_a_cgroup_and_one_missing_is_none(tmp_path: Path) -> None:
    paths = _cgroup(tmp_path, {"io.max": IO_MAX, "cpu.max": "max 100000\n"})
    sig = read_signals(discover(tmp_path, "0::/\n", pid=-1), paths)
    assert sig.io_limits == parse_io_max(IO_MAX)
    assert sig.io_stat is None  # not there: not read, and nothing else lost
    assert sig.cpu_limit is not None and sig.problem is None


def test_an_io_max_larger_than_any_kernels_is_not_read(tmp_path: Path) -> None:
    huge = ("8:0 rbps=100\n" + " " * (SMALL_FILE + 10)).encode()
    paths = _cgroup(tmp_path, {"io.max": huge, "io.stat": b"\xff\xfe garbage"})
    sig = read_signals(discover(tmp_path, "0::/\n", pid=-1), paths)
    assert sig.io_limits is None and sig.io_stat is None


LIMITS = {"259:0": IoLimit(rbps=100 * 2**20)}


def test_the_share_of_its_limit_a_workload_used_between_two_reads() -> None:
    before = {"259:0": IoCounters(0, 0, 0, 0)}
    now = {"259:0": IoCounters(95 * 2**20 * 10, 0, 100, 0)}
    share, device = io_limit_use(LIMITS, ["259:0"], before, now, 10.0) or (0.0, "")
    assert share == pytest.approx(0.95) and device == "259:0"


def test_traffic_on_an_unlimited_direction_or_device_does_not_count() -> None:
    # Heavy writes (no wbps limit) and heavy reads on another device.
    before = {"259:0": IoCounters(0, 0, 0, 0), "8:0": IoCounters(0, 0, 0, 0)}
    now = {"259:0": IoCounters(2**20, 10**12, 8, 10**6), "8:0": IoCounters(10**12, 0, 10**6, 0)}
    share, _ = io_limit_use(LIMITS, ["259:0"], before, now, 10.0) or (1.0, "")
    assert share == pytest.approx(2**20 / 10 / (100 * 2**20))


def test_a_counter_that_went_back_or_no_time_counts_nothing() -> None:
    before = {"259:0": IoCounters(10**9, 0, 0, 0)}
    now = {"259:0": IoCounters(5, 0, 0, 0)}  # the cgroup was made again
    assert io_limit_use(LIMITS, ["259:0"], before, now, 10.0) is None
    assert io_limit_use(LIMITS, ["259:0"], {}, now, 0.0) is None


def test_a_limited_device_with_no_traffic_yet_is_at_zero() -> None:
    assert io_limit_use(LIMITS, ["259:0"], {}, {}, 10.0) == (0.0, "259:0")


# --- the simulator: a limit applied partway through ------------------------------
LIMIT_AT = 30.0
WANTED, ALLOWED = 500e6, 100_000_000


def _limited_later() -> Tenants:
    return Tenants.model_validate({"pods": [{
        "namespace": "ml", "name": "train", "uid": "11111111-2222-4333-8444-555555555555",
        "containers": [{"name": "main", "pids": [100],
                        "cgroup": {"io_read_bytes_per_s": WANTED, "cpu_throttled_ratio": 0.5},
                        "changes": [{"at": LIMIT_AT, "cpu_limit": 2,
                                     "io_max": [{"device": "259:0", "rbps": ALLOWED}]}]}]}]})


def _figures(tmp_path: Path, times: list[float]) -> list[tuple[str, str, int, int]]:
    tenants = _limited_later()
    fs = TenantFs(tenants, tmp_path / "proc", tmp_path / "cg")
    base = tmp_path / "cg" / str(pod_placement(tenants.pods[0], tenants.pods[0].containers[0])
                                 .cgroup).lstrip("/")
    out = []
    for at in times:
        fs.write(at)
        stat = parse_io_stat((base / "io.stat").read_text())
        assert stat is not None
        cpu = dict(line.split() for line in (base / "cpu.stat").read_text().splitlines())
        out.append(((base / "io.max").read_text(), (base / "cpu.max").read_text(),
                    stat["259:0"].rbytes, int(cpu["nr_throttled"])))
    return out


def test_a_limit_applied_partway_changes_the_files_only_from_then(tmp_path: Path) -> None:
    (max1, cpu1, read1, thr1), (max2, cpu2, read2, thr2), (max3, cpu3, read3, thr3) = \
        _figures(tmp_path, [10.0, 20.0, 40.0])
    # Before: no io.max line, no CPU quota, no throttling, reads at what it asks.
    assert max1 == max2 == "" and cpu1 == cpu2 == "max 100000\n"
    assert thr1 == thr2 == 0
    assert read2 - read1 == pytest.approx(10 * WANTED, rel=1e-6)
    # After: the limit is listed, and the stretch across it is cut at 30 s.
    assert parse_io_max(max3) == {"259:0": IoLimit(rbps=ALLOWED)}
    assert cpu3 == "200000 100000\n" and thr3 > 0
    assert read3 - read2 == pytest.approx(10 * WANTED + 10 * ALLOWED, rel=1e-6)
    assert thr3 == pytest.approx(10 * 10 * 0.5, abs=1)  # 10 s of 100 ms periods, half throttled


def test_the_io_counts_follow_the_bytes(tmp_path: Path) -> None:
    tenants = _limited_later()
    TenantFs(tenants, tmp_path / "proc", tmp_path / "cg").write(10.0)
    base = tmp_path / "cg" / str(pod_placement(tenants.pods[0], tenants.pods[0].containers[0])
                                 .cgroup).lstrip("/")
    stat = parse_io_stat((base / "io.stat").read_text())
    assert stat is not None
    assert stat["259:0"].rios == int(10 * WANTED / IO_SIZE)


def test_the_exporter_exports_the_limit_and_the_traffic_on_the_limited_device() -> None:
    with SimRun(load_scenario("memory-held-sm-idle-io-limit-throttled")) as run:
        before = run.poll(2.0)
        assert not list(before.series("gpu_workload_io_limit_bytes_per_second"))
        snap = run.poll(20.0)
        limits = list(snap.series("gpu_workload_io_limit_bytes_per_second"))
        assert [(lab["device"], lab["direction"], v) for lab, v in limits] == [
            ("259:0", "read", 200_000_000.0)]
        assert limits[0][0]["pod_uid"] == "1b2c3d4e-5f60-4718-8293-a4b5c6d7e8f9"
        moved = {lab["direction"]: v for lab, v in snap.series("gpu_workload_io_bytes_total")}
        assert moved["read"] > 0 and moved["write"] == 0
        # The unlimited pod beside it has no limit series, and no device series.
        assert all(lab["pod_uid"] == limits[0][0]["pod_uid"]
                   for lab, _ in snap.series("gpu_workload_io_bytes_total"))


def test_where_io_max_is_not_read_the_row_is_not_judged_and_says_why(tmp_path: Path) -> None:
    # cgroup v1 has no io.max: a starved GPU's I/O limit cannot be judged.
    path = tmp_path / "v1-starved.yaml"
    path.write_text("name: v1-starved\ndescription: a starved GPU of a v1 Slurm job\n"
                    "extends: slurm-node-cgroup-v1\n"
                    "gpus:\n  1: {utilization: 0.02, memory_used_ratio: 0.8}\n"
                    "kernel_log: {lines: []}\nexpect: []\n")
    with SimRun(load_scenario(str(path))) as run:
        cov = answer(run.poll(40.0, interval=2.0))
    reasons = {(section, g["reason"]) for section in ("not_checked", "nothing_to_check")
               for g in cov[section] if t.IDLE_IO_LIMIT_THROTTLED.key in g["checks"]}
    assert reasons == {("not_checked", "its workload's io.max could not be read (no io "
                        "controller enabled for its cgroup, or cgroup v1)")}
