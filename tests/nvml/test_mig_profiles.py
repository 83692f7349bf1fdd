"""MIG profile names: each MIG instance's GPU instance profile ("1g.10gb") on
gpu_mig_info, read as a real driver answers it (the GPU instance's profile ID
in the GPU's profile table, else the MIG device's own name), on every branch
and whatever NVML refuses; and the simulator answers those calls as NVML does."""

from __future__ import annotations

import ctypes
import logging
from typing import Any

import pynvml
import pytest

from gpu_exporter.collectors.mig import MigCollector
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.errors import Return
from gpu_exporter.nvml.mig import profile_name
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.simulator.libnvml.mig import GpuInstanceProfileInfoV2, GpuInstanceProfileInfoV3
from tests.onegpu import OneGpu


def mig(gi: int, profile_id: int | None, memory_mib: int = 9856) -> dict[str, Any]:
    return {"gpu_instance": gi, "profile_id": profile_id, "memory_total_mib": memory_mib,
            "memory_used_ratio": 0.5}


# An H100 80GB split as 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb+me (IDs 9, 14, 19, 20).
MIXED = [mig(1, 9, 40448), mig(5, 14, 20096), mig(9, 19), mig(10, 20)]
MIXED_NAMES = {"1": "3g.40gb", "5": "2g.20gb", "9": "1g.10gb", "10": "1g.10gb+me"}


def profiles(snap: Snapshot) -> dict[str, str]:
    """gpu_instance -> mig_profile label of gpu_mig_info ("" where it is empty)."""
    return {lab["gpu_instance"]: lab["mig_profile"] for lab, _ in snap.series("gpu_mig_info")}


def run_mig(polls: int = 3, **node: Any) -> tuple[list[Snapshot], OneGpu]:
    """Poll the MIG collector on one GPU; the node stays open for the caller to close."""
    gpu = OneGpu(**node)
    collector = gpu.build(MigCollector)
    return [gpu.poll(collector) for _ in range(polls)], gpu


def said(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records)


def test_each_instance_carries_its_profile_from_the_profile_table() -> None:
    snaps, gpu = run_mig(mig_instances=MIXED)
    with gpu:
        calls = gpu.node.library.calls
        assert all(profiles(s) == MIXED_NAMES for s in snaps)
        # The readings the other collectors use carry it too.
        assert {m.gpu_instance: m.profile for m in (snaps[-1].readings.mig or {})[0]} == {
            int(k): v for k, v in MIXED_NAMES.items()}
        # The table is read once per GPU, each instance's profile ID once per instance:
        # later polls ask nothing more.
        assert calls["nvmlGpuInstanceGetInfo"] == 4
        assert calls["nvmlDeviceGetGpuInstanceById"] == 4
        assert calls["nvmlDeviceGetGpuInstanceProfileInfoV"] == 18  # 17 values R580 knows + 1
        assert calls["nvmlDeviceGetName"] == 1  # the parent's, at discovery: no MIG name read
        assert gpu.poll(gpu.built[0]) and calls["nvmlGpuInstanceGetInfo"] == 4


def test_one_series_per_instance_and_only_on_the_info_series() -> None:
    snaps, gpu = run_mig(mig_instances=MIXED)
    with gpu:
        snap = snaps[-1]
        assert len(snap.series("gpu_mig_info")) == 4
        for name in ("gpu_mig_memory_total_bytes", "gpu_mig_memory_used_bytes"):
            assert all("mig_profile" not in lab for lab, _ in snap.series(name))


def test_an_instance_recreated_with_another_profile_is_read_again() -> None:
    gpu = OneGpu(mig_instances=[mig(1, 19)], later={"mig_instances": [mig(1, 9, 40448)]},
                 at=2.5)
    with gpu:
        collector = gpu.build(MigCollector)
        first = [profiles(gpu.poll(collector)) for _ in range(2)]
        after = [profiles(gpu.poll(collector)) for _ in range(2)]
    assert first == [{"1": "1g.10gb"}] * 2
    assert after == [{"1": "3g.40gb"}] * 2


@pytest.mark.parametrize("profile,expected", [
    ("a100-pcie-40gb", {"1": "3g.20gb", "5": "2g.10gb", "9": "1g.5gb", "10": "1g.5gb+me"}),
    ("h100-sxm5-80gb", MIXED_NAMES),
])
def test_profile_names_per_board(profile: str, expected: dict[str, str]) -> None:
    snaps, gpu = run_mig(profile=profile, mig_instances=MIXED)
    with gpu:
        assert profiles(snaps[-1]) == expected


