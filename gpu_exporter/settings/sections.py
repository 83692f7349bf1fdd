"""Validated, frozen groups of settings: every file the exporter reads is
declared with these (the exporter's settings, the diagnosis's thresholds, the
baseline file, the web config file, the fault memory's state file, the
simulator's scenarios, profiles, recordings and tenants).

A section is a class whose annotated attributes are its settings, each with a
default from ``setting()`` (or none: then it must be given)::

    class PollConfig(Section):
        interval: Annotated[float, Parse(parse_duration)] = setting(2.0, ge=0.05)

Building one from a mapping (``PollConfig(**values)``, ``model_validate``)
converts each value to its declared type as flags, environment variables and
YAML give it (``"8"`` for an int, ``"off"`` for a bool; ``strict`` sections
take JSON's own types only), checks its bounds and refuses unknown keys;
every problem found is in the one ``ValidationError`` it raises, with the
path of the value and a sentence.

Why not pydantic: the daemon used it for exactly this, and it was a third of
the memory the daemon holds above the interpreter (the library, its compiled
core and the settings' schemas: about 11.7 MiB of a 52.6 MiB daemon, measured
in BENCHMARKS.md); what the settings need of it is this module. One way to
validate a file: README's dependency table has the measurement, and
tests/test_one_validator.py holds the package to it.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import types
import typing
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

# What a flag or an environment variable may say for a bool (any case).
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})

Loc = tuple[str | int, ...]


class ValidationError(ValueError):
    """Every problem found building a section: ``errors()`` lists them, each a
    mapping with ``loc`` (the path of the value), ``msg``, ``type`` and
    ``input`` (the value given)."""

    def __init__(self, title: str, errors: list[dict[str, Any]]) -> None:
        self.title = title
        self._errors = errors
        first = errors[0] if errors else {"loc": (), "msg": "invalid"}
        where = ".".join(str(p) for p in first["loc"])
        super().__init__(f"{len(errors)} problem(s) in {title}: "
                         f"{where + ': ' if where else ''}{first['msg']}")

    def errors(self) -> list[dict[str, Any]]:
        return list(self._errors)


@dataclass(frozen=True)
class Parse:
    """Turns the value given into the declared type before it is checked
    (``Parse(parse_duration)``: ``"1m30s"`` is 90.0). Raises ValueError with
    the sentence an operator reads."""

    func: Callable[[Any], Any]


@dataclass(frozen=True)
class SettingBounds:
    """A setting's limits, in the section's metadata as pydantic kept them
    (``ge``, ``gt``, ``le``, ``lt`` for numbers; ``max_length`` for text and
    lists)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    max_length: int | None = None
    min_length: int | None = None
    pattern: str | None = None  # a text setting matches it (re.search, as pydantic)


_MISSING: Any = object()


@dataclass(frozen=True)
class Setting:
    """What ``setting()`` declares; completed into a FieldSpec by the section."""

    default: Any = _MISSING
    default_factory: Callable[[], Any] | None = None
    description: str | None = None
    bounds: SettingBounds = SettingBounds()
    check: Callable[[Any], Any] | None = None


def setting(default: Any = _MISSING, *, default_factory: Callable[[], Any] | None = None,
            description: str | None = None, ge: float | None = None, gt: float | None = None,
            le: float | None = None, lt: float | None = None, max_length: int | None = None,
            min_length: int | None = None, pattern: str | None = None,
            check: Callable[[Any], Any] | None = None) -> Any:
    """A setting's default, description and limits; ``check`` runs on the
    converted value and returns it (or raises ValueError)."""
    return Setting(default, default_factory, description,
                   SettingBounds(ge, gt, le, lt, max_length, min_length, pattern), check)


