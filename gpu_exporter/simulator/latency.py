"""What real NVML calls cost, per C function, in microseconds of wall time:
the optional latency model of the simulator (``SimulatedNode(latency_us=...)``,
``benchmarks/run.py --latency``).

Without it a simulated call costs what a Python callback costs (a few
microseconds). The figures below were measured with
``benchmarks/measure_nvml.py`` and a call-by-call log of the exporter's polls
on an NVIDIA H100 80GB HBM3, driver 580.159.04 (CUDA 13.0), nvidia-ml-py
13.615.71, in a virtual machine with the GPU passed through: the median of
10-200 calls through pynvml, idle and under a bf16 matrix-multiply load (the
range is given where the two differ). Calls answered from the driver's cached
state cost 1-10 us; a few cost milliseconds, and burn that time on the CPU
(process CPU per call was at least the wall time):

* nvmlDeviceGetTotalEnergyConsumption: 2.8-3.2 ms (3.8-4.2 ms of CPU); the
  field-value route (NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION) costs the same.
* nvmlDeviceGetProcessUtilization: 2.0-2.4 ms, also when it finds nothing.
* nvmlDeviceGetSamples: 1.9-2.8 ms for the utilization buffers, 0.3-0.5 ms
  for the power buffer (``nvmlDeviceGetSamples:0``, the sampling type after
  the colon). This and nvmlDeviceGetProcessUtilization are two C calls per read
  through pynvml (size, then data); the table holds half a read per call.
* nvmlDeviceGetApplicationsClock 0.85 ms, nvmlDeviceGetMaxClockInfo 1.4-1.8
  ms, nvmlDeviceGetTemperatureThreshold 0.3-2.5 ms (read once, at discovery).
* PCIe byte counters in a field-value batch: 0.1-0.3 ms each (the field's own
  latencyUsec); memory temperature and power fields: ~10 us.

NVLink calls could not be measured (no NVLink in that machine) and keep
estimates; nvmlGpmMetricsGet is computed on the CPU from two samples.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CallCost:
    us: float
    source: str  # "measured", "documented" or "estimate", with the reference


_H100 = "measured: H100 80GB HBM3, driver 580.159.04"


def _m(us: float, note: str = "") -> CallCost:
    return CallCost(us, f"{_H100}{'; ' + note if note else ''}")


_NVLINK = CallCost(50, "estimate: one small RM control ioctl (no NVLink where measured)")

COSTS: dict[str, CallCost] = {
    # discovery and identity (once per GPU, or every few minutes)
    "nvmlDeviceGetCount_v2": _m(17),
    "nvmlDeviceGetHandleByIndex_v2": _m(6400, "first call; later calls are cached"),
    "nvmlDeviceGetName": _m(23),
    "nvmlDeviceGetUUID": _m(59),
    "nvmlDeviceGetSerial": _m(72),
    "nvmlDeviceGetVbiosVersion": _m(18),
    "nvmlDeviceGetPciInfo_v3": _m(26),
    "nvmlDeviceGetArchitecture": _m(8),
    "nvmlDeviceGetCudaComputeCapability": _m(8),
    "nvmlSystemGetDriverVersion": _m(84),
    "nvmlSystemGetNVMLVersion": _m(40, "as the driver version"),
    "nvmlSystemGetCudaDriverVersion": _m(43),
    "nvmlDeviceGetTemperatureThreshold": _m(600, "0.3-2.5 ms by threshold"),
    "nvmlDeviceGetMaxClockInfo": _m(1600, "1.4-1.8 ms"),
    "nvmlDeviceGetMaxPcieLinkGeneration": _m(14),
    "nvmlDeviceGetMaxPcieLinkWidth": _m(47),
    "nvmlDeviceGetPowerManagementDefaultLimit": _m(7),
    "nvmlDeviceGetDefaultApplicationsClock": _m(950, "0.83-1.08 ms"),
    "nvmlDeviceGetSupportedClocksEventReasons": _m(16),
    "nvmlDeviceGetNumFans": _m(395),
    "nvmlDeviceGetMaxMigDeviceCount": CallCost(5, "estimate: static (MIG off where measured)"),
    "nvmlDeviceGetSupportedEventTypes": _m(15),
    "nvmlDeviceGetMigDeviceHandleByIndex": CallCost(5, "estimate: static"),
    "nvmlDeviceGetGpuInstanceId": CallCost(5, "estimate: static"),
    "nvmlDeviceGetComputeInstanceId": CallCost(5, "estimate: static"),
    "nvmlGpmQueryDeviceSupport": _m(17),
    "nvmlDeviceRegisterEvents": _m(1800),
    # every poll, answered from the driver's state
    "nvmlDeviceGetUtilizationRates": _m(2, "1.0-1.9 us"),
    "nvmlDeviceGetMemoryInfo": _m(8, "as _v2"),
    "nvmlDeviceGetMemoryInfo_v2": _m(8, "6-10 us"),
    "nvmlDeviceGetTemperature": _m(2.4),
    "nvmlDeviceGetEnforcedPowerLimit": _m(1.9),
    "nvmlDeviceGetPowerManagementLimit": _m(1.9, "as the enforced limit"),
    "nvmlDeviceGetPowerUsage": _m(1.5, "1.1-1.9 us"),
    "nvmlDeviceGetClockInfo": _m(2.2),
    "nvmlDeviceGetPerformanceState": _m(2.0),
    "nvmlDeviceGetCurrentClocksEventReasons": _m(2.1),
    "nvmlDeviceGetCurrPcieLinkGeneration": _m(2.0),
    "nvmlDeviceGetCurrPcieLinkWidth": _m(30, "27-35 us"),
    "nvmlDeviceGetTotalEccErrors": _m(3.2),
    "nvmlDeviceGetRemappedRows": _m(3.1),
    "nvmlDeviceGetPersistenceMode": _m(7.0),
    "nvmlDeviceGetFieldValues": _m(15, "13-27 us for 3 power fields; PCIe byte counters "
                                       "add 0.1-0.3 ms each, energy 3 ms"),
    "nvmlDeviceGetComputeRunningProcesses_v3": _m(20, "10 us idle, 29 us with a process"),
    "nvmlDeviceGetGraphicsRunningProcesses_v3": _m(10),
    "nvmlGpmSampleGet": _m(65, "52-78 us"),
    "nvmlGpmMigSampleGet": _m(65, "as nvmlGpmSampleGet"),
    "nvmlGpmMetricsGet": CallCost(20, "estimate: computed on the CPU from two samples"),
    # costly: read on a slower cadence by the collectors
    "nvmlDeviceGetTotalEnergyConsumption": _m(3000, "2.8-3.2 ms, 3.8-4.2 ms of CPU"),
    # A read of these is two C calls (the size, then the data): the table
    # holds half of what one read through pynvml measured.
    "nvmlDeviceGetProcessUtilization": _m(1100, "half of 2.0-2.4 ms a read"),
    "nvmlDeviceGetSamples": _m(1150, "half of 1.9-2.8 ms a read (utilization buffers)"),
    "nvmlDeviceGetSamples:0": _m(190, "half of 0.27-0.52 ms a read (power buffer)"),
    "nvmlDeviceGetApplicationsClock": _m(850),
    "nvmlDeviceGetPcieReplayCounter": _m(150, "137-161 us"),
    "nvmlDeviceGetEccMode": _m(130, "120-144 us"),
    "nvmlDeviceGetMigMode": _m(140, "127-146 us"),
    "nvmlDeviceGetFanSpeed_v2": CallCost(50, "estimate: no fan on the board measured"),
    "nvmlDeviceGetNvLinkState": _NVLINK,
    "nvmlDeviceGetNvLinkErrorCounter": _NVLINK,
    "nvmlDeviceGetPcieThroughput": _m(20_870, "blocks 20 ms by design (NVML reference)"),
}

# Per-call latency in microseconds, the shape SimulatedNode(latency_us=...) takes.
NVML_LATENCY_US: dict[str, float] = {name: cost.us for name, cost in COSTS.items()}


def latency_table() -> list[tuple[str, float, str]]:
    """(C function, microseconds, source) sorted by cost, for documentation."""
    return sorted(((n, c.us, c.source) for n, c in COSTS.items()), key=lambda r: (-r[1], r[0]))
