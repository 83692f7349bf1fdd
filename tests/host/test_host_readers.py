"""The /proc and /sys readers on committed fixture trees: a GPU training node,
the same node one second later, a kernel without PSI or schedstat, files
truncated or garbled, processes in containers, one that exits mid-read, and a
GPU behind a PCIe switch whose port above it trained down."""

from __future__ import annotations

import errno
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_exporter.host import cpu, disks, memory, network, pressure, procs
from gpu_exporter.host.files import MalformedFile, read_text
from gpu_exporter.host.pci import PcieLink, link_generation, read_pci_device

FIXTURES = Path(__file__).parents[1] / "fixtures"
NORMAL = FIXTURES / "proc" / "normal"
LATER = FIXTURES / "proc" / "normal-1s"  # the same host one second later
NO_PSI = FIXTURES / "proc" / "no-psi"
BAD = FIXTURES / "proc" / "malformed"
SWITCH = FIXTURES / "sys" / "switch"
BAD_SYS = FIXTURES / "sys" / "malformed"

CONTAINER = "4b2f9e1c" * 8
POD = "6f1d3c2a-9b7e-4c1d-8e2f-0a1b2c3d4e5f"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- /proc/stat ----------------------------------------------------------------
def test_cpu_times_come_from_the_aggregate_line_in_seconds() -> None:
    t = cpu.read_cpu_times(NORMAL, clk_tck=100)
    assert t.seconds == {"user": 10000.0, "nice": 5.0, "system": 2000.0, "idle": 70000.0,
                         "iowait": 1000.0, "irq": 0.0, "softirq": 50.0, "steal": 200.0}
    assert t.context_switches == 987654321


def test_iowait_and_steal_ratios_over_the_interval() -> None:
    ratios = cpu.cpu_ratios(cpu.read_cpu_times(NORMAL), cpu.read_cpu_times(LATER))
    assert ratios is not None
    # 800 jiffies passed on 8 CPUs: 120 in iowait, 16 stolen.
    assert ratios.iowait == pytest.approx(0.15)
    assert ratios.steal == pytest.approx(0.02)


def test_the_same_reading_twice_has_no_ratio() -> None:
    t = cpu.read_cpu_times(NORMAL)
    assert cpu.cpu_ratios(t, t) is None


def test_iowait_stepping_back_is_a_negative_share_the_collector_judges(tmp_path: Path) -> None:
    write(tmp_path / "stat", "cpu  100 0 100 1000 50 0 0 0 0 0\n")
    before = cpu.read_cpu_times(tmp_path)
    write(tmp_path / "stat", "cpu  200 0 200 1100 45 0 0 0 0 0\n")
    ratios = cpu.cpu_ratios(before, cpu.read_cpu_times(tmp_path))
    # 295 jiffies passed, iowait fell by 5: the reader reports what the counters say.
    assert ratios is not None and ratios.iowait == pytest.approx(-5 / 295)
    assert ratios.steal == 0.0


def test_cpu_time_going_backwards_has_no_share(tmp_path: Path) -> None:
    write(tmp_path / "stat", "cpu  200 0 200 1100 45 0 0 10 0 0\n")
    before = cpu.read_cpu_times(tmp_path)
    write(tmp_path / "stat", "cpu  100 0 100 1000 50 0 0 5 0 0\n")
    ratios = cpu.cpu_ratios(before, cpu.read_cpu_times(tmp_path))
    assert ratios is not None
    assert math.isnan(ratios.iowait or 0.0) and math.isnan(ratios.steal or 0.0)


def test_swap_free_above_the_total_is_negative_use(tmp_path: Path) -> None:
    write(tmp_path / "meminfo", "MemTotal: 100 kB\nSwapTotal: 10 kB\nSwapFree: 30 kB\n")
    assert memory.read_meminfo(tmp_path).swap_used_bytes == -20 * 1024


def test_disk_busy_time_is_not_clamped_by_the_reader() -> None:
    before = disks.DiskBusy({"sda": 10.0, "sdb": 5.0})
    after = disks.DiskBusy({"sda": 12.5, "sdb": 1.0})
    assert disks.busy_ratios(before, after, 2.0) == {"sda": 1.25, "sdb": -2.0}


