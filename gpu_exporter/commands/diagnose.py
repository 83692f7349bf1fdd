"""``gpu-exporter diagnose``: for the on-call engineer who has SSH'd into the
node. Reads a running exporter's /diagnosis, or runs a scenario on a virtual
clock (no sleeping), and prints causal chains, most severe first.

Exit status (report.EXIT_STATUSES): 0 healthy, 1 warnings, 2 critical, 3 the
exporter could not be read, 4 the exporter (or the simulated node) could not
see the GPUs: NVML down, no GPU, or polls that stopped; 5 nothing found but
some checks could not run. A blind exporter has no findings, and a check that
did not run found nothing: neither may read as "healthy"."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from gpu_exporter.commands import client as exporter_client
from gpu_exporter.commands import npd
from gpu_exporter.commands.client import (
    BadUrl,
    ClientSettings,
    ExporterClient,
    Refused,
    Unreadable,
    exporter_url,
)
from gpu_exporter.commands.report import (
    EXIT_STATUSES,
    EXIT_UNREACHABLE,
    PRECEDENCE,
    exit_status,
    render_text,
)
from gpu_exporter.diagnosis.coverage import incomplete
from gpu_exporter.facts.cadence import SLOW_READ_EVERY_POLLS
from gpu_exporter.facts.safetext import terminal_safe
from gpu_exporter.settings.config import ConfigError, load, parse_duration
from gpu_exporter.web.diagnosis import report

DEFAULT_URL = "http://127.0.0.1:9835"


def simulate(scenario: str, config_file: Path | None, duration: float | None,
             baseline_file: Path | None = None) -> dict[str, Any]:
    """Run the scenario through the real exporter on a virtual clock and return
    what /diagnosis would answer at the end."""
    from gpu_exporter.commands.one_shot import one_shot_on_simulated_node
    from gpu_exporter.simulator import ScenarioError, load_scenario

    overrides: dict[str, Any] = {}
    if baseline_file is not None:
        overrides["baseline_file"] = baseline_file
    settings = load(overrides, config_file)
    try:
        sc = load_scenario(scenario)
    except ScenarioError as exc:
        raise ConfigError(str(exc)) from None
    exporter, clock = one_shot_on_simulated_node(settings, sc)
    if duration is None:
        # Long enough for the last change in the scenario, the slowest read to
        # see it (every SLOW_READ_EVERY_POLLS polls) and every window after it.
        last = max((step.at for step in sc.timeline), default=0.0)
        cfg = settings.diagnosis
        slowest = SLOW_READ_EVERY_POLLS * settings.poll.interval
        duration = last + slowest + max(cfg.window, 1.0) + 5.0
    try:
        interval = settings.poll.interval
        exporter.poller.poll()
        elapsed = 0.0
        while elapsed < duration:
            clock.advance(interval)
            elapsed += interval
            exporter.poller.poll()
        return report(exporter.poller.latest, clock(), interval)
    finally:
        exporter.stop()


def runbook_url(base: str) -> Callable[[Mapping[str, Any]], str]:
    """A finding's runbook entry on the exporter that answered: its /runbook
    serves the entry with the thresholds that node runs with."""
    def entry(finding: Mapping[str, Any]) -> str:
        anchor = str(finding.get("runbook", "")).partition("#")[2]
        return f"{base}/runbook" + (f"#{urllib.parse.quote(anchor, safe='-_.')}"
                                    if anchor else "")
    return entry


def fetch(url: str, timeout: float = 5.0,
          client: ExporterClient | None = None) -> dict[str, Any]:
    """The exporter's /diagnosis answer; ``client``: how to ask it (TLS,
    basic auth), made for ``url`` (default: plain, as the URL says)."""
    asking = client or ExporterClient(exporter_url(url), timeout=timeout)
    target = asking.base_url + "/diagnosis"
    body = asking.get("/diagnosis")
    try:
        data = json.loads(body.decode())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise Unreadable(f"{target} did not answer JSON; is it a gpu-exporter?") from None
    if not isinstance(data, dict) or "findings" not in data:
        raise Unreadable(f"{target} answered JSON without findings")
    return data


def blind_reason(data: dict[str, Any]) -> str | None:
    """Why the findings cannot be trusted to cover the GPUs, or None."""
    seen = data.get("visibility")
    if not isinstance(seen, dict):
        return None  # an exporter from before /diagnosis said what it saw
    blind = seen.get("blind")
    return None if blind is None else str(blind)


def settled(data: Mapping[str, Any]) -> bool:
    """Whether every judged row of the answer has had its diagnosis window
    (nothing it could find is still on its way)."""
    cov = data.get("coverage")
    return not isinstance(cov, Mapping) or not cov.get("settling")


def fetch_settled(url: str, wait: float, clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep,
                  client: ExporterClient | None = None) -> dict[str, Any]:
    """/diagnosis once the exporter answers and its findings have settled,
    asking again for up to ``wait`` seconds (an exporter just started, a demo
    on a slow machine); after that, the last answer, or why there was none.
    A refusal (TLS, basic auth) is final: asking again gets the same."""
    deadline = clock() + wait
    while True:
        try:
            data = fetch(url, client=client)
        except Refused:
            raise
        except ConnectionError:
            if clock() >= deadline:
                raise
        else:
            if settled(data) or clock() >= deadline:
                return data
        sleep(min(0.5, max(0.0, deadline - clock())))


def _unreadable(args: argparse.Namespace, exc: Exception) -> int:
    """Exit 3: the exporter could not be read (as NPD's Unknown, with why)."""
    if args.format == "npd":
        why = exc.brief if isinstance(exc, Refused) else str(exc)
        return _print_npd(npd.verdict(args.condition, None, why))
    print(f"gpu-exporter diagnose: {terminal_safe(exc)}", file=sys.stderr)
    return EXIT_UNREACHABLE


def _usage_error(args: argparse.Namespace, exc: ConfigError) -> NoReturn:
    """Exit 2 (a usage error, stderr, as every command's); as an NPD plugin
    the condition's message says it too, or it would be empty."""
    if args.format == "npd":
        print(npd.one_line(f"usage error: {exc}"))
    raise exc


def _print_npd(answer: tuple[int, str]) -> int:
    status, message = answer
    print(message)
    return status


def main(argv: Sequence[str], parser_cls: type[argparse.ArgumentParser]) -> int:
    statuses = ", ".join(f"{code} {text}" for code, text in EXIT_STATUSES)
    # No abbreviations: --auth.password would be taken for --auth.password-file,
    # its value (a password) for a path, and the path named in the error.
    p = parser_cls(prog="gpu-exporter diagnose", allow_abbrev=False,
                   description="Say what is wrong with this node's GPUs and why: symptom -> "
                   f"likely cause -> evidence -> fix. Exit status: {statuses}. {PRECEDENCE} "
                   "A usage error exits 2, as with every gpu-exporter command.")
    p.add_argument("--url", default=DEFAULT_URL,
                   help=f"the running exporter to ask: host:port, its base URL or its "
                   f"/metrics or /diagnosis URL, http or https (default {DEFAULT_URL})")
    exporter_client.add_arguments(p)
    p.add_argument("--wait", metavar="DURATION",
                   help="wait up to DURATION for the exporter to answer and for its findings "
                   "to settle (every check judged for its full window since the exporter "
                   "started), e.g. right after starting it")
    p.add_argument("--simulate", metavar="NAME|FILE",
                   help="instead, run this scenario on a virtual clock and diagnose it")
    p.add_argument("--duration", metavar="DURATION",
                   help="with --simulate: how much scenario time to run (default: long "
                   "enough for every change and window)")
    p.add_argument("--config.file", dest="config_file", type=Path, metavar="FILE",
                   help="with --simulate: the exporter's config (diagnosis thresholds)")
    p.add_argument("--baseline.file", dest="baseline_file", type=Path, metavar="FILE",
                   help="with --simulate: compare with this node baseline")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.add_argument("--format", choices=("text", "json", "npd"), default=None,
                   help="text (default), json (as --json), or npd: one node condition in "
                   "node-problem-detector's custom plugin protocol (exit status 0 OK, 1 "
                   "problem, 3 unknown; one line of at most 80 characters)")
    p.add_argument("--condition", choices=npd.CONDITIONS,
                   help="with --format npd: the node condition to answer")
    args = p.parse_args(argv)
    if (args.format == "npd") != (args.condition is not None):
        p.error("--format npd and --condition go together")
    duration = wait = None
    try:
        if args.duration is not None:
            duration = parse_duration(args.duration)
        if args.wait is not None:
            wait = parse_duration(args.wait)
    except ValueError as exc:
        raise ConfigError(f"--duration/--wait: {exc}") from None
    if args.simulate:
        # The simulated node's own log (a GPU falling off the bus...) is the
        # scenario talking; the findings below say it better.
        logging.disable(logging.ERROR)
        data = simulate(args.simulate, args.config_file, duration, args.baseline_file)
        runbook = None  # no exporter to link to: the answer's own docs/runbook.md path
    else:
        try:
            base = exporter_url(args.url)
            client = ExporterClient(base, ClientSettings.from_args(args))
        except BadUrl as exc:
            return _unreadable(args, exc)
        except ConfigError as exc:
            _usage_error(args, exc)
        try:
            data = fetch_settled(base, wait or 0.0, client=client)
        except ConnectionError as exc:
            return _unreadable(args, exc)
        runbook = runbook_url(base)
    if args.format == "npd":
        return _print_npd(npd.verdict(args.condition, data))
    findings = data.get("findings", [])
    drifts = data.get("baseline_drifts", [])
    blind = blind_reason(data)
    coverage = data.get("coverage")
    jobs = data.get("jobs") or []
    if args.json or args.format == "json":
        print(json.dumps({"findings": findings, "jobs": jobs, "baseline_drifts": drifts,
                          "visibility": data.get("visibility"), "coverage": coverage},
                         indent=2))
    else:
        color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        sys.stdout.write(render_text(findings, color, drifts, blind,
                                     coverage if isinstance(coverage, dict) else None,
                                     runbook, jobs))
    if blind is not None and (args.json or args.format == "json"):
        # The JSON says it too; a script that reads only the status and stderr
        # still learns why.
        print(f"gpu-exporter diagnose: could not see the GPUs: {terminal_safe(blind)}",
              file=sys.stderr)
    # A job's straggler whose cause is not seen is a warning of its own: its
    # peers' waiting is listed under it, not among the findings.
    straggling = [j["root_cause"] for j in jobs if (j.get("root_cause") or {}).get("cause")
                  == "not_seen"]
    return exit_status([*findings, *straggling], blind, incomplete(data))
