"""A GPU value the diagnosis reads is declared once, on its row
(``collectors/device_rows.py``): the reader copies into the GPU's reading
exactly what it exported for each row, fills no field of the reading that
is neither a row's nor named below, and reports as not offered or refused
(``READ_AS``) the rows' readings and the named others, from their sources.

Checked on simulated boards with different capabilities, with
--metrics.detail (every row read) and without it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from gpu_exporter.collectors.device import DeviceCollector
from gpu_exporter.collectors.device_rows import READ_AS, READ_ELSEWHERE, ROWS, ValueRow
from gpu_exporter.poll.readings import GpuReading
from gpu_exporter.poll.snapshot import Snapshot
from tests.onegpu import OneGpu

# Who the GPU is: from the session, whatever NVML answers of its values.
IDENTITY = {"index", "uuid", "up", "name", "pci_bus_id", "driver_version", "vbios_version"}
# The fields the reader's own functions fill: values made of several answers
# or of a mask (the throttle reasons, ECC, remapped rows, the fans, the
# driver's verdicts, the board extras), and what NVML does not offer.
BY_FUNCTION = {"throttle_reasons", "ecc_enabled", "ecc_uncorrected_volatile", "remap_pending",
               "remap_failed", "fan_speeds", "fan_count", "recovery_action", "fabric_state",
               "fabric_status", "fabric_health", "unavailable", "refused", "repair_pending",
               "unrepairable_memory", "power_smoothing", "power_floor_watts", "c2c_errors",
               "c2c_link", "board_lacks"}
FIELDS = {f.name: f for f in dataclasses.fields(GpuReading)}
BOARDS = ["h100-sxm5-80gb", "a100-pcie-40gb", "rtx-4090"]


def _field(row: ValueRow) -> tuple[str, str | None]:
    assert row.field is not None
    return row.field


def _row_fields() -> set[str]:
    return {_field(row)[0] for row in ROWS if row.reading is not None}


def test_each_reading_is_one_rows_and_a_field_of_the_reading() -> None:
    readings = [row.reading for row in ROWS if row.reading is not None]
    assert len(readings) == len(set(readings)), "two rows fill the same reading"
    for row in ROWS:
        if row.reading is None:
            continue
        name, key = _field(row)
        assert name in FIELDS, f"{row.reading}: GpuReading has no field {name}"
        keyed = "dict" in str(FIELDS[name].type)
        assert keyed == (key is not None), f"{row.reading}: a key where the field has none"
        assert row.reading == (name if key is None else f"{name}[{key}]")
    # A row's reading is no function's, and the functions' are fields too.
    assert not _row_fields() & BY_FUNCTION
    assert set(READ_ELSEWHERE) <= BY_FUNCTION
    assert _row_fields() | BY_FUNCTION | IDENTITY == set(FIELDS), \
        "a field of GpuReading that no row fills and no function is named for"


def test_the_names_the_coverage_reads_are_the_rows_readings_and_the_named_others() -> None:
    from_rows = {row.reading: (row.source,) for row in ROWS if row.reading is not None}
    assert {**from_rows, **READ_ELSEWHERE} == READ_AS
    assert not set(from_rows) & set(READ_ELSEWHERE)
    sources = {row.source for row in ROWS}
    for name, read_from in READ_AS.items():
        assert read_from, name
        if name in from_rows:
            assert set(read_from) <= sources, name
    # What the diagnosis names as not offered on a board without a fabric or
    # persistence call is found under these names (coverage.py).
    assert {"clocks_application_hz[sm]", "persistence_mode", "fabric_state",
            "memory_used_bytes", "power_watts"} <= set(READ_AS)




def _exported(snap: Snapshot, row: ValueRow) -> float | None:
    for labels, value in snap.series(row.metric.name):
        if tuple(labels.values())[2:] == row.series:
            return value
    return None


@pytest.fixture(params=[(b, d) for b in BOARDS for d in (True, False)],
                ids=[f"{b}-{'detail' if d else 'default'}" for b in BOARDS for d in (True, False)])
def reader(request: pytest.FixtureRequest) -> Iterator[tuple[OneGpu, DeviceCollector, bool]]:
    profile, detail = request.param
    request.node.profile = profile
    with OneGpu(profile=profile, utilization=0.6, power_w=300.0) as one:
        collector = DeviceCollector(one.session, detail=detail)
        try:
            yield one, collector, detail
        finally:
            collector.close()


def test_each_rows_reading_is_what_was_exported_for_it(
        reader: tuple[OneGpu, DeviceCollector, bool], request: pytest.FixtureRequest) -> None:
    one, collector, detail = reader
    for _ in range(3):  # the first poll reads everything, the next ones hold the slow reads
        snap, reading = one.read_gpu(collector)
        copied = 0
        for row in ROWS:
            if row.reading is None:
                continue
            name, key = _field(row)
            held = getattr(reading, name)
            got = held.get(key) if key is not None else held
            value = _exported(snap, row) if detail or not row.detail else None
            if value is None:
                # Not exported (not read without --metrics.detail, or the
                # board lacks it): not in the reading either.
                assert got is None, row.reading
                continue
            if row.convert is None:
                assert got == value, row.reading
            else:  # the field's own type (an int link width, a bool mode)
                want = row.convert(value)
                assert got == want and type(got) is type(want), row.reading
            copied += 1
        # Every board here answers most rows (not a pass that exported nothing).
        assert copied >= 20
        if request.node.profile == "h100-sxm5-80gb" and detail:
            assert copied == len([r for r in ROWS if r.reading is not None])


def test_the_reader_fills_only_rows_readings_and_the_named_fields(
        reader: tuple[OneGpu, DeviceCollector, bool], request: pytest.FixtureRequest) -> None:
    one, collector, _ = reader
    _, reading = one.read_gpu(collector)
    blank = GpuReading(reading.index, reading.uuid, up=False)
    filled = {name for name in FIELDS if getattr(reading, name) != getattr(blank, name)}
    assert filled <= _row_fields() | BY_FUNCTION | IDENTITY
    # On a board that answers every row, the rows' readings are among them:
    # the copy is not left to the functions.
    if request.node.profile == "h100-sxm5-80gb":
        assert _row_fields() <= filled
