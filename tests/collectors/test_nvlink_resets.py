"""The NVLink reader's last readings, which keep a link's share of the
all-links totals while its read fails: a GPU back from a reset with fewer or
more links totals the links it has, and each GPU of a node holds its own.

Fast (simulated GPUs, the reader run alone): mutation testing runs these for
every edit of the reader, with tests/collectors/test_nvlink_reader.py."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gpu_exporter.collectors.nvlink import NvlinkCollector
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.errors import Return
from gpu_exporter.nvml.session import NvmlSession
from gpu_exporter.poll.snapshot import SnapshotBuilder
from gpu_exporter.simulator import SimulatedNode
from gpu_exporter.simulator.model import GpuCondition, Node, Scenario
from gpu_exporter.simulator.world import GpuState
from tests.collectors.test_nvlink_reader import (
    DL_CRC,
    ERRING,
    LINKS,
    Reader,
    expected_bytes,
    per_link,
    summed,
    totals,
)
from tests.simnode import VirtualClock


def _links(count: int) -> Any:
    """A GPU answering for its first ``count`` links only (as after a reset)."""
    def fewer(name: str, st: GpuState) -> GpuState:
        return dataclasses.replace(
            st, nvlink_up=st.nvlink_up[:count], nvlink_errors=st.nvlink_errors[:count],
            nvlink_tx_kib=st.nvlink_tx_kib[:count], nvlink_rx_kib=st.nvlink_rx_kib[:count])
    return fewer


def _reset(reader: Reader, count: int | None) -> None:
    """The GPU lost, then back after a reset with ``count`` links (None: all)."""
    reader.fail[c.FI_DEV_NVLINK_ERROR_DL_CRC, 0] = Return.GPU_IS_LOST
    reader.poll()
    assert reader.gpu.lost
    reader.fail.clear()
    reader.lib.inject_state = None if count is None else _links(count)
    reader.one.clock.advance(10.0)
    assert reader.one.session.try_recover(reader.gpu)


@pytest.mark.parametrize("before,after", [(LINKS, 16), (16, LINKS)])
def test_a_gpu_back_from_a_reset_with_other_links_totals_the_links_it_has(
        before: int, after: int) -> None:
    reader = Reader(**ERRING)
    try:
        reader.lib.inject_state = None if before == LINKS else _links(before)
        reader.poll(10.0)
        _reset(reader, None if after == LINKS else after)
        snap = reader.poll(10.0)
        sent = {key: v for key, v in expected_bytes(reader.state).items() if key[0] < after}
        assert snap.get("gpu_nvlink_links", gpu="0") == after
        assert per_link(snap, "gpu_nvlink_bytes_total", "direction") == sent
        assert totals(snap, "gpu_nvlink_bytes_all_links_total", "direction") == summed(sent)
    finally:
        reader.close()


def test_each_gpu_holds_its_own_links_last_readings() -> None:
    """Two GPUs, the first's links erring: a link whose read fails on the
    second keeps the second's last reading in its total, not the first's."""
    clock = VirtualClock()
    scenario = Scenario(name="two-gpus", node=Node(gpus=2), noise=False,
                        state=GpuCondition(utilization=0.9), gpus={0: GpuCondition(**ERRING)})
    node = SimulatedNode(scenario, clock=clock)
    node.install()
    session = NvmlSession(clock=clock, call_timeout=None)
    failing: set[tuple[int, int, int]] = set()
    node.library.inject_field_error = lambda index, fid, link: (
        int(Return.UNKNOWN) if (index, fid, link) in failing else None)
    reader = NvlinkCollector(session)
    try:
        snaps = []
        for fail in (False, True):
            if fail:
                failing.add((1, c.FI_DEV_NVLINK_ERROR_DL_CRC, 5))
            clock.advance(10.0)
            node.refresh()
            session.ensure()
            session.begin_poll()
            out = SnapshotBuilder(clock())
            reader.collect(out)
            snaps.append(out.build())
        crc = [snap.get("gpu_nvlink_errors_all_links_total", gpu="1", type="crc")
               for snap in snaps]
        assert crc == [0.0, 0.0]
        assert snaps[1].get("gpu_nvlink_errors_all_links_total", gpu="0", type="crc") == sum(
            errors[DL_CRC] for errors in node.world.state(0).nvlink_errors) > 0
        assert reader.errors() == 1
    finally:
        session.close()
        node.uninstall()
        node.close()
