"""The NVLink and C2C link-integrity rows: which links they name and at what
rates, on both sides of their thresholds, with counters that stop at their
maximum, and on the simulator (their built-in scenarios are checked by
tests/diagnosis/test_diagnosis.py)."""

from __future__ import annotations

import pynvml
import pytest

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.coverage import answer
from gpu_exporter.diagnosis.registry import Verdict
from gpu_exporter.diagnosis.row import Row
from gpu_exporter.nvml import constants as k
from gpu_exporter.poll.readings import GpuReading
from gpu_exporter.settings.thresholds import DiagnosisConfig
from gpu_exporter.simulator.model import Scenario
from tests.onegpu import OneGpu
from tests.rule_signals import CFG, POD, busy_gpu, signals, verdict
from tests.simnode import SimRun

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


# --- NVLink 5: FEC's counts -------------------------------------------------------------
def _fec_links(**counts: float) -> dict[tuple[int, str], float]:
    """An 18-link Blackwell GPU from R565 on: FEC's counts only (NVML answers
    the CRC, replay and recovery fields NOT_SUPPORTED there), all at 7."""
    out = {(link, kind): 7.0 for link in range(18) for kind in ("effective", "symbol")}
    for name, value in counts.items():
        kind, link = name.split("_")
        out[int(link), kind] = value
    return out


def _judge_fec(increases: dict[str, float], cfg: DiagnosisConfig = CFG,
               rates: dict[tuple[int, str], float] | None = None) -> Verdict:
    sig = signals(nvlink_errors=_fec_links(), nvlink_bit_error_rates=rates or {})
    return verdict(t.NVLINK_ERRORS, sig, cfg, increases)


def test_effective_errors_climbing_fail_the_link_with_its_ber() -> None:
    limit = CFG.nvlink_replays_per_window
    got = _judge_fec({"nvlink_9_effective": limit, "nvlink_9_symbol": 5e4},
                     rates={(9, "effective"): 2e-9, (9, "symbol"): 3e-7})
    assert got.holds is True
    assert got.evidence["nvlink_failing_links"] == "9"
    assert got.evidence["nvlink_link_9_errors"] == (
        f"effective (uncorrected) {limit:g}, symbol (corrected) 50000, effective BER 2e-09 "
        "in the window")
    # The threshold is the replays' (an effective error is a packet sent again).
    cfg = CFG.model_copy(update={"nvlink_replays_per_window": 5.0})
    assert _judge_fec({"nvlink_9_effective": 4.0}, cfg).holds is False
    assert _judge_fec({"nvlink_9_effective": 5.0}, cfg).holds is True


def test_symbol_errors_fec_corrected_never_fail_a_link_however_many() -> None:
    # FEC corrects symbol errors in place, no packet resent: evidence, not a fault.
    got = _judge_fec({"nvlink_3_symbol": 1e9})
    assert got.holds is False
    assert got.evidence["nvlink_failing_links"] == "none"
    assert got.evidence["nvlink_link_3_corrected_by_fec"] == (
        "1e+09 symbol errors in the window, all corrected")
    zero = CFG.model_copy(update={"nvlink_replays_per_window": 0.0,
                                  "nvlink_crc_errors_per_s": 0.0})
    assert _judge_fec({"nvlink_3_symbol": 1e9}, zero).holds is False
    assert _judge_fec({"nvlink_3_effective": 1.0}, zero).holds is True


def test_a_pinned_effective_counter_is_named_not_read() -> None:
    top = float(2**64 - 1)
    sig = signals(nvlink_errors={**_fec_links(), (4, "effective"): top})
    got = verdict(t.NVLINK_ERRORS, sig, CFG, {"nvlink_4_effective": 1e30})
    assert got.holds is False
    assert got.evidence["nvlink_counters_at_maximum"] == "4 (effective)"


def test_the_nvlink_row_reads_the_fec_families() -> None:
    assert {"gpu_nvlink_fec_errors_total", "gpu_nvlink_fec_errors_all_links_total",
            "gpu_nvlink_bit_error_rate"} <= {m.name for m in t.NVLINK_ERRORS.reads}


# --- the C2C link to the Grace CPU ---------------------------------------------------
# A Grace board's three counters, as the board reader hands them on.
_C2C_SOUND = {"intr": 3.0, "replay": 12.0, "replay_b2b": 0.0}