def test_a_kernel_without_a_steal_column_has_no_steal_ratio(tmp_path: Path) -> None:
    write(tmp_path / "stat", "cpu  100 0 100 1000 50 0 0\nctxt 5\n")
    before = cpu.read_cpu_times(tmp_path)
    write(tmp_path / "stat", "cpu  200 0 200 1100 60 0 0\nctxt 9\n")
    ratios = cpu.cpu_ratios(before, cpu.read_cpu_times(tmp_path))
    assert ratios is not None
    assert ratios.steal is None
    assert ratios.iowait == pytest.approx(10 / 310)


def test_truncated_stat_is_malformed() -> None:
    with pytest.raises(MalformedFile, match="short cpu line"):
        cpu.read_cpu_times(BAD)


def test_stat_without_a_cpu_line_is_malformed(tmp_path: Path) -> None:
    write(tmp_path / "stat", "ctxt 5\n")
    with pytest.raises(MalformedFile, match="no aggregate cpu line"):
        cpu.read_cpu_times(tmp_path)


def test_loadavg() -> None:
    assert cpu.read_loadavg(NORMAL) == cpu.LoadAverage(12.5, 10.25, 8.0)
    with pytest.raises(MalformedFile):
        cpu.read_loadavg(BAD)


# --- /proc/pressure ----------------------------------------------------------------
def test_pressure_avg10_is_a_ratio_and_total_is_seconds() -> None:
    p = pressure.read_pressure(NORMAL, "io")
    assert p.some == pressure.Stall(0.3421, 987.654321)
    assert p.full == pressure.Stall(0.201, 555.555555)
    assert pressure.read_pressure(NORMAL, "cpu").some.avg10 == 0.125


def test_cpu_pressure_without_a_full_line_on_older_kernels(tmp_path: Path) -> None:
    write(tmp_path / "pressure" / "cpu", "some avg10=1.50 avg60=1.00 avg300=0.50 total=2000000\n")
    p = pressure.read_pressure(tmp_path, "cpu")
    assert p.some == pressure.Stall(0.015, 2.0)
    assert p.full is None


def test_a_kernel_without_psi_has_no_pressure_files() -> None:
    for resource in pressure.RESOURCES:
        with pytest.raises(FileNotFoundError):
            pressure.read_pressure(NO_PSI, resource)


@pytest.mark.parametrize("resource", ["cpu", "memory"])
def test_garbled_or_empty_pressure_is_malformed(resource: str) -> None:
    with pytest.raises(MalformedFile):
        pressure.read_pressure(BAD, resource)


# --- memory ----------------------------------------------------------------------
def test_meminfo_in_bytes() -> None:
    m = memory.read_meminfo(NORMAL)
    assert m.total_bytes == 263921664 * 1024
    assert m.available_bytes == 200000000 * 1024
    assert m.swap_used_bytes == (8388604 - 4194304) * 1024


def test_meminfo_before_memavailable_existed() -> None:
    m = memory.read_meminfo(NO_PSI)
    assert m.available_bytes is None
    assert m.total_bytes == 263921664 * 1024


def test_truncated_meminfo_is_malformed() -> None:
    with pytest.raises(MalformedFile, match="SwapTotal"):
        memory.read_meminfo(BAD)


def test_swap_pages_become_bytes_with_the_page_size() -> None:
    s = memory.read_swap_activity(NORMAL, page_size=4096)
    assert s == memory.SwapActivity(1000 * 4096, 2000 * 4096)
    assert memory.read_swap_activity(NORMAL, page_size=65536) == memory.SwapActivity(
        1000 * 65536, 2000 * 65536)


def test_a_kernel_without_swap_support_has_no_swap_activity(tmp_path: Path) -> None:
    write(tmp_path / "vmstat", "nr_free_pages 5\npgfault 7\n")
    assert memory.read_swap_activity(tmp_path) is None
    # Its counters anywhere in the file, whatever else it holds.
    write(tmp_path / "vmstat", "nr_free_pages 5\nsomething new\n")
    assert memory.read_swap_activity(tmp_path) is None


def test_garbled_vmstat_is_malformed() -> None:
    with pytest.raises(MalformedFile):
        memory.read_swap_activity(BAD)


# --- block devices and network interfaces ------------------------------------------------
def test_diskstats_counts_whole_devices_only() -> None:
    busy = disks.read_diskstats(NORMAL).busy_seconds
    # loop, ram, zram and the partitions are left out; a 14-field line (old
    # kernels) reads like a 20-field one.
    assert busy == {"nvme0n1": 400.0, "sda": 3.0, "dm-0": 1.5}


