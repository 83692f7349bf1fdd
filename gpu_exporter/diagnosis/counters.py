"""The readings of the counters and levels the rules ask the increase of
(``Trend.increase``), kept per GPU over the diagnosis window, and whether
each has held one value over all it keeps: a verdict read from such a one
stands until the reading moves (engine.py). The host's readings are kept
once per node (``NODE``): every GPU's rules read the same host."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# Where the host's readings are kept: one place for the node, not one a GPU.
NODE = -1


class Counter:
    """One name's readings on one GPU, oldest first, and since when (the
    monotonic time of its first reading) it has held its last value."""

    __slots__ = ("readings", "steady_from")

    def __init__(self, now: float) -> None:
        # A list, not a deque: most counters keep two readings (an idle one is
        # folded, keep()), and a deque takes a 64-slot block (some 600 bytes)
        # however few it holds; a GPU keeps some 70 of them. Dropping the
        # oldest is a short move: a window holds a few hundred polls at most.
        self.readings: list[tuple[float, float]] = []
        self.steady_from = now

    def steady(self) -> bool:
        """Every reading kept is the last value, and there are two: the
        increase stays 0 and the readings a rule reads keep their shape (one
        reading alone has no span) until a reading moves."""
        readings = self.readings
        return len(readings) > 1 and readings[0][0] >= self.steady_from


class Counters:
    """Every GPU's counters, each asked at the GPU and time ``at`` names."""

    def __init__(self, node_names: Iterable[str] = ()) -> None:
        self._kept: dict[tuple[int, str], Counter] = {}
        # The host's readings a rule reads over the window: kept once per
        # node, every poll (keep_node()), whichever GPU's rules are judged;
        # each kept as a series, as a rule that reads it at all reads it.
        self.node_names = frozenset(node_names)
        # The names a rule reads the readings of (``series``), not only their
        # increase: those keep a reading every poll (see keep()).
        self.read_as_series: set[str] = set(self.node_names)
        # Grows with read_as_series: a name read as series from now on stops
        # being folded on every GPU (engine.py judges again what read it).
        self.series_version = 0
        # (counter, name, value) of each increase asked since at(), and the
        # node's counters asked (kept by keep_node(), not by the asking).
        self.consulted: list[tuple[Counter, str, float]] = []
        self.node_consulted: list[Counter] = []
        self._gpu = 0
        self._now = 0.0
        self._window = 0.0
        # Each name's last reading kept, handed on to the next GPU that keeps
        # the same one (the host's readings, kept by every GPU): readings
        # compared across GPUs (workload_rules.steady_climb) then match at a
        # glance, one object for all.
        self._last: dict[str, tuple[float, float]] = {}

    def at(self, gpu: int, now: float, window: float) -> None:
        self._gpu, self._now, self._window = gpu, now, window

    def keep_node(self, values: Mapping[str, float | None], now: float,
                  window: float) -> None:
        """This poll's reading of each of the host's names (None: not read)."""
        for name, value in values.items():
            if value is not None:
                self.keep(self._node_counter(name, now), name, value, now, window)

    def _node_counter(self, name: str, now: float) -> Counter:
        counter = self._kept.get((NODE, name))
        if counter is None:
            counter = self._kept[NODE, name] = Counter(now)
        return counter

    def increase(self, name: str, value: float | None) -> float | None:
        """How far ``value`` rose over the window (from the first reading
        kept; a counter that went back was reset and starts over)."""
        if value is None:
            return None
        if name in self.node_names:
            counter = self._node_counter(name, self._now)
            if not counter.readings or counter.readings[-1][0] != self._now:
                self.keep(counter, name, value, self._now, self._window)  # not kept yet
            self.node_consulted.append(counter)
        else:
            key = (self._gpu, name)
            own = self._kept.get(key)
            if own is None:
                own = self._kept[key] = Counter(self._now)
            counter = own
            self.consulted.append((counter, name, value))
            self.keep(counter, name, value, self._now, self._window)
        first = counter.readings[0][1]
        return value if value < first else value - first  # a reset starts over

    def keep(self, counter: Counter, name: str, value: float, now: float,
             window: float) -> None:
        """Add the reading ``value`` at ``now`` to ``counter``'s and drop those
        older than the window."""
        series = counter.readings
        if not series or series[-1][1] != value:
            counter.steady_from = now
        if (len(series) > 1 and series[-1][1] == value and series[-2][1] == value
                and name not in self.read_as_series):
            # The level has not moved: the last reading's time moves to now
            # instead of a reading a poll. The increase over the window is
            # the same (the first reading kept is the value in force at the
            # window's start), and a GPU keeps two readings of each idle
            # counter (18 NVLink links x 3 kinds on an H100) instead of a
            # window's. Names a rule reads the readings of keep every poll:
            # a steady climb's span runs from the first poll in the window.
            # A rule reads them in the poll of its first increase, before a
            # third reading could be folded.
            series[-1] = (now, value)
        else:
            last = self._last.get(name)
            if (last is not None and last[0] is now and type(last[1]) is type(value)
                    and last[1] == value and value != 0):  # 0.0 and -0.0 read apart
                series.append(last)
            else:
                series.append(last := (now, value))
                self._last[name] = last
        oldest = now - window
        if len(series) > 1 and series[1][0] <= oldest:
            # Drop every reading but the last one at or before the window's start.
            cut = 1
            while cut + 1 < len(series) and series[cut + 1][0] <= oldest:
                cut += 1
            del series[:cut]

    def series(self, name: str, gpu: int | None = None) -> tuple[tuple[float, float], ...]:
        """The readings kept of ``name`` on the GPU asked at (or ``gpu``):
        from now on, one every poll."""
        if name not in self.read_as_series:
            self.read_as_series.add(name)
            self.series_version += 1
        at = NODE if name in self.node_names else self._gpu if gpu is None else gpu
        counter = self._kept.get((at, name))
        return () if counter is None else tuple(counter.readings)

    def __getitem__(self, key: tuple[int, str]) -> list[tuple[float, float]]:
        """The readings kept of (GPU, name)."""
        return self._kept[key].readings
