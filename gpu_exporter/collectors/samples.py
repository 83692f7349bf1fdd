"""Sub-second samples: NVML keeps a buffer of GPU utilization, power and SM
clock samples (about six a second). Everything since the last poll is read and
summarised as min, mean and max — what a 1 Hz point sample hides, e.g. a GPU
that alternates between idle and flat out because its input pipeline starves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.session import Gpu, NvmlSession
from gpu_exporter.snapshot import SnapshotBuilder

# sampling type -> (metric, scale from NVML's unit to the base unit)
_KINDS: dict[int, tuple[str, float]] = {
    c.SAMPLING_GPU_UTILIZATION: ("gpu_utilization_samples_ratio", 0.01),
    c.SAMPLING_TOTAL_POWER: ("gpu_power_samples_watts", 0.001),
    c.SAMPLING_PROCESSOR_CLOCK: ("gpu_sm_clock_samples_hertz", 1e6),
}


@dataclass(frozen=True, slots=True)
class SampleStats:
    count: int
    min: float
    mean: float
    max: float


class SamplesCollector(NvmlCollector):
    name = "samples"
    description = "min/mean/max of NVML's sub-second utilization, power and SM clock samples"

    def __init__(self, session: NvmlSession) -> None:
        super().__init__(session)
        # (gpu index, sampling type) -> newest sample timestamp seen (µs)
        self._last_seen: dict[tuple[int, int], int] = {}
        self._generation = -1

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        stats: dict[int, dict[str, SampleStats]] = {}
        out.facts["samples"] = stats
        if not self.session.up:
            return
        if self.session.generation != self._generation:
            self._last_seen.clear()
            self._generation = self.session.generation

        def one(gpu: Gpu, device: Device) -> None:
            # Label values in catalog order (*GPU, "stat"), for add_values.
            base = (str(gpu.index), gpu.identity.uuid)
            at_min, at_mean, at_max = (*base, "min"), (*base, "mean"), (*base, "max")
            for kind, (name, scale) in _KINDS.items():
                key = (gpu.index, kind)
                first = key not in self._last_seen
                raw = gpu.read(f"samples_{kind}", device.samples, kind,
                               self._last_seen.get(key, 0))
                if not raw:
                    self._last_seen.setdefault(key, 0)
                    continue
                self._last_seen[key] = max(ts for ts, _ in raw)
                if first:
                    # The first read returns the driver's whole buffer, from
                    # before this interval: it only sets the starting point.
                    continue
                values = [v * scale for _, v in raw]
                st = SampleStats(len(values), min(values), sum(values) / len(values),
                                 max(values))
                stats.setdefault(gpu.index, {})[name] = st
                out.add_values(name, at_min, st.min)
                out.add_values(name, at_mean, st.mean)
                out.add_values(name, at_max, st.max)

        self._errors = self.session.each_gpu(one)