@dataclass(frozen=True)
class FieldSpec:
    """One setting of a section, as the code that derives flags, --help, the
    environment's names and the docs reads it."""

    name: str
    annotation: Any  # the declared type without its Annotated metadata
    metadata: tuple[Any, ...]  # Annotated's metadata, then the SettingBounds
    description: str | None
    default: Any
    default_factory: Callable[[], Any] | None
    check: Callable[[Any], Any] | None
    alias: None = None  # kept for code that reads pydantic's and these alike

    @property
    def bounds(self) -> SettingBounds:
        return next((m for m in self.metadata if isinstance(m, SettingBounds)), SettingBounds())

    @property
    def required(self) -> bool:
        return self.default is _MISSING and self.default_factory is None

    def get_default(self, call_default_factory: bool = True) -> Any:
        if self.default_factory is not None:
            return self.default_factory() if call_default_factory else None
        return None if self.default is _MISSING else self.default


class _Problem(Exception):
    """One value refused: raised inside conversion, collected by the section."""

    def __init__(self, loc: Loc, msg: str, kind: str, given: Any) -> None:
        super().__init__(msg)
        self.items = [{"loc": loc, "msg": msg, "type": kind, "input": given}]


class _Problems(Exception):
    def __init__(self, items: list[dict[str, Any]]) -> None:
        super().__init__(items[0]["msg"])
        self.items = items


def _bounded(value: Any, b: SettingBounds, loc: Loc) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        for limit, ok, words in ((b.ge, b.ge is None or value >= b.ge, "greater than or equal to"),
                                 (b.gt, b.gt is None or value > b.gt, "greater than"),
                                 (b.le, b.le is None or value <= b.le, "less than or equal to"),
                                 (b.lt, b.lt is None or value < b.lt, "less than")):
            if not ok:
                raise _Problem(loc, f"Input should be {words} {limit}", "bound", value)
    if b.max_length is not None and isinstance(value, str | tuple | list | dict) \
            and len(value) > b.max_length:
        what = "String" if isinstance(value, str) else \
            "Dictionary" if isinstance(value, dict) else "List"
        unit = "characters" if isinstance(value, str) else "items"
        raise _Problem(loc, f"{what} should have at most {b.max_length} {unit}",
                       "too_long", value)
    if b.min_length is not None and isinstance(value, str | tuple | list | dict) \
            and len(value) < b.min_length:
        what = "String" if isinstance(value, str) else \
            "Dictionary" if isinstance(value, dict) else "List"
        unit = "characters" if isinstance(value, str) else "items"
        raise _Problem(loc, f"{what} should have at least {b.min_length} {unit}",
                       "too_short", value)
    if b.pattern is not None and isinstance(value, str) and re.search(b.pattern, value) is None:
        raise _Problem(loc, f"String should match pattern '{b.pattern}'", "string_pattern_mismatch",
                       value)
    return value


def _parsed(meta: tuple[Any, ...], value: Any, loc: Loc) -> Any:
    """``value`` through the ``Parse`` steps among ``meta``, in order."""
    for parse in (m for m in meta if isinstance(m, Parse)):
        try:
            value = parse.func(value)
        except ValueError as exc:
            raise _Problem(loc, str(exc), "value_error", value) from None
    return value


# Types a value of which is taken as it is (see _convert's first line).
_PLAIN = (int, str, bool)


