"""The NVLink reader (collectors/nvlink.py) on one simulated GPU: each link's
state and counters as NVML answered them (the per-link series with
--metrics.detail, the GPU's totals always), what it asks of NVML and how often,
and what it does when NVML fails part-way: a GPU lost, a field NOT_SUPPORTED on
some links or on all of them, a driver without the state field or the per-link
call. The expected values come from the simulated GPU's state, in NVML's own
units (error counters by nvml.h's counter ids, throughput in KiB).

Fast (one simulated GPU, the reader run alone): mutation testing runs these for
every edit of the reader."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from gpu_exporter.collectors.board import FEC_KEYS
from gpu_exporter.collectors.device import DeviceCollector
from gpu_exporter.collectors.nvlink import NvlinkCollector
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.errors import NvmlError, Return
from gpu_exporter.nvml.session import Gpu
from gpu_exporter.poll.catalog import DETAIL
from gpu_exporter.poll.readings import NvlinkReading
from gpu_exporter.poll.snapshot import Snapshot, SnapshotBuilder
from gpu_exporter.poll.stage import Stage
from gpu_exporter.simulator.libnvml.fields import pack_ber
from gpu_exporter.simulator.world import GpuState
from tests.onegpu import OneGpu

LINKS = 18  # an H100 SXM5's, and a GB200's
# nvml.h's NVLink error counter ids (nvmlNvLinkErrorCounter_t), which the
# simulated GPU keeps its counts by, and the type label each is exported with.
DL_REPLAY, DL_RECOVERY, DL_CRC = 0, 1, 2
ERROR_FIELDS = {c.FI_DEV_NVLINK_ERROR_DL_REPLAY: ("replay", DL_REPLAY),
                c.FI_DEV_NVLINK_ERROR_DL_RECOVERY: ("recovery", DL_RECOVERY),
                c.FI_DEV_NVLINK_ERROR_DL_CRC: ("crc", DL_CRC)}
FEC_COUNTS = {c.FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS: "effective",
              c.FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS: "symbol"}
FEC_RATES = {c.FI_DEV_NVLINK_COUNT_EFFECTIVE_BER: "effective",
             c.FI_DEV_NVLINK_COUNT_SYMBOL_BER: "symbol"}
KIB = 1024  # NVML counts NVLink throughput in KiB
# An H100 whose links 3 and 11 are down and whose links 5 and 9 err, each
# error counter at its own rate (so one counter's value cannot pass for another's).
ERRING: dict[str, Any] = {"nvlink_down": [3, 11], "nvlink_error_links": [5, 9],
          "nvlink_crc_errors_per_s": 2.0, "nvlink_replay_errors_per_s": 0.5,
          "nvlink_recovery_errors_per_s": 0.2, "nvlink_bytes_per_s": 3.0 * 2**20}
# A GB200 whose links 2 and 7 err after FEC.
FEC_ERRING = {"nvlink_error_links": [2, 7], "nvlink_effective_errors_per_s": 2.0,
              "nvlink_symbol_errors_per_s": 100.0}


class Reader:
    """The NVLink reader alone on GPU 0, with every field NVML is asked for
    counted per (field id, link), and an error code to answer for any of them."""

    def __init__(self, profile: str = "h100-sxm5-80gb", driver: str | None = None,
                 **condition: Any) -> None:
        self.one = OneGpu(profile=profile, driver=driver, utilization=0.9, **condition)
        self.lib = self.one.node.library
        self.asked: Counter[tuple[int, int]] = Counter()
        self.fail: dict[tuple[int, int], Return] = {}
        self.lib.inject_field_error = self._field
        self.nvlink = self.one.build(NvlinkCollector)

    def _field(self, index: int, fid: int, scope: int) -> int | None:
        self.asked[fid, scope] += 1
        code = self.fail.get((fid, scope))
        return None if code is None else int(code)

    def fail_on_every_link(self, fid: int, code: Return) -> None:
        self.fail.update({(fid, link): code for link in range(LINKS)})

    def poll(self, seconds: float = 1.0, detail: bool = True,
             before: tuple[Stage, ...] = ()) -> Snapshot:
        """A poll of the reader (after ``before``), with or without --metrics.detail."""
        self.one.clock.advance(seconds)
        self.one.node.refresh()
        self.one.session.ensure()
        self.one.session.begin_poll()
        out = SnapshotBuilder(self.one.clock(), drop=() if detail else DETAIL)
        for stage in (*before, self.nvlink):
            stage.collect(out)
        return out.build()

    @property
    def state(self) -> GpuState:
        """What the GPU's NVML answers now."""
        return self.one.node.world.state(0)

    @property
    def gpu(self) -> Gpu:
        return self.one.session.gpus[0]

    def asked_of(self, fid: int) -> int:
        """How many times NVML was asked ``fid``, all links together."""
        return sum(n for (f, _link), n in self.asked.items() if f == fid)

    def close(self) -> None:
        self.one.close()


