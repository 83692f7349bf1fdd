"""The exporter's own health metrics."""

from __future__ import annotations

from gpu_exporter.facts.catalog_types import Metric, declared
from gpu_exporter.facts.catalog_types import metric_spec as _m

EXPORTER_BUILD_INFO = _m(
    "gpu_exporter_build_info", "gauge",
    "Version of the exporter and of the NVML binding (value 1).",
    ("version", "nvml_binding_version", "python_version"), "exporter")

EXPORTER_NVML_UP = _m(
    "gpu_exporter_nvml_up", "gauge",
    "1 when NVML is initialised and answering, 0 when the library or driver is missing.",
    (), "exporter")

EXPORTER_NVML_DRIVER_INFO = _m(
    "gpu_exporter_nvml_driver_info", "gauge",
    "NVIDIA driver and CUDA driver versions seen through NVML (value 1).",
    ("driver_version", "cuda_driver_version"), "exporter")

EXPORTER_COLLECTOR_SUCCESS = _m(
    "gpu_exporter_collector_success", "gauge",
    "1 when the stage's (a reader's or a derivation's) last run succeeded, 0 when it "
    "failed; the label names the stage.", ("collector",),
    "exporter")

EXPORTER_COLLECTOR_DURATION_SECONDS = _m(
    "gpu_exporter_collector_duration_seconds", "gauge",
    "Wall time of the stage's (a reader's or a derivation's) last run.", ("collector",),
    "exporter")

EXPORTER_COLLECTOR_ERRORS_TOTAL = _m(
    "gpu_exporter_collector_errors_total", "counter",
    "Reads or rules a stage could not complete (a failing call, file or rule), by stage.",
    ("collector",), "exporter")

EXPORTER_NVML_TIMEOUTS_TOTAL = _m(
    "gpu_exporter_nvml_timeouts_total", "counter",
    "NVML reads of a GPU that did not return within --poll.timeout; the GPU is skipped "
    "(gpu_up 0) until the stuck call returns. 0 for every GPU from the first poll, so "
    "increase() sees the first timeout.", ("gpu",), "exporter")

EXPORTER_POLL_DURATION_SECONDS = _m(
    "gpu_exporter_poll_duration_seconds", "gauge", "Wall time of the last poll.", (),
    "exporter")

EXPORTER_POLLS_TOTAL = _m(
    "gpu_exporter_polls_total", "counter", "Polls completed since the exporter started.",
    (), "exporter")

EXPORTER_LAST_POLL_TIMESTAMP_SECONDS = _m(
    "gpu_exporter_last_poll_timestamp_seconds", "gauge",
    "Unix time the newest snapshot was taken; compare with time() to see staleness.", (),
    "exporter")

EXPORTER_CONFIG_LAST_RELOAD_SUCCESS = _m(
    "gpu_exporter_config_last_reload_success", "gauge",
    "1 when the last configuration load (at start or on SIGHUP) succeeded, 0 when the "
    "file was rejected and the previous configuration kept.", (), "exporter")

EXPORTER_CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP_SECONDS = _m(
    "gpu_exporter_config_last_reload_success_timestamp_seconds", "gauge",
    "Unix time of the last successful configuration load (at start or on SIGHUP).", (),
    "exporter")

METRICS: tuple[Metric, ...] = declared(globals())
