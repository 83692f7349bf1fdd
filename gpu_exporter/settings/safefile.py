"""Every file the exporter reads from its user (the config file, the web config
file, scenarios and recordings, device profiles, the node baseline) is read
here, and read the same way: at most a size limit of bytes, decoded as strict
UTF-8, parsed with bounds (YAML: how many nodes its aliases may expand to and
how deep it may nest; JSON: how deep), so a file of a few hundred bytes cannot
expand into gigabytes in whatever reads it next. Any problem is one line that
names the file and the place (line and column, or the setting's path), never a
traceback and never the expanded input.

Each reader validates the data with its own model (a section) and words a
validation error with
``validation_problem``: the value it quotes is cut short.
"""

from __future__ import annotations

import json
import os
import select
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpu_exporter.facts.safetext import terminal_safe

MIB = 1024 * 1024
# How much of a value an error message quotes.
SHOWN_CHARS = 60


@dataclass(frozen=True)
class FileKind:
    """What a file is to the exporter and the bounds it is read within."""

    name: str  # how an error names it: "config file", "scenario"
    max_bytes: int
    # YAML nodes after every alias is expanded (what a reader of the data walks).
    max_nodes: int
    # Values on the longest path from the top (a lone scalar is 1), aliases
    # expanded.
    max_depth: int
    # Only a regular file will do: a file the exporter re-reads on reload (or
    # that OpenSSL opens again by its path) must read the same each time, and
    # a FIFO or a device does not (a FIFO nobody writes to reads as empty,
    # which for the web config file is "no TLS, no auth").
    regular_only: bool = False


# The bounds are an order of magnitude above the largest real file of each kind
# (the built-in scenarios are under 11 KiB and 1,000 values; a recording of 8
# busy GPUs polled every second grows by about 11 KiB and 900 values a poll, so
# 8 MiB is some 12 minutes of it). What a bound costs: composing a YAML value
# takes about 470 bytes until the data is built, so 100,000 values peak near
# 50 MiB, and a recording at its bound near 380 MiB.
CONFIG_FILE = FileKind("config file", 1 * MIB, 100_000, 32, regular_only=True)
WEB_CONFIG_FILE = FileKind("web config file", 1 * MIB, 100_000, 32, regular_only=True)
BASELINE_FILE = FileKind("baseline file", 1 * MIB, 100_000, 16)
PROFILE_FILE = FileKind("profile", 1 * MIB, 100_000, 32)
SCENARIO_FILE = FileKind("scenario", 4 * MIB, 100_000, 32)
RECORDING_FILE = FileKind("recording", 8 * MIB, 800_000, 32)
# A PEM certificate or key the web config file names (checked, then read by OpenSSL).
PEM_FILE = FileKind("PEM file", 1 * MIB, 0, 0, regular_only=True)


class FileRefused(Exception):
    """A file that cannot be used, worded as one line naming it and the place."""

    def __init__(self, kind: FileKind, path: Path | str, problem: str,
                 place: str | None = None) -> None:
        self.kind, self.path, self.problem, self.place = kind, Path(path), problem, place
        at = f"{place}: " if place else ""
        super().__init__(f"{kind.name} {one_line(str(path))}: {at}{one_line(problem)}")


def one_line(text: str, limit: int = 300) -> str:
    """``text`` safe for a terminal and a log line (controls escaped, so a line
    break from a file or path cannot forge a line of its own), cut short."""
    text = terminal_safe(text)
    return text if len(text) <= limit else text[:limit] + "..."


def shown(value: object) -> str:
    """A value as an error message quotes it: its repr, cut short."""
    text = repr(value) if not isinstance(value, dict | list | tuple | set) \
        else f"a {type(value).__name__}"
    if len(text) > SHOWN_CHARS:
        text = text[:SHOWN_CHARS] + f"... ({len(text)} characters)"
    return one_line(text, SHOWN_CHARS * 2)


# --- bytes and text -------------------------------------------------------------------------
# How long a pipe (``--simulate <(...)``) may take to deliver the file.
PIPE_TIMEOUT_S = 5.0


