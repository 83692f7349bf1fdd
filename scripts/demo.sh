#!/usr/bin/env bash
# From a fresh clone: set up, start the exporter on a simulated 8-GPU node with
# problems in it, and print where to look. Ctrl-C stops it.
#   ./scripts/demo.sh                 the "mixed" scenario on 127.0.0.1:9835
#   ./scripts/demo.sh gpu-lost        another built-in scenario (./scripts/demo.sh --list)
#   PORT=9900 ./scripts/demo.sh       another port
set -euo pipefail
cd "$(dirname "$0")/.."

scenario=${1:-mixed}
port=${PORT:-9835}
python=${PYTHON:-python3}

if [ ! -x .venv/bin/gpu-exporter ]; then
  echo "==> setting up .venv (first run only)"
  "$python" -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
fi
if [ "$scenario" = "--list" ]; then
  exec .venv/bin/gpu-exporter scenarios
fi

.venv/bin/gpu-exporter --simulate "$scenario" --web.listen-address "127.0.0.1:$port" \
  --config.file scripts/demo-config.yaml --log.level error &
pid=$!
answer=$(mktemp)
waiting=
cleanup() {
  kill "$pid" $waiting 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -f "$answer"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

url="http://127.0.0.1:$port"
echo "==> gpu-exporter is starting on a simulated node (scenario: $scenario); diagnosing..."
# diagnose --wait asks until the exporter answers and every check has been
# judged for the demo config's 5 s window (/diagnosis says when: coverage.settling),
# however long a cold start on a loaded machine takes; a dead exporter ends it.
.venv/bin/gpu-exporter diagnose --url "$url" --wait 120s >"$answer" 2>&1 &
waiting=$!
while kill -0 "$waiting" 2>/dev/null; do
  if ! kill -0 "$pid" 2>/dev/null; then
    kill "$waiting" 2>/dev/null
    echo "the exporter did not start" >&2
    exit 1
  fi
  sleep 0.2
done
wait "$waiting" || true
cat <<TXT

  Landing page, each GPU and what is wrong with it:  $url/
  Prometheus metrics:                                $url/metrics
  Findings as JSON:                                  $url/diagnosis

What \`gpu-exporter diagnose\` says about this node:

TXT
cat "$answer"
echo "Ctrl-C to stop."
wait "$pid"
