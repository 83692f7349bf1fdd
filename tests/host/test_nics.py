"""The NIC and RDMA port reader (host/nics.py) and the GPU-to-NIC relations
(host/nic_topology.py) on a sysfs tree shaped like a two-socket node's with 8
GPUs and 4 HCAs (tests/nic_tree.py), and on hostile files: garbage, a huge
file, a missing attribute, a symlink loop."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gpu_exporter.host import nic_topology, nics
from gpu_exporter.host.files import MalformedFile, read_small
from tests import nic_tree


@pytest.fixture
def sys(tmp_path: Path) -> Path:
    return nic_tree.build(tmp_path / "sys")


def _location(sys: Path, bdf: str) -> nics.PciLocation:
    where, problems = nics.pci_location(sys, bdf)
    assert where is not None and problems == ()
    return where


def test_physical_interfaces_only_with_their_pci_place(sys: Path) -> None:
    view = nics.read_network(sys)
    names = [i.name for i in view.interfaces]
    # lo, docker0 and veth by name; bond0 because no PCI device is behind it.
    assert names == ["eno1", "ibp0", "ibp1", "ibp2", "ibp3"]
    eno = view.interfaces[0]
    assert (eno.operstate, eno.carrier, eno.speed_mbps) == ("up", True, 1000)
    assert eno.pci is not None
    assert eno.pci.path == ("pci0000:00", "0000:00:1c.0", "0000:01:00.0")
    assert eno.pci.numa_node == 0
    assert view.interfaces[3].pci is not None and view.interfaces[3].pci.numa_node == 1
    assert view.problems == () and view.left_out == 0


def test_rdma_ports_as_the_kernel_writes_them(sys: Path) -> None:
    view = nics.read_network(sys)
    assert [p.label for p in view.ports] == ["mlx5_0/1", "mlx5_1/1", "mlx5_2/1", "mlx5_3/1"]
    p = view.ports[2]
    assert (p.state, p.state_name, p.phys_state, p.phys_state_name) == (
        4, "ACTIVE", 5, "LinkUp")
    assert p.active and p.rate_gbps == 400.0 and p.link_layer == "InfiniBand"
    assert p.counters == {"symbol_error": 0, "link_downed": 1, "port_rcv_errors": 0,
                          "port_xmit_wait": 123456}
    assert p.saturated == frozenset()
    assert p.pci is not None and p.pci.bdf == "0000:9a:00.0" and p.pci.numa_node == 1


@pytest.mark.parametrize("rate, gbps", [("400 Gb/sec (4X NDR)", 400.0),
                                        ("2.5 Gb/sec (1X SDR)", 2.5),
                                        ("100 Gb/sec (2X HDR)", 100.0),
                                        ("25 Gb/sec (1X EDR)", 25.0)])
def test_rates_of_every_generation(sys: Path, rate: str, gbps: float) -> None:
    nic_tree.port(sys, "mlx5_0", rate=rate)
    assert nics.read_network(sys).ports[0].rate_gbps == gbps


def test_a_counter_at_the_top_of_its_field_is_saturated_not_a_rate(sys: Path) -> None:
    # symbol_error is 16 bits wide, link_downed 8, local_link_integrity_errors 4,
    # port_xmit_wait 32 (drivers/infiniband/core/sysfs.c): each stops there.
    nic_tree.port(sys, "mlx5_1", counters={"symbol_error": 65535, "link_downed": 255,
                                           "local_link_integrity_errors": 15,
                                           "port_xmit_wait": 2**32 - 1,
                                           "port_rcv_errors": 65534})
    p = nics.read_network(sys).ports[1]
    assert p.saturated == {"symbol_error", "link_downed", "local_link_integrity_errors",
                           "port_xmit_wait"}
    assert p.counters["symbol_error"] == 65535  # the value still read, and named
    # One below the top still counts.
    assert "port_rcv_errors" not in p.saturated


def test_a_port_down_reads_as_such(sys: Path) -> None:
    nic_tree.port(sys, "mlx5_3", state="1: DOWN", phys="3: Disabled")
    p = nics.read_network(sys).ports[3]
    assert (p.state, p.state_name, p.phys_state_name, p.active) == (1, "DOWN", "Disabled",
                                                                     False)


def test_a_down_interface_answers_speed_with_minus_one(sys: Path) -> None:
    (sys / "class" / "net" / "ibp1" / "speed").write_text("-1\n")
    (sys / "class" / "net" / "ibp1" / "operstate").write_text("down\n")
    (sys / "class" / "net" / "ibp1" / "carrier").write_text("0\n")
    nic = next(i for i in nics.read_network(sys).interfaces if i.name == "ibp1")
    assert (nic.operstate, nic.carrier, nic.speed_mbps) == ("down", False, None)


@pytest.mark.parametrize("relative, text", [
    ("class/infiniband/mlx5_0/ports/1/state", "ACTIVE\n"),
    ("class/infiniband/mlx5_0/ports/1/state", "99999: ACTIVE\n"),
    ("class/infiniband/mlx5_0/ports/1/rate", "fast\n"),
    ("class/infiniband/mlx5_0/ports/1/counters/symbol_error", "-1\n"),
    ("class/infiniband/mlx5_0/ports/1/counters/symbol_error", "\x00\x01\n"),
    ("class/infiniband/mlx5_0/ports/1/counters/link_downed", str(2**64) + "\n"),
    ("class/net/eno1/operstate", "UP; rm -rf /\n"),
    ("class/net/eno1/speed", "1e9\n"),
    ("devices/pci0000:97/0000:97:01.0/0000:98:00.0/0000:99:00.0/0000:9a:00.0/numa_node",
     "banana\n"),
])
def test_garbage_is_one_problem_and_hides_nothing_else(sys: Path, relative: str,
                                                       text: str) -> None:
    (sys / relative).write_text(text)
    view = nics.read_network(sys)
    assert len(view.problems) == 1 and relative.split("/")[-1] in view.problems[0]
    assert "\n" not in view.problems[0]
    assert len(view.ports) == 4 and len(view.interfaces) == 5


def test_a_huge_file_is_refused_unread(sys: Path) -> None:
    huge = sys / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "rate"
    huge.write_text("400 Gb/sec (4X NDR)" + " " * (1 << 20))
    with pytest.raises(MalformedFile, match="longer than 4096 bytes"):
        read_small(huge)
    view = nics.read_network(sys)
    assert view.ports[0].rate_gbps is None and len(view.problems) == 1


def test_missing_attributes_are_absent_not_problems(sys: Path) -> None:
    base = sys / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    for name in ("rate", "phys_state", "link_layer"):
        (base / name).unlink()
    view = nics.read_network(sys)
    p = view.ports[0]
    assert (p.rate_gbps, p.phys_state, p.link_layer, view.problems) == (None, None, "", ())


def test_a_symlink_loop_is_a_problem_not_a_hang(sys: Path) -> None:
    device = sys / "class" / "net" / "eno1" / "device"
    device.unlink()
    loop = sys / "devices" / "loop"
    os.symlink(loop, device)
    os.symlink(device, loop)
    view = nics.read_network(sys)
    assert "eno1" not in [i.name for i in view.interfaces]
    assert len(view.problems) == 1 and "eno1/device" in view.problems[0]


def test_places_kept_between_polls_follow_a_nic_that_comes_or_moves(sys: Path) -> None:
    """A NIC's PCI place is resolved once and kept, yet a NIC hot-plugged in,
    or re-created at another address, is found where it now is."""
    places = nics.Places()
    first = nics.read_network(sys, places=places)
    assert first == nics.read_network(sys)  # the kept places are the ones resolved
    eno_link = sys / "class" / "net" / "eno1" / "device"
    onboard = eno_link.resolve()
    # Moved behind another bridge while its interface stays: kept (until the
    # set of interfaces changes, or the collector's periodic refresh).
    moved = onboard.parent.parent / "0000:00:1d.0" / "0000:02:00.0"
    moved.mkdir(parents=True)
    eno_link.unlink()
    eno_link.symlink_to(moved)
    assert nics.read_network(sys, places=places).interfaces[0].pci == first.interfaces[0].pci
    # A new interface: every NIC's place is resolved again, eno1's at its new address.
    netdev = sys / "class" / "net" / "eno2"
    netdev.mkdir()
    (netdev / "device").symlink_to(onboard)
    (netdev / "operstate").write_text("up\n")
    view = nics.read_network(sys, places=places)
    where = {i.name: i.pci.path[1:] for i in view.interfaces if i.pci is not None}
    assert where["eno1"] == ("0000:00:1d.0", "0000:02:00.0")
    assert where["eno2"] == ("0000:00:1c.0", "0000:01:00.0")
    assert view == nics.read_network(sys)


def test_a_place_that_could_not_be_resolved_is_noted_every_poll(sys: Path) -> None:
    device = sys / "class" / "net" / "eno1" / "device"
    device.unlink()
    loop = sys / "devices" / "loop"
    os.symlink(loop, device)
    os.symlink(device, loop)
    places = nics.Places()
    for _ in range(2):
        assert len(nics.read_network(sys, places=places).problems) == 1


def test_no_rdma_on_the_node_is_no_ports_and_no_problem(sys: Path) -> None:
    shutil.rmtree(sys / "class" / "infiniband")
    view = nics.read_network(sys)
    assert view.ports == () and view.problems == ()


def test_no_class_net_is_a_missing_source(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        nics.read_network(tmp_path)


def test_nics_past_the_cap_are_counted_not_read(sys: Path) -> None:
    view = nics.read_network(sys, max_nics=2)
    assert [i.name for i in view.interfaces] == ["eno1", "ibp0"]
    assert [p.hca for p in view.ports] == ["mlx5_0", "mlx5_1"]
    assert view.left_out == 3 + 2


# --- topology ----------------------------------------------------------------
def test_each_gpu_against_each_hca_as_topo_m_prints_it(sys: Path) -> None:
    hcas = {name: _location(sys, bdf) for name, bdf in nic_tree.HCAS.items()}
    table = {gpu: {name: nic_topology.relation(_location(sys, gpu), where)
                   for name, where in hcas.items()} for gpu in nic_tree.GPUS}
    # Behind the same PCIe switch: PIX; the other host bridge of the socket:
    # NODE; the other socket: SYS.
    assert table["0000:1b:00.0"] == {"mlx5_0": "PIX", "mlx5_1": "NODE", "mlx5_2": "SYS",
                                     "mlx5_3": "SYS"}
    assert table["0000:bc:00.0"] == {"mlx5_0": "SYS", "mlx5_1": "SYS", "mlx5_2": "NODE",
                                     "mlx5_3": "PIX"}
    for gpu in nic_tree.GPUS:
        assert sorted(table[gpu].values()) == ["NODE", "PIX", "SYS", "SYS"]


def _at(*path: str, numa: int | None = 0) -> nics.PciLocation:
    return nics.PciLocation(path[-1], path, numa)


def test_the_relations_by_their_definitions() -> None:
    root = ("pci0000:17", "0000:17:01.0")
    switch = (*root, "0000:18:00.0")
    gpu = _at(*switch, "0000:19:00.0", "0000:1a:00.0")
    # One switch shared (its upstream port, a downstream port each): PIX.
    assert nic_topology.relation(gpu, _at(*switch, "0000:19:01.0", "0000:1b:00.0")) == "PIX"
    # Another function of the same device: PIX.
    assert nic_topology.relation(gpu, _at(*switch, "0000:19:00.0", "0000:1a:00.1")) == "PIX"
    # A second switch below the shared one: several bridges, PXB.
    nested = _at(*switch, "0000:19:02.0", "0000:1c:00.0", "0000:1d:00.0", "0000:1e:00.0")
    assert nic_topology.relation(gpu, nested) == "PXB"
    assert nic_topology.relation(nested, gpu) == "PXB"
    # Below another root port of the same host bridge: PHB.
    assert nic_topology.relation(
        gpu, _at("pci0000:17", "0000:17:02.0", "0000:30:00.0")) == "PHB"
    # Another host bridge: NODE on the same NUMA node, SYS across.
    other = ("pci0000:38", "0000:38:01.0", "0000:39:00.0")
    assert nic_topology.relation(gpu, _at(*other, numa=0)) == "NODE"
    assert nic_topology.relation(gpu, _at(*other, numa=1)) == "SYS"
    # No NUMA known for either (a kernel without NUMA): one node.
    assert nic_topology.relation(_at(*gpu.path, numa=None), _at(*other, numa=None)) == "NODE"
    # Known for one only: cannot tell.
    assert nic_topology.relation(gpu, _at(*other, numa=None)) is None


def test_nearest_prefers_the_closest_then_the_first_name(sys: Path) -> None:
    hcas = {name: _location(sys, bdf) for name, bdf in nic_tree.HCAS.items()}
    assert nic_topology.nearest(_location(sys, "0000:3c:00.0"), hcas) == ("mlx5_1", "PIX")
    del hcas["mlx5_0"], hcas["mlx5_1"]
    assert nic_topology.nearest(_location(sys, "0000:1b:00.0"), hcas) == ("mlx5_2", "SYS")
    assert nic_topology.nearest(_location(sys, "0000:1b:00.0"), {}) is None


def test_a_gpu_not_on_the_bus_has_no_place(sys: Path) -> None:
    assert nics.pci_location(sys, "0000:ee:00.0") == (None, ())
