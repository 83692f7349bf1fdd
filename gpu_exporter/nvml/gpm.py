"""GPM (GPU Performance Monitoring): sample buffers and the metrics between two
samples."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from typing import Any

import pynvml

from gpu_exporter.nvml.binding import TEMPLATES_MAX, struct_layout, translate
from gpu_exporter.nvml.errors import NvmlError, Return


class GpmSample:
    """A GPM sample buffer; free it with close()."""

    @translate("nvmlGpmSampleAlloc")
    def __init__(self) -> None:
        self.raw = pynvml.nvmlGpmSampleAlloc()

    @translate("nvmlGpmSampleFree")
    def close(self) -> None:
        if self.raw is not None:
            pynvml.nvmlGpmSampleFree(self.raw)
            self.raw = None


@translate("nvmlGpmMetricsGet")
def gpm_metrics(first: GpmSample, second: GpmSample,
                metric_ids: Sequence[int]) -> dict[int, float | NvmlError]:
    """Each metric's value between two samples, or its own NvmlError."""
    if _GPM_LAYOUT is not None:
        return _get_gpm_metrics(first, second, tuple(metric_ids))
    req = pynvml.c_nvmlGpmMetricsGet_t()
    req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    req.numMetrics = len(metric_ids)
    req.sample1, req.sample2 = first.raw, second.raw
    for i, mid in enumerate(metric_ids):
        req.metrics[i].metricId = mid
    pynvml.nvmlGpmMetricsGet(req)
    out: dict[int, float | NvmlError] = {}
    for i, mid in enumerate(metric_ids):
        m = req.metrics[i]
        out[mid] = (float(m.value) if m.nvmlReturn == Return.SUCCESS
                    else NvmlError(m.nvmlReturn, f"GPM metric {mid}"))
    return out



# --- GPM metrics, the same way ---------------------------------------------------------
def _gpm_layout() -> tuple[int, struct.Struct] | None:
    """(offset of the metrics array, (metricId, nvmlReturn, value) of one
    c_nvmlGpmMetric_t) in pynvml's c_nvmlGpmMetricsGet_t."""
    req, metric = (getattr(pynvml, "c_nvmlGpmMetricsGet_t", None),
                   getattr(pynvml, "c_nvmlGpmMetric_t", None))
    if (req is None or metric is None or getattr(req, "metrics", None) is None
            or not callable(getattr(pynvml, "_nvmlGetFunctionPointer", None))):
        return None
    layout = struct_layout(metric, (("metricId", 4, "I"), ("nvmlReturn", 4, "I"),
                                     ("value", 8, "d")))
    return None if layout is None else (req.metrics.offset, layout)


_GPM_LAYOUT = _gpm_layout()
# Metric ids -> a request holding version, count and ids (samples unset); copied
# for each call like the field-value templates.
_gpm_templates: dict[tuple[int, ...], Any] = {}


def _get_gpm_metrics(first: GpmSample, second: GpmSample,
                     metric_ids: tuple[int, ...]) -> dict[int, float | NvmlError]:
    assert _GPM_LAYOUT is not None
    offset, layout = _GPM_LAYOUT
    template = _gpm_templates.get(metric_ids)
    if template is None:
        template = pynvml.c_nvmlGpmMetricsGet_t()
        template.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        template.numMetrics = len(metric_ids)
        for i, mid in enumerate(metric_ids):
            template.metrics[i].metricId = mid
        if len(_gpm_templates) >= TEMPLATES_MAX:
            _gpm_templates.clear()
        _gpm_templates[metric_ids] = template
    req = type(template).from_buffer_copy(template)
    req.sample1, req.sample2 = first.raw, second.raw
    ret = pynvml._nvmlGetFunctionPointer("nvmlGpmMetricsGet")(ctypes.byref(req))
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    out: dict[int, float | NvmlError] = {}
    step = layout.size
    for i, mid in enumerate(metric_ids):
        _mid, code, value = layout.unpack_from(req, offset + i * step)
        out[mid] = (float(value) if code == Return.SUCCESS
                    else NvmlError(code, f"GPM metric {mid}"))
    return out
