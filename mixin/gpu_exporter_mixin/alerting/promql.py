"""PromQL read by a real parser (promql-parser, the Rust parser Prometheus'
grammar was ported to): the metric names a query reads."""

from __future__ import annotations

import promql_parser as pp


def parse(expr: str) -> pp.Expr:
    """The parsed expression; ValueError when it is not valid PromQL."""
    parsed: pp.Expr = pp.parse(expr)
    return parsed


def _walk(node: object, out: set[str]) -> None:
    if isinstance(node, pp.VectorSelector):
        name = node.name
        if name is None:
            for m in node.matchers.matchers:
                if m.name == "__name__":
                    name = m.value
        if name is not None:
            out.add(name)
    elif isinstance(node, pp.MatrixSelector):
        _walk(node.vector_selector, out)
    elif isinstance(node, pp.BinaryExpr):
        _walk(node.lhs, out)
        _walk(node.rhs, out)
    elif isinstance(node, pp.AggregateExpr):
        _walk(node.expr, out)
        if node.param is not None:
            _walk(node.param, out)
    elif isinstance(node, pp.UnaryExpr | pp.ParenExpr | pp.SubqueryExpr):
        _walk(node.expr, out)
    elif isinstance(node, pp.Call):
        for arg in node.args:
            _walk(arg, out)


def metric_names(expr: str) -> set[str]:
    """Every metric name the expression selects."""
    out: set[str] = set()
    _walk(parse(expr), out)
    return out
