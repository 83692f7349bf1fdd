"""The host CPUs' thermal throttling, from the counters the kernel keeps for it
(Documentation/ABI/testing/sysfs-devices-system-cpu,
``/sys/devices/system/cpu/cpuX/thermal_throttle/``): how many times a core, and
the package it is on, went above its temperature limit and was slowed, and
(kernels 5.7 and newer) for how long in all (``*_throttle_total_time_ms``).

Each logical CPU's directory shows its core's counters and its package's: the
hyperthreads of one core, and every CPU of one package, show the same numbers.
Counted once per core and once per package (``topology/core_id``,
``topology/physical_package_id``), never once per logical CPU. A host whose
CPUs keep no such counters (AMD, Arm, most virtual machines) has no
``thermal_throttle`` directory: nothing is read there, which is not 0.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.host.files import MalformedFile, read_small, to_int

# The kinds of counter the kernel keeps: the core's own, and its package's.
KINDS = ("core", "package")
_CPU_DIR = re.compile(r"cpu(\d{1,5})")
# A counter file is one decimal number of at most 20 digits and a newline;
# anything longer is not one.
_COUNTER_BYTES = 32
# A node with more logical CPUs than this has them read up to here: the
# readings are totals, and a bound keeps a forged tree from stalling a poll.
MAX_CPUS = 8192


@dataclass(frozen=True, slots=True)
class ThermalThrottle:
    """Totals since boot over the host's cores (``core``) and packages
    (``package``): events, and seconds throttled where the kernel counts them."""

    events: dict[str, int]
    seconds: dict[str, float]


def _counter(path: str) -> int | None:
    try:
        text = read_small(path, _COUNTER_BYTES)
    except FileNotFoundError:
        return None
    value = to_int(path, text.strip())
    if value < 0:
        raise MalformedFile(path, f"{value} is not a count")
    return value


def _id(path: str, fallback: int) -> int:
    """A topology id; the CPU's own number where the kernel shows none."""
    value = _counter(path)
    return fallback if value is None else value


def read_thermal_throttle(sysfs: Path | str,
                          topology: dict[int, tuple[int, int]] | None = None
                          ) -> ThermalThrottle | None:
    """The host's thermal throttle totals; None where no CPU keeps them.
    A counter file that is not a count raises MalformedFile (one line).
    ``topology`` keeps each CPU's (package, core) between calls: it changes
    only with the CPUs, and reading it again would double a poll's reads."""
    topology = {} if topology is None else topology
    base = os.path.join(sysfs, "devices", "system", "cpu")
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        return None
    cpus = sorted(int(m.group(1)) for n in names if (m := _CPU_DIR.fullmatch(n)))
    events: dict[str, dict[tuple[int, int], int]] = {kind: {} for kind in KINDS}
    millis: dict[str, dict[tuple[int, int], int]] = {kind: {} for kind in KINDS}
    found = False
    for cpu in cpus[:MAX_CPUS]:
        directory = os.path.join(base, f"cpu{cpu}")
        throttle = os.path.join(directory, "thermal_throttle")
        if not os.path.isdir(throttle):
            continue
        found = True
        place = topology.get(cpu)
        if place is None:
            place = topology[cpu] = (
                _id(os.path.join(directory, "topology", "physical_package_id"), cpu),
                _id(os.path.join(directory, "topology", "core_id"), cpu))
        package, core = place
        keys = {"core": (package, core), "package": (package, -1)}
        for kind in KINDS:
            if keys[kind] in events[kind]:
                continue  # a sibling of a CPU read already shows the same counter
            count = _counter(os.path.join(throttle, f"{kind}_throttle_count"))
            if count is not None:
                events[kind][keys[kind]] = count
            ms = _counter(os.path.join(throttle, f"{kind}_throttle_total_time_ms"))
            if ms is not None:
                millis[kind][keys[kind]] = ms
    if not found:
        return None
    return ThermalThrottle(
        events={kind: sum(by.values()) for kind, by in events.items() if by},
        seconds={kind: sum(by.values()) / 1000.0 for kind, by in millis.items() if by})
