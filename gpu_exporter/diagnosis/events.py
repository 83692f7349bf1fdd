"""Which diagnosis row owns each NVML event type (gpu_events_total's ``type``).

An event is no verdict by itself: it says that what a row judges has just
changed, and the Xid reader has the GPU's readers read that again at once
(``collectors/xid.py``, ``GpuReads.refresh``), so the row judges the fresh reading
in the poll after the event instead of one held for up to ten polls. The row
named here is the one whose signal the event concerns; None where no row is
concerned (a power-source change is no fault of the GPU's).
"""

from __future__ import annotations

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.table import Row

EVENT_ROWS: dict[str, Row | None] = {
    "xid": t.XID,
    # Correctable errors, and a storm of them: the volatile count moves and
    # the aggregates and remapped rows are read at once (memory errors).
    "ecc_single_bit": t.ROW_REMAP_PENDING,
    "ecc_single_bit_storm": t.ROW_REMAP_PENDING,
    "ecc_double_bit": t.ECC_UNCORRECTABLE,
    # A DRAM row retired (a remap now pending), or the retirement failed.
    "dram_retirement": t.ROW_REMAP_PENDING,
    "dram_retirement_failure": t.ECC_UNCORRECTABLE,
    # Poisoned memory: contained (non-fatal) or not; the uncorrectable counts.
    "poison_non_fatal": t.ECC_UNCORRECTABLE,
    "poison_fatal": t.ECC_UNCORRECTABLE,
    # The GPU stopped answering: the device reader finds it lost.
    "gpu_unavailable": t.GPU_LOST,
    # The driver set a recovery action (the recovery-action rows; the
    # gpu_reset row stands for the family: which one fires is the action's).
    "recovery_action": t.RECOVERY_GPU_RESET,
    "power_source_change": None,
}
