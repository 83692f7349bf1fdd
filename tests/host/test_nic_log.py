"""The NIC driver's kernel log lines (host/nic_log.py) beside the Xids: the
mlx5_core lines the exporter counts (tests/fixtures/kmsg/mlx5.kmsg, shapes
from the driver's source), hostile look-alikes it must not, the bounded
table, and the counts the kmsg collector exports."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.collectors.kmsg import KmsgCollector
from gpu_exporter.host.driver_log import DriverLog
from gpu_exporter.host.kmsg import parse_record, split_records
from gpu_exporter.host.nic_log import EVENTS, NicLine, NicLog, parse_nic_line
from tests.onegpu import OneGpu

FIXTURE = Path(__file__).parents[1] / "fixtures" / "kmsg" / "mlx5.kmsg"


def _store() -> DriverLog:
    records, rest = split_records(FIXTURE.read_bytes())
    assert rest == b""
    store = DriverLog()
    for raw in records:
        record = parse_record(raw)
        assert record is not None, raw
        store.add(record)
    return store


def test_the_fixtures_lines_counted_per_nic_and_event() -> None:
    store = _store()
    assert store.nics.counts == {
        ("0000:1a:00.0", "link_up"): 2,
        ("0000:1a:00.0", "link_down"): 2,
        ("0000:41:00.0", "health_compromised"): 1,
        ("0000:41:00.0", "firmware_fatal"): 1,
        ("0000:1a:00.0", "pcie_correctable"): 1,
        ("0000:9a:00.0", "pcie_uncorrectable"): 1,
    }
    assert {event for _, event in store.nics.counts} <= set(EVENTS)
    assert store.xids == {}  # none of these is an Xid


@pytest.mark.parametrize("message", [
    "mlx5_core 0000:1a:00.0 ibp26s0: Link down; echo pwned",
    "mlx5_core 0000:1a:00.0 ibp26s0 extra: Link down",
    "mlx5_core 0000:1A:00.0 ibp26s0: Link down",
    "xmlx5_core 0000:1a:00.0 ibp26s0: Link down",
    "mlx5_core 0000:41:00.0: Fatal error 1 detected",  # not mlx5_core_err's shape
    "mlx5_core 0000:41:00.0: poll_health:817:(pid 0): Fatal error 99999999999 detected",
    "mlx5_core 0000:08:00.0: cq_err_event_notifier:529:(pid 9422): CQ error on CQN 0x406",
    "mlx5_core 0000:1a:00.0: " + "A" * 10000,
    "mlx5_core 0000:1a:00.0 ibp26s0: Link down\x00",
    "",
])
def test_look_alikes_are_not_counted(message: str) -> None:
    assert parse_nic_line(message) is None


def test_a_link_down_names_the_nic_by_its_pci_address() -> None:
    assert parse_nic_line("mlx5_core 0000:9a:00.1 ens1f1np1: Link down") == NicLine(
        "0000:9a:00.1", "link_down")


def test_a_flood_stays_within_its_keys() -> None:
    log = NicLog(max_keys=4)
    for bus in range(200):
        for _ in range(50):
            log.add(f"mlx5_core 0000:{bus % 256:02x}:00.0 ib0: Link down")
    assert len(log.counts) == 4
    assert sum(log.counts.values()) == 4 * 50
    assert log.overflow == 196 * 50


def test_the_kmsg_collector_exports_them(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_bytes(FIXTURE.read_bytes())
    with OneGpu() as one:
        collector = KmsgCollector(one.session, str(log), one.node.procfs, one.clock,
                                  one.clock, synchronous=True)
        one.built.append(collector)
        snap = one.poll(collector)
    got = {(lb["pci_bus_id"], lb["event"]): v
           for lb, v in snap.series("gpu_nic_kernel_events_total")}
    assert got[("0000:1a:00.0", "link_down")] == 2.0
    assert got[("0000:41:00.0", "firmware_fatal")] == 1.0
    assert len(got) == 6
