"""What a PromQL expression selects and what unit its result is in, read with
a real parser (promql-parser) rather than by searching the text.

The units follow Prometheus' naming conventions (a metric's base unit is the
suffix of its name, before ``_total``: ``_bytes``, ``_seconds``, ``_watts``,
``_celsius``, ``_hertz``, ``_ratio``; an ``_info`` series is 1; anything else
counts things) and the arithmetic of the expression: ``rate()`` divides by
seconds, ``a / b`` divides the units, a comparison keeps the left side's, a
count counts. Adding, ``or``-ing or comparing two different units is an
error, which is most of what a wrong query looks like."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import promql_parser as pp

from gpu_exporter.poll.catalog import BY_NAME

# A unit as base units and their powers: bytes per second is {bytes: 1, s: -1};
# a share of 1 (a ratio) is {}.
Unit = frozenset[tuple[str, int]]

RATIO: Unit = frozenset()
COUNT: Unit = frozenset({("count", 1)})
SECONDS: Unit = frozenset({("s", 1)})

_SUFFIXES = (("_bytes", "bytes"), ("_seconds", "s"), ("_watts", "W"), ("_joules", "J"),
             ("_celsius", "C"), ("_hertz", "Hz"))


def unit(**powers: int) -> Unit:
    return frozenset((k, v) for k, v in powers.items() if v)


def _combine(a: Unit, b: Unit, sign: int) -> Unit:
    total: Counter[str] = Counter(dict(a))
    for name, power in b:
        total[name] += sign * power
    return frozenset((k, v) for k, v in total.items() if v)


class UnitError(ValueError):
    """The expression combines units that do not go together."""


@dataclass(frozen=True)
class Value:
    """The unit of a (sub)expression; ``number`` for a literal or a number of
    series (count()): it takes the other side's unit, and shown alone it is a
    count; ``info`` for an _info series (its value is 1)."""

    unit: Unit
    number: bool = False
    info: bool = False


NUMBER = Value(RATIO, number=True)


def metric_unit(name: str) -> Value:
    """A metric's unit from its name, by Prometheus' conventions."""
    base = name.removesuffix("_total")
    if base.endswith("_info"):
        return Value(RATIO, info=True)
    if base.endswith("_ratio"):
        return Value(RATIO)
    for suffix, symbol in _SUFFIXES:
        if base.endswith(suffix):
            return Value(unit(**{symbol: 1}))
    return Value(COUNT)


# Functions whose result is in their (first vector) argument's unit.
_SAME = {"abs", "ceil", "floor", "round", "clamp", "clamp_min", "clamp_max", "sort",
         "sort_desc", "label_replace", "label_join", "last_over_time", "max_over_time",
         "min_over_time", "avg_over_time", "sum_over_time", "quantile_over_time", "increase",
         "delta", "idelta", "predict_linear", "scalar", "absent_over_time"}
_PER_SECOND = {"rate", "irate", "deriv"}


class Units:
    """Units of expressions over the exporter's metrics and the recording
    rules (``records``: record name -> expression, read recursively)."""

    def __init__(self, records: Mapping[str, str] | None = None) -> None:
        self.records = dict(records or {})
        self._known: dict[str, Value] = {}

    def of(self, expr: str) -> Unit:
        value = self._eval(pp.parse(expr))
        return COUNT if value.info or value.number else value.unit

    def _name(self, name: str) -> Value:
        if name in self.records:
            if name not in self._known:
                self._known[name] = self._eval(pp.parse(self.records[name]))
            return self._known[name]
        return metric_unit(name)

    def _eval(self, node: object) -> Value:
        if isinstance(node, pp.NumberLiteral):
            return NUMBER
        if isinstance(node, pp.StringLiteral):
            return NUMBER
        if isinstance(node, pp.VectorSelector):
            return self._name(selector_name(node))
        if isinstance(node, pp.MatrixSelector):
            return self._eval(node.vector_selector)
        if isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
            return self._eval(node.expr)
        if isinstance(node, pp.Call):
            return self._call(node)
        if isinstance(node, pp.AggregateExpr):
            op = str(node.op)
            if op in ("count", "count_values", "group"):
                return NUMBER  # a number of series: a pure number, like a literal
            inner = self._eval(node.expr)
            if inner.info and op == "sum":
                return NUMBER  # a sum of ones counts them
            return inner
        if isinstance(node, pp.BinaryExpr):
            return self._binary(node)
        raise UnitError(f"no unit for {type(node).__name__}")

    def _call(self, node: pp.Call) -> Value:
        name = node.func.name
        args = [self._eval(a) for a in node.args]
        if name in _PER_SECOND:
            return Value(_combine(args[0].unit, SECONDS, -1))
        if name in ("time", "timestamp"):
            return Value(SECONDS)
        if name == "vector":
            return NUMBER
        if name in ("count_over_time", "absent", "changes", "resets"):
            return NUMBER
        if name == "quantile_over_time":
            return args[1]
        if name in _SAME:
            return args[0]
        raise UnitError(f"no unit rule for {name}()")

    def _binary(self, node: pp.BinaryExpr) -> Value:
        op = str(node.op)
        lhs = self._eval(node.lhs)
        if op in ("and", "unless"):
            return lhs  # the right side only filters: its values are never shown
        rhs = self._eval(node.rhs)
        returns_bool = node.modifier is not None and node.modifier.return_bool
        if op == "or":
            return _same(lhs, rhs, node)
        if op in ("==", "!=", "<", ">", "<=", ">="):
            _same(lhs, rhs, node)
            return Value(COUNT) if returns_bool else (rhs if lhs.number else lhs)
        if op in ("+", "-"):
            return _same(lhs, rhs, node)
        if op == "*":
            if _zero(node.lhs) or _zero(node.rhs):
                return NUMBER  # "x * 0": zeros carrying x's labels, in any unit
            for steps, length in ((node.lhs, node.rhs), (node.rhs, node.lhs)):
                if _step_sum(steps, length):
                    # sum_over_time(rate[range:S]) * S: a rate summed over steps of S
                    # seconds times S is its integral (watts to joules).
                    inner = lhs if steps is node.lhs else rhs
                    return Value(_combine(inner.unit, SECONDS, 1))
            if lhs.number or lhs.info:
                return rhs
            if rhs.number or rhs.info:
                return lhs
            return Value(_combine(lhs.unit, rhs.unit, 1))
        if op == "/":
            if rhs.number or rhs.info:
                return lhs
            return Value(_combine(lhs.unit, rhs.unit, -1))
        raise UnitError(f"no unit rule for {op}")


def _step_sum(node: object, length: object) -> bool:
    """``node`` sums a subquery over steps of ``length`` seconds."""
    if not (isinstance(node, pp.Call) and node.func.name == "sum_over_time"
            and isinstance(length, pp.NumberLiteral)):
        return False
    (arg,) = node.args
    return isinstance(arg, pp.SubqueryExpr) and arg.step is not None \
        and arg.step.total_seconds() == length.val


def _zero(node: object) -> bool:
    return isinstance(node, pp.NumberLiteral) and node.val == 0


def _same(a: Value, b: Value, node: object) -> Value:
    """Two sides that must be in one unit (a literal fits any)."""
    if a.number:
        return b
    if b.number:
        return a
    if a.info or b.info:
        other = b if a.info else a
        if other.info or other.unit == COUNT:
            return other
    if a.unit != b.unit:
        raise UnitError(f"{describe(a.unit)} and {describe(b.unit)} combined in {node}")
    return a


def describe(u: Unit) -> str:
    if not u:
        return "a ratio"
    return " ".join(f"{k}^{v}" if v != 1 else k for k, v in sorted(u))


# --- selectors -------------------------------------------------------------------------------

Matcher = tuple[str, str, str]  # label, operator, value


def selector_name(node: pp.VectorSelector) -> str:
    if node.name:
        return str(node.name)
    for m in node.matchers.matchers:
        if m.name == "__name__":
            return str(m.value)
    return ""


_OPS = ((pp.MatchOp.Equal, "="), (pp.MatchOp.NotEqual, "!="), (pp.MatchOp.Re, "=~"),
        (pp.MatchOp.NotRe, "!~"))


def _matcher(m: pp.Matcher) -> Matcher:
    (op,) = [text for kind, text in _OPS if m.op == kind]
    return str(m.name), op, str(m.value)


def _nodes(expr: str) -> Iterator[object]:
    stack: list[object] = [pp.parse(expr)]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, pp.MatrixSelector):
            stack.append(node.vector_selector)
        elif isinstance(node, pp.BinaryExpr):
            stack += [node.lhs, node.rhs]
        elif isinstance(node, pp.AggregateExpr):
            stack.append(node.expr)
            if node.param is not None:
                stack.append(node.param)
        elif isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
            stack.append(node.expr)
        elif isinstance(node, pp.Call):
            stack += list(node.args)


def clauses(expr: str) -> list[tuple[str, list[str]]]:
    """Every label list of ``expr``: (kind, labels) for by, without, on,
    ignoring and group_left/group_right."""
    out = []
    for node in _nodes(expr):
        if isinstance(node, pp.AggregateExpr) and node.modifier is not None:
            out.append((str(node.modifier.type).rsplit(".", 1)[-1].lower(),
                        [str(x) for x in node.modifier.labels]))
        elif isinstance(node, pp.BinaryExpr) and node.modifier is not None:
            m = node.modifier
            if m.matching is not None:
                out.append((str(m.matching.type).rsplit(".", 1)[-1].lower(),
                            [str(x) for x in m.matching.labels]))
            if m.group_labels:
                out.append(("group", [str(x) for x in m.group_labels]))
    return out


# Series of other exporters the rules join with, and their labels
# (kube-state-metrics' docs/metrics/workload/pod-metrics.md).
FOREIGN = {"kube_pod_info": {"namespace", "pod", "uid", "host_ip", "pod_ip", "node",
                             "created_by_kind", "created_by_name", "priority_class",
                             "host_network"},
           # kube-state-metrics' docs/metrics/workload/pod-metrics.md: the
           # pod's owner reference, one series per owner.
           "kube_pod_owner": {"namespace", "pod", "uid", "owner_kind", "owner_name",
                              "owner_is_controller"}}


def series_labels(expr: str, records: set[str],
                  recorded: Mapping[str, set[str] | None] | None = None) -> set[str] | None:
    """The labels a result of ``expr`` can carry: its series' (the catalog's,
    and every target's job and instance), those label_replace/label_join write,
    those its clauses name; None when it reads a recording rule whose labels
    are not known (``recorded``: record -> its labels)."""
    out = {"job", "instance", "__name__"} | made_labels(expr)
    for name, _ in selectors(expr):
        if recorded is not None and name in recorded:
            out |= recorded[name]
            continue
        if name in records:
            return None
        if name in BY_NAME:
            out |= set(BY_NAME[name].labels)
        out |= FOREIGN.get(name, set())
    return out


def made_labels(expr: str) -> set[str]:
    """The labels label_replace() and label_join() write in ``expr``."""
    return {str(node.args[1].val) for node in _nodes(expr)
            if isinstance(node, pp.Call) and node.func.name in ("label_replace", "label_join")
            and isinstance(node.args[1], pp.StringLiteral)}


def selectors(expr: str) -> Iterator[tuple[str, list[frozenset[Matcher]]]]:
    """Every vector selector of ``expr``: its metric name and its matcher
    sets (one per ``or`` alternative inside the braces)."""
    for node in _nodes(expr):
        if isinstance(node, pp.VectorSelector):
            # ``x{a="1" or b="2"}``: each alternative in or_matchers, none in matchers.
            alternatives = node.matchers.or_matchers or [node.matchers.matchers]
            yield selector_name(node), [frozenset(_matcher(m) for m in alt
                                                  if m.name != "__name__")
                                        for alt in alternatives]


def matchers_of(selector: str) -> frozenset[Matcher]:
    """The matchers a selector text (``job="a", env!="b"``) stands for."""
    ((_, (found,)),) = selectors(f"x{{{selector}}}")
    return found


def missing_matchers(expr: str, wanted: frozenset[Matcher],
                     applies: Callable[[str], bool]) -> list[str]:
    """Selectors of the metrics ``applies`` names that lack one of ``wanted``."""
    out = []
    for name, alternatives in selectors(expr):
        if not applies(name):
            continue
        for found in alternatives:
            lacking = wanted - found
            if lacking:
                text = ", ".join(f"{a}{o}{v!r}" for a, o, v in sorted(lacking))
                out.append(f"{name}: lacks {text}")
    return out


def record_labels(rules: list[tuple[str, str, dict[str, str]]]) -> dict[str, set[str]]:
    """The labels each recording rule's series can carry: those of its
    expressions (reading other records, settled until nothing changes) and its
    own labels. A record whose labels cannot be told is left out."""
    names = {record for record, _, _ in rules}
    out: dict[str, set[str]] = {}
    for _ in range(len(rules) + 1):
        changed = False
        for record, expr, labels in rules:
            known = series_labels(expr, names, out)
            if known is None:
                continue
            merged = out.get(record, set()) | known | set(labels)
            if merged != out.get(record):
                out[record], changed = merged, True
        if not changed:
            break
    return out


def matcher_labels(expr: str) -> list[tuple[str, set[str]]]:
    """Each selector's metric name and the label names its matchers test."""
    return [(name, {a for alt in alternatives for a, _, _ in alt})
            for name, alternatives in selectors(expr)]


def one_to_one_sides(expr: str) -> list[tuple[list[str], str, set[str]]]:
    """For each one-to-one on() match in ``expr`` whose side is one selector
    (maybe compared with a number), the on() labels, the side's metric and the
    labels its equality matchers fix."""
    out = []
    for node in _nodes(expr):
        if not (isinstance(node, pp.BinaryExpr) and node.modifier is not None
                and node.modifier.matching is not None
                and str(node.modifier.matching.type).endswith("Include")
                and not node.modifier.group_labels
                and str(node.modifier.card).endswith("OneToOne")):
            continue
        on = [str(x) for x in node.modifier.matching.labels]
        for side in (node.lhs, node.rhs):
            while isinstance(side, pp.ParenExpr) or (
                    isinstance(side, pp.BinaryExpr) and isinstance(side.rhs, pp.NumberLiteral)):
                side = side.expr if isinstance(side, pp.ParenExpr) else side.lhs
            if isinstance(side, pp.VectorSelector):
                fixed = {str(m.name) for m in side.matchers.matchers
                         if m.op == pp.MatchOp.Equal}
                out.append((on, selector_name(side), fixed))
    return out
