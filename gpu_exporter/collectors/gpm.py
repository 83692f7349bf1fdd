"""GPM (GPU Performance Monitoring, Hopper and newer): how busy the SMs, tensor
cores and memory really are, where NVML's utilization only says "a kernel was
running". Needs two samples more than 100 ms apart, so the previous sample of
each GPU (and MIG instance) is kept between polls.

A sample is taken every SAMPLES_EVERY_S (two NVML calls: the sample, then the
metrics of the interval since the one before), and the newest rates are
exported again between samples: GPM's metrics are averages over the interval,
and the activity counters add each interval times its length, so nothing is
lost by sampling less often than the poll."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

from gpu_exporter.catalogs import deep as m
from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.facts.cadence import SAMPLES_EVERY_S
from gpu_exporter.facts.catalog_types import Metric
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.errors import NvmlError
from gpu_exporter.nvml.gpm import GpmSample, gpm_metrics
from gpu_exporter.nvml.session import GPM_KEY, Gpu, GpuGone, NvmlSession
from gpu_exporter.poll.readings import GpmReading
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import SnapshotBuilder

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.1  # GPM's own rule: samples closer than this give no rates
SAMPLE_EVERY_S = max(MIN_INTERVAL_S, SAMPLES_EVERY_S)
_MIB = 1024 * 1024

# metric id -> (device-level metric, MIG-level metric)
_RATIOS: dict[int, tuple[Metric, Metric]] = {
    c.GPM_SM_UTIL: (m.SM_ACTIVE_RATIO, m.MIG_SM_ACTIVE_RATIO),
    c.GPM_SM_OCCUPANCY: (m.SM_OCCUPANCY_RATIO, m.MIG_SM_OCCUPANCY_RATIO),
    c.GPM_ANY_TENSOR_UTIL: (m.TENSOR_ACTIVE_RATIO, m.MIG_TENSOR_ACTIVE_RATIO),
    c.GPM_DRAM_BW_UTIL: (m.DRAM_ACTIVE_RATIO, m.MIG_DRAM_ACTIVE_RATIO),
}
_RATES: dict[int, tuple[Metric, str]] = {
    c.GPM_PCIE_TX_PER_SEC: (m.GPM_PCIE_BYTES_PER_SECOND, "tx"),
    c.GPM_PCIE_RX_PER_SEC: (m.GPM_PCIE_BYTES_PER_SECOND, "rx"),
    c.GPM_NVLINK_TOTAL_RX_PER_SEC: (m.GPM_NVLINK_BYTES_PER_SECOND, "rx"),
    c.GPM_NVLINK_TOTAL_TX_PER_SEC: (m.GPM_NVLINK_BYTES_PER_SECOND, "tx"),
}
# metric id -> counter of the activity's time: the ratio of each interval
# times its length, so rate() over any window is the window's mean activity.
_ACTIVE_SECONDS: dict[int, Metric] = {
    c.GPM_SM_UTIL: m.SM_ACTIVE_SECONDS_TOTAL,
    c.GPM_ANY_TENSOR_UTIL: m.TENSOR_ACTIVE_SECONDS_TOTAL,
    c.GPM_DRAM_BW_UTIL: m.DRAM_ACTIVE_SECONDS_TOTAL,
}
DEVICE_METRICS = tuple(_RATIOS) + tuple(_RATES)
MIG_METRICS = tuple(_RATIOS)


@dataclass
class _Pair:
    """Two sample buffers used alternately: the previous poll's and this one's."""

    prev: GpmSample
    cur: GpmSample
    prev_at: float | None = None
    unsupported: set[int] = field(default_factory=set)
    last: dict[int, float] | None = None  # the newest rates, kept for too-close polls
    last_interval_s: float = 0.0  # the length of the interval ``last`` covers

    def close(self) -> None:
        for s in (self.prev, self.cur):
            with contextlib.suppress(NvmlError):
                s.close()


class GpmCollector(NvmlCollector):
    name = "gpm"
    description = "GPM SM, tensor and memory activity (Hopper and newer)"

    def __init__(self, session: NvmlSession, monotonic: Callable[[], float]) -> None:
        super().__init__(session)
        self._mono = monotonic
        self._pairs: dict[tuple[int, int | None], _Pair] = {}
        self._generation = -1
        # (GPU UUID, metric id) -> active seconds so far. Keyed by UUID and kept
        # across NVML sessions and lost GPUs: the counter only ever grows.
        self._active_s: dict[tuple[str, int], float] = {}

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        return cls(rt.session, rt.monotonic)

    def close(self) -> None:
        for pair in self._pairs.values():
            pair.close()
        self._pairs.clear()

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        readings: dict[int, GpmReading] = {}
        out.readings.gpm = readings
        instances: dict[int, dict[int, GpmReading]] = {}
        out.readings.gpm_instances = instances
        pending: set[int] = set()
        out.readings.gpm_pending = pending
        if not self.session.begin(self.name, out):
            return
        if self.session.generation != self._generation:
            # Sample buffers belong to one NVML session.
            self._pairs.clear()
            self._generation = self.session.generation
        # The MIG reader runs first; without it only whole GPUs are sampled.
        mig = out.readings.mig or {}
        for gpu in self.session.gpus:
            if gpu.lost or gpu.device is None:
                self._drop(gpu.index)  # its samples belong to a handle that is gone

        def one(gpu: Gpu, device: Device) -> None:
            if not gpu.static_read(GPM_KEY, device.gpm_supported):
                gpu.unsupported.add(GPM_KEY)
                return
            # Label values in catalog order (GPU first), for add_values.
            base = (str(gpu.index), gpu.identity.uuid)
            key = (gpu.index, None)
            before = self._pairs[key].prev_at if key in self._pairs else None
            values = self._sample(gpu, None, DEVICE_METRICS)
            pair = self._pairs.get(key)
            if values is not None and pair is not None and pair.prev_at != before:
                # A new interval was measured this poll: add its active time.
                self._integrate(gpu.identity.uuid, values, pair.last_interval_s)
            self._export_active(gpu.identity.uuid, out, base)
            if values is not None:
                readings[gpu.index] = self._export(values, out, base)
            elif pair is not None and pair.last is None and GPM_KEY not in gpu.unsupported:
                pending.add(gpu.index)  # one sample taken, none to pair it with yet
            for inst in mig.get(gpu.index, []):
                values = self._sample(gpu, inst.gpu_instance, MIG_METRICS)
                at = (*base, str(inst.gpu_instance))
                for mid, (_dev, mig_metric) in _RATIOS.items():
                    if values is not None and mid in values:
                        out.add_values(mig_metric, at, values[mid] / 100.0)
                if values is not None:
                    instances.setdefault(gpu.index, {})[inst.gpu_instance] = _ratios(values)

        each = self.session.each_gpu()
        for gpu, device in each:
            with each:
                one(gpu, device)
        self._errors += each.errors

    def _drop(self, index: int) -> None:
        for key in [k for k in self._pairs if k[0] == index]:
            self._pairs.pop(key).close()

    def _sample(self, gpu: Gpu, gpu_instance: int | None,
                metric_ids: tuple[int, ...]) -> dict[int, float] | None:
        """Take this poll's sample; the metrics since the previous one, if usable."""
        key = (gpu.index, gpu_instance)
        device = gpu.device
        assert device is not None
        try:
            pair = self._pairs.get(key)
            if pair is None:
                pair = self._pairs[key] = _Pair(GpmSample(), GpmSample())
            now = self._mono()
            if pair.prev_at is not None and now - pair.prev_at < SAMPLE_EVERY_S:
                # Keep the older sample until the interval is long enough, and
                # repeat the newest rates.
                return pair.last
            if gpu_instance is None:
                device.gpm_sample(pair.cur)
            else:
                device.gpm_mig_sample(gpu_instance, pair.cur)
            result = None
            if pair.prev_at is not None:
                wanted = [m for m in metric_ids if m not in pair.unsupported]
                raw = gpm_metrics(pair.prev, pair.cur, wanted)
                result = {}
                for mid, value in raw.items():
                    if isinstance(value, NvmlError):
                        # Each metric has its own return code.
                        if value.capability_absent:
                            pair.unsupported.add(mid)
                        else:
                            self._errors += 1
                        continue
                    result[mid] = value
            pair.last_interval_s = 0.0 if pair.prev_at is None else now - pair.prev_at
            pair.prev, pair.cur, pair.prev_at = pair.cur, pair.prev, now
            pair.last = result
            return result
        except NvmlError as exc:
            if exc.device_gone:
                raise GpuGone(str(exc)) from None
            if exc.capability_absent:
                gpu.unsupported.add(GPM_KEY)
                self._drop(gpu.index)
                return None
            self._errors += 1
            return None

    def _integrate(self, uuid: str, values: dict[int, float], interval_s: float) -> None:
        for mid in _ACTIVE_SECONDS:
            if mid in values:
                ratio = min(1.0, max(0.0, values[mid] / 100.0))
                self._active_s[(uuid, mid)] = (self._active_s.get((uuid, mid), 0.0)
                                               + ratio * interval_s)

    def _export_active(self, uuid: str, out: SnapshotBuilder, base: tuple[str, str]) -> None:
        for mid, metric in _ACTIVE_SECONDS.items():
            total = self._active_s.get((uuid, mid))
            if total is not None:
                out.add_values(metric, base, total)

    @staticmethod
    def _export(values: dict[int, float], out: SnapshotBuilder,
                base: tuple[str, str]) -> GpmReading:
        ratios: dict[int, float] = {}
        for mid, (metric, _mig) in _RATIOS.items():
            if mid in values:
                ratios[mid] = min(1.0, max(0.0, values[mid] / 100.0))
                out.add_values(metric, base, ratios[mid])
        for mid, (metric, direction) in _RATES.items():
            if mid in values:
                out.add_values(metric, (*base, direction), values[mid] * _MIB)
        return _ratios(values)


def _ratios(values: dict[int, float]) -> GpmReading:
    """The GPM ratios among ``values`` (metric id -> percent), each within 0-1."""
    ratios = {mid: min(1.0, max(0.0, values[mid] / 100.0)) for mid in _RATIOS if mid in values}
    return GpmReading(ratios.get(c.GPM_SM_UTIL), ratios.get(c.GPM_SM_OCCUPANCY),
                      ratios.get(c.GPM_ANY_TENSOR_UTIL), ratios.get(c.GPM_DRAM_BW_UTIL))
