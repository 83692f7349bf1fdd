"""The device-scope fields of nvmlDeviceGetFieldValues that answer what a call
of their own answers (energy, power and its limits, ECC mode and totals, the
PCIe replay counter, remapped rows): each answers from the same state as its
call, and is NOT_SUPPORTED where the board does not answer the call.

Value types as the driver (and NVIDIA's mock library) fills them: power in mW
and the small counts as unsigned int, energy and ECC totals as unsigned long
long.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpu_exporter.nvml import constants as k
from gpu_exporter.simulator.world import GpuState

# nvml.h on NVML_FI_DEV_POWER_AVERAGE: "supported on Ampere (except GA100) or
# newer architectures" (GA100 boards list the field in unsupported_fields).
_AMPERE = 7


@dataclass(frozen=True)
class ScalarField:
    call: str  # the call that answers the same; a board without it lacks the field
    value: Callable[[GpuState], int | None]  # None: NOT_SUPPORTED
    value_type: int
    since_architecture: int = 0


def _ecc(etype: int, counter: int) -> Callable[[GpuState], int | None]:
    # As nvmlDeviceGetTotalEccErrors: not supported with ECC off.
    return lambda st: st.ecc.get((etype, counter)) if st.ecc_enabled else None


def _remapped(part: int) -> Callable[[GpuState], int | None]:
    return lambda st: st.remapped[part]


_UINT, _ULL = k.VALUE_TYPE_UNSIGNED_INT, k.VALUE_TYPE_UNSIGNED_LONG_LONG

SCALAR_FIELDS: dict[int, ScalarField] = {
    k.FI_DEV_ECC_CURRENT: ScalarField("nvmlDeviceGetEccMode", lambda st: int(st.ecc_enabled),
                                      _UINT),
    k.FI_DEV_ECC_SBE_AGG_TOTAL: ScalarField("nvmlDeviceGetTotalEccErrors",
                                            _ecc(k.ECC_CORRECTED, k.ECC_AGGREGATE), _ULL),
    k.FI_DEV_ECC_DBE_AGG_TOTAL: ScalarField("nvmlDeviceGetTotalEccErrors",
                                            _ecc(k.ECC_UNCORRECTED, k.ECC_AGGREGATE), _ULL),
    k.FI_DEV_TOTAL_ENERGY_CONSUMPTION: ScalarField("nvmlDeviceGetTotalEnergyConsumption",
                                                   lambda st: st.energy_mj, _ULL),
    k.FI_DEV_PCIE_REPLAY_COUNTER: ScalarField("nvmlDeviceGetPcieReplayCounter",
                                              lambda st: st.pcie_replays, _UINT),
    k.FI_DEV_REMAPPED_COR: ScalarField("nvmlDeviceGetRemappedRows", _remapped(0), _UINT),
    k.FI_DEV_REMAPPED_UNC: ScalarField("nvmlDeviceGetRemappedRows", _remapped(1), _UINT),
    k.FI_DEV_REMAPPED_PENDING: ScalarField("nvmlDeviceGetRemappedRows", _remapped(2), _UINT),
    k.FI_DEV_REMAPPED_FAILURE: ScalarField("nvmlDeviceGetRemappedRows", _remapped(3), _UINT),
    k.FI_DEV_POWER_AVERAGE: ScalarField("nvmlDeviceGetPowerUsage", lambda st: st.power_mw,
                                        _UINT, since_architecture=_AMPERE),
    k.FI_DEV_POWER_DEFAULT_LIMIT: ScalarField("nvmlDeviceGetPowerManagementDefaultLimit",
                                              lambda st: st.default_limit_mw, _UINT),
    k.FI_DEV_POWER_CURRENT_LIMIT: ScalarField("nvmlDeviceGetEnforcedPowerLimit",
                                              lambda st: st.limit_mw, _UINT),
}
