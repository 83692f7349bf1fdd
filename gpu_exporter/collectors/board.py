"""The newest boards' health and place, read in the device reader's pass:
the Grace C2C link (its mode once, its error counters), memory channel and
TPC repairs pending and the unrepairable-memory flag, power smoothing and its
floor, the fabric's health-mask flags, and the GPU's place in its rack and
the node's confidential-computing mode (``gpu_info``'s labels).

Counters and flags are NVML fields where NVML has them (in the GPU's one
nvmlDeviceGetFieldValues call), the rest their own calls; all on the slow
cadence (they change after an NVML event, which reads them again at once) or
once (the C2C mode, the place, the confidential-computing mode): what a board
or its driver lacks is asked once, its series stays absent, and it is listed
as not available on that board (``unavailable``). The C2C error counters are
asked only of a GPU whose C2C mode or link count says it has the link (in
the first poll, once those are read): no other board has them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpu_exporter.catalogs import board as m
from gpu_exporter.collectors.values import Series
from gpu_exporter.facts.cadence import Every
from gpu_exporter.facts.drivers import branch
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml import values as nv
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.session import Gpu, GpuGone
from gpu_exporter.nvml.values import Source
from gpu_exporter.poll.readings import GpuReading

C2C_MODE = Source("c2c_mode", calls=(Device.c2c_enabled,))
C2C_LINKS = Source("c2c_links", c.FI_DEV_C2C_LINK_COUNT)
C2C_ERRORS = {"intr": Source("c2c_errors_intr", c.FI_DEV_C2C_LINK_ERROR_INTR),
              "replay": Source("c2c_errors_replay", c.FI_DEV_C2C_LINK_ERROR_REPLAY),
              "replay_b2b": Source("c2c_errors_replay_b2b", c.FI_DEV_C2C_LINK_ERROR_REPLAY_B2B)}
REPAIR = Source("repair_pending", calls=(Device.repair_pending,))
UNREPAIRABLE = Source("unrepairable_memory", calls=(Device.unrepairable_memory,))
SMOOTHING = Source("power_smoothing", c.FI_PWR_SMOOTHING_ENABLED)
FLOOR = Source("power_floor", c.FI_PWR_SMOOTHING_PRIMARY_POWER_FLOOR)

Want = tuple[tuple[Source, Every], ...]
_ALWAYS: Want = ((C2C_MODE, Every.ONCE), (C2C_LINKS, Every.ONCE),
                 (REPAIR, Every.SLOW), (UNREPAIRABLE, Every.SLOW))
# Asked only of a GPU with a C2C link (c2c_link()): a board without one
# answers them NOT_SUPPORTED, nothing to ask, and nothing to say in the log.
C2C_ERROR_WANTS: Want = tuple((s, Every.SLOW) for s in C2C_ERRORS.values())
# R570 numbered the power-smoothing fields otherwise ("Changes between v575 and
# v580": "Fixed bug with NVML_FI_PWR_SMOOTHING_* field value numbering"): the
# ids asked here mean these values from R580 on only.
_SMOOTHING: Want = ((SMOOTHING, Every.SLOW), (FLOOR, Every.SLOW))
_WITH_SMOOTHING: Want = _ALWAYS + _SMOOTHING
SMOOTHING_SINCE = 580

# NVLink 5's FEC counters and bit-error rates (NVML fields 219-222), read by
# the NVLink reader (collectors/nvlink.py) in the same call as its own: NVML's
# change log adds the effective-error fields in "Changes between v560 and
# v565" ("Added new counters for Nvlink5", again under v570); the symbol-error
# fields 221-222 sit beside them in nvml.h and are taken as the same branch.
FEC_SINCE = 565
FEC_KEYS = {fid: f"nvlink_field_{fid}" for fid in (
    c.FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS, c.FI_DEV_NVLINK_COUNT_EFFECTIVE_BER,
    c.FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS, c.FI_DEV_NVLINK_COUNT_SYMBOL_BER)}

# What a person calls each reading that a board may lack (the coverage's words).
_WORDS: dict[Source, str] = {
    C2C_MODE: "the Grace C2C link", C2C_ERRORS["intr"]: "C2C link errors",
    REPAIR: "memory channel and TPC repair status", UNREPAIRABLE: "the unrepairable-memory flag",
    SMOOTHING: "power smoothing", FLOOR: "the power-smoothing floor",
}
FEC_WORDS = "NVLink FEC error counts and bit-error rates"

# The coverage names a reading "not available" only where the GPU's class of
# board could offer it: one no board of its kind has (a Grace C2C link on an
# H100 PCIe, power smoothing on a T4) is no gap in what was checked, and
# listing it buries the gaps that are. The class is the GPU's architecture,
# as nvml.h gives each call's "For <architecture> or newer fully supported
# devices"; whether it sits on a Grace superchip (the only boards with a C2C
# link); and whether it has NVLink links (the FEC counts are NVLink 5's).
_ARCHITECTURE = {name: code for code, name in c.ARCHITECTURES.items()}
AMPERE, HOPPER, BLACKWELL = _ARCHITECTURE["ampere"], _ARCHITECTURE["hopper"], \
    _ARCHITECTURE["blackwell"]
# Grace superchips: GH200 (Grace Hopper); GB200, GB300 and GB10 (Grace Blackwell).
_GRACE_NAME = re.compile(r"\bG[HB]\d{2,3}\b")


@dataclass(frozen=True, slots=True)
class BoardClass:
    architecture: int  # NVML's code; one NVML names that this exporter does not know: newest
    grace: bool
    nvlink: bool

    def offers(self, source: Source) -> bool:
        if source in (C2C_MODE, C2C_ERRORS["intr"]):
            return self.grace
        if source in (SMOOTHING, FLOOR):  # nvmlDevicePowerSmoothing*: Blackwell
            return self.architecture >= BLACKWELL
        if source is UNREPAIRABLE:  # nvmlDeviceGetUnrepairableMemoryFlag_v1: Hopper
            return self.architecture >= HOPPER
        return self.architecture >= AMPERE  # nvmlDeviceGetRepairStatus: Ampere


def board_class(gpu: Gpu, c2c_link: bool | None) -> BoardClass:
    """The class of ``gpu``'s board, as far as NVML has said."""
    # "unknown" (a code this exporter has no name for) and "" (not read) count
    # as the newest: a reading is then named rather than hidden.
    arch = _ARCHITECTURE.get(gpu.identity.architecture, max(_ARCHITECTURE.values()) + 1)
    links = gpu.static.get("nvlink_count")
    return BoardClass(arch, bool(c2c_link) or bool(_GRACE_NAME.search(gpu.identity.name)),
                      isinstance(links, int) and links > 0)


