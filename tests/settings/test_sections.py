"""A section reads values as flags, environment variables and files give them,
refuses what its declaration does not allow with the path of every problem,
and stays as it was built.

The sections under test are declared inside each test (``declared()``), not at
import: a section's fields are read when its class is made, and mutation
testing changes code only while a test runs. (No ``from __future__ import
annotations`` here: the classes are local, and their hints must be objects.)"""

import copy
import pickle
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, NamedTuple

import pytest

from gpu_exporter.settings.config_types import parse_duration
from gpu_exporter.settings.sections import Parse, Section, SettingBounds, ValidationError, setting


def _double(v: int) -> int:
    if v % 2:
        raise ValueError("must be even")
    return v


class Declared(NamedTuple):
    # Any: the classes are made at run time, so a type checker cannot know their fields.
    Inner: Any
    Outer: Any
    Strict: Any


def declared() -> Declared:
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

    return Declared(Inner, Outer, Strict)


class Kept(Section):
    """Pickle finds a class by its module's name for it: this one is at the top."""

    name: str = "x"
    level: str = "info"


def problems(build: Any) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(ValidationError) as err:
        build()
    return [(e["loc"], e["msg"]) for e in err.value.errors()]


def test_values_as_flags_and_the_environment_give_them_are_converted() -> None:
    made = declared()
    Inner, Outer = made.Inner, made.Outer
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
    Outer = declared().Outer
    assert problems(lambda: Outer(**values)) == [(where, message)]


def test_every_problem_is_listed_fields_first_and_the_span_check_only_on_good_fields() -> None:
    Outer = declared().Outer
    found = problems(lambda: Outer(inner={"count": 0, "every": -1, "zz": 1}, name="bad"))
    assert found == [(("inner", "every"), "Input should be greater than 0"),
                     (("inner", "count"), "Input should be greater than or equal to 1"),
                     (("inner", "zz"), "Extra inputs are not permitted")]


def test_a_strict_section_takes_jsons_own_types_only() -> None:
    Strict = declared().Strict
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
    made = declared()
    Inner, Outer = made.Inner, made.Outer
    o = Outer(name="ab")
    with pytest.raises(AttributeError, match="frozen"):
        o.name = "cd"
    assert o.model_fields_set == {"name"}
    c = o.model_copy(update={"switches": {"a": True}})
    assert c.switches == {"a": True} and o.switches == {}
    assert c.model_fields_set == {"name", "switches"}
    with pytest.raises(AttributeError, match="no setting nmae"):
        o.model_copy(update={"nmae": "x"})
    assert copy.deepcopy(o) == o and copy.deepcopy(o).model_fields_set == o.model_fields_set
    kept = Kept(name="ab")
    twin = pickle.loads(pickle.dumps(kept))
    assert twin == kept and twin.model_fields_set == {"name"} and twin.level == "info"
    assert Outer(name="ab") == o and Outer(name="ac") != o
    assert hash(Inner(count=4)) == hash(Inner(count="4")) != hash(Inner())
    assert o.model_dump() == {"inner": Inner().model_dump(), "name": "ab", "switches": {}}
    assert Outer(inner={"count": 4}, name="x").model_dump(exclude_defaults=True) == {
        "inner": {"count": 4}}
    assert Outer(**Outer(inner={"on": False}).model_dump(exclude_defaults=True)) == \
        Outer(inner={"on": False})
    assert repr(Inner()).startswith("Inner(every=2.0, count=8, on=True")


def test_the_declarations_are_read_back_for_flags_and_docs() -> None:
    made = declared()
    Inner, Outer, Strict = made.Inner, made.Outer, made.Strict
    spec = Outer.model_fields["inner"]
    assert spec.annotation is Inner and spec.description == "the inner section"
    every = Inner.model_fields["every"]
    assert every.annotation is float and every.bounds.gt == 0 and every.bounds.le == 3600
    assert any(isinstance(m, Parse) and m.func is parse_duration for m in every.metadata)
    assert Strict.model_fields["index"].required and not Outer.model_fields["switches"].required
    assert Outer.model_fields["switches"].get_default() == {}
    assert list(Outer.model_fields) == ["inner", "name", "switches"]


