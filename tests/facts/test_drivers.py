"""A driver version's branch, and the first branch of each value older
drivers lack, pinned to NVIDIA's change log."""

from __future__ import annotations

import pytest

from gpu_exporter.facts.drivers import FIRST_BRANCH, branch
from gpu_exporter.nvml import constants as k
from gpu_exporter.simulator.drivers import FIELD_SINCE, SYMBOL_SINCE


def test_the_first_branches_are_nvidias_change_log() -> None:
    """Pinned to the branches NVML's change log and nvml.h give each call (the
    simulator's driver tables cite them: simulator/drivers.py)."""
    assert {
        "gpm": SYMBOL_SINCE["nvmlGpmQueryDeviceSupport"],
        "recovery_action": FIELD_SINCE[k.FI_DEV_GET_GPU_RECOVERY_ACTION],
        "fabric_state": SYMBOL_SINCE["nvmlDeviceGetGpuFabricInfoV"],
        "c2c_errors": FIELD_SINCE[k.FI_DEV_C2C_LINK_ERROR_INTR],
    } == FIRST_BRANCH
    assert FIELD_SINCE[k.FI_DEV_C2C_LINK_ERROR_REPLAY] == FIRST_BRANCH["c2c_errors"]


@pytest.mark.parametrize(("version", "number"), [
    ("580.65.06", 580), ("470", 470), ("", 0), ("r580.1", 0), ("-5.1", 0),
    ("\uff15\uff18\uff10.1", 0)])
def test_a_driver_version_names_its_branch_or_none(version: str, number: int) -> None:
    assert branch(version) == number