def test_disk_busy_ratio_over_the_interval() -> None:
    ratios = disks.busy_ratios(disks.read_diskstats(NORMAL), disks.read_diskstats(LATER), 1.0)
    assert ratios == pytest.approx({"nvme0n1": 0.97, "sda": 0.01, "dm-0": 0.005})
    assert disks.busy_ratios(disks.read_diskstats(NORMAL), disks.read_diskstats(LATER), 0) == {}


@pytest.mark.parametrize(("name", "counted"), [
    ("nvme0n1", True), ("nvme0n1p1", False), ("sda", True), ("sda1", False), ("vdb2", False),
    ("xvda", True), ("mmcblk0p1", False), ("md0", True), ("dm-3", True), ("loop7", False),
    ("ram0", False), ("zram0", False)])
def test_which_block_devices_count(name: str, counted: bool) -> None:
    assert disks.is_counted(name) is counted


def test_short_diskstats_line_is_malformed() -> None:
    with pytest.raises(MalformedFile, match="short line"):
        disks.read_diskstats(BAD)


def test_netdev_receive_errors_and_drops_of_real_interfaces() -> None:
    assert network.read_netdev(NORMAL) == {
        "eth0": network.ReceiveCounters(errors=3, drops=42),
        "ib0": network.ReceiveCounters(errors=0, drops=7),
        "bond0": network.ReceiveCounters(errors=1, drops=2),
    }


def test_short_netdev_line_is_malformed() -> None:
    with pytest.raises(MalformedFile, match="short line for eth0"):
        network.read_netdev(BAD)


def test_netdev_without_header_is_malformed(tmp_path: Path) -> None:
    write(tmp_path / "net" / "dev", "")
    with pytest.raises(MalformedFile, match="no header"):
        network.read_netdev(tmp_path)


# --- processes ------------------------------------------------------------------------
def test_training_process_in_a_kubernetes_pod_with_cgroup_v2() -> None:
    p = procs.read_process(NORMAL, 24100, clk_tck=100, page_size=4096)
    assert p == procs.ProcessInfo(
        pid=24100, comm="python", state="R", ppid=1, threads=64,
        cpu_seconds=pytest.approx((12345 + 2345) / 100), rss_bytes=25165824 * 1024,
        voluntary_ctxt_switches=123456, involuntary_ctxt_switches=7890,
        run_queue_wait_seconds=2.5,
        cpus_allowed=frozenset(range(32)) | frozenset(range(64, 96)),
        cpus_allowed_list="0-31,64-95", container_id=CONTAINER, pod_uid=POD)


def test_docker_container_with_cgroup_v1_has_no_pod() -> None:
    p = procs.read_process(NORMAL, 24200)
    assert p is not None
    assert (p.comm, p.state, p.container_id, p.pod_uid) == ("torchrun", "S", "a1b2c3d4e5f60718" * 4,
                                                            "")


def test_crio_container_with_cgroupfs_driver() -> None:
    p = procs.read_process(NORMAL, 24300)
    assert p is not None
    assert (p.state, p.ppid) == ("D", 24100)
    assert p.container_id == "0123456789abcdef" * 4
    assert p.pod_uid == "0f0e0d0c-0b0a-4908-8706-050403020100"


def test_containerd_with_cgroupfs_driver_names_the_container_by_its_bare_id() -> None:
    p = procs.read_process(NORMAL, 24600)
    assert p is not None
    assert (p.container_id, p.pod_uid) == ("fedcba9876543210" * 4,
                                           "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee")


def test_a_name_with_spaces_and_parentheses_outside_any_container() -> None:
    p = procs.read_process(NORMAL, 24500)
    assert p is not None
    assert p.comm == "my (odd) name"
    assert (p.container_id, p.pod_uid) == ("", "")
    assert p.cpus_allowed == frozenset({3})


def test_a_process_that_exits_mid_read_is_none() -> None:
    # Its stat was read, then it was gone before its status.
    assert procs.read_process(NORMAL, 24400) is None
    assert procs.read_process(NORMAL, 99999) is None


def test_esrch_while_reading_means_the_process_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(path: Path) -> str:
        raise ProcessLookupError(errno.ESRCH, "No such process")

    monkeypatch.setattr(procs, "read_text", gone)
    assert procs.read_process(NORMAL, 24100) is None


