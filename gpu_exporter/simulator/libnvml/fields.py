"""The device-scope fields of nvmlDeviceGetFieldValues that answer what a call
of their own answers (energy, power and its limits, ECC mode and totals, the
PCIe replay counter, remapped rows): each answers from the same state as its
call, and is NOT_SUPPORTED where the board does not answer the call.

Value types as the driver (and NVIDIA's mock library) fills them: power in mW
and the small counts as unsigned int, energy and ECC totals as unsigned long
long.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from gpu_exporter.nvml import constants as k
from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.gpu_state import GpuState
from gpu_exporter.simulator.model import DeviceProfile

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

# NVLink 5's FEC fields, per link (scopeId = link): field id -> (which count,
# whether it is the count's bit-error rate rather than the count). Answered
# on Blackwell boards with NVLink (the world keeps their counts there).
NVLINK_FEC_FIELDS: dict[int, tuple[str, bool]] = {
    k.FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS: ("effective", False),
    k.FI_DEV_NVLINK_COUNT_EFFECTIVE_BER: ("effective", True),
    k.FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS: ("symbol", False),
    k.FI_DEV_NVLINK_COUNT_SYMBOL_BER: ("symbol", True),
}


def pack_ber(rate: float) -> int:
    """A bit-error rate as NVML packs it (nvml.h: the exponent in bits 0-7,
    the mantissa in bits 8-11; the rate is mantissa x 10^-exponent): the
    smallest exponent that keeps the mantissa within its four bits."""
    if rate <= 0.0:
        return 0
    exponent = min(k.NVLINK_BER_EXP_WIDTH, max(0, math.ceil(-math.log10(rate))))
    mantissa = min(k.NVLINK_BER_MANTISSA_WIDTH, round(rate * 10.0 ** exponent))
    return (mantissa << k.NVLINK_BER_MANTISSA_SHIFT) | (exponent << k.NVLINK_BER_EXP_SHIFT)


def nvlink_fec(profile: DeviceProfile, st: GpuState, fid: int, link: int) -> tuple[int, int, int]:
    """(return code, value type, value) of a FEC field for ``link``."""
    links = len(st.nvlink_up)
    if not st.nvlink_fec or fid in profile.unsupported_fields:
        return int(Return.NOT_SUPPORTED), 0, 0
    if link >= links:
        return int(Return.INVALID_ARGUMENT), 0, 0
    kind, rate = NVLINK_FEC_FIELDS[fid]
    if rate:
        return int(Return.SUCCESS), _UINT, pack_ber(st.nvlink_ber[link][kind])
    return int(Return.SUCCESS), _ULL, st.nvlink_fec[link][kind]
