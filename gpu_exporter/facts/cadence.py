"""How often each NVML read is taken: one source for the collectors and for
the metric help texts that tell users about it.

Measured on an H100 80GB HBM3 (driver 580.159.04); see BENCHMARKS.md "Measured
on a real H100" and the collectors' docstrings for the costs behind each. Every
NVML call is a round trip into the driver: the budget is a handful of calls
per GPU and poll (tests/nvml/test_call_budget.py holds it).
"""

from __future__ import annotations

from enum import Enum

# Costly counters (energy, PCIe replay and byte counters, ECC aggregates),
# remapped rows, the fabric probe, and the states that follow the load (PCIe
# link, P-state, memory clock): every N polls. A rate() over a counter is
# unchanged by it.
SLOW_READ_EVERY_POLLS = 10
# Facts that change only across a reset, a reconfiguration or an event (ECC
# mode, persistence, MIG mode, application clocks): every N polls, and at once
# after an NVML event on the GPU (an Xid, an ECC error), a lost GPU that
# answers again, or a reload. Remapped rows and the fabric probe change
# without an event to wait on: they are read with the slow reads.
FACT_READ_EVERY_POLLS = 30
# NVML's utilization and SM clock sample buffers (the driver keeps 14 s), and
# GPM's samples: the GPM metrics are the averages of the interval between two
# samples, so a sample every 5 s loses nothing (the activity counters add each
# interval times its length).
SAMPLES_EVERY_S = 5.0
# NVML's per-process utilization samples.
PROCESS_SAMPLES_EVERY_S = 5.0


class Every(Enum):
    """How often one value of a GPU is read; between reads the last one is
    exported again."""

    POLL = "every poll"
    # SLOW_READ_EVERY_POLLS, and at once when the GPU turns busy or idle: an
    # idle GPU's PCIe link, P-state and memory clock step down and come back
    # with the first work.
    LOAD = "when the GPU turns busy or idle"
    SLOW = "slow"  # SLOW_READ_EVERY_POLLS
    FACT = "fact"  # FACT_READ_EVERY_POLLS, and after an event
    ONCE = "once"  # once per GPU: limits, maxima, thresholds

    @property
    def polls(self) -> int:
        """Polls between two reads (ONCE: never again)."""
        return _POLLS[self]


_POLLS = {Every.POLL: 1, Every.LOAD: SLOW_READ_EVERY_POLLS, Every.SLOW: SLOW_READ_EVERY_POLLS,
          Every.FACT: FACT_READ_EVERY_POLLS, Every.ONCE: 2**62}

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
