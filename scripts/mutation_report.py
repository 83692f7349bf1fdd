"""Kill rate per module and the mutants no test killed, from `mutmut results --all true`
on standard input (see scripts/mutation.sh)."""

from __future__ import annotations

import collections
import sys

KILLED = ("killed", "timeout")  # a mutant that makes the tests hang is caught too


def main() -> int:
    by_module: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    survivors = []
    for line in sys.stdin:
        if "__mutmut_" not in line or ": " not in line:
            continue
        name, status = line.strip().rsplit(": ", 1)
        if status == "not checked":
            continue  # outside the modules this run was asked for
        # gpu_exporter.web.server.x_handle__mutmut_3 -> gpu_exporter.web.server
        module = name.split("__mutmut_")[0].rsplit(".", 1)[0]
        by_module[module][status] += 1
        if status not in KILLED:
            survivors.append(f"{name}: {status}")
    print(f"{'module':45} {'mutants':>8} {'killed':>7} {'rate':>6}")
    for module, counts in sorted(by_module.items()):
        total = sum(n for status, n in counts.items() if status != "skipped")
        killed = sum(counts[s] for s in KILLED)
        print(f"{module:45} {total:8} {killed:7} {100 * killed / max(total, 1):5.1f}%")
    print(f"\n{len(survivors)} not killed (`.venv/bin/mutmut show NAME` prints the edit):")
    print("\n".join(survivors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
