"""NVLink 5's FEC counts and bit-error rates (NVML fields 219-222): the
packing pinned to nvml.h, the simulator answering them as NVML does, the
NVLink reader exporting them where the board and driver have them and
leaving them absent (and named in the coverage) where a board that could
have them does not, and the coverage naming nothing a board's class could
never offer."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from gpu_exporter.collectors import board
from gpu_exporter.diagnosis.coverage import answer
from gpu_exporter.nvml import constants as k
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.simulator.libnvml.fields import pack_ber
from gpu_exporter.simulator.model import Scenario
from gpu_exporter.simulator.world import NVLINK5_BITS_PER_S
from tests.nvml.test_nvml_contract import _define, header
from tests.onegpu import OneGpu
from tests.simnode import SimRun

FEC_FIELDS = (k.FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS, k.FI_DEV_NVLINK_COUNT_EFFECTIVE_BER,
              k.FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS, k.FI_DEV_NVLINK_COUNT_SYMBOL_BER)
FAMILIES = ("gpu_nvlink_fec_errors_all_links_total", "gpu_nvlink_bit_error_rate_worst_link")


# --- the encoding, as nvml.h states it --------------------------------------------------
@pytest.mark.parametrize("const", ["FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS",
                                   "FI_DEV_NVLINK_COUNT_EFFECTIVE_BER",
                                   "FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS",
                                   "FI_DEV_NVLINK_COUNT_SYMBOL_BER",
                                   "NVLINK_BER_MANTISSA_SHIFT", "NVLINK_BER_MANTISSA_WIDTH",
                                   "NVLINK_BER_EXP_SHIFT", "NVLINK_BER_EXP_WIDTH"])
def test_field_ids_and_ber_packing_match_the_header(const: str) -> None:
    m = re.search(rf"#define NVML_{const}\s+(0x[0-9a-fA-F]+|\d+)", header())
    assert m, const
    assert int(m.group(1), 0) == getattr(k, const)


def test_the_header_documents_the_ber_fields_as_packed_exponent_and_mantissa() -> None:
    for name in ("EFFECTIVE_BER", "SYMBOL_BER"):
        doc = re.search(r"/\*\*((?:(?!\*/).)*)\*/\s*#define NVML_FI_DEV_NVLINK_COUNT_" + name,
                        header(), re.S)
        assert doc, name
        assert "Bit [0:7]:  BER Exponent value" in doc.group(1)
        assert "Bit [8:11]: BER MANTISSA value" in doc.group(1)
    assert _define("NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER") == 220


def _packed(mantissa: int, exponent: int) -> int:
    """Packed with the header's own shifts (NVML_NVLINK_BER_*_SHIFT)."""
    return (mantissa << _define("NVML_NVLINK_BER_MANTISSA_SHIFT")) | (
        exponent << _define("NVML_NVLINK_BER_EXP_SHIFT"))


@pytest.mark.parametrize("mantissa,exponent,rate", [
    (1, 0, 1.0), (3, 12, 3e-12), (15, 9, 1.5e-8), (9, 15, 9e-15), (1, 255, 1e-255),
    (0, 12, 0.0)])
def test_a_packed_ber_decodes_to_mantissa_times_ten_to_minus_exponent(
        mantissa: int, exponent: int, rate: float) -> None:
    assert k.nvlink_ber(_packed(mantissa, exponent)) == rate
    # Bits above the mantissa's four are not the rate's (the header's macro masks them).
    assert k.nvlink_ber(_packed(mantissa, exponent) | 0xFFFF_F000) == rate


@pytest.mark.parametrize("rate", [2.35e-9, 1e-12, 9.6e-9, 4.7e-15, 0.5])
def test_the_simulator_packs_a_rate_to_its_first_digit(rate: float) -> None:
    decoded = k.nvlink_ber(pack_ber(rate))
    assert decoded == pytest.approx(rate, rel=0.25)
    assert pack_ber(rate) < 1 << 12  # exponent and mantissa, nothing above
    assert pack_ber(0.0) == 0


# --- the simulator answers as NVML -------------------------------------------------------
def test_a_gb200_counts_fec_errors_per_link_and_packs_their_rate() -> None:
    with OneGpu(profile="gb200", utilization=0.9, nvlink_error_links=[5],
                nvlink_effective_errors_per_s=3.0, nvlink_symbol_errors_per_s=400.0) as gpu:
        gpu.clock.advance(1.0)
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        request = [(fid, link) for fid in FEC_FIELDS for link in (4, 5)]
        first = pynvml.nvmlDeviceGetFieldValues(h, request)
        gpu.clock.advance(10.0)
        gpu.node.refresh()
        later = pynvml.nvmlDeviceGetFieldValues(h, request)
    assert all(v.nvmlReturn == pynvml.NVML_SUCCESS for v in later)
    got = {(int(v.fieldId), int(v.scopeId)): v.value.ullVal for v in later}
    grown = {(int(a.fieldId), int(a.scopeId)): b.value.ullVal - a.value.ullVal
             for a, b in zip(first, later, strict=True)}
    assert grown[k.FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS, 5] == pytest.approx(30, abs=1)
    assert grown[k.FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS, 5] == pytest.approx(4000, abs=1)
    assert grown[k.FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS, 4] == 0  # a clean link
    assert k.nvlink_ber(got[k.FI_DEV_NVLINK_COUNT_EFFECTIVE_BER, 5]) == pytest.approx(
        3.0 / NVLINK5_BITS_PER_S, rel=0.25)
    assert k.nvlink_ber(got[k.FI_DEV_NVLINK_COUNT_SYMBOL_BER, 5]) == pytest.approx(
        400.0 / NVLINK5_BITS_PER_S, rel=0.25)
    assert got[k.FI_DEV_NVLINK_COUNT_EFFECTIVE_BER, 4] == 0


