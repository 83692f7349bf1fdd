"""The simulated node's NICs in its /sys, as the kernel lays them out: an
onboard Ethernet port, and RDMA devices (ConnectX HCAs, one port each) with
class/net/<netdev> and class/infiniband/<hca>/ports/1/ (state, phys_state,
rate, link_layer, counters/). An HCA sits behind a GPU's PCIe switch
(``beside_gpu``: PIX to that GPU) or on a host bridge of its own on a NUMA
node. Its error counters climb at the scenario's rates and stop at the top
of their PMA field as the hardware's do (drivers/infiniband/core/sysfs.c:
symbol_error 16 bits, link_downed 8 ...)."""

from __future__ import annotations

from typing import Any, Protocol

# Width of each PortCounters field the simulator writes.
COUNTER_BITS = {"symbol_error": 16, "link_error_recovery": 8, "link_downed": 8,
                "port_rcv_errors": 16, "port_xmit_discards": 16,
                "local_link_integrity_errors": 4, "excessive_buffer_overrun_errors": 4,
                "port_xmit_wait": 32}
_STATES = {"DOWN": "1: DOWN", "INIT": "2: INIT", "ARMED": "3: ARMED", "ACTIVE": "4: ACTIVE"}
_WIDTH = {"InfiniBand": "4X NDR", "Ethernet": "4X"}
# The default node: one 400 Gb/s InfiniBand HCA behind each GPU's switch, as on
# an HGX H100 board with eight ConnectX-7s.
DEFAULT_HCAS = 8
# Host bridges of HCAs not beside a GPU: above the GPUs' buses.
_OWN_BRIDGE_BUS = 0xE0


class Files(Protocol):
    def write(self, path: str, text: str) -> None: ...

    def symlink(self, link: str, target: str) -> None: ...


def default_nics(gpus: int) -> list[dict[str, Any]]:
    return [{"name": f"mlx5_{i}", "beside_gpu": i} for i in range(min(gpus, DEFAULT_HCAS))]


class NicRenderer:
    def __init__(self, files: Files, sysfs: str) -> None:
        self._files = files
        self._sys = sysfs
        self._counts: dict[tuple[str, str], float] = {}

    def render(self, gpus: dict[int, tuple[str, list[str]]], nics: list[dict[str, Any]] | None,
               numa_of_gpu: dict[int, int], dt: float) -> None:
        """``gpus``: index -> (bdf, bridge chain above it); ``nics``: the host
        condition's ``rdma`` (None: the default node's)."""
        self._device("eno1", "0000:e8:00.0", ["pci0000:e7", "0000:e7:01.0"], 0)
        self._netdev("eno1", "0000:e8:00.0", "up", 25000)
        listed = default_nics(len(gpus)) if nics is None else nics
        for k, nic in enumerate(listed):
            beside = nic.get("beside_gpu")
            if beside is not None and beside in gpus:
                bdf, chain = gpus[beside]
                bus = int(bdf[5:7], 16) + 1
                down = f"{chain[-1][:8]}01.0"
                parents = [f"pci{chain[0][:4]}:{chain[0][5:7]}", *chain[:-1], down]
                numa = numa_of_gpu.get(beside, 0)
            else:
                bus = _OWN_BRIDGE_BUS + 2 * k + 1
                parents = [f"pci0000:{bus - 1:02x}", f"0000:{bus - 1:02x}:01.0"]
                numa = int(nic.get("numa_node", 0))
            pci = f"0000:{bus:02x}:00.0"
            directory = self._device(nic["name"], pci, parents, numa)
            self._hca(nic, directory, dt)
            up = nic.get("state", "ACTIVE") == "ACTIVE"
            netdev = nic.get("netdev") or f"ib{nic['name'].rsplit('_', 1)[-1]}"
            self._netdev(netdev, pci, "up" if up else "down",
                         int(float(nic.get("rate_gbps", 400.0)) * 1000) if up else -1)

    def _device(self, name: str, bdf: str, parents: list[str], numa: int) -> str:
        directory = f"{self._sys}/devices/" + "/".join([*parents, bdf])
        self._files.write(f"{directory}/numa_node", f"{numa}\n")
        self._files.write(f"{directory}/vendor", "0x15b3\n")
        self._files.symlink(f"{self._sys}/bus/pci/devices/{bdf}", directory)
        return directory

    def _netdev(self, name: str, bdf: str, operstate: str, speed: int) -> None:
        base = f"{self._sys}/class/net/{name}"
        self._files.write(f"{base}/operstate", operstate + "\n")
        self._files.write(f"{base}/carrier", ("1" if operstate == "up" else "0") + "\n")
        self._files.write(f"{base}/speed", f"{speed}\n")
        self._files.symlink(f"{base}/device", f"{self._sys}/bus/pci/devices/{bdf}")

    def _hca(self, nic: dict[str, Any], directory: str, dt: float) -> None:
        name = nic["name"]
        self._files.symlink(f"{self._sys}/class/infiniband/{name}/device", directory)
        base = f"{self._sys}/class/infiniband/{name}/ports/1"
        state = str(nic.get("state", "ACTIVE"))
        layer = str(nic.get("link_layer", "InfiniBand"))
        rate = float(nic.get("rate_gbps", 400.0))
        self._files.write(f"{base}/state", _STATES[state] + "\n")
        self._files.write(f"{base}/phys_state",
                          ("5: LinkUp" if state != "DOWN" else "3: Disabled") + "\n")
        self._files.write(f"{base}/rate", f"{rate:g} Gb/sec ({_WIDTH[layer]})\n")
        self._files.write(f"{base}/link_layer", layer + "\n")
        start = nic.get("counters") or {}
        rates = nic.get("errors_per_s") or {}
        for counter, bits in COUNTER_BITS.items():
            key = (name, counter)
            value = self._counts.get(key, float(start.get(counter, 0)))
            value += float(rates.get(counter, 0.0)) * dt
            # The PMA counter stops at the top of its field: it never wraps.
            value = min(value, float(2**bits - 1))
            self._counts[key] = value
            self._files.write(f"{base}/counters/{counter}", f"{int(value)}\n")
