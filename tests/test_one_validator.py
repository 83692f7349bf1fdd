"""The runtime package validates a file in one way: sections
(``gpu_exporter/settings/sections.py``). Read from the source, not declared: every
module of ``gpu_exporter`` is parsed, every import it makes (a
function-local one too) is listed, and a validation library named by any
of them, or a second home of validation errors, fails the test with the
module that brought it. README's dependency table says why sections and
not pydantic (measured)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gpu_exporter"
# Libraries whose job is what sections do.
VALIDATION_LIBRARIES = frozenset({"pydantic", "pydantic_core", "pydantic_settings", "msgspec",
                                  "attrs", "cattrs", "marshmallow", "cerberus", "voluptuous",
                                  "jsonschema", "schema", "typeguard", "beartype"})


def _modules() -> dict[str, ast.Module]:
    return {str(path.relative_to(ROOT)): ast.parse(path.read_text(), str(path))
            for path in sorted(PACKAGE.rglob("*.py"))}


def _imported_roots(tree: ast.Module) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_module_validates_with_a_library() -> None:
    users = {name: sorted(_imported_roots(tree) & VALIDATION_LIBRARIES)
             for name, tree in _modules().items()}
    assert {name: libs for name, libs in users.items() if libs} == {}


def test_the_exporter_does_not_depend_on_a_validation_library() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    named = {dep.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
             .replace("-", "_") for dep in project["dependencies"]}
    assert named & VALIDATION_LIBRARIES == set()


def test_validation_errors_have_one_home() -> None:
    homes = sorted(name for name, tree in _modules().items() for node in ast.walk(tree)
                   if isinstance(node, ast.ClassDef) and node.name.endswith("ValidationError"))
    assert homes == ["gpu_exporter/settings/sections.py"]


def test_the_check_sees_an_import_inside_a_function() -> None:
    """The walk is not fooled by the form an import takes."""
    tree = ast.parse("def f():\n    from pydantic import BaseModel\n    import msgspec.json\n")
    assert _imported_roots(tree) & VALIDATION_LIBRARIES == {"pydantic", "msgspec"}


def test_the_measured_comparison_refuses_the_same_values_at_the_same_fields() -> None:
    """README's measurement compares like with like: the pydantic rebuild of
    the settings takes the file that gives every setting and refuses each bad
    value at the field sections name, with the reason in one line."""
    from benchmarks.validation_cost import BAD_VALUES, errors, every_setting, pydantic_settings

    assert pydantic_settings().model_validate(every_setting()) is not None
    lines = errors()
    assert len(lines) == len(BAD_VALUES)
    for ours, theirs in lines:
        assert ours != "accepted" and "\n" not in ours
        assert ours.split(":")[0] == theirs.split(":")[0]
    # What README says differs: pydantic's longer wording of a bad bool and int.
    assert [(o, t) for o, t in lines if o != t] == [
        ("diagnosis.enabled: Input should be a valid boolean (got 'maybe')",
         "diagnosis.enabled: Input should be a valid boolean, unable to interpret input "
         "(got 'maybe')"),
        ("web.max_requests: Input should be a valid integer (got '8x')",
         "web.max_requests: Input should be a valid integer, unable to parse string as an "
         "integer (got '8x')")]
