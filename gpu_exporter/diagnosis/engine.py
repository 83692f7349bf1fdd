"""Evaluate every row of the table for every GPU, every poll, and turn the
answers into steady findings: a condition must hold for the diagnosis window
before its row turns on, and stay clear for ``clear_after`` before it turns
off, so nothing flaps. Of the rows that are on, causal precedence
(``precedence.py``) keeps the root causes and files the consequences they
explain under them. ``gpu_diagnosis_active`` is 1 for each root cause that is
on, so alerts never page for a consequence. The rows that are off are
exported at 0 with --metrics.detail only: one zero series per row and GPU grew
with every row of the table (35 of a GPU's 100-series budget), and alerts and
dashboards ask for ``== 1`` either way."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Self

from gpu_exporter.catalogs.diagnosis import (
    DIAGNOSIS_ACTIVE,
    DIAGNOSIS_INPUT_MISSING,
    DIAGNOSIS_NOT_JUDGED,
)
from gpu_exporter.diagnosis.counters import Counters
from gpu_exporter.diagnosis.coverage import COVERAGE, Coverage, Gap, Kind, Reasons
from gpu_exporter.diagnosis.evidence import evidence_line
from gpu_exporter.diagnosis.finding import Finding
from gpu_exporter.diagnosis.jobs import GpuView, Job, judge_jobs
from gpu_exporter.diagnosis.memory import FaultMemory, GpuPast
from gpu_exporter.diagnosis.place import FIRST_ANSWERS_S, PlaceState, PollTimeline, RowState
from gpu_exporter.diagnosis.precedence import Candidate, Explained, resolve
from gpu_exporter.diagnosis.registry import HOST_TRENDS
from gpu_exporter.diagnosis.rules import Evidence, Trend, Verdict
from gpu_exporter.diagnosis.signals import INPUTS, GpuSignals, gather, missing_inputs
from gpu_exporter.diagnosis.standing import (
    Group,
    Judged,
    Standing,
    board_of,
    groups,
    host_absent,
    judged_rows,
)
from gpu_exporter.diagnosis.table import ROWS, SEVERITY_ORDER, Row
from gpu_exporter.host.boot import uptime
from gpu_exporter.poll.readings import GpuOwner
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import Slot, SnapshotBuilder
from gpu_exporter.poll.stage import Derivation
from gpu_exporter.settings.config import Settings
from gpu_exporter.settings.thresholds import DiagnosisConfig

log = logging.getLogger(__name__)

# The rows judged on each MIG instance of a GPU split into instances.
INSTANCE_ROWS: tuple[Row, ...] = tuple(r for r in ROWS if r.per_instance)


# What the diagnosis publishes in each snapshot: the rows on now, and the
# readers it went without (their rows were not judged).
FINDINGS: Slot[tuple[Finding, ...]] = Slot("findings")
INPUTS_MISSING: Slot[tuple[str, ...]] = Slot("diagnosis_inputs_missing")
# The node's jobs (jobs.py): each owner's GPUs, judged together.
JOBS: Slot[tuple[Job, ...]] = Slot("diagnosis_jobs")

__all__ = ["FINDINGS", "INPUTS_MISSING", "JOBS", "Diagnosis", "Finding", "explanation"]


def explanation(item: Explained, cause_evidence: Evidence) -> str:
    """``host cpu iowait 35 %: explained by host swap 200.0 MB/s``."""
    shown = ({k: item.evidence[k] for k in item.by.shows if k in item.evidence}
             if item.by.shows else dict(item.evidence))
    cited = {k: cause_evidence[k] for k in item.by.cites if k in cause_evidence}
    text = evidence_line(shown) or item.row.summary
    if cited:
        text += f": explained by {evidence_line(cited)}"
    return text


def _span_slack(interval: float) -> float:
    """How far beyond the window a GPU's poll times are kept. A row's window
    is covered by a poll at least a window old; the span must hold one
    whatever the polls' phase, so it reaches a poll interval and a half past
    the window (at 1 s beyond it, polls 2 s apart and a little late left
    none in it at every poll, and a row that held never turned on)."""
    return max(1.0, 1.5 * interval)


def _switched_off(settings: Settings) -> tuple[str, ...]:
    return tuple(name for name in INPUTS if not settings.collector_enabled(name, True))


def _memory(settings: Settings, rt: Runtime) -> FaultMemory:
    path = settings.path.state_file
    return FaultMemory(Path(path) if path else None, settings.path.procfs, rt.wall_clock)


def _remembered_xids(sig: GpuSignals, past: GpuPast) -> None:
    """Add the Xids the memory holds that this poll's readings no longer do
    (from before a restart, or before a reboot), first and last of each code
    and life, with the NVLink an Xid 74 named: the Xid rows judge them by
    their own times."""
    newest: dict[int, float] = {}
    for at, code, _ in sig.xids:
        newest[code] = max(at, newest.get(code, at))
    for f in past.faults:
        if f.kind == "xid" and f.last > newest.get(f.code, float("-inf")):
            times = dict.fromkeys((f.first, f.last))
            sig.xids.extend((at, f.code, None) for at in times)
            if f.link is not None:
                sig.xid_links.extend((at, f.code, f.link) for at in times)


def _xid_owners(row: Row, evidence: Evidence, sig: GpuSignals,
                owners: tuple[GpuOwner, ...]) -> tuple[GpuOwner, ...]:
    """An Xid's owners: where the kernel log names the process that raised
    it and whose it is, that process's owner alone, not every tenant of the
    GPU; the GPU's owners where no line names one, or where the process
    named had exited (or was another by then) before its owner was read."""
    process = evidence.get("xid_process") if row.xid_tier is not None else None
    if process is None:
        return owners
    raised = dict.fromkeys(b.owner for b in sig.xid_blames
                           if b.process == process and b.owner is not None)
    return tuple(raised) or owners


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.row.severity], f.gpu,
                                           -1 if f.gpu_instance is None else f.gpu_instance,
                                           f.row.key))


class Diagnosis(Derivation):
    """The symptom -> cause table judged per GPU every poll, on the readers'
    readings (switched by ``diagnosis.enabled``)."""

    name = "diagnosis"
    description = "the symptom -> cause table evaluated per GPU (gpu_diagnosis_active)"

    def __init__(self, cfg: DiagnosisConfig, monotonic: Callable[[], float],
                 wall_clock: Callable[[], float], detail: bool = False,
                 switched_off: tuple[str, ...] = (), interval: float = 1.0,
                 memory: FaultMemory | None = None, procfs: Path | None = None) -> None:
        self.cfg = cfg
        # Each GPU's faults across restarts and reboots (None: none remembered).
        self.memory = memory
        # Where /proc/uptime is (None: not read, no boot grace); once the
        # node is past the grace it is not read again.
        self._procfs = procfs
        self._past_boot_grace = procfs is None
        self._span_slack = _span_slack(interval)
        self.detail = detail
        # The readers the rules read that the settings switch off: a row left
        # unjudged by one says so (coverage.py).
        self.switched_off = switched_off
        self._mono = monotonic
        self._wall = wall_clock
        # Keyed by (GPU index, MIG instance or None); each place's rows'
        # states in table order (ROWS, or INSTANCE_ROWS for an instance).
        self._places: dict[tuple[int, int | None], PlaceState] = {}
        # The rows with their rules as registered when the engine is made,
        # and in the groups judged again together.
        self._gpu_rows = judged_rows(ROWS)
        self._instance_rows = judged_rows(INSTANCE_ROWS)
        self._gpu_groups = groups(self._gpu_rows)
        self._instance_groups = groups(self._instance_rows)
        self._counters = Counters(HOST_TRENDS)
        # A group's last verdicts stand while what its rules read is the same
        # (False: every row is judged every poll; the same answers, slower).
        self.verdicts_stand = True
        # GPU uuid -> its owners when last known: a lost GPU lists no process,
        # and its job was its job until it fell off the bus.
        self._last_owners: dict[str, tuple[GpuOwner, ...]] = {}
        # GPU uuid -> its MIG instances' views when last read: a GPU lost
        # while split lists no instance, and each was its job's unit.
        self._last_instances: dict[str, tuple[GpuView, ...]] = {}
        self._errors = 0
        self._failing: set[str] = set()
        # Why the rows it could not judge went unjudged (coverage.py).
        self._reasons = Reasons()
        # Which of the host's values were absent, and since when.
        self._host_absent: tuple[bool, ...] | None = None
        self._host_absent_since = 0.0
        self._row_at = {row: i for i, row in enumerate(ROWS)}

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        return cls(rt.settings.diagnosis, rt.monotonic, rt.wall_clock,
                   rt.settings.metrics.detail, _switched_off(rt.settings),
                   rt.settings.poll.interval, _memory(rt.settings, rt), rt.settings.path.procfs)

    @classmethod
    def wanted(cls, settings: Settings) -> bool:
        return settings.diagnosis.enabled

    def reconfigure(self, settings: Settings) -> None:
        self.cfg = settings.diagnosis
        self.detail = settings.metrics.detail
        self.switched_off = _switched_off(settings)
        self._span_slack = _span_slack(settings.poll.interval)
        path = settings.path.state_file
        if self.memory is not None and self.memory.path != (Path(path) if path else None):
            self.memory = FaultMemory(Path(path) if path else None, settings.path.procfs,
                                      self._wall)

    def errors(self) -> int:
        return self._errors

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        now, wall = self._mono(), self._wall()
        findings: list[Finding] = []
        missing = missing_inputs(out.readings)
        for name in missing:
            out.add(DIAGNOSIS_INPUT_MISSING, 1, input=name)
        out.publish(INPUTS_MISSING, missing)
        signals = gather(out.readings)
        host = out.readings.host_signals
        if host is not None:  # the host's trends, once for the node
            self._counters.keep_node({name: of(host) for name, of in HOST_TRENDS.items()},
                                     now, self.cfg.window)
        pasts: dict[str, GpuPast] = {}
        if self.memory is not None:
            pasts = self.memory.observe(signals, self.cfg.application_xids)
            for sig in signals:
                past = pasts.get(sig.uuid)
                if past is not None and sig.gpu_instance is None:
                    _remembered_xids(sig, past)
        grace_left = self._boot_grace_left()
        unjudged: dict[int, list[Row]] = {}
        settling: dict[int, float] = {}
        labels: dict[int, str] = {}
        views: list[GpuView] = []
        for sig in signals:
            labels[sig.index] = sig.uuid
            place_unjudged = (unjudged.setdefault(sig.index, []) if sig.gpu_instance is None
                              else [])
            findings += self._evaluate(sig, now, wall, out, place_unjudged,
                                       settling, pasts.get(sig.uuid), grace_left > 0)
            if sig.gpu_instance is not None:
                views.append(self._instance_view(sig, place_unjudged, unjudged[sig.index]))
            elif not sig.mig:
                views += self._views(sig, unjudged[sig.index])
        split = {v.uuid for v in views if v.gpu_instance is not None and v.up}
        for uuid in split:  # the instances as they are now, for when the GPU is lost
            self._last_instances[uuid] = tuple(v for v in views if v.uuid == uuid)
        # The GPUs of each job judged together: what a cause on one GPU does
        # to the others is listed under it, not reported on each (jobs.py).
        findings, jobs = judge_jobs(findings, views, self.cfg)
        out.publish(JOBS, jobs)
        # The keys of the rows that are a root cause on each GPU or any of
        # its MIG instances.
        active: dict[int, set[str]] = {index: set() for index in labels}
        for f in findings:
            active[f.gpu].add(f.row.key)
        # One gpu_diagnosis_active series per GPU and row: on while the row is
        # a root cause on the GPU or any of its MIG instances (the rows that
        # are off only with --metrics.detail).
        for index, uuid in labels.items():
            on_here = active[index]
            if not (on_here or self.detail):
                continue
            gpu = str(index)
            for judged in self._gpu_rows:
                on = judged.key in on_here
                if on or self.detail:
                    out.add_values(DIAGNOSIS_ACTIVE,
                                   (gpu, uuid, judged.row.symptom, judged.row.cause), on)
        gpus = [s for s in signals if s.gpu_instance is None]
        out.publish(FINDINGS, tuple(sort_findings(findings)))
        gaps: list[Gap] = []
        host_shape = host_absent(host)
        if host_shape != self._host_absent:  # what of the host a reason can name moved
            self._host_absent, self._host_absent_since = host_shape, now
        for sig in gpus:
            read_since = max(self._places[sig.index, None].read_since, self._host_absent_since)
            gaps += self._reasons.of(sig, unjudged.get(sig.index, ()), self.cfg, missing,
                                     self.switched_off, now, grace_left, read_since)
        self._reasons.forget(s.index for s in gpus)
        # Only a row that could not be judged now is "not judged": one the
        # board or driver does not offer, or whose subject is absent, is a
        # fact of the node, as in the verdict (``diagnose``, /diagnosis).
        for gap in gaps:
            if gap.kind is Kind.GAP:
                state = self._places[gap.gpu, None].states[self._row_at[gap.row]]
                out.add_values(DIAGNOSIS_NOT_JUDGED, state.labels, 1)
        out.publish(COVERAGE, Coverage(tuple(s.index for s in gpus), tuple(gaps), settling,
                                       self.cfg.window))

    def _boot_grace_left(self) -> float:
        """Seconds until the node is past the boot grace (0: it is, or its
        uptime cannot be read: the rows are never held back on a guess)."""
        if self._past_boot_grace or self._procfs is None:
            return 0.0
        up = uptime(self._procfs)
        left = 0.0 if up is None else self.cfg.boot_grace - up
        if left <= 0:
            self._past_boot_grace = True  # uptime only grows until the next boot
            return 0.0
        return left

    def _evaluate(self, sig: GpuSignals, now: float, wall: float, out: SnapshotBuilder,
                  unjudged: list[Row], settling: dict[int, float], past: GpuPast | None,
                  booting: bool) -> list[Finding]:
        """One place (a GPU, or a MIG instance of one): judge its rows, keep
        the steady state, then keep the root causes among the rows that are on.
        A row an instance cannot judge is not the GPU's unjudged row. A
        group of rows whose rules read the same as last poll, none of them in
        a timed change, is not judged again: its verdicts stand."""
        cfg = self.cfg
        place = self._places.get((sig.index, sig.gpu_instance))
        if place is None:
            place = self._places[sig.index, sig.gpu_instance] = PlaceState(now)
        timeline = place.timeline
        timeline.add(now, max(cfg.window, cfg.clear_after) + self._span_slack, cfg.window)
        instance = sig.gpu_instance is not None
        judged = self._instance_rows if instance else self._gpu_rows
        groups = self._instance_groups if instance else self._gpu_groups
        states = place.states
        if not states or states[0].labels[1] != sig.uuid:
            # New, or another GPU at this index (replaced): start afresh.
            gpu = str(sig.index)
            states = place.states = [
                RowState(labels=(gpu, sig.uuid, j.row.symptom, j.row.cause)) for j in judged]
            place.standings = [Standing() for _ in groups]
            place.polls, place.board, place.unjudged_at = 0, None, None
            place.quiet_at, place.skipped = -1, 0
        before = place.polls
        place.polls = min(before + 1, len(timeline.times))
        board = (board_of(sig), past, booting, cfg) if self.verdicts_stand else None
        same = board is not None and board == place.board
        place.board = board
        if not same:
            place.read_since = now
        counters = self._counters
        version = counters.series_version
        hosts = self._host_reads(sig, place, same, groups)
        # Every reader has answered: a row waiting for its first reading no
        # longer has the GPU settle.
        answered = place.timeline.answered >= 2 and not sig.gpm_pending
        if (same and place.quiet_at == version and hosts == place.hosts
                and not self._failing):
            # Every group stands with no row on and none judged for less than
            # the window: the poll is counted, into each group's standing
            # when one is next looked at; the readings kept every poll are
            # kept, and a row waiting for its first reading has the GPU settle.
            place.skipped += 1
            place.skipped_at = now
            for counter, name, value in place.kept_every_poll:
                counters.keep(counter, name, value, now, cfg.window)
            if place.waits_first and not answered:
                self._first_answers(place.timeline, sig, now, settling)
            unjudged += place.unjudged
            self._owners(sig)
            return []
        place.hosts = hosts
        if place.skipped:
            for standing in place.standings:
                standing.lag += place.skipped
                standing.last_stood = place.skipped_at
            place.skipped = 0
        trend: Trend | None = None  # made for the first group judged again
        on: list[int] = []
        judged_again = False
        for group, standing, host in zip(groups, place.standings, hosts, strict=True):
            if (same and standing.steady and standing.host == host
                    and standing.series_version == version):
                if not (standing.on or standing.kept_every_poll or self._failing
                        or standing.settle_since is not None
                        or (standing.waits_first and not answered)):
                    # What _stand() does for a group with nothing on, settling
                    # or kept every poll: most groups of a healthy node.
                    standing.lag += 1
                    standing.last_stood = now
                else:
                    self._stand(group, standing, judged, place, sig, now, settling)
            else:
                judged_again = True
                if trend is None:
                    counters.at(sig.index, now, cfg.window)
                    trend = Trend(counters.increase, wall, past, counters.series)
                if standing.lag:
                    self._catch_up(group, standing, states, before)
                self._judge(group, standing, judged, place, sig, trend, booting, now, wall,
                            settling)
                standing.host = host
            if standing.on:
                on += standing.on
        last = counters.series_version
        place.quiet_at = last if all(
            s.steady and not s.on and s.settle_since is None and s.series_version == last
            for s in place.standings) else -1
        place.kept_every_poll = [c for s in place.standings for c in s.kept_every_poll]
        place.waits_first = any(s.waits_first for s in place.standings)
        if judged_again:
            unjudged_at = sorted(i for s in place.standings for i in s.unjudged)
            if unjudged_at != place.unjudged_at:
                place.unjudged_at = unjudged_at
                place.unjudged = tuple(judged[i].row for i in unjudged_at)
        unjudged += place.unjudged
        owners = self._owners(sig)  # kept even when nothing is on: a GPU lost later had them
        findings: list[Finding] = []
        if not on:
            return findings
        roots = resolve([Candidate(judged[i].row, states[i].evidence,
                                   now - states[i].last_true <= cfg.explained_within)
                         for i in sorted(on)])
        if not roots:
            return findings
        for j, state in zip(judged, states, strict=True):
            row = j.row
            explained = roots.get(row)
            if explained is None:
                continue
            for part in state.parts or (state.evidence,):
                evidence = dict(part)
                for item in explained:
                    key = f"explains_{item.row.symptom}_{item.row.cause}"
                    evidence[key] = explanation(item, state.evidence)
                findings.append(Finding(sig.index, sig.uuid, row, evidence, state.since,
                                        tuple(explained), _xid_owners(row, part, sig, owners),
                                        sig.gpu_instance))
        return findings

    def _host_reads(self, sig: GpuSignals, place: PlaceState, same: bool,
                    groups: tuple[Group, ...]) -> tuple[object, ...]:
        """What each group's rules read of the host now. Whether a rule reads
        it on this place (``HostRead.when``) turns on the place's own
        signals: asked again only when those moved."""
        host = sig.host
        if host is None:
            return (None,) * len(groups)
        if not same or place.whens is None:
            place.whens = tuple(g.reads_host is None or g.reads_host.when is None
                                or g.reads_host.when(sig, self.cfg) for g in groups)
        return tuple(None if g.reads_host is None else g.reads_host.read(host, when)
                     for g, when in zip(groups, place.whens, strict=True))

    def _stand(self, group: Group, standing: Standing, judged: tuple[Judged, ...],
               place: PlaceState, sig: GpuSignals, now: float, settling: dict[int, float]) -> None:
        """A poll at which a group's verdicts stand: its rows that are on
        held now, the readings a rule reads keep this poll's, and its rows
        say how long the GPU settles as judging them would. The rows' bits
        are brought up to date when the group is judged again."""
        standing.lag += 1
        standing.last_stood = now
        for i in standing.on:
            place.states[i].last_true = now
        if standing.waits_first or standing.settle_since is not None:
            self._settling(standing, place.timeline, sig, now, settling)
        for counter, name, value in standing.kept_every_poll:
            self._counters.keep(counter, name, value, now, self.cfg.window)
        if self._failing:  # each of its rules judged: a failure is said again
            self._failing.difference_update(judged[i].key for i in group.at)

    def _settling(self, standing: Standing, timeline: PollTimeline, sig: GpuSignals,
                  now: float, settling: dict[int, float]) -> None:
        """How long the GPU still settles for the rows of a group: until
        every reader could have answered, and until a row off has been
        judged for the window."""
        left = 0.0
        if standing.waits_first:
            left = self._first_answers(timeline, sig, now, settling)
        if standing.settle_since is not None:
            judging_left = self.cfg.window - (now - standing.settle_since)
            if judging_left <= 0:  # judged for the window: no longer settling while it stands
                standing.settle_since = None
            left = max(left, judging_left)
        if left > 0 and left > settling.get(sig.index, 0.0):
            settling[sig.index] = left

    def _first_answers(self, timeline: PollTimeline, sig: GpuSignals, now: float,
                       settling: dict[int, float]) -> float:
        """How long the GPU settles for a row that waits for its first
        reading: until every reader could have answered, and GPM has."""
        if timeline.answered >= 2 and not sig.gpm_pending:
            return 0.0
        left = self.cfg.window + max(0.0, FIRST_ANSWERS_S - (now - timeline.started))
        if left > settling.get(sig.index, 0.0):
            settling[sig.index] = left
        return left

    @staticmethod
    def _catch_up(group: Group, standing: Standing, states: list[RowState],
                  polls: int) -> None:
        """Each row's bits for the polls its verdict stood (one per poll, the
        row on or off as it stayed), as judging it each poll would have left
        them; each folded counter's last reading moved to the last of them."""
        lag = min(standing.lag, polls)
        fill = (1 << lag) - 1
        mask = (1 << polls) - 1
        for i in group.at:
            st = states[i]
            st.held = ((st.held << lag) | (fill if st.active else 0)) & mask
            st.polls = polls
        last = standing.last_stood
        for counter, _, value in standing.consulted:
            series = counter.readings
            if (len(series) > 1 and series[-1][1] == value and series[-2][1] == value
                    and series[-1][0] < last):
                series[-1] = (last, value)
        standing.lag = 0

    def _judge(self, group: Group, standing: Standing, judged: tuple[Judged, ...],
               place: PlaceState, sig: GpuSignals, trend: Trend, booting: bool, now: float,
               wall: float, settling: dict[int, float]) -> None:
        """Judge a group's rows, and say whether their verdicts may stand
        while what the rules read stays the same."""
        cfg = self.cfg
        counters = self._counters
        counters.consulted, counters.node_consulted = [], []
        trend.clock_read = False
        timeline, states = place.timeline, place.states
        steady = True
        on: list[int] = []
        unjudged: list[int] = []
        standing.settle_since, standing.waits_first = None, False
        for i in group.at:
            j, state = judged[i], states[i]
            row = j.row
            try:
                # A link or the fabric still training after boot is not judged yet.
                verdict = (Verdict(None) if booting and row.boot_grace
                           else j.rule(sig, cfg, trend))
            except Exception as exc:  # one broken rule must not silence the others
                verdict = self._failed(j, exc)
                steady = False
            else:
                if self._failing:
                    self._failing.discard(j.key)
            holds = verdict.holds
            if holds is None and sig.gpu_instance is not None:
                unjudged.append(i)  # the instance's own: for its job only
            elif holds is None:
                # The board, the driver or a missing reader leaves the rule
                # nothing to judge: its 0 means unknown, not healthy
                # (gpu_diagnosis_not_judged, once coverage says why).
                unjudged.append(i)
                state.judged_since = None
                # Its readings may be on their way (a sampled reader's first
                # ratio, a process's first rate): until they could have come,
                # or while GPM says its first ratio has not, the row may still
                # be judged, and the GPU is still settling.
                standing.waits_first = True
            elif state.judged_since is None:
                state.judged_since = now
            if not holds:
                state.holding_since = None
            elif state.holding_since is None:
                state.holding_since = now
            if self._update(state, verdict, row, timeline, now, wall):
                on.append(i)
                steady = steady and holds is True  # on but not holding: clearing
            else:
                steady = steady and not holds  # holding but not on yet
                if not j.immediate and state.judged_since is not None:
                    # Judged for less than the window, or holding for less: a
                    # condition that holds cannot have turned the row on yet.
                    since = (state.judged_since if state.holding_since is None
                             else max(state.judged_since, state.holding_since))
                    if cfg.window - (now - since) > 0 and (
                            standing.settle_since is None or since > standing.settle_since):
                        standing.settle_since = since
        self._settling(standing, timeline, sig, now, settling)
        consulted = counters.consulted
        every_poll = counters.read_as_series
        standing.steady = (steady and not trend.clock_read
                           and all(counter.steady() for counter, _, _ in consulted)
                           and all(counter.steady() for counter in counters.node_consulted))
        standing.series_version = counters.series_version
        standing.kept_every_poll = tuple(c for c in consulted if c[1] in every_poll)
        standing.consulted = tuple(c for c in consulted if c[1] not in every_poll)
        standing.on, standing.unjudged = tuple(on), tuple(unjudged)

    def _views(self, sig: GpuSignals, unjudged: list[Row]) -> list[GpuView]:
        """A whole GPU's view for its job; for a GPU lost while split into
        MIG instances, each instance it had, lost with it: the jobs on them
        were their jobs until the GPU fell off the bus."""
        place = self._places[sig.index, None]
        known, judged = place.view_rows
        if tuple(unjudged) != known:  # the rows judged, as long as they are the same
            left_out = set(unjudged)
            judged = tuple(j.row for j in self._gpu_rows if j.row not in left_out)
            place.view_rows = (tuple(unjudged), judged)
        had = self._last_instances.get(sig.uuid, ()) if not sig.gpu.up else ()
        if had:
            return [replace(v, up=False, utilization=None, sm_active=None, judged=judged)
                    for v in had]
        self._last_instances.pop(sig.uuid, None)
        return [GpuView(sig.index, sig.uuid, sig.gpu.up, sig.gpu.utilization, sig.sm_active,
                        len(sig.processes), self._owners(sig), judged)]

    def _instance_view(self, sig: GpuSignals, unjudged: list[Row],
                       gpu_unjudged: list[Row]) -> GpuView:
        """A MIG instance's view for its job: its pace is GPM's SM activity
        (NVML has none for an instance); what was judged on it, its own rows
        and its GPU's board rows."""
        left_out = set(unjudged) | set(gpu_unjudged)
        judged = tuple(j.row for j in self._instance_rows if j.row not in left_out) + tuple(
            j.row for j in self._gpu_rows if not j.row.per_instance and j.row not in left_out)
        view = GpuView(sig.index, sig.uuid, sig.gpu.up, sig.load, None, len(sig.processes),
                       sig.owners, judged, sig.gpu_instance, sig.compute_instance)
        return view

    def _owners(self, sig: GpuSignals) -> tuple[GpuOwner, ...]:
        """The place's owners; for a GPU that is lost, those it had."""
        if sig.gpu_instance is not None:
            return sig.owners
        if sig.owners:
            self._last_owners[sig.uuid] = sig.owners
            return sig.owners
        return self._last_owners.get(sig.uuid, ()) if not sig.gpu.up else ()

    def _failed(self, judged: Judged, exc: Exception) -> Verdict:
        """A rule that raised: counted, said once until it judges again, and
        its row left unjudged this poll."""
        self._errors += 1
        if judged.key not in self._failing:
            self._failing.add(judged.key)
            log.error("diagnosis rule %s failed: %s", judged.key, exc)
        return Verdict(None)

    def _update(self, st: RowState, verdict: Verdict, row: Row, timeline: PollTimeline,
                now: float, wall: float) -> bool:
        holds = verdict.holds is True
        # This poll in bit 0; the bits of polls older than the span drop out.
        st.polls = min(st.polls + 1, len(timeline.times))
        st.held = ((st.held << 1) | holds) & ((1 << st.polls) - 1)
        if holds:
            st.last_true = now
            st.evidence = verdict.evidence
            st.parts = verdict.parts
        if st.active:
            if not holds and now - st.last_true >= self.cfg.clear_after:
                st.active = False
            return st.active
        if not holds:
            return False
        if not row.immediate:
            # The row's polls go back far enough to cover the window, and the
            # condition held at hold_ratio of the row's polls within it.
            covered = timeline.times[-st.polls] <= now - self.cfg.window
            recent = min(st.polls, timeline.in_window)
            held = (st.held & ((1 << recent) - 1)).bit_count()
            if not covered or held < self.cfg.hold_ratio * recent:
                return False
        # Since the fault itself where the rule knows when it began (an Xid
        # remembered from before a restart keeps its time).
        st.active = True
        st.since = wall if verdict.since is None else min(wall, verdict.since)
        return True

    def _increase_fn(self, gpu: int, now: float) -> Callable[[str, float | None], float | None]:
        """The increase a rule on GPU ``gpu`` gets at ``now`` (Trend.increase)."""
        self._counters.at(gpu, now, self.cfg.window)
        return self._counters.increase

    def _readings(self, gpu: int, name: str) -> tuple[tuple[float, float], ...]:
        """The readings kept of ``name`` on GPU ``gpu`` (Trend.series)."""
        return self._counters.series(name, gpu)
