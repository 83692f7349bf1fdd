#!/usr/bin/env bash
# Run the whole test suite several times in a row, each time in another random
# order, while busy loops keep every core loaded: a test that depends on which
# thread wins, on test order or on an idle machine fails here.
#   ./scripts/flake-check.sh          5 runs
#   RUNS=2 ./scripts/flake-check.sh -k golden
#   LOAD=1 ./scripts/flake-check.sh   one busy loop instead of one per core
# Needs .venv and .tools from ./scripts/test.sh. Exit status: that of the first
# failing run, 0 when every run passed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
export PATH="$PWD/.tools/bin:$PATH"
load=()
stop_load() { [ ${#load[@]} -eq 0 ] || kill "${load[@]}" 2>/dev/null || true; }
trap stop_load EXIT
for _ in $(seq "${LOAD:-$(nproc)}"); do
  .venv/bin/python -c 'while True: pass' &
  load+=($!)
done
echo "==> $runs runs in random order, ${#load[@]} busy loops running"
for i in $(seq "$runs"); do
  seed=$(( (RANDOM << 15 | RANDOM) ))
  echo "==> run $i of $runs: -p randomly --randomly-seed=$seed"
  start=$(date +%s)
  if ! .venv/bin/python -m pytest -q -p randomly --randomly-seed="$seed" "$@"; then
    echo "==> run $i FAILED (repeat with: .venv/bin/python -m pytest -p randomly --randomly-seed=$seed)"
    exit 1
  fi
  echo "==> run $i passed in $(( $(date +%s) - start )) s"
done
echo "==> all $runs runs passed"
