"""Placing an allocated pod with no GPU process: its UID from the kubelet's
device-manager checkpoint (both formats kubelets write), matched to the
PodResources grant by resource, container and device; its cgroup by that UID
under either cgroup driver and either cgroup version; its CPU use as a rate.
What is ambiguous or unreadable is not placed, never guessed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpu_exporter.attribution import pod_cpu
from gpu_exporter.attribution.cgroup_tree import discover
from gpu_exporter.attribution.devices import parse_device_id
from gpu_exporter.attribution.kubelet_answers import Allocation, Claim, Owner
from gpu_exporter.attribution.pod_cpu import (
    CheckpointReader,
    checkpoint_path,
    cores_since,
    parse_checkpoint,
    pod_cpu_seconds,
    pod_uids,
    read_checkpoint,
)

UID = "4e5f6071-8293-4a4b-a5d6-e7f8091a2b3c"
OTHER = "2c3d4e5f-6071-4829-83a4-b5c6d7e8f901"
GPU7 = "GPU-8d0a3c1e-4b5f-4c6d-9e7f-0a1b2c3d4e5f"
TRAINER = Owner("research", "resnet-cpu", "trainer")


def checkpoint(*entries: dict[str, object]) -> bytes:
    return json.dumps({"Data": {"PodDeviceEntries": list(entries),
                                "RegisteredDevices": {}}, "Checksum": 1}).encode()


def entry(uid: str = UID, container: str = "trainer", ids: object = None,
          resource: str = "nvidia.com/gpu") -> dict[str, object]:
    return {"PodUID": uid, "ContainerName": container, "ResourceName": resource,
            "DeviceIDs": {"0": [GPU7]} if ids is None else ids, "AllocResp": "Cg=="}


def grant(owner: Owner = TRAINER, device: str = GPU7,
          claim: Claim | None = None) -> Allocation:
    ref = parse_device_id(device)
    assert ref is not None
    return Allocation(ref, "nvidia.com/gpu", owner, claim)


def test_the_checkpoint_sits_beside_the_pod_resources_socket() -> None:
    assert checkpoint_path("/var/lib/kubelet/pod-resources/kubelet.sock") == \
        "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"


@pytest.mark.parametrize("ids", [{"0": [GPU7]}, {"-1": [GPU7]}, [GPU7]],
                         ids=["by-numa-node", "no-numa", "list-before-1.20"])
def test_both_checkpoint_formats_give_the_pods_uid(ids: object) -> None:
    grants = parse_checkpoint(checkpoint(entry(ids=ids)))
    assert grants is not None
    assert pod_uids([grant()], grants) == {TRAINER: UID}


@pytest.mark.parametrize("data", [b"", b"not json", b"[]", b'{"Data": {}}',
                                  b'{"Data": {"PodDeviceEntries": 3}}'])
def test_what_is_not_the_kubelets_checkpoint_places_nothing(data: bytes) -> None:
    assert parse_checkpoint(data) is None


def test_entries_of_another_shape_are_skipped() -> None:
    grants = parse_checkpoint(checkpoint({"PodUID": 7}, "x", entry(ids={"0": [5, "junk"]}),
                                         entry()))
    assert grants is not None and [g.pod_uid for g in grants] == [UID]


def test_a_grant_is_matched_by_container_resource_and_device() -> None:
    grants = parse_checkpoint(checkpoint(entry(container="sidecar"),
                                         entry(resource="nvidia.com/mig-1g.10gb")))
    assert grants is not None
    assert pod_uids([grant()], grants) == {}


def test_a_device_two_pods_hold_places_neither() -> None:
    """A shared GPU's replicas lose their suffix: the grant names two pods."""
    grants = parse_checkpoint(checkpoint(entry(ids=[GPU7 + "::1"]),
                                         entry(uid=OTHER, ids=[GPU7 + "::2"])))
    assert grants is not None
    assert pod_uids([grant()], grants) == {}


def test_a_resource_claims_device_is_not_placed() -> None:
    grants = parse_checkpoint(checkpoint(entry()))
    assert grants is not None
    assert pod_uids([grant(claim=Claim("research", "gpus"))], grants) == {}


def test_an_unreadable_checkpoint_places_nothing(tmp_path: Path) -> None:
    assert read_checkpoint(str(tmp_path / "absent")) is None
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_bytes(checkpoint(entry()))
    grants = read_checkpoint(str(path))
    assert grants is not None and grants[0].pod_uid == UID


