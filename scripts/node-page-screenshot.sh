#!/usr/bin/env bash
# Regenerate docs/node-page.png, the README's picture of the node page: the
# browser test (tests/web/test_node_page_browser.py) drives Debian's chromium
# against the exporter on the simulated `mixed` node and saves its screenshots
# where GPU_EXPORTER_SCREENSHOTS says; the top of the page is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/fetch-chromium.sh
shots=$(mktemp -d)
trap 'rm -rf "$shots"' EXIT
GPU_EXPORTER_SCREENSHOTS=$shots GPU_EXPORTER_REQUIRE_TOOLS=1 \
  .venv/bin/python -m pytest -q -p no:cacheprovider tests/web/test_node_page_browser.py -k mixed
cp "$shots/mixed-top.png" docs/node-page.png
echo "updated docs/node-page.png"
