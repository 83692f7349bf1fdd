"""The store of the NVIDIA driver's kernel-log lines (host/driver_log.py):
the bounds that keep its memory flat, and what each Xid key keeps. Records
written by hand; beside tests/host/test_kernel_log_store.py. Fast on purpose:
mutation testing runs these per changed line."""

from __future__ import annotations

from gpu_exporter.host import driver_log
from gpu_exporter.host.driver_log import MAX_UUIDS, DriverLog
from gpu_exporter.host.kmsg import Record


def rec(message: str, usec: int = 0) -> Record:
    return Record(0, 3, 0, usec, "-", message)


def uuid_line(n: int, uuid_tail: int = 0) -> str:
    return (f"NVRM: GPU at PCI:{n // 256:04x}:{n % 256:02x}:00: "
            f"GPU-00000000-0000-0000-0000-{uuid_tail:012x}")


def test_an_xid_74_keeps_the_link_it_names_apart() -> None:
    log = DriverLog()
    x74 = ("NVRM: Xid (PCI:0000:3b:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal "
           "error detected on link {}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")
    first = log.add(rec(x74.format(14)))
    assert first is not None and first.link == 14
    log.add(rec(x74.format(14)))
    log.add(rec(x74.format(6)))
    assert {(k[3], e.link, e.count) for k, e in log.xids.items()} == {(14, 14, 2), (6, 6, 1)}
    assert log.totals[("0000:3b:00", 74)].before_start == 3


def test_the_uuids_the_driver_printed_are_bounded_and_known_ones_still_change() -> None:
    log = DriverLog()
    for n in range(MAX_UUIDS + 10):
        log.add(rec(uuid_line(n, n)))
    assert len(log.uuids) == MAX_UUIDS
    assert "0001:0a:00" not in log.uuids  # the 267th bus: no room
    # a GPU already known that prints another UUID (a board swapped): kept up to date
    log.add(rec(uuid_line(3, 0xABC)))
    assert log.uuids["0000:03:00"] == "GPU-00000000-0000-0000-0000-000000000abc"
    assert len(log.uuids) == MAX_UUIDS


def test_the_parsed_messages_remembered_are_bounded() -> None:
    log = DriverLog()
    for n in range(3 * driver_log._CACHE + 7):
        log.add(rec(f"NVRM: Xid (PCI:0000:18:00): 13, pid={n + 1}, name=p, x"))
        assert len(log._cache) <= driver_log._CACHE
    assert log.totals[("0000:18:00", 13)].before_start == 3 * driver_log._CACHE + 7
