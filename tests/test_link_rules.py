"""The NVLink link-integrity row: which links it names and at what rates, on
both sides of its thresholds, with counters that stop at their maximum, and
on the simulator (its built-in scenario is checked by tests/test_diagnosis.py)."""

from __future__ import annotations

import pytest

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.registry import Verdict
from gpu_exporter.thresholds import DiagnosisConfig
from tests.rule_signals import CFG, busy_gpu, signals, verdict

# The engine's increase over a 30 s window: 100 CRC errors a second is 3000.
WINDOW = CFG.window
CRC_LIMIT = CFG.nvlink_crc_errors_per_s * WINDOW


def _links(**counts: float) -> dict[tuple[int, str], float]:
    """Counters of an 18-link GPU, all at 7; ``crc_4=...`` sets link 4's."""
    out = {(link, kind): 7.0 for link in range(18) for kind in ("crc", "replay", "recovery")}
    for name, value in counts.items():
        kind, link = name.split("_")
        out[int(link), kind] = value
    return out


def _judge(increases: dict[str, float], cfg: DiagnosisConfig = CFG,
           **counts: float) -> Verdict:
    return verdict(t.NVLINK_ERRORS, signals(nvlink_errors=_links(**counts)), cfg, increases)


def test_crc_errors_at_the_rate_fail_the_link_and_name_it() -> None:
    got = _judge({"nvlink_4_crc": CRC_LIMIT, "nvlink_11_crc": CRC_LIMIT * 3})
    assert got.holds is True
    assert got.evidence["nvlink_failing_links"] == "4, 11"
    assert got.evidence["nvlink_link_4_errors"] == \
        "crc 100/s, replay 0, recovery 0 in the window"
    assert got.evidence["nvlink_link_11_errors"] == \
        "crc 300/s, replay 0, recovery 0 in the window"
    assert "nvlink_link_0_errors" not in got.evidence  # a clean link is not named


def test_crc_errors_just_under_the_rate_are_the_link_coping() -> None:
    got = _judge({"nvlink_4_crc": CRC_LIMIT - 1})
    assert got.holds is False
    assert got.evidence == {"nvlink_failing_links": "none"}


@pytest.mark.parametrize("kind", ["replay", "recovery"])
def test_one_replay_or_recovery_in_the_window_fails_the_link(kind: str) -> None:
    got = _judge({f"nvlink_2_{kind}": 1.0})
    assert got.holds is True
    assert got.evidence["nvlink_failing_links"] == "2"
    assert kind + " 1" in str(got.evidence["nvlink_link_2_errors"])


def test_the_thresholds_are_the_configured_ones() -> None:
    cfg = CFG.model_copy(update={"nvlink_replays_per_window": 5.0,
                              "nvlink_crc_errors_per_s": 10.0})
    assert _judge({"nvlink_2_replay": 4.0}, cfg).holds is False
    assert _judge({"nvlink_2_replay": 3.0, "nvlink_2_recovery": 2.0}, cfg).holds is True
    assert _judge({"nvlink_2_crc": 10.0 * WINDOW}, cfg).holds is True


def test_zero_thresholds_never_fail_an_error_free_link() -> None:
    cfg = CFG.model_copy(update={"nvlink_replays_per_window": 0.0,
                              "nvlink_crc_errors_per_s": 0.0})
    assert _judge({}, cfg).holds is False
    assert _judge({"nvlink_0_crc": 1.0}, cfg).holds is True


@pytest.mark.parametrize("top", [float(2**32 - 1), float(2**64 - 1)])
def test_a_counter_stopped_at_its_maximum_is_named_not_read(top: float) -> None:
    # Were the pinned counter read, its huge "increase" would fail the link.
    got = _judge({"nvlink_5_crc": 1e30}, crc_5=top)
    assert got.holds is False
    assert got.evidence["nvlink_counters_at_maximum"] == "5 (crc)"


def test_no_nvlink_or_no_counter_is_not_judged() -> None:
    assert verdict(t.NVLINK_ERRORS, signals(nvlink_errors=None)).holds is None
    assert verdict(t.NVLINK_ERRORS, signals(nvlink_errors={})).holds is None
    pinned = {(0, "crc"): float(2**64 - 1)}
    assert verdict(t.NVLINK_ERRORS, signals(nvlink_errors=pinned)).holds is None


def test_the_row_waits_the_boot_grace_and_is_the_boards() -> None:
    assert t.NVLINK_ERRORS.boot_grace
    assert not t.NVLINK_ERRORS.per_instance
    assert "nvidia-smi nvlink -e -i GPU" in t.NVLINK_ERRORS.confirm


# --- power smoothing's floor is not work ----------------------------------------------
# A GPU whose limit was lowered to 450 W, clocks below max and the driver's
# power-cap reason on: capped, were its draw work.
_CAPPED = {"power_limit_watts": 450.0, "throttle_reasons": frozenset({"sw_power_cap"}),
           "clocks_hz": {"sm": 1.6e9}, "utilization": 0.02}


def test_draw_held_at_the_smoothing_floor_is_not_a_binding_cap() -> None:
    held = busy_gpu(**_CAPPED, power_watts=430.0, power_smoothing=True,
                    power_floor_watts=430.0)
    got = verdict(t.POWER_CAP, signals(held))
    assert got.holds is False
    assert got.evidence["power_floor_watts"] == 430.0


def test_draw_above_the_floor_is_work_again() -> None:
    working = busy_gpu(**_CAPPED, power_watts=440.0, power_smoothing=True,
                       power_floor_watts=430.0)
    assert verdict(t.POWER_CAP, signals(working)).holds is True


def test_a_floor_with_smoothing_off_holds_nothing() -> None:
    off = busy_gpu(**_CAPPED, power_watts=430.0, power_smoothing=False,
                   power_floor_watts=430.0)
    got = verdict(t.POWER_CAP, signals(off))
    assert got.holds is True
    assert "power_floor_watts" not in got.evidence
