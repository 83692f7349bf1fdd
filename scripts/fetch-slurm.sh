#!/usr/bin/env bash
# Put a one-node Slurm (Debian 12's slurmctld, slurmd, slurmstepd, the client
# commands and munge) in .tools/slurm for tests/kernel/test_real_slurm.py.
# Debian's packages are unpacked, never installed: nothing is written outside
# .tools/, no service or user is created, and the test starts the daemons
# itself with every file in a temporary directory. A second run only checks.
#
# Layout: .tools/slurm/root (the unpacked packages), .tools/slurm/sbin
# (slurmctld, slurmd, slurmstepd, munged), .tools/slurm/bin (sinfo, sbatch,
# srun, scontrol, squeue, scancel, munge), and .tools/slurm/lib-path (the
# directories of LD_LIBRARY_PATH the programs need, relative to .tools/slurm,
# one a line). Links are relative, so .tools may be moved or shared.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.tools/slurm
if [ -f "$dir/complete" ]; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
  echo "error: cannot fetch Slurm: apt-get and dpkg are needed (Debian or Ubuntu)" >&2
  exit 1
fi

# The daemons and commands, then the shared libraries they depend on that this
# machine lacks (a minimal Debian 12 has most; hwloc, lua and libmunge are not).
wanted="slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge libmunge2"
echo "==> fetching Debian's slurmctld, slurmd, slurm-client and munge packages into $dir/"
rm -rf "$dir"
mkdir -p "$dir/debs" "$dir/root" "$dir/bin" "$dir/sbin"
resolve() {
  local libs pkg
  # shellcheck disable=SC2086
  libs=$(apt-cache depends --no-recommends --no-suggests --no-enhances $wanted 2>/dev/null \
         | awk '$1 == "Depends:" && $2 ~ /^lib/ {print $2}' | sort -u)
  for pkg in $libs; do
    if ! dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      wanted="$wanted $pkg"
    fi
  done
}
# shellcheck disable=SC2086
download() { resolve && (cd "$dir/debs" && apt-get download $wanted >/dev/null 2>&1); }
if ! download; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null
  elif command -v sudo >/dev/null 2>&1; then
    sudo apt-get update -qq >/dev/null
  fi
  wanted="slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge libmunge2"
  download || { echo "error: cannot download Debian's Slurm packages (apt-get download failed)" >&2; exit 1; }
fi
for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done

root=$dir/root
plugins=$(cd "$dir" && find root/usr/lib -maxdepth 2 -type d -name slurm-wlm | head -n 1)
[ -n "$plugins" ] || { echo "error: the unpacked Slurm packages hold no plugin directory" >&2; exit 1; }
printf '%s\n%s\n' "$(dirname "$plugins")" "$plugins" > "$dir/lib-path"
libs=$PWD/$dir/$(dirname "$plugins")
plugins=$PWD/$dir/$plugins

# Debian installs the daemons as slurmd-wlm etc. behind update-alternatives
# links named slurmd, slurmctld and slurmstepd. The links matter: a Slurm
# program knows what it is from its argv[0] (slurmstepd enables task/cgroup's
# controllers only when it is called "slurmstepd"), and slurmstepd's process
# title, which job attribution reads, is its argv[0].
for tool in slurmctld slurmd slurmstepd; do
  ln -sf "../root/usr/sbin/$tool-wlm" "$dir/sbin/$tool"
done
ln -sf ../root/usr/sbin/munged "$dir/sbin/munged"
for tool in sinfo sbatch srun scontrol squeue scancel munge unmunge; do
  ln -sf "../root/usr/bin/$tool" "$dir/bin/$tool"
done

missing=$(LD_LIBRARY_PATH="$libs:$plugins" ldd "$root"/usr/sbin/*-wlm "$root/usr/sbin/munged" \
          "$root/usr/bin/sinfo" "$root/usr/bin/srun" "$plugins"/*.so 2>/dev/null \
          | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
if [ -n "$missing" ]; then
  echo "warning: Slurm's plugins lack these libraries (those plugins are not used by the test): $missing" >&2
fi
for must in "$root/usr/sbin/slurmd-wlm" "$root/usr/sbin/slurmctld-wlm" "$root/usr/sbin/slurmstepd-wlm" \
            "$root/usr/sbin/munged" "$root/usr/bin/sinfo" "$root/usr/bin/scontrol"; do
  if LD_LIBRARY_PATH="$libs:$plugins" ldd "$must" | grep -q 'not found'; then
    echo "error: $must cannot load its libraries:" >&2
    LD_LIBRARY_PATH="$libs:$plugins" ldd "$must" | grep 'not found' >&2
    exit 1
  fi
done
touch "$dir/complete"
