"""Each value the device reader reads of a GPU, declared once: where NVML
answers it (a :class:`Source`), and for the plain values a :class:`ValueRow`:
the metric it is exported as, how often it is read, what it is held against,
and the field of the GPU's reading (``readings.GpuReading``) it fills, which
is also the name the diagnosis' coverage reads it under. The reader
(``device.py``) derives from the rows what it asks NVML, what it exports,
what it copies into the reading and what it reports as not offered; the values
made of several answers (throttle reasons, ECC, remapped rows, the recovery
action, the fabric probe, the fans, the board extras) are its functions, and
the names they fill are declared here too (``READ_ELSEWHERE``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpu_exporter.catalogs import device as m
from gpu_exporter.collectors import board
from gpu_exporter.facts.cadence import Every
from gpu_exporter.facts.catalog_types import Metric
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml import values as nv
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.values import Source


def _call(key: str, *calls: nv.Call, args: tuple[int, ...] = (), part: int | None = None,
          ) -> Source:
    return Source(key, calls=calls, args=args, part=part)


# --- where NVML answers each value ---------------------------------------------
UTILIZATION = _call("utilization", Device.utilization, part=0)
MEMORY_UTILIZATION = _call("memory_utilization", Device.utilization, part=1)
# (total, reserved, used); before R510 through the v1 call, which has no reserved.
MEMORY_TOTAL = _call("memory_total", Device.memory, Device.memory_v1, part=0)
MEMORY_RESERVED = _call("memory_reserved", Device.memory, Device.memory_v1, part=1)
MEMORY_USED = _call("memory_used", Device.memory, Device.memory_v1, part=2)
TEMPERATURE = _call("temperature", Device.temperature)
MEMORY_TEMPERATURE = Source("memory_temperature", c.FI_DEV_MEMORY_TEMP)
POWER_LIMIT = Source("power_limit", c.FI_DEV_POWER_CURRENT_LIMIT, calls=(Device.power_limit_watts,),
                     per=1000)
POWER = Source("power", c.FI_DEV_POWER_AVERAGE, calls=(Device.power_watts,), per=1000)
POWER_DEFAULT_LIMIT = Source("power_default_limit", c.FI_DEV_POWER_DEFAULT_LIMIT,
                             calls=(Device.power_default_limit_watts,), per=1000)
ENERGY = Source("energy", c.FI_DEV_TOTAL_ENERGY_CONSUMPTION, calls=(Device.energy_joules,),
                per=1000)
PCIE_REPLAYS = Source("pcie_replays", c.FI_DEV_PCIE_REPLAY_COUNTER, 1.0, (Device.pcie_replays,))
PCIE_GENERATION = _call("pcie_generation", Device.pcie_link_generation)
PCIE_WIDTH = _call("pcie_width", Device.pcie_link_width)
PCIE_GENERATION_MAX = _call("pcie_generation_max", Device.pcie_link_generation_max)
PCIE_WIDTH_MAX = _call("pcie_width_max", Device.pcie_link_width_max)
PSTATE = _call("pstate", Device.performance_state)
PERSISTENCE = _call("persistence_mode", Device.persistence_mode)
RECOVERY_ACTION = Source("recovery_action", c.FI_DEV_GET_GPU_RECOVERY_ACTION)
# Under the names R535 introduced first, then under the older ones: a driver
# before R535 lacks the new calls, and some answer the new supported mask
# NOT_SUPPORTED while the rest still answers.
REASONS = _call("clock_reasons", Device.clock_event_reasons, Device.clock_throttle_reasons)
REASONS_SUPPORTED = _call("clock_reasons_supported", Device.supported_clock_event_reasons,
                          Device.supported_clock_throttle_reasons)
# The fabric probe with its health summary first (R580), else without it (R550
# to R575); boards outside an NVSwitch fabric answer NOT_SUPPORTED.
FABRIC = _call("fabric", Device.fabric_info_v3, Device.fabric_info_v2)
CLOCK = {name: _call(f"clock_{name}", Device.clock_hz, args=(code,))
         for name, code in c.CLOCK_TYPES.items()}
CLOCK_MAX = {name: _call(f"clock_max_{name}", Device.max_clock_hz, args=(code,))
             for name, code in c.CLOCK_TYPES.items()}
CLOCK_APPLICATION = {name: _call(f"clock_app_{name}", Device.application_clock_hz, args=(code,))
                     for name, code in c.CLOCK_TYPES.items()}
CLOCK_APPLICATION_DEFAULT = {
    name: _call(f"clock_app_default_{name}", Device.default_application_clock_hz, args=(code,))
    for name, code in c.CLOCK_TYPES.items()}
THRESHOLD = {name: _call(f"temperature_threshold_{name}", Device.temperature_threshold,
                         args=(code,))
             for name, code in c.TEMPERATURE_THRESHOLDS.items()}
THROTTLE_TIME = {reason: Source(f"throttle_time_{reason}", fid, 1e-9)
                 for fid, reason in c.THROTTLE_TIME_FIELDS.items()}
PCIE_BYTES = {"tx": Source("pcie_tx_bytes", c.FI_DEV_PCIE_COUNT_TX_BYTES),
              "rx": Source("pcie_rx_bytes", c.FI_DEV_PCIE_COUNT_RX_BYTES)}
# ECC: the mode (whether to read the counts at all), the volatile totals every
# poll (nvmlDeviceGetTotalEccErrors where the field is missing), the aggregates
# and the remapped rows on their cadence, and at once when a volatile total
# moved (the event that grows the aggregates and retires rows).
ECC_MODE = Source("ecc_mode", c.FI_DEV_ECC_CURRENT, 1.0, (Device.ecc_mode,), part=0)
_ECC_FIELDS = {("corrected", "volatile"): c.FI_DEV_ECC_SBE_VOL_TOTAL,
               ("corrected", "aggregate"): c.FI_DEV_ECC_SBE_AGG_TOTAL,
               ("uncorrected", "volatile"): c.FI_DEV_ECC_DBE_VOL_TOTAL,
               ("uncorrected", "aggregate"): c.FI_DEV_ECC_DBE_AGG_TOTAL}
ECC_COUNT = {(tname, sname): Source(f"ecc_{tname}_{sname}", fid, 1.0, (Device.ecc_errors,),
                                    args=(c.ECC_TYPES[tname], c.ECC_SCOPES[sname]))
             for (tname, sname), fid in _ECC_FIELDS.items()}
_REMAP = Device.remapped_rows  # (correctable, uncorrectable, pending, failed)
REMAPPED = {"correctable": Source("remapped_correctable", c.FI_DEV_REMAPPED_COR, 1.0,
                                  (_REMAP,), part=0),
            "uncorrectable": Source("remapped_uncorrectable", c.FI_DEV_REMAPPED_UNC, 1.0,
                                    (_REMAP,), part=1)}
REMAP_PENDING = Source("remap_pending", c.FI_DEV_REMAPPED_PENDING, 1.0, (_REMAP,), part=2)
REMAP_FAILED = Source("remap_failed", c.FI_DEV_REMAPPED_FAILURE, 1.0, (_REMAP,), part=3)


@dataclass(frozen=True, slots=True)
class ValueRow:
    """One value of a GPU: the metric it is exported as (``series``: its label
    values after the GPU's), where NVML answers it, how often it is read, and
    the field of the GPU's reading it fills.

    ``ceiling``: the board's own figure the value is held against (power
    against its limit); where that is no reading this poll, the value is held
    against its metric's bounds alone, or left out with ``needs_ceiling``
    (memory used of a total that is garbage: the same answer). ``unknown``:
    NVML's answer for "it does not know" (absent, no error); ``detail``: read
    at all only with --metrics.detail. ``reading``: the GpuReading field the
    exported value fills, by the name the diagnosis reads it under
    (coverage.py): a field ("utilization") or one key of a dict field
    ("clocks_hz[sm]"); ``convert`` gives the field's type (int, bool). A row
    without one is exported only.
    """

    metric: Metric
    source: Source
    series: tuple[str, ...] = ()
    every: Every = Every.POLL
    ceiling: Source | None = None
    unknown: float | None = None
    detail: bool = False
    needs_ceiling: bool = False
    reading: str | None = None
    convert: Callable[[float], Any] | None = None

    @property
    def field(self) -> tuple[str, str | None] | None:
        """(the GpuReading field, its key for a dict field), or None."""
        if self.reading is None:
            return None
        name, _, key = self.reading.partition("[")
        return name, key.removesuffix("]") or None


# The graphics clock runs in step with the SM clock on the boards a fleet runs
# (one clock domain): it is read with --metrics.detail only.
ROWS: tuple[ValueRow, ...] = (
    ValueRow(m.UTILIZATION_RATIO, UTILIZATION, reading="utilization"),
    ValueRow(m.MEMORY_CONTROLLER_UTILIZATION_RATIO, MEMORY_UTILIZATION,
             reading="memory_utilization"),
    ValueRow(m.MEMORY_TOTAL_BYTES, MEMORY_TOTAL, reading="memory_total_bytes"),
    ValueRow(m.MEMORY_USED_BYTES, MEMORY_USED, ceiling=MEMORY_TOTAL, needs_ceiling=True,
             reading="memory_used_bytes"),
    ValueRow(m.MEMORY_RESERVED_BYTES, MEMORY_RESERVED, ceiling=MEMORY_TOTAL, needs_ceiling=True,
             reading="memory_reserved_bytes"),
    ValueRow(m.TEMPERATURE_CELSIUS, TEMPERATURE, ("gpu",), reading="temperature_celsius"),
    ValueRow(m.TEMPERATURE_CELSIUS, MEMORY_TEMPERATURE, ("memory",)),
    # NVML answers 0 for thresholds a board does not define.
    *(ValueRow(m.TEMPERATURE_THRESHOLD_CELSIUS, THRESHOLD[name], (name,), Every.ONCE, unknown=0,
               reading="slowdown_celsius" if name == "slowdown" else None)
      for name in c.TEMPERATURE_THRESHOLDS),
    ValueRow(m.POWER_LIMIT_WATTS, POWER_LIMIT, reading="power_limit_watts"),
    ValueRow(m.POWER_WATTS, POWER, ceiling=POWER_LIMIT, reading="power_watts"),
    ValueRow(m.POWER_DEFAULT_LIMIT_WATTS, POWER_DEFAULT_LIMIT, every=Every.ONCE,
             reading="power_default_limit_watts"),
    ValueRow(m.ENERGY_JOULES_TOTAL, ENERGY, every=Every.SLOW),
    *(ValueRow(m.CLOCK_MAX_HERTZ, CLOCK_MAX[name], (name,), Every.ONCE, detail=name == "graphics",
               reading=f"clocks_max_hz[{name}]") for name in c.CLOCK_TYPES),
    ValueRow(m.CLOCK_HERTZ, CLOCK["sm"], ("sm",), ceiling=CLOCK_MAX["sm"],
             reading="clocks_hz[sm]"),
    ValueRow(m.CLOCK_HERTZ, CLOCK["graphics"], ("graphics",), ceiling=CLOCK_MAX["graphics"],
             detail=True, reading="clocks_hz[graphics]"),
    ValueRow(m.CLOCK_HERTZ, CLOCK["memory"], ("memory",), Every.LOAD, CLOCK_MAX["memory"],
             reading="clocks_hz[memory]"),
    *(ValueRow(m.CLOCK_APPLICATION_HERTZ, CLOCK_APPLICATION[name], (name,), Every.FACT,
               CLOCK_MAX[name], reading=f"clocks_application_hz[{name}]")
      for name in c.CLOCK_TYPES),
    *(ValueRow(m.CLOCK_APPLICATION_DEFAULT_HERTZ, CLOCK_APPLICATION_DEFAULT[name], (name,),
               Every.ONCE, reading=f"clocks_application_default_hz[{name}]")
      for name in c.CLOCK_TYPES),
    # 32 is NVML_PSTATE_UNKNOWN: the driver says it does not know, not a fault.
    ValueRow(m.PERFORMANCE_STATE, PSTATE, every=Every.LOAD, unknown=c.PSTATE_UNKNOWN),
    # A counter read every poll lets rate() see every nanosecond a reason held.
    *(ValueRow(m.THROTTLE_SECONDS_TOTAL, source, (reason,))
      for reason, source in THROTTLE_TIME.items()),
    ValueRow(m.PCIE_LINK_GENERATION, PCIE_GENERATION, every=Every.LOAD,
             reading="pcie_generation", convert=int),
    ValueRow(m.PCIE_LINK_GENERATION_MAX, PCIE_GENERATION_MAX, every=Every.ONCE,
             reading="pcie_generation_max", convert=int),
    ValueRow(m.PCIE_LINK_WIDTH, PCIE_WIDTH, every=Every.LOAD, reading="pcie_width",
             convert=int),
    ValueRow(m.PCIE_LINK_WIDTH_MAX, PCIE_WIDTH_MAX, every=Every.ONCE, reading="pcie_width_max",
             convert=int),
    ValueRow(m.PCIE_REPLAYS_TOTAL, PCIE_REPLAYS, every=Every.SLOW, reading="pcie_replays"),
    *(ValueRow(m.PCIE_BYTES_TOTAL, source, (direction,), Every.SLOW)
      for direction, source in PCIE_BYTES.items()),
    ValueRow(m.PERSISTENCE_MODE_ENABLED, PERSISTENCE, every=Every.FACT,
             reading="persistence_mode", convert=bool),
)


# The reading's fields the reader's functions fill (a value made of several
# answers, or of a mask), by the name the diagnosis reads them under, and the
# sources they come from: the value is not offered when one of its sources is
# not (ECC counts need the mode too), refused when one is.
READ_ELSEWHERE: dict[str, tuple[Source, ...]] = {
    "throttle_reasons": (REASONS,),
    "ecc_uncorrected_volatile": (ECC_MODE, ECC_COUNT["uncorrected", "volatile"]),
    "remap_pending": (REMAP_PENDING,), "remap_failed": (REMAP_FAILED,),
    "recovery_action": (RECOVERY_ACTION,), "fabric_state": (FABRIC,),
    # A Grace board's C2C link error counters (R575 and newer).
    "c2c_errors": tuple(board.C2C_ERRORS.values()),
}
# Where NVML answers each value the diagnosis reads of a GPU, by the name it
# reads it under (coverage.py): every row's reading, and the above. A GPU's
# fans are not offered only when none of them is (device.py).
READ_AS: dict[str, tuple[Source, ...]] = {
    **{row.reading: (row.source,) for row in ROWS if row.reading is not None},
    **READ_ELSEWHERE,
}
