#!/usr/bin/env bash
# Put prometheus, promtool, prometheus-alertmanager, amtool and
# prometheus-node-exporter in .tools/bin. Uses the ones on PATH when present;
# otherwise unpacks Debian's packages (prometheus 2.42, prometheus-alertmanager
# 0.25, prometheus-node-exporter 1.5: the HTTP comparison in
# tests/web/test_http_side_by_side.py) without installing them.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .tools/bin
have_all=1
for tool in prometheus promtool prometheus-alertmanager amtool prometheus-node-exporter; do
  if [ -x ".tools/bin/$tool" ]; then continue; fi
  if command -v "$tool" >/dev/null 2>&1; then
    ln -sf "$(command -v "$tool")" ".tools/bin/$tool"
  else
    have_all=0
  fi
done
[ "$have_all" = 1 ] && exit 0

echo "==> fetching Debian's prometheus, prometheus-alertmanager and prometheus-node-exporter packages into .tools/"
mkdir -p .tools/debs .tools/root
download() { (cd .tools/debs && apt-get download prometheus prometheus-alertmanager prometheus-node-exporter >/dev/null 2>&1); }
if ! download; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null
  elif command -v sudo >/dev/null 2>&1; then
    sudo apt-get update -qq >/dev/null
  fi
  download || { echo "error: cannot download Debian's prometheus packages (apt-get download failed)" >&2; exit 1; }
fi
for deb in .tools/debs/*.deb; do dpkg -x "$deb" .tools/root; done
for tool in prometheus promtool amtool prometheus-node-exporter; do
  ln -sf "../root/usr/bin/$tool" ".tools/bin/$tool"
done
# Debian's Alertmanager reads its default notification template from the fixed
# path /usr/share/prometheus/alertmanager/default.tmpl and refuses its config
# without it. Unpacked, the template lies under .tools/root instead: run it in a
# private mount namespace where .tools/root/usr/share is /usr/share, so nothing
# outside the checkout is written and no other process sees the change.
rm -f .tools/bin/prometheus-alertmanager
cat > .tools/bin/prometheus-alertmanager <<'WRAP'
#!/bin/sh
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -e /usr/share/prometheus/alertmanager/default.tmpl ]; then
  exec "$here/root/usr/bin/prometheus-alertmanager" "$@"
fi
exec unshare --mount --map-root-user --propagation private sh -c \
  'mount --bind "$0/root/usr/share" /usr/share && exec "$0/root/usr/bin/prometheus-alertmanager" "$@"' \
  "$here" "$@"
WRAP
chmod +x .tools/bin/prometheus-alertmanager
