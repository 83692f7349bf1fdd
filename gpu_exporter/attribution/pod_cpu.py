"""An allocated pod's own CPU use, for a pod with no process on any GPU: what
tells a job running its code on the CPU (CUDA not visible in its container, a
framework fallen back to the CPU) from a pod merely left idle.

The kubelet's PodResources API names a grant's pod by namespace and name
only, and a pod's cgroup is named by its UID. The kubelet's device manager
keeps both in its checkpoint (``<kubelet root>/device-plugins/
kubelet_internal_checkpoint``, beside the ``pod-resources/`` socket): each
grant's pod UID, container name, resource and device IDs. A grant is matched
to the PodResources answer by resource, container and device ID; where that
names more than one pod (a shared device) the pod is not placed. Devices
allocated through ResourceClaims are not in that checkpoint: their pods are
not placed either.

The pod's CPU use is its pod cgroup's (every container of the pod): the
cgroup files name containers by runtime ID, the kubelet by name.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpu_exporter.attribution.cgroup_tree import CgroupTree, read_file
from gpu_exporter.attribution.devices import DeviceRef, parse_device_id
from gpu_exporter.attribution.kubelet_answers import Allocation, Owner
from gpu_exporter.attribution.procfiles import read_bounded_or_errno

CHECKPOINT = os.path.join("device-plugins", "kubelet_internal_checkpoint")
# A node's checkpoint holds a few hundred grants (a few KiB each with the
# plugin's answer); anything past this is not the kubelet's file.
MAX_CHECKPOINT_BYTES = 4 * 1024 * 1024
MAX_GRANTS = 4096
_QOS = ("burstable", "besteffort")


@dataclass(frozen=True, slots=True)
class CheckpointGrant:
    """One device the device manager granted to a container of a pod."""

    pod_uid: str
    container: str
    resource: str
    device: DeviceRef


def checkpoint_path(pod_resources_socket: str) -> str:
    """The device manager's checkpoint of the kubelet whose PodResources
    socket is ``pod_resources_socket`` (``<root>/pod-resources/kubelet.sock``)."""
    root = os.path.dirname(os.path.dirname(pod_resources_socket))
    return os.path.join(root, CHECKPOINT)


def _device_ids(raw: object) -> list[str]:
    """A grant's device IDs: a list (kubelets before 1.20) or lists by NUMA
    node (``{"0": [...]}``)."""
    if isinstance(raw, list):
        return [d for d in raw if isinstance(d, str)]
    if isinstance(raw, dict):
        return [d for ids in raw.values() if isinstance(ids, list)
                for d in ids if isinstance(d, str)]
    return []


def parse_checkpoint(data: bytes) -> list[CheckpointGrant] | None:
    """The grants of a checkpoint's text; None when it is not the device
    manager's checkpoint (entries of another shape are skipped)."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    body = doc.get("Data") if isinstance(doc, dict) else None
    entries = body.get("PodDeviceEntries") if isinstance(body, dict) else None
    if not isinstance(entries, list):
        return None
    grants: list[CheckpointGrant] = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        uid, container = entry.get("PodUID"), entry.get("ContainerName")
        resource = entry.get("ResourceName")
        if not (isinstance(uid, str) and isinstance(container, str)
                and isinstance(resource, str)):
            continue
        for raw in _device_ids(entry.get("DeviceIDs")):
            ref = parse_device_id(raw)
            if ref is not None and len(grants) < MAX_GRANTS:
                grants.append(CheckpointGrant(uid, container, resource, ref))
    return grants


def read_checkpoint(path: str) -> list[CheckpointGrant] | None:
    data = read_bounded_or_errno(path, MAX_CHECKPOINT_BYTES)
    return parse_checkpoint(data) if isinstance(data, bytes) else None


class CheckpointReader:
    """The checkpoint's grants, read and parsed again only when the file
    changed: the kubelet writes it when it allocates, by renaming a new file
    over it (a new inode), while the exporter asks every poll. Up to 4 MiB of
    JSON parsed per poll for an answer that changes with pod starts is work
    the poll loop need not do."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int, int, int] | None = None
        self._grants: tuple[CheckpointGrant, ...] | None = None

    def grants(self) -> tuple[CheckpointGrant, ...] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            self._stamp = self._grants = None
            return None
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp != self._stamp:
            read = read_checkpoint(self.path)
            self._grants = None if read is None else tuple(read)
            # A file that could not be read is asked again next poll.
            self._stamp = stamp if read is not None else None
        return self._grants


def pod_uids(allocations: Iterable[Allocation],
             grants: Iterable[CheckpointGrant]) -> dict[Owner, str]:
    """The pod UID of each owner the device plugin granted a device to,
    where the checkpoint names exactly one pod for its grants."""
    by_grant: dict[tuple[str, str, DeviceRef], set[str]] = {}
    for g in grants:
        by_grant.setdefault((g.resource, g.container, g.device), set()).add(g.pod_uid)
    found: dict[Owner, set[str]] = {}
    for a in allocations:
        if a.claim is not None:
            continue
        uids = by_grant.get((a.resource, a.owner.container, a.device), set())
        found.setdefault(a.owner, set()).update(uids)
    return {owner: next(iter(uids)) for owner, uids in found.items() if len(uids) == 1}


def _pod_dirs(uid: str) -> list[str]:
    """Where the kubelet puts a pod's cgroup: the systemd driver's slices
    (the UID's dashes as underscores) and the cgroupfs driver's directories,
    for each QoS class."""
    under = uid.replace("-", "_")
    dirs = [os.path.join("kubepods.slice", f"kubepods-pod{under}.slice"),
            os.path.join("kubepods", f"pod{uid}")]
    for qos in _QOS:
        dirs.append(os.path.join("kubepods.slice", f"kubepods-{qos}.slice",
                                 f"kubepods-{qos}-pod{under}.slice"))
        dirs.append(os.path.join("kubepods", qos, f"pod{uid}"))
    return dirs


def _usage_seconds(directory: str, v1: bool) -> float | int:
    """CPU seconds the cgroup used, or the errno that kept them."""
    text = read_file(directory, "cpuacct.usage" if v1 else "cpu.stat")
    if isinstance(text, int):
        return text
    if v1:
        value = text.strip()
        return int(value) / 1e9 if value.isascii() and value.isdigit() else errno.EINVAL
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec" and value.strip().isascii() and value.strip().isdigit():
            return int(value) / 1e6
    return errno.EINVAL


def pod_cpu_seconds(tree: CgroupTree, uid: str) -> float | str:
    """CPU seconds the pod's cgroup used so far, or why they are not known."""
    hierarchy, v1 = tree.unified, False
    if tree.cpu is not None:  # v1's cpu controller, where mounted, holds the usage
        hierarchy, v1 = tree.cpu, True
    if hierarchy is None:
        return f"no cgroup hierarchy with CPU usage under {tree.root}"
    denied = False
    for relative in _pod_dirs(uid):
        used = _usage_seconds(os.path.join(hierarchy.mount, relative), v1)
        if isinstance(used, float):
            return used
        denied = denied or used == errno.EACCES
    if denied:
        return f"permission denied reading the pod's cgroup under {tree.root}"
    return f"the pod's cgroup is not in the tree at {tree.root}"


def cores_since(before: Mapping[str, tuple[float, float]], uid: str, now: float,
                seconds: float) -> float | None:
    """CPUs' worth of time the pod used since its last read (None: first read,
    or its counter went back: a pod made again under the same UID)."""
    last = before.get(uid)
    if last is None or now <= last[0] or seconds < last[1]:
        return None
    return (seconds - last[1]) / (now - last[0])
