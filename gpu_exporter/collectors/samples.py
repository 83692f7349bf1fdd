"""Sub-second samples: NVML keeps a ring buffer of GPU utilization, power and
SM clock samples. Everything since the last read is read and summarised as min,
mean and max — what a 1 Hz point sample hides, e.g. a GPU that alternates
between idle and flat out because its input pipeline starves it — and the
utilization samples are integrated into gpu_busy_seconds_total.

How often each buffer is read follows what it holds and what a read costs
(measured on a real H100: BENCHMARKS.md, "Measured on a real H100"). The
power buffer holds a few seconds and a read is cheap, so it is read every
poll; the utilization buffer holds many seconds and a read costs
milliseconds of CPU whether or not it finds new samples, so it is read every
5 s, which loses no sample; SM clock samples are never filled on that GPU
(NOT_FOUND) and are asked for on the same 5 s cadence. Between reads the
last summary is exported again. The power and SM clock summaries are detail
(--metrics.detail) and nothing else reads them: without it those buffers are
not read at all.

Utilization is never missing: where the driver keeps no utilization samples
(nvmlDeviceGetSamples NOT_SUPPORTED or absent: some boards, vGPU, NVIDIA's mock
library), gpu_busy_seconds_total is integrated from the 1-second utilization
rate the device reader takes every poll, times the time since the poll before.
gpu_busy_source_info says which source each GPU's counter comes from, and the
log says it once.
"""

from __future__ import annotations

import logging
from typing import Self

from gpu_exporter.catalogs import deep as m
from gpu_exporter.catalogs import device as device_metrics
from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.collectors.values import plausible
from gpu_exporter.facts.cadence import SAMPLES_EVERY_S
from gpu_exporter.facts.catalog_types import Metric
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.session import UTILIZATION_SAMPLES_KEY, Gpu, NvmlSession
from gpu_exporter.nvml.values import GpuReads
from gpu_exporter.poll.readings import SampleStats
from gpu_exporter.poll.runtime import Runtime
from gpu_exporter.poll.snapshot import SnapshotBuilder
from gpu_exporter.settings.config import Settings

log = logging.getLogger(__name__)

# sampling type -> (metric, scale from NVML's unit to the base unit, seconds
# between reads: 0 reads every poll, read without --metrics.detail)
_KINDS: dict[int, tuple[Metric, float, float, bool]] = {
    c.SAMPLING_GPU_UTILIZATION: (m.UTILIZATION_SAMPLES_RATIO, 0.01, SAMPLES_EVERY_S, True),
    c.SAMPLING_TOTAL_POWER: (m.POWER_SAMPLES_WATTS, 0.001, 0.0, False),
    c.SAMPLING_PROCESSOR_CLOCK: (m.SM_CLOCK_SAMPLES_HERTZ, 1e6, SAMPLES_EVERY_S, False),
}
SAMPLES, RATE = "samples", "utilization_rate"

# A gap between two utilization samples (or two polls, for the rate) longer
# than this is not one sample's span (the exporter stalled past the buffer's
# 14 s, or the GPU was reset): the time is left out of the busy counter rather
# than guessed.
MAX_SAMPLE_GAP_S = 15.0