def test_the_error_says_how_many_problems_and_the_first_with_its_path() -> None:
    Outer = declared().Outer
    with pytest.raises(ValidationError) as err:
        Outer(inner={"count": 0, "every": -1})
    assert str(err.value) == ("2 problem(s) in Outer: inner.every: "
                              "Input should be greater than 0")
    assert err.value.title == "Outer"
    listed = err.value.errors()
    listed.clear()  # a copy: the error keeps its own list
    assert len(err.value.errors()) == 2
    assert [e["type"] for e in err.value.errors()] == ["bound", "bound"]
    assert [e["input"] for e in err.value.errors()] == [-1, 0]
    with pytest.raises(ValidationError) as err:
        Outer(name="bad")
    assert str(err.value) == "1 problem(s) in Outer: bad needs on: false"
    assert str(ValidationError("X", [])) == "0 problem(s) in X: invalid"


@pytest.mark.parametrize(("limits", "value", "message"), [
    ({"ge": 1}, 1, None), ({"ge": 1}, 0.5, "Input should be greater than or equal to 1"),
    ({"gt": 1}, 1.5, None), ({"gt": 1}, 1, "Input should be greater than 1"),
    ({"le": 1}, 1, None), ({"le": 1}, 1.5, "Input should be less than or equal to 1"),
    ({"lt": 1}, 0.5, None), ({"lt": 1}, 1, "Input should be less than 1"),
    ({"ge": 0, "le": 2}, 2, None), ({"gt": 0, "lt": 2}, 0, "Input should be greater than 0"),
])
def test_each_bound_holds_at_its_edge(limits: dict[str, Any], value: float,
                                      message: str | None) -> None:
    class One(Section):
        x: float = setting(1.0, **limits)

    if message is None:
        assert One(x=value).x == value
    else:
        with pytest.raises(ValidationError) as err:
            One(x=value)
        assert err.value.errors() == [{"loc": ("x",), "msg": message, "type": "bound",
                                       "input": value}]


def test_lengths_are_bounded_for_text_lists_and_tuples_and_numbers_are_not() -> None:
    class Sized(Section):
        text: str = setting("", max_length=2)
        many: list[int] = setting(default_factory=list, max_length=2)
        few: tuple[int, ...] = setting((), max_length=1)
        flag: bool = setting(False, ge=5)  # a bool is not a number to bound

    assert Sized(text="ab", many=[1, 2], few=[1], flag=True).few == (1,)
    refused = problems(lambda: Sized(text="abc", many=[1, 2, 3], few=(1, 2)))
    assert refused == [(("text",), "String should have at most 2 characters"),
                       (("many",), "List should have at most 2 items"),
                       (("few",), "List should have at most 1 items")]
    with pytest.raises(ValidationError) as err:
        Sized(text="abc")
    assert err.value.errors()[0]["type"] == "too_long"


def _upper_only(v: Any) -> Any:
    if isinstance(v, str) and not v.isupper():
        raise ValueError("must be upper case")
    return v


def test_a_mapping_is_bounded_and_its_keys_and_items_checked_by_their_annotations() -> None:
    Key = Annotated[str, Parse(_upper_only)]
    Small = Annotated[int, SettingBounds(ge=0, le=9)]

    class Table(Section):
        rows: dict[Key, list[Small]] = setting(default_factory=dict, max_length=2)

    assert Table(rows={"A": ["3"], "B": []}).rows == {"A": [3], "B": []}
    assert problems(lambda: Table(rows={"A": [], "B": [], "C": []})) == [
        (("rows",), "Dictionary should have at most 2 items")]
    assert problems(lambda: Table(rows={"a": [1], "B": [4, 10]})) == [
        (("rows", "a"), "must be upper case"),
        (("rows", "B", 1), "Input should be less than or equal to 9")]


@pytest.mark.parametrize(("tp", "given", "wanted"), [
    (int, 3.0, 3), (int, " 8 ", 8), (int, -2, -2),
    (bool, 1, True), (bool, 0, False), (bool, " Yes ", True), (bool, "OFF", False),
    (bool, "t", True), (bool, "n", False),
    (float, 2, 2.0), (float, " 1.5 ", 1.5), (float, "1e3", 1000.0),
    (str, "s", "s"), (Path, "/x", Path("/x")), (Path, Path("/y"), Path("/y")),
    (Any, b"raw", b"raw"), (int | None, None, None), (int | None, "4", 4),
    (list[int], ("1", 2), [1, 2]), (tuple[int, ...], ["1"], (1,)),
    (dict[int, bool], {"3": "no"}, {3: False}),
])
def test_a_lenient_section_converts_what_flags_and_files_give(tp: Any, given: Any,
                                                             wanted: Any) -> None:
    class One(Section):
        x: tp = None

    got = One(x=given).x
    assert got == wanted and type(got) is type(wanted)


