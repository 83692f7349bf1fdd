"""gpu_diagnosis_not_judged marks the rows the exporter could not judge now (a
reader switched off or failing, a GPU settling or lost), so a 0 in
gpu_diagnosis_active is never read as healthy where nothing was judged. A row
the board or driver does not offer, or whose subject is absent, is a fact of
the node: not marked, as ``diagnose`` does not count it against the verdict."""

from __future__ import annotations

import re
from typing import Any

from tests.nvml.test_driver_branches import on_branch
from tests.simnode import DetailRun


def not_judged(text: str, gpu: str = "0") -> set[str]:
    return {f"{s}/{c}" for c, s in re.findall(
        r'^gpu_diagnosis_not_judged\{cause="(\w+)",gpu="' + gpu + r'",symptom="(\w+)",'
        r'uuid="[^"]+"\} 1\.0$', text, re.M)}


def scrape(scenario: str, branch: str | None = None, settings: dict[str, Any] | None = None,
           **node: str) -> str:
    with DetailRun(on_branch(scenario, branch, **node), **(settings or {})) as run:
        run.poll(40)
        return run.scrape()


# No kubelet (nothing allocates the GPU) and an H100 SXM's missing fans are
# subjects absent, not gaps.
def test_a_healthy_h100_marks_nothing() -> None:
    assert not_judged(scrape("healthy")) == set()
    assert not_judged(scrape("two-tenant-node")) == set()


def test_no_gpm_before_hopper_is_a_fact_not_a_mark() -> None:
    text = scrape("healthy", profile="a100-pcie-40gb")
    assert not_judged(text) == set()
    # gpu_diagnosis_active still reads 0 there (with --metrics.detail):
    # /diagnosis and diagnose say it is not available on the board.
    assert re.search(r'^gpu_diagnosis_active\{cause="small_kernels",gpu="0",'
                     r'symptom="utilization_inflated",[^}]*\} 0\.0$', text, re.M)


def test_an_old_drivers_missing_verdict_is_a_fact_not_a_mark() -> None:
    assert not_judged(scrape("healthy", "R535")) == set()


def test_a_reader_switched_off_marks_exactly_its_rows() -> None:
    text = scrape("healthy", settings={"collectors": {"gpm": False}})
    for gpu in "01234567":
        assert not_judged(text, gpu) == {"utilization_inflated/small_kernels",
                                         "memory_bound/dram_bandwidth"}


def test_a_row_the_gpu_judges_is_never_marked() -> None:
    text = scrape("throttled-under-load-power-cap", "R470")
    for gpu in "01234567":
        assert "throttled_under_load/power_cap" not in not_judged(text, gpu)
