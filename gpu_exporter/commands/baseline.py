"""``gpu-exporter baseline capture|diff``: the node's hardware sanity check.

capture polls the node a few times (or a scenario on a virtual clock with
``--simulate``) and writes what should never change; diff polls again and prints
every drift (field, expected, found), exit status 1 when anything drifted."""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gpu_exporter import baseline
from gpu_exporter.facts.safetext import terminal_safe
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.settings.config import ConfigError, load

POLLS = 5


def _poll(simulate: str | None, polls: int) -> list[Snapshot]:
    from gpu_exporter.commands.one_shot import one_shot_on_simulated_node
    from gpu_exporter.daemon.exporter import Exporter
    from gpu_exporter.simulator import ScenarioError, load_scenario

    settings = load({"collectors": {"xid": False}, "diagnosis": {"enabled": False}})
    if simulate:
        logging.disable(logging.ERROR)
        try:
            scenario = load_scenario(simulate)
        except ScenarioError as exc:
            raise ConfigError(str(exc)) from None
        exporter, clock = one_shot_on_simulated_node(settings, scenario)
        advance: Callable[[float], None] = clock.advance
    else:
        exporter = Exporter(settings)
        advance = time.sleep
    try:
        snaps = []
        for i in range(polls):
            if i:
                advance(1.0)
            snap = exporter.poller.poll()  # watched: a hung GPU does not hold it up
            if not exporter.session.up:
                # No GPU to describe: say so at once, not after every poll.
                err = exporter.session.last_error
                raise ConfigError("NVML is not available: " + (err.init_hint() if err else
                                                               "unknown reason"))
            if snap is not None:
                snaps.append(snap)
        return snaps
    finally:
        exporter.stop()


def main(argv: Sequence[str], parser_cls: type[argparse.ArgumentParser]) -> int:
    p = parser_cls(prog="gpu-exporter baseline",
                   description="Record what should not change on this GPU node, and compare "
                   "the node with it later.")
    sub = p.add_subparsers(dest="action", required=True, parser_class=parser_cls)
    cap = sub.add_parser("capture", help="write the node baseline")
    cap.add_argument("--out", type=Path, default=Path("node-baseline.json"),
                     help="where to write it (default node-baseline.json)")
    diff = sub.add_parser("diff", help="compare the node with its baseline; exit 1 on drift")
    diff.add_argument("--baseline", type=Path, default=Path("node-baseline.json"),
                      help="the baseline file (default node-baseline.json)")
    diff.add_argument("--json", action="store_true", help="print JSON for scripts")
    for sp in (cap, diff):
        sp.add_argument("--simulate", metavar="NAME|FILE",
                        help="use a simulated node (a scenario) instead of this machine")
        sp.add_argument("--polls", type=int, default=POLLS,
                        help=f"polls to take, a second apart (default {POLLS})")
    args = p.parse_args(argv)
    if args.polls < 1:
        raise ConfigError("--polls must be at least 1")
    if args.action == "capture":
        data = baseline.capture(_poll(args.simulate, args.polls))
        try:
            args.out.write_text(json.dumps(data, indent=2) + "\n")
        except OSError as exc:
            raise ConfigError(f"cannot write {args.out}: {exc.strerror}") from None
        print(f"wrote the baseline of {data['gpu_count']} GPU(s) to {args.out}")
        return 0
    expected = baseline.load(args.baseline)
    snaps = _poll(args.simulate, args.polls)
    current = baseline.capture(snaps)
    facts = {int(g["index"]): g for g in current["gpus"]}
    drifts = baseline.compare(expected, facts)
    if args.json:
        print(json.dumps({"drifts": [d.as_dict() for d in drifts]}, indent=2))
    elif not drifts:
        print(f"no drift: the node matches {args.baseline}")
    else:
        for d in drifts:
            # The found values come from the GPUs, the expected ones from a file.
            print(terminal_safe(f"GPU {d.gpu} ({d.uuid}) {d.field}: expected {d.expected}, "
                                f"found {d.found}"))
    return 1 if drifts else 0


__all__ = ["main"]