@pytest.mark.parametrize(("tp", "given", "kind", "message"), [
    (int, 3.5, "int_type", "Input should be a valid integer"),
    (int, "8", "int_type", "Input should be a valid integer"),
    (int, 3.0, "int_type", "Input should be a valid integer"),
    (bool, 1, "bool_type", "Input should be a valid boolean"),
    (bool, "yes", "bool_type", "Input should be a valid boolean"),
    (float, "1.5", "float_type", "Input should be a valid number"),
    (float, True, "float_type", "Input should be a valid number"),
    (float, float("inf"), "finite_number", "Input should be a finite number"),
    (str, 5, "string_type", "Input should be a valid string"),
    (Path, "/x", "path_type", "Input should be a valid path"),
    (Literal[1], True, "literal_error", "Input should be 1"),
    (Literal["a", "b", "c"], "d", "literal_error", "Input should be 'a', 'b' or 'c'"),
    (list[int], {"a": 1}, "list_type", "Input should be a valid list"),
    (dict[str, int], [1], "dict_type", "Input should be a valid dictionary"),
])
def test_a_strict_section_refuses_each_type_with_its_kind(tp: Any, given: Any, kind: str,
                                                           message: str) -> None:
    class One(Section):
        strict = True
        x: tp = None

    with pytest.raises(ValidationError) as err:
        One(x=given)
    assert err.value.errors() == [{"loc": ("x",), "msg": message, "type": kind, "input": given}]


def test_a_declaration_it_cannot_check_is_a_programming_error() -> None:
    class Bytes(Section):
        x: bytes = b""

    with pytest.raises(TypeError, match="unsupported setting type"):
        Bytes(x=b"a")


def test_a_union_takes_the_first_option_that_fits_and_says_what_each_wanted() -> None:
    class Either(Section):
        strict = True
        gpus: Literal["all"] | list[int] = "all"
        pair: tuple[int, int] | None = None

    assert Either(gpus=[0, 3]).gpus == [0, 3]
    assert Either(gpus="all", pair=[1, 2]).pair == (1, 2)
    assert problems(lambda: Either(gpus="some")) == [
        (("gpus",), "Input should be 'all'; or Input should be a valid list")]
    assert problems(lambda: Either(pair=[1, 2, 3])) == [(("pair",), "Tuple should have 2 items")]
    assert problems(lambda: Either(pair=[1, "2"])) == [
        (("pair", 1), "Input should be a valid integer")]


def test_text_and_lists_have_a_least_length_and_text_a_pattern() -> None:
    class Named(Section):
        name: str = setting("ab", min_length=2, pattern=r"^[a-z]+$")
        ids: list[str] = setting(default_factory=lambda: ["x"], min_length=1)

    assert Named(name="abc").name == "abc"
    assert problems(lambda: Named(name="a", ids=[])) == [
        (("name",), "String should have at least 2 characters"),
        (("ids",), "List should have at least 1 items")]
    assert problems(lambda: Named(name="aB")) == [
        (("name",), "String should match pattern '^[a-z]+$'")]


def test_problems_in_several_items_and_keys_are_all_listed() -> None:
    class Lists(Section):
        xs: list[int] = setting(default_factory=list)
        by: dict[str, int] = setting(default_factory=dict)

    assert problems(lambda: Lists(xs=["a", 1, "b"], by={"p": "x", "q": 1, "r": None})) == [
        (("xs", 0), "Input should be a valid integer"),
        (("xs", 2), "Input should be a valid integer"),
        (("by", "p"), "Input should be a valid integer"),
        (("by", "r"), "Input should be a valid integer")]


