"""The rows of the GPU's own links beside PCIe: its NVLink links and, on a
Grace board, its chip-to-chip (C2C) link to the CPU. ``table.py`` lists them
in the table; their rules are in ``link_rules.py``."""

from __future__ import annotations

from gpu_exporter.catalogs import board, deep
from gpu_exporter.diagnosis.row import Row

NVLINK_ERRORS = Row(
    "nvlink_errors", "link_integrity", "warning",
    "NVLink CRC, replay, recovery or uncorrected errors are climbing on the GPU's links",
    "On one of the GPU's NVLink links, within the diagnosis window ({window}): CRC errors "
    "at {nvlink_crc_errors_per_s} per second or more, or {nvlink_replays_per_window} or "
    "more replay or recovery errors (a replay resends what a CRC error spoiled; a recovery "
    "retrains the link). On NVLink 5 (Blackwell), whose links correct errors with FEC and "
    "count them instead: {nvlink_replays_per_window} or more effective errors, those FEC "
    "could not correct, which the link sends again; symbol errors FEC corrected cost "
    "nothing and are only named in the evidence. Every replay is bandwidth the job's "
    "collectives lose. The evidence names the links and their rates; a counter stopped at "
    "its maximum is named, not read as a rate.",
    "Drain the node, then reseat or replace the NVLink bridge or the cable tray the named "
    "links run through, and check the NVSwitch tray they reach; RMA the GPU or the baseboard "
    "when the errors persist.",
    ("nvidia-smi nvlink -e -i GPU", "nvidia-smi nvlink -s -i GPU"),
    "Escalate to hardware when the errors keep climbing after a reseat.",
    reads=(deep.NVLINK_ERRORS_TOTAL, deep.NVLINK_ERRORS_ALL_LINKS_TOTAL,
           board.NVLINK_FEC_ERRORS_TOTAL, board.NVLINK_FEC_ERRORS_ALL_LINKS_TOTAL,
           board.NVLINK_BIT_ERROR_RATE), boot_grace=True)

C2C_ERRORS = Row(
    "c2c_errors", "link_integrity", "warning",
    "Errors are climbing on the GPU's C2C link to its Grace CPU",
    "The GPU's NVLink chip-to-chip (C2C) link to its Grace CPU reported "
    "{c2c_errors_per_window} or more error interrupts, replays or back-to-back replays "
    "within the diagnosis window ({window}). Every replay is memory traffic to the CPU "
    "sent again. The link is on the superchip module, not a cable: a sound one reports "
    "none. A counter stopped at its maximum is named, not read as a rate.",
    "Drain the node and reset the GPU; when the errors return after the reset, RMA the "
    "superchip module (the link cannot be reseated).",
    ("nvidia-smi -q -i GPU", "dmesg -T | grep -i xid"),
    "Escalate to hardware for an RMA when the errors return after a reset.",
    reads=(board.C2C_ERRORS_TOTAL,), boot_grace=True)
