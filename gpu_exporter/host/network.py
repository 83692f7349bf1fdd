"""Network interfaces' receive errors and drops (/proc/net/dev): drops on the
interface a job reads its data or gradients from slow the GPU down."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.host.files import MalformedFile, read_text, to_int

# Loopback and the virtual ends of containers, bridges and overlays: one per
# pod on a Kubernetes node, and their drops are not the node's network.
_VIRTUAL = re.compile(r"^(lo|veth|docker|br-|cni|flannel|cali|cilium|lxc|vxlan|tunl|virbr|"
                      r"ifb|dummy|kube-|weave|genev|nodelocaldns)")


@dataclass(frozen=True, slots=True)
class ReceiveCounters:
    errors: int
    drops: int


def is_counted(name: str) -> bool:
    return not _VIRTUAL.match(name)


def read_netdev(procfs: Path | str) -> dict[str, ReceiveCounters]:
    """Interface -> receive errors and drops since boot; virtual ones left out."""
    path = f"{procfs}/net/dev"
    out: dict[str, ReceiveCounters] = {}
    lines = read_text(path).splitlines()
    if len(lines) < 2 or "|" not in lines[0]:
        raise MalformedFile(path, "no header")
    for line in lines[2:]:
        name, sep, rest = line.partition(":")
        if not sep:
            if line.strip():
                raise MalformedFile(path, f"line without an interface {line.strip()!r}")
            continue
        name = name.strip()
        fields = rest.split()
        # Receive: bytes packets errs drop fifo frame compressed multicast,
        # then the eight transmit columns.
        if len(fields) < 16:
            raise MalformedFile(path, f"short line for {name}")
        if is_counted(name):
            out[name] = ReceiveCounters(to_int(path, fields[2]), to_int(path, fields[3]))
    return out
