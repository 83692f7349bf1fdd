"""The rules of the NVLink and C2C link rows (link_rows.py), registered on
their rows as rules.py registers its own.

An error counter that stops at its maximum instead of wrapping cannot show a
rate any more: such a counter is named in the evidence and left out of the
verdict (never read as a wrap, which would be a burst of errors that never
happened). A counter that went backwards was reset (a driver reload, a GPU
reset): the engine's increase starts over from it, never negative."""

from __future__ import annotations

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.registry import Evidence, Trend, Verdict, rule
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.settings.thresholds import DiagnosisConfig

# The values a saturating counter stops at: NVML hands counters out as 32-
# or 64-bit unsigned integers (the exporter reads them as floats).
SATURATED = frozenset({float(2**32 - 1), float(2**64 - 1)})
# On NVLink 5 (Blackwell) the links correct errors with FEC, and from R565 on
# NVML answers the CRC, replay and recovery fields NOT_SUPPORTED there: the
# FEC counts are its links' error counts. NVML's change log names them
# "counters for Nvlink5": effective errors, "the sum of the number of errors
# in each Nvlink packet" after correction, and symbol errors, "errors in rx
# symbols" whose history counts "symbol errors that are corrected". An
# effective error is a packet FEC could not make whole, which the link sends
# again like a replay: it counts against the same threshold. A symbol error
# is one FEC corrected, in place, with no packet resent: a high-speed link
# sees some on every healthy run, so they are evidence only, never a fault.
_KINDS = ("crc", "replay", "recovery", "effective", "symbol")


def _nvlink(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    counters = s.nvlink_errors
    if not counters:
        return Verdict(None)  # no NVLink, or no counter read this poll
    failing: list[int] = []
    pinned: list[str] = []
    judged = False
    ev: Evidence = {}
    for link in sorted({link for link, _ in counters}):
        seen: dict[str, float] = {}
        for kind in _KINDS:
            value = counters.get((link, kind))
            if value is None:
                continue
            if value in SATURATED:
                pinned.append(f"{link} ({kind})")
                continue
            rise = trend.increase(f"nvlink_{link}_{kind}", value)
            if rise is not None:
                seen[kind] = rise
        if not seen:
            continue
        judged = True
        # The window bounds the span the increase covers: a rate over it is
        # never more than the link's own.
        crc_per_s = seen.get("crc", 0.0) / cfg.window if cfg.window > 0 else 0.0
        resent = seen.get("replay", 0.0) + seen.get("recovery", 0.0)
        effective = seen.get("effective", 0.0)
        # An error-free link never fails, whatever the thresholds say.
        if (crc_per_s and crc_per_s >= cfg.nvlink_crc_errors_per_s) or (
                resent and resent >= cfg.nvlink_replays_per_window) or (
                effective and effective >= cfg.nvlink_replays_per_window):
            failing.append(link)
            ev[f"nvlink_link_{link}_errors"] = _link_errors(s, link, seen, crc_per_s)
        elif seen.get("symbol"):
            ev[f"nvlink_link_{link}_corrected_by_fec"] = (
                f"{seen['symbol']:g} symbol errors in the window, all corrected")
    if pinned:
        ev["nvlink_counters_at_maximum"] = ", ".join(pinned)
    if not judged:
        return Verdict(None, ev)
    ev["nvlink_failing_links"] = ", ".join(str(link) for link in failing) or "none"
    return Verdict(bool(failing), ev)


rule(t.NVLINK_ERRORS)(_nvlink)


def _link_errors(s: GpuSignals, link: int, seen: dict[str, float], crc_per_s: float) -> str:
    """A failing link's errors in the window, in the counters it has: CRC,
    replay and recovery, or (NVLink 5) FEC's with the link's bit-error rate."""
    parts = []
    if any(kind in seen for kind in ("crc", "replay", "recovery")):
        parts.append(f"crc {crc_per_s:.3g}/s, replay {seen.get('replay', 0.0):g}, "
                     f"recovery {seen.get('recovery', 0.0):g}")
    if "effective" in seen or "symbol" in seen:
        fec = (f"effective (uncorrected) {seen.get('effective', 0.0):g}, "
               f"symbol (corrected) {seen.get('symbol', 0.0):g}")
        rate = s.nvlink_bit_error_rates.get((link, "effective"))
        parts.append(fec if rate is None else f"{fec}, effective BER {rate:.3g}")
    return "; ".join(parts) + " in the window"


def _c2c(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    counters = s.gpu.c2c_errors
    if not counters:
        return Verdict(None)  # no C2C link, or a driver before R575
    ev: Evidence = {}
    pinned: list[str] = []
    total = 0.0
    judged = False
    for kind, value in sorted(counters.items()):
        if value in SATURATED:
            pinned.append(kind)
            continue
        rise = trend.increase(f"c2c_{kind}", value)
        if rise is None:
            continue
        judged = True
        total += rise
        ev[f"c2c_{kind}_errors_in_window"] = rise
    if pinned:
        ev["c2c_counters_at_maximum"] = ", ".join(pinned)
    if not judged:
        return Verdict(None, ev)
    # An error-free link never fails, whatever the threshold says.
    return Verdict(bool(total) and total >= cfg.c2c_errors_per_window, ev)


rule(t.C2C_ERRORS)(_c2c)
