"""A section reads values as flags, environment variables and files give them,
refuses what its declaration does not allow with the path of every problem,
and stays as it was built."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest

from gpu_exporter.config_types import parse_duration
from gpu_exporter.sections import Parse, Section, ValidationError, setting


def _double(v: int) -> int:
    if v % 2:
        raise ValueError("must be even")
    return v


class Inner(Section):
    every: Annotated[float, Parse(parse_duration)] = setting(2.0, gt=0, le=3600)
    count: int = setting(8, ge=1, le=256, check=_double)
    on: bool = True
    level: Literal["debug", "info"] = "info"
    where: Path | None = None
    codes: tuple[int, ...] = (1, 2)


class Outer(Section):
    inner: Inner = setting(Inner(), description="the inner section")
    name: str = setting("x", max_length=4)
    switches: dict[str, bool] = setting(default_factory=dict)

    def _check(self) -> None:
        if self.name == "bad" and self.inner.on:
            raise ValueError("bad needs on: false")


class Strict(Section):
    strict = True
    index: int = setting(ge=0)
    ratio: float | None = None
    items: list[Inner] = setting(default_factory=list, max_length=2)


def problems(build: Any) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(ValidationError) as err:
        build()
    return [(e["loc"], e["msg"]) for e in err.value.errors()]


def test_values_as_flags_and_the_environment_give_them_are_converted() -> None:
    o = Outer(inner={"every": "1m30s", "count": "8", "on": "off", "where": "/etc",
                     "codes": ["3", 4]}, switches={"a": "yes", "b": 0})
    assert o.inner.every == 90.0 and o.inner.count == 8 and o.inner.on is False
    assert o.inner.where == Path("/etc") and o.inner.codes == (3, 4)
    assert o.switches == {"a": True, "b": False}
    assert Outer().inner == Inner() and Outer().switches == {}


@pytest.mark.parametrize(("values", "where", "message"), [
    ({"inner": {"count": 0}}, ("inner", "count"), "Input should be greater than or equal to 1"),
    ({"inner": {"count": 3}}, ("inner", "count"), "must be even"),
    ({"inner": {"count": "8.5"}}, ("inner", "count"), "Input should be a valid integer"),
    ({"inner": {"count": True}}, ("inner", "count"), "Input should be a valid integer"),
    ({"inner": {"every": "soon"}}, ("inner", "every"),
     "expected a duration like 1s, 500ms or 1m30s, got 'soon'"),
    ({"inner": {"every": 0}}, ("inner", "every"), "Input should be greater than 0"),
    ({"inner": {"every": "nan"}}, ("inner", "every"), "Input should be a finite number"),
    ({"inner": {"on": "maybe"}}, ("inner", "on"), "Input should be a valid boolean"),
    ({"inner": {"on": 2}}, ("inner", "on"), "Input should be a valid boolean"),
    ({"inner": {"level": "trace"}}, ("inner", "level"), "Input should be 'debug' or 'info'"),
    ({"inner": {"codes": 5}}, ("inner", "codes"), "Input should be a valid tuple"),
    ({"inner": {"codes": [1, "x"]}}, ("inner", "codes", 1), "Input should be a valid integer"),
    ({"inner": 5}, ("inner",), "Input should be a valid dictionary or instance of Inner"),
    ({"inner": {"evry": 1}}, ("inner", "evry"), "Extra inputs are not permitted"),
    ({"name": 5}, ("name",), "Input should be a valid string"),
    ({"name": "longer"}, ("name",), "String should have at most 4 characters"),
    ({"switches": {"a": "x"}}, ("switches", "a"), "Input should be a valid boolean"),
    ({"switches": []}, ("switches",), "Input should be a valid dictionary"),
    ({"name": "bad"}, (), "bad needs on: false"),
])
def test_a_bad_value_is_refused_with_its_path(values: dict[str, Any],
                                              where: tuple[str | int, ...], message: str) -> None:
    assert problems(lambda: Outer(**values)) == [(where, message)]


def test_every_problem_is_listed_fields_first_and_the_span_check_only_on_good_fields() -> None:
    found = problems(lambda: Outer(inner={"count": 0, "every": -1, "zz": 1}, name="bad"))
    assert found == [(("inner", "every"), "Input should be greater than 0"),
                     (("inner", "count"), "Input should be greater than or equal to 1"),
                     (("inner", "zz"), "Extra inputs are not permitted")]


def test_a_strict_section_takes_jsons_own_types_only() -> None:
    assert Strict(index=3, ratio=1).ratio == 1.0
    assert problems(lambda: Strict(index="3")) == [(("index",), "Input should be a valid integer")]
    assert problems(lambda: Strict(index=1, ratio="0.5")) == [
        (("ratio",), "Input should be a valid number")]
    assert problems(lambda: Strict()) == [(("index",), "Field required")]
    assert problems(lambda: Strict(index=1, items=[{}, {}, {}])) == [
        (("items",), "List should have at most 2 items")]
    assert problems(lambda: Strict(index=1, items=[{}, {"count": 0}])) == [
        (("items", 1, "count"), "Input should be greater than or equal to 1")]
    assert problems(lambda: Strict.model_validate([1])) == [
        ((), "Input should be a valid dictionary or instance of Strict")]


def test_a_section_is_frozen_and_a_copy_carries_what_was_given() -> None:
    o = Outer(name="ab")
    with pytest.raises(AttributeError, match="frozen"):
        o.name = "cd"  # type: ignore[misc]
    assert o.model_fields_set == {"name"}
    c = o.model_copy(update={"switches": {"a": True}})
    assert c.switches == {"a": True} and o.switches == {}
    assert c.model_fields_set == {"name", "switches"}
    with pytest.raises(AttributeError, match="no setting nmae"):
        o.model_copy(update={"nmae": "x"})
    for twin in (pickle.loads(pickle.dumps(o)), copy.deepcopy(o)):
        assert twin == o and twin.model_fields_set == o.model_fields_set
    assert Outer(name="ab") == o and Outer(name="ac") != o
    assert hash(Inner(count=4)) == hash(Inner(count="4")) != hash(Inner())
    assert o.model_dump() == {"inner": Inner().model_dump(), "name": "ab", "switches": {}}
    assert Outer(inner={"count": 4}, name="x").model_dump(exclude_defaults=True) == {
        "inner": {"count": 4}}
    assert Outer(**Outer(inner={"on": False}).model_dump(exclude_defaults=True)) == \
        Outer(inner={"on": False})
    assert repr(Inner()).startswith("Inner(every=2.0, count=8, on=True")


def test_the_declarations_are_read_back_for_flags_and_docs() -> None:
    spec = Outer.model_fields["inner"]
    assert spec.annotation is Inner and spec.description == "the inner section"
    every = Inner.model_fields["every"]
    assert every.annotation is float and every.bounds.gt == 0 and every.bounds.le == 3600
    assert any(isinstance(m, Parse) and m.func is parse_duration for m in every.metadata)
    assert Strict.model_fields["index"].required and not Outer.model_fields["switches"].required
    assert Outer.model_fields["switches"].get_default() == {}
    assert list(Outer.model_fields) == ["inner", "name", "switches"]
