"""The fault memory's bounds and the kinds of fault it keeps: one place for
the memory (memory.py) and the file's validation (memory_file.py)."""

from __future__ import annotations

from typing import Literal

from gpu_exporter.settings import safefile

FaultKind = Literal["xid", "ecc_uncorrectable", "row_remap_pending", "row_remap_failed",
                    "gpu_lost"]
# Bounds: a node has at most a few dozen GPUs over its life, and a GPU with
# more than a couple of dozen distinct faults is long due for replacement.
# A fault record is at most about 190 bytes of JSON, so the file stays far
# below its size bound (64 x 24 x 190 = 292 KB < 512 KiB).
MAX_GPUS = 64
MAX_FAULTS_PER_GPU = 24
# Of them, records of a process's application Xid: each is at most some 420
# bytes (its name and owner as well), so a GPU's records stay under 7 KB
# (16 x 190 + 8 x 420), the file under 440 KB.
MAX_PROCESS_FAULTS_PER_GPU = 8
MAX_PROCESS_CHARS = 80  # "name (pid N)": a 64-character name and the pid
MAX_OWNER_CHARS = 160
MAX_FILE_BYTES = 512 * 1024
# Faults older than this are forgotten: the finding of a fault that came back
# ends with them (or with the GPU, when it is replaced).
RETENTION_S = 30 * 86400.0
STATE_FILE = safefile.FileKind("state file", MAX_FILE_BYTES, 0, 8)
VERSION = 1
# What a GPU's life starts with when the kernel gives no boot id.
NO_BOOT_ID = "00000000-0000-0000-0000-000000000000"
