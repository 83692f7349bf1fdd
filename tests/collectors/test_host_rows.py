"""A host value is declared once: a catalog entry and one row of
collectors/host_rows.py, from which both its series on /metrics and the
figure the diagnosis reads (readings.HostSignals) follow. These tests hold
every row, present and future, to that: a new row is covered by them without
a line here."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from gpu_exporter.catalogs import host as catalog
from gpu_exporter.collectors import host as host_collector
from gpu_exporter.collectors import host_rows
from gpu_exporter.collectors.host import HostCollector
from gpu_exporter.collectors.host_rows import NOT_ROWS, ROWS, SUMS, HostRow
from gpu_exporter.facts.catalog_types import Bounds
from gpu_exporter.facts.catalog_types import metric_spec as _m
from gpu_exporter.poll.catalog import DETAIL, Metric
from gpu_exporter.poll.readings import HostSignals
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.simulator.clock import VirtualClock
from gpu_exporter.web.render import LabelCache, render

FIXTURES = Path(__file__).parents[1] / "fixtures" / "proc"
PAGE = 4096
SIGNALS = {f.name for f in dataclasses.fields(HostSignals)}


def _key(row: HostRow) -> tuple[str, tuple[str, ...]]:
    return row.metric.name, row.series


def test_every_signal_the_diagnosis_reads_comes_from_a_row_or_a_named_exception() -> None:
    from_rows = {row.read_as for row in ROWS} & SIGNALS
    summed = set(SUMS)
    assert from_rows | summed | set(NOT_ROWS) == SIGNALS
    # Each once: a signal a row fills is no exception, and every exception
    # names a signal that exists and says why it is not a row.
    assert not from_rows & set(NOT_ROWS) and not from_rows & summed
    assert all(reason.strip() for reason in NOT_ROWS.values())
    for parts in SUMS.values():
        assert set(parts) <= {row.read_as for row in ROWS}


def test_each_row_is_one_series_of_a_host_metric_read_from_a_file_its_help_names() -> None:
    assert len({_key(row) for row in ROWS}) == len(ROWS)
    assert len({row.read_as for row in ROWS if row.read_as}) == len(
        [row for row in ROWS if row.read_as])
    for row in ROWS:
        assert row.metric in catalog.METRICS and row.metric.collector == "host", row
        assert len(row.series) == len(row.metric.labels), row
        # The file, or for one file per resource its directory, as the
        # metric's help tells the user where the value comes from.
        assert row.file in row.metric.help or row.file.rsplit("/", 1)[0] in row.metric.help, row
        assert row.file in host_rows.readers(), row


@pytest.mark.parametrize("row", [row for row in ROWS if row.key],
                         ids=lambda row: f"{row.file}:{row.key}")
def test_each_rows_key_is_a_line_of_the_kernels_file(row: HostRow) -> None:
    """The key each row names begins a line of the file as a kernel writes
    it (the fixture is a copy of a real node's /proc)."""
    text = (FIXTURES / "normal" / row.file.removeprefix("/proc/")).read_text()
    first = row.key.split(" ")[0]
    assert re.search(rf"^{re.escape(first)}\b", text, re.MULTILINE), row


class Host:
    """The collector on a copy of the fixture /proc, polled twice a second apart."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "proc"
        shutil.copytree(FIXTURES / "normal", self.root)
        self.clock = VirtualClock(1000.0)
        self.collector = HostCollector(self.root, self.clock, page_size=PAGE)

    def poll(self, drop: frozenset[str] = frozenset()) -> Snapshot:
        out = SnapshotBuilder(0.0, drop=drop)
        self.collector.collect(out)
        return out.build()

    def read(self, row: HostRow) -> float:
        """The row's value as its file's reader reads the tree now."""
        value = row.get(host_rows.readers(PAGE)[row.file](str(self.root)))
        assert value is not None, row
        return float(value)

    def later(self) -> None:
        shutil.copytree(FIXTURES / "normal-1s", self.root, dirs_exist_ok=True)
        self.clock.advance(1.0)


def _line(row: HostRow) -> str:
    """The series as /metrics writes it (labels in the order of their names)."""
    labels = ",".join(f'{name}="{value}"' for name, value in sorted(zip(
        row.metric.labels, row.series, strict=True)))
    return f"{row.metric.name}{{{labels}}}" if labels else row.metric.name


def test_each_rows_value_reaches_metrics_and_the_diagnosis(tmp_path: Path) -> None:
    host = Host(tmp_path)
    first = {row: host.read(row) for row in ROWS}
    host.poll()
    host.later()
    snap = host.poll()
    text = render(snap, False, LabelCache()).decode()
    signals = snap.readings.host_signals
    reading = snap.readings.host
    assert signals is not None and reading is not None
    for row in ROWS:
        now = host.read(row)
        assert snap.get(row.metric.name, **dict(zip(row.metric.labels, row.series,
                                                    strict=True))) == pytest.approx(now), row
        assert re.search(rf"^{re.escape(_line(row))} ", text, re.MULTILINE), row
        if not row.read_as:
            continue
        # A gauge as read; a counter as its rate over the second between the polls.
        kept = now if row.metric.kind == "gauge" else now - first[row]
        assert reading.values[row.read_as] == pytest.approx(kept), row
        if row.read_as in SIGNALS:
            assert getattr(signals, row.read_as) == pytest.approx(kept), row
    for name, parts in SUMS.items():
        assert getattr(signals, name) == pytest.approx(sum(reading.values[p] for p in parts))


def test_a_value_only_a_detail_series_shows_is_not_read_without_detail(tmp_path: Path) -> None:
    """Without --metrics.detail a file no exported series and no diagnosis
    figure needs is not read: a broken one counts no error."""
    host = Host(tmp_path)
    (host.root / "loadavg").write_text("garbage\n")
    (host.root / "net" / "dev").write_text("garbage\n")
    snap = host.poll(drop=DETAIL)
    assert host.collector.errors() == 0
    assert snap.readings.host_signals is not None
    assert snap.readings.host_signals.memory_total_bytes == host.read(
        next(row for row in ROWS if row.read_as == "memory_total_bytes"))
    reading = snap.readings.host
    assert reading is not None and "load_1m" not in reading.values
    host.poll()
    assert host.collector.errors() == 2  # read, and refused, where the series are exported


def test_adding_a_host_value_is_one_catalog_entry_and_one_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A value no series shows today, SwapTotal, declared as a new metric and
    one row, is exported and kept for the diagnosis with no other line."""
    swap_total = _m("gpu_host_swap_total_bytes", "gauge",
                    "Swap space there is (SwapTotal in /proc/meminfo).", (), "host",
                    bounds=Bounds(0.0, 2.0**50))
    assert isinstance(swap_total, Metric)
    row = HostRow(swap_total, host_rows.MEMINFO, "SwapTotal", "swap_total_bytes",
                  read_as="swap_total_bytes")
    monkeypatch.setattr(host_collector, "ROWS", (*ROWS, row))
    host = Host(tmp_path)
    snap = host.poll()
    # The fixture's SwapTotal; the test's metric is in no catalog, so read raw.
    assert [s.value for s in snap.samples["gpu_host_swap_total_bytes"]] == [8388604 * 1024]
    assert snap.readings.host is not None
    assert snap.readings.host.values["swap_total_bytes"] == 8388604 * 1024
