"""``gpu-exporter scenarios``: list the built-in simulator scenarios, a line
each (name, then the description folded onto that line)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from gpu_exporter.simulator import builtin_scenarios, load_scenario


def main(argv: Sequence[str], parser_cls: type[argparse.ArgumentParser]) -> int:
    parser_cls(prog="gpu-exporter scenarios",
               description="List the built-in scenarios.").parse_args(argv)
    for name in builtin_scenarios():
        desc = " ".join(load_scenario(name).description.split())
        print(f"{name:40s} {desc}")
    return 0
