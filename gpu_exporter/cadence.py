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

# The default time between polls. Everything that accumulates is exported as a
# counter, so the interval no longer decides what a rate() over a scrape window
# sees; what it still decides is how fresh the gauges are and how many polls
# the diagnosis judges. 2 s is the longest interval at which nothing is lost
# between two polls: NVML's power sample buffer holds 2.4 s (119 x 20 ms,
# measured on an H100) and its utilization buffer 14 s, and the diagnosis'
# 30 s window still holds 15 polls, so its 0.9 hold ratio tolerates one odd
# poll. Half the polls of a 1 s interval halve the exporter's CPU.
DEFAULT_POLL_INTERVAL_S = 2.0


def stale_after(interval: float) -> float:
    """How old the newest poll may be before it no longer speaks for now: the
    health endpoint answers 503 past it, and /diagnosis, the node page and
    diagnose call the exporter blind."""
    return max(10 * interval, 30.0)