def test_missing_parsed_checked_and_unknown_values_say_what_was_given() -> None:
    def odd(v: int) -> int:
        if not v % 2:
            raise ValueError("must be odd")
        return v

    def shout(v: Any) -> Any:
        if v == "?":
            raise ValueError("no question marks")
        return v

    class Given(Section):
        need: int
        checked: int = setting(1, check=odd)
        parsed: Annotated[str, Parse(shout)] = "s"

    with pytest.raises(ValidationError) as err:
        Given(checked=2, parsed="?", other=7)
    assert err.value.errors() == [
        {"loc": ("need",), "msg": "Field required", "type": "missing",
         "input": {"checked": 2, "parsed": "?", "other": 7}},
        {"loc": ("checked",), "msg": "must be odd", "type": "value_error", "input": 2},
        {"loc": ("parsed",), "msg": "no question marks", "type": "value_error", "input": "?"},
        {"loc": ("other",), "msg": "Extra inputs are not permitted", "type": "extra_forbidden",
         "input": 7}]
    assert Given(need=1).need == 1


def test_a_span_check_in_a_nested_section_names_its_path_and_what_was_given() -> None:
    class Pair(Section):
        low: int = 0
        high: int = 1

        def _check(self) -> None:
            if self.low > self.high:
                raise ValueError("low above high")

    class Holder(Section):
        pair: Pair = setting(default_factory=Pair)

    with pytest.raises(ValidationError) as err:
        Holder(pair={"low": 3})
    assert err.value.errors() == [{"loc": ("pair",), "msg": "low above high",
                                   "type": "value_error", "input": {"low": 3}}]
    kept = Pair(low=0)
    assert Holder(pair=kept).pair is kept  # an instance is taken as it is


def test_a_class_reads_its_declarations_base_first_and_leaves_class_variables() -> None:
    class Base(Section):
        kind: ClassVar[str] = "base"
        a: int = setting(1, description="the a")
        b: str = "b"

    class Child(Base):
        c: float = 2.0
        a: int = setting(5, ge=0)

    assert list(Base.model_fields) == ["a", "b"] and list(Child.model_fields) == ["a", "b", "c"]
    assert Child.kind == "base" and "kind" not in Child.model_fields
    assert Child().a == 5 and Base().a == 1 and Child.model_fields["a"].bounds.ge == 0
    assert Base.model_fields["a"].description == "the a"
    assert Child.model_fields["c"].description is None
    # the declaration leaves the class: a setting is read from the instance only
    assert "a" not in Base.__dict__ and "b" not in Base.__dict__
    spec = Child.model_fields["c"]
    assert spec.metadata == (SettingBounds(),) and spec.default == 2.0 and spec.check is None
    assert spec.default_factory is None and not spec.required and spec.get_default() == 2.0


def test_a_default_factory_gives_each_section_its_own_value() -> None:
    class Fresh(Section):
        xs: list[int] = setting(default_factory=list)

    one, two = Fresh(), Fresh()
    assert one.xs == [] and one.xs is not two.xs
    spec = Fresh.model_fields["xs"]
    assert spec.get_default(call_default_factory=False) is None and spec.default_factory is list
    assert Fresh.model_fields["xs"].bounds == SettingBounds()


def test_reading_a_file_and_dumping_it_back() -> None:
    made = declared()
    Inner, Strict = made.Inner, made.Strict
    same = Inner()
    assert Inner.model_validate(same) is same
    assert Inner.model_validate({"count": 4}).count == 4
    assert problems(lambda: Inner.model_validate({1: 2})) == [
        (("1",), "Extra inputs are not permitted")]
    s = Strict(index=0, items=[{"count": 4}])
    assert s.model_dump()["items"] == [Inner(count=4).model_dump()]
    assert s.model_dump(exclude_defaults=True) == {"index": 0,
                                                   "items": [Inner(count=4).model_dump()]}
    assert dict(iter(Inner(on=False)))["on"] is False
    assert repr(Inner()) == ("Inner(every=2.0, count=8, on=True, level='info', where=None, "
                             "codes=(1, 2))")


def test_a_frozen_section_can_be_copied_hashed_and_compared() -> None:
    made = declared()
    Inner, Outer = made.Inner, made.Outer
    o = Outer(name="ab", switches={"a": True})
    with pytest.raises(AttributeError, match="Outer is frozen"):
        del o.name
    assert o.model_copy().model_fields_set == {"name", "switches"}
    assert o.model_copy() == o and o.model_copy() is not o
    assert hash(o) == hash(Outer(name="ab", switches={"a": True}))
    assert hash(o) != hash(Outer(name="ab", switches={"a": False}))
    assert o != Inner() and (o == 1) is False
    assert o.__eq__(1) is NotImplemented

    class Listed(Section):
        xs: list[int] = setting(default_factory=list)

    assert hash(Listed(xs=[1, 2])) == hash(Listed(xs=[1, 2])) != hash(Listed(xs=[2, 1]))