def test_without_schedstat_the_run_queue_wait_is_unknown() -> None:
    p = procs.read_process(NO_PSI, 24100)
    assert p is not None
    assert p.run_queue_wait_seconds is None
    assert p.container_id == CONTAINER


def _recorded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = procs.read_text

    def recording(path: str) -> str:
        seen.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(procs, "read_text", recording)
    return seen


def test_only_its_own_files_are_read_never_cmdline_or_environ(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _recorded(monkeypatch)
    assert procs.read_process(NORMAL, 24100) is not None
    # children: the PIDs its main thread forked (task/PID/children), whose
    # stat alone is then read for their state.
    assert set(seen) == {"stat", "status", "schedstat", "cgroup", "children"}


def test_the_states_of_the_workers_a_process_forked_are_read(tmp_path: Path) -> None:
    shutil.copytree(NORMAL / "24100", tmp_path / "24100")
    assert procs.read_process(tmp_path, 24100).children_states is None  # no children file
    write(tmp_path / "24100" / "task" / "24100" / "children", "24200 24201 24202 ")
    for pid, state in ((24200, "D"), (24201, "S")):  # 24202 has exited since
        write(tmp_path / str(pid) / "stat", f"{pid} (pt_data (worker)) {state} 24100 1 1 0 -1\n")
    assert procs.read_process(tmp_path, 24100).children_states == ("D", "S")
    write(tmp_path / "24100" / "task" / "24100" / "children", "")
    assert procs.read_process(tmp_path, 24100).children_states == ()


@pytest.mark.parametrize(("pid", "problem"), [
    (24100, "fields"),  # stat cut short
    (24600, "Cpus_allowed_list"),
    (24700, "schedstat"),
])
def test_malformed_process_files(pid: int, problem: str) -> None:
    with pytest.raises(MalformedFile, match=problem):
        procs.read_process(BAD, pid)


def test_a_status_key_on_the_first_line_is_found(tmp_path: Path) -> None:
    shutil.copytree(NORMAL / "24100", tmp_path / "24100")
    write(tmp_path / "24100" / "status", "Cpus_allowed_list:\tbanana\n")
    with pytest.raises(MalformedFile, match="Cpus_allowed_list"):
        procs.read_process(tmp_path, 24100)



def _restart(base: Path, starttime: str, cgroup: str) -> None:
    """The PID of ``base`` now names another process: another start time and cgroup."""
    fields = (base / "stat").read_text().split(" ")
    fields[21] = starttime  # proc(5) field 22
    write(base / "stat", " ".join(fields))
    write(base / "cgroup", cgroup)


def test_reader_reads_a_processes_cgroup_once_and_again_for_a_reused_pid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(NORMAL / "24100", tmp_path / "24100")
    reader = procs.ProcessReader(tmp_path)
    seen = _recorded(monkeypatch)
    first = reader.read(24100)
    assert first is not None and (first.container_id, first.pod_uid) == (CONTAINER, POD)
    assert "cgroup" in seen
    seen.clear()
    again = reader.read(24100)
    assert again == first
    assert set(seen) == {"stat", "status", "schedstat"}  # the cgroup is remembered

    # The process exits and its PID goes to a process in another container.
    other = "0123456789abcdef" * 4
    _restart(tmp_path / "24100", "9000000", f"0::/system.slice/docker-{other}.scope\n")
    reused = reader.read(24100)
    assert reused is not None and (reused.container_id, reused.pod_uid) == (other, "")

    # ... and then to one in no container at all.
    _restart(tmp_path / "24100", "9100000", "0::/user.slice/user-1000.slice\n")
    bare = reader.read(24100)
    assert bare is not None and (bare.container_id, bare.pod_uid) == ("", "")


def test_reader_forgets_processes_no_longer_listed_or_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for pid in ("24100", "24200"):
        shutil.copytree(NORMAL / pid, tmp_path / pid)
    reader = procs.ProcessReader(tmp_path)
    assert reader.read(24100) is not None and reader.read(24200) is not None
    reader.retain([24200])
    seen = _recorded(monkeypatch)
    assert reader.read(24100) is not None
    assert "cgroup" in seen  # forgotten: read afresh
    seen.clear()
    assert reader.read(24200) is not None
    assert "cgroup" not in seen

    shutil.rmtree(tmp_path / "24200")  # it exits
    assert reader.read(24200) is None
    shutil.copytree(NORMAL / "24100", tmp_path / "24200")  # the PID comes back in use
    seen.clear()
    back = reader.read(24200)
    assert back is not None and back.container_id == CONTAINER
    assert "cgroup" in seen


def test_list_pids() -> None:
    assert procs.list_pids(NORMAL) == [24100, 24200, 24300, 24400, 24500, 24600]


@pytest.mark.parametrize(("text", "cpus"), [
    ("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}),
    ("5", {5}),
    ("", set()),
    ("0-7:2", {0, 2, 4, 6}),
    ("0-1\n", {0, 1}),
])
def test_parse_cpulist(text: str, cpus: set[int]) -> None:
    assert procs.parse_cpulist(text) == frozenset(cpus)


@pytest.mark.parametrize("text", ["3-1", "a", "1-", "0-3:0", "-1"])
def test_parse_cpulist_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        procs.parse_cpulist(text)


ID = "0123456789abcdef" * 4


@pytest.mark.parametrize(("text", "expected"), [
    (f"0::/system.slice/docker-{ID}.scope\n", (ID, "")),
    (f"0::/machine.slice/libpod-{ID}.scope/container\n", (ID, "")),
    (f"0::/kubepods.slice/kubepods-pod1a2b3c4d_0000_4111_8222_333344445555.slice/"
     f"crio-{ID}.scope\n", (ID, "1a2b3c4d-0000-4111-8222-333344445555")),
    (f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b3c4d_0000_4111_"
     f"8222_333344445555.slice/crio-conmon-{ID}.scope\n",
     ("", "1a2b3c4d-0000-4111-8222-333344445555")),
    ("0::/user.slice/user-1000.slice/session-1.scope\n", ("", "")),
    ("0::/\n", ("", "")),
    ("", ("", "")),
])
def test_cgroup_ids(text: str, expected: tuple[str, str]) -> None:
    assert procs.cgroup_ids(text) == expected


# --- sysfs -------------------------------------------------------------------------
def test_gpu_behind_a_switch_whose_port_above_it_trained_down() -> None:
    dev = read_pci_device(SWITCH, "0000:18:00.0")
    assert dev is not None
    assert dev.numa_node == 0
    assert dev.local_cpulist == "0-31,64-95"
    assert dev.local_cpus == frozenset(range(32)) | frozenset(range(64, 96))
    assert dev.link == PcieLink(generation=5, generation_max=5, width=16, width_max=16)
    assert dev.upstream_bdf == "0000:17:00.0"
    assert dev.upstream == PcieLink(generation=4, generation_max=5, width=8, width_max=16)
    assert dev.aer == {"correctable": 17, "nonfatal": 2, "fatal": 0}
    assert dev.problems == ()


def test_gpu_on_a_root_complex_with_unknown_numa_node_no_aer_and_a_link_down() -> None:
    dev = read_pci_device(SWITCH, "0000:2a:00.0")
    assert dev is not None
    assert dev.numa_node is None
    assert dev.link == PcieLink(generation=None, generation_max=3, width=0, width_max=16)
    assert dev.upstream_bdf is None and dev.upstream is None
    assert dev.aer == {}
    assert dev.problems == ()


def test_a_device_not_on_the_bus_is_none() -> None:
    assert read_pci_device(SWITCH, "0000:99:00.0") is None
    assert read_pci_device(FIXTURES / "nowhere", "0000:18:00.0") is None


@pytest.mark.parametrize(("attribute", "text", "problem"), [
    ("current_link_speed", "", "'' is not a PCIe link speed"),
    ("current_link_speed", "fast", "'fast' is not a PCIe link speed"),
    ("current_link_speed", "-1.0 GT/s PCIe", "'-1.0 GT/s PCIe' is not a PCIe link speed"),
    ("max_link_speed", "7.0 GT/s", "'7.0 GT/s' is not a PCIe link speed"),
    ("current_link_width", "-1", "-1 is outside 0..32"),
    ("max_link_width", "33", "33 is outside 0..32"),
    ("numa_node", "-2", "-2 is outside -1..1023"),
    ("numa_node", "1024", "1024 is outside -1..1023"),
    ("aer_dev_correctable", "TOTAL_ERR_COR -1\n", "TOTAL_ERR_COR '-1' is not a count"),
    ("aer_dev_fatal", "TOTAL_ERR_FATAL ³\n", "TOTAL_ERR_FATAL '³' is not a count"),
])
def test_an_attribute_no_kernel_writes_is_a_problem_never_a_silent_absence(
        tmp_path: Path, attribute: str, text: str, problem: str) -> None:
    """Each attribute whose value no kernel writes names its path and problem,
    and its value is absent; the others are still read."""
    sysfs = tmp_path / "sys"
    shutil.copytree(SWITCH, sysfs, symlinks=True)
    gpu_dir = Path(os.path.realpath(sysfs / "bus/pci/devices/0000:18:00.0"))
    (gpu_dir / attribute).write_text(text)
    dev = read_pci_device(sysfs, "0000:18:00.0")
    assert dev is not None
    assert dev.problems == (f"{gpu_dir / attribute}: {problem}",)
    link = dev.link
    assert link is not None
    read = {"current_link_speed": link.generation, "max_link_speed": link.generation_max,
            "current_link_width": link.width, "max_link_width": link.width_max,
            "numa_node": dev.numa_node, "aer_dev_correctable": dev.aer.get("correctable"),
            "aer_dev_fatal": dev.aer.get("fatal")}
    assert read.pop(attribute) is None
    assert None not in read.values(), read


def test_a_link_that_is_down_reads_unknown_and_is_no_problem(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    shutil.copytree(SWITCH, sysfs, symlinks=True)
    gpu_dir = Path(os.path.realpath(sysfs / "bus/pci/devices/0000:18:00.0"))
    (gpu_dir / "current_link_speed").write_text("Unknown\n")
    (gpu_dir / "current_link_width").write_text("0\n")
    dev = read_pci_device(sysfs, "0000:18:00.0")
    assert dev is not None and dev.problems == ()
    assert dev.link is not None and (dev.link.generation, dev.link.width) == (None, 0)


def test_malformed_sysfs_attributes_are_problems_not_exceptions() -> None:
    dev = read_pci_device(BAD_SYS, "0000:18:00.0")
    assert dev is not None
    assert dev.numa_node == 1
    assert dev.link == PcieLink(generation=5, generation_max=5, width=None, width_max=16)
    assert dev.local_cpulist is None and dev.local_cpus is None
    assert dev.aer == {"nonfatal": 3, "fatal": 1}
    assert len(dev.problems) == 3
    assert any("current_link_width" in p for p in dev.problems)
    assert any("TOTAL_ERR_COR" in p for p in dev.problems)


@pytest.mark.parametrize(("speed", "generation"), [
    ("2.5 GT/s PCIe", 1), ("5.0 GT/s PCIe", 2), ("8.0 GT/s PCIe", 3), ("16.0 GT/s PCIe", 4),
    ("32.0 GT/s PCIe", 5), ("64.0 GT/s PCIe", 6), ("128.0 GT/s PCIe", 7), ("8 GT/s", 3),
    ("5 GT/s", 2),
    ("Unknown", None), ("Unknown speed", None), ("3.0 GT/s", None), ("", None)])
def test_link_generation(speed: str, generation: int | None) -> None:
    assert link_generation(speed) == generation


# --- every malformed file: the path and the problem, as the log line shows them ---------------
def _stat(root: Path) -> object:
    return cpu.read_cpu_times(root)


MALFORMED: list[tuple[str, str, Callable[[Path], object], str]] = [
    ("stat", "cpu  1 2 3\n", _stat, "short cpu line 'cpu  1 2 3'"),
    ("stat", "ctxt 5\n", _stat, "no aggregate cpu line"),
    ("stat", "cpu  1 2 3 x\n", _stat, "'x' is not an integer"),
    ("stat", "cpu  1 2 3 4\nctxt five\n", _stat, "'five' is not an integer"),
    ("loadavg", "1.0 2.0\n", cpu.read_loadavg, "fewer than three load averages"),
    ("loadavg", "1.0 2.0 three\n", cpu.read_loadavg, "'three' is not a number"),
    ("meminfo", "MemTotal: 5 kB\nSwapFree: 1 kB\n", memory.read_meminfo, "no SwapTotal"),
    ("meminfo", "MemTotal: 5 kB\n", memory.read_meminfo, "no SwapTotal, SwapFree"),
    ("meminfo", "SwapTotal: 5 kB\nSwapFree: 1 kB\n", memory.read_meminfo, "no MemTotal"),
    ("meminfo", "MemTotal: x kB\n", memory.read_meminfo, "'x' is not an integer"),
    ("vmstat", "pswpin 5\n", memory.read_swap_activity,
     "pswpin without pswpout or the other way round"),
    ("vmstat", "pswpin 5\npswpout x\n", memory.read_swap_activity, "'x' is not an integer"),
    # Nothing a kernel writes: not one without swap, which lists its other counters.
    ("vmstat", "", memory.read_swap_activity, "no counter lines"),
    ("vmstat", "\x00\x01 garbage\nnr_free_pages many\n", memory.read_swap_activity,
     "no counter lines"),
    # Every kernel lists its loop and RAM disks at least.
    ("diskstats", "", disks.read_diskstats, "no block device"),
    ("diskstats", "\n  \n", disks.read_diskstats, "no block device"),
    ("diskstats", "8 0 sda 1 2 3\n", disks.read_diskstats, "short line '8 0 sda 1 2 3'"),
    ("diskstats", "8 0 sda 1 0 0 0 0 0 0 0 0 x 0\n", disks.read_diskstats,
     "'x' is not an integer"),
    ("net/dev", "only one line\n", network.read_netdev, "no header"),
    ("net/dev", "no bar\nheader\n", network.read_netdev, "no header"),
    ("net/dev", "a|b\nc|d\n  eth0 1 2\n", network.read_netdev,
     "line without an interface 'eth0 1 2'"),
    ("net/dev", "a|b\nc|d\n  eth0: 1 2\n", network.read_netdev, "short line for eth0"),
    ("net/dev", "a|b\nc|d\n  eth0: 1 1 x 0 0 0 0 0 1 1 0 0 0 0 0 0\n", network.read_netdev,
     "'x' is not an integer"),
    ("net/dev", "a|b\nc|d\n  eth0: 1 1 0 y 0 0 0 0 1 1 0 0 0 0 0 0\n", network.read_netdev,
     "'y' is not an integer"),
    ("pressure/cpu", "some avg10=1 total\n", pressure.read_pressure,
     "field 'total' is not key=value"),
    ("pressure/cpu", "some avg10=1=2 total=5\n", pressure.read_pressure, "'1=2' is not a number"),
    ("pressure/cpu", "some avg10=1 total=5=6\n", pressure.read_pressure,
     "'5=6' is not an integer"),
    ("pressure/cpu", "some avg10=1\n", pressure.read_pressure, "avg10 or total missing"),
    ("pressure/cpu", "some total=1\n", pressure.read_pressure, "avg10 or total missing"),
    ("pressure/cpu", "full avg10=1 total=1\n", pressure.read_pressure, "no 'some' line"),
    ("pressure/cpu", "half avg10=1 total=1\n", pressure.read_pressure,
     "unexpected line 'half avg10=1 total=1'"),
    ("pressure/cpu", "some avg10=1 total=1.5\n", pressure.read_pressure,
     "'1.5' is not an integer"),
]


@pytest.mark.parametrize(("name", "text", "reader", "problem"), MALFORMED)
def test_a_malformed_file_names_its_path_and_problem(tmp_path: Path, name: str, text: str,
                                                     reader: Callable[..., object],
                                                     problem: str) -> None:
    write(tmp_path / name, text)
    args = ("cpu",) if name.startswith("pressure/") else ()
    with pytest.raises(MalformedFile) as err:
        reader(tmp_path, *args)
    assert err.value.problem == problem
    assert str(err.value.path) == str(tmp_path / name)
    assert str(err.value) == f"{tmp_path / name}: {problem}"


def test_a_cpu_line_cut_short_between_readings_has_no_share_of_the_missing_modes(
        tmp_path: Path) -> None:
    write(tmp_path / "stat", "cpu  100 0 100 1000 50 0 0 10 0 0\n")
    full = cpu.read_cpu_times(tmp_path)
    write(tmp_path / "stat", "cpu  200 0 200 1100\n")
    short = cpu.read_cpu_times(tmp_path)
    assert cpu.cpu_ratios(full, short) == cpu.CpuRatios(None, None)
    assert cpu.cpu_ratios(short, full) == cpu.CpuRatios(None, None)


def test_pressure_values_in_any_order_and_extra_fields(tmp_path: Path) -> None:
    write(tmp_path / "pressure" / "io", "full total=3000000 avg300=1 avg10=25.00\n"
                                        "some avg60=2 total=5000000 avg10=50.00\n")
    p = pressure.read_pressure(tmp_path, "io")
    assert p.some == pressure.Stall(0.5, 5.0) and p.full == pressure.Stall(0.25, 3.0)


def test_a_share_over_a_single_tick(tmp_path: Path) -> None:
    write(tmp_path / "stat", "cpu  100 0 100 1000 50 0 0 10 0 0\n")
    before = cpu.read_cpu_times(tmp_path, clk_tck=100)
    write(tmp_path / "stat", "cpu  100 0 100 1000 51 0 0 10 0 0\n")  # 0.01 s, in iowait
    ratios = cpu.cpu_ratios(before, cpu.read_cpu_times(tmp_path, clk_tck=100))
    assert ratios is not None
    assert ratios.iowait == pytest.approx(1.0) and ratios.steal == 0.0


def test_blank_lines_anywhere_are_skipped(tmp_path: Path) -> None:
    write(tmp_path / "stat", "\ncpu  100 0 100 1000 50 0 0 10 0 0\n\nctxt 7\n")
    assert cpu.read_cpu_times(tmp_path, clk_tck=100).context_switches == 7
    write(tmp_path / "meminfo", "\nOdd:\nMemTotal: 8 kB\n\nSwapTotal: 4 kB\nSwapFree: 5\n")
    m = memory.read_meminfo(tmp_path)
    assert (m.total_bytes, m.swap_total_bytes) == (8192, 4096)
    assert m.swap_free_bytes == 5  # a value without a unit is taken as written
    write(tmp_path / "pressure" / "io", "\nsome avg10=1.00 total=1\n\nfull avg10=2.00 total=2\n")
    assert pressure.read_pressure(tmp_path, "io").full == pressure.Stall(0.02, 2e-6)
    write(tmp_path / "diskstats", "\n   8  0 sda 1 0 0 0 0 0 0 0 0 5000 0\n\n"
                                  "   8 16 sdb 1 0 0 0 0 0 0 0 0 7000 0\n")
    assert disks.read_diskstats(tmp_path).busy_seconds == {"sda": 5.0, "sdb": 7.0}
    write(tmp_path / "net" / "dev", "a|b\nc|d\n  eth0: 1 1 2 3 0 0 0 0 1 1 0 0 0 0 0 0\n\n"
                                    "  eth1: 1 1 4 5 0 0 0 0 1 1 0 0 0 0 0 0\n")
    assert network.read_netdev(tmp_path) == {"eth0": network.ReceiveCounters(2, 3),
                                             "eth1": network.ReceiveCounters(4, 5)}


def test_stat_without_a_ctxt_line_has_no_context_switches(tmp_path: Path) -> None:
    write(tmp_path / "stat", "cpu  100 0 100 1000 50 0 0 10 0 0\n")
    assert cpu.read_cpu_times(tmp_path).context_switches is None


def test_net_dev_with_no_interfaces_and_with_a_header_of_one_line(tmp_path: Path) -> None:
    write(tmp_path / "net" / "dev", "Inter-|   Receive\n face |bytes\n")
    assert network.read_netdev(tmp_path) == {}
    write(tmp_path / "net" / "dev",
          "Inter-\n face |bytes\n  eth0: 1 1 2 3 0 0 0 0 1 1 0 0 0 0 0 0\n")
    with pytest.raises(MalformedFile, match="no header"):
        network.read_netdev(tmp_path)


def test_a_file_longer_than_one_read_and_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    lines = [f"   8 {i} sd{i} 1 0 0 0 0 0 0 0 0 {i} 0\n" for i in range(3000)]  # ~110 KB
    write(tmp_path / "diskstats", "".join(lines))
    assert disks.read_diskstats(tmp_path).busy_seconds == {
        f"sd{i}": i / 1000 for i in range(3000)}
    assert read_text(tmp_path / "diskstats") == "".join(lines)  # every byte, nothing between
    (tmp_path / "net").mkdir(exist_ok=True)
    (tmp_path / "net" / "dev").write_bytes(
        b"a|b\nc|d\n  eth\xff0: 1 1 2 3 0 0 0 0 1 1 0 0 0 0 0 0\n")
    assert network.read_netdev(tmp_path) == {"eth\ufffd0": network.ReceiveCounters(2, 3)}
