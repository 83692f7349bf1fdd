#!/usr/bin/env bash
# Put runc in .tools/bin for the real-kernel test's long form, which starts the
# exporter as a container runtime does (tests/kernel/test_real_kernel.py).
# Uses the one on PATH when present; otherwise unpacks Debian's package without
# installing it. Not fatal: where it cannot be had the long form says so.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .tools/bin
[ -x .tools/bin/runc ] && exit 0
if command -v runc >/dev/null 2>&1; then
  ln -sf "$(command -v runc)" .tools/bin/runc
  exit 0
fi
echo "==> fetching Debian's runc package into .tools/"
mkdir -p .tools/debs/runc .tools/root
download() { (cd .tools/debs/runc && apt-get download runc >/dev/null 2>&1); }
if ! download; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null || true
  fi
  download || { echo "note: Debian's runc could not be downloaded; the runc long form will skip" >&2; exit 0; }
fi
dpkg -x .tools/debs/runc/runc_*.deb .tools/root
ln -sf ../root/usr/sbin/runc .tools/bin/runc