@pytest.mark.parametrize("profile,driver", [("h100-sxm5-80gb", None), ("gb200", "R550")])
def test_older_boards_and_branches_answer_not_supported(profile: str,
                                                        driver: str | None) -> None:
    sc = Scenario(name="fec", node={"gpus": 1, "profile": profile, "driver": driver},
                  state={"utilization": 0.9})
    with SimRun(sc) as run:
        run.poll()
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        answers = pynvml.nvmlDeviceGetFieldValues(h, [(fid, 0) for fid in FEC_FIELDS])
    assert [v.nvmlReturn for v in answers] == [pynvml.NVML_ERROR_NOT_SUPPORTED] * 4


# --- the exporter ----------------------------------------------------------------------
def _node(profile: str, driver: str | None = None, **state: object) -> Scenario:
    return Scenario(name="fec", node={"gpus": 1, "profile": profile, "driver": driver},
                    state={"utilization": 0.9, "memory_used_ratio": 0.5, **state},
                    host={"cpus": 32, "numa_nodes": 1, "uptime_s": 86400})


def test_a_gb200_exports_fec_counts_and_the_worst_links_rate() -> None:
    sc = _node("gb200", nvlink_error_links=[2, 7], nvlink_effective_errors_per_s=2.0,
               nvlink_symbol_errors_per_s=100.0)
    with SimRun(sc, metrics={"detail": True}) as run:
        before = run.poll()
        after = run.poll(20.0, interval=2.0)
        lacks = after.readings.gpus[0].board_lacks

    def total(snap: Snapshot, kind: str) -> float:
        return snap.get("gpu_nvlink_fec_errors_all_links_total", gpu="0", type=kind) or 0.0

    # Two erring links, 20 s: 80 effective errors and 4000 symbol errors in all.
    assert total(after, "effective") - total(before, "effective") == pytest.approx(80, abs=2)
    assert total(after, "symbol") - total(before, "symbol") == pytest.approx(4000, abs=2)
    worst = after.get("gpu_nvlink_bit_error_rate_worst_link", gpu="0", type="effective")
    assert worst == pytest.approx(2.0 / NVLINK5_BITS_PER_S, rel=0.25)
    per_link = {labels["link"]: v for labels, v in after.series("gpu_nvlink_bit_error_rate")
                if labels["type"] == "effective"}
    assert len(per_link) == 18 and per_link["3"] == 0.0 and per_link["7"] == worst
    counts = {labels["link"]: v for labels, v in after.series("gpu_nvlink_fec_errors_total")
              if labels["type"] == "effective"}
    assert counts["3"] == 0.0 and counts["2"] > 0
    reading = after.readings.nvlink[0]
    assert reading.errors[2, "effective"] > 0 and reading.bit_error_rates[7, "symbol"] > 0
    assert board.FEC_WORDS not in lacks


def test_a_board_without_the_fields_stops_asking_and_names_nothing_it_never_could() -> None:
    with SimRun(_node("h100-sxm5-80gb")) as run:
        snap = run.poll(6.0, interval=2.0)
        gpu = run.exporter.session.gpus[0]
        asked = {fid for fid, _link in gpu.static["nvlink_plan"].request}
        lacks = snap.readings.gpus[0].board_lacks
    assert not set(FEC_FIELDS) & asked  # asked once, NOT_SUPPORTED, not again
    assert set(board.FEC_KEYS.values()) <= gpu.unsupported
    assert not set(FAMILIES) & set(snap.samples)
    # An H100 has no NVLink 5: the counts are no gap on it.
    assert board.FEC_WORDS not in lacks


def test_a_blackwell_board_lacking_the_fields_names_them() -> None:
    profile = "gb200"
    with SimRun(_node(profile), prepare=lambda node: node.world.profile.unsupported_fields
                .extend(FEC_FIELDS)) as run:
        snap = run.poll(6.0, interval=2.0)
    assert not set(FAMILIES) & set(snap.samples)
    assert board.FEC_WORDS in snap.readings.gpus[0].board_lacks
    listed = [g for g in answer(snap)["not_available"] if board.FEC_WORDS in g["readings"]]
    assert [g["gpus"] for g in listed] == [["0"]]


