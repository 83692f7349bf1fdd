"""The policy tables held to what stands outside them.

The Xid tiers (gpu_exporter/facts/xids.py) against NVIDIA's Xid catalog for Ampere
and newer GPUs, "Analyzing Xid Errors with the Xid Catalog"
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, the
spreadsheet's sheet "Catalog"; the rows below as published in the catalog of
October 2025): for each code the exporter tiers, the catalog's mnemonic,
description and its two resolution buckets, copied here by hand. A tier is
who must act on the cause: by default what the catalog's immediate action
asks for (restart the application: the job's owner; reset the GPU, restart
the machine, contact support or NVIDIA's workflows for ECC and NVLink: on-call
and hardware; ignore: nobody). Where the cause's owner differs from the
immediate action, the catalog's own description says whose the cause is, and
the reason is written beside it. A table changed by hand, a code tiered
without its catalog row, or the runbook and rules following a wrong table,
fail here whatever the generated files say.

The rows of the diagnosis table that report a fact (an error that happened, a
GPU gone, a setting found) by behaviour: on the real exporter on the virtual
clock, the finding is on at the first poll after the event, not a diagnosis
window later."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.facts import xids
from gpu_exporter.facts.cadence import SLOW_READ_EVERY_POLLS
from gpu_exporter.facts.xids import BY_CODE, TIERS, XIDS, XidTier, codes, tier_of
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.settings.thresholds import DiagnosisConfig
from gpu_exporter.simulator import load_scenario
from gpu_exporter.simulator.model import Scenario
from tests.simnode import SimRun


@dataclass(frozen=True)
class CatalogRow:
    mnemonic: str
    description: str
    immediate: str  # Resolution Bucket (Immediate Action)
    investigatory: str  # Resolution Bucket (Investigatory Action)


CATALOG: dict[int, CatalogRow] = {
    13: CatalogRow("ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP",
                   "WORKFLOW_XID_13"),
    31: CatalogRow("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault",
                   "RESTART_APP", "WORKFLOW_XID_31"),
    43: CatalogRow("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing",
                   "IGNORE", "CONTACT_SUPPORT"),
    45: CatalogRow("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
                   "Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45",
                   "Solo: RESTART_FM / Not Solo: IGNORE (follow other Xid)"),
    48: CatalogRow("ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48",
                   "WORKFLOW_XID_48"),
    # Unused on Ampere and newer; older GPUs report it (the Volta-era Xid list:
    # internal micro-controller breakpoint/warning, a hardware error).
    61: CatalogRow("PMU_BREAKPOINT", "Unused", "CONTACT_SUPPORT", ""),
    62: CatalogRow("PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU",
                   "CONTACT_SUPPORT"),
    63: CatalogRow("INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE",
                   "IGNORE"),
    64: CatalogRow("INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure",
                   "RESET_GPU", "CONTACT_SUPPORT"),
    68: CatalogRow("ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", "RESTART_APP",
                   "CONTACT_SUPPORT"),
    69: CatalogRow("ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP",
                   "CHECK_APP/CUDA"),
    74: CatalogRow("NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT"),
    79: CatalogRow("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus",
                   "RESTART_BM", "CONTACT_SUPPORT"),
    92: CatalogRow("EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE",
                   "CONTACT_SUPPORT"),
    94: CatalogRow("ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP",
                   "IGNORE (sympathetic)"),
    95: CatalogRow("ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU",
                   "IGNORE (sympathetic)"),
    119: CatalogRow("GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU", "INVESTIGATE_SW"),
    120: CatalogRow("GSP_ERROR", "GSP Error", "RESET_GPU", "INVESTIGATE_SW"),
    154: CatalogRow("GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154",
                    "N/A Informational only regarding another Xid"),
    160: CatalogRow("CHANNEL_RETIREMENT_EVENT", "Channel Retirement Event", "IGNORE",
                    "INVESTIGATE_SW"),
}

# Who acts on the catalog's immediate action.
ACTION_TIER: dict[str, XidTier] = {
    "RESTART_APP": "application",  # the job's owner restarts the job
    "RESET_GPU": "hardware",  # a GPU reset: drain, on-call
    "RESTART_BM": "hardware",  # restart the bare-metal machine
    "CONTACT_SUPPORT": "hardware",  # on-call opens the case with NVIDIA
    "WORKFLOW_XID_48": "hardware",  # NVIDIA's DBE workflow: reset, then remap or RMA
    "WORKFLOW_NVLINK_ERR": "hardware",  # NVIDIA's NVLink workflow: reset, check the fabric
    "XID_154": "hardware",  # do the recovery action the driver names (reset, reboot, drain)
    "IGNORE": "informational",
}

# Codes whose cause belongs to someone other than the immediate action's actor,
# with the catalog's words that say whose.
BY_CAUSE: dict[int, tuple[XidTier, str]] = {
    43: ("application", "'GPU stopped processing': the driver reset the job's channel after "
                        "the job's fault; nothing to do for the GPU (IGNORE), the job died"),
    45: ("application", "'Preemptive cleanup, due to previous errors': the job's channels "
                        "were torn down; its owner restarts it, and the earlier Xid that "
                        "caused it ('follow other Xid') is tiered by its own code"),
    63: ("hardware", "'GPU memory remapping event': a row of the GPU's own memory failed; "
                     "nothing to do at once, the remap takes effect at the next GPU reset"),
    92: ("hardware", "'High single-bit ECC error rate': the GPU's memory is wearing; "
                     "investigatory action CONTACT_SUPPORT"),
    94: ("hardware", "'Contained memory error': an uncorrectable error in the GPU's own "
                     "memory; RESTART_APP restarts the job it killed, the memory stays bad "
                     "until the GPU is reset and the row remapped"),
}


def expected_tier(code: int) -> XidTier:
    if code in BY_CAUSE:
        return BY_CAUSE[code][0]
    return ACTION_TIER[CATALOG[code].immediate]


def test_every_tiered_code_has_its_catalog_row() -> None:
    assert set(BY_CODE) == set(CATALOG), "a code tiered without its catalog row (or the reverse)"
    assert set(BY_CAUSE) <= set(CATALOG)
    for code, (tier, _) in BY_CAUSE.items():
        # A reason is needed only where the cause's owner is not the immediate
        # action's: a stale entry here hides a change of the catalog.
        assert tier != ACTION_TIER.get(CATALOG[code].immediate), code


@pytest.mark.parametrize("code", sorted(CATALOG))
def test_each_code_is_in_the_tier_the_catalog_gives_it(code: int) -> None:
    want = expected_tier(code)
    assert BY_CODE[code].tier == want
    assert tier_of(code) == want
    assert code in codes(want)
    assert all(code not in codes(t) for t in TIERS if t != want)


def test_a_code_the_catalog_does_not_tier_here_is_informational() -> None:
    for code in (1, 8, 46, 109, 140, 999):
        assert code not in BY_CODE
        assert tier_of(code) == "informational"


def test_the_diagnosis_defaults_are_the_catalog_tiers() -> None:
    """The exporter's default configuration, which the rules, the runbook and
    the dashboards quote, carries the same codes."""
    d = DiagnosisConfig()
    assert set(d.hardware_xids) == {c for c in CATALOG if expected_tier(c) == "hardware"}
    assert set(d.application_xids) == {c for c in CATALOG
                                       if expected_tier(c) == "application"}


def test_every_meaning_names_what_the_catalog_describes() -> None:
    """The runbook's words for a code are about the event the catalog names."""
    words = {13: "graphics engine", 31: "page fault", 43: "stopped processing",
             45: "cleanup", 48: "double-bit", 61: "micro-controller", 62: "micro-controller",
             63: "remap", 64: "remap", 68: "nvdec", 69: "class error", 74: "nvlink",
             79: "fallen off the bus", 92: "single-bit", 94: "contained", 95: "uncontained",
             119: "gsp", 120: "gsp", 154: "recovery action", 160: "channel"}
    assert set(words) == set(CATALOG)
    for x in XIDS:
        assert words[x.code] in x.meaning.lower(), (x.code, x.meaning)


