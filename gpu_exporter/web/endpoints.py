"""What the HTTP surface is, for the settings to check before anything
starts: the listen address syntax and the paths the exporter itself serves
(the telemetry path must not hide one of them)."""

from __future__ import annotations

# Served whatever the settings say; --web.telemetry-path may not take one.
FIXED_PATHS = ("/", "/-/healthy", "/-/ready", "/diagnosis")


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


def check_telemetry_path(path: str) -> str:
    """The path metrics are served under: absolute, and no fixed endpoint's."""
    if not path.startswith("/"):
        raise ValueError("must start with /")
    if path in FIXED_PATHS:
        raise ValueError(f"{path} is the exporter's own endpoint; choose another path "
                         f"(taken: {', '.join(FIXED_PATHS)})")
    return path