def test_a_branch_before_the_fields_is_not_asked_for_them() -> None:
    with SimRun(_node("gb200", driver="R550")) as run:
        snap = run.poll(4.0, interval=2.0)
        gpu = run.exporter.session.gpus[0]
        asked = {fid for fid, _link in gpu.static["nvlink_plan"].request}
    assert not set(FEC_FIELDS) & asked
    assert not set(FAMILIES) & set(snap.samples)
    assert not set(board.FEC_KEYS.values()) & gpu.unsupported


# --- the coverage names only what the board's class could offer --------------------------
# Readings only a Grace superchip or a Blackwell board can have (nvml.h: the
# power-smoothing calls and nvmlDeviceGetPlatformInfo "For Blackwell or newer").
GRACE_OR_BLACKWELL = ("the Grace C2C link", "C2C link errors", "power smoothing",
                      "the power-smoothing floor", "the rack location", board.FEC_WORDS)


@pytest.mark.parametrize("profile", ["t4", "l40s", "a100-pcie-40gb", "h100-sxm5-80gb",
                                     "rtx-4090"])
def test_older_boards_list_none_of_the_grace_or_blackwell_readings(profile: str) -> None:
    with SimRun(_node(profile)) as run:
        snap = run.poll(4.0, interval=2.0)
    lacks = snap.readings.gpus[0].board_lacks
    assert not set(GRACE_OR_BLACKWELL) & set(lacks), lacks


def test_a_grace_board_lacking_its_c2c_counts_lists_them() -> None:
    with SimRun(_node("gb200"), prepare=lambda node: node.world.profile.unsupported_fields
                .extend([k.FI_DEV_C2C_LINK_ERROR_INTR, k.FI_DEV_C2C_LINK_ERROR_REPLAY,
                         k.FI_DEV_C2C_LINK_ERROR_REPLAY_B2B])) as run:
        snap = run.poll(4.0, interval=2.0)
    assert "C2C link errors" in snap.readings.gpus[0].board_lacks


def test_the_class_follows_nvml_h_for_each_call() -> None:
    """The architecture each reading needs, as nvml.h says of its call."""
    for call, arch in (("nvmlDeviceGetRepairStatus", "Ampere"),
                       ("nvmlDeviceGetUnrepairableMemoryFlag_v1", "Hopper"),
                       ("nvmlDeviceGetPlatformInfo", "Blackwell"),
                       ("nvmlSystemGetConfComputeState", "Ampere"),
                       ("nvmlDevicePowerSmoothingSetState", "Blackwell")):
        at = header().index(f"DECLDIR {call}(")
        doc = header()[header().rindex("/**", 0, at):at]
        assert f"For {arch} &tm; or newer" in doc, call
    names = {v: n for n, v in k.ARCHITECTURES.items()}
    assert (names["ampere"], names["hopper"], names["blackwell"]) == (
        board.AMPERE, board.HOPPER, board.BLACKWELL)


# --- a healthy GB200 node ------------------------------------------------------------------
_HEALTHY_GB200 = """\
name: gb200-healthy
node: {gpus: 4, profile: gb200}
state: {utilization: 0.95, memory_used_ratio: 0.7, nvlink_symbol_errors_per_s: 50.0}
host: {cpus: 144, numa_nodes: 2}
processes:
""" + "".join(f"  - {{pid: {5100 + i}, comm: python, gpus: [{i}], gpu_memory_ratio: 0.68, "
              "sm_utilization: 0.93, cpu_ratio: 1.2, state: R, "
              "voluntary_ctxt_switches_per_s: 900}\n" for i in range(4))


def test_diagnose_finds_a_healthy_gb200_healthy_on_the_simulator(tmp_path: Path) -> None:
    # Its links see symbol errors, which FEC corrects: no fault.
    scenario = tmp_path / "gb200-healthy.yaml"
    scenario.write_text(_HEALTHY_GB200)
    done = subprocess.run([sys.executable, "-m", "gpu_exporter", "diagnose", "--simulate",
                           str(scenario)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "No problems found" in done.stdout


@pytest.mark.parametrize("name,grace", [
    ("NVIDIA GH200 480GB", True), ("NVIDIA GB200", True), ("NVIDIA GB300 NVL", True),
    ("NVIDIA GB10", True), ("NVIDIA H100 80GB HBM3", False), ("NVIDIA H200", False),
    ("NVIDIA B200", False), ("NVIDIA GeForce RTX 4090", False), ("NVIDIA T4", False)])
def test_a_grace_superchip_is_known_by_its_name(name: str, grace: bool) -> None:
    # Where NVML answers no C2C mode (a driver without the call), the name says
    # whether the board has a Grace CPU beside it.
    with SimRun(_node("h100-sxm5-80gb")) as run:
        run.poll()
        gpu = run.exporter.session.gpus[0]
        gpu.identity.name = name
        assert board.board_class(gpu, None).grace is grace
        assert board.board_class(gpu, True).grace  # the C2C mode on says so too
