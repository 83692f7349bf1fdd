"""The runtime package validates a file in one way: sections
(``gpu_exporter/sections.py``). Read from the source, not declared: every
module of ``gpu_exporter`` is parsed, every import it makes (a
function-local one too) is listed, and a validation library named by any
of them, or a second home of validation errors, fails the test with the
module that brought it. README's dependency table says why sections and
not pydantic (measured)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gpu_exporter"
# Libraries whose job is what sections do.
VALIDATION_LIBRARIES = frozenset({"pydantic", "pydantic_core", "pydantic_settings", "msgspec",
                                  "attrs", "cattrs", "marshmallow", "cerberus", "voluptuous",
                                  "jsonschema", "schema", "typeguard", "beartype"})
# The simulator's scenario, recording and tenant files are still pydantic
# models: the move onto sections that is left. Each module here is one to
# move; none may be added.
NOT_YET_MOVED = frozenset({"gpu_exporter/pydantic_types.py",
                           "gpu_exporter/simulator/__init__.py",
                           "gpu_exporter/simulator/model.py",
                           "gpu_exporter/simulator/recordings.py",
                           "gpu_exporter/simulator/tenants.py"})


def _modules() -> dict[str, ast.Module]:
    return {str(path.relative_to(PACKAGE.parent)): ast.parse(path.read_text(), str(path))
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
    users = {name: libs for name, libs in users.items() if libs}
    assert {name: libs for name, libs in users.items() if name not in NOT_YET_MOVED} == {}
    # A module moved onto sections leaves the list (this test says what is left).
    assert sorted(NOT_YET_MOVED - users.keys()) == []


def test_validation_errors_have_one_home() -> None:
    homes = sorted(name for name, tree in _modules().items() for node in ast.walk(tree)
                   if isinstance(node, ast.ClassDef) and node.name.endswith("ValidationError"))
    assert homes == ["gpu_exporter/sections.py"]


def test_the_check_sees_an_import_inside_a_function() -> None:
    """The walk is not fooled by the form an import takes."""
    tree = ast.parse("def f():\n    from pydantic import BaseModel\n    import msgspec.json\n")
    assert _imported_roots(tree) & VALIDATION_LIBRARIES == {"pydantic", "msgspec"}
