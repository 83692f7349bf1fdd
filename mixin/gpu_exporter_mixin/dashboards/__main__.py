"""``gpu-exporter-dashboards [--config FILE] [--out DIR] [--check]`` (or ``python
-m gpu_exporter_mixin.dashboards``): regenerate (or check) the Grafana dashboards in
grafana/dashboards/ (and their copies in the Helm chart and the ConfigMap) and
the jsonnet mixin's generated files in mixin/.

A generator, not part of the exporter: it needs the ``generators`` extra
(``pip install 'gpu-exporter[generators]'``, the Grafana Foundation SDK), and
reads the same settings as the alert generator."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpu_exporter_mixin.alerting.config import AlertConfigError, load_config
from gpu_exporter_mixin.dashboards import jsonnet
from gpu_exporter_mixin.dashboards.generate import differences, outputs, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu-exporter-dashboards",
        description="Generate the GPU node and fleet Grafana dashboards.")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="the alerting settings the dashboards link to (default: "
                             "./alerts/config.yaml if there is one, else the defaults)")
    parser.add_argument("--out", type=Path, default=Path("."), metavar="DIR",
                        help="the directory grafana/dashboards/ is written under; default: "
                             "the current directory")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a dashboard under --out differs")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except AlertConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # The dashboards, and the jsonnet mixin's data (mixin/), from the same generators.
    wanted = {**outputs(config), **jsonnet.outputs(config)}
    if args.check:
        problems = differences(config, args.out, wanted)
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    for path in write(config, args.out, wanted):
        print(f"wrote {args.out / path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
