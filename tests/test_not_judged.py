"""Rows a board or driver cannot judge say so (gpu_diagnosis_not_judged), so a
0 in gpu_diagnosis_active is never read as healthy where nothing was judged."""

from __future__ import annotations

import re

from tests.simnode import DetailRun
from tests.test_driver_branches import on_branch


def not_judged(text: str, gpu: str = "0") -> set[str]:
    return {f"{s}/{c}" for c, s in re.findall(
        r'^gpu_diagnosis_not_judged\{cause="(\w+)",gpu="' + gpu + r'",symptom="(\w+)",'
        r'uuid="[^"]+"\} 1\.0$', text, re.M)}


def scrape(scenario: str, branch: str | None = None, **node: str) -> str:
    with DetailRun(on_branch(scenario, branch, **node)) as run:
        run.poll(40)
        return run.scrape()


# The row that judges a GPU's allocation needs the kubelet's answer: a node
# without one has nothing there to judge. (The rows of a starved GPU judge its
# busy GPUs on the GPU's own figures: a busy GPU is not starved, whatever its
# workload's cgroup would say.) An H100 SXM has no fan for NVML to read.
OWNER_ROWS = {"gpu_allocated_unused/no_process"}
FANLESS = {"cooling_degraded/fan_stopped"}


def test_an_h100_on_the_newest_driver_judges_every_row_it_has_inputs_for() -> None:
    assert not_judged(scrape("healthy")) == OWNER_ROWS | FANLESS
    assert not_judged(scrape("two-tenant-node")) == FANLESS


def test_no_gpm_before_hopper_leaves_utilization_inflated_unjudged() -> None:
    text = scrape("healthy", profile="a100-pcie-40gb")
    rows = not_judged(text)
    assert "utilization_inflated/small_kernels" in rows
    # A100 PCIe boards sit in no NVSwitch fabric: the fabric row is not judged either.
    assert "fabric_degraded/nvswitch_fabric" in rows
    # ... and still reads 0 in gpu_diagnosis_active, which alone would look healthy.
    assert re.search(r'^gpu_diagnosis_active\{cause="small_kernels",gpu="0",'
                     r'symptom="utilization_inflated",[^}]*\} 0\.0$', text, re.M)


def test_an_old_driver_cannot_give_the_drivers_verdict() -> None:
    rows = not_judged(scrape("healthy", "R535"))
    assert {"recovery_action/gpu_reset", "recovery_action/node_reboot",
            "recovery_action/drain_p2p", "recovery_action/drain_and_reset",
            "fabric_degraded/nvswitch_fabric"} <= rows
    assert "throttled_under_load/power_cap" not in rows  # throttle reasons still read


def test_a_row_the_gpu_judges_is_never_marked() -> None:
    text = scrape("throttled-under-load-power-cap", "R470")
    for gpu in "01234567":
        assert "throttled_under_load/power_cap" not in not_judged(text, gpu)
