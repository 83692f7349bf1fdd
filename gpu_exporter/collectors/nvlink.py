"""NVLink, on GPUs that have it: per-link state, error counters (CRC, replay,
recovery) and data throughput counters."""

from __future__ import annotations

from gpu_exporter.collectors.base import Collector
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.errors import NvmlError
from gpu_exporter.nvml.session import Gpu, GpuGone, NvmlSession
from gpu_exporter.snapshot import SnapshotBuilder


def link_count(gpu: Gpu, d: Device) -> int:
    """Links are numbered from 0; the first link NVML refuses ends the list."""
    cached = gpu.static.get("nvlink_count")
    if isinstance(cached, int):
        return cached
    count = 0
    for link in range(c.NVLINK_MAX_LINKS):
        try:
            d.nvlink_active(link)
        except NvmlError as exc:
            if exc.device_gone:
                raise GpuGone(str(exc)) from None
            break
        count += 1
    gpu.static["nvlink_count"] = count
    return count


class NvlinkCollector(Collector):
    name = "nvlink"
    description = "NVLink per-link state, CRC/replay/recovery errors and throughput"

    def __init__(self, session: NvmlSession) -> None:
        self.session = session
        self._errors = 0

    def errors(self) -> int:
        return self._errors

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        if not self.session.up:
            return
        self._errors = self.session.each_gpu(lambda gpu, d: self._collect_gpu(gpu, d, out))

    def _collect_gpu(self, gpu: Gpu, d: Device, out: SnapshotBuilder) -> None:
        links = link_count(gpu, d)
        if not links:
            return
        labels = {"gpu": str(gpu.index), "uuid": gpu.identity.uuid}
        for link in range(links):
            active = gpu.read(f"nvlink_state_{link}", d.nvlink_active, link)
            if active is not None:
                out.add("gpu_nvlink_link_up", active, **labels, link=str(link))
            for kind, counter in c.NVLINK_ERRORS.items():
                count = gpu.read(f"nvlink_err_{kind}_{link}", d.nvlink_error_counter, link,
                                 counter)
                if count is not None:
                    out.add("gpu_nvlink_errors_total", count, **labels, link=str(link),
                            type=kind)
        fields = [(fid, link) for fid in (c.FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                                          c.FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
                  for link in range(links)]
        values = gpu.read("nvlink_throughput", d.scoped_field_values, fields)
        for (fid, link), value in (values or {}).items():
            if isinstance(value, NvmlError):
                if value.device_gone:
                    raise GpuGone(str(value))
                if not value.capability_absent:
                    gpu.errors += 1
                continue
            direction = "tx" if fid == c.FI_DEV_NVLINK_THROUGHPUT_DATA_TX else "rx"
            out.add("gpu_nvlink_bytes_total", value * 1024, **labels, link=str(link),
                    direction=direction)
