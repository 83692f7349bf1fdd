#!/usr/bin/env bash
# Mutation testing (mutmut): change the product code one small edit at a time
# (a comparison flipped, a constant changed, a line dropped), run the tests that
# reach it, and count the edits no test noticed. Not part of ./scripts/test.sh:
# it takes minutes. The modules and the tests it runs are [tool.mutmut] in
# pyproject.toml; the kill rates go in docs/reliability.md.
#   ./scripts/mutation.sh            run, then print kill rates and survivors
#   ./scripts/mutation.sh --report   only print them again (from mutants/)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.tools/bin:$PATH"
if [ "${1:-}" != "--report" ]; then
  rm -rf mutants
  .venv/bin/mutmut run >/dev/null 2>&1 || true   # its progress bar is not for logs
fi
.venv/bin/mutmut results --all true 2>/dev/null | .venv/bin/python -c '
import collections, sys
by_module = collections.defaultdict(collections.Counter)
survivors = []
for line in sys.stdin:
    if "__mutmut_" not in line or ": " not in line:
        continue
    name, status = line.strip().rsplit(": ", 1)
    # gpu_exporter.web.server.x_handle__mutmut_3 -> gpu_exporter.web.server
    module = name.split("__mutmut_")[0].rsplit(".", 1)[0]
    by_module[module][status] += 1
    if status not in ("killed", "timeout"):
        survivors.append(f"{name}: {status}")
print(f"{\"module\":45} {\"mutants\":>8} {\"killed\":>7} {\"rate\":>6}")
for module, counts in sorted(by_module.items()):
    total = sum(n for s, n in counts.items() if s != "skipped")
    killed = counts["killed"] + counts["timeout"]
    print(f"{module:45} {total:8} {killed:7} {100 * killed / max(total, 1):5.1f}%")
print(f"\n{len(survivors)} not killed (mutmut show NAME prints the edit):")
print("\n".join(survivors))
'
