"""The snapshot builder: both ways of adding a series give the same sample, and
a wrong label set is refused rather than exported with shifted labels."""

from __future__ import annotations

import pytest

from gpu_exporter.catalogs.deep import NVLINK_ERRORS_TOTAL, NVLINK_LINK_UP
from gpu_exporter.poll.readings import GpuReading
from gpu_exporter.poll.snapshot import Slot, SnapshotBuilder


def test_add_values_matches_add_with_keywords() -> None:
    by_name, by_tuple = SnapshotBuilder(0.0), SnapshotBuilder(0.0)
    by_name.add(NVLINK_ERRORS_TOTAL, 3, gpu=1, uuid="GPU-a", link=4, type="crc")  # type: ignore[arg-type]
    by_tuple.add_values(NVLINK_ERRORS_TOTAL, ("1", "GPU-a", "4", "crc"), 3)
    assert by_name.build().samples == by_tuple.build().samples
    assert by_tuple.build().get("gpu_nvlink_errors_total", link="4", type="crc") == 3.0


def test_add_values_refuses_a_label_set_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="gpu_nvlink_link_up"):
        SnapshotBuilder(0.0).add_values(NVLINK_LINK_UP, ("0", "GPU-a"), 1)


def test_a_nan_value_is_not_exported() -> None:
    out = SnapshotBuilder(0.0)
    out.add_values(NVLINK_LINK_UP, ("0", "GPU-a", "1"), float("nan"))
    out.add(NVLINK_LINK_UP, float("nan"), gpu="0", uuid="GPU-a", link="2")
    assert "gpu_nvlink_link_up" not in out.build().samples


def test_readings_and_derived_results_travel_with_the_snapshot() -> None:
    findings: Slot[tuple[str, ...]] = Slot("findings")
    other: Slot[int] = Slot("other")
    b = SnapshotBuilder(1.0)
    assert b.readings.gpus is None  # no reader ran yet: "nobody looked"
    b.readings.gpus = {0: GpuReading(0, "GPU-0", up=True)}
    b.publish(findings, ("a",))
    assert b.derived(findings) == ("a",)
    snap = b.build()
    assert snap.readings.gpus is not None and snap.readings.gpus[0].uuid == "GPU-0"
    assert snap.derived(findings) == ("a",)
    assert snap.derived(other) is None  # a slot nobody published into
    # Two slots with the same name are two places: a slot is its object.
    assert snap.derived(Slot("findings")) is None


def _link_up(snap_builder: SnapshotBuilder, link: str, value: float = 1) -> None:
    snap_builder.add_values(NVLINK_LINK_UP, ("0", "GPU-a", link), value)


def test_a_failed_block_leaves_only_what_was_added_before_it() -> None:
    out = SnapshotBuilder(0.0)
    _link_up(out, "0")
    with pytest.raises(OSError, match="gone"), out.all_or_nothing():
        _link_up(out, "1")  # a family that had series before
        out.add_values(NVLINK_ERRORS_TOTAL, ("0", "GPU-a", "1", "crc"), 5)  # a new one
        raise OSError("gone")
    _link_up(out, "2")  # the builder goes on after it
    snap = out.build()
    assert snap.series("gpu_nvlink_link_up") == [
        ({"gpu": "0", "uuid": "GPU-a", "link": "0"}, 1.0),
        ({"gpu": "0", "uuid": "GPU-a", "link": "2"}, 1.0)]
    assert "gpu_nvlink_errors_total" not in snap.samples  # no family left empty


def test_a_block_that_ends_normally_keeps_its_series() -> None:
    out = SnapshotBuilder(0.0)
    with out.all_or_nothing():
        _link_up(out, "1", 0)
    assert out.build().get("gpu_nvlink_link_up", link="1") == 0.0


def test_a_built_snapshot_never_changes() -> None:
    out = SnapshotBuilder(0.0)
    _link_up(out, "0")
    snap = out.build()
    with pytest.raises(RuntimeError, match="gpu_nvlink_link_up: series added after"):
        _link_up(out, "1")
    with pytest.raises(RuntimeError, match="was built"):
        out.discard_families([NVLINK_LINK_UP])
    assert out.build() is snap
    assert [s.labels for s in snap.samples["gpu_nvlink_link_up"]] == [("0", "GPU-a", "0")]


def test_samples_read_back_what_was_added_in_order() -> None:
    out = SnapshotBuilder(0.0)
    for link, value in (("3", 0), ("1", True), ("2", 2.5)):
        _link_up(out, link, value)
    samples = out.build().samples
    assert list(samples) == ["gpu_nvlink_link_up"] and len(samples) == 1
    assert [(s.labels[2], s.value) for s in samples["gpu_nvlink_link_up"]] == [
        ("3", 0.0), ("1", 1.0), ("2", 2.5)]
    assert samples["gpu_nvlink_link_up"] is samples["gpu_nvlink_link_up"]  # formed once
    assert samples.get("gpu_up") is None
