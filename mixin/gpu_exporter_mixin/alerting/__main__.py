"""``gpu-exporter-alerts [--config FILE] [--out DIR] [--check]`` (or ``python -m
gpu_exporter_mixin.alerting``): regenerate (or check) the rule files, the
PrometheusRule, the runbook and the promtool unit tests.

A generator, not part of the exporter: run it from a source checkout (it reads
./alerts/config.yaml and writes under .) or from an installed package with
``--config`` and ``--out``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpu_exporter_mixin.alerting.config import AlertConfigError, load_config
from gpu_exporter_mixin.alerting.generate import differences, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu-exporter-alerts",
        description="Generate the Prometheus rules, the PrometheusRule, docs/runbook.md and "
                    "the promtool unit tests from the diagnosis table and alerts/config.yaml.")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="the rules' settings (default: ./alerts/config.yaml if there is "
                             "one, else the built-in defaults)")
    parser.add_argument("--out", type=Path, default=Path("."), metavar="DIR",
                        help="the directory the files are written under (alerts/, docs/, "
                             "deploy/); default: the current directory")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a file under --out differs")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        if args.check:
            problems = differences(config, args.out)
            for problem in problems:
                print(problem, file=sys.stderr)
            if problems:
                print("run: gpu-exporter-alerts", file=sys.stderr)
            return 1 if problems else 0
        for path in write(config, args.out):
            print(f"wrote {args.out / path}")
    except AlertConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
