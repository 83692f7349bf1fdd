"""The diagnosis's inputs follow from two declarations, each pinned here to the
code that makes it true: a PollReadings field names the reader that fills it
(held against the one reader that assigns it), and a GpuSignals field names the
PollReadings field gather() takes it from (held against what gather reads)."""

from __future__ import annotations

import ast
import inspect
from dataclasses import fields
from pathlib import Path

import gpu_exporter.diagnosis.signals as signals
from gpu_exporter.daemon.pipeline import READERS
from gpu_exporter.poll.readings import READER_OF_FIELD, PollReadings

PACKAGE = Path(signals.__file__).parents[1]


def _assigned_readings(tree: ast.AST) -> set[str]:
    """The PollReadings fields a module assigns (``<x>.readings.<field> = ...``)."""
    found = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else [])
        for t in targets:
            if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Attribute)
                    and t.value.attr == "readings"):
                found.add(t.attr)
    return found


def test_each_readings_field_is_filled_by_the_reader_it_names() -> None:
    filled: dict[str, set[str]] = {}
    for kind in READERS:
        module = inspect.getmodule(kind)
        assert module is not None and module.__file__
        tree = ast.parse(Path(module.__file__).read_text())
        for name in _assigned_readings(tree):
            filled.setdefault(name, set()).add(kind.name)
    assert set(filled) == {f.name for f in fields(PollReadings)}
    assert {name: {READER_OF_FIELD[name]} for name in filled} == filled


def test_nothing_but_the_readers_fills_the_readings() -> None:
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "collectors":
            continue
        assert not _assigned_readings(ast.parse(path.read_text())), path


def test_gather_reads_exactly_the_sources_the_signals_declare() -> None:
    tree = ast.parse(inspect.getsource(signals.gather))
    read = {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "readings"}
    assert read == {s for sources in signals.SOURCES_OF_SIGNAL.values() for s in sources}
