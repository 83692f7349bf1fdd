"""One GPU's handle (:class:`Device`) and the library as a whole (:class:`Nvml`).

Every method converts NVML's units to base units (bytes, seconds, watts, joules,
hertz, celsius, ratios) and every pynvml exception to :class:`NvmlError`, so the
rest of the exporter never sees the binding. The other areas of NVML (field
values, samples, GPM, events, processes, MIG) have a module each in this
package; their names are importable from here too.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml import fields as field_values_area
from gpu_exporter.nvml import mig as mig_area
from gpu_exporter.nvml import samples as samples_area
from gpu_exporter.nvml.binding import Recorder, install_library, set_recorder, text, translate
from gpu_exporter.nvml.errors import NvmlError, Return
from gpu_exporter.nvml.events import EventSet
from gpu_exporter.nvml.fields import field_answers, field_result, union_value
from gpu_exporter.nvml.gpm import GpmSample, gpm_metrics
from gpu_exporter.nvml.mig import GpuInstanceProfile, MigDevice
from gpu_exporter.nvml.processes import ProcessEntry, ProcessSample, process_entries
from gpu_exporter.nvml.samples import get_samples


@dataclass(frozen=True)
class FabricInfo:
    state: str  # not_started | in_progress | completed
    status: str  # the probe's NVML return code, by name ("SUCCESS"); only once completed
    health: str | None  # healthy | unhealthy | limited_capacity; None before R580
    # The health mask's flags the driver reports, by name (FABRIC_HEALTH_FLAGS):
    # True where it reports the issue, False where it reports it absent.
    issues: tuple[tuple[str, bool], ...] = ()


def _fabric(info: Any, health: str | None) -> FabricInfo:
    # The header's state is an unsigned char; pynvml reads it 4 bytes wide, so
    # only the low byte is the driver's.
    mask = int(info.healthMask)
    issues = []
    for name, (shift, width) in c.FABRIC_HEALTH_FLAGS.items():
        flag = (mask >> shift) & width
        if flag:  # 0: the driver does not report this flag
            # 1 is TRUE (for the configuration: NONE, no issue); 2 and up the other.
            issues.append((name, flag >= 2 if name == "incorrect_configuration" else flag == 1))
    return FabricInfo(c.FABRIC_STATES.get(int(info.state) & 0xFF, "unknown"),
                      NvmlError(int(info.status)).name, health, tuple(issues))


def _byte(value: bytes | int) -> int:
    """A c_char member as its number (ctypes gives it as one byte)."""
    return value[0] if isinstance(value, bytes) and value else int(value or 0)


def _printable(raw: bytes) -> str:
    """A fixed-size text field: up to its first NUL, printable ASCII only."""
    return "".join(ch for ch in raw.split(b"\0", 1)[0].decode("ascii", "replace")
                   if ch.isprintable())


class Device:
    """One GPU handle. Methods raise NvmlError; values are in base units."""

    def __init__(self, index: int, handle: Any) -> None:
        self.index = index
        self._h = handle

    # --- identity (static) -------------------------------------------------
    @translate("nvmlDeviceGetName")
    def name(self) -> str:
        return text(pynvml.nvmlDeviceGetName(self._h))

    @translate("nvmlDeviceGetUUID")
    def uuid(self) -> str:
        return text(pynvml.nvmlDeviceGetUUID(self._h))

    @translate("nvmlDeviceGetSerial")
    def serial(self) -> str:
        return text(pynvml.nvmlDeviceGetSerial(self._h))

    @translate("nvmlDeviceGetPciInfo_v3")
    def pci_bus_id(self) -> str:
        info = pynvml.nvmlDeviceGetPciInfo_v3(self._h)
        return text(info.busId)

    @translate("nvmlDeviceGetVbiosVersion")
    def vbios_version(self) -> str:
        return text(pynvml.nvmlDeviceGetVbiosVersion(self._h))

    @translate("nvmlDeviceGetArchitecture")
    def architecture(self) -> str:
        code = pynvml.nvmlDeviceGetArchitecture(self._h)
        return c.ARCHITECTURES.get(int(code), "unknown")

    @translate("nvmlDeviceGetCudaComputeCapability")
    def compute_capability(self) -> str:
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(self._h)
        return f"{major}.{minor}"

    # --- utilization and memory -------------------------------------------
    @translate("nvmlDeviceGetUtilizationRates")
    def utilization(self) -> tuple[float, float]:
        """(GPU busy, memory controller busy) as ratios."""
        u = pynvml.nvmlDeviceGetUtilizationRates(self._h)
        return u.gpu / 100.0, u.memory / 100.0

    @translate("nvmlDeviceGetMemoryInfo_v2")
    def memory(self) -> tuple[int, int, int]:
        """(total, reserved, used) bytes; v2's ``used`` excludes ``reserved``."""
        m = pynvml.nvmlDeviceGetMemoryInfo(self._h, version=c.MEMORY_V2_VERSION)
        return int(m.total), int(m.reserved), int(m.used)

    @translate("nvmlDeviceGetMemoryInfo")
    def memory_v1(self) -> tuple[int, int | None, int]:
        """Fallback for drivers without the v2 call; reserved is unknown (None)."""
        m = pynvml.nvmlDeviceGetMemoryInfo(self._h)
        return int(m.total), None, int(m.used)

    # --- temperature --------------------------------------------------------
    @translate("nvmlDeviceGetTemperature")
    def temperature(self) -> float:
        return float(pynvml.nvmlDeviceGetTemperature(self._h, c.TEMPERATURE_GPU))

    @translate("nvmlDeviceGetTemperatureThreshold")
    def temperature_threshold(self, threshold: int) -> float:
        return float(pynvml.nvmlDeviceGetTemperatureThreshold(self._h, threshold))

    # --- power and energy ---------------------------------------------------
    @translate("nvmlDeviceGetPowerUsage")
    def power_watts(self) -> float:
        return float(pynvml.nvmlDeviceGetPowerUsage(self._h)) / 1000.0

    @translate("nvmlDeviceGetEnforcedPowerLimit")
    def power_limit_watts(self) -> float:
        return float(pynvml.nvmlDeviceGetEnforcedPowerLimit(self._h)) / 1000.0

    @translate("nvmlDeviceGetPowerManagementDefaultLimit")
    def power_default_limit_watts(self) -> float:
        return float(pynvml.nvmlDeviceGetPowerManagementDefaultLimit(self._h)) / 1000.0

    @translate("nvmlDeviceGetTotalEnergyConsumption")
    def energy_joules(self) -> float:
        return float(pynvml.nvmlDeviceGetTotalEnergyConsumption(self._h)) / 1000.0

    # --- clocks and performance state ---------------------------------------
    @translate("nvmlDeviceGetClockInfo")
    def clock_hz(self, clock: int) -> float:
        return float(pynvml.nvmlDeviceGetClockInfo(self._h, clock)) * 1e6

    @translate("nvmlDeviceGetMaxClockInfo")
    def max_clock_hz(self, clock: int) -> float:
        return float(pynvml.nvmlDeviceGetMaxClockInfo(self._h, clock)) * 1e6

    @translate("nvmlDeviceGetApplicationsClock")
    def application_clock_hz(self, clock: int) -> float:
        return float(pynvml.nvmlDeviceGetApplicationsClock(self._h, clock)) * 1e6

    @translate("nvmlDeviceGetDefaultApplicationsClock")
    def default_application_clock_hz(self, clock: int) -> float:
        return float(pynvml.nvmlDeviceGetDefaultApplicationsClock(self._h, clock)) * 1e6

    @translate("nvmlDeviceGetPerformanceState")
    def performance_state(self) -> int:
        return int(pynvml.nvmlDeviceGetPerformanceState(self._h))

    @translate("nvmlDeviceGetCurrentClocksEventReasons")
    def clock_event_reasons(self) -> int:
        return int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(self._h))

    @translate("nvmlDeviceGetSupportedClocksEventReasons")
    def supported_clock_event_reasons(self) -> int:
        return int(pynvml.nvmlDeviceGetSupportedClocksEventReasons(self._h))

    # The same two readings under their names before R535 (deprecated since,
    # still exported through R580): drivers that lack the new names, or answer
    # them NOT_SUPPORTED, answer these.
    @translate("nvmlDeviceGetCurrentClocksThrottleReasons")
    def clock_throttle_reasons(self) -> int:
        return int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(self._h))

    @translate("nvmlDeviceGetSupportedClocksThrottleReasons")
    def supported_clock_throttle_reasons(self) -> int:
        return int(pynvml.nvmlDeviceGetSupportedClocksThrottleReasons(self._h))

    # --- the GPU fabric (NVSwitch / NVL systems) ------------------------------
    @translate("nvmlDeviceGetGpuFabricInfoV")
    def fabric_info_v3(self) -> FabricInfo:
        """The fabric probe with its health summary (R580 and newer)."""
        info = pynvml.c_nvmlGpuFabricInfo_v3_t()
        pynvml.nvmlDeviceGetGpuFabricInfoV(self._h, ctypes.byref(info))
        return _fabric(info, c.FABRIC_HEALTH_SUMMARIES.get(int(info.healthSummary), "unknown"))

    @translate("nvmlDeviceGetGpuFabricInfoV")
    def fabric_info_v2(self) -> FabricInfo:
        """The fabric probe without a health summary (R550 to R575)."""
        info = pynvml.c_nvmlGpuFabricInfo_v2_t()
        pynvml.nvmlDeviceGetGpuFabricInfoV(self._h, ctypes.byref(info))
        return _fabric(info, None)

    # --- fans ---------------------------------------------------------------
    @translate("nvmlDeviceGetNumFans")
    def fan_count(self) -> int:
        return int(pynvml.nvmlDeviceGetNumFans(self._h))

    @translate("nvmlDeviceGetFanSpeed_v2")
    def fan_speed_ratio(self, fan: int) -> float:
        # NVML's percent of the fan's intended maximum; it can exceed 100.
        return float(pynvml.nvmlDeviceGetFanSpeed_v2(self._h, fan)) / 100.0

    # --- PCIe ---------------------------------------------------------------
    @translate("nvmlDeviceGetCurrPcieLinkGeneration")
    def pcie_link_generation(self) -> int:
        return int(pynvml.nvmlDeviceGetCurrPcieLinkGeneration(self._h))

    @translate("nvmlDeviceGetMaxPcieLinkGeneration")
    def pcie_link_generation_max(self) -> int:
        # The maximum of this GPU *in this system* (the lower of card and slot),
        # so a Gen5 card in a Gen4 slot is not reported as downtrained.
        return int(pynvml.nvmlDeviceGetMaxPcieLinkGeneration(self._h))

    @translate("nvmlDeviceGetCurrPcieLinkWidth")
    def pcie_link_width(self) -> int:
        return int(pynvml.nvmlDeviceGetCurrPcieLinkWidth(self._h))

    @translate("nvmlDeviceGetMaxPcieLinkWidth")
    def pcie_link_width_max(self) -> int:
        return int(pynvml.nvmlDeviceGetMaxPcieLinkWidth(self._h))

    @translate("nvmlDeviceGetPcieReplayCounter")
    def pcie_replays(self) -> int:
        return int(pynvml.nvmlDeviceGetPcieReplayCounter(self._h))

    # --- field values -------------------------------------------------------
    @translate("nvmlDeviceGetFieldValues")
    def field_values(self, field_ids: Sequence[int]) -> dict[int, float | NvmlError]:
        """Each field's value, or the NvmlError of that field's own return code."""
        if field_values_area.FIELD_LAYOUT is None:
            raw = pynvml.nvmlDeviceGetFieldValues(self._h, list(field_ids))
            return {int(fv.fieldId): field_result(fv) for fv in raw}
        request = tuple((int(fid), 0) for fid in field_ids)
        return {fid: value for (fid, _scope), value in field_answers(self._h, request).items()}

    @translate("nvmlDeviceGetFieldValues")
    def scoped_field_values(self, fields: Sequence[tuple[int, int]],
                            ) -> dict[tuple[int, int], float | NvmlError]:
        """Like field_values for (field id, scope id) pairs, e.g. per NVLink link.

        Pass the same tuple every poll where possible: the request array is
        prepared once per distinct request, and its pairs are the answer's keys."""
        if field_values_area.FIELD_LAYOUT is None:
            raw = pynvml.nvmlDeviceGetFieldValues(self._h, list(fields))
            return {(int(fv.fieldId), int(fv.scopeId)): field_result(fv) for fv in raw}
        return field_answers(self._h, fields if isinstance(fields, tuple) else tuple(fields))

    # --- sub-second samples ---------------------------------------------------
    @translate("nvmlDeviceGetSamples")
    def samples(self, kind: int, last_seen_us: int) -> list[tuple[int, float]]:
        """(timestamp in µs, value in NVML's unit) of the driver's samples newer than
        ``last_seen_us``; [] when there are none (NOT_FOUND)."""
        try:
            if samples_area.SAMPLE_LAYOUTS is not None:
                return get_samples(self._h, kind, last_seen_us)
            vtype, raw = pynvml.nvmlDeviceGetSamples(self._h, kind, last_seen_us)
        except pynvml.NVMLError as exc:
            if exc.value == Return.NOT_FOUND:
                return []
            raise
        return [(int(smp.timeStamp), union_value(int(vtype), smp.sampleValue)) for smp in raw]

    # --- GPM ------------------------------------------------------------------
    @translate("nvmlGpmQueryDeviceSupport")
    def gpm_supported(self) -> bool:
        return bool(pynvml.nvmlGpmQueryDeviceSupport(self._h).isSupportedDevice)

    @translate("nvmlGpmSampleGet")
    def gpm_sample(self, sample: GpmSample) -> None:
        pynvml.nvmlGpmSampleGet(self._h, sample.raw)

    @translate("nvmlGpmMigSampleGet")
    def gpm_mig_sample(self, gpu_instance: int, sample: GpmSample) -> None:
        pynvml.nvmlGpmMigSampleGet(self._h, gpu_instance, sample.raw)

    # --- the newest boards' health and place (Blackwell, Grace) ---------------
    @translate("nvmlDeviceGetRepairStatus")
    def repair_pending(self) -> tuple[bool, bool]:
        """(a channel repair pending, a TPC repair pending): R580 and newer."""
        channel, tpc = pynvml.nvmlDeviceGetRepairStatus(self._h)
        return bool(channel), bool(tpc)

    @translate("nvmlDeviceGetUnrepairableMemoryFlag_v1")
    def unrepairable_memory(self) -> bool:
        """Whether the GPU has memory no repair can fix: R590 and newer."""
        return bool(pynvml.nvmlDeviceGetUnrepairableMemoryFlag_v1(self._h))

    @translate("nvmlDeviceGetC2cModeInfoV")
    def c2c_enabled(self) -> bool:
        """Whether the NVLink chip-to-chip link to a Grace CPU is on."""
        return bool(pynvml.nvmlDeviceGetC2cModeInfoV(self._h).isC2cEnabled)

    @translate("nvmlDeviceGetPlatformInfo")
    def platform_location(self) -> tuple[str, str, str]:
        """(chassis serial number, slot number, tray index) of the GPU in its
        rack, through nvmlPlatformInfo_v2 (R570 and newer)."""
        info = pynvml.c_nvmlPlatformInfo_v2_t()
        pynvml.nvmlDeviceGetPlatformInfo(self._h, ctypes.byref(info))
        return (_printable(bytes(info.chassisSerialNumber)), str(_byte(info.slotNumber)),
                str(_byte(info.trayIndex)))

    @translate("nvmlDeviceGetPlatformInfo")
    def platform_location_v1(self) -> tuple[str, str, str]:
        """The same through nvmlPlatformInfo_v1 (R565: the rack GUID, the
        chassis' physical slot and the compute slot)."""
        info = pynvml.c_nvmlPlatformInfo_v1_t()
        pynvml.nvmlDeviceGetPlatformInfo(self._h, ctypes.byref(info))
        return (bytes(info.rackGuid).hex(), str(_byte(info.chassisPhysicalSlotNumber)),
                str(_byte(info.computeSlotIndex)))

    @translate("nvmlSystemGetConfComputeState")
    def confidential_computing(self) -> str:
        """The node's confidential-computing mode, which every GPU of it runs
        in: "on", "devtools" (on, with the tools' access open) or "off"."""
        state = pynvml.nvmlSystemGetConfComputeState()
        if not state.ccFeature:
            return "off"
        return "devtools" if state.devToolsMode else "on"

    # --- events ---------------------------------------------------------------
    @translate("nvmlDeviceGetSupportedEventTypes")
    def supported_event_types(self) -> int:
        return int(pynvml.nvmlDeviceGetSupportedEventTypes(self._h))

    @translate("nvmlDeviceRegisterEvents")
    def register_events(self, types: int, event_set: EventSet) -> None:
        pynvml.nvmlDeviceRegisterEvents(self._h, types, event_set.raw)

    @property
    def handle_value(self) -> int:
        """The handle's address, to match devices named in event data."""
        return int(ctypes.cast(self._h, ctypes.c_void_p).value or 0)

    # --- MIG ------------------------------------------------------------------
    @translate("nvmlDeviceGetMigMode")
    def mig_mode(self) -> bool:
        current, _pending = pynvml.nvmlDeviceGetMigMode(self._h)
        return bool(current)

    @translate("nvmlDeviceGetMaxMigDeviceCount")
    def max_mig_devices(self) -> int:
        return int(pynvml.nvmlDeviceGetMaxMigDeviceCount(self._h))

    @translate("nvmlDeviceGetMigDeviceHandleByIndex")
    def mig_device(self, slot: int) -> MigDevice:
        return MigDevice(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(self._h, slot))

    # The two calls' own errors name them; the whole is seen by the recorder as
    # the profile ID of a GPU instance ID.
    @translate("nvmlGpuInstanceGetInfo")
    def gpu_instance_profile_id(self, gpu_instance: int) -> int:
        """The profile ID of one of the GPU's GPU instances (a privileged read)."""
        return mig_area.gpu_instance_profile_id(mig_area.gpu_instance(self._h, gpu_instance))

    @translate("nvmlDeviceGetGpuInstanceProfileInfoV")
    def gpu_instance_profiles(self) -> tuple[GpuInstanceProfile, ...]:
        """The GPU's GPU instance profiles (ID, name, size), read once per GPU."""
        return mig_area.gpu_instance_profiles(self._h)

    # --- NVLink -------------------------------------------------------------
    @translate("nvmlDeviceGetNvLinkState")
    def nvlink_active(self, link: int) -> bool:
        """Whether the link is active: the per-link call every branch has (the
        state field came in R525)."""
        return bool(pynvml.nvmlDeviceGetNvLinkState(self._h, link))

    # --- ECC, row remapping, persistence ------------------------------------
    @translate("nvmlDeviceGetEccMode")
    def ecc_mode(self) -> tuple[bool, bool]:
        current, pending = pynvml.nvmlDeviceGetEccMode(self._h)
        return bool(current), bool(pending)

    @translate("nvmlDeviceGetTotalEccErrors")
    def ecc_errors(self, error_type: int, counter: int) -> int:
        return int(pynvml.nvmlDeviceGetTotalEccErrors(self._h, error_type, counter))

    @translate("nvmlDeviceGetRemappedRows")
    def remapped_rows(self) -> tuple[int, int, bool, bool]:
        """(correctable, uncorrectable, pending, failed)."""
        corr, unc, pending, failed = pynvml.nvmlDeviceGetRemappedRows(self._h)
        return int(corr), int(unc), bool(pending), bool(failed)

    # --- processes --------------------------------------------------------
    @translate("nvmlDeviceGetComputeRunningProcesses_v3")
    def compute_processes(self) -> list[ProcessEntry]:
        return process_entries(pynvml.nvmlDeviceGetComputeRunningProcesses_v3(self._h), False)

    @translate("nvmlDeviceGetGraphicsRunningProcesses_v3")
    def graphics_processes(self) -> list[ProcessEntry]:
        return process_entries(pynvml.nvmlDeviceGetGraphicsRunningProcesses_v3(self._h), True)

    # The lists drivers before R535 export (the _v3 names came in R535; the
    # struct is the same).
    @translate("nvmlDeviceGetComputeRunningProcesses_v2")
    def compute_processes_v2(self) -> list[ProcessEntry]:
        return process_entries(pynvml.nvmlDeviceGetComputeRunningProcesses_v2(self._h), False)

    @translate("nvmlDeviceGetGraphicsRunningProcesses_v2")
    def graphics_processes_v2(self) -> list[ProcessEntry]:
        return process_entries(pynvml.nvmlDeviceGetGraphicsRunningProcesses_v2(self._h), True)

    @translate("nvmlDeviceGetProcessUtilization")
    def process_samples(self, last_seen_us: int) -> list[ProcessSample]:
        """Per-process samples newer than ``last_seen_us``; [] when there are none
        (NVML's NOT_FOUND, which is normal, not an error)."""
        try:
            raw = pynvml.nvmlDeviceGetProcessUtilization(self._h, last_seen_us)
        except pynvml.NVMLError as exc:
            if exc.value == Return.NOT_FOUND:
                return []
            raise
        return [ProcessSample(int(s.pid), int(s.timeStamp), s.smUtil / 100.0,
                              s.memUtil / 100.0) for s in raw]

    @translate("nvmlDeviceGetPersistenceMode")
    def persistence_mode(self) -> bool:
        return bool(pynvml.nvmlDeviceGetPersistenceMode(self._h))