def _c2c(increases: dict[str, float], cfg: DiagnosisConfig = CFG,
         **counters: float) -> Verdict:
    gpu = busy_gpu(c2c_errors={**_C2C_SOUND, **counters})
    return verdict(t.C2C_ERRORS, signals(gpu), cfg, increases)


@pytest.mark.parametrize("kind", ["intr", "replay", "replay_b2b"])
def test_one_c2c_error_of_any_kind_in_the_window_fails_the_link(kind: str) -> None:
    got = _c2c({f"c2c_{kind}": 1.0})
    assert got.holds is True
    assert got.evidence[f"c2c_{kind}_errors_in_window"] == 1.0
    # Every counter judged is in the evidence, the quiet ones at 0.
    assert sum(float(v) for k, v in got.evidence.items()  # type: ignore[arg-type]
               if k.endswith("_in_window")) == 1.0


def test_counters_that_stand_still_are_a_sound_c2c_link() -> None:
    # Counts from before the window (12 replays since the driver loaded) are history.
    got = _c2c({})
    assert got.holds is False
    assert got.evidence == {"c2c_intr_errors_in_window": 0.0,
                            "c2c_replay_errors_in_window": 0.0,
                            "c2c_replay_b2b_errors_in_window": 0.0}


def test_the_c2c_threshold_is_the_configured_one_summed_over_kinds() -> None:
    cfg = CFG.model_copy(update={"c2c_errors_per_window": 5.0})
    assert _c2c({"c2c_replay": 4.0}, cfg).holds is False
    assert _c2c({"c2c_replay": 3.0, "c2c_intr": 1.0, "c2c_replay_b2b": 1.0}, cfg).holds is True
    # A zero threshold still never fails a link that reported nothing.
    zero = CFG.model_copy(update={"c2c_errors_per_window": 0.0})
    assert _c2c({}, zero).holds is False


@pytest.mark.parametrize("top", [float(2**32 - 1), float(2**64 - 1)])
def test_a_c2c_counter_stopped_at_its_maximum_is_named_not_read(top: float) -> None:
    # Were the pinned counter read, its huge "increase" would fail the link.
    got = _c2c({"c2c_replay": 1e30}, replay=top)
    assert got.holds is False
    assert got.evidence["c2c_counters_at_maximum"] == "replay"
    assert "c2c_replay_errors_in_window" not in got.evidence
    everything_pinned = busy_gpu(c2c_errors=dict.fromkeys(_C2C_SOUND, top))
    assert verdict(t.C2C_ERRORS, signals(everything_pinned)).holds is None


def test_no_c2c_link_or_an_older_driver_is_not_judged() -> None:
    assert verdict(t.C2C_ERRORS, signals(busy_gpu(c2c_errors=None))).holds is None
    assert verdict(t.C2C_ERRORS, signals(busy_gpu(c2c_errors={}))).holds is None


def test_the_c2c_row_waits_the_boot_grace_and_is_the_boards() -> None:
    assert t.C2C_ERRORS.boot_grace
    assert not t.C2C_ERRORS.per_instance
    assert [m.name for m in t.C2C_ERRORS.reads] == ["gpu_c2c_errors_total"]


def test_a_gb200_answers_its_c2c_mode_and_climbing_replays_through_nvml() -> None:
    """The simulator's Grace board as NVIDIA's mock board file has it (C2C
    on; the rest of the board in its profile), read through NVML's own calls:
    the replays the scenario sets climb, the other kinds stay."""
    fields = [k.FI_DEV_C2C_LINK_ERROR_INTR, k.FI_DEV_C2C_LINK_ERROR_REPLAY,
              k.FI_DEV_C2C_LINK_ERROR_REPLAY_B2B]
    with OneGpu(profile="gb200", utilization=0.9, c2c_replay_errors_per_s=2.0) as gpu:
        gpu.clock.advance(1.0)
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert pynvml.nvmlDeviceGetC2cModeInfoV(h).isC2cEnabled == 1
        first = [v.value.ullVal for v in pynvml.nvmlDeviceGetFieldValues(h, fields)]
        gpu.clock.advance(10.0)
        gpu.node.refresh()
        later = [v.value.ullVal for v in pynvml.nvmlDeviceGetFieldValues(h, fields)]
    assert later[0] == first[0] == 0 and later[2] == first[2] == 0
    assert later[1] - first[1] == pytest.approx(20, abs=1)