def c2c_link(gpu: Gpu) -> bool | None:
    """Whether the GPU has a Grace C2C link, as its mode and link count read
    once say; None until they are read (or where they failed)."""
    mode, links = gpu.static.get(C2C_MODE.key), gpu.static.get(C2C_LINKS.key)
    if mode or (isinstance(links, int | float) and links > 0):
        return True
    if mode is False or links == 0 or nv.offered(gpu, C2C_MODE) is False:
        return False
    return None


def wanted(driver_version: str) -> Want:
    """What a GPU's pass asks for, under this driver."""
    # The same tuple each time: a pass's plan is made once for each (device.py).
    return _WITH_SMOOTHING if branch(driver_version) >= SMOOTHING_SINCE else _ALWAYS


def export(values: dict[Source, Any], out: Series, r: GpuReading) -> None:
    enabled = values.get(C2C_MODE)
    if enabled is not None:
        r.c2c_link = bool(enabled)
        out.gauge(m.C2C_ENABLED, float(enabled))
    out.gauge(m.C2C_LINKS, values.get(C2C_LINKS))
    c2c: dict[str, float] = {}
    for kind, source in C2C_ERRORS.items():
        count = out.counter(m.C2C_ERRORS_TOTAL, values.get(source), kind)
        if count is not None:
            c2c[kind] = count
    r.c2c_errors = c2c or None
    repair = values.get(REPAIR)
    if repair is not None:
        r.repair_pending = repair[0] or repair[1]
        out.gauge(m.REPAIR_PENDING, float(repair[0]), "channel")
        out.gauge(m.REPAIR_PENDING, float(repair[1]), "tpc")
    unrepairable = values.get(UNREPAIRABLE)
    if unrepairable is not None:
        r.unrepairable_memory = bool(unrepairable)
        out.gauge(m.UNREPAIRABLE_MEMORY, float(unrepairable))
    smoothing = out.gauge(m.POWER_SMOOTHING_ENABLED, values.get(SMOOTHING))
    if smoothing is not None:
        r.power_smoothing = bool(smoothing)
        if smoothing:
            r.power_floor_watts = out.gauge(m.POWER_FLOOR_WATTS, values.get(FLOOR))


def lacks(gpu: Gpu, c2c_link: bool | None) -> tuple[str, ...]:
    """GpuReading.board_lacks: what the GPU's board or driver does not offer
    that a board of its class could, given its C2C mode as read."""
    return unavailable(gpu, board_class(gpu, c2c_link))


def export_fabric_issues(fabric: Any, out: Series) -> None:
    for issue, present in getattr(fabric, "issues", ()):
        out.state(m.FABRIC_HEALTH_ISSUE, present, issue)


def place(gpu: Gpu, device: Device) -> tuple[str, str, str, str]:
    """gpu_info's (chassis serial, slot, tray, confidential-computing mode),
    read once; "" for what the board or driver does not say, and all of it
    for a GPU lost on the way (it says nothing of them this poll)."""
    try:
        where = gpu.read_first(("platform_info", device.platform_location),
                               ("platform_info_v1", device.platform_location_v1), static=True)
        cc = gpu.static_read("cc_mode", device.confidential_computing)
    except GpuGone:
        return "", "", "", ""
    chassis, slot, tray = where or ("", "", "")
    return chassis, slot, tray, cc or ""


def unavailable(gpu: Gpu, kind: BoardClass) -> tuple[str, ...]:
    """What this GPU's board or driver does not offer of the above that a
    board of its class could, and the health event types it does not offer,
    in a person's words."""
    unsupported = gpu.unsupported
    missing = [words for source, words in _WORDS.items() if kind.offers(source) and (
        source.field_key in unsupported
        or any(source.call_key(i) in unsupported for i in range(len(source.calls))))]
    if kind.nvlink and kind.architecture >= BLACKWELL and any(
            key in unsupported for key in FEC_KEYS.values()):
        missing.append(FEC_WORDS)
    # nvmlDeviceGetPlatformInfo: Blackwell; nvmlSystemGetConfComputeState: Ampere.
    if kind.architecture >= BLACKWELL and "platform_info" in unsupported \
            and "platform_info_v1" in unsupported:
        missing.append("the rack location")
    if kind.architecture >= AMPERE and "cc_mode" in unsupported:
        missing.append("the confidential-computing mode")
    mask = gpu.static.get("event_types")
    if isinstance(mask, int):
        missing += [f"the {name} event" for bit, name in c.EVENT_NAMES.items()
                    if not mask & bit and c.EVENT_TYPES_WANTED & bit]
    return tuple(missing)
