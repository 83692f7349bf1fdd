"""The NVIDIA driver's files under the simulated /proc: each GPU's
``driver/nvidia/gpus/<bus id>/information``, with its device minor (by which
NVIDIA's DRA driver names the GPU), as the driver writes them."""

from __future__ import annotations

from pathlib import Path

from gpu_exporter.simulator.gpu_state import bus_id
from gpu_exporter.simulator.world import World


def proc_bus(index: int) -> str:
    """GPU ``index``'s directory name: ``0000:18:00.0``."""
    domain, bus, rest = bus_id(index).split(":")
    return f"{int(domain, 16):04x}:{bus.lower()}:{rest.lower()}"


def write_information(world: World, procfs: Path) -> None:
    minors = world.scenario.node.device_minors
    for st in world.states():
        minor = minors[st.index] if minors is not None else st.index
        directory = procfs / "driver" / "nvidia" / "gpus" / proc_bus(st.index)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "information").write_text(
            f"Model: \t\t {world.profile.name}\n"
            f"IRQ:   \t\t {120 + st.index}\n"
            f"GPU UUID: \t {st.uuid}\n"
            f"Video BIOS: \t 96.00.99.00.01\n"
            f"Bus Type: \t PCIe\n"
            f"DMA Size: \t 52 bits\n"
            f"DMA Mask: \t 0xfffffffffffff\n"
            f"Bus Location: \t {proc_bus(st.index)}\n"
            f"Device Minor: \t {minor}\n"
            f"GPU Excluded:\t No\n")