@functools.cache
def _shape(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    """``tp``'s origin and arguments, looked up once per type: a recording
    converts hundreds of thousands of values of a few dozen types."""
    return typing.get_origin(tp), typing.get_args(tp)


def _convert(tp: Any, value: Any, loc: Loc, strict: bool) -> Any:
    """``value`` as type ``tp`` (a plain, optional, literal, container or section
    type; or one of these ``Annotated`` with ``Parse`` and ``SettingBounds``, as
    the keys and items of a container are)."""
    if type(value) is tp and (tp is int or tp is str or tp is bool):
        return value  # already what it should be: most values of most files
    origin, args = _shape(tp)
    if origin is typing.Annotated:
        base, *meta = args
        value = _convert(base, _parsed(tuple(meta), value, loc), loc, strict)
        for bounds in (m for m in meta if isinstance(m, SettingBounds)):
            value = _bounded(value, bounds, loc)
        return value
    if origin in (types.UnionType, typing.Union):
        options = args
        if value is None and type(None) in options:
            return None
        rest = [o for o in options if o is not type(None)]
        if len(rest) == 1:
            return _convert(rest[0], value, loc, strict)
        # The first option that takes the value, left to right; refused by
        # all, the value is refused with what each option wanted.
        wanted = []
        for option in rest:
            try:
                return _convert(option, value, loc, strict)
            except (_Problem, _Problems) as exc:
                wanted.append(exc.items[0]["msg"])
        raise _Problem(loc, "; or ".join(wanted), "union", value)
    if origin is Literal:
        choices = args
        if value in choices and not isinstance(value, bool):
            return value
        shown = [repr(c) for c in choices]
        raise _Problem(loc, "Input should be " + (", ".join(shown[:-1]) + " or " + shown[-1]
                                                  if len(shown) > 1 else shown[0]),
                       "literal_error", value)
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            raise _Problem(loc, f"Input should be a valid {origin.__name__}",
                           f"{origin.__name__}_type", value)
        fixed = origin is tuple and Ellipsis not in args
        if fixed and len(value) != len(args):
            raise _Problem(loc, f"Tuple should have {len(args)} items", "tuple_length", value)
        items, problems = [], []
        for i, item in enumerate(value):
            try:
                items.append(_convert(args[i] if fixed else args[0], item, (*loc, i), strict))
            except (_Problem, _Problems) as exc:
                problems += exc.items
        if problems:
            raise _Problems(problems)
        return tuple(items) if origin is tuple else items
    if origin is dict:
        key_tp, value_tp = args
        if not isinstance(value, Mapping):
            raise _Problem(loc, "Input should be a valid dictionary", "dict_type", value)
        if key_tp in _PLAIN and value_tp in _PLAIN and all(
                type(k) is key_tp and type(v) is value_tp for k, v in value.items()):
            return dict(value)  # every key and value already what it should be
        out, problems = {}, []
        for k, v in value.items():
            try:
                out[_convert(key_tp, k, (*loc, str(k)), strict)] = \
                    _convert(value_tp, v, (*loc, str(k)), strict)
            except (_Problem, _Problems) as exc:
                problems += exc.items
        if problems:
            raise _Problems(problems)
        return out
    if isinstance(tp, type) and issubclass(tp, Section):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise _Problem(loc, f"Input should be a valid dictionary or instance of "
                           f"{tp.__name__}", "model_type", value)
        return tp._build(value, loc)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if not strict:
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE
        raise _Problem(loc, "Input should be a valid boolean", "bool_type", value)
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if not strict:
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, str):
                try:
                    return int(value.strip())
                except ValueError:
                    pass
        raise _Problem(loc, "Input should be a valid integer", "int_type", value)
    if tp is float:
        number: float | None = None
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str) and not strict:
            try:
                number = float(value.strip())
            except ValueError:
                number = None
        if number is None:
            raise _Problem(loc, "Input should be a valid number", "float_type", value)
        if not math.isfinite(number):
            raise _Problem(loc, "Input should be a finite number", "finite_number", value)
        return number
    if tp is str:
        if isinstance(value, str):
            return value
        raise _Problem(loc, "Input should be a valid string", "string_type", value)
    if tp is Path:
        if isinstance(value, Path):
            return value
        if isinstance(value, str) and not strict:
            return Path(value)
        raise _Problem(loc, "Input should be a valid path", "path_type", value)
    if tp is Any:
        return value
    raise TypeError(f"unsupported setting type {tp!r}")