def test_a_board_without_c2c_answers_not_supported() -> None:
    with OneGpu(profile="h100-sxm5-80gb", utilization=0.9) as gpu:
        gpu.clock.advance(1.0)
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetC2cModeInfoV(h)
        [value] = pynvml.nvmlDeviceGetFieldValues(h, [k.FI_DEV_C2C_LINK_ERROR_REPLAY])
        assert value.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED


def _c2c_coverage(profile: str, driver: str | None = None) -> dict[str, list[str]]:
    """Each coverage section's reasons for the C2C row, on a one-GPU node."""
    sc = Scenario(name="c2c-coverage", node={"gpus": 1, "profile": profile, "driver": driver},
                  state={"utilization": 0.9, "memory_used_ratio": 0.5},
                  host={"cpus": 32, "numa_nodes": 1, "uptime_s": 86400})
    with SimRun(sc) as run:
        cov = answer(run.poll(40.0, interval=2.0))
    return {section: [g["reason"] for g in cov[section] if t.C2C_ERRORS.key in g["checks"]]
            for section in ("not_checked", "not_available", "nothing_to_check")}


def test_a_board_without_c2c_has_nothing_to_check_not_a_gap() -> None:
    got = _c2c_coverage("h100-sxm5-80gb")
    assert got["not_checked"] == [] and got["not_available"] == []
    assert got["nothing_to_check"] == [
        "the GPU has no C2C link to a Grace CPU (NVML's C2C mode is off or not offered)"]


def test_a_grace_board_before_r575_lacks_the_counters_not_the_check() -> None:
    # The C2C error fields came with R575: on R570 the link is there, its
    # counts are not offered, and that is the board's and driver's fact.
    got = _c2c_coverage("gb200", driver="R570")
    assert got["not_checked"] == [] and got["nothing_to_check"] == []
    assert len(got["not_available"]) == 1 and "C2C link error counts" in got["not_available"][0]
    # On R580 the same board is judged.
    assert _c2c_coverage("gb200") == {"not_checked": [], "not_available": [],
                                      "nothing_to_check": []}


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


# No row takes an idle GPU's draw at power smoothing's floor for work: the
# under-use rows judge work by NVML's gpu_idle reason and utilization, and
# the power-cap row (above) subtracts the floor where it reads draw. Each
# verdict below must be the one the same GPU gets at its idle draw.
_IDLE_DRAW_W, _FLOOR_W = 145.0, 600.0


def _idle_at(draw: float, **gpu: object) -> GpuReading:
    return busy_gpu(utilization=0.0, memory_used_bytes=0.0, power_watts=draw,
                    power_smoothing=True, power_floor_watts=_FLOOR_W, **gpu)


def test_an_allocated_gpu_idling_at_its_smoothing_floor_is_still_unused() -> None:
    def judged(draw: float) -> bool | None:
        sig = signals(_idle_at(draw), procs=[], owners=(POD,), allocations_known=True)
        return verdict(t.ALLOCATED_UNUSED, sig).holds

    assert judged(_FLOOR_W) is True
    assert judged(_FLOOR_W) == judged(_IDLE_DRAW_W)


@pytest.mark.parametrize("row,bit", [(t.HW_SLOWDOWN, "hw_slowdown"),
                                     (t.POWER_BRAKE, "hw_power_brake")])
def test_a_gpu_idling_at_its_smoothing_floor_is_not_slowed_under_load(row: Row,
                                                                     bit: str) -> None:
    def judged(draw: float) -> bool | None:
        gpu = _idle_at(draw, throttle_reasons=frozenset({"gpu_idle", bit}),
                       clocks_hz={"sm": 0.4e9})
        return verdict(row, signals(gpu)).holds

    assert judged(_FLOOR_W) is False
    assert judged(_FLOOR_W) == judged(_IDLE_DRAW_W)


def test_a_gpu_idling_at_its_smoothing_floor_is_not_power_capped() -> None:
    # The floor at the lowered limit: were the floor's draw work, the cap binds.
    capped = dict(_CAPPED, utilization=0.0, power_limit_watts=_FLOOR_W)
    at_floor = busy_gpu(**capped, power_watts=_FLOOR_W, power_smoothing=True,
                        power_floor_watts=_FLOOR_W)
    assert verdict(t.POWER_CAP, signals(at_floor)).holds is False

