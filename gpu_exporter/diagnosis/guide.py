"""The runbook's account of the diagnosis, as data: who must act on each Xid
tier, how the diagnosis picks one root cause among the rows that are on, and
which NVML clock reason feeds which row. Written once, next to the table it
explains, and rendered twice: by the exporter at ``/runbook`` (HTML, with the
running thresholds, ``web/runbook.py``) and by the mixin into docs/runbook.md
(Markdown, with alerts/config.yaml's).

Text is plain words with two marks, as Markdown writes them: ```code``` and
``*emphasis*``; a link to a row's section is the :class:`Row` itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.precedence import PRECEDENCE
from gpu_exporter.diagnosis.rules import SPECIFIC_SLOWDOWN_REASONS, THERMAL_REASONS
from gpu_exporter.diagnosis.table import Row
from gpu_exporter.facts.xids import BY_CODE, CATALOG_URL, TIERS, XidTier
from gpu_exporter.settings.thresholds import DiagnosisConfig

# A run of text and links to rows' sections.
Inline = tuple[str | Row, ...]


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[Inline, ...], ...]


# A paragraph or a table.
Block = Inline | Table


@dataclass(frozen=True)
class Part:
    """A heading (``level`` 1 or 2) and what stands under it."""

    title: str
    blocks: tuple[Block, ...]
    level: int = 1


XIDS_TITLE = "Xids by who must act"

# Who is told of each tier's Xids.
WHO: dict[XidTier, str] = {
    "hardware": "on-call and the hardware team (pages)",
    "application": "the job's owner (a warning routed by `xid_tier=\"application\"`, never "
                   "a page)",
    "informational": "no one (dashboards and the Alertmanager UI)",
}

XIDS_INTRO: Inline = (
    "Every Xid the driver reports is counted (`gpu_xid_errors_total{xid}`, and "
    "`gpu_xid_errors_all_total`, which starts at 0 so `increase()` sees the first one) and "
    "lands in one tier, by who owns its cause. The tiers follow NVIDIA's Xid catalog "
    f"({CATALOG_URL}): its immediate action is the first step below. A site can move a "
    "code with `diagnosis: {hardware_xids: [...], application_xids: [...], "
    "informational_xids: [...]}`; a code in no list is informational, so a code a newer "
    "driver adds is seen without paging anyone.",
)


def xid_row(tier: XidTier) -> Row:
    """The table row that reports the Xids of ``tier``."""
    return next(row for row in t.ROWS if row.xid_tier == tier)


def xid_table(cfg: DiagnosisConfig, tier: XidTier) -> Table:
    """The codes ``cfg`` places in ``tier``: what each means and the first action."""
    rows: list[tuple[Inline, ...]] = []
    for code in getattr(cfg, f"{tier}_xids"):
        entry = BY_CODE.get(code)
        if entry is None:
            rows.append(((str(code),), ("(placed in this tier by the configuration)",), ("—",)))
        else:
            rows.append(((str(code),), (entry.meaning,), (entry.action,)))
    return Table(("Xid", "what it means", "first action"), tuple(rows))


def how_the_diagnosis_decides(cfg: DiagnosisConfig) -> list[Part]:
    """How one root cause is picked among the rows that are on, and which NVML
    clock reasons feed which row, with the thresholds of ``cfg``."""
    d = cfg.prose()
    seen = set()
    explains: list[tuple[Inline, ...]] = []
    for e in PRECEDENCE:
        if e.cause is t.GPU_LOST or e.restates:
            continue
        key = (e.cause.key, e.consequence.key)
        if key not in seen:
            seen.add(key)
            explains.append(((e.cause,), (e.consequence,), (e.why,)))
    explains.append(((t.GPU_LOST,), ("every other row of the GPU",),
                     ("NVML cannot reach the GPU: what else was on for it is stale",)))
    picks = Part("How the diagnosis picks one root cause", (
        ("Every rule is judged on its own each poll; a row turns on after its condition held "
         f"for {d['window']} ({d['hold_ratio']} of the polls) and off after it stayed clear for "
         f"{d['clear_after']}. Several rows of one GPU can then be on at once because one cause "
         "produces the signals of another (a swapping host shows high iowait). The exporter "
         "keeps the root causes and files each consequence under the root that explains it: "
         "`gpu_diagnosis_active` is 1 only for a root cause, so no alert fires for a "
         "consequence, and `/diagnosis` and `gpu-exporter diagnose` list the explained rows "
         "beneath their root (`explained`, and one `explains_…` line in the evidence: "
         "*host cpu iowait 35 %: explained by host swap 136 MB/s*).",),
        ("A consequence is explained only while the evidence ties it to its cause: the cause's "
         f"own condition held within the last {d['explained_within']} (a swap that stopped no "
         "longer explains the iowait that persists: both are reported), and the consequence "
         "shows nothing of its own (the GPU's process waiting on the run queue is CPU "
         "contention no storage stall produces). A lost GPU explains every other row of that "
         "GPU.",),
        Table(("cause", "explains", "why"), tuple(explains)),
    ))
    thermal = ", ".join(f"`{b}`" for b in sorted(THERMAL_REASONS))
    specific = ", ".join(f"`{b}`" for b in sorted(SPECIFIC_SLOWDOWN_REASONS))
    clocks = Part("NVML clock reasons and the rows they feed", (
        ("NVML documents `hw_slowdown` as an umbrella: the driver sets it (clocks cut by half or "
         "more) for high temperature, for an external power brake and for its fast-trigger "
         "protection against excessive power draw. Only the specific bits name the reason.",),
        Table(("bits active (busy GPU)", "row"), (
            ((f"{thermal} (either), or the temperature within {d['thermal_margin_celsius']} "
              "of the GPU's own slowdown threshold",), (t.THERMAL,)),
            (("`hw_power_brake`",), (t.POWER_BRAKE,)),
            ((f"`hw_slowdown` with none of {specific} and a normal temperature",),
             (t.HW_SLOWDOWN, " (its own evidence: the reason is unnamed)")),
            (("`hw_slowdown` with a thermal bit or `hw_power_brake`",),
             ("the named row; ", t.HW_SLOWDOWN, " is listed beneath it as explained")),
            ((f"`sw_power_cap` with the limit below the board's default and the SM clock below "
              f"{d['clock_below_max_ratio']} of its maximum",), (t.POWER_CAP,)),
            (("`sw_power_cap` at the default limit",),
             ("none: a busy GPU at its rated power works as designed",)),
            (("`applications_clocks_setting` (the application clock below the default)",),
             (t.APPLICATION_CLOCKS,)),
            (("`gpu_idle`, `sync_boost`, `display_clock_setting`",), ("none",)),
        )),
    ), level=2)
    return [picks, clocks]


__all__ = ["TIERS", "WHO", "XIDS_INTRO", "XIDS_TITLE", "Block", "Inline", "Part", "Table",
           "how_the_diagnosis_decides", "xid_row", "xid_table"]
