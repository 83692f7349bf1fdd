"""The GPU's registration with the NVSwitch fabric (HGX / NVL systems)."""

from __future__ import annotations

from ctypes import Structure, c_int, c_ubyte, c_uint

from gpu_exporter.nvml import constants as k
from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.drivers import FABRIC_INFO_VERSION_SINCE
from gpu_exporter.simulator.gpu_state import GpuState
from gpu_exporter.simulator.libnvml.table import OK, STRUCTS, FakeNvmlLibrary, P, nvml_function


class FabricInfoV2(Structure):  # nvmlGpuFabricInfo_v2_t
    _fields_ = [("version", c_uint), ("clusterUuid", c_ubyte * 16), ("status", c_int),
                ("cliqueId", c_uint), ("state", c_ubyte), ("healthMask", c_uint)]


class FabricInfoV3(Structure):  # nvmlGpuFabricInfo_v3_t
    _fields_ = [*FabricInfoV2._fields_, ("healthSummary", c_ubyte)]


STRUCTS["nvmlGpuFabricInfo_v2_t"] = FabricInfoV2
STRUCTS["nvmlGpuFabricInfo_v3_t"] = FabricInfoV3

_VERSIONS = {k.FABRIC_INFO_V2_VERSION: 2, k.FABRIC_INFO_V3_VERSION: 3}
_STATES = {name: code for code, name in k.FABRIC_STATES.items()}
_HEALTH = {name: code for code, name in k.FABRIC_HEALTH_SUMMARIES.items()}
# The health mask's degraded-bandwidth bits (shift 0, width 2): 1 degraded, 2 not.
_DEGRADED_BW_TRUE, _DEGRADED_BW_FALSE = 1, 2


@nvml_function("nvmlDeviceGetGpuFabricInfoV", P)
def _fabric_info(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    if not out:
        return int(Return.INVALID_ARGUMENT)
    if not lib.world.profile.fabric:
        return int(Return.NOT_SUPPORTED)
    version = _VERSIONS.get(int(c_uint.from_address(out).value))
    if version is None or FABRIC_INFO_VERSION_SINCE[version] > lib.branch.number:
        return int(Return.ARGUMENT_VERSION_MISMATCH)
    c = st.condition
    info = (FabricInfoV3 if version == 3 else FabricInfoV2).from_address(out)
    info.state = _STATES[c.get("fabric_state") or "completed"]
    info.status = int(Return[c.get("fabric_status") or "SUCCESS"])
    info.cliqueId = 1
    health = c.get("fabric_health") or "healthy"
    info.healthMask = _DEGRADED_BW_TRUE if health != "healthy" else _DEGRADED_BW_FALSE
    if isinstance(info, FabricInfoV3):
        info.healthSummary = _HEALTH[health]
    return OK
