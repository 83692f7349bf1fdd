"""Xids by who must act: the tier table.

Every Xid the driver reports lands in one tier, and the tier decides who is
told:

- ``hardware``: the GPU, its memory, its links or the driver's firmware failed.
  On-call and the hardware team act (drain, reset, RMA): the alert is
  critical and pages.
- ``application``: the job faulted (an illegal address, an engine exception on
  the job's own work). The job's owner acts (fix and restart the job): the
  alert is a warning routed to the job's owner and never pages.
- ``informational``: the driver reports something that needs no action by
  itself. Severity info: dashboards and the Alertmanager UI only.

Source: NVIDIA's Xid catalog for Ampere and newer GPUs, "Analyzing Xid Errors
with the Xid Catalog" (CATALOG_URL below; the spreadsheet's sheet "Catalog":
each code's mnemonic, description and its columns "Resolution Bucket
(Immediate Action)" and "(Investigatory Action)", rows for A100, H100, B100 and
GB200), and NVIDIA's A100 memory error management guide
(https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/) for the ECC and
row-remapping codes (48, 63, 64, 94, 95). The catalog is one page for every
current driver branch, not versioned per branch, and NVIDIA's Xid
documentation states that each code's meaning is consistent across driver
versions (https://docs.nvidia.com/deploy/xid-errors/introduction.html).
tests/diagnosis/test_policy_tables.py holds every code below to its catalog row (copied
there by hand, as published in October 2025): check it, and any code a new
branch adds, against the spreadsheet the catalog page offers.

The tier is who owns the *cause*, and the catalog's immediate action is the
first step: restart the application (the job's owner), reset the GPU, restart
the machine or contact support (on-call and hardware), ignore (nobody). Where
the two differ the entry says why, from the catalog's own description of the
code: a contained ECC error (94) kills only the job that touched the memory, so
the catalog's immediate action is to restart that job, but the fault is in the
GPU's memory and a repeat leads to an RMA, so it pages; a row remap (63) and a
high single-bit error rate (92) need nothing at once (IGNORE) but are the
GPU's memory failing; 43 and 45 need nothing for the GPU but end the job. 61
is unused on Ampere and newer (the catalog's CONTACT_SUPPORT); older GPUs
report it as a micro-controller fault. A code not in this table is reported in
the informational tier (seen on dashboards, paging no one) with its number,
so that a code a newer driver adds is visible without waking anyone for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

XidTier = Literal["hardware", "application", "informational"]
TIERS: tuple[XidTier, ...] = ("hardware", "application", "informational")


@dataclass(frozen=True)
class Xid:
    code: int
    tier: XidTier
    meaning: str  # the catalog's description, in plain words
    action: str  # the catalog's immediate action, as the runbook tells it


XIDS: tuple[Xid, ...] = (
    # --- application: the job's owner acts (catalog: RESTART_APP, then check
    # the application / CUDA code) ---
    Xid(13, "application", "graphics engine exception: usually an out-of-range access or "
        "an illegal instruction in the job's kernel",
        "restart the job; run it under compute-sanitizer to find the faulting kernel"),
    Xid(31, "application", "GPU memory page fault: the job accessed an address it does "
        "not own (an illegal address)",
        "restart the job; check it for illegal memory accesses (compute-sanitizer)"),
    Xid(43, "application", "GPU stopped processing the job's channel (the driver reset "
        "it after a fault in the job)",
        "restart the job; the GPU itself stays usable"),
    Xid(45, "application", "preemptive cleanup: the driver tore down the job's channels "
        "because it was killed or exited after an earlier error",
        "restart the job; look for an earlier Xid on the GPU that explains it"),
    Xid(68, "application", "video decoder (NVDEC) exception, usually on a malformed "
        "input stream",
        "restart the job; check the stream it was decoding"),
    Xid(69, "application", "graphics engine class error: the job sent the engine an "
        "invalid command",
        "restart the job; check the application and the CUDA version it was built for"),
    # --- hardware or driver: on-call and hardware act (catalog: RESET_GPU,
    # node reboot, drain, contact support) ---
    Xid(48, "hardware", "double-bit (uncorrectable) ECC error in GPU memory",
        "drain the node and reset the GPU; RMA when it repeats"),
    Xid(61, "hardware", "internal micro-controller breakpoint or warning",
        "drain the node and reset the GPU; contact support when it repeats"),
    Xid(62, "hardware", "internal micro-controller halt",
        "drain the node and reset the GPU; contact support when it repeats"),
    Xid(63, "hardware", "a memory row was marked for remapping (or a page for "
        "retirement); it takes effect at the next GPU reset",
        "reset the GPU at the next drain to activate the remap"),
    Xid(64, "hardware", "recording a row remap or page retirement failed",
        "drain the node and reset the GPU; RMA when it repeats"),
    Xid(74, "hardware", "NVLink error", "drain the node and reset the GPU; check the "
        "NVLink/NVSwitch fabric when it repeats"),
    Xid(79, "hardware", "the GPU has fallen off the bus",
        "drain the node and reboot it; check the GPU's power and PCIe seating; RMA when "
        "it repeats"),
    Xid(92, "hardware", "high single-bit ECC error rate",
        "watch the GPU's ECC counters and row remaps; drain and reset when they climb"),
    Xid(94, "hardware", "contained ECC error: only the job that touched the memory was "
        "stopped",
        "the job's owner restarts the job; reset the GPU at the next drain; RMA when it "
        "repeats"),
    Xid(95, "hardware", "uncontained ECC error: every job on the GPU may be affected",
        "drain the node and reset the GPU; RMA when it repeats"),
    Xid(119, "hardware", "GSP (GPU firmware) RPC timeout",
        "drain the node and reset the GPU; update the driver when it repeats"),
    Xid(120, "hardware", "GSP (GPU firmware) error",
        "drain the node and reset the GPU; update the driver when it repeats"),
    Xid(154, "hardware", "the driver changed the GPU's recovery action (reset, reboot "
        "or drain peer-to-peer)",
        "do what nvidia-smi -q reports as the GPU's recovery action"),
    # --- informational: nothing to do by itself ---
    Xid(160, "informational", "channel retirement event: the driver retired a channel "
        "(B100 and GB200)", "none at once; when it repeats, look for the software that "
        "uses the channel"),
)

BY_CODE: dict[int, Xid] = {x.code: x for x in XIDS}


def tier_of(code: int, table: dict[int, XidTier] | None = None) -> XidTier:
    """The tier of ``code``; a code not in the table is informational."""
    tiers = table if table is not None else {x.code: x.tier for x in XIDS}
    return tiers.get(code, "informational")


def codes(tier: XidTier) -> tuple[int, ...]:
    """The table's codes of one tier, in order."""
    return tuple(sorted(x.code for x in XIDS if x.tier == tier))


def _check() -> None:
    if len(BY_CODE) != len(XIDS):
        raise ImportError("Xid tier table: a code is listed twice")


_check()
