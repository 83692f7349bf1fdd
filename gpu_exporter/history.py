"""The last 15 minutes of each GPU, kept in memory for the node page's charts.

A ring of fixed size: one slot per poll, ``capacity`` slots (15 minutes at the
poll interval the exporter started with), allocated once. Each poll overwrites
the oldest slot, so memory never grows, however long the exporter runs, and the
GPUs kept are bounded too (``MAX_GPUS``; a GPU not seen for a whole window
gives its place back). Values are 32-bit floats (NaN: not read that poll), the
shared timestamps 64-bit: at the default 1 s interval 28,800 bytes per GPU
(8 series x 900 slots x 4 bytes) and 7,200 bytes shared, 237,600 bytes for 8
GPUs; tests/test_history.py polls 10,000 times and finds the same bytes.

Written by the poll thread after each poll (a snapshot listener), read by the
HTTP thread when it renders the page: both under one lock, and a reader gets
copies, never the live arrays.
"""

from __future__ import annotations

import math
import threading
from array import array
from dataclasses import dataclass

from gpu_exporter.poll.readings import GpmReading, GpuReading
from gpu_exporter.poll.snapshot import Snapshot

WINDOW_S = 15 * 60.0
# Bounds the ring whatever the interval: 15 min at 0.25 s at most, at least a
# minute of polls.
MAX_SLOTS = 3600
MIN_SLOTS = 60
# More GPU indexes than any node has: a misbehaving library that invents new
# indexes cannot grow the history without bound.
MAX_GPUS = 64

# What is kept per poll and GPU, in base units (ratios, watts, hertz, °C).
SERIES = ("utilization", "sm_active", "power_watts", "power_limit_watts", "sm_clock_hz",
          "temperature_celsius", "pcie_generation", "pcie_width")
_NAN = float("nan")


def slots_for(interval: float) -> int:
    """How many polls fill the window at ``interval`` seconds, within the bounds."""
    return max(MIN_SLOTS, min(MAX_SLOTS, math.ceil(WINDOW_S / max(interval, 1e-3))))


def _values(r: GpuReading, gpm: GpmReading | None) -> tuple[float | None, ...]:
    return (r.utilization, gpm.sm_active if gpm is not None else None, r.power_watts,
            r.power_limit_watts, r.clocks_hz.get("sm"), r.temperature_celsius,
            r.pcie_generation, r.pcie_width)


@dataclass(frozen=True)
class Window:
    """One GPU's kept polls, oldest first: the unix times and, per series, the
    values (None where it was not read)."""

    times: tuple[float, ...]
    series: dict[str, tuple[float | None, ...]]


class History:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("the history needs at least one slot")
        self.capacity = capacity
        self._times = array("d", [_NAN]) * capacity
        self._gpus: dict[int, array[float]] = {}  # len(SERIES) * capacity values each
        self._last_seen: dict[int, int] = {}  # GPU index -> poll count when last read
        self._next = 0  # the slot the next poll writes
        self._polls = 0
        self._lock = threading.Lock()

    def record(self, snap: Snapshot) -> None:
        """Keep this poll's readings (a Poller listener)."""
        gpus = snap.readings.gpus or {}
        gpm = snap.readings.gpm or {}
        cap = self.capacity
        with self._lock:
            slot = self._next
            self._times[slot] = snap.timestamp
            for index, reading in gpus.items():
                values = self._gpus.get(index)
                if values is None:
                    if len(self._gpus) >= MAX_GPUS:
                        continue
                    values = self._gpus[index] = array("f", [_NAN]) * (len(SERIES) * cap)
                self._last_seen[index] = self._polls
                for i, v in enumerate(_values(reading, gpm.get(index))):
                    values[i * cap + slot] = _NAN if v is None else v
            for index, values in self._gpus.items():
                if index not in gpus:
                    for i in range(len(SERIES)):
                        values[i * cap + slot] = _NAN
            # A GPU absent for a whole window has nothing left to show.
            for index in [i for i, seen in self._last_seen.items()
                          if self._polls - seen >= cap]:
                del self._gpus[index], self._last_seen[index]
            self._next = (slot + 1) % cap
            self._polls += 1

    def gpus(self) -> list[int]:
        with self._lock:
            return sorted(self._gpus)

    def window(self, index: int, points: int | None = None) -> Window | None:
        """GPU ``index``'s kept polls, oldest first; None for a GPU never kept.
        With ``points``, at most that many, evenly spaced, the newest always in
        (a chart needs no more than it has pixels)."""
        with self._lock:
            values = self._gpus.get(index)
            if values is None:
                return None
            cap = self.capacity
            filled = min(self._polls, cap)
            picked = range(filled)
            if points is not None and filled > points > 1:
                step = (filled - 1) / (points - 1)
                picked = sorted({round(k * step) for k in range(points)})  # type: ignore[assignment]
            order = [(self._next - filled + k) % cap for k in picked]
            times = tuple(self._times[s] for s in order)
            series = {}
            for i, name in enumerate(SERIES):
                base = i * cap
                series[name] = tuple(None if math.isnan(v := values[base + s]) else float(v)
                                     for s in order)
        return Window(times, series)

    def nbytes(self) -> int:
        """The bytes the rings hold (the arrays' buffers; the fixed per-object
        overhead of a few hundred bytes is not counted)."""
        with self._lock:
            return (self._times.buffer_info()[1] * self._times.itemsize
                    + sum(v.buffer_info()[1] * v.itemsize for v in self._gpus.values()))
