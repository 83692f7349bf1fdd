"""Value types shared by the configuration models."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Annotated, Any

from gpu_exporter.settings.sections import Parse

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(value: Any) -> float:
    """Seconds from ``1.5``, ``"500ms"``, ``"30s"``, ``"1m30s"``, ``"2h"``."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 1s or 500ms")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise ValueError("expected a duration like 1s or 500ms")
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _DURATION_RE.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"expected a duration like 1s, 500ms or 1m30s, got {value!r}")
    return total


Duration = Annotated[float, Parse(parse_duration)]


def format_duration(seconds: float) -> str:
    """``300.0`` as ``5m``, ``2.0`` as ``2s``: as a flag is written."""
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Flag:
    """Marks a setting that is a command-line flag too (``Annotated[int,
    Flag("N")]``): ``--`` and its dotted key with hyphens for underscores
    (``--web.max-requests``), unless ``name`` says otherwise (the exporter
    toolkit's ``--web.config.file``). A bool is ``--X`` and ``--no-X``."""

    metavar: str = ""
    name: str | None = None


@dataclass(frozen=True)
class AtStart:
    """Marks a setting a reload cannot apply: it takes effect at the next start."""


AT_START = AtStart()


def parse_listen_address(value: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[v6]:port``."""
    host, sep, port_s = value.rpartition(":")
    if not sep:
        raise ValueError(f"expected host:port, got {value!r}")
    host = host.strip("[]") or "0.0.0.0"
    try:
        port = int(port_s)
    except ValueError:
        raise ValueError(f"port must be a number, got {port_s!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be 0-65535, got {port}")
    return host, port


# Where the kubelet serves its PodResources API (v1) on every Kubernetes node.
DEFAULT_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# The kernel log as the kernel serves it, one record per read.
DEFAULT_KMSG_PATH = "/dev/kmsg"
# Its device number (the kernel's Documentation/admin-guide/devices.txt:
# character 1:11). Another character device (/dev/zero, a terminal) is no
# record stream: /dev/zero alone gave 8 KiB "records" without end.
KMSG_DEVICE = (1, 11)


def kmsg_file_problem(mode: int, rdev: int) -> str | None:
    """Why a file of this type (``st_mode``, ``st_rdev``) cannot be read as
    the kernel log; None for the kmsg device or a regular file (a saved log,
    the simulator's)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISCHR(mode):
        found = (os.major(rdev), os.minor(rdev))
        if found == KMSG_DEVICE:
            return None
        return (f"character device {found[0]}:{found[1]} is not the kernel log "
                f"(/dev/kmsg is {KMSG_DEVICE[0]}:{KMSG_DEVICE[1]})")
    return "neither the kmsg device nor a regular file"


# Served whatever the settings say; --web.telemetry-path may not take one.
FIXED_PATHS = ("/", "/-/healthy", "/-/ready", "/diagnosis")


def check_telemetry_path(path: str) -> str:
    """The path metrics are served under: absolute, and no fixed endpoint's."""
    if not path.startswith("/"):
        raise ValueError("must start with /")
    if path in FIXED_PATHS:
        raise ValueError(f"{path} is the exporter's own endpoint; choose another path "
                         f"(taken: {', '.join(FIXED_PATHS)})")
    return path
