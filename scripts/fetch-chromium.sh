#!/usr/bin/env bash
# Put Debian's chromium and chromedriver in .tools/chromium/bin for the node
# page's browser test (tests/web/test_node_page_browser.py). Uses the ones on PATH
# when both are there; otherwise unpacks Debian's chromium, chromium-common and
# chromium-driver packages, and the shared libraries they need that a minimal
# Debian 12 lacks, without installing anything (the download stays cached in
# .tools/chromium/debs: a second run only checks).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.tools/chromium
mkdir -p "$dir/bin"
if [ -x "$dir/bin/chromium" ] && [ -x "$dir/bin/chromedriver" ]; then exit 0; fi
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  ln -sf "$(command -v chromium)" "$dir/bin/chromium"
  ln -sf "$(command -v chromedriver)" "$dir/bin/chromedriver"
  exit 0
fi

# The browser and its driver, then the libraries `ldd` finds missing on a
# minimal Debian 12 (codecs, audio, fonts shaping, NVIDIA's NV-CONTROL).
packages="chromium chromium-common chromium-driver
  libopenh264-7 libdouble-conversion3 libharfbuzz-subset0 libpulse0 libflac12 libopus0
  libxnvctrl0 libminizip1 libopenjp2-7 libogg0 libsndfile1 libasyncns0 libvorbis0a
  libvorbisenc2 libmpg123-0 libmp3lame0"
echo "==> fetching Debian's chromium and chromium-driver packages into $dir/"
mkdir -p "$dir/debs" "$dir/root"
# shellcheck disable=SC2086
download() { (cd "$dir/debs" && apt-get download $packages >/dev/null 2>&1); }
if ! download; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null
  elif command -v sudo >/dev/null 2>&1; then
    sudo apt-get update -qq >/dev/null
  fi
  download || { echo "error: cannot download Debian's chromium packages (apt-get download failed)" >&2; exit 1; }
fi
for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done
missing=$(LD_LIBRARY_PATH="$dir/root/usr/lib/x86_64-linux-gnu:$dir/root/usr/lib/x86_64-linux-gnu/pulseaudio" \
          ldd "$dir/root/usr/lib/chromium/chromium" "$dir/root/usr/bin/chromedriver" \
          | awk '/not found/ {print $1}' | sort -u)
if [ -n "$missing" ]; then
  echo "error: chromium needs libraries this machine lacks: $missing" >&2
  echo "       (add the Debian packages that ship them to the list in $0)" >&2
  exit 1
fi
# Wrappers that find the unpacked libraries next to themselves; the browser
# itself, not Debian's launcher script (it reads /etc/chromium.d, not unpacked).
for tool in chromium:usr/lib/chromium/chromium chromedriver:usr/bin/chromedriver; do
  name=${tool%%:*} target=${tool#*:}
  cat > "$dir/bin/$name" <<WRAP
#!/bin/sh
root=\$(cd "\$(dirname "\$0")/../root" && pwd)
export LD_LIBRARY_PATH="\$root/usr/lib/x86_64-linux-gnu:\$root/usr/lib/x86_64-linux-gnu/pulseaudio\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "\$root/$target" "\$@"
WRAP
  chmod +x "$dir/bin/$name"
done
