"""``gpu-exporter slurm-health``: Slurm's ``HealthCheckProgram`` for a GPU node.

slurmd runs the program every ``HealthCheckInterval`` on each node. It reads
the local exporter's /diagnosis (``diagnose``'s fetch) and judges it with the
node-problem-detector classes (``npd.verdict``): a hardware fault, or GPUs the
exporter cannot see, drain the node with a one-line reason (``scontrol update
nodename=N state=drain reason="gpu-exporter: ..."``); a node it drained itself
(its reason starts with ``gpu-exporter:``) is resumed once both classes read
OK: the fault cleared, and the recovery action the driver gives reads none
(hardware-fault cannot be OK while that reading is missing).

What it never does: drain on a check that could not run (the exporter not
answering, a class judged only in part: Unknown leaves the node as it is),
resume a node drained by anyone else (an admin's "maintenance" stays), or
pass anything through a shell: scontrol gets the reason as one argument,
printable ASCII on one line, bounded in length.

slurmd logs a non-zero exit status ("health_check failed: rc:N output:...")
and otherwise ignores it: the program acts through scontrol. Its statuses:
0 healthy (resumed, or nothing to do), 1 a problem (drained, or kept
drained), 2 a usage error, 3 the check could not run (nothing changed).
Every HTTP call and subprocess shares one deadline (``--timeout``), well
inside slurmd's own limit on the program (60 s).
"""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_exporter.commands import client as exporter_client
from gpu_exporter.commands import npd
from gpu_exporter.commands.client import BadUrl, ClientSettings, ExporterClient, exporter_url
from gpu_exporter.commands.diagnose import DEFAULT_URL, fetch
from gpu_exporter.facts.safetext import terminal_safe
from gpu_exporter.settings.config import ConfigError, parse_duration

PROG = "gpu-exporter slurm-health"
HEALTHY, PROBLEM, USAGE, NOT_RUN = 0, 1, 2, 3
# What marks a drain as this program's own: only such a drain is resumed.
REASON_PREFIX = "gpu-exporter:"
# Slurm keeps any reason; sinfo -R shows 20 characters by default and
# scontrol the whole line. Bounded so one node's reason stays one short line.
MAX_REASON = 120
DEFAULT_TIMEOUT_S = 20.0
# Slurm node names (slurm.conf NodeName): letters, digits, and . _ -; a name
# is one scontrol argument, so nothing else may reach it.
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", re.ASCII)


class Unavailable(Exception):
    """A step that could not run in time or at all (nothing was changed)."""


@dataclass(frozen=True)
class NodeState:
    drained: bool  # DRAIN among the node's state flags (DRAINING or DRAINED)
    reason: str  # the reason without Slurm's " [user@time]" stamp; "" when none

    @property
    def ours(self) -> bool:
        return self.drained and self.reason.startswith(REASON_PREFIX)


def reason_text(message: str) -> str:
    """The drain reason for ``message``: ``gpu-exporter: ...``, printable ASCII
    on one line, at most MAX_REASON characters."""
    return npd.one_line(f"{REASON_PREFIX} {message}", MAX_REASON)


_STAMP = re.compile(r"\s*\[[^\[\]]*@[^\[\]]*\]\s*$")


def parse_node(text: str) -> NodeState:
    """The drain flag and reason from ``scontrol show node NAME``'s output
    (``State=IDLE+DRAIN ...`` and ``Reason=... [root@2026-01-01T00:00:00]``,
    each on a line of its own)."""
    state = reason = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Reason="):
            reason = _STAMP.sub("", stripped[len("Reason="):])
        for field in stripped.split():
            if field.startswith("State="):
                state = field[len("State="):]
    if state is None:
        raise Unavailable("scontrol showed no State= for the node")
    flags = set(re.split(r"[+*$~#!%@^-]", state.upper()))
    drained = bool(flags & {"DRAIN", "DRAINING", "DRAINED"})
    return NodeState(drained, "" if reason in (None, "(null)", "none") else str(reason))


class Deadline:
    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds

    def left(self) -> float:
        left = self._end - time.monotonic()
        if left <= 0:
            raise Unavailable("the check ran out of time")
        return left


