"""A row names the metrics it reads by their catalog handles, never by a
string: a handle renamed or removed in the catalog is an error at import, a
string would go on naming a metric that no longer exists (Row.reads,
gpu_exporter/diagnosis/row.py)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import gpu_exporter
from gpu_exporter.catalogs import device as dev
from gpu_exporter.diagnosis.table import Row

PACKAGE = Path(gpu_exporter.__file__).parent

Load = Callable[[str], "ast.Module | None"]


def _load_from(root: Path) -> Load:
    """A module of the package by its dotted name, parsed; None outside it."""
    cache: dict[str, ast.Module | None] = {}

    def load(module: str) -> ast.Module | None:
        if module not in cache:
            path = root.parent / (module.replace(".", "/") + ".py")
            cache[module] = ast.parse(path.read_text()) if path.is_file() else None
        return cache[module]
    return load


def _defined(tree: ast.Module, name: str) -> Iterator[ast.expr]:
    """What a module-level ``name = ...`` or ``name: T = ...`` is bound to."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(target, ast.Name) and target.id == name for target in targets):
            yield value


def _imported(tree: ast.Module, name: str) -> tuple[str, str] | None:
    """The module and name a ``from m import x as name`` binds ``name`` to."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return node.module, alias.name
    return None


def _strings_in(expr: ast.expr, tree: ast.Module, load: Load,
                seen: set[tuple[int, str]]) -> Iterator[str]:
    """Every string an expression is built of, following the module-level
    names it uses (``_STARVED_READS + reads``) to what they are bound to."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, ast.Name) and (id(tree), node.id) not in seen:
            seen.add((id(tree), node.id))
            for value in _defined(tree, node.id):
                yield from _strings_in(value, tree, load, seen)
            source = _imported(tree, node.id)
            if source is not None and (other := load(source[0])) is not None:
                for value in _defined(other, source[1]):
                    yield from _strings_in(value, other, load, seen)


def _strings_read(tree: ast.Module, load: Load) -> list[str]:
    """The strings given to a ``reads=`` anywhere in a module."""
    return [text for node in ast.walk(tree) if isinstance(node, ast.Call)
            for keyword in node.keywords if keyword.arg == "reads"
            for text in _strings_in(keyword.value, tree, load, set())]


def _strings_read_in(source: str, **modules: str) -> list[str]:
    parsed = {name.replace("__", "."): ast.parse(text) for name, text in modules.items()}
    return _strings_read(ast.parse(source), parsed.get)


def test_the_walk_finds_a_name_given_as_a_string_however_it_reaches_reads() -> None:
    assert _strings_read_in('Row("a", reads=("gpu_up",))') == ["gpu_up"]
    assert _strings_read_in('_R = ("gpu_up",)\nRow("a", reads=(*_R, dev.UP))') == ["gpu_up"]
    assert _strings_read_in('_R: tuple[str, ...] = ("gpu_up",)\n'
                            "def pair(reads):\n    return Row(reads=_R + reads)") == ["gpu_up"]
    assert _strings_read_in("from words import R as _R\nRow(reads=_R)",
                            words='R = ("gpu_up",)') == ["gpu_up"]
    assert _strings_read_in("from pkg.words import R as _R\nRow(reads=_R)",
                            pkg__words='R = (m.UP, "gpu_fan_speed_ratio")') \
        == ["gpu_fan_speed_ratio"]
    # Handles, and strings anywhere but in what a row reads, are no finding.
    assert _strings_read_in('_R = (dev.UP,)\nRow("gpu_lost", "x", reads=_R + (dev.UP,))') == []
    assert _strings_read_in('SAME = {"gpu_a_total": "gpu_a"}\nRow(reads=(dev.UP,))') == []


def test_no_row_reads_a_metric_by_its_name() -> None:
    load = _load_from(PACKAGE)
    found = {str(path.relative_to(PACKAGE)): strings for path in sorted(PACKAGE.rglob("*.py"))
             if (strings := _strings_read(ast.parse(path.read_text()), load))}
    assert found == {}
    # The walk looked where the rows are: every module of rows gives reads= its handles.
    giving = {path.name for path in (PACKAGE / "diagnosis").glob("*.py")
              if any(isinstance(node, ast.keyword) and node.arg == "reads"
                     for node in ast.walk(ast.parse(path.read_text())))}
    rows_modules = {path.name for path in (PACKAGE / "diagnosis").glob("*_rows.py")}
    assert len(rows_modules) >= 6 and rows_modules <= giving


def test_a_row_given_a_name_for_a_handle_cannot_be_made() -> None:
    """What the walk cannot follow (a name handed on through a function's
    parameter) the row itself refuses, when its module is imported."""
    with pytest.raises(TypeError, match="row x/y reads 'gpu_up': a row reads a metric by its "
                                        "catalog handle"):
        Row("x", "y", "info", "s", "e", "f", ("c",), "x",
            reads=(dev.UP, "gpu_up"))  # type: ignore[arg-type]
    assert Row("x", "y", "info", "s", "e", "f", ("c",), "x", reads=(dev.UP,)).reads == (dev.UP,)