class Section:
    """A frozen group of settings (see the module's docstring)."""

    # The settings given when it was built, kept beside the values (not among them).
    __slots__ = ("__dict__", "__weakref__", "_given")
    # Take JSON's own types only (no "8" for an int): for files a program wrote.
    strict: ClassVar[bool] = False
    # Refuse assignment after it is built. The simulator's scenarios are not
    # frozen: a test changes a loaded scenario's condition (unchecked, as code
    # builds it) rather than write another file.
    frozen: ClassVar[bool] = True
    # Every setting, in declaration order (a subclass's after its base's).
    model_fields: ClassVar[dict[str, FieldSpec]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        hints = typing.get_type_hints(cls, include_extras=True)
        specs: dict[str, FieldSpec] = {}
        for base in reversed(cls.__mro__[1:]):
            specs.update(getattr(base, "model_fields", {}))
        for name in inspect.get_annotations(cls):
            hint = hints[name]
            if typing.get_origin(hint) is ClassVar:
                continue
            declared = cls.__dict__.get(name, _MISSING)
            s = declared if isinstance(declared, Setting) else Setting(default=declared)
            if typing.get_origin(hint) is typing.Annotated:
                annotation, *meta = typing.get_args(hint)
            else:
                annotation, meta = hint, []
            specs[name] = FieldSpec(name, annotation, (*meta, s.bounds), s.description,
                                    s.default, s.default_factory, s.check)
            if name in cls.__dict__:
                delattr(cls, name)  # the instance's value, not the declaration, is read
        cls.model_fields = specs

    def __init__(self, **values: Any) -> None:
        try:
            self._fill(values, ())
        except _Problems as exc:
            raise ValidationError(type(self).__name__, exc.items) from None

    @classmethod
    def _build(cls, values: Mapping[Any, Any], loc: Loc) -> Self:
        obj = cls.__new__(cls)
        obj._fill(values, loc)
        return obj

    def _fill(self, values: Mapping[Any, Any], loc: Loc) -> None:
        cls = type(self)
        problems: list[dict[str, Any]] = []
        state: dict[str, Any] = {}
        for name, spec in cls.model_fields.items():
            where = (*loc, name)
            if name not in values:
                if spec.required:
                    problems.append({"loc": where, "msg": "Field required", "type": "missing",
                                     "input": dict(values)})
                else:
                    state[name] = spec.get_default()
                continue
            value = values[name]
            try:
                try:
                    value = _parsed(spec.metadata, value, where)
                except _Problem as exc:
                    exc.items[0]["input"] = values[name]
                    raise
                value = _convert(spec.annotation, value, where, cls.strict)
                for bounds in (m for m in spec.metadata if isinstance(m, SettingBounds)):
                    value = _bounded(value, bounds, where)
                if spec.check is not None:
                    try:
                        value = spec.check(value)
                    except ValueError as exc:
                        raise _Problem(where, str(exc), "value_error", values[name]) from None
            except (_Problem, _Problems) as exc:
                problems += exc.items
                continue
            state[name] = value
        problems += [{"loc": (*loc, str(key)), "msg": "Extra inputs are not permitted",
                      "type": "extra_forbidden", "input": values[key]}
                     for key in values if key not in cls.model_fields]
        if not problems:
            object.__setattr__(self, "__dict__", state)
            object.__setattr__(self, "_given", frozenset(k for k in values
                                                         if k in cls.model_fields))
            try:
                self._check()
            except ValueError as exc:
                problems.append({"loc": loc, "msg": str(exc), "type": "value_error",
                                 "input": dict(values)})
        if problems:
            raise _Problems(problems)

    def _check(self) -> None:
        """Checks that span settings (raise ValueError); none by default."""

    # --- reading ---------------------------------------------------------------------------
    @classmethod
    def model_validate(cls, data: Any) -> Self:
        """A section from a mapping (a file's data); anything else is refused."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise ValidationError(cls.__name__, [{
                "loc": (), "msg": f"Input should be a valid dictionary or instance of "
                f"{cls.__name__}", "type": "model_type", "input": data}])
        return cls(**{str(k): v for k, v in data.items()})

    @classmethod
    def model_construct(cls, **values: Any) -> Self:
        """A section from ``values`` without a check (a test's input that
        validation would refuse, as a hostile peer sends it); a setting not
        given takes its default."""
        unknown = values.keys() - cls.model_fields.keys()
        if unknown:
            raise AttributeError(f"{cls.__name__} has no setting {', '.join(sorted(unknown))}")
        obj = cls.__new__(cls)
        state = {name: values[name] if name in values else spec.get_default()
                 for name, spec in cls.model_fields.items()}
        object.__setattr__(obj, "__dict__", state)
        object.__setattr__(obj, "_given", frozenset(values))
        return obj

    @property
    def model_fields_set(self) -> frozenset[str]:
        """The settings given when it was built (the others are defaults)."""
        given: frozenset[str] = object.__getattribute__(self, "_given")
        return given

    def model_dump(self, exclude_defaults: bool = False, exclude_none: bool = False,
                   exclude_unset: bool = False, exclude: Collection[str] = (),
                   mode: Literal["python", "json"] = "python") -> dict[str, Any]:
        """The settings as plain values, sections as mappings; with
        ``exclude_defaults`` only those that differ from their default (what a
        config file would have to say to build this), with ``exclude_unset``
        only those given when it was built, with ``exclude_none`` none that is
        None, never those in ``exclude``; ``mode="json"``: lists for tuples,
        text for paths."""
        out: dict[str, Any] = {}
        given = self.model_fields_set
        for name, spec in type(self).model_fields.items():
            value = getattr(self, name)
            if name in exclude or (exclude_unset and name not in given) \
                    or (exclude_none and value is None):
                continue
            if exclude_defaults and not spec.required and value == spec.get_default():
                continue
            out[name] = value.model_dump(exclude_defaults, exclude_none, exclude_unset,
                                         mode=mode) \
                if isinstance(value, Section) else _dumped(value, mode)
        return out

    def model_copy(self, update: Mapping[str, Any] | None = None) -> Self:
        """A copy with ``update``'s values over it (not checked: code builds
        them, as a reload's or a test's variant of checked settings)."""
        obj = type(self).__new__(type(self))
        state = dict(self.__dict__)
        unknown = set(update or ()) - type(self).model_fields.keys()
        if unknown:
            raise AttributeError(f"{type(self).__name__} has no setting "
                                 f"{', '.join(sorted(unknown))}")
        state.update(update or {})
        object.__setattr__(obj, "__dict__", state)
        object.__setattr__(obj, "_given", self.model_fields_set | set(update or ()))
        return obj

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return ((name, getattr(self, name)) for name in type(self).model_fields)

    # --- frozen ----------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if type(self).frozen or name not in type(self).model_fields:
            raise AttributeError(f"{type(self).__name__} is frozen: build another with "
                                 "model_copy(update=...)" if type(self).frozen else
                                 f"{type(self).__name__} has no setting {name}")
        self.__dict__[name] = value
        object.__setattr__(self, "_given", self.model_fields_set | {name})

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((type(self), *(_hashable(v) for _, v in self)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self)})"

    def __getstate__(self) -> dict[str, Any]:
        return {"state": self.__dict__, "given": self.model_fields_set}

    def __setstate__(self, saved: dict[str, Any]) -> None:
        object.__setattr__(self, "__dict__", dict(saved["state"]))
        object.__setattr__(self, "_given", saved["given"])


class StrictSection(Section):
    """A section of a file a program wrote (a recording, the fault memory's
    state): JSON's own types only, so a string where a number belongs is
    refused, not converted (and a number is finite, as in every section)."""

    strict = True


def _dumped(value: Any, mode: Literal["python", "json"] = "python") -> Any:
    if isinstance(value, Section):
        return value.model_dump(mode=mode)
    if isinstance(value, list) or (mode == "json" and isinstance(value, tuple)):
        return [_dumped(v, mode) for v in value]
    if isinstance(value, tuple):
        return tuple(_dumped(v, mode) for v in value)
    if isinstance(value, dict):
        return {k: _dumped(v, mode) for k, v in value.items()}
    if mode == "json" and isinstance(value, Path):
        return str(value)
    return value


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted(value.items()))
    if isinstance(value, list):
        return tuple(value)
    return value


__all__ = ["FieldSpec", "Parse", "Section", "SettingBounds", "StrictSection", "ValidationError",
           "setting"]
