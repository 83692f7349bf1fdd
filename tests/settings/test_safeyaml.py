"""The safe YAML loader (gpu_exporter/settings/safeyaml.py) on small texts, with both
parsers (libyaml's and PyYAML's own): every bound at its edge, aliases counted
as what they stand for, and each refusal as the exact line a user reads, with
its place. Fast on purpose: mutation testing runs these per changed line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from yaml import cyaml

from gpu_exporter.settings import safeyaml
from gpu_exporter.settings.safefile import FileKind, FileRefused
from gpu_exporter.settings.safeyaml import PurePythonParser, load_yaml, parse_yaml

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


@pytest.fixture(autouse=True)
def fresh_loaders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test builds its loaders (they are kept per kind and parser)."""
    monkeypatch.setattr(safeyaml, "_LOADERS", {})


def expanded(data: Any) -> tuple[int, int]:
    """(values, depth) of data as PyYAML's own loader built it, aliases
    expanded: the oracle for the bounded composer, which counts the same
    while composing. A mapping's keys are values too."""
    if isinstance(data, dict):
        inner = [expanded(k) for k in data] + [expanded(v) for v in data.values()]
    elif isinstance(data, list):
        inner = [expanded(v) for v in data]
    else:
        return 1, 1
    return 1 + sum(n for n, _ in inner), 1 + max((d for _, d in inner), default=0)


ALIASED = [
    "[&a [1, [2]], *a, [*a]]",
    "{x: &a [1], y: &b [*a, *a], z: [[*b]]}",
    "- &a {k: [1, 2]}\n- [*a, [*a]]\n- &b [*a]\n- *b\n",
    "{a: &s x, b: [*s, [*s]], c: &m {d: *s}, e: [[*m]]}",
    "[[&a [[1]]], [*a], *a]",
    "{k: &a [&b [3], *b], l: [*a, [*b]]}",
]


@PARSERS
@pytest.mark.parametrize("text", ALIASED)
def test_values_and_depth_are_counted_as_the_expanded_data_holds_them(parser: Any,
                                                                      text: str) -> None:
    nodes, depth = expanded(yaml.safe_load(text))
    roomy = 1000
    assert parse_yaml(text, "f.yaml", FileKind("k", 4096, nodes, depth), parser) == \
        yaml.safe_load(text)
    with pytest.raises(FileRefused, match=f"nested deeper than {depth - 1} levels"):
        parse_yaml(text, "f.yaml", FileKind("k", 4096, roomy, depth - 1), parser)
    with pytest.raises(FileRefused, match=f"more than {nodes - 1:,} values"):
        parse_yaml(text, "f.yaml", FileKind("k", 4096, nodes - 1, roomy), parser)


@PARSERS
def test_a_key_named_twice_after_a_merge_or_a_list_key_is_still_found(parser: Any) -> None:
    big = FileKind("config file", 1 << 20, 1000, 8)
    assert refused("b: &b {x: 1}\no:\n  <<: *b\n  a: 1\n  a: 2\n", parser, big) == (
        "config file f.yaml: line 5, column 3: duplicate key 'a' (first on line 4)")
    assert refused("? [1]\n: x\na: 1\na: 2\n", parser, big) == (
        "config file f.yaml: line 4, column 1: duplicate key 'a' (first on line 3)")


def test_a_column_counts_characters_whatever_each_parser_counts() -> None:
    # four two-byte characters before the bell: character 7, byte 11, column 8
    text = "k: éééé\x07\n"
    assert refused(text, LIBYAML).startswith("small file f.yaml: line 1, column 8: ")
    assert refused(text, PurePythonParser).startswith("small file f.yaml: line 1, column 8: ")


def test_a_file_is_named_in_what_its_bounds_and_its_text_refuse(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"a: [1,\n")
    with pytest.raises(FileRefused) as err:
        load_yaml(path, SMALL)
    assert str(err.value).startswith(f"small file {path}: line 2, column 1: ")
    path.write_bytes(b"a: \xff\n")
    with pytest.raises(FileRefused) as err:
        load_yaml(path, SMALL)
    assert str(err.value) == f"small file {path}: line 1, column 4: not UTF-8 text (byte 0xff)"
    path.write_bytes(b"a: 12345\n")
    assert load_yaml(path, SMALL, limit=9) == {"a": 12345}
    with pytest.raises(FileRefused, match="8"):
        load_yaml(path, SMALL, limit=8)


def test_an_error_without_a_problem_or_a_place_is_still_one_line() -> None:
    assert safeyaml._yaml_problem(yaml.YAMLError("first\nsecond\nthird")) == "first"
    assert safeyaml._yaml_problem(yaml.YAMLError("")) == "invalid YAML"
    reader = yaml.reader.ReaderError("f", 3, 7, "utf-8", "a reason")
    assert safeyaml._yaml_problem(reader) == "a reason"
    assert safeyaml._yaml_place(yaml.YAMLError("x")) is None
    mark = yaml.Mark("f", 0, 4, 9, None, None)  # type: ignore[arg-type]
    context_only = yaml.MarkedYAMLError(context="while here", context_mark=mark, problem="p")
    assert safeyaml._yaml_place(context_only) == "line 5, column 10"
    other = yaml.composer.ComposerError("expected a single document in the stream", mark,
                                        "but found another document", None)
    assert safeyaml._yaml_problem(other) == "more than one YAML document"
    alias = yaml.composer.ComposerError(None, None, "found undefined alias 'x'", mark)
    assert safeyaml._yaml_problem(alias) == "found undefined alias 'x'"
