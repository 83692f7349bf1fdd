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
from gpu_exporter.thresholds import DiagnosisConfig

# The values a saturating counter stops at: NVML hands counters out as 32-
# or 64-bit unsigned integers (the exporter reads them as floats).
SATURATED = frozenset({float(2**32 - 1), float(2**64 - 1)})
_KINDS = ("crc", "replay", "recovery")


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
        # An error-free link never fails, whatever the thresholds say.
        if (crc_per_s and crc_per_s >= cfg.nvlink_crc_errors_per_s) or (
                resent and resent >= cfg.nvlink_replays_per_window):
            failing.append(link)
            ev[f"nvlink_link_{link}_errors"] = (
                f"crc {crc_per_s:.3g}/s, replay {seen.get('replay', 0.0):g}, "
                f"recovery {seen.get('recovery', 0.0):g} in the window")
    if pinned:
        ev["nvlink_counters_at_maximum"] = ", ".join(pinned)
    if not judged:
        return Verdict(None, ev)
    ev["nvlink_failing_links"] = ", ".join(str(link) for link in failing) or "none"
    return Verdict(bool(failing), ev)


rule(t.NVLINK_ERRORS)(_nvlink)


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