# --- Xids by behaviour: the row of the code's tier, on at the first poll --------------------


def _xid_node(code: int) -> Scenario:
    return Scenario(name=f"xid-{code}", node={"gpus": 1, "profile": "h100-sxm5-80gb"},
                    state={"utilization": 0.9},
                    timeline=[{"at": 3.0, "gpus": [0], "set": {"xid": [code]}}])


def _on(snap: Snapshot, gpu: int) -> set[str]:
    return {f.row.key for f in snap.derived(FINDINGS) or () if f.gpu == gpu}


_XID_ROWS = {r.xid_tier: r for r in ROWS if r.xid_tier is not None}


@pytest.mark.parametrize("code", sorted(CATALOG))
def test_an_xid_is_reported_in_its_tier_at_the_first_poll_after_it(code: int) -> None:
    tier = expected_tier(code)
    with SimRun(_xid_node(code), collectors={"processes": False, "host": False}) as run:
        before = run.poll(2)
        assert not _on(before, 0) & {r.key for r in _XID_ROWS.values()}
        after = run.poll(1)
    on = _on(after, 0)
    assert _XID_ROWS[tier].key in on, (code, tier, on)
    assert not {r.key for t, r in _XID_ROWS.items() if t != tier} & on, (code, on)


# --- the rows that report a fact, by behaviour ---------------------------------------------


def _series(name: str, match: dict[str, str], holds: Callable[[float], bool]
            ) -> Callable[[Snapshot, int], bool]:
    """Whether the snapshot exports the fact for a GPU: a sample of ``name``
    with ``match`` among its labels whose value ``holds``."""

    def shown(snap: Snapshot, gpu: int) -> bool:
        return any(labels.get("gpu") == str(gpu) and holds(value)
                   and all(labels.get(k) == v for k, v in match.items())
                   for labels, value in snap.series(name))

    return shown


