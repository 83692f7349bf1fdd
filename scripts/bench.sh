#!/usr/bin/env bash
# Run the benchmark suite (see BENCHMARKS.md): ./scripts/bench.sh [--quick] [--latency] ...
set -euo pipefail
cd "$(dirname "$0")/.."
python=python3
if [[ -x .venv/bin/python ]]; then
  python=.venv/bin/python
fi
exec "$python" -m benchmarks.run "$@"
