"""How often the reads that cost the most are taken: one source for the
collectors and for the metric help texts that tell users about it.

Measured on an H100 80GB HBM3 (driver 580.159.04); see BENCHMARKS.md "Measured
on a real H100" and the collectors' docstrings for the costs behind each.
"""

from __future__ import annotations

# Slow-changing facts and costly counters (ECC, remapped rows, modes,
# application clocks, energy, PCIe replay and byte counters): every N polls.
SLOW_READ_EVERY_POLLS = 10
# NVML's utilization and SM clock sample buffers (the driver keeps 14 s).
SAMPLES_EVERY_S = 5.0
# NVML's per-process utilization samples.
PROCESS_SAMPLES_EVERY_S = 5.0
