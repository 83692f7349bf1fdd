#!/usr/bin/env bash
# Set up everything the tests need, then run every test: lint, types, unit,
# end-to-end. Safe to run again; the second run only re-checks.
#   ./scripts/test.sh            everything
#   ./scripts/test.sh -k golden  extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$python" -m venv .venv
fi
echo "==> installing the exporter and its test tools into .venv"
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]' -e ./mixin

# Prometheus, promtool, Alertmanager and amtool from Debian's packages. They are
# unpacked into .tools/ rather than installed, so no system service is ever
# started or changed on the machine running the tests.
./scripts/fetch-prometheus.sh
# Debian's chromium and chromedriver for the node page's browser test, unpacked
# into .tools/chromium the same way.
./scripts/fetch-chromium.sh
# Debian's runc for the real-kernel test's long form (tests/kernel/), the same way.
./scripts/fetch-runc.sh
# Debian's slurmctld, slurmd, client commands and munge for the real Slurm test
# (tests/kernel/test_real_slurm.py), unpacked into .tools/slurm the same way.
# Without them that test skips, saying so; every other test runs.
./scripts/fetch-slurm.sh || echo "warning: Slurm could not be fetched; the real Slurm test will skip" >&2
export PATH="$root/.tools/bin:$PATH"

echo "==> ruff"
.venv/bin/ruff check .
echo "==> mypy"
.venv/bin/mypy
echo "==> import contracts (layers, no cycles; see ARCHITECTURE.md)"
.venv/bin/lint-imports --no-cache --no-logo
echo "==> pytest"
.venv/bin/python -m pytest "$@"
