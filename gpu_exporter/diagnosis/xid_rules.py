"""The rules of the Xid rows, one per tier of xids.py as the configuration
places each code, registered on their rows as rules.py registers its own.

What the kernel log's lines add to an Xid is named in the evidence: the
process the driver blames, whose it is, and for an Xid 74 the NVLink the
line names ("Xid 74 on NVLink 14"; the link's own counters are
``gpu_nvlink_errors_total{link}`` with --metrics.detail). An application Xid
is one process's fault, and comes as a burst of lines (an Xid 13 logs one per
faulting warp): its row gives one finding per process, with the count of its
lines, not one per line nor one for all the GPU's processes together."""

from __future__ import annotations

from collections.abc import Callable

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.registry import Evidence, Trend, Verdict, rule
from gpu_exporter.diagnosis.signals import GpuSignals, XidBlame
from gpu_exporter.facts.xids import XidTier
from gpu_exporter.settings.thresholds import DiagnosisConfig


def nvlinks_named(links: list[tuple[float, int, int]]) -> str:
    """``Xid 74 on NVLink 14, Xid 74 on NVLink 3``: each (code, link) once,
    in the order of the links."""
    pairs = sorted({(code, link) for _, code, link in links}, key=lambda p: (p[1], p[0]))
    return ", ".join(f"Xid {code} on NVLink {link}" for code, link in pairs)


def _codes(codes: set[int]) -> str:
    return ", ".join(str(x) for x in sorted(codes))


def per_process(blamed: list[XidBlame], unnamed: int,
                unnamed_codes: set[int]) -> tuple[Evidence, ...]:
    """One evidence per process the driver blamed (its pid, name and owner),
    with its Xids and the count of its lines; the Xids no line names a
    process for, together, last. Processes in the order of their first Xid."""
    groups: dict[tuple[int | None, str, str], list[XidBlame]] = {}
    for b in sorted(blamed, key=lambda b: b.at):
        owner = b.owner.describe() if b.owner is not None else ""
        groups.setdefault((b.pid, b.process, owner), []).append(b)
    parts: list[Evidence] = []
    for (_, process, owner), of in groups.items():
        ev: Evidence = {"xid": _codes({b.xid for b in of}),
                        "xid_lines": sum(b.lines for b in of), "xid_process": process}
        if owner:
            ev["xid_owner"] = owner
        parts.append(ev)
    if unnamed > 0:
        parts.append({"xid": _codes(unnamed_codes), "xid_events_recent": unnamed})
    return tuple(parts)


def _xid_rule(tier: XidTier,
              per_instance: bool) -> Callable[[GpuSignals, DiagnosisConfig, Trend], Verdict]:
    """The rule of one Xid tier: an Xid of that tier (xids.py, as the
    configuration places it) within the hold. The application tier is the
    job's: on a MIG GPU an Xid NVML names an instance for is that instance's
    (and its owner's), one it names none for is the GPU's; and each process
    the kernel log blames has a finding of its own."""
    def judge(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
        def recent_enough(at: float, x: int) -> bool:
            return cfg.xid_tier(x) == tier and trend.now - at <= cfg.xid_hold

        recent = [(at, x) for at, x, gi in s.xids if recent_enough(at, x)
                  and (not per_instance or not s.mig or gi == s.gpu_instance)]
        if not recent:
            # No Xid read is news only while the Xid reader runs; one that is
            # off or failing leaves the row unjudged (an Xid remembered from
            # before is still found).
            return Verdict(False if s.xids_known else None)
        evidence: Evidence = {"xid": _codes({x for _, x in recent}),
                              "xid_events_recent": len(recent)}
        links = [(at, x, link) for at, x, link in s.xid_links if recent_enough(at, x)]
        if links:
            evidence["xid_nvlink"] = nvlinks_named(links)
        # The kernel log's line names the process of the newest one, where it does.
        blamed = [b for b in s.xid_blames if recent_enough(b.at, b.xid)]
        if blamed:
            newest = max(blamed, key=lambda b: b.at)
            evidence["xid_process"] = newest.process
            if newest.owner is not None:
                evidence["xid_owner"] = newest.owner.describe()
        parts: tuple[Evidence, ...] = ()
        if per_instance and blamed:
            named = {(b.at, b.xid) for b in blamed}
            unnamed = [(at, x) for at, x in recent if (at, x) not in named]
            parts = per_process(blamed, len(unnamed), {x for _, x in unnamed})
        return Verdict(True, evidence, since=min(at for at, _ in recent), parts=parts)
    judge.__name__ = judge.__qualname__ = f"_xid_{tier}"
    return judge


rule(t.XID)(_xid_rule("hardware", per_instance=False))
rule(t.XID_APPLICATION)(_xid_rule("application", per_instance=True))
rule(t.XID_INFORMATIONAL)(_xid_rule("informational", per_instance=False))