def _positive(v: float) -> bool:
    return v > 0


def _zero(v: float) -> bool:
    return v == 0


# Each row that reports a fact, why a window would only delay it (it never
# makes the fact untrue), and the series by which /metrics shows the fact: the
# row is on at the first poll that shows it (some facts are read on a slower
# cadence than the poll, so that poll may come a little after the event).
FACTS: dict[str, tuple[str, Callable[[Snapshot, int], bool]]] = {
    "memory_errors/ecc_uncorrectable": (
        "an uncorrectable ECC error has happened: data was lost",
        _series("gpu_ecc_errors_total", {"type": "uncorrected", "scope": "volatile"},
                _positive)),
    "memory_errors/row_remap_pending": (
        "the GPU recorded a remap that needs a reset",
        _series("gpu_row_remap_pending", {}, _positive)),
    "xid_error/driver_reported": ("the driver reported a hardware Xid",
                                  _series("gpu_xid_errors_total", {}, _positive)),
    "xid_error/application_fault": ("the driver reported that a job faulted",
                                    _series("gpu_xid_errors_total", {}, _positive)),
    "xid_error/informational": ("the driver reported an Xid",
                                _series("gpu_xid_errors_total", {}, _positive)),
    "gpu_lost/hardware": ("NVML answers that the GPU is lost", _series("gpu_up", {}, _zero)),
    "persistence_off/configuration": (
        "a setting read from the GPU", _series("gpu_persistence_mode_enabled", {}, _zero)),
    "recovery_action/gpu_reset": (
        "the driver says the GPU needs a reset",
        _series("gpu_recovery_action", {"action": "gpu_reset"}, _positive)),
    "recovery_action/node_reboot": (
        "the driver says the node needs a reboot",
        _series("gpu_recovery_action", {"action": "node_reboot"}, _positive)),
    "recovery_action/drain_p2p": (
        "the driver says peer-to-peer traffic must drain",
        _series("gpu_recovery_action", {"action": "drain_p2p"}, _positive)),
    "recovery_action/drain_and_reset": (
        "the driver says drain, then reset",
        _series("gpu_recovery_action", {"action": "drain_and_reset"}, _positive)),
}


# Facts the exporter remembers rather than reads this poll: on at the poll
# that sees the fault come back (tests/diagnosis/test_fault_memory.py times it).
REMEMBERED: dict[str, str] = {
    "fault_recurred/came_back_after_reset":
        "a fault the exporter remembered came back on the same GPU after a reset or reboot",
}


def test_every_fact_row_is_listed_and_only_those_are_immediate() -> None:
    keys = {r.key for r in ROWS}
    assert set(FACTS) | set(REMEMBERED) <= keys, (set(FACTS) | set(REMEMBERED)) - keys
    assert {r.key for r in ROWS if r.immediate} == set(FACTS) | set(REMEMBERED)


@pytest.mark.parametrize("key", sorted(FACTS))
def test_a_fact_is_on_at_the_first_poll_that_shows_it(key: str) -> None:
    """The row's built-in scenario, polled every second: never on before its
    fact is exported, on at the poll that first exports it (within a slow
    read's cadence of the scenario's event), for every GPU the scenario
    expects it on."""
    row: Row = next(r for r in ROWS if r.key == key)
    shows = FACTS[key][1]
    scenario = load_scenario(row.anchor)
    gpus = {e.gpu for e in scenario.expect or [] if (e.symptom, e.cause) == (row.symptom,
                                                                            row.cause)}
    assert gpus, f"scenario {row.anchor} expects no {key}"
    event = min((step.at for step in scenario.timeline), default=0.0)
    seen: dict[int, float] = {}
    with SimRun(scenario, collectors={"processes": False}) as run:
        snap = run.poll()
        for t in range(int(event) + 2 * SLOW_READ_EVERY_POLLS):
            for gpu in gpus - set(seen):
                on = key in _on(snap, gpu)
                assert on == shows(snap, gpu), (key, gpu, t, "on" if on else "off")
                if on:
                    seen[gpu] = t
            if len(seen) == len(gpus):
                break
            snap = run.poll(1)
    assert set(seen) == gpus, f"{key} never shown on {gpus - set(seen)}"
    assert max(seen.values()) <= event + SLOW_READ_EVERY_POLLS, seen


def test_a_site_table_decides_over_the_catalog_and_a_code_listed_twice_stops_the_import(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``diagnosis: {hardware_xids: ...}`` hands tier_of a table of its own."""
    assert tier_of(94, {94: "application"}) == "application"
    assert tier_of(13, {94: "application"}) == "informational"
    assert tier_of(94, {}) == "informational"
    xids._check()  # the table as shipped
    monkeypatch.setattr(xids, "XIDS", (*XIDS, XIDS[0]))
    with pytest.raises(ImportError) as err:
        xids._check()
    assert str(err.value) == "Xid tier table: a code is listed twice"
