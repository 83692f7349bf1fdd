"""Sub-second samples: NVML keeps a ring buffer of GPU utilization, power and
SM clock samples. Everything since the last read is read and summarised as min,
mean and max — what a 1 Hz point sample hides, e.g. a GPU that alternates
between idle and flat out because its input pipeline starves it.

How often each buffer is read follows what it holds and what a read costs.
Measured on an H100 80GB HBM3 (driver 580.159.04): power is sampled every
20 ms into a buffer of 119 (2.4 s) and a read costs 0.3-0.5 ms, so it is read
every poll; utilization is sampled every 200 ms into a buffer of 71 (14 s) and
a read costs 2-2.8 ms of CPU whether or not it finds new samples, so it is read
every 5 s, which loses no sample; SM clock samples are never filled on that
GPU (NOT_FOUND) and are asked for on the same 5 s cadence. Between reads the
last summary is exported again.
"""

from __future__ import annotations

from gpu_exporter.cadence import SAMPLES_EVERY_S
from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.session import Gpu, NvmlSession
from gpu_exporter.readings import SampleStats
from gpu_exporter.snapshot import SnapshotBuilder

# sampling type -> (metric, scale from NVML's unit to the base unit, seconds
# between reads: 0 reads every poll)
_KINDS: dict[int, tuple[str, float, float]] = {
    c.SAMPLING_GPU_UTILIZATION: ("gpu_utilization_samples_ratio", 0.01, SAMPLES_EVERY_S),
    c.SAMPLING_TOTAL_POWER: ("gpu_power_samples_watts", 0.001, 0.0),
    c.SAMPLING_PROCESSOR_CLOCK: ("gpu_sm_clock_samples_hertz", 1e6, SAMPLES_EVERY_S),
}


# A gap between two utilization samples longer than this is not one sample's
# span (the exporter stalled past the buffer's 14 s, or the GPU was reset): the
# time is left out of the busy counter rather than guessed.
MAX_SAMPLE_GAP_S = 15.0


class SamplesCollector(NvmlCollector):
    name = "samples"
    description = "min/mean/max of NVML's sub-second utilization, power and SM clock samples"

    def __init__(self, session: NvmlSession) -> None:
        super().__init__(session)
        # (gpu index, sampling type) -> newest sample timestamp seen (µs)
        self._last_seen: dict[tuple[int, int], int] = {}
        # (gpu index, sampling type) -> (when it was last read, its summary then)
        self._held: dict[tuple[int, int], tuple[float, SampleStats | None]] = {}
        self._generation = -1
        # GPU UUID -> busy seconds integrated from the utilization samples; kept
        # across NVML sessions so the counter never goes back.
        self._busy_s: dict[str, float] = {}

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        stats: dict[int, dict[str, SampleStats]] = {}
        out.readings.samples = stats
        if not self.session.up:
            return
        if self.session.generation != self._generation:
            self._last_seen.clear()
            self._held.clear()
            self._generation = self.session.generation

        def one(gpu: Gpu, device: Device) -> None:
            # Label values in catalog order (*GPU, "stat"), for add_values.
            base = (str(gpu.index), gpu.identity.uuid)
            at_min, at_mean, at_max = (*base, "min"), (*base, "mean"), (*base, "max")
            now = self.session.now()
            for kind, (name, scale, every) in _KINDS.items():
                key = (gpu.index, kind)
                held = self._held.get(key)
                if held is not None and now - held[0] < every:
                    st = held[1]
                else:
                    starting = key not in self._last_seen
                    st = self._read(gpu, device, key, scale)
                    if not starting:  # after the starting point, read again next poll
                        self._held[key] = (now, st)
                if kind == c.SAMPLING_GPU_UTILIZATION and gpu.identity.uuid in self._busy_s:
                    out.add_values("gpu_busy_seconds_total", base,
                                   self._busy_s[gpu.identity.uuid])
                if st is None:
                    continue
                stats.setdefault(gpu.index, {})[name] = st
                out.add_values(name, at_min, st.min)
                out.add_values(name, at_mean, st.mean)
                out.add_values(name, at_max, st.max)

        self._errors = self.session.each_gpu(one)

    def _read(self, gpu: Gpu, device: Device, key: tuple[int, int],
              scale: float) -> SampleStats | None:
        """Summary of the samples newer than the last read; None when there are none."""
        first = key not in self._last_seen
        raw = gpu.read(f"samples_{key[1]}", device.samples, key[1], self._last_seen.get(key, 0))
        if not raw:
            self._last_seen.setdefault(key, 0)
            return None
        if key[1] == c.SAMPLING_GPU_UTILIZATION:
            self._integrate_busy(gpu.identity.uuid, self._last_seen.get(key), raw)
        self._last_seen[key] = max(ts for ts, _ in raw)
        if first:
            # The first read returns the driver's whole buffer, from before
            # this interval: it only sets the starting point.
            return None
        values = [v * scale for _, v in raw]
        return SampleStats(len(values), min(values), sum(values) / len(values), max(values))

    def _integrate_busy(self, uuid: str, last_seen_us: int | None,
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
