"""Start a command as a container runtime starts a pod's container, on this
machine's kernel: in its own cgroups (every hierarchy given), then in a private
cgroup namespace and mount namespace (as containerd and CRI-O do on cgroup v2),
with a root of its own that holds only the host paths the pod spec mounts, a
tmpfs for each emptyDir, a fresh /proc (hostPID: the host's PID namespace) and
a fresh /sys, as the pod spec's user with every capability dropped and no new
privileges. Run as root; it ends in an exec of the command.

    python sandbox.py SPEC.json

The spec (JSON): ``cgroups`` (directories whose cgroup.procs it joins first),
``root`` (an empty directory), ``mounts`` ([host path, path inside, read only]),
``tmpfs`` (paths inside), ``files`` ({path inside: text}), ``keep`` (host
directories bound read-only at the same path: the exporter's own code and
Python), ``uid``, ``gid``, ``cwd``, ``env`` and ``argv``.

A separate script, not a test: ``unshare`` and ``chroot`` change the process
that calls them, so they run in a child that then becomes the command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def _place(host: str, inside: str) -> None:
    """An empty file or directory at ``inside`` to mount ``host`` on."""
    if os.path.isdir(host):
        os.makedirs(inside, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(inside), exist_ok=True)
        open(inside, "a").close()


def _bind(host: str, inside: str, read_only: bool) -> None:
    _place(host, inside)
    # Recursive, as the kubelet binds a hostPath: /sys brings /sys/fs/cgroup.
    _mount("--rbind", host, inside)
    if read_only:
        _mount("-o", "remount,bind,ro", inside)


def stage_one(spec_path: str, spec: dict) -> None:
    # The runtime places the container's first process in its cgroups, then
    # makes its namespaces: the cgroup namespace is rooted where it stands.
    for directory in spec["cgroups"]:
        with open(os.path.join(directory, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    os.execvp("unshare", ["unshare", "--mount", "--cgroup", "--propagation", "private", "--",
                          sys.executable, os.path.abspath(__file__), spec_path, "inside"])


def stage_two(spec: dict) -> None:
    root = spec["root"]
    _mount("-t", "tmpfs", "-o", "mode=755", "sandbox-root", root)
    # The pod's emptyDirs first: a checkout that lies under /tmp (CI's clone)
    # is bound on top of the pod's /tmp, not hidden by it.
    for inside in spec["tmpfs"]:
        os.makedirs(root + inside, exist_ok=True)
        _mount("-t", "tmpfs", "-o", "mode=1777,size=16m", "emptydir", root + inside)
    for host in spec["keep"]:
        if os.path.islink(host):  # merged /usr: /bin -> usr/bin
            os.symlink(os.readlink(host), root + host)
        elif os.path.exists(host):
            _bind(host, root + host, True)
    _place("/proc", root + "/proc")
    _mount("-t", "proc", "proc", root + "/proc")
    _place("/sys", root + "/sys")
    _mount("-t", "sysfs", "-o", "ro", "sysfs", root + "/sys")
    _bind("/dev", root + "/dev", False)
    for host, inside, read_only in spec["mounts"]:
        _bind(host, root + inside, read_only)
    for inside, text in spec["files"].items():
        with open(root + inside, "w") as f:
            f.write(text)
        os.chmod(root + inside, 0o644)
    os.chroot(root)
    os.chdir(spec["cwd"])
    argv = ["setpriv", f"--reuid={spec['uid']}", f"--regid={spec['gid']}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--", *spec["argv"]]
    os.execvpe("setpriv", argv, spec["env"])


def main() -> None:
    spec_path = sys.argv[1]
    with open(spec_path) as f:
        spec = json.load(f)
    if len(sys.argv) > 2:
        stage_two(spec)
    else:
        stage_one(spec_path, spec)


if __name__ == "__main__":
    main()