def test_what_a_user_reads_names_the_section_and_every_unknown_setting() -> None:
    made = declared()
    Inner, Outer = made.Inner, made.Outer
    with pytest.raises(ValidationError) as err:
        Inner.model_validate("count: 4")
    assert err.value.title == "Inner"
    assert err.value.errors() == [{"loc": (), "msg": "Input should be a valid dictionary or "
                                   "instance of Inner", "type": "model_type",
                                   "input": "count: 4"}]
    with pytest.raises(AttributeError) as no_such:
        Outer().model_copy(update={"nmae": 1, "inne": 2})
    assert str(no_such.value) == "Outer has no setting inne, nmae"
    assert Inner.model_fields["count"].name == "count"
    assert [spec.name for spec in Outer.model_fields.values()] == list(Outer.model_fields)


def test_sections_in_a_mapping_are_dumped_as_mappings_and_types_tell_hashes_apart() -> None:
    Inner = declared().Inner

    class ByName(Section):
        parts: dict[str, Inner] = setting(default_factory=dict)  # type: ignore[valid-type]

    class Twin(Section):
        parts: dict[str, Inner] = setting(default_factory=dict)  # type: ignore[valid-type]

    assert ByName(parts={"a": {"count": 4}}).model_dump() == {
        "parts": {"a": Inner(count=4).model_dump()}}
    assert hash(ByName()) != hash(Twin())


def test_strictness_and_paths_reach_into_lists_and_mappings() -> None:
    class Inside(Section):
        strict = True
        xs: list[int] = setting(default_factory=list)
        by: dict[str, int] = setting(default_factory=dict)

    class Keys(Section):
        by: dict[int, bool] = setting(default_factory=dict)

    class StrictKeys(Section):
        strict = True
        by: dict[int, bool] = setting(default_factory=dict)

    assert problems(lambda: Inside(xs=["1"], by={"a": "2"})) == [
        (("xs", 0), "Input should be a valid integer"),
        (("by", "a"), "Input should be a valid integer")]
    assert Keys(by={"3": "yes"}).by == {3: True}
    assert problems(lambda: StrictKeys(by={"3": True})) == [(("by", "3"),
                                                            "Input should be a valid integer")]
    assert problems(lambda: Keys(by={"x": True})) == [(("by", "x"),
                                                      "Input should be a valid integer")]


def test_each_refusal_says_its_kind_and_what_was_given() -> None:
    made = declared()
    Inner, Outer = made.Inner, made.Outer
    with pytest.raises(ValidationError) as err:
        Outer(inner=5, name="longer")
    assert err.value.errors() == [
        {"loc": ("inner",), "msg": "Input should be a valid dictionary or instance of Inner",
         "type": "model_type", "input": 5},
        {"loc": ("name",), "msg": "String should have at most 4 characters",
         "type": "too_long", "input": "longer"}]
    with pytest.raises(ValidationError) as err:
        Inner(every="abc")
    assert err.value.errors()[0]["msg"].startswith("expected a duration")

    class Lenient(Section):
        x: float = 0.0

    assert problems(lambda: Lenient(x="abc")) == [(("x",), "Input should be a valid number")]
    required = made.Strict.model_fields["index"]
    assert required.required and required.get_default() is None


def test_a_section_constructed_unchecked_keeps_what_validation_would_refuse() -> None:
    class Named(Section):
        name: str = setting("ab", max_length=2)
        count: int = 1

    made = Named.model_construct(name="far too long")
    assert (made.name, made.count, made.model_fields_set) == ("far too long", 1, {"name"})
    with pytest.raises(AttributeError, match="no setting nmae"):
        Named.model_construct(nmae="x")


def test_a_section_not_frozen_takes_an_assignment_and_counts_it_as_given() -> None:
    class Open(Section):
        frozen = False
        level: int = setting(1, ge=0)

    made = Open()
    made.level = 5
    assert (made.level, made.model_fields_set) == (5, {"level"})
    assert made.model_dump(exclude_unset=True) == {"level": 5}
    with pytest.raises(AttributeError, match="no setting lvl"):
        made.lvl = 2
