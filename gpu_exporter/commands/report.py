"""Findings for people and scripts: the JSON of /diagnosis and `diagnose
--json`, and the causal chains `gpu-exporter diagnose` prints (symptom ->
likely cause -> evidence -> fix, most severe first)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpu_exporter.diagnosis.coverage import checks_text, gpu_list, reason_text
from gpu_exporter.diagnosis.evidence import evidence_line
from gpu_exporter.diagnosis.table import SEVERITY_ORDER
from gpu_exporter.facts.safetext import terminal_safe
from gpu_exporter.poll.readings import GpuOwner


def owner_text(owner: Mapping[str, Any]) -> str:
    """``ml/train-a/trainer``, ``ml/infer/server (claim ml/gpus)`` or ``slurm
    job 4242``, from a finding's owner in its JSON form (not yet escaped for
    any destination)."""
    return GpuOwner(**{k: str(owner.get(k, "")) for k in
                       ("namespace", "pod", "container", "slurm_job_id", "claim",
                        "pod_uid", "slurm_uid")}).describe()


_COLORS = {"critical": "\033[1;31m", "warning": "\033[33m", "info": "\033[36m"}
_RESET = "\033[0m"


HEALTHY = "No problems found: every GPU on this node looks healthy."


def render_text(findings: Iterable[Mapping[str, Any]], color: bool,
                drifts: Iterable[Mapping[str, Any]] = (), blind: str | None = None,
                coverage: Mapping[str, Any] | None = None,
                runbook: Callable[[Mapping[str, Any]], str] | None = None,
                jobs: Iterable[Mapping[str, Any]] = ()) -> str:
    """The findings for a person. ``blind``: why the GPUs could not be read,
    said first and instead of any "healthy". ``coverage``: /diagnosis's
    account of the checks that could not run; "healthy" is said only when it
    is complete (None: the answer did not say, so it is not). ``runbook``:
    where a finding's runbook entry is read (default: as the answer says).
    ``jobs``: the node's jobs; those of several GPUs, or with a root cause,
    are listed with their ranks and that cause."""
    items = sorted(findings, key=lambda f: (SEVERITY_ORDER.get(str(f["severity"]), 99),
                                            _gpu_order(f["gpu"]), str(f["symptom"])))
    drift_list = list(drifts)
    job_list = [j for j in jobs if len(j.get("ranks") or ()) > 1 or j.get("root_cause")]
    complete = coverage is not None and coverage.get("complete") is True
    lines = []
    if blind is not None:
        lines.append(f"Could not see the GPUs: {terminal_safe(blind)}.")
        lines.append("")
    elif not items and not drift_list and complete and not any(
            j.get("root_cause") for j in job_list):
        return HEALTHY + "\n" + _facts(coverage)
    safe = terminal_safe
    for f in items:
        sev = str(f["severity"])
        head = f"{safe(sev.upper()):8s} GPU {safe(f['gpu'])} ({safe(f['uuid'])})"
        if color and sev in _COLORS:
            head = _COLORS[sev] + head + _RESET
        lines.append(f"{head}  {safe(f['symptom'])} -> {safe(f['cause'])}")
        lines.append(f"  {safe(f['summary'])}")
        owners = [owner_text(o) for o in f.get("owners") or ()]
        if owners:
            lines.append(f"  owner:    {safe(', '.join(owners))}")
        evidence = dict(f.get("evidence") or {})
        # A consequence this cause explains is listed beneath it, not as evidence.
        explained = {f"explains_{e['symptom']}_{e['cause']}": e
                     for e in f.get("explained") or ()}
        shown = {k: v for k, v in evidence.items() if k not in explained}
        if shown:
            lines.append(f"  evidence: {safe(evidence_line(shown))}")
        for key, e in explained.items():
            lines.append(f"  explains: {safe(e['symptom'])} -> {safe(e['cause'])}: "
                         f"{safe(evidence.get(key) or e['why'])}")
        for gpus, symptom, cause, why in _grouped(f.get("consequences") or ()):
            lines.append(f"  explains: {safe(gpus)} {safe(symptom)} -> {safe(cause)}: "
                         f"{safe(why)}")
        lines.append(f"  fix:      {safe(_named_process(str(f['fix']), evidence))}")
        lines.append(f"  runbook:  {safe(runbook(f) if runbook else f['runbook'])}")
        lines.append("")
    lines += _jobs_text(job_list)
    if drift_list:
        lines.append("Drift from the node baseline:")
        for d in drift_list:
            lines.append(f"  GPU {safe(d['gpu'])} {safe(d['field'])}: expected "
                         f"{safe(d['expected'])}, found {safe(d['found'])}")
        lines.append("")
    if blind is None and not complete:
        lines += _in_part(coverage, found=bool(items or drift_list))
        lines.append("")
        lines.append(_facts(coverage).rstrip("\n"))
    return "\n".join(lines).rstrip("\n") + "\n"


def _gpu_order(gpu: object) -> tuple[int, str]:
    """GPUs by their number, as the node page lists them: /diagnosis says
    "10" and "2", which as text would put GPU 10 before GPU 2."""
    text = str(gpu)
    return (int(text), "") if text.isdigit() else (1 << 30, text)


def _grouped(consequences: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(``GPUs 0-4, 6-7``, symptom, cause, why): one line for the GPUs a cause
    does the same to, in the order of their first GPU."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for c in consequences:
        key = (str(c["symptom"]), str(c["cause"]), str(c["why"]))
        groups.setdefault(key, []).append(_unit(c, with_gpu=False))
    return [(gpu_list(gpus), *key) for key, gpus in groups.items()]


def _unit(d: Mapping[str, Any], with_gpu: bool = True) -> str:
    """``GPU 3`` (or ``3``), or a MIG instance as ``GPU 0 (GI 1, CI 0)``
    (or ``0 (GI 1, CI 0)``), from a job's rank, root cause or consequence."""
    text = f"GPU {d['gpu']}" if with_gpu else str(d["gpu"])
    if d.get("gpu_instance") is None:
        return text
    ci = f", CI {d['compute_instance']}" if d.get("compute_instance") is not None else ""
    return f"{text} (GI {d['gpu_instance']}{ci})"


