#!/usr/bin/env bash
# The benchmarks (see BENCHMARKS.md):
#   ./scripts/bench.sh [--quick] [--boards h100,...]   the shipped daemons side by side on
#                                                      NVIDIA's mock NVML (benchmarks/shipped.py)
#   ./scripts/bench.sh --simulated [--quick] ...       the simulator harness (benchmarks/run.py):
#                                                      fleet sizes, MIG, processes, driver branches
set -euo pipefail
cd "$(dirname "$0")/.."
python=python3
if [[ -x .venv/bin/python ]]; then
  python=.venv/bin/python
fi
if [[ "${1:-}" == "--simulated" ]]; then
  shift
  exec "$python" -m benchmarks.run "$@"
fi
exec "$python" -m benchmarks.shipped "$@"