class SamplesCollector(NvmlCollector):
    name = "samples"
    description = ("GPU busy time, and min/mean/max of NVML's sub-second utilization "
                   "(power and SM clock with --metrics.detail) samples")
    settings = (lambda s: s.metrics.detail,)

    def __init__(self, session: NvmlSession, detail: bool = False) -> None:
        super().__init__(session)
        self.detail = detail
        # (gpu index, sampling type) -> newest sample timestamp seen (µs)
        self._last_seen: dict[tuple[int, int], int] = {}
        # (gpu index, sampling type) -> (when it was last read, its summary then)
        self._held: dict[tuple[int, int], tuple[float, SampleStats | None]] = {}
        self._generation = -1
        # GPU UUID -> busy seconds integrated so far; kept across NVML sessions
        # and sources so the counter never goes back.
        self._busy_s: dict[str, float] = {}
        # GPU UUID -> when its busy time was last integrated from the rate.
        self._rate_at: dict[str, float] = {}
        self._said: set[str] = set()  # the sources the log has named

    @classmethod
    def build(cls, rt: Runtime) -> Self:
        return cls(rt.session, rt.settings.metrics.detail)

    def reconfigure(self, settings: Settings) -> None:
        self.detail = settings.metrics.detail

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        stats: dict[int, dict[str, SampleStats]] = {}
        out.readings.samples = stats
        if not self.session.begin(self.name, out):
            return
        if self.session.generation != self._generation:
            self._last_seen.clear()
            self._held.clear()
            self._rate_at.clear()
            self._generation = self.session.generation

        def one(gpu: Gpu, device: Device) -> None:
            # Label values in catalog order (*GPU, "stat"), for add_values.
            base = (str(gpu.index), gpu.identity.uuid)
            at_min, at_mean, at_max = (*base, "min"), (*base, "mean"), (*base, "max")
            now = self.session.now()
            for kind, (metric, scale, every, always) in _KINDS.items():
                if not always and not self.detail:
                    continue
                key = (gpu.index, kind)
                held = self._held.get(key)
                if held is not None and now - held[0] < every:
                    st = held[1]
                else:
                    starting = key not in self._last_seen
                    st = self._read(gpu, device, key, scale)
                    if not starting:  # after the starting point, read again next poll
                        self._held[key] = (now, st)
                if st is None:
                    continue
                stats.setdefault(gpu.index, {})[metric.name] = st
                out.add_values(metric, at_min, st.min)
                out.add_values(metric, at_mean, st.mean)
                out.add_values(metric, at_max, st.max)
            source = self._busy(gpu, device, now)
            if gpu.identity.uuid in self._busy_s:
                out.add_values(m.BUSY_SECONDS_TOTAL, base, self._busy_s[gpu.identity.uuid])
                out.add_values(m.BUSY_SOURCE_INFO, (*base, source), 1)

        each = self.session.each_gpu()
        for gpu, device in each:
            with each:
                one(gpu, device)
        self._errors = each.errors

    def _read(self, gpu: Gpu, device: Device, key: tuple[int, int],
              scale: float) -> SampleStats | None:
        """Summary of the samples newer than the last read; None when there are none."""
        first = key not in self._last_seen
        raw = gpu.read(f"samples_{key[1]}", device.samples, key[1], self._last_seen.get(key, 0))
        if not raw:
            self._last_seen.setdefault(key, 0)
            return None
        if key[1] == c.SAMPLING_GPU_UTILIZATION:
            self._integrate_samples(gpu.identity.uuid, self._last_seen.get(key), raw)
        self._last_seen[key] = max(ts for ts, _ in raw)
        if first:
            # The first read returns the driver's whole buffer, from before
            # this interval: it only sets the starting point.
            return None
        values = [v * scale for _, v in raw]
        return SampleStats(len(values), min(values), sum(values) / len(values), max(values))

    def _busy(self, gpu: Gpu, device: Device, now: float) -> str:
        """Where the GPU's busy time comes from this poll; integrates it from
        the utilization rate where the driver keeps no samples."""
        uuid = gpu.identity.uuid
        if UTILIZATION_SAMPLES_KEY not in gpu.unsupported:
            self._rate_at.pop(uuid, None)
            self._say(gpu, SAMPLES)
            return SAMPLES
        self._say(gpu, RATE)
        utilization = self._rate(self.session.reads.of(gpu), device)
        total = self._busy_s.setdefault(uuid, 0.0)
        before, self._rate_at[uuid] = self._rate_at.get(uuid), now
        if before is not None and utilization is not None and 0 < now - before <= \
                MAX_SAMPLE_GAP_S:
            self._busy_s[uuid] = total + utilization * (now - before)
        return RATE

    @staticmethod
    def _rate(reads: GpuReads, device: Device) -> float | None:
        """The utilization rate, read once a poll for the GPU's readers (the
        device reader's too)."""
        rates: tuple[float, float] | None = reads.call("utilization", device.utilization)
        if rates is None or not plausible(device_metrics.UTILIZATION_RATIO, rates[0]):
            return None
        return rates[0]

    def _say(self, gpu: Gpu, source: str) -> None:
        if source in self._said:
            return
        self._said.add(source)
        if source == RATE:
            log.info("GPU %d keeps no utilization samples (nvmlDeviceGetSamples): its %s "
                     "comes from the 1-second utilization rate at each poll (source=%s in %s), "
                     "as does that of any other GPU without samples", gpu.index,
                     m.BUSY_SECONDS_TOTAL.name, RATE, m.BUSY_SOURCE_INFO.name)
        else:
            log.info("GPU %d keeps utilization samples: its %s comes from them (source=%s in "
                     "%s)", gpu.index, m.BUSY_SECONDS_TOTAL.name, SAMPLES, m.BUSY_SOURCE_INFO.name)

    def _integrate_samples(self, uuid: str, last_seen_us: int | None,
                           raw: list[tuple[int, float]]) -> None:
        """Add the busy time the samples newer than ``last_seen_us`` cover: each
        sample's share (percent) holds for the time since the sample before it.
        The first read only sets the starting point (the counter starts at 0)."""
        total = self._busy_s.setdefault(uuid, 0.0)
        if not last_seen_us:
            return
        prev = last_seen_us
        for ts, percent in sorted(raw):
            span = (ts - prev) / 1e6
            # A share outside 0-100 % is NVML's "not available" (or a faulty
            # sample): its span is left out, never counted as busy.
            if 0 < span <= MAX_SAMPLE_GAP_S and 0.0 <= percent <= 100.0:
                total += percent / 100.0 * span
            prev = max(prev, ts)
        self._busy_s[uuid] = total
