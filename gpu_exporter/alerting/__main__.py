"""``python -m gpu_exporter.alerting [--check]``: regenerate (or check) the rule
files, the PrometheusRule, the runbook and the promtool unit tests."""

from __future__ import annotations

import argparse
import sys

from gpu_exporter.alerting.config import AlertConfigError, load_config
from gpu_exporter.alerting.generate import differences, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpu_exporter.alerting",
        description="Generate the Prometheus rules, the PrometheusRule, docs/runbook.md and "
                    "the promtool unit tests from the diagnosis table and alerts/config.yaml.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a committed file differs")
    args = parser.parse_args(argv)
    try:
        config = load_config()
        if args.check:
            problems = differences(config)
            for problem in problems:
                print(problem, file=sys.stderr)
            if problems:
                print("run: python -m gpu_exporter.alerting", file=sys.stderr)
            return 1 if problems else 0
        for path in write(config):
            print(f"wrote {path}")
    except AlertConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