@pytest.mark.parametrize("call,code", [
    ("nvmlDeviceGetGpuInstanceById", "NO_PERMISSION"),  # NVML: a privileged read
    ("nvmlDeviceGetGpuInstanceById", "NOT_SUPPORTED"),
    ("nvmlGpuInstanceGetInfo", "NO_PERMISSION"),
    ("nvmlDeviceGetGpuInstanceProfileInfoV", "NOT_SUPPORTED"),
    ("nvmlDeviceGetGpuInstanceProfileInfoV", "NO_PERMISSION"),
    ("nvmlDeviceGetGpuInstanceProfileInfoV", "FUNCTION_NOT_FOUND"),
])
def test_a_refused_profile_read_falls_back_to_the_mig_device_name(
        call: str, code: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        snaps, gpu = run_mig(mig_instances=MIXED, errors={call: code})
    with gpu:
        calls = gpu.node.library.calls
        assert all(profiles(s) == MIXED_NAMES for s in snaps)
        # Asked once, not again every poll or for every instance.
        assert calls[call] == (18 if call.endswith("InfoV") and code == "NOT_SUPPORTED"
                               else 1)
        assert calls["nvmlDeviceGetName"] == 1 + 4  # each MIG device's name, once
        assert snaps[-1].get("gpu_exporter_collector_errors_total", collector="mig") in (
            None, 0.0)
    assert said(caplog, call) == 1, [r.getMessage() for r in caplog.records]
    # Not a warning: the profile is read another way.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_profile_id_the_table_lacks_is_said_once_and_left_empty(
        caplog: pytest.LogCaptureFixture) -> None:
    """A GPU instance whose profile ID the GPU's table does not list (a driver
    newer than the table): named from the MIG device's name, which has no
    profile either here, so the label stays empty; said once, not an error."""
    with caplog.at_level(logging.INFO):
        snaps, gpu = run_mig(mig_instances=[mig(3, 99), mig(9, 19)])
    with gpu:
        assert all(profiles(s) == {"3": "", "9": "1g.10gb"} for s in snaps)
        assert gpu.session.gpus[0].errors == 0
    assert said(caplog, "profile ID 99") == 1


def test_no_profile_anywhere_leaves_the_label_empty(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        snaps, gpu = run_mig(driver="R470", mig_instances=[mig(9, 19)],
                             errors={"nvmlDeviceGetName": "NOT_SUPPORTED"})
    with gpu:
        # The parent's name is refused as well: the GPU is still read.
        assert all(profiles(s) == {"9": ""} for s in snaps)
        assert gpu.node.library.calls["nvmlDeviceGetGpuInstanceById"] == 0
    assert said(caplog, "nvmlDeviceGetGpuInstanceProfileInfoV") == 1


@pytest.mark.parametrize("branch", ["R470", "R525", "R535", "R550", "R570", "R580"])
def test_every_branch_names_the_profiles(branch: str) -> None:
    """R470 has no versioned profile query (R510): the names come from the MIG
    devices' names; the others read the table."""
    snaps, gpu = run_mig(driver=branch, mig_instances=MIXED)
    with gpu:
        assert profiles(snaps[-1]) == MIXED_NAMES
        # Memory too, through the v1 call before R510.
        total = {lab["gpu_instance"]: v for lab, v in
                 snaps[-1].series("gpu_mig_memory_total_bytes")}
        assert total == {"1": 40448 * 2**20, "5": 20096 * 2**20, "9": 9856 * 2**20,
                         "10": 9856 * 2**20}
        missing = gpu.node.library.missing
        assert ("nvmlDeviceGetGpuInstanceProfileInfoV" in missing) == (branch == "R470")


@pytest.mark.parametrize("name,expected", [
    ("MIG 1g.10gb", "1g.10gb"),  # a profile's name in nvmlGpuInstanceProfileInfo_v2_t
    ("1g.10gb", "1g.10gb"),
    ("MIG 1g.10gb+me", "1g.10gb+me"),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "1g.5gb"),  # a MIG device's name
    ("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", "3g.40gb"),  # a smaller compute instance
    ("NVIDIA H100 80GB HBM3 MIG 7g.80gb\n", "7g.80gb"),
    ("NVIDIA H100 80GB HBM3", ""),  # no profile in it
    ("NVIDIA H100 MIG 1g.10gb\"} 1\nevil", ""),  # nothing but a profile's characters
    ("MIG 1g.10gb junk", ""),
    ("", ""),
])
def test_profile_name(name: str, expected: str) -> None:
    assert profile_name(name) == expected


