"""Every file the exporter reads from its user (the config file, the web config
file, scenarios and recordings, device profiles, the node baseline) is read
here, and read the same way: at most a size limit of bytes, decoded as strict
UTF-8, parsed with bounds (YAML: how many nodes its aliases may expand to and
how deep it may nest; JSON: how deep), so a file of a few hundred bytes cannot
expand into gigabytes in whatever reads it next. Any problem is one line that
names the file and the place (line and column, or the setting's path), never a
traceback and never the expanded input.

Each reader validates the data with its own pydantic model and words a
validation error with ``validation_problem``: the value it quotes is cut short.
"""

from __future__ import annotations

import json
import math
import os
import select
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml
from pydantic import ValidationError
from yaml import cyaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import Node
from yaml.parser import Parser
from yaml.reader import Reader, ReaderError
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from gpu_exporter.safetext import terminal_safe

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


# The bounds are an order of magnitude above the largest real file of each kind
# (the built-in scenarios are under 11 KiB and 1,000 values; a recording of 8
# busy GPUs polled every second grows by about 11 KiB and 900 values a poll, so
# 8 MiB is some 12 minutes of it). What a bound costs: composing a YAML value
# takes about 470 bytes until the data is built, so 100,000 values peak near
# 50 MiB, and a recording at its bound near 380 MiB.
CONFIG_FILE = FileKind("config file", 1 * MIB, 100_000, 32)
WEB_CONFIG_FILE = FileKind("web config file", 1 * MIB, 100_000, 32)
BASELINE_FILE = FileKind("baseline file", 1 * MIB, 100_000, 16)
PROFILE_FILE = FileKind("profile", 1 * MIB, 100_000, 32)
SCENARIO_FILE = FileKind("scenario", 4 * MIB, 100_000, 32)
RECORDING_FILE = FileKind("recording", 8 * MIB, 800_000, 32)
# A PEM certificate or key the web config file names (checked, then read by OpenSSL).
PEM_FILE = FileKind("PEM file", 1 * MIB, 0, 0)


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
# How long a pipe (``--config.file <(...)``) may take to deliver the file.
PIPE_TIMEOUT_S = 5.0


