#!/usr/bin/env bash
# Mutation testing (mutmut): change the product code one small edit at a time
# (a comparison flipped, a constant changed, a line dropped), run the tests that
# reach it, and count the edits no test noticed. Not part of ./scripts/test.sh:
# it takes minutes. The modules and the tests it runs are [tool.mutmut] in
# pyproject.toml; the kill rates and the survivors go in docs/mutation.md.
#   ./scripts/mutation.sh            run, then print kill rates and survivors
#   ./scripts/mutation.sh --report   only print them again (from mutants/)
#   ./scripts/mutation.sh 'gpu_exporter.host.*' 'gpu_exporter.collectors.host.*'
#                                    only the mutants of these modules (globs)
#   ./scripts/mutation.sh --mixin [--report] [GLOB...]
#                                    the rule and dashboard generators (the mixin
#                                    package), with mixin/mutmut.toml
# Runs at low priority: on a shared machine the other work goes first.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export PATH="$root/.tools/bin:$PATH"
if [ "${1:-}" = "--mixin" ]; then
  # mutmut names a mutant by its path from where it runs, and the tests import
  # gpu_exporter_mixin: run it where the package is a top-level directory.
  shift
  run=build/mutation-mixin
  mkdir -p "$run"
  cd "$run"
  for name in alerts grafana deploy docs tests; do ln -sfn "$root/$name" "$name"; done
  ln -sfn "$root/mixin/gpu_exporter_mixin" gpu_exporter_mixin
  cp "$root/mixin/mutmut.toml" pyproject.toml
fi
if [ "${1:-}" != "--report" ]; then
  rm -rf mutants
  # its progress bar is not for logs
  nice -n 10 "$root/.venv/bin/mutmut" run "$@" >/dev/null 2>&1 || true
fi
"$root/.venv/bin/mutmut" results --all true 2>/dev/null \
  | "$root/.venv/bin/python" "$root/scripts/mutation_report.py"