def test_the_checkpoint_is_parsed_again_only_when_the_kubelet_replaced_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_bytes(checkpoint(entry()))
    parsed: list[bytes] = []
    real = pod_cpu.parse_checkpoint
    monkeypatch.setattr(pod_cpu, "parse_checkpoint",
                        lambda data: parsed.append(data) or real(data))
    reader = CheckpointReader(str(path))
    first = reader.grants()
    assert first is not None and first[0].pod_uid == UID
    assert reader.grants() == first and len(parsed) == 1  # unchanged: not read again
    # the kubelet writes a new file and renames it over the old one
    other = "33333333-3333-4333-8333-333333333333"
    (tmp_path / "new").write_bytes(checkpoint(entry(uid=other)))
    os.replace(tmp_path / "new", path)
    again = reader.grants()
    assert again is not None and again[0].pod_uid == other and len(parsed) == 2
    path.unlink()
    assert reader.grants() is None  # gone: nothing placed, and asked again next poll
    path.write_bytes(b"not json")  # not the kubelet's: nothing placed, tried again
    assert reader.grants() is None and reader.grants() is None
    assert len(parsed) == 4


def cgroup_file(root: Path, relative: str, name: str, text: str) -> None:
    directory = root / relative
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)


def v2_root(tmp_path: Path) -> Path:
    root = tmp_path / "cgroup"
    cgroup_file(root, "", "cgroup.controllers", "cpu io memory\n")
    return root


@pytest.mark.parametrize("relative", [
    f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice",
    f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}"
    ".slice",
    f"kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice",
    f"kubepods/burstable/pod{UID}",
    f"kubepods/pod{UID}",
], ids=["systemd-burstable", "systemd-besteffort", "systemd-guaranteed", "cgroupfs-burstable",
        "cgroupfs-guaranteed"])
def test_the_pods_cgroup_is_found_by_its_uid(tmp_path: Path, relative: str) -> None:
    root = v2_root(tmp_path)
    cgroup_file(root, relative, "cpu.stat", "usage_usec 42500000\nuser_usec 1\n")
    assert pod_cpu_seconds(discover(root, self_cgroup="0::/\n"), UID) == 42.5


def test_cgroup_v1_counts_the_pods_cpu_in_cpuacct(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    cgroup_file(root, "cpu,cpuacct", "cpu.cfs_quota_us", "-1\n")
    cgroup_file(root, "memory", "memory.limit_in_bytes", "9223372036854771712\n")
    cgroup_file(root / "cpu,cpuacct", f"kubepods/burstable/pod{UID}", "cpuacct.usage",
                "3000000000\n")
    tree = discover(root, self_cgroup="4:cpu,cpuacct:/\n3:memory:/\n")
    assert pod_cpu_seconds(tree, UID) == 3.0


def test_a_pod_not_in_the_tree_or_garbled_is_said_not_read(tmp_path: Path) -> None:
    root = v2_root(tmp_path)
    tree = discover(root, self_cgroup="0::/\n")
    said = pod_cpu_seconds(tree, UID)
    assert isinstance(said, str) and "not in the tree" in said
    cgroup_file(root, f"kubepods/pod{UID}", "cpu.stat", "usage_usec lots\n")
    assert isinstance(pod_cpu_seconds(tree, UID), str)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads whatever the mode says")
def test_a_pod_cgroup_not_permitted_says_so(tmp_path: Path) -> None:
    root = v2_root(tmp_path)
    cgroup_file(root, f"kubepods/pod{UID}", "cpu.stat", "usage_usec 1\n")
    os.chmod(root / f"kubepods/pod{UID}" / "cpu.stat", 0)
    said = pod_cpu_seconds(discover(root, self_cgroup="0::/\n"), UID)
    assert isinstance(said, str) and "permission denied" in said


def test_the_cpu_use_is_a_rate_between_two_reads() -> None:
    assert cores_since({}, UID, 10.0, 50.0) is None  # first read
    assert cores_since({UID: (0.0, 10.0)}, UID, 10.0, 50.0) == 4.0
    assert cores_since({UID: (0.0, 60.0)}, UID, 10.0, 50.0) is None  # made again
    assert cores_since({UID: (10.0, 10.0)}, UID, 10.0, 50.0) is None  # no time passed
