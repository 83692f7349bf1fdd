"""``python -m gpu_exporter.dashboards [--check]``: regenerate (or check) the
Grafana dashboards in grafana/dashboards/."""

from __future__ import annotations

import argparse
import sys

from gpu_exporter.alerting.config import AlertConfigError, load_config
from gpu_exporter.dashboards.generate import differences, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpu_exporter.dashboards",
        description="Generate the GPU node and fleet Grafana dashboards.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a committed dashboard differs")
    args = parser.parse_args(argv)
    try:
        config = load_config()
    except AlertConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        problems = differences(config)
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    for path in write(config):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
