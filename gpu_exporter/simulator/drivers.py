"""The driver branches fleets still run, as data: what each one's NVML answers.

A branch differs from the newest one by the C symbols its ``libnvidia-ml.so.1``
does not export (pynvml then raises FUNCTION_NOT_FOUND), the field ids it does
not know, and the struct versions it accepts. Everything the simulator
implements that is not listed below is in every branch here: NVIDIA's change
log lists every addition since R470, and none of the others is among them.

Source of every fact, unless a line says otherwise: NVIDIA's NVML change log,
https://docs.nvidia.com/deploy/nvml-api/change-log.html (section "Changes
between vA and vB": the function or field is first in branch B).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_exporter.nvml import constants as k


@dataclass(frozen=True)
class DriverBranch:
    name: str  # "R535"
    number: int  # 535
    driver_version: str  # a real release of the branch
    cuda_driver_version: int  # the CUDA version the branch ships (nvmlSystemGetCudaDriverVersion)


# Oldest first. The versions are published releases of each branch.
BRANCHES: tuple[DriverBranch, ...] = (
    DriverBranch("R470", 470, "470.256.02", 11040),
    DriverBranch("R525", 525, "525.147.05", 12000),
    DriverBranch("R535", 535, "535.247.01", 12020),
    DriverBranch("R550", 550, "550.163.01", 12040),
    DriverBranch("R570", 570, "570.158.01", 12080),
    DriverBranch("R580", 580, "580.159.04", 13000),
)
BY_NAME: dict[str, DriverBranch] = {b.name: b for b in BRANCHES}
NEWEST = BRANCHES[-1]

# C symbol -> the first branch that exports it.
SYMBOL_SINCE: dict[str, int] = {
    # "Changes between v495 and v510"
    "nvmlDeviceGetMemoryInfo_v2": 510,
    "nvmlDeviceGetNumFans": 510,
    # Same section: the versioned GPU instance profile query, "to include the
    # profile name in their output" (the unversioned one has no name).
    "nvmlDeviceGetGpuInstanceProfileInfoV": 510,
    # "Changes between v515 and v520": the GPM API
    "nvmlGpmQueryDeviceSupport": 520,
    "nvmlGpmSampleAlloc": 520,
    "nvmlGpmSampleFree": 520,
    "nvmlGpmSampleGet": 520,
    "nvmlGpmMetricsGet": 520,
    # Not listed on its own; taken to come with the rest of the GPM API.
    "nvmlGpmMigSampleGet": 520,
    # "Changes between v530 and v535": ClockEventReasons introduced (the
    # ThrottleReasons calls deprecated, still exported through R580), and the
    # _v3 process lists.
    "nvmlDeviceGetCurrentClocksEventReasons": 535,
    "nvmlDeviceGetSupportedClocksEventReasons": 535,
    "nvmlDeviceGetComputeRunningProcesses_v3": 535,
    "nvmlDeviceGetGraphicsRunningProcesses_v3": 535,
    # "Changes between v545 and v550"
    "nvmlDeviceGetGpuFabricInfoV": 550,
}

# nvmlDeviceGetFieldValues field id -> the first branch that knows it. An older
# branch answers that field NOT_SUPPORTED in its own nvmlReturn (the change log
# does not say which code; NOT_SUPPORTED is what every other absent field gets).
FIELD_SINCE: dict[int, int] = {
    k.FI_DEV_NVLINK_GET_STATE: 525,  # "Changes between v520 and v525"
    k.FI_DEV_PCIE_COUNT_TX_BYTES: 555,  # "Changes between v550 and v555"
    k.FI_DEV_PCIE_COUNT_RX_BYTES: 555,  # same section
    k.FI_DEV_GET_GPU_RECOVERY_ACTION: 565,  # "Changes between v560 and v565"
    # Not in the change log: nvml.h of CUDA 12.1 (R530) ends at NVML_FI_MAX 173,
    # that of CUDA 12.2 (R535) defines the power fields 185-192 (NVIDIA's
    # headers as NVIDIA/go-nvml publishes them, "Bump to NVML version 12.2").
    k.FI_DEV_POWER_AVERAGE: 535,
    k.FI_DEV_POWER_DEFAULT_LIMIT: 535,
    k.FI_DEV_POWER_CURRENT_LIMIT: 535,
    # Not in the change log either: the C2C error fields 231-233 first appear
    # in nvml.h of CUDA 12.9 (R575).
    k.FI_DEV_C2C_LINK_ERROR_INTR: 575,
    k.FI_DEV_C2C_LINK_ERROR_REPLAY: 575,
    k.FI_DEV_C2C_LINK_ERROR_REPLAY_B2B: 575,
    # "Changes between v560 and v565" adds NVLink 5's effective-error fields;
    # the symbol-error fields beside them in nvml.h are taken as the same branch.
    k.FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS: 565,
    k.FI_DEV_NVLINK_COUNT_EFFECTIVE_BER: 565,
    k.FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS: 565,
    k.FI_DEV_NVLINK_COUNT_SYMBOL_BER: 565,
}

# nvmlEventType bit -> the first branch that offers it: an older branch leaves
# it out of nvmlDeviceGetSupportedEventTypes and refuses to register it.
EVENT_TYPE_SINCE: dict[int, int] = {
    # "Changes between v555 and v560": the ECC storm, DRAM retirement and
    # poison event types.
    k.EVENT_SINGLE_BIT_ECC_STORM: 560,
    k.EVENT_DRAM_RETIREMENT: 560,
    k.EVENT_DRAM_RETIREMENT_FAILURE: 560,
    k.EVENT_NON_FATAL_POISON: 560,
    k.EVENT_FATAL_POISON: 560,
    # "Changes between v560 and v565"
    k.EVENT_GPU_UNAVAILABLE: 565,
    k.EVENT_GPU_RECOVERY_ACTION: 565,
}

# nvmlGpuFabricInfoV_t struct version -> the first branch that accepts it; an
# older one answers ARGUMENT_VERSION_MISMATCH. v2 (healthMask) came with
# nvmlDeviceGetGpuFabricInfoV ("v545 and v550"); v3 (healthSummary) in "v575
# and v580".
FABRIC_INFO_VERSION_SINCE: dict[int, int] = {2: 550, 3: 580}


# nvmlGpuInstanceProfileInfo_v*_t struct version -> the first branch that
# accepts it in nvmlDeviceGetGpuInstanceProfileInfoV; an older one answers
# ARGUMENT_VERSION_MISMATCH. v2 came with the call (R510); v3 (capabilities
# instead of isP2pSupported) in "v535 and v545": R550 is the first branch here.
GPU_INSTANCE_PROFILE_INFO_VERSION_SINCE: dict[int, int] = {2: 510, 3: 545}

# How many NVML_GPU_INSTANCE_PROFILE_* values a branch knows, by the first
# branch of each count: it answers INVALID_ARGUMENT from that value on (nvml.h:
# "enumerate ... starting from 0, until the API returns INVALID_ARGUMENT").
# 1_SLICE_REV1 (0x7) came in R470 ("v465 and v470"; 0x8 and 0x9 are not dated
# there, taken to be in every branch here), the GFX profiles 0xA-0xC in "v565
# and v570", the _NO_ME/_ALL_ME profiles 0xD-0x10 in "v570 Update and v575",
# 3_SLICE_GFX 0x11 in "v590 and v595".
GPU_INSTANCE_PROFILES_KNOWN_SINCE: dict[int, int] = {470: 0x0A, 570: 0x0D, 575: 0x11,
                                                     595: 0x12}


def gpu_instance_profiles_known(branch: DriverBranch) -> int:
    """The number of NVML_GPU_INSTANCE_PROFILE_* values ``branch`` answers for."""
    return max(count for since, count in GPU_INSTANCE_PROFILES_KNOWN_SINCE.items()
               if since <= branch.number)


def exports(branch: DriverBranch, symbol: str) -> bool:
    return SYMBOL_SINCE.get(symbol, 0) <= branch.number


def knows_field(branch: DriverBranch, field_id: int) -> bool:
    return FIELD_SINCE.get(field_id, 0) <= branch.number


def event_types(branch: DriverBranch, board: int) -> int:
    """The event types a board offers under ``branch``: those of the board's
    mask the branch knows."""
    unknown = sum(bit for bit, since in EVENT_TYPE_SINCE.items() if since > branch.number)
    return board & ~unknown
