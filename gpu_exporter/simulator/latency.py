"""What real NVML calls cost, per C function, in microseconds of wall time:
the optional latency model of the simulator (``SimulatedNode(latency_us=...)``,
``benchmarks/run.py --latency``).

Without it a simulated call costs what a Python callback costs (a few
microseconds), far less than the real library, which answers most queries
through an ioctl into the kernel driver and, on GSP-based drivers (Turing and
newer with the open or GSP firmware path), an RPC to the GPU's own processor.

Where the figures come from. No GPU was available where this table was written,
so **most figures are estimates**; each entry says which. Measured or documented
sources:

* NVIDIA's NVML reference for ``nvmlDeviceGetPcieThroughput``: the function
  "is querying a byte counter over a 20ms interval" — it blocks 20 ms per call.
* wookayin/gpustat issue #76: ``nvmlDeviceGetPowerUsage`` called in a tight
  loop through pynvml answered about 2,743 times a second on a Tesla K40m,
  i.e. ~365 us per call including pynvml's Python overhead.
* influxdata/telegraf issue #8534: ``nvidia-smi -q -x`` on an 8-GPU node takes
  0.59 s (0.09 s of it system CPU) for some hundred queries per GPU, i.e. on
  the order of 0.5 ms a query with process start-up included; a 7-field
  ``--query-gpu`` run takes 71 ms.
* XuehaiPan/nvitop issue #65: the maintainer declines sub-second refresh
  because "the latency from the NVML API call is relatively high".
* NVIDIA's driver persistence docs: without persistence mode, initialising a
  GPU costs 1-3 s (ECC scrubbing); ``nvmlInit`` is therefore not modelled (it
  is paid once at start, not per poll).

Estimates are grouped by how the driver answers:

* identity read at discovery (name, UUID, serial, PCI info, VBIOS,
  architecture, thresholds, maxima): NVML caches these in user space after
  the first query; 5 us (estimate).
* one RM control ioctl returning a few integers (utilization, clocks, P-state,
  link state, temperature, throttle reasons, ECC mode...): 50 us (estimate,
  the typical cost of a small ioctl round trip into the NVIDIA driver with GSP
  firmware answering from its cached state).
* power: 365 us, the one measured per-call figure above (K40m; newer boards
  read power through the PMU/GSP and are unlikely to be cheaper).
* reads that copy a buffer (process lists, per-process utilization samples,
  sub-second samples, field value batches, ECC/row-remap counters from the
  InfoROM): 100-200 us (estimate).
* GPM samples: the driver copies a multi-kilobyte sample from the GPU: 500 us
  (estimate).

Replace these with measured figures when a GPU is at hand:
``benchmarks/measure_nvml.py`` prints the same table measured on the real
library.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CallCost:
    us: float
    source: str  # "measured", "documented" or "estimate", with the reference


_CACHED = CallCost(5, "estimate: static identity, cached by NVML after discovery")
_IOCTL = CallCost(50, "estimate: one small RM control ioctl")
_BUFFER = CallCost(120, "estimate: a read that copies a buffer from the driver")
_SAMPLES = CallCost(200, "estimate: the driver's sample ring buffer is copied out")

COSTS: dict[str, CallCost] = {
    # discovery and identity
    "nvmlDeviceGetCount_v2": _CACHED,
    "nvmlDeviceGetHandleByIndex_v2": _CACHED,
    "nvmlDeviceGetName": _CACHED,
    "nvmlDeviceGetUUID": _CACHED,
    "nvmlDeviceGetSerial": _CACHED,
    "nvmlDeviceGetVbiosVersion": _CACHED,
    "nvmlDeviceGetPciInfo_v3": _CACHED,
    "nvmlDeviceGetArchitecture": _CACHED,
    "nvmlDeviceGetCudaComputeCapability": _CACHED,
    "nvmlSystemGetDriverVersion": _CACHED,
    "nvmlSystemGetNVMLVersion": _CACHED,
    "nvmlSystemGetCudaDriverVersion": _CACHED,
    "nvmlDeviceGetTemperatureThreshold": _CACHED,
    "nvmlDeviceGetMaxClockInfo": _CACHED,
    "nvmlDeviceGetMaxPcieLinkGeneration": _CACHED,
    "nvmlDeviceGetMaxPcieLinkWidth": _CACHED,
    "nvmlDeviceGetPowerManagementDefaultLimit": _CACHED,
    "nvmlDeviceGetDefaultApplicationsClock": _CACHED,
    "nvmlDeviceGetSupportedClocksEventReasons": _CACHED,
    "nvmlDeviceGetNumFans": _CACHED,
    "nvmlDeviceGetMaxMigDeviceCount": _CACHED,
    "nvmlDeviceGetSupportedEventTypes": _CACHED,
    "nvmlDeviceGetMigDeviceHandleByIndex": _CACHED,
    "nvmlDeviceGetGpuInstanceId": _CACHED,
    "nvmlDeviceGetComputeInstanceId": _CACHED,
    "nvmlGpmQueryDeviceSupport": _CACHED,
    # one ioctl for a few integers
    "nvmlDeviceGetUtilizationRates": _IOCTL,
    "nvmlDeviceGetMemoryInfo": _IOCTL,
    "nvmlDeviceGetMemoryInfo_v2": _IOCTL,
    "nvmlDeviceGetTemperature": _IOCTL,
    "nvmlDeviceGetEnforcedPowerLimit": _IOCTL,
    "nvmlDeviceGetPowerManagementLimit": _IOCTL,
    "nvmlDeviceGetTotalEnergyConsumption": _IOCTL,
    "nvmlDeviceGetClockInfo": _IOCTL,
    "nvmlDeviceGetApplicationsClock": _IOCTL,
    "nvmlDeviceGetPerformanceState": _IOCTL,
    "nvmlDeviceGetCurrentClocksEventReasons": _IOCTL,
    "nvmlDeviceGetFanSpeed_v2": _IOCTL,
    "nvmlDeviceGetCurrPcieLinkGeneration": _IOCTL,
    "nvmlDeviceGetCurrPcieLinkWidth": _IOCTL,
    "nvmlDeviceGetPcieReplayCounter": _IOCTL,
    "nvmlDeviceGetEccMode": _IOCTL,
    "nvmlDeviceGetPersistenceMode": _IOCTL,
    "nvmlDeviceGetMigMode": _IOCTL,
    "nvmlDeviceGetNvLinkState": _IOCTL,
    "nvmlDeviceGetNvLinkErrorCounter": _IOCTL,
    "nvmlDeviceRegisterEvents": _IOCTL,
    # measured
    "nvmlDeviceGetPowerUsage": CallCost(
        365, "measured: ~2,743 calls/s through pynvml on a Tesla K40m (gpustat #76)"),
    # buffers
    "nvmlDeviceGetTotalEccErrors": _BUFFER,
    "nvmlDeviceGetRemappedRows": _BUFFER,
    "nvmlDeviceGetFieldValues": _BUFFER,
    "nvmlDeviceGetComputeRunningProcesses_v3": _BUFFER,
    "nvmlDeviceGetGraphicsRunningProcesses_v3": _BUFFER,
    "nvmlDeviceGetProcessUtilization": _SAMPLES,
    "nvmlDeviceGetSamples": _SAMPLES,
    "nvmlGpmSampleGet": CallCost(500, "estimate: a GPM sample is copied from the GPU"),
    "nvmlGpmMigSampleGet": CallCost(500, "estimate: a GPM sample is copied from the GPU"),
    "nvmlGpmMetricsGet": CallCost(20, "estimate: computed on the CPU from two samples"),
    # documented
    "nvmlDeviceGetPcieThroughput": CallCost(
        20_000, "documented: samples a byte counter over 20 ms (NVML reference)"),
}

# Per-call latency in microseconds, the shape SimulatedNode(latency_us=...) takes.
NVML_LATENCY_US: dict[str, float] = {name: cost.us for name, cost in COSTS.items()}


def latency_table() -> list[tuple[str, float, str]]:
    """(C function, microseconds, source) sorted by cost, for documentation."""
    return sorted(((n, c.us, c.source) for n, c in COSTS.items()), key=lambda r: (-r[1], r[0]))
