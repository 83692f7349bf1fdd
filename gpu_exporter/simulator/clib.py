"""A stand-in for ``libnvidia-ml.so.1``: C-callable functions (ctypes
``CFUNCTYPE``) with NVML's C signatures, put where pynvml looks for the loaded
library. pynvml's own wrappers, versioned structs, size queries and error
mapping then run unchanged against the simulated node.

The structs are written from ``nvml.h`` independently of pynvml's, so a layout
disagreement between the binding and the header would show up as wrong values
in the tests rather than pass silently.

The library is split along NVML's own areas under ``simulator/libnvml/``; each
area registers its functions in the shared table when imported, which this
module does for all of them.
"""

from __future__ import annotations

# Imported for the functions they register in the table.
from gpu_exporter.simulator.libnvml import (  # noqa: F401
    device,
    events,
    fabric,
    gpm,
    mig,
    nvlink,
    processes,
    samples,
    system,
)
from gpu_exporter.simulator.libnvml.table import (
    FUNCTIONS,
    MIG_FUNCTIONS,
    STRUCTS,
    FakeNvmlLibrary,
)

__all__ = ["FUNCTIONS", "MIG_FUNCTIONS", "STRUCTS", "FakeNvmlLibrary"]
