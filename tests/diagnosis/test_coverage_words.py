"""The words for a value NVML did not give: a driver older than the branch
that brought the call is told apart from a GPU that answers it not supported
under a driver that has it, since only the first is fixed by a driver update."""

from __future__ import annotations

import pytest

from gpu_exporter.diagnosis.coverage_words import not_offered


@pytest.mark.parametrize(("version", "said"), [
    ("560.35.03", "recovery action (driver R560 is older than R565, the first to have it)"),
    ("565.57.01", "recovery action (driver R565 has it; this GPU answers it not supported)"),
    ("580.65.06", "recovery action (driver R580 has it; this GPU answers it not supported)"),
    ("", "recovery action (drivers R565 and newer)"),
    ("garbage\x1b[31m", "recovery action (drivers R565 and newer)"),
])
def test_the_recovery_action_says_which_driver_fact_it_is(version: str, said: str) -> None:
    assert not_offered("recovery_action", version) == said


def test_a_condition_of_the_board_is_kept_beside_the_driver() -> None:
    assert not_offered("fabric_state", "535.54.03") == (
        "NVSwitch fabric state (Hopper and newer in an NVSwitch system; driver R535 is older "
        "than R550, the first to have it)")
    assert not_offered("fabric_state", "580.65.06") == (
        "NVSwitch fabric state (Hopper and newer in an NVSwitch system)")


def test_gpm_on_a_board_before_hopper_is_a_fact_of_the_board() -> None:
    """Under a driver that has GPM, a board without it is told by the board's
    own words: the driver is not the reason."""
    assert not_offered("gpm", "550.163.01") == "GPM metrics (Hopper and newer)"
    assert not_offered("gpm", "470.256.02") == (
        "GPM metrics (Hopper and newer; driver R470 is older than R520, the first to have it)")


def test_a_value_every_driver_has_names_no_driver() -> None:
    assert not_offered("fan_speeds", "470.42.01") == "fan speed"
    assert not_offered("power_limit_watts", "") == "power limit"
