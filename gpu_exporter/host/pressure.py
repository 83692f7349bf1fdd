"""Linux pressure stall information (/proc/pressure/{cpu,memory,io}, kernel
4.20+ with CONFIG_PSI): the share of time tasks were stalled on a resource."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.host.files import MalformedFile, read_text, to_float, to_int

RESOURCES = ("cpu", "memory", "io")


@dataclass(frozen=True, slots=True)
class Stall:
    avg10: float  # share of the last 10 s, 0-1
    total_seconds: float  # stalled time since boot


@dataclass(frozen=True, slots=True)
class Pressure:
    """"some": at least one task stalled; "full": all non-idle tasks stalled at
    once. Kernels before 5.13 have no "full" line for cpu."""

    some: Stall
    full: Stall | None


def _stall(path: str, fields: list[str]) -> Stall:
    try:
        values = dict(field.split("=", 1) for field in fields)
    except ValueError:  # a field without "=": name the first such
        bad = next(field for field in fields if "=" not in field)
        raise MalformedFile(path, f"field {bad!r} is not key=value") from None
    avg10, total = values.get("avg10"), values.get("total")
    if avg10 is None or total is None:
        raise MalformedFile(path, "avg10 or total missing")
    # avg10 is a percentage, total microseconds; avg60 and avg300 are held to
    # the key=value shape alone, not parsed.
    return Stall(to_float(path, avg10) / 100.0, to_int(path, total) / 1e6)


def read_pressure(procfs: Path | str, resource: str) -> Pressure:
    path = f"{procfs}/pressure/{resource}"
    lines: dict[str, Stall] = {}
    for line in read_text(path).splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] not in ("some", "full"):
            raise MalformedFile(path, f"unexpected line {line!r}")
        lines[parts[0]] = _stall(path, parts[1:])
    if "some" not in lines:
        raise MalformedFile(path, "no 'some' line")
    return Pressure(lines["some"], lines.get("full"))
