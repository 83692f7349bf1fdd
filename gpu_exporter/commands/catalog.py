"""``gpu-exporter catalog``: print the metric catalog as Markdown (the same
table docs/metrics.md is generated from)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gpu_exporter.poll.catalog import metrics_markdown


def main(argv: Sequence[str], parser_cls: type[argparse.ArgumentParser]) -> int:
    parser_cls(prog="gpu-exporter catalog",
               description="Print the metric catalog as Markdown.").parse_args(argv)
    sys.stdout.write(metrics_markdown())
    return 0
