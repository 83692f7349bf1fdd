"""YAML files read within bounds: the config file, the web config file,
scenarios and profiles. PyYAML's composer, counting every node and the depth
with aliases expanded, under libyaml's parser; a file past a bound, or not
YAML, is refused in one line (``safefile.FileRefused``).

Apart from ``safefile`` because PyYAML costs about 1 MiB of memory: a node
started without ``--config.file`` or ``--web.config.file`` does not load it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, cast

import yaml
from yaml import cyaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.parser import Parser
from yaml.reader import Reader, ReaderError
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from gpu_exporter.settings.safefile import (
    FileKind,
    FileRefused,
    decode,
    line_column,
    read_bytes,
    shown,
)


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

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A mapping that names a key twice is refused: PyYAML would keep the
        last silently, so the first (a TLS setting, an interval) would be set
        in the file yet have no effect. Keys a merge (``<<: *base``) brings may
        be overridden, as YAML's merge means."""
        if isinstance(node, MappingNode):
            first: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" \
                        or not isinstance(key_node, ScalarNode):
                    continue
                key = self.construct_object(key_node)
                if not isinstance(key, Hashable):  # pragma: no cover - scalars are
                    continue
                if key in first:
                    raise ConstructorError(
                        None, None, f"duplicate key {shown(key)} (first on line "
                        f"{first[key].start_mark.line + 1})", key_node.start_mark)
                first[key] = key_node
        return super().construct_mapping(node, deep)


_StrictConstructor.add_constructor("tag:yaml.org,2002:float",  # type: ignore[type-var]
                                   _StrictConstructor.construct_yaml_float)
_StrictConstructor.add_constructor("tag:yaml.org,2002:int",  # type: ignore[type-var]
                                   _StrictConstructor.construct_yaml_int)


class PurePythonParser(Reader, Scanner, Parser):
    """PyYAML's own scanner and parser, where it was built without libyaml."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)


# libyaml's scanner and parser (C, in every PyYAML wheel): four times faster.
_Parser: Any = getattr(cyaml, "CParser", PurePythonParser)


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
        offset = exc.position if parser is not PurePythonParser \
            else len(text[:exc.position].encode())
        line, column = line_column(data, offset)
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
    # PyYAML words a second document as its context ("expected a single
    # document in the stream") and "but found another document" as the problem.
    if isinstance(exc, ComposerError) \
            and "expected a single document" in str(getattr(exc, "context", "")):
        problem = "more than one YAML document"
    return str(problem)


def _yaml_place(exc: yaml.YAMLError) -> str | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is None:
        return None
    return f"line {mark.line + 1}, column {mark.column + 1}"


__all__ = ["PurePythonParser", "load_yaml", "parse_yaml"]
