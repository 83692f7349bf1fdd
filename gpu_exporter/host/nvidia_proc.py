"""The NVIDIA driver's own /proc files: ``driver/nvidia/gpus/<bus id>/information``
gives each GPU's device minor (``/dev/nvidia<minor>``), the number by which
NVIDIA's DRA driver names a GPU (``gpu-<minor>``). NVML numbers GPUs by PCI
order and the driver its minors by probe order: the two usually agree and
need not."""

from __future__ import annotations

import os
import re
from pathlib import Path

# The file is a dozen short lines; anything longer is not it.
_LIMIT = 4096
_MINOR = re.compile(r"^Device Minor:\s*(\d{1,4})\s*$", re.M | re.ASCII)
_BUS = re.compile(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])", re.ASCII)


def proc_bus_id(nvml_bus_id: str) -> str | None:
    """``00000000:18:00.0`` as the driver's /proc directory names it: ``0000:18:00.0``."""
    m = _BUS.fullmatch(nvml_bus_id.strip())
    if m is None or int(m.group(1), 16) > 0xFFFF:
        return None
    return (f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}."
            f"{m.group(4)}")


def device_minor(procfs: Path | str, nvml_bus_id: str) -> int | None:
    """The GPU's device minor, or None where the file is missing, unreadable
    or says none."""
    bus = proc_bus_id(nvml_bus_id)
    if bus is None:
        return None
    path = f"{os.fspath(procfs)}/driver/nvidia/gpus/{bus}/information"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, _LIMIT + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > _LIMIT:
        return None
    m = _MINOR.search(data.decode("utf-8", errors="replace"))
    return int(m.group(1)) if m else None