def _jobs_text(jobs: list[Mapping[str, Any]]) -> list[str]:
    """``Job pod ml/train: GPU 0 waiting, GPU 3 working``, its root cause,
    and what that cause does to the job's other GPUs."""
    if not jobs:
        return []
    safe = terminal_safe
    lines = ["Jobs (each owner's GPUs judged together):"]
    for j in jobs:
        ranks = ", ".join(f"{_unit(r)} {r['state']}" for r in j.get("ranks") or ())
        lines.append(f"  {safe(j['job'])}: {safe(ranks)}")
        root = j.get("root_cause")
        if root:
            lines.append(f"    root cause: {safe(_unit(root))} {safe(root['symptom'])} -> "
                         f"{safe(root['cause'])}: {safe(root['summary'])}")
            if root.get("checked"):
                lines.append(f"    checked:    {safe(', '.join(map(str, root['checked'])))}")
        for gpus, symptom, cause, _ in _grouped(j.get("consequences") or ()):
            lines.append(f"    waiting:    {safe(gpus)} {safe(symptom)} -> {safe(cause)}")
    lines.append("")
    return lines


_PID = re.compile(r"\bPID\b")


def _named_process(text: str, evidence: Mapping[str, Any]) -> str:
    """The table's fix with its word PID replaced by the process the evidence
    names (a number, or nothing replaced where the evidence names none)."""
    pid = str(evidence.get("process_pid", ""))
    return _PID.sub(pid, text) if pid.isdigit() else text


