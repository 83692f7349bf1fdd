"""NVLink, on GPUs that have it: per-link state, error counters (CRC, replay,
recovery) and data throughput counters."""

from __future__ import annotations

from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.errors import NvmlError
from gpu_exporter.nvml.session import Gpu, GpuGone
from gpu_exporter.snapshot import SnapshotBuilder

# One field-values call per GPU and poll reads every link: state, the three
# error counters and both throughput counters (per-link calls would be 4x18).
_PER_LINK = {
    c.FI_DEV_NVLINK_GET_STATE: ("state", ""),
    c.FI_DEV_NVLINK_ERROR_DL_REPLAY: ("errors", "replay"),
    c.FI_DEV_NVLINK_ERROR_DL_RECOVERY: ("errors", "recovery"),
    c.FI_DEV_NVLINK_ERROR_DL_CRC: ("errors", "crc"),
    c.FI_DEV_NVLINK_THROUGHPUT_DATA_TX: ("bytes", "tx"),
    c.FI_DEV_NVLINK_THROUGHPUT_DATA_RX: ("bytes", "rx"),
}


def link_count(gpu: Gpu, d: Device) -> int:
    """NVML's link-count field, read once; 0 on GPUs without NVLink."""
    cached = gpu.static.get("nvlink_count")
    if isinstance(cached, int):
        return cached
    values = gpu.read("nvlink_count", d.field_values, [c.FI_DEV_NVLINK_LINK_COUNT]) or {}
    value = values.get(c.FI_DEV_NVLINK_LINK_COUNT)
    if isinstance(value, NvmlError) and value.device_gone:
        raise GpuGone(str(value))
    count = 0 if value is None or isinstance(value, NvmlError) else int(value)
    gpu.static["nvlink_count"] = count
    return count


class NvlinkCollector(NvmlCollector):
    name = "nvlink"
    description = "NVLink per-link state, CRC/replay/recovery errors and throughput"

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
        fields = [(fid, link) for fid in _PER_LINK for link in range(links)]
        values = gpu.read("nvlink_fields", d.scoped_field_values, fields)
        for (fid, link), value in (values or {}).items():
            if isinstance(value, NvmlError):
                if value.device_gone:
                    raise GpuGone(str(value))
                if not value.capability_absent:
                    gpu.errors += 1
                continue
            kind, detail = _PER_LINK[fid]
            if kind == "state":
                out.add("gpu_nvlink_link_up", value == c.NVLINK_STATE_ACTIVE, **labels,
                        link=str(link))
            elif kind == "errors":
                out.add("gpu_nvlink_errors_total", value, **labels, link=str(link),
                        type=detail)
            else:
                out.add("gpu_nvlink_bytes_total", value * 1024, **labels, link=str(link),
                        direction=detail)