@pytest.fixture
def make() -> Iterator[Any]:
    made: list[Reader] = []

    def build(profile: str = "h100-sxm5-80gb", driver: str | None = None,
              **condition: Any) -> Reader:
        made.append(Reader(profile, driver, **condition))
        return made[-1]

    yield build
    for reader in made:
        reader.close()


def per_link(snap: Snapshot, name: str, label: str = "type") -> dict[tuple[int, str], float]:
    out = {}
    for labels, value in snap.series(name):
        assert (labels["gpu"], labels.pop("uuid")[:4]) == ("0", "GPU-")
        out[int(labels["link"]), labels.get(label, "")] = value
    return out


def links_up(snap: Snapshot) -> dict[int, float]:
    return {link: v for (link, _), v in per_link(snap, "gpu_nvlink_link_up").items()}


def totals(snap: Snapshot, name: str, label: str = "type") -> dict[str, float]:
    out = {}
    for labels, value in snap.series(name):
        assert labels["gpu"] == "0" and labels["uuid"].startswith("GPU-")
        out[labels[label]] = value
    return out


def nvlink_families(snap: Snapshot) -> set[str]:
    return {name for name in snap.samples if name.startswith("gpu_nvlink")}


def expected_errors(st: GpuState) -> dict[tuple[int, str], float]:
    return {(link, kind): float(st.nvlink_errors[link][counter])
            for link in range(LINKS) for kind, counter in ERROR_FIELDS.values()}


def expected_bytes(st: GpuState) -> dict[tuple[int, str], float]:
    return {(link, direction): float(kib[link] * KIB) for link in range(LINKS)
            for direction, kib in (("tx", st.nvlink_tx_kib), ("rx", st.nvlink_rx_kib))}