# --- the simulator answers as NVML does ---------------------------------------------------------
def _profile_info_v(profile: int, version: int) -> tuple[int, Any]:
    """nvmlDeviceGetGpuInstanceProfileInfoV on GPU 0 with a v2 or v3 struct
    (nvml.h's layouts): its return code and the struct."""
    info: Any = (GpuInstanceProfileInfoV3 if version == 3 else GpuInstanceProfileInfoV2)()
    info.version = (c.GPU_INSTANCE_PROFILE_INFO_V3_VERSION if version == 3
                    else c.GPU_INSTANCE_PROFILE_INFO_V2_VERSION)
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")
    ret = fn(pynvml.nvmlDeviceGetHandleByIndex(0), ctypes.c_uint(profile), ctypes.byref(info))
    return int(ret), info


@pytest.mark.parametrize("branch,v3_code", [("R535", Return.ARGUMENT_VERSION_MISMATCH),
                                            ("R550", Return.SUCCESS)])
def test_simulated_profile_info_versions(branch: str, v3_code: Return) -> None:
    """v2 since R510, v3 since R545 (R550 here): an older driver answers the
    newer struct ARGUMENT_VERSION_MISMATCH."""
    _, gpu = run_mig(polls=1, driver=branch, mig_instances=MIXED)
    with gpu:
        ret, info = _profile_info_v(0, 2)
        assert ret == Return.SUCCESS and info.id == 19 and info.name == b"MIG 1g.10gb"
        assert (info.sliceCount, info.instanceCount, info.memorySizeMB) == (1, 7, 9984)
        ret, info = _profile_info_v(0, 3)
        assert ret == v3_code
        if ret == Return.SUCCESS:
            assert (info.id, info.name, info.multiprocessorCount) == (19, b"MIG 1g.10gb", 16)


@pytest.mark.parametrize("branch,known", [("R535", 0x0A), ("R570", 0x0D), ("R580", 0x11)])
def test_simulated_profile_enumeration_ends_where_the_branch_does(
        branch: str, known: int) -> None:
    _, gpu = run_mig(polls=1, driver=branch, mig_instances=MIXED)
    with gpu:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        answers = {}
        for profile in range(c.GPU_INSTANCE_PROFILE_COUNT):
            try:
                answers[profile] = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
                    handle, profile, version=2).id
            except pynvml.NVMLError as exc:
                answers[profile] = -int(exc.value)
    # The board's profiles by NVML_GPU_INSTANCE_PROFILE_* value; NOT_SUPPORTED for
    # the others it knows; INVALID_ARGUMENT past them.
    board = {0: 19, 1: 14, 2: 9, 3: 5, 4: 0, 7: 20, 9: 15}
    assert answers == {p: board.get(p, -Return.NOT_SUPPORTED) if p < known
                       else -Return.INVALID_ARGUMENT for p in answers}


@pytest.mark.parametrize("branch,mig_off", [("R535", -Return.NOT_SUPPORTED), ("R550", 19)])
def test_simulated_profile_query_with_mig_off(branch: str, mig_off: int) -> None:
    """R550 lifted "MIG must be enabled" from the profile query."""
    _, gpu = run_mig(polls=1, driver=branch)
    with gpu:
        try:
            got = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
                pynvml.nvmlDeviceGetHandleByIndex(0), 0, version=2).id
        except pynvml.NVMLError as exc:
            got = -int(exc.value)
    assert got == mig_off


def test_simulated_gpu_instance_by_id() -> None:
    _, gpu = run_mig(polls=1, mig_instances=MIXED)
    with gpu:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        info = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(handle, 5))
        assert (info.id, info.profileId) == (5, 14)
        # Placed after the 3g.40gb instance's three slices, two slices wide.
        assert (info.placement.start, info.placement.size) == (3, 2)
        with pytest.raises(pynvml.NVMLError) as exc:
            pynvml.nvmlDeviceGetGpuInstanceById(handle, 4)
        assert exc.value.value == Return.NOT_FOUND
    _, off = run_mig(polls=1)
    with off, pytest.raises(pynvml.NVMLError) as exc:
        pynvml.nvmlDeviceGetGpuInstanceById(pynvml.nvmlDeviceGetHandleByIndex(0), 1)
    assert exc.value.value == Return.NOT_SUPPORTED
