"""A GPU lost half-way through its pass contributes no half-read values: only
gpu_info and gpu_up 0, while what was added before it (another GPU's series
of the same families) stays."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_exporter.collectors import values
from gpu_exporter.collectors.device import DeviceCollector
from gpu_exporter.nvml.gpu import GpuGone
from gpu_exporter.poll.catalog import metric
from gpu_exporter.poll.snapshot import SnapshotBuilder
from tests.onegpu import OneGpu


def test_a_gpu_lost_after_some_series_leaves_none_of_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with OneGpu(utilization=0.5, power_w=300.0) as one:
        collector = one.build(DeviceCollector)
        whole = one.poll(collector)
        assert whole.get("gpu_power_watts", gpu="0") == 300.0

        gauge = values.Series.gauge
        calls = 0

        def lost_on_the_fifth(self: values.Series, *args: Any, **kw: Any) -> float | None:
            nonlocal calls
            calls += 1
            if calls == 5:
                raise GpuGone("GPU is lost")
            return gauge(self, *args, **kw)

        monkeypatch.setattr(values.Series, "gauge", lost_on_the_fifth)
        one.clock.advance(1.0)
        one.node.refresh()
        one.session.begin_poll()
        out = SnapshotBuilder(one.clock())
        # Another GPU's series of every family the pass adds, read before it.
        before = {name: [(("7", "GPU-other", *labels[2:]), value) for labels, value in samples]
                  for name, samples in whole.samples.items() if name not in ("gpu_info", "gpu_up")}
        for name, series in before.items():
            for labels, value in series:
                out.add_values(metric(name), labels, value)
        collector.collect(out)
        snap = out.build()

    assert calls == 5 and len(before) > 10  # it had added series when it was lost
    assert {name: [tuple(s) for s in samples] for name, samples in snap.samples.items()
            if name not in ("gpu_info", "gpu_up")} == before
    uuid = whole.series("gpu_up")[0][0]["uuid"]
    assert snap.series("gpu_up") == [({"gpu": "0", "uuid": uuid}, 0.0)]
    assert [labels["gpu"] for labels, _ in snap.series("gpu_info")] == ["0"]