def summed(per: dict[tuple[int, str], float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for (_link, kind), value in per.items():
        out[kind] = out.get(kind, 0.0) + value
    return out


# --- what NVML answered, per link and per GPU -----------------------------------------------
def test_each_links_state_and_counters_are_nvmls_and_the_totals_their_sums(make: Any) -> None:
    reader = make(**ERRING)
    reader.poll()
    snap = reader.poll(10.0)
    st = reader.state
    assert links_up(snap) == {link: float(link not in (3, 11)) for link in range(LINKS)}
    errors = expected_errors(st)
    assert errors[5, "crc"] >= 20 and errors[5, "replay"] >= 5 and errors[0, "crc"] == 0
    assert per_link(snap, "gpu_nvlink_errors_total") == errors
    sent = expected_bytes(st)
    assert sent[0, "tx"] > 30 * 2**20 and sent[3, "tx"] == 0  # a down link carries nothing
    assert per_link(snap, "gpu_nvlink_bytes_total", "direction") == sent
    assert totals(snap, "gpu_nvlink_errors_all_links_total") == summed(errors)
    assert totals(snap, "gpu_nvlink_bytes_all_links_total", "direction") == summed(sent)
    assert snap.get("gpu_nvlink_links", gpu="0") == LINKS
    assert snap.get("gpu_nvlink_links_active", gpu="0") == LINKS - 2
    # An H100 has no NVLink 5: no FEC counts, no bit-error rates.
    assert nvlink_families(snap) == {
        "gpu_nvlink_link_up", "gpu_nvlink_errors_total", "gpu_nvlink_bytes_total",
        "gpu_nvlink_errors_all_links_total", "gpu_nvlink_bytes_all_links_total",
        "gpu_nvlink_links", "gpu_nvlink_links_active"}
    assert snap.readings.nvlink == {0: NvlinkReading(LINKS, LINKS - 2, errors, {})}
    assert reader.nvlink.errors() == 0


def test_without_detail_only_the_gpus_totals_are_exported_from_the_same_answers(
        make: Any) -> None:
    reader = make(**ERRING)
    reader.poll(detail=False)
    snap = reader.poll(10.0, detail=False)
    # Nor are the per-link label tuples made (some 0.3 MiB on an 8-GPU node).
    assert reader.gpu.static["nvlink_plan"].labels == {}
    st = reader.state
    assert nvlink_families(snap) == {
        "gpu_nvlink_errors_all_links_total", "gpu_nvlink_bytes_all_links_total",
        "gpu_nvlink_links", "gpu_nvlink_links_active"}
    assert totals(snap, "gpu_nvlink_errors_all_links_total") == summed(expected_errors(st))
    assert totals(snap, "gpu_nvlink_bytes_all_links_total", "direction") == \
        summed(expected_bytes(st))
    assert snap.get("gpu_nvlink_links_active", gpu="0") == LINKS - 2
    assert snap.readings.nvlink == {0: NvlinkReading(LINKS, LINKS - 2, expected_errors(st), {})}
    # With the flag turned on later, the per-link series come.
    assert per_link(reader.poll(), "gpu_nvlink_errors_total") == expected_errors(reader.state)


def test_a_board_without_nvlink_is_asked_its_link_count_once_and_nothing_more(
        make: Any) -> None:
    reader = make("a100-pcie-40gb")
    for _ in range(3):
        snap = reader.poll()
        assert nvlink_families(snap) == set()
        assert snap.readings.nvlink == {}
    assert reader.asked == {(c.FI_DEV_NVLINK_LINK_COUNT, 0): 1}
    assert reader.nvlink.errors() == 0


def test_every_links_fields_are_read_every_poll_the_link_count_once(make: Any) -> None:
    reader = make()
    calls = reader.lib.calls["nvmlDeviceGetFieldValues"]
    for _ in range(3):
        reader.poll()
    assert reader.lib.calls["nvmlDeviceGetFieldValues"] - calls == 1 + 3  # one call a poll
    fields = (c.FI_DEV_NVLINK_GET_STATE, *ERROR_FIELDS, c.FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
              c.FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
    # An H100 answers the FEC fields NOT_SUPPORTED: asked on the first poll only.
    assert reader.asked == {(c.FI_DEV_NVLINK_LINK_COUNT, 0): 1,
                            **{(fid, link): 3 for fid in fields for link in range(LINKS)},
                            **{(fid, link): 1 for fid in (*FEC_COUNTS, *FEC_RATES)
                               for link in range(LINKS)}}
    assert reader.lib.calls["nvmlDeviceGetNvLinkState"] == 0  # the state is a field


# --- NVML failing part-way ------------------------------------------------------------------
@pytest.mark.parametrize("fid,link", [(c.FI_DEV_NVLINK_ERROR_DL_CRC, 7),
                                      (c.FI_DEV_NVLINK_GET_STATE, 17),
                                      (c.FI_DEV_NVLINK_LINK_COUNT, 0)])
def test_a_gpu_lost_mid_read_is_marked_lost_not_counted_as_an_error(
        make: Any, caplog: pytest.LogCaptureFixture, fid: int, link: int) -> None:
    reader = make()
    reader.fail[fid, link] = Return.GPU_IS_LOST
    snap = reader.poll()
    assert reader.gpu.lost
    assert f"is lost: field {fid}: NVML error GPU_IS_LOST" in caplog.text
    assert nvlink_families(snap) == set() and snap.readings.nvlink == {}
    assert reader.nvlink.errors() == 0


def test_a_failed_read_on_one_link_is_counted_and_the_total_keeps_its_share(
        make: Any) -> None:
    reader = make(**ERRING)
    first = reader.poll(10.0)
    held = per_link(first, "gpu_nvlink_errors_total")[5, "crc"]
    reader.fail[c.FI_DEV_NVLINK_ERROR_DL_CRC, 5] = Return.UNKNOWN
    snap = reader.poll(10.0)
    errors = expected_errors(reader.state)
    assert errors[5, "crc"] > held > 0
    del errors[5, "crc"]
    assert per_link(snap, "gpu_nvlink_errors_total") == errors  # link 5's crc: absent
    # The total holds link 5's last good reading: it never dips.
    assert totals(snap, "gpu_nvlink_errors_all_links_total")["crc"] == \
        summed(errors)["crc"] + held
    assert snap.readings.nvlink[0].errors == errors
    assert reader.nvlink.errors() == 1
    # Answered again: link 5 is back in the total, at its reading now.
    del reader.fail[c.FI_DEV_NVLINK_ERROR_DL_CRC, 5]
    snap = reader.poll()
    assert totals(snap, "gpu_nvlink_errors_all_links_total") == summed(
        expected_errors(reader.state))
    assert reader.nvlink.errors() == 0


def test_a_total_none_of_whose_links_answered_is_absent_not_zero(make: Any) -> None:
    reader = make(**ERRING)
    reader.fail_on_every_link(c.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, Return.UNKNOWN)
    snap = reader.poll(10.0)
    assert set(totals(snap, "gpu_nvlink_bytes_all_links_total", "direction")) == {"tx"}
    assert reader.nvlink.errors() == LINKS
    # A failed read is no absence: the field is asked again.
    reader.poll()
    assert reader.asked_of(c.FI_DEV_NVLINK_THROUGHPUT_DATA_RX) == 2 * LINKS


def test_a_field_some_links_answer_not_supported_is_kept_for_the_others(make: Any) -> None:
    reader = make(**ERRING)
    for link in (0, 5):
        reader.fail[c.FI_DEV_NVLINK_ERROR_DL_CRC, link] = Return.NOT_SUPPORTED
    reader.poll()
    snap = reader.poll(10.0)
    errors = expected_errors(reader.state)
    del errors[0, "crc"], errors[5, "crc"]
    assert per_link(snap, "gpu_nvlink_errors_total") == errors
    assert totals(snap, "gpu_nvlink_errors_all_links_total") == summed(errors)
    assert reader.nvlink.errors() == 0  # the board's answer, not a failure
    assert reader.asked_of(c.FI_DEV_NVLINK_ERROR_DL_CRC) == 2 * LINKS


def test_error_fields_not_supported_on_every_link_are_not_asked_again(
        make: Any, caplog: pytest.LogCaptureFixture) -> None:
    """From R565 on, Blackwell answers the CRC, replay and recovery fields
    NOT_SUPPORTED ("Changes between v560 and v565"): its FEC counts are its
    links' error counts, and the three are not asked again on that GPU."""
    reader = make("gb200", nvlink_down=[4], **FEC_ERRING)
    for fid in ERROR_FIELDS:
        reader.fail_on_every_link(fid, Return.NOT_SUPPORTED)
    caplog.set_level("INFO", logger="gpu_exporter.nvml.gpu")
    reader.poll()
    calls = reader.lib.calls["nvmlDeviceGetFieldValues"]
    for _ in range(3):
        snap = reader.poll(5.0)
    assert reader.lib.calls["nvmlDeviceGetFieldValues"] - calls == 3
    # Said once, in the log, naming the GPU and each field.
    said = [r.getMessage() for r in caplog.records if "NOT_SUPPORTED" in r.getMessage()]
    assert sorted(said) == sorted(
        f"GPU 0: NVML answers NOT_SUPPORTED for nvmlDeviceGetFieldValues(field {fid}) "
        f"(nvlink_field_{fid}): read another way where there is one, else its series stay "
        "absent; not asked again" for fid in ERROR_FIELDS)
    for fid in ERROR_FIELDS:
        assert reader.asked_of(fid) == LINKS  # the first poll's, only
    assert reader.asked_of(c.FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS) == 4 * LINKS
    assert "gpu_nvlink_errors_all_links_total" not in snap.samples
    assert "gpu_nvlink_errors_total" not in snap.samples
    st = reader.state
    fec = {(link, kind): float(st.nvlink_fec[link][kind]) for link in range(LINKS)
           for kind in FEC_COUNTS.values()}
    assert fec[2, "effective"] > 0
    assert totals(snap, "gpu_nvlink_fec_errors_all_links_total") == summed(fec)
    assert snap.readings.nvlink[0].errors == fec
    assert reader.nvlink.errors() == 0


def test_a_field_not_supported_while_every_link_is_down_is_asked_again(make: Any) -> None:
    # Nothing says the board lacks the field: its links may answer once up.
    reader = make(nvlink_down=list(range(LINKS)))
    reader.fail_on_every_link(c.FI_DEV_NVLINK_ERROR_DL_CRC, Return.NOT_SUPPORTED)
    for _ in range(2):
        snap = reader.poll()
    assert reader.asked_of(c.FI_DEV_NVLINK_ERROR_DL_CRC) == 2 * LINKS
    assert snap.get("gpu_nvlink_links_active", gpu="0") == 0.0
    reader.fail.clear()
    snap = reader.poll()
    assert set(totals(snap, "gpu_nvlink_errors_all_links_total")) == {"crc", "replay",
                                                                      "recovery"}


# --- the link state on drivers without its field, or without the per-link call ---------------
def test_without_the_state_field_each_links_state_comes_from_the_per_link_call(
        make: Any, caplog: pytest.LogCaptureFixture) -> None:
    # A driver before R525 answers the field NOT_SUPPORTED on every link.
    reader = make(nvlink_down=[3])
    reader.fail_on_every_link(c.FI_DEV_NVLINK_GET_STATE, Return.NOT_SUPPORTED)
    caplog.set_level("INFO", logger="gpu_exporter.nvml.gpu")
    for _ in range(3):
        snap = reader.poll()
        assert links_up(snap) == {link: float(link != 3) for link in range(LINKS)}
        assert snap.get("gpu_nvlink_links_active", gpu="0") == LINKS - 1
        assert snap.readings.nvlink[0].up == LINKS - 1
    assert reader.asked_of(c.FI_DEV_NVLINK_GET_STATE) == LINKS  # once, then the call
    assert reader.lib.calls["nvmlDeviceGetNvLinkState"] == 3 * LINKS
    assert "nvlink_state_field" in reader.gpu.unsupported
    assert reader.nvlink.errors() == 0
    said = [r.getMessage() for r in caplog.records if "nvlink_state" in r.getMessage()]
    assert said == ["GPU 0: NVML answers NOT_SUPPORTED for nvmlDeviceGetFieldValues("
                    "NVML_FI_DEV_NVLINK_GET_STATE) (nvlink_state_field): read another way where "
                    "there is one, else its series stay absent; not asked again"]


def test_r470_reads_the_state_link_by_link(make: Any) -> None:
    reader = make(driver="R470", nvlink_down=[0, 17])
    for _ in range(2):
        snap = reader.poll()
        assert links_up(snap) == {link: float(link not in (0, 17)) for link in range(LINKS)}
    assert reader.lib.calls["nvmlDeviceGetNvLinkState"] == 2 * LINKS


def test_a_state_some_links_answer_not_supported_leaves_only_those_out(make: Any) -> None:
    reader = make(nvlink_down=[4])
    reader.fail[c.FI_DEV_NVLINK_GET_STATE, 3] = Return.NOT_SUPPORTED
    for _ in range(2):
        snap = reader.poll()
    assert links_up(snap) == {link: float(link != 4) for link in range(LINKS) if link != 3}
    assert snap.get("gpu_nvlink_links_active", gpu="0") == LINKS - 2  # of the 17 read
    assert reader.lib.calls["nvmlDeviceGetNvLinkState"] == 0
    assert "nvlink_state_field" not in reader.gpu.unsupported


def test_without_the_field_or_the_call_the_state_stays_absent_and_is_asked_once(
        make: Any) -> None:
    reader = make()
    reader.one.node.world.profile.unsupported_calls.append("nvmlDeviceGetNvLinkState")
    reader.fail_on_every_link(c.FI_DEV_NVLINK_GET_STATE, Return.NOT_SUPPORTED)
    for _ in range(3):
        snap = reader.poll(5.0)
    assert "gpu_nvlink_link_up" not in snap.samples
    assert "gpu_nvlink_links_active" not in snap.samples  # never a 0 that means "not read"
    assert snap.get("gpu_nvlink_links", gpu="0") == LINKS
    assert totals(snap, "gpu_nvlink_errors_all_links_total") == summed(
        expected_errors(reader.state))
    assert reader.lib.calls["nvmlDeviceGetNvLinkState"] == 1
    assert reader.nvlink.errors() == 0


def test_a_per_link_call_failing_on_one_link_leaves_only_that_link_out(
        make: Any, caplog: pytest.LogCaptureFixture) -> None:
    reader = make(nvlink_down=[9])
    reader.fail_on_every_link(c.FI_DEV_NVLINK_GET_STATE, Return.NOT_SUPPORTED)
    reader.poll()
    asked = Counter[str]()

    def fourth_fails(name: str, index: int | None) -> int | None:
        if name != "nvmlDeviceGetNvLinkState":
            return None
        asked[name] += 1
        return int(Return.UNKNOWN) if asked[name] == 4 else None  # link 3's

    reader.lib.inject_error = fourth_fails
    snap = reader.poll()
    assert links_up(snap) == {link: float(link != 9) for link in range(LINKS) if link != 3}
    assert snap.get("gpu_nvlink_links_active", gpu="0") == LINKS - 2
    assert reader.nvlink.errors() == 1
    assert "GPU 0: reading nvlink_state_call failed: " in caplog.text


def test_a_gpu_lost_during_the_per_link_calls_adds_no_series(make: Any) -> None:
    reader = make()
    reader.fail_on_every_link(c.FI_DEV_NVLINK_GET_STATE, Return.NOT_SUPPORTED)
    reader.poll()

    def lost(name: str, index: int | None) -> int | None:
        return int(Return.GPU_IS_LOST) if name == "nvmlDeviceGetNvLinkState" else None

    reader.lib.inject_error = lost
    snap = reader.poll()
    assert reader.gpu.lost
    assert nvlink_families(snap) == set() and snap.readings.nvlink == {}


# --- NVLink 5: FEC counts and bit-error rates -----------------------------------------------
def ber(st: GpuState, link: int, kind: str) -> float:
    """The rate as NVML packs it (pack_ber: pinned to nvml.h in test_nvlink_fec.py), decoded."""
    return c.nvlink_ber(pack_ber(st.nvlink_ber[link][kind]))


def test_a_gb200s_fec_counts_and_rates_per_link_and_its_worst_link(make: Any) -> None:
    reader = make("gb200", **FEC_ERRING)
    reader.poll()
    snap = reader.poll(10.0)
    st = reader.state
    fec = {(link, kind): float(st.nvlink_fec[link][kind]) for link in range(LINKS)
           for kind in FEC_COUNTS.values()}
    rates = {(link, kind): ber(st, link, kind) for link in range(LINKS)
             for kind in FEC_RATES.values()}
    assert fec[2, "symbol"] > fec[7, "effective"] > 0 and fec[3, "effective"] == 0
    assert rates[7, "effective"] > 0 and rates[3, "symbol"] == 0
    assert per_link(snap, "gpu_nvlink_fec_errors_total") == fec
    assert per_link(snap, "gpu_nvlink_bit_error_rate") == rates
    assert totals(snap, "gpu_nvlink_fec_errors_all_links_total") == summed(fec)
    assert totals(snap, "gpu_nvlink_bit_error_rate_worst_link") == {
        kind: max(rates[link, kind] for link in range(LINKS)) for kind in ("effective",
                                                                            "symbol")}
    reading = snap.readings.nvlink[0]
    assert reading.bit_error_rates == rates
    assert reading.errors == {**expected_errors(st), **fec}
    # Without the flag: the totals and the worst link's rate, no per-link series.
    quiet = reader.poll(detail=False)
    assert nvlink_families(quiet) == {
        "gpu_nvlink_errors_all_links_total", "gpu_nvlink_bytes_all_links_total",
        "gpu_nvlink_links", "gpu_nvlink_links_active", "gpu_nvlink_fec_errors_all_links_total",
        "gpu_nvlink_bit_error_rate_worst_link"}
    assert quiet.readings.nvlink[0].bit_error_rates == rates


@pytest.mark.parametrize("version,asked", [("550.163.01", False), ("565.57.01", True),
                                           ("580.159.04", True)])
def test_the_fec_fields_are_asked_from_r565_on(make: Any, version: str, asked: bool) -> None:
    reader = make("gb200")
    reader.one.node.world.scenario.node.driver_version = version
    reader.poll()
    for fid in (*FEC_COUNTS, *FEC_RATES):
        assert reader.asked_of(fid) == (LINKS if asked else 0)


def test_a_fec_field_not_supported_on_every_link_is_dropped_and_noted(make: Any) -> None:
    reader = make("gb200", **FEC_ERRING)
    dropped = c.FI_DEV_NVLINK_COUNT_SYMBOL_BER
    reader.fail_on_every_link(dropped, Return.NOT_SUPPORTED)
    reader.fail[c.FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS, 4] = Return.NOT_SUPPORTED
    for _ in range(3):
        snap = reader.poll(5.0)
    assert reader.asked_of(dropped) == LINKS
    assert reader.asked_of(c.FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS) == 3 * LINKS  # kept
    assert reader.gpu.unsupported & set(FEC_KEYS.values()) == {FEC_KEYS[dropped]}
    assert set(totals(snap, "gpu_nvlink_bit_error_rate_worst_link")) == {"effective"}
    assert {kind for _, kind in per_link(snap, "gpu_nvlink_bit_error_rate")} == {"effective"}
    counted = per_link(snap, "gpu_nvlink_fec_errors_total")
    assert (4, "effective") not in counted and (4, "symbol") in counted
    assert reader.nvlink.errors() == 0


def test_a_rate_not_in_the_packed_form_is_counted_not_exported(make: Any) -> None:
    reader = make("gb200", **FEC_ERRING)
    reader.poll()
    device = reader.gpu.device
    assert device is not None
    real = device.scoped_field_values
    forged: dict[tuple[int, int], float] = {(c.FI_DEV_NVLINK_COUNT_EFFECTIVE_BER, 2): 2.5,
                                            (c.FI_DEV_NVLINK_COUNT_EFFECTIVE_BER, 7): -1.0}

    def answers(fields: Any) -> dict[tuple[int, int], float | NvmlError]:
        return {**real(fields), **{k: v for k, v in forged.items() if k in fields}}

    device.scoped_field_values = answers
    snap = reader.poll(10.0)
    rates = per_link(snap, "gpu_nvlink_bit_error_rate")
    assert (2, "effective") not in rates and (7, "effective") not in rates
    assert rates[2, "symbol"] > 0
    # Links 2 and 7 are the erring ones: without them, the worst link is clean.
    assert totals(snap, "gpu_nvlink_bit_error_rate_worst_link")["effective"] == 0.0
    assert reader.nvlink.errors() == 2


# --- one field-values call per GPU and poll, shared with the device reader -------------------
def test_with_the_device_reader_one_call_a_poll_holds_the_links_fields(make: Any) -> None:
    reader = make(**ERRING)
    device = reader.one.build(DeviceCollector)
    reader.poll(before=(device,))
    calls = reader.lib.calls["nvmlDeviceGetFieldValues"]
    for _ in range(3):
        snap = reader.poll(5.0, before=(device,))
        assert per_link(snap, "gpu_nvlink_errors_total") == expected_errors(reader.state)
    assert reader.lib.calls["nvmlDeviceGetFieldValues"] - calls == 3
    # A poll the device reader did not run in: the reader asks for itself,
    # and reads this poll's values, not the last poll's.
    snap = reader.poll(5.0)
    assert reader.lib.calls["nvmlDeviceGetFieldValues"] - calls == 4
    assert per_link(snap, "gpu_nvlink_errors_total") == expected_errors(reader.state)
    # Closed, the reader's fields leave the device reader's call.
    reader.nvlink.close()
    asked = reader.asked_of(c.FI_DEV_NVLINK_ERROR_DL_CRC)
    reader.one.poll(device)
    assert reader.asked_of(c.FI_DEV_NVLINK_ERROR_DL_CRC) == asked


def test_a_field_dropped_leaves_the_device_readers_call_at_once(make: Any) -> None:
    reader = make("gb200", **FEC_ERRING)
    device = reader.one.build(DeviceCollector)
    reader.fail_on_every_link(c.FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS, Return.NOT_SUPPORTED)
    reader.poll(before=(device,))
    calls = reader.lib.calls["nvmlDeviceGetFieldValues"]
    snap = reader.poll(5.0, before=(device,))
    assert reader.lib.calls["nvmlDeviceGetFieldValues"] - calls == 1
    assert reader.asked_of(c.FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS) == LINKS
    assert set(totals(snap, "gpu_nvlink_fec_errors_all_links_total")) == {"effective"}



def test_a_link_count_read_that_failed_is_asked_again_next_poll(make: Any) -> None:
    reader = make()
    reader.fail[c.FI_DEV_NVLINK_LINK_COUNT, 0] = Return.UNKNOWN
    snap = reader.poll()
    assert nvlink_families(snap) == set()
    assert reader.nvlink.errors() == 1
    reader.fail.clear()
    snap = reader.poll()
    assert snap.get("gpu_nvlink_links", gpu="0") == LINKS
    assert reader.asked[c.FI_DEV_NVLINK_LINK_COUNT, 0] == 2


@pytest.mark.parametrize("whole_call", [False, True], ids=["field", "call"])
def test_a_link_count_not_offered_is_asked_once(make: Any, whole_call: bool) -> None:
    reader = make()
    if whole_call:  # NOT_SUPPORTED for the call, not the field
        reader.one.node.world.profile.unsupported_calls.append("nvmlDeviceGetFieldValues")
    else:
        reader.fail[c.FI_DEV_NVLINK_LINK_COUNT, 0] = Return.NOT_SUPPORTED
    for _ in range(3):
        snap = reader.poll()
        assert nvlink_families(snap) == set() and snap.readings.nvlink == {}
    assert reader.lib.calls["nvmlDeviceGetFieldValues"] == 1
    assert reader.nvlink.errors() == 0


def test_a_state_field_lacking_leaves_the_device_readers_call_at_once(make: Any) -> None:
    reader = make(nvlink_down=[6])
    device = reader.one.build(DeviceCollector)
    reader.fail_on_every_link(c.FI_DEV_NVLINK_GET_STATE, Return.NOT_SUPPORTED)
    reader.poll(before=(device,))
    calls = reader.lib.calls["nvmlDeviceGetFieldValues"]
    snap = reader.poll(before=(device,))
    assert reader.lib.calls["nvmlDeviceGetFieldValues"] - calls == 1
    assert links_up(snap) == {link: float(link != 6) for link in range(LINKS)}


def test_the_plan_is_made_once_per_gpu_not_every_poll(make: Any) -> None:
    # 108 pairs and their label tuples on an 18-link GPU: made again only
    # where what is asked changes.
    reader = make("gb200")
    reader.poll()
    plan = reader.gpu.static["nvlink_plan"]
    for _ in range(2):
        reader.poll()
        assert reader.gpu.static["nvlink_plan"] is plan
    reader.fail_on_every_link(c.FI_DEV_NVLINK_COUNT_SYMBOL_BER, Return.NOT_SUPPORTED)
    # Answered NOT_SUPPORTED on every link: the plan is made anew in that
    # poll, so whichever reader asks the GPU's fields next poll leaves it out.
    reader.poll()
    new = reader.gpu.static["nvlink_plan"]
    assert new is not plan and c.FI_DEV_NVLINK_COUNT_SYMBOL_BER not in new.fields
    asked = reader.asked_of(c.FI_DEV_NVLINK_COUNT_SYMBOL_BER)
    for _ in range(2):
        reader.poll()
        assert reader.gpu.static["nvlink_plan"] is new
    assert reader.asked_of(c.FI_DEV_NVLINK_COUNT_SYMBOL_BER) == asked


def test_nothing_is_asked_while_nvml_is_down(make: Any) -> None:
    reader = make()
    reader.poll()
    reader.one.session.mark_down(NvmlError(Return.DRIVER_NOT_LOADED, "nvmlInit"))
    calls = reader.lib.calls["nvmlDeviceGetFieldValues"]
    snap = reader.poll(0.0)
    assert reader.lib.calls["nvmlDeviceGetFieldValues"] == calls
    assert nvlink_families(snap) == set() and snap.readings.nvlink == {}
    assert reader.nvlink.errors() == 0


def _field_values_fail(name: str, index: int | None) -> int | None:
    return int(Return.UNKNOWN) if name == "nvmlDeviceGetFieldValues" else None


def test_a_failed_field_values_call_is_named_and_the_totals_hold(
        make: Any, caplog: pytest.LogCaptureFixture) -> None:
    reader = make(**ERRING)
    first = reader.poll(10.0)
    reader.lib.inject_error = _field_values_fail
    snap = reader.poll(10.0)
    assert "GPU 0: reading field_values failed: " in caplog.text
    assert reader.nvlink.errors() == 1
    # Nothing read this poll: no per-link series, no count of active links,
    # and the totals at their last readings (a dip would read as a reset).
    assert nvlink_families(snap) == {
        "gpu_nvlink_errors_all_links_total", "gpu_nvlink_bytes_all_links_total",
        "gpu_nvlink_links"}
    for name, label in (("gpu_nvlink_errors_all_links_total", "type"),
                        ("gpu_nvlink_bytes_all_links_total", "direction")):
        assert totals(snap, name, label) == totals(first, name, label)


def test_a_failed_link_count_call_is_named_and_asked_again(
        make: Any, caplog: pytest.LogCaptureFixture) -> None:
    reader = make()
    reader.lib.inject_error = _field_values_fail
    assert nvlink_families(reader.poll()) == set()
    assert "GPU 0: reading nvlink_count failed: " in caplog.text
    assert reader.nvlink.errors() == 1
    reader.lib.inject_error = None
    assert reader.poll().get("gpu_nvlink_links", gpu="0") == LINKS

