"""The HTTP endpoints: metrics with content negotiation and gzip, the landing
page, health and readiness, and polite answers to everything else."""

from __future__ import annotations

import gzip
import http.client
from collections.abc import Iterator

import pytest

from tests.simnode import SimRun


@pytest.fixture
def run() -> Iterator[SimRun]:
    with SimRun("gpu-lost") as r:
        r.exporter.bind()
        assert r.exporter.server is not None
        r.exporter.server.start()  # serving, not polling: the test polls by hand
        yield r


def get(run: SimRun, path: str, method: str = "GET",
        headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", run.exporter.port, timeout=5)
    conn.request(method, path, headers=headers or {})
    return conn.getresponse()


def test_not_ready_and_no_metrics_before_the_first_poll(run: SimRun) -> None:
    assert get(run, "/-/ready").status == 503
    assert get(run, "/-/healthy").status == 200
    body = get(run, "/metrics").read().decode()
    assert "gpu_info" not in body


def test_ready_after_first_poll(run: SimRun) -> None:
    run.poll()
    assert get(run, "/-/ready").status == 200


def test_metrics_plain_openmetrics_and_gzip(run: SimRun) -> None:
    run.poll(10)
    plain = get(run, "/metrics")
    assert plain.status == 200
    assert plain.getheader("Content-Type", "").startswith("text/plain; version=0.0.4")
    text = plain.read().decode()
    assert 'gpu_up{gpu="5"' in text

    om = get(run, "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert om.getheader("Content-Type", "").startswith("application/openmetrics-text")
    assert om.read().decode().rstrip().endswith("# EOF")

    gz = get(run, "/metrics", headers={"Accept-Encoding": "gzip"})
    assert gz.getheader("Content-Encoding") == "gzip"
    assert 'gpu_up{gpu="5"' in gzip.decompress(gz.read()).decode()


def test_landing_page_links_and_gpu_states(run: SimRun) -> None:
    run.poll(10)
    resp = get(run, "/")
    assert resp.status == 200
    page = resp.read().decode()
    for link in ("/metrics", "/-/healthy", "/-/ready"):
        assert f'href="{link}"' in page
    assert page.count("<tr><td>") == 8
    assert "lost" in page


def test_unknown_path_and_method(run: SimRun) -> None:
    assert get(run, "/nope").status == 404
    assert get(run, "/metrics", method="POST").status == 405
    assert get(run, "/metrics", method="HEAD").status == 200


def test_health_turns_bad_when_polls_stop(run: SimRun) -> None:
    from gpu_exporter.web.server import staleness_check

    now = [1000.0]
    check = staleness_check(lambda: 900.0, 1.0, started=0.0, clock=lambda: now[0])
    ok, why = check()
    assert not ok and "last poll 100s ago" in why
    fresh = staleness_check(lambda: 995.0, 1.0, started=0.0, clock=lambda: now[0])
    assert fresh()[0]


@pytest.mark.parametrize("scenario", ["mixed", "mig-h100", "xid-79"])
@pytest.mark.parametrize("openmetrics", [False, True])
def test_fast_rendering_matches_prometheus_client(scenario: str, openmetrics: bool) -> None:
    """The cached renderer serves exactly what prometheus_client would."""
    from prometheus_client.exposition import generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as om_latest
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
    from prometheus_client.parser import text_string_to_metric_families as parse

    from gpu_exporter.web.render import LabelCache, render

    def samples(text: str) -> list[tuple[str, str, tuple[tuple[str, str], ...], float]]:
        families = om_parse(text) if openmetrics else parse(text)
        return [(f.name, f.type, tuple(sorted(s.labels.items())), s.value)
                for f in families for s in f.samples]

    with SimRun(scenario) as run:
        snap = run.poll(15)
        reference = (om_latest if openmetrics else generate_latest)(run.exporter.registry)
    ours = render(snap, openmetrics, LabelCache())
    assert samples(ours.decode()) == samples(reference.decode())
    if not openmetrics:
        assert ours == reference  # byte for byte in the text format


@pytest.mark.parametrize("openmetrics", [False, True])
def test_families_kept_from_the_last_render_give_the_same_bytes_as_a_fresh_render(
        openmetrics: bool) -> None:
    """Unchanged families are served from the last render; changed, new and
    vanished ones are not (bursty-input: utilization and processes move)."""
    from gpu_exporter.web.render import FamilyTexts, LabelCache, render

    families, labels = FamilyTexts(), LabelCache()
    with SimRun("bursty-input") as run:
        previous = None
        for _ in range(12):
            snap = run.poll(1)
            cached = render(snap, openmetrics, labels, families)
            assert cached == render(snap, openmetrics, LabelCache())
            if previous is not None:
                assert cached != previous  # something moved, and it shows
            previous = cached
        # A family that vanishes from a snapshot is not rendered from memory.
        gone = {name: samples for name, samples in snap.samples.items()
                if not name.startswith("gpu_process_")}
        from dataclasses import replace
        trimmed = replace(snap, samples=gone)
        text = render(trimmed, openmetrics, labels, families).decode()
        assert "gpu_process_info" not in text
        assert text == render(trimmed, openmetrics, LabelCache()).decode()


def test_remembered_value_texts_stay_bounded_and_correct() -> None:
    from gpu_exporter.web import render as r

    texts = [r._remember(float(v) + 0.5) for v in range(3 * r._FORMATTED_LIMIT)]
    assert texts[:3] == ["0.5", "1.5", "2.5"]
    assert len(r._FORMATTED) + len(r._FORMATTED_OLD) <= 2 * r._FORMATTED_LIMIT
    assert r._remember(2.5e9) == "2.5e+09"  # Go's format above a million, as Prometheus writes
    assert r._remember(-0.0) == "-0.0" and r._remember(0.0) == "0.0"
