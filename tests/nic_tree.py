"""A sysfs tree shaped like a two-socket GPU node's (8 GPUs, 4 ConnectX HCAs,
one onboard Ethernet port, container interfaces), written as the kernel lays
it out: every device a directory under devices/pci<domain>:<bus>/ and its
bridges, bus/pci/devices/<bdf> and class/net/<if>/device symlinks into it,
class/infiniband/<hca>/ports/<n>/ with the port's attributes and counters.

Socket 0: host bridges pci0000:17 and pci0000:38; socket 1: pci0000:97 and
pci0000:b8. Below each host bridge a root port, one PCIe switch (upstream
port, three downstream ports), two GPUs and one HCA, as on an HGX board:
each GPU's nearest HCA is PIX, the other host bridge of its socket NODE, the
other socket SYS."""

from __future__ import annotations

import os
from pathlib import Path

# host bridge -> (NUMA node, GPUs' bdfs, HCA's bdf)
BRIDGES = {
    "17": (0, ("0000:1b:00.0", "0000:1c:00.0"), "0000:1a:00.0"),
    "38": (0, ("0000:3b:00.0", "0000:3c:00.0"), "0000:3a:00.0"),
    "97": (1, ("0000:9b:00.0", "0000:9c:00.0"), "0000:9a:00.0"),
    "b8": (1, ("0000:bb:00.0", "0000:bc:00.0"), "0000:ba:00.0"),
}
GPUS = [gpu for _, gpus, _ in BRIDGES.values() for gpu in gpus]
HCAS = {f"mlx5_{i}": hca for i, (_, _, hca) in enumerate(BRIDGES.values())}
HCA_NETDEV = {f"mlx5_{i}": f"ibp{i}" for i in range(4)}
ONBOARD = "0000:01:00.0"  # eno1, on pci0000:00 below its own root port, NUMA 0


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _device(sys: Path, chain: list[str], numa: int) -> Path:
    """The device at the end of ``chain`` (host bridge, bridges, device)."""
    directory = sys / "devices" / "/".join(chain)
    directory.mkdir(parents=True, exist_ok=True)
    write(directory / "numa_node", f"{numa}\n")
    link = sys / "bus" / "pci" / "devices" / chain[-1]
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(os.path.relpath(directory, link.parent))
    return directory


def port(sys: Path, hca: str, number: int = 1, state: str = "4: ACTIVE",
         phys: str = "5: LinkUp", rate: str = "400 Gb/sec (4X NDR)",
         counters: dict[str, int] | None = None, layer: str = "InfiniBand") -> Path:
    base = sys / "class" / "infiniband" / hca / "ports" / str(number)
    write(base / "state", state + "\n")
    write(base / "phys_state", phys + "\n")
    write(base / "rate", rate + "\n")
    write(base / "link_layer", layer + "\n")
    for name, value in (counters or {}).items():
        write(base / "counters" / name, f"{value}\n")
    return base


def build(sys: Path) -> Path:
    for bus, (numa, gpus, hca) in BRIDGES.items():
        root = [f"pci0000:{bus}", f"0000:{bus}:01.0"]
        up = f"0000:{int(bus, 16) + 1:02x}:00.0"
        down_bus = f"{int(bus, 16) + 2:02x}"
        for slot, device in enumerate((hca, *gpus)):
            _device(sys, [*root, up, f"0000:{down_bus}:{slot:02x}.0", device], numa)
    for name, bdf in HCAS.items():
        directory = os.path.realpath(sys / "bus" / "pci" / "devices" / bdf)
        (sys / "class" / "infiniband" / name).mkdir(parents=True, exist_ok=True)
        (sys / "class" / "infiniband" / name / "device").symlink_to(directory)
        port(sys, name, counters={"symbol_error": 0, "link_downed": 1, "port_rcv_errors": 0,
                                  "port_xmit_wait": 123456})
        netdev = sys / "class" / "net" / HCA_NETDEV[name]
        write(netdev / "operstate", "up\n")
        write(netdev / "carrier", "1\n")
        write(netdev / "speed", "400000\n")
        (netdev / "device").symlink_to(directory)
    onboard = _device(sys, ["pci0000:00", "0000:00:1c.0", ONBOARD], 0)
    eno = sys / "class" / "net" / "eno1"
    write(eno / "operstate", "up\n")
    write(eno / "carrier", "1\n")
    write(eno / "speed", "1000\n")
    (eno / "device").symlink_to(onboard)
    # Virtual interfaces: no PCI device behind them.
    for name in ("lo", "docker0", "veth1a2b3c", "bond0"):
        virtual = sys / "devices" / "virtual" / "net" / name
        write(virtual / "operstate", "up\n")
        (sys / "class" / "net" / name).symlink_to(virtual)
    return sys
