"""The simulated /proc and /sys, read back with the real readers: counters grow
at the scenario's rates, so the ratios over an interval are the scenario's."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.host import cpu, disks, memory, network, pressure, procs
from gpu_exporter.host.pci import PcieLink, read_pci_device
from gpu_exporter.simulator import SimulatedNode, load_profile
from gpu_exporter.simulator.clock import VirtualClock
from gpu_exporter.simulator.hostfs import HostFs
from gpu_exporter.simulator.model import Scenario
from gpu_exporter.simulator.world import World

CGROUP = ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6f1d3c2a_9b7e_4c1d_"
          "8e2f_0a1b2c3d4e5f.slice/cri-containerd-" + "ab" * 32 + ".scope")
HOST = {"cpus": 64, "numa_nodes": 2, "cpu_busy_ratio": 0.5, "iowait_ratio": 0.3,
        "steal_ratio": 0.05,
        "pressure_cpu": {"some": 0.2, "full": 0.05}, "pressure_io": {"some": 0.4, "full": 0.25},
        "pressure_memory": {"some": 0.1, "full": 0.02},
        "memory_total_bytes": 256 * 1024**3, "memory_available_ratio": 0.25,
        "swap_total_bytes": 16 * 1024**3, "swap_used_ratio": 0.5,
        "swap_in_bytes_per_s": 1e6, "swap_out_bytes_per_s": 3e6, "load1": 40.0,
        "context_switches_per_s": 50000.0, "disks": {"nvme0n1": 0.75, "sda": 0.1},
        "net_rx_drops_per_s": {"eth0": 5.0}, "net_rx_errors_per_s": {"eth0": 0.5}}
PROCESSES = [
    {"pid": 1000, "comm": "python", "gpus": [1], "cpu_ratio": 1.5, "state": "R", "threads": 32,
     "rss_bytes": 8 * 1024**3, "run_queue_wait_ratio": 0.25,
     "voluntary_ctxt_switches_per_s": 100, "nonvoluntary_ctxt_switches_per_s": 20,
     "cgroup": CGROUP},
    {"pid": 1001, "ppid": 1000, "comm": "pt_data_worker", "cpu_ratio": 0.5,
     "exits_at": "5s"},
    {"pid": 1002, "comm": "pinned", "cpus_allowed": "0-3,8", "state": "D"},
]


def scenario(host: dict[str, Any] | None = None, **extra: Any) -> Scenario:
    fields: dict[str, Any] = {"state": {"utilization": 0.9, "memory_used_ratio": 0.5},
                              "processes": PROCESSES, **extra}
    return Scenario(name="hostfs", node={"gpus": 2}, noise=False,
                    host={**HOST, **(host or {})}, **fields)


class Node:
    def __init__(self, tmp_path: Path, sc: Scenario) -> None:
        self.clock = VirtualClock(0.0)
        self.world = World(sc, load_profile(sc.node.profile), self.clock)
        self.fs = HostFs(self.world, tmp_path)
        self.fs.render(0.0)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.fs.render(self.world.elapsed())


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path, scenario())


def test_cpu_ratios_over_an_interval_are_the_scenarios(node: Node) -> None:
    before = cpu.read_cpu_times(node.fs.procfs)
    node.advance(2.0)
    after = cpu.read_cpu_times(node.fs.procfs)
    ratios = cpu.cpu_ratios(before, after)
    assert ratios is not None
    assert ratios.iowait == pytest.approx(0.3, abs=1e-3)
    assert ratios.steal == pytest.approx(0.05, abs=1e-3)
    # All 64 CPUs' time is accounted for.
    assert after.total - before.total == pytest.approx(64 * 2.0, abs=0.1)
    assert after.context_switches is not None and before.context_switches is not None
    assert after.context_switches - before.context_switches == pytest.approx(100000, abs=1)


def test_busy_iowait_and_steal_never_add_up_to_more_than_all_cpu_time(tmp_path: Path) -> None:
    node = Node(tmp_path, scenario({"cpu_busy_ratio": 0.99, "iowait_ratio": 0.42}))
    before = cpu.read_cpu_times(node.fs.procfs)
    node.advance(1.0)
    ratios = cpu.cpu_ratios(before, cpu.read_cpu_times(node.fs.procfs))
    assert ratios is not None and ratios.iowait == pytest.approx(0.42, abs=1e-3)


def test_pressure_totals_grow_with_avg10(node: Node) -> None:
    before = {r: pressure.read_pressure(node.fs.procfs, r) for r in pressure.RESOURCES}
    node.advance(10.0)
    for resource, some, full in (("cpu", 0.2, 0.05), ("io", 0.4, 0.25), ("memory", 0.1, 0.02)):
        after = pressure.read_pressure(node.fs.procfs, resource)
        assert after.some.avg10 == pytest.approx(some)
        assert after.full is not None and before[resource].full is not None
        assert after.full.avg10 == pytest.approx(full)
        assert after.some.total_seconds - before[resource].some.total_seconds == \
            pytest.approx(10 * some, abs=1e-5)
        assert after.full.total_seconds - before[resource].full.total_seconds == \
            pytest.approx(10 * full, abs=1e-5)


def test_no_psi_means_no_proc_pressure_and_no_schedstat_means_no_file(tmp_path: Path) -> None:
    node = Node(tmp_path, scenario({"psi_available": False, "schedstat_available": False}))
    assert not (node.fs.procfs / "pressure").exists()
    info = procs.read_process(node.fs.procfs, 1000)
    assert info is not None and info.run_queue_wait_seconds is None


def test_a_kernel_that_loses_psi_and_schedstat_mid_run(tmp_path: Path) -> None:
    node = Node(tmp_path, scenario(timeline=[
        {"at": "3s", "host": {"psi_available": False, "schedstat_available": False}}]))
    assert (node.fs.procfs / "pressure" / "io").exists()
    assert (node.fs.procfs / "1000" / "schedstat").exists()
    node.advance(3.0)
    assert not (node.fs.procfs / "pressure").exists()
    assert not (node.fs.procfs / "1000" / "schedstat").exists()


def test_memory_and_swap(node: Node) -> None:
    m = memory.read_meminfo(node.fs.procfs)
    assert m.total_bytes == 256 * 1024**3
    assert m.available_bytes == 64 * 1024**3
    assert m.swap_used_bytes == 8 * 1024**3
    before = memory.read_swap_activity(node.fs.procfs)
    node.advance(4.0)
    after = memory.read_swap_activity(node.fs.procfs)
    assert before is not None and after is not None
    page = os.sysconf("SC_PAGE_SIZE")
    assert after.in_bytes - before.in_bytes == pytest.approx(4e6, abs=page)
    assert after.out_bytes - before.out_bytes == pytest.approx(12e6, abs=page)


def test_load_average_follows_load1(node: Node) -> None:
    assert cpu.read_loadavg(node.fs.procfs) == cpu.LoadAverage(40.0, 40.0, 40.0)


def test_disks_and_network(node: Node) -> None:
    before = disks.read_diskstats(node.fs.procfs)
    net_before = network.read_netdev(node.fs.procfs)
    node.advance(2.0)
    after = disks.read_diskstats(node.fs.procfs)
    # Partitions and the loop device are in the file but not counted.
    assert set(after.busy_seconds) == {"nvme0n1", "sda"}
    assert disks.busy_ratios(before, after, 2.0) == pytest.approx(
        {"nvme0n1": 0.75, "sda": 0.1}, abs=1e-3)
    net = network.read_netdev(node.fs.procfs)
    assert set(net) == {"eth0"}  # lo is in the file, but virtual
    assert net["eth0"].drops - net_before["eth0"].drops == 10
    assert net["eth0"].errors - net_before["eth0"].errors == 1


def test_process_counters_grow_at_their_rates(node: Node) -> None:
    before = procs.read_process(node.fs.procfs, 1000)
    node.advance(4.0)
    after = procs.read_process(node.fs.procfs, 1000)
    assert before is not None and after is not None
    assert after.cpu_seconds - before.cpu_seconds == pytest.approx(6.0, abs=0.02)
    assert before.run_queue_wait_seconds is not None
    assert after.run_queue_wait_seconds is not None
    assert after.run_queue_wait_seconds - before.run_queue_wait_seconds == pytest.approx(1.0)
    assert before.voluntary_ctxt_switches is not None
    assert after.voluntary_ctxt_switches == before.voluntary_ctxt_switches + 400
    assert before.involuntary_ctxt_switches is not None
    assert after.involuntary_ctxt_switches == before.involuntary_ctxt_switches + 80
    assert (after.comm, after.state, after.threads, after.rss_bytes) == (
        "python", "R", 32, 8 * 1024**3)
    assert after.container_id == "ab" * 32
    assert after.pod_uid == "6f1d3c2a-9b7e-4c1d-8e2f-0a1b2c3d4e5f"


def test_processes_run_on_their_gpus_local_cpus_unless_pinned(node: Node) -> None:
    # Two GPUs on two NUMA nodes of 32 CPUs each: GPU 1 is on node 1.
    gpu_process = procs.read_process(node.fs.procfs, 1000)
    worker = procs.read_process(node.fs.procfs, 1001)
    pinned = procs.read_process(node.fs.procfs, 1002)
    assert gpu_process is not None and worker is not None and pinned is not None
    assert gpu_process.cpus_allowed_list == "32-63"
    assert worker.cpus_allowed_list == "32-63"  # a worker of the GPU process
    assert worker.ppid == 1000
    assert pinned.cpus_allowed == frozenset({0, 1, 2, 3, 8})
    assert pinned.state == "D"
    status = (node.fs.procfs / "1002" / "status").read_text()
    assert "Cpus_allowed:\t0000010f\n" in status


def test_an_exited_process_leaves_proc(node: Node) -> None:
    assert procs.list_pids(node.fs.procfs) == [1000, 1001, 1002]
    node.advance(5.0)
    assert procs.list_pids(node.fs.procfs) == [1000, 1002]
    assert procs.read_process(node.fs.procfs, 1001) is None


def test_a_process_that_appears_later_starts_its_counters_then(tmp_path: Path) -> None:
    late = {"pid": 2000, "comm": "late", "cpu_ratio": 2.0}
    node = Node(tmp_path, scenario(timeline=[{"at": "10s", "processes": [*PROCESSES, late]}]))
    node.advance(10.0)
    first = procs.read_process(node.fs.procfs, 2000)
    node.advance(1.0)
    second = procs.read_process(node.fs.procfs, 2000)
    assert first is not None and second is not None
    assert first.cpu_seconds == 0.0
    assert second.cpu_seconds == pytest.approx(2.0)


def test_gpus_sit_behind_a_switch_with_their_numa_node_and_links(node: Node) -> None:
    dev = read_pci_device(node.fs.sysfs, "0000:2a:00.0")  # GPU 1
    assert dev is not None
    assert dev.numa_node == 1 and dev.local_cpulist == "32-63"
    assert dev.link == PcieLink(generation=5, generation_max=5, width=16, width_max=16)
    assert dev.upstream_bdf is not None and dev.upstream_bdf.endswith(":00.0")
    assert dev.upstream == PcieLink(generation=5, generation_max=5, width=16, width_max=16)
    assert dev.aer == {"correctable": 0, "nonfatal": 0, "fatal": 0}
    assert dev.problems == ()


def test_upstream_link_and_aer_follow_the_gpu_condition(tmp_path: Path) -> None:
    node = Node(tmp_path, scenario(gpus={0: {
        "upstream_link_generation": 3, "upstream_link_width": 4, "pcie_link_width": 8,
        "aer_correctable_per_s": 2.0, "aer_fatal_per_s": 0.5, "numa_node": 1}}))
    node.advance(10.0)
    dev = read_pci_device(node.fs.sysfs, "0000:18:00.0")
    assert dev is not None
    assert dev.link is not None and dev.link.width == 8
    assert dev.upstream == PcieLink(generation=3, generation_max=5, width=4, width_max=16)
    assert dev.aer == {"correctable": 20, "nonfatal": 0, "fatal": 5}
    assert dev.numa_node == 1


def test_an_idle_gpu_link_downshifts_in_sysfs_too(tmp_path: Path) -> None:
    node = Node(tmp_path, scenario(state={"utilization": 0.0}))
    dev = read_pci_device(node.fs.sysfs, "0000:18:00.0")
    assert dev is not None and dev.link is not None
    assert dev.link.generation == 1 and dev.link.generation_max == 5


def test_a_lost_gpu_leaves_sysfs_and_comes_back(tmp_path: Path) -> None:
    node = Node(tmp_path, scenario(timeline=[{"at": "2s", "gpus": [1], "set": {"lost": True}},
                                             {"at": "4s", "gpus": [1], "set": {"lost": False}}]))
    assert read_pci_device(node.fs.sysfs, "0000:2a:00.0") is not None
    node.advance(2.0)
    assert read_pci_device(node.fs.sysfs, "0000:2a:00.0") is None
    assert read_pci_device(node.fs.sysfs, "0000:18:00.0") is not None
    node.advance(2.0)
    back = read_pci_device(node.fs.sysfs, "0000:2a:00.0")
    assert back is not None and back.numa_node == 1


def test_changed_files_are_rewritten_and_unchanged_ones_left_alone(node: Node) -> None:
    cgroup = node.fs.procfs / "1000" / "cgroup"
    stat = node.fs.procfs / "1000" / "stat"
    before = cgroup.stat().st_mtime_ns, stat.read_text()
    node.advance(1.0)
    assert cgroup.stat().st_mtime_ns == before[0]
    assert stat.read_text() != before[1]


def test_files_live_in_memory_and_go_with_the_hostfs(tmp_path: Path) -> None:
    node = Node(tmp_path, scenario())
    real = node.fs.procfs.resolve().parent
    assert (node.fs.procfs / "stat").exists() and (node.fs.sysfs / "bus").exists()
    if real == tmp_path:
        pytest.skip("no tmpfs on this machine: the files are under the root itself")
    assert str(real).startswith("/dev/shm/")
    del node
    gc.collect()
    assert not real.exists()


def test_close_frees_the_memory_at_once(tmp_path: Path) -> None:
    node = Node(tmp_path, scenario())
    real = node.fs.procfs.resolve().parent
    node.fs.close()
    node.fs.close()  # twice is harmless
    if real != tmp_path:
        assert not real.exists()


def test_the_port_above_a_gpu_trains_with_the_gpus_own_link(tmp_path: Path) -> None:
    """Both ends of one PCIe link run at the same width and speed: a GPU
    trained at x8 shows x8 on the switch port above it, and an idle GPU's
    downshift to Gen1 shows there too."""
    narrow = Node(tmp_path / "narrow", scenario(gpus={0: {"pcie_link_width": 8}}))
    dev = read_pci_device(narrow.fs.sysfs, "0000:18:00.0")
    assert dev is not None and dev.upstream is not None
    assert (dev.upstream.width, dev.upstream.width_max) == (8, 16)
    idle = Node(tmp_path / "idle", scenario(state={"utilization": 0.0}))
    dev = read_pci_device(idle.fs.sysfs, "0000:18:00.0")
    assert dev is not None and dev.upstream is not None
    assert (dev.upstream.generation, dev.upstream.generation_max) == (1, 5)


def test_a_node_closed_while_a_poll_refreshes_it_leaves_no_file(tmp_path: Path) -> None:
    """A one-shot command stopped by SIGTERM closes its node on the main
    thread while the poll thread may be refreshing the files: nothing may be
    written after the close, or the refresh makes the removed directories
    again (in /dev/shm, through the root's links)."""
    for _ in range(5):
        clock = VirtualClock(0.0)
        sim = SimulatedNode(scenario(), clock=clock)
        root, files = sim.procfs.parent, sim.procfs.resolve().parent
        refreshed = threading.Event()
        stop = threading.Event()
        failures: list[BaseException] = []

        def poll(sim: SimulatedNode = sim, clock: VirtualClock = clock,
                 refreshed: threading.Event = refreshed, stop: threading.Event = stop,
                 failures: list[BaseException] = failures) -> None:
            while not stop.is_set():
                clock.advance(1.0)
                try:
                    sim.refresh()
                except OSError as exc:
                    failures.append(exc)
                    return
                refreshed.set()

        thread = threading.Thread(target=poll)
        thread.start()
        assert refreshed.wait(10)
        sim.close()
        stop.set()
        thread.join(10)
        assert failures == []
        assert not root.exists()
        assert not files.exists(), f"{files} was made again after the close"
