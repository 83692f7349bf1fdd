"""The safe YAML loader (gpu_exporter/safeyaml.py) on small texts, with both
parsers (libyaml's and PyYAML's own): every bound at its edge, aliases counted
as what they stand for, and each refusal as the exact line a user reads, with
its place. Fast on purpose: mutation testing runs these per changed line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from yaml import cyaml

from gpu_exporter.safefile import FileKind, FileRefused
from gpu_exporter.safeyaml import PurePythonParser, load_yaml, parse_yaml

# libyaml's parser: every PyYAML wheel has it (the loader falls back without it).
LIBYAML: Any = getattr(cyaml, "CParser")  # noqa: B009 - not in its stubs
SMALL = FileKind("small file", 4096, 10, 3)
PARSERS = pytest.mark.parametrize("parser", [LIBYAML, PurePythonParser],
                                  ids=["libyaml", "python"])


def refused(text: str, parser: Any, kind: FileKind = SMALL) -> str:
    with pytest.raises(FileRefused) as err:
        parse_yaml(text, "f.yaml", kind, parser)
    return str(err.value)


@PARSERS
def test_nodes_are_counted_up_to_the_bound_and_refused_past_it(parser: Any) -> None:
    # a mapping of 4 pairs is 1 + 8 nodes; 5 pairs is 11
    assert parse_yaml("{a: 1, b: 2, c: 3, d: 4}", "f.yaml", SMALL, parser) == {
        "a": 1, "b": 2, "c": 3, "d": 4}
    assert parse_yaml("[1, 2, 3, 4, 5, 6, 7, 8, 9]", "f.yaml", SMALL, parser) == list(range(1, 10))
    assert refused("[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]", parser) == (
        "small file f.yaml: line 1, column 29: more than 10 values with its aliases expanded")


@PARSERS
def test_an_alias_counts_every_node_it_stands_for(parser: Any) -> None:
    # &a holds 4 nodes (the list and 3 items); 1 + 4 + 4 = 9 fits, a third alias does not
    assert parse_yaml("[&a [1, 2, 3], *a]", "f.yaml", SMALL, parser) == [[1, 2, 3], [1, 2, 3]]
    assert refused("[&a [1, 2, 3], *a, *a]", parser) == (
        "small file f.yaml: line 1, column 20: more than 10 values with its aliases expanded")
    # an alias of a scalar counts one
    assert parse_yaml("[&s x, *s, *s, *s, *s, *s, *s, *s, *s]", "f.yaml", SMALL,
                      parser) == ["x"] * 9


@PARSERS
def test_depth_is_counted_with_aliases_expanded(parser: Any) -> None:
    assert parse_yaml("[[1]]", "f.yaml", SMALL, parser) == [[1]]
    assert refused("[[[1]]]", parser) == (
        "small file f.yaml: line 1, column 4: nested deeper than 3 levels")
    # the anchored list is 2 deep; an alias of it one level down is 3 deep: fits
    assert parse_yaml("[&a [1], *a]", "f.yaml", SMALL, parser) == [[1], [1]]
    # two levels down it is 4
    assert refused("{x: &a [1], y: [*a]}", parser) == (
        "small file f.yaml: line 1, column 17: nested deeper than 3 levels")
    # an anchored node's height stays with it at the top, too
    assert parse_yaml("- &a [1]\n- *a\n", "f.yaml", SMALL, parser) == [[1], [1]]


@PARSERS
def test_a_recursive_alias_is_refused(parser: Any) -> None:
    assert refused("&a [*a]", parser) == (
        "small file f.yaml: line 1, column 5: alias *a refers to the node that holds it "
        "(a recursive structure)")


@PARSERS
def test_what_no_file_means_is_refused_with_its_place(parser: Any) -> None:
    big = FileKind("config file", 1 << 20, 1000, 8)
    assert refused("x: .nan\n", parser, big) == (
        "config file f.yaml: line 1, column 4: '.nan' is not a finite number")
    assert refused("x: [1, -.inf]\n", parser, big) == (
        "config file f.yaml: line 1, column 8: '-.inf' is not a finite number")
    assert parse_yaml("x: 1.5e+3\n", "f.yaml", big, parser) == {"x": 1500.0}
    assert refused("x: " + "9" * 5000 + "\n", parser, big) == (
        "config file f.yaml: line 1, column 4: an integer too long to read")
    assert parse_yaml("x: 0x1f\n", "f.yaml", big, parser) == {"x": 31}


@PARSERS
def test_a_key_named_twice_is_refused_and_a_merge_may_override(parser: Any) -> None:
    big = FileKind("config file", 1 << 20, 1000, 8)
    assert refused("a: 1\nb: 2\na: 3\n", parser, big) == (
        "config file f.yaml: line 3, column 1: duplicate key 'a' (first on line 1)")
    assert refused("x:\n  1: a\n  1: b\n", parser, big) == (
        "config file f.yaml: line 3, column 3: duplicate key 1 (first on line 2)")
    merged = "base: &b {a: 1, b: 2}\nover:\n  <<: *b\n  a: 5\n"
    assert parse_yaml(merged, "f.yaml", big, parser)["over"] == {"a": 5, "b": 2}
    # a list as a key is no setting's name
    assert refused("? [1]\n: x\n", parser, big) == (
        "config file f.yaml: line 1, column 3: found unhashable key")


@PARSERS
def test_a_text_that_is_not_one_yaml_document_is_one_line(parser: Any) -> None:
    assert refused("a: 1\n---\nb: 2\n", parser) == (
        "small file f.yaml: line 2, column 1: more than one YAML document")
    assert refused("a: [1\n", parser).startswith("small file f.yaml: line 2, column 1: ")
    assert parse_yaml("", "f.yaml", SMALL, parser) is None


def test_a_character_yaml_refuses_is_placed_in_bytes_by_both_parsers() -> None:
    # "é" is two bytes: libyaml says the bell after it is at byte 7, PyYAML at
    # character 6; both are column 7 of line 1 (each parser words it its own way)
    text = "key: é\x07\n"
    assert refused(text, LIBYAML) == (
        "small file f.yaml: line 1, column 7: control characters are not allowed (0x07)")
    assert refused(text, PurePythonParser) == (
        "small file f.yaml: line 1, column 7: special characters are not allowed (0x07)")


def test_a_file_is_read_within_its_kind(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("a: [1, 2]\n")
    assert load_yaml(path, SMALL) == {"a": [1, 2]}
    path.write_text("a: " + "x" * 5000 + "\n")
    with pytest.raises(FileRefused) as err:
        load_yaml(path, SMALL)
    assert str(err.value).startswith(f"small file {path}: ")