def scontrol(binary: str, args: Sequence[str], deadline: Deadline) -> str:
    """Run scontrol (never through a shell) and return its stdout."""
    try:
        done = subprocess.run([binary, *args], capture_output=True, text=True,
                              timeout=deadline.left(), check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"{binary} {args[0]} did not answer in time") from None
    except OSError as exc:
        raise Unavailable(f"cannot run {binary}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = npd.one_line(done.stderr or done.stdout or f"exit status {done.returncode}", 200)
        raise Unavailable(f"{binary} {' '.join(args[:2])} failed: {said}")
    return done.stdout


@dataclass(frozen=True)
class Judgement:
    status: int  # HEALTHY, PROBLEM or NOT_RUN
    message: str


def judge(data: Mapping[str, Any]) -> Judgement:
    """Drain on a hardware fault or GPUs the exporter cannot see; healthy
    only when both classes are OK; otherwise the check did not run whole."""
    verdicts = {c: npd.verdict(c, data) for c in (npd.CANNOT_SEE, npd.HARDWARE_FAULT)}
    problems = [msg for status, msg in verdicts.values() if status == npd.PROBLEM]
    if problems:
        return Judgement(PROBLEM, "; ".join(problems))
    unknown = [msg for status, msg in verdicts.values() if status != npd.OK]
    if unknown:
        return Judgement(NOT_RUN, f"not judged: {unknown[0]}")
    return Judgement(HEALTHY, "; ".join(msg for _, msg in verdicts.values()))


def default_node() -> str:
    """slurmd's own NodeName default: the short hostname."""
    return socket.gethostname().split(".", 1)[0]


def check(url: str, node: str, binary: str, timeout: float,
          settings: ClientSettings | None = None) -> tuple[int, str]:
    """Judge the node and act; the exit status and one line for stdout.
    Raises Unavailable when the check could not run (nothing changed).
    ``settings``: how to ask a secured exporter (TLS, basic auth), as
    diagnose asks it."""
    deadline = Deadline(timeout)
    try:
        asking = ExporterClient(url, settings or ClientSettings(),
                                timeout=min(deadline.left(), 10.0))
        data = fetch(url, client=asking)
    except ConnectionError as exc:
        raise Unavailable(f"exporter not read: {exc}") from None
    verdict = judge(data)
    if verdict.status == NOT_RUN:
        raise Unavailable(verdict.message)
    current = parse_node(scontrol(binary, ["show", "node", node], deadline))
    if verdict.status == PROBLEM:
        reason = reason_text(verdict.message)
        if current.drained and not current.ours:
            return PROBLEM, f"{node}: {verdict.message} (already drained: {current.reason})"
        if current.ours and current.reason == reason:
            return PROBLEM, f"{node}: still drained: {verdict.message}"
        scontrol(binary, ["update", f"nodename={node}", "state=drain", f"reason={reason}"],
                 deadline)
        return PROBLEM, f"{node}: drained: {verdict.message}"
    if current.ours:
        scontrol(binary, ["update", f"nodename={node}", "state=resume"], deadline)
        return HEALTHY, f"{node}: resumed: {verdict.message}"
    if current.drained:
        return HEALTHY, f"{node}: {verdict.message} (left drained: {current.reason})"
    return HEALTHY, f"{node}: {verdict.message}"


def main(argv: Sequence[str], parser_cls: type[argparse.ArgumentParser]) -> int:
    p = parser_cls(prog=PROG, allow_abbrev=False, description=(
        "Slurm's HealthCheckProgram for a GPU node: read the local exporter's /diagnosis; "
        "drain the node (scontrol, reason 'gpu-exporter: ...') on a GPU hardware fault or "
        "when the exporter cannot see the GPUs; resume a node it drained itself once both "
        "are OK. It never drains when the check could not run, and never resumes a node "
        "drained by anyone else. Exit status: 0 healthy, 1 problem (drained), 2 usage "
        "error, 3 the check could not run (nothing changed)."))
    p.add_argument("--url", default=DEFAULT_URL,
                   help=f"the local exporter: host:port or its base URL, http or https "
                   f"(default {DEFAULT_URL})")
    p.add_argument("--node", help="this node's Slurm NodeName (default: the short hostname, "
                   "Slurm's own default)")
    p.add_argument("--scontrol", default="scontrol",
                   help="the scontrol program (default: scontrol on PATH)")
    p.add_argument("--timeout", default=f"{DEFAULT_TIMEOUT_S:.0f}s", metavar="DURATION",
                   help="the deadline for the whole check, every HTTP call and scontrol "
                   f"run included (default {DEFAULT_TIMEOUT_S:.0f}s; slurmd stops the program "
                   "at 60 s)")
    exporter_client.add_arguments(p)
    args = p.parse_args(argv)
    try:
        timeout = parse_duration(args.timeout)
    except ValueError as exc:
        raise ConfigError(f"--timeout: {exc}") from None
    if not 0 < timeout <= 55:
        raise ConfigError(f"--timeout {args.timeout}: give more than 0 s and at most 55 s "
                          "(slurmd stops a health check at 60 s)")
    node = args.node if args.node is not None else default_node()
    if not _NODE_NAME.match(node):
        raise ConfigError(f"--node {node!r}: not a Slurm node name (letters, digits, . _ -)")
    try:
        url = exporter_url(args.url)
    except BadUrl as exc:
        raise ConfigError(str(exc)) from None
    try:
        status, line = check(url, node, args.scontrol, timeout,
                             ClientSettings.from_args(args))
    except Unavailable as exc:
        print(f"{PROG}: {terminal_safe(npd.one_line(str(exc), 300))}; {node} left as it is",
              file=sys.stderr)
        return NOT_RUN
    print(terminal_safe(line))
    return status
