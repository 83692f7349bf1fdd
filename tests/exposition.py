"""Reading a /metrics text in tests: the samples of one family."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Each sample of ``name`` in the exposition ``text``: its labels and value."""
    return [(dict(s.labels), s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name]


def values(text: str, name: str, **labels: str) -> list[float]:
    """The values of ``name`` whose labels include ``labels``."""
    return [value for got, value in samples(text, name) if labels.items() <= got.items()]
