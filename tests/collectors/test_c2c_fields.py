"""The Grace C2C link's error counters (NVML fields 231-233) are asked only of
a GPU with a C2C link: a board without one (an HGX H100) answers them
NOT_SUPPORTED, and asking would only say so in the log. Whether a GPU has the
link is what NVML answers for it once (nvmlDeviceGetC2cModeInfoV, the C2C
link-count field), checked on the simulator and on NVIDIA's mock NVML, whose
board files say it (``c2c_enabled``)."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from gpu_exporter.collectors.device import DeviceCollector
from gpu_exporter.facts.cadence import SLOW_READ_EVERY_POLLS
from gpu_exporter.nvml import constants as c
from tests import mock_nvml
from tests.onegpu import OneGpu

C2C_ERROR_FIELDS = {c.FI_DEV_C2C_LINK_ERROR_INTR, c.FI_DEV_C2C_LINK_ERROR_REPLAY,
                    c.FI_DEV_C2C_LINK_ERROR_REPLAY_B2B}
POLLS = 2 * SLOW_READ_EVERY_POLLS + 1  # the counters' cadence comes due twice


def asked(profile: str, caplog: pytest.LogCaptureFixture) -> tuple[Counter[int], list[str]]:
    """The fields NVML was asked of GPU 0 over POLLS polls of the device
    reader, and the log's NOT_SUPPORTED lines."""
    fields: Counter[int] = Counter()
    with OneGpu(profile=profile, utilization=0.5) as one:
        def count(index: int, fid: int, scope: int) -> int | None:
            fields[fid] += 1
            return None

        one.node.library.inject_field_error = count
        device = one.build(DeviceCollector)
        with caplog.at_level(logging.INFO):
            for _ in range(POLLS):
                snap = one.poll(device)
        assert snap.get("gpu_up", gpu="0") == 1
    return fields, [r.getMessage() for r in caplog.records if "NOT_SUPPORTED" in r.getMessage()]


def test_a_board_without_a_c2c_link_is_never_asked_its_error_counters(
        caplog: pytest.LogCaptureFixture) -> None:
    fields, said = asked("h100-sxm5-80gb", caplog)
    assert fields[c.FI_DEV_C2C_LINK_COUNT] == 1  # the link count, read once
    assert not C2C_ERROR_FIELDS & fields.keys(), fields
    assert not [line for line in said if "c2c_errors" in line], said


def test_a_grace_board_is_asked_them_on_their_cadence(caplog: pytest.LogCaptureFixture) -> None:
    fields, _ = asked("gb200", caplog)
    for fid in C2C_ERROR_FIELDS:
        # The first poll, once the link is known, then every SLOW_READ_EVERY_POLLS.
        assert fields[fid] == 1 + (POLLS - 1) // SLOW_READ_EVERY_POLLS, (fid, fields[fid])


@pytest.mark.skipif(mock_nvml.library_dir() is None,
                    reason="NVIDIA's mock NVML is not there: build it into "
                           "../shared/nvidia-mocknvml or point GPU_EXPORTER_MOCKNVML at it")
@pytest.mark.parametrize(("board", "has_link"), [("h100", False), ("gb200", True)])
def test_on_the_mock_only_a_board_with_the_link_is_asked(board: str, has_link: bool) -> None:
    answer = mock_nvml.run(board)
    fields = set(answer["fields_asked"])
    assert c.FI_DEV_C2C_LINK_COUNT in fields  # how the exporter knows
    if has_link:
        assert fields >= C2C_ERROR_FIELDS
    else:
        assert not C2C_ERROR_FIELDS & fields
    assert answer["read_errors"] == 0