def _in_part(coverage: Mapping[str, Any] | None, found: bool) -> list[str]:
    """Which checks could not run, one line per reason and set of GPUs."""
    safe = terminal_safe
    rest = "other problems" if found else "problems"
    if coverage is None:
        return ["Checked only in part: the exporter does not say which checks it could run "
                f"(a version from before it did): finding no {rest} says nothing of the rest."]
    lines = [f"Checked only in part: no {rest} found in the checks that ran, but these could "
             "not run:"]
    settling = coverage.get("settling")
    if isinstance(settling, Mapping):
        window = coverage.get("window_seconds")
        needs = f"{window:g} s" if isinstance(window, float | int) else "its window"
        left = settling.get("seconds_left")
        # A command that can be run as printed: --wait takes a duration.
        wait = (f"{math.ceil(left) + 10}s" if isinstance(left, float | int)
                and 0 <= left < 86400 else "5m")
        lines.append(f"  {safe(gpu_list(settling.get('gpus') or ()))}: still watching: a "
                     f"finding needs {needs} of polls, {safe(left)} s "
                     f"to go (run again, or diagnose --wait {wait})")
    for entry in coverage.get("not_checked") or ():
        if not isinstance(entry, Mapping):
            continue
        lines.append(f"  {safe(gpu_list(entry.get('gpus') or ()))}: "
                     f"{safe(checks_text(entry.get('checks') or ()))}: {safe(entry.get('reason'))}")
    return lines


def _facts(coverage: Mapping[str, Any] | None) -> str:
    """The checks this node's boards or driver do not offer, and those that
    ran and found their subject absent, on one line each group: said, but
    never counted against the verdict."""
    safe = terminal_safe
    out = []
    for section, head in (("not_available", "Not available on this node (the board or driver "
                                            "does not offer it; not a gap):"),
                          ("nothing_to_check", "Nothing to check (not a gap):")):
        found = [e for e in (coverage or {}).get(section) or () if isinstance(e, Mapping)]
        if found:
            out.append(head)
            for e in found:
                checks = checks_text(e.get("checks") or ())
                out.append(f"  {safe(gpu_list(e.get('gpus') or ()))}: "
                           + (f"{safe(checks)}: " if checks else "")
                           + safe(reason_text(e)))
    return "".join(line + "\n" for line in out)


EXIT_HEALTHY = 0
EXIT_WARNING = 1
EXIT_CRITICAL = 2
EXIT_UNREACHABLE = 3  # the exporter could not be asked
EXIT_BLIND = 4  # asked, but it could not see the GPUs: no verdict either way
# Nothing found, but some checks could not run now: not "healthy". A check
# the board or driver does not offer is a fact of the node, never this.
EXIT_IN_PART = 5

# What `diagnose --help` and the README say, from one place.
EXIT_STATUSES = (
    (EXIT_HEALTHY, "healthy: every check the boards and driver offer ran on every GPU and "
                   "found nothing (it lists those they do not offer)"),
    (EXIT_WARNING, "warnings"),
    (EXIT_CRITICAL, "something critical"),
    (EXIT_UNREACHABLE, "the exporter could not be read"),
    (EXIT_BLIND, "the GPUs could not be seen (NVML down, no GPU, polls stopped)"),
    (EXIT_IN_PART, "checked only in part: nothing found, but some checks could not run now "
                   "(a reader off or failing, no permission, a GPU settling or lost; it names "
                   "them and why)"),
)
PRECEDENCE = ("A node it cannot see is 4 whatever else it answered; otherwise a finding "
              "outranks a check that could not run (2 before 1 before 5).")


def exit_status(findings: Iterable[Mapping[str, Any]], blind: str | None = None,
                in_part: bool = False) -> int:
    """The status of an answer: 4 the GPUs could not be seen (whatever else
    was found); else 2 something critical, 1 warnings (or notes), 5 nothing
    found but some checks could not run (``in_part``), 0 healthy."""
    if blind is not None:
        return EXIT_BLIND
    severities = {str(f["severity"]) for f in findings}
    if "critical" in severities:
        return EXIT_CRITICAL
    if severities:
        return EXIT_WARNING
    return EXIT_IN_PART if in_part else EXIT_HEALTHY
