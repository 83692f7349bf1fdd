"""The series budget: at the defaults an idle 8x H100 node with 18 NVLink links
per GPU exports at most 100 series per GPU and 60 host series; the detail is one
flag away, and the flag changes what is exported, never what is diagnosed."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_exporter.cli import parse_settings
from gpu_exporter.poll.catalog import CATALOG, DETAIL
from gpu_exporter_mixin.series_budget import (
    HOST_BUDGET,
    PER_GPU_BUDGET,
    SeriesCount,
    count,
    exposition,
)
from tests.simnode import SimRun


@pytest.fixture(scope="module")
def texts() -> tuple[str, str]:
    return exposition(False), exposition(True)


@pytest.fixture(scope="module")
def counts(texts: tuple[str, str]) -> tuple[SeriesCount, SeriesCount]:
    return count(texts[0]), count(texts[1])


def families(text: str) -> set[str]:
    return {f.name for f in text_string_to_metric_families(text) if f.samples}


def test_default_series_per_gpu_and_host_within_budget(
        counts: tuple[SeriesCount, SeriesCount]) -> None:
    default, _ = counts
    assert default.gpus == 8
    assert default.per_gpu_total() <= PER_GPU_BUDGET, default.per_gpu
    assert default.node.get("host", 0) <= HOST_BUDGET, default.node
    # The node as a whole: 8 GPUs within budget plus the node-level series.
    assert default.total() <= 8 * PER_GPU_BUDGET + HOST_BUDGET + 60


def test_every_gpu_pays_the_same(texts: tuple[str, str]) -> None:
    per_gpu: dict[str, int] = {}
    for fam in text_string_to_metric_families(texts[0]):
        for s in fam.samples:
            if "gpu" in s.labels:
                per_gpu[s.labels["gpu"]] = per_gpu.get(s.labels["gpu"], 0) + 1
    assert len(per_gpu) == 8 and len(set(per_gpu.values())) == 1, per_gpu


def test_per_link_nvlink_series_only_with_detail(
        counts: tuple[SeriesCount, SeriesCount], texts: tuple[str, str]) -> None:
    default, detail = counts
    # 18 links x (state + 3 error counters + 2 byte counters) per GPU.
    assert detail.per_gpu["nvlink"] - default.per_gpu["nvlink"] == 18 * 6
    assert "gpu_nvlink_errors" not in families(texts[0])
    assert "gpu_nvlink_errors" in families(texts[1])


def test_the_all_links_totals_are_the_sums_of_the_links(texts: tuple[str, str]) -> None:
    links: dict[tuple[str, str], float] = {}
    totals: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(texts[1]):
        for s in fam.samples:
            if s.name == "gpu_nvlink_bytes_total":
                key = (s.labels["gpu"], s.labels["direction"])
                links[key] = links.get(key, 0.0) + s.value
            elif s.name == "gpu_nvlink_bytes_all_links_total":
                totals[(s.labels["gpu"], s.labels["direction"])] = s.value
    assert totals and totals == pytest.approx(links)


def test_detail_adds_exactly_the_detail_families(texts: tuple[str, str]) -> None:
    default, detail = families(texts[0]), families(texts[1])
    base = {f.removesuffix("_total") for f in DETAIL}
    assert not default & base, default & base
    added = detail - default
    # gpu_diagnosis_active: no row holds on the idle node, and the rows that
    # do not hold are exported (at 0) with detail only.
    assert added <= base | {"gpu_diagnosis_active"}
    assert "gpu_diagnosis_active" in added
    # Every detail family the idle H100 node can have is there with the flag
    # (SM clock samples: the H100 driver keeps none; workload pressure: the
    # idle node runs no workload; NVLink's FEC counts and bit-error rates are
    # NVLink 5's, which an H100 does not have).
    missing = base - added - {"gpu_sm_clock_samples_hertz", "gpu_workload_pressure_ratio",
                              "gpu_nvlink_fec_errors", "gpu_nvlink_bit_error_rate"}
    assert not missing, missing


def test_detail_families_are_documented_as_such() -> None:
    for m in CATALOG:
        if m.detail:
            # Not the state a diagnosis row or an alert would need: counters
            # or now-values that another default series already carries.
            assert m.collector in {"nvlink", "samples", "gpm", "host", "pcie", "device",
                                   "attribution"}, m.name


def test_diagnosis_is_the_same_with_and_without_detail() -> None:
    found = []
    for detail in (False, True):
        with SimRun("bursty-input", metrics={"detail": detail}) as run:
            snap = run.poll(40)
        found.append(sorted((lab["gpu"], lab["symptom"], lab["cause"])
                            for lab, v in snap.series("gpu_diagnosis_active") if v == 1))
    assert found[0] == found[1]
    assert ("2", "utilization_bursty", "input_starvation") in found[0]


def test_detail_is_one_flag_away() -> None:
    assert parse_settings([]).metrics.detail is False
    assert parse_settings(["--metrics.detail"]).metrics.detail is True
    assert parse_settings(["--metrics.detail", "--no-metrics.detail"]).metrics.detail is False