class Nvml:
    """The NVML library as a whole: init, shutdown, system facts, device handles."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.initialized = False

    @translate("nvmlInitWithFlags")
    def init(self) -> None:
        with self._lock:
            if not self.initialized:
                pynvml.nvmlInit()
                self.initialized = True

    @translate("nvmlShutdown")
    def shutdown(self) -> None:
        with self._lock:
            if self.initialized:
                self.initialized = False
                pynvml.nvmlShutdown()

    @translate("nvmlSystemGetDriverVersion")
    def driver_version(self) -> str:
        return text(pynvml.nvmlSystemGetDriverVersion())

    @translate("nvmlSystemGetCudaDriverVersion")
    def cuda_driver_version(self) -> str:
        v = int(pynvml.nvmlSystemGetCudaDriverVersion())
        return f"{v // 1000}.{(v % 1000) // 10}"

    @translate("nvmlDeviceGetCount_v2")
    def device_count(self) -> int:
        return int(pynvml.nvmlDeviceGetCount())

    @translate("nvmlDeviceGetHandleByIndex_v2")
    def device(self, index: int) -> Device:
        return Device(index, pynvml.nvmlDeviceGetHandleByIndex(index))

    def devices(self) -> Iterable[Device]:
        for i in range(self.device_count()):
            yield self.device(i)


__all__ = ["Device", "EventSet", "GpmSample", "GpuInstanceProfile", "MigDevice", "Nvml",
           "ProcessEntry", "ProcessSample", "Recorder", "gpm_metrics", "install_library",
           "set_recorder"]