def read_bytes(path: Path | str, kind: FileKind, limit: int | None = None) -> bytes:
    """The file's bytes, at most ``limit`` (the kind's limit by default)."""
    limit = kind.max_bytes if limit is None else limit
    try:
        # O_NONBLOCK: opening a FIFO nobody writes to must not hang the exporter.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise FileRefused(kind, path, "no such file") from None
    except OSError as exc:
        raise FileRefused(kind, path, f"cannot read: {_reason(exc)}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise FileRefused(kind, path, "is a directory, not a file")
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
        line, column = _line_column(data, exc.start)
        raise FileRefused(kind, path, f"not UTF-8 text (byte 0x{data[exc.start]:02x})",
                          f"line {line}, column {column}") from None


def read_text(path: Path | str, kind: FileKind) -> str:
    return decode(read_bytes(path, kind), path, kind)


def _line_column(data: bytes, offset: int) -> tuple[int, int]:
    """Line and column (from 1, in characters) of a byte offset."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    column = len(data[line_start:offset].decode("utf-8", "replace")) + 1
    return data.count(b"\n", 0, offset) + 1, column


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n % MIB == 0 else f"{n} bytes"


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


# --- YAML -----------------------------------------------------------------------------------
class _Refused(yaml.YAMLError):
    """A bound crossed while composing: ``problem`` and the mark where."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _BoundedComposer(Composer):
    """PyYAML's composer, counting as it goes: every node it composes and every
    node an alias stands for (an alias of an anchored list of a thousand items
    counts a thousand), and the depth with aliases expanded. It stops at the
    first node past a bound, before anything walks the expanded data: the
    data itself keeps each anchored node once, but a validator, a merge or an
    error message that formats it would walk every expansion (a few hundred
    bytes of nested aliases stand for billions of nodes)."""

    bounds: FileKind
    peek_event: Callable[[], Any]  # the parser's

    def __init__(self) -> None:
        super().__init__()
        self._nodes = 0
        # Per node under way, the height of what it holds so far.
        self._heights: list[int] = [0]
        # id(anchored node) -> (nodes it stands for, its height); an alias of a
        # node still under way (a recursive structure) is not in it yet.
        self._anchored: dict[int, tuple[int, int]] = {}

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            target = self.anchors.get(event.anchor)
            if target is not None:
                size = self._anchored.get(id(target))
                if size is None:
                    raise _Refused(f"alias *{event.anchor} refers to the node that holds it "
                                   "(a recursive structure)", event.start_mark)
                self._count(size[0], event.start_mark)
                self._depth(len(self._heights) - 1 + size[1], event.start_mark)
                self._heights[-1] = max(self._heights[-1], size[1])
            return cast(Node, super().compose_node(parent, index))
        anchor = getattr(event, "anchor", None)
        before = self._nodes
        self._count(1, event.start_mark)
        self._depth(len(self._heights), event.start_mark)
        self._heights.append(0)
        try:
            node = cast(Node, super().compose_node(parent, index))
        finally:
            height = self._heights.pop() + 1
        self._heights[-1] = max(self._heights[-1], height)
        if anchor is not None:
            self._anchored[id(node)] = (self._nodes - before, height)
        return node

    def _count(self, nodes: int, mark: Any) -> None:
        self._nodes += nodes
        if self._nodes > self.bounds.max_nodes:
            raise _Refused(f"more than {self.bounds.max_nodes:,} values with its aliases "
                           "expanded", mark)

    def _depth(self, depth: int, mark: Any) -> None:
        if depth > self.bounds.max_depth:
            raise _Refused(f"nested deeper than {self.bounds.max_depth} levels", mark)


class _StrictConstructor(SafeConstructor):
    """SafeConstructor, less what no file of the exporter means: NaN and
    infinity, and integers too long to convert (Python refuses more than
    4,300 digits with a ValueError, not a YAML error)."""

    def construct_yaml_float(self, node: Any) -> float:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise ConstructorError(None, None, f"{node.value!r} is not a finite number",
                                   node.start_mark)
        return value

    def construct_yaml_int(self, node: Any) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise ConstructorError(None, None, "an integer too long to read",
                                   node.start_mark) from None


_StrictConstructor.add_constructor("tag:yaml.org,2002:float",  # type: ignore[type-var]
                                   _StrictConstructor.construct_yaml_float)
_StrictConstructor.add_constructor("tag:yaml.org,2002:int",  # type: ignore[type-var]
                                   _StrictConstructor.construct_yaml_int)


class _PurePythonParser(Reader, Scanner, Parser):
    """PyYAML's own scanner and parser, where it was built without libyaml."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)


# libyaml's scanner and parser (C, in every PyYAML wheel): four times faster.
_Parser: Any = getattr(cyaml, "CParser", _PurePythonParser)


def _loader(kind: FileKind, parser: Any) -> type[Any]:
    class BoundedLoader(_BoundedComposer, parser, _StrictConstructor, Resolver):  # type: ignore[misc]
        """The parser under the bounded composer (Python)."""

        bounds = kind

        def __init__(self, stream: str) -> None:
            parser.__init__(self, stream)
            _BoundedComposer.__init__(self)
            _StrictConstructor.__init__(self)
            Resolver.__init__(self)

    return BoundedLoader


_LOADERS: dict[tuple[FileKind, Any], type[Any]] = {}


def parse_yaml(text: str, path: Path | str, kind: FileKind, parser: Any = None) -> Any:
    """One YAML document from ``text``, within the kind's bounds (``parser``:
    libyaml's where PyYAML has it, else PyYAML's own)."""
    parser = _Parser if parser is None else parser
    loader_cls = _LOADERS.get((kind, parser))
    if loader_cls is None:
        loader_cls = _LOADERS[kind, parser] = _loader(kind, parser)
    loader = None
    try:
        loader = loader_cls(text)
        return loader.get_single_data()
    except ReaderError as exc:
        # libyaml counts the position in bytes of UTF-8, PyYAML in characters.
        data = text.encode()
        offset = exc.position if parser is not _PurePythonParser \
            else len(text[:exc.position].encode())
        line, column = _line_column(data, offset)
        raise FileRefused(kind, path, f"{exc.reason} (0x{exc.character:02x})",
                          f"line {line}, column {column}") from None
    except yaml.YAMLError as exc:
        raise FileRefused(kind, path, _yaml_problem(exc), _yaml_place(exc)) from None
    except RecursionError:  # pragma: no cover - the depth bound comes first
        raise FileRefused(kind, path, f"nested deeper than {kind.max_depth} levels") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(path: Path | str, kind: FileKind, limit: int | None = None) -> Any:
    """The file's one YAML document, read within the kind's bounds."""
    return parse_yaml(decode(read_bytes(path, kind, limit), path, kind), path, kind)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) \
        or str(exc).split("\n", 1)[0] or "invalid YAML"
    if isinstance(exc, ComposerError) and "expected a single document" in problem:
        problem = "more than one YAML document"
    return str(problem)


def _yaml_place(exc: yaml.YAMLError) -> str | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is None:
        return None
    return f"line {mark.line + 1}, column {mark.column + 1}"


# --- JSON -----------------------------------------------------------------------------------
def load_json(path: Path | str, kind: FileKind) -> Any:
    """The file's JSON value, read within the kind's bounds (NaN and infinity,
    which JSON does not have but Python's reader accepts, refused)."""
    text = read_text(path, kind)

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
def validation_problem(exc: ValidationError, unknown: str = "unknown setting"
                       ) -> tuple[tuple[str | int, ...], str]:
    """The first problem pydantic found: where (the field's path) and what, in
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
           "load_json", "load_yaml", "parse_yaml", "read_bytes", "read_text", "shown",
           "validation_problem", "within"]