def read_bytes(path: Path | str, kind: FileKind, limit: int | None = None) -> bytes:
    """The file's bytes, at most ``limit`` (the kind's limit by default)."""
    limit = kind.max_bytes if limit is None else limit
    try:
        # O_NONBLOCK: opening a FIFO nobody writes to must not hang the exporter.
        # No O_NOFOLLOW: Kubernetes mounts a ConfigMap's or Secret's files as
        # symbolic links (through ..data), and what matters is what the link
        # leads to, which fstat below checks on the descriptor itself.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise FileRefused(kind, path, "no such file") from None
    except OSError as exc:
        raise FileRefused(kind, path, f"cannot read: {_reason(exc)}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise FileRefused(kind, path, "is a directory, not a file")
        if kind.regular_only and not stat.S_ISREG(st.st_mode):
            raise FileRefused(kind, path, f"is {_file_type(st.st_mode)}, not a regular file")
        if stat.S_ISREG(st.st_mode) and st.st_size > limit:
            raise FileRefused(kind, path, f"larger than the {_size(limit)} a {kind.name} "
                              "may be")
        deadline = time.monotonic() + PIPE_TIMEOUT_S
        chunks, size = [], 0
        while size <= limit:
            try:
                chunk = os.read(fd, min(1 * MIB, limit + 1 - size))
            except BlockingIOError:  # a pipe whose writer has not written yet
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise FileRefused(kind, path, f"cannot read: nothing came within "
                                      f"{PIPE_TIMEOUT_S:g} s") from None
                continue
            except OSError as exc:
                raise FileRefused(kind, path, f"cannot read: {_reason(exc)}") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return within(b"".join(chunks), path, kind, limit)


def within(data: bytes, path: Path | str, kind: FileKind, limit: int | None = None) -> bytes:
    """``data``, once it is known to be within the kind's size limit (or ``limit``)."""
    limit = kind.max_bytes if limit is None else limit
    if len(data) > limit:
        raise FileRefused(kind, path, f"larger than the {_size(limit)} a {kind.name} may be")
    return data


def decode(data: bytes, path: Path | str, kind: FileKind) -> str:
    """``data`` as strict UTF-8, or where it is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = line_column(data, exc.start)
        raise FileRefused(kind, path, f"not UTF-8 text (byte 0x{data[exc.start]:02x})",
                          f"line {line}, column {column}") from None


def read_text(path: Path | str, kind: FileKind) -> str:
    return decode(read_bytes(path, kind), path, kind)


def line_column(data: bytes, offset: int) -> tuple[int, int]:
    """Line and column (from 1, in characters) of a byte offset."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    column = len(data[line_start:offset].decode("utf-8", "replace")) + 1
    return data.count(b"\n", 0, offset) + 1, column


def _file_type(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a pipe (FIFO)"),
                       (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a file of another type"  # pragma: no cover - every other type is listed


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n % MIB == 0 else f"{n} bytes"


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


# --- JSON -----------------------------------------------------------------------------------
def load_json(path: Path | str, kind: FileKind) -> Any:
    """The file's JSON value, read within the kind's bounds (NaN and infinity,
    which JSON does not have but Python's reader accepts, refused)."""
    return parse_json(read_text(path, kind), path, kind)


def parse_json(text: str, path: Path | str, kind: FileKind) -> Any:
    """``text``'s JSON value, within the kind's depth, as ``load_json`` reads it."""

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    try:
        data = json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise FileRefused(kind, path, f"not JSON ({exc.msg})",
                          f"line {exc.lineno}, column {exc.colno}") from None
    except ValueError as exc:  # a constant, or an integer too long to read
        raise FileRefused(kind, path, f"not JSON ({exc})".split(";")[0]) from None
    except RecursionError:
        raise FileRefused(kind, path, f"nested deeper than {kind.max_depth} levels") from None
    if _depth(data) > kind.max_depth:
        raise FileRefused(kind, path, f"nested deeper than {kind.max_depth} levels")
    return data


def _depth(data: Any) -> int:
    deepest, todo = 0, [(data, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, depth)
            todo.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict)
                                                 else value))
    return deepest


# --- validation -----------------------------------------------------------------------------
class Invalid(Protocol):
    """A validation error that lists its problems as pydantic's and the
    sections' do (``loc``, ``msg``, ``type``, ``input`` each)."""

    def errors(self) -> Any: ...


def validation_problem(exc: Invalid, unknown: str = "unknown setting"
                       ) -> tuple[tuple[str | int, ...], str]:
    """The first problem the validation found: where (the field's path) and what, in
    one line that quotes the value cut short; ``(and N more problem(s))`` when
    there are more."""
    errors = exc.errors()
    first = errors[0]
    loc = tuple(first["loc"])
    msg = str(first["msg"]).removeprefix("Value error, ")
    given = first.get("input")
    if first["type"] == "extra_forbidden":
        msg = unknown
    elif not isinstance(given, dict | list) and given is not None \
            and shown(given) not in msg and repr(given) not in msg:
        msg += f" (got {shown(given)})"
    if len(errors) > 1:
        msg += f" (and {len(errors) - 1} more problem(s))"
    return loc, one_line(msg)


def dotted(loc: tuple[str | int, ...]) -> str:
    return ".".join(str(p) for p in loc)


__all__ = ["BASELINE_FILE", "CONFIG_FILE", "PEM_FILE", "PROFILE_FILE", "RECORDING_FILE",
           "SCENARIO_FILE", "WEB_CONFIG_FILE", "FileKind", "FileRefused", "decode", "dotted",
           "line_column", "load_json", "one_line", "parse_json", "read_bytes", "read_text",
           "shown", "validation_problem", "within"]
