"""NVML return codes as the exporter sees them, independent of pynvml.

The numbers are the C ``nvmlReturn_t`` values from ``nvml.h``; a contract test
checks them against the header of the pinned ``nvidia-nvml-dev`` wheel.
"""

from __future__ import annotations

from enum import IntEnum


class Return(IntEnum):
    SUCCESS = 0
    UNINITIALIZED = 1
    INVALID_ARGUMENT = 2
    NOT_SUPPORTED = 3
    NO_PERMISSION = 4
    ALREADY_INITIALIZED = 5
    NOT_FOUND = 6
    INSUFFICIENT_SIZE = 7
    INSUFFICIENT_POWER = 8
    DRIVER_NOT_LOADED = 9
    TIMEOUT = 10
    IRQ_ISSUE = 11
    LIBRARY_NOT_FOUND = 12
    FUNCTION_NOT_FOUND = 13
    CORRUPTED_INFOROM = 14
    GPU_IS_LOST = 15
    RESET_REQUIRED = 16
    OPERATING_SYSTEM = 17
    LIB_RM_VERSION_MISMATCH = 18
    IN_USE = 19
    MEMORY = 20
    NO_DATA = 21
    VGPU_ECC_NOT_SUPPORTED = 22
    INSUFFICIENT_RESOURCES = 23
    FREQ_NOT_SUPPORTED = 24
    ARGUMENT_VERSION_MISMATCH = 25
    DEPRECATED = 26
    NOT_READY = 27
    GPU_NOT_FOUND = 28
    INVALID_STATE = 29
    UNKNOWN = 999


# Codes after which a capability is treated as absent for that GPU: the series is
# not exported and the call is not repeated every poll. ARGUMENT_VERSION_MISMATCH:
# the driver predates the struct version asked for (an older version may answer).
CAPABILITY_ABSENT = frozenset({Return.NOT_SUPPORTED, Return.FUNCTION_NOT_FOUND,
                               Return.ARGUMENT_VERSION_MISMATCH})

# Codes that mean the device itself is gone or unusable until reset.
DEVICE_GONE = frozenset({Return.GPU_IS_LOST, Return.RESET_REQUIRED, Return.GPU_NOT_FOUND})

# Codes that mean NVML as a whole stopped working (driver upgraded or unloaded
# underneath a running exporter): shut down and initialise again later.
LIBRARY_GONE = frozenset({Return.LIB_RM_VERSION_MISMATCH, Return.UNINITIALIZED,
                          Return.DRIVER_NOT_LOADED})

# What an operator should do when NVML cannot be initialised, by code.
_INIT_HINTS: dict[int, str] = {
    Return.LIBRARY_NOT_FOUND: (
        "libnvidia-ml.so.1 was not found: the NVIDIA driver is not installed or not visible "
        "(in a container, run with the NVIDIA container toolkit and "
        "NVIDIA_DRIVER_CAPABILITIES=utility); use --simulate to try the exporter without a GPU"
    ),
    Return.DRIVER_NOT_LOADED: (
        "the NVIDIA kernel driver is not loaded (check `lsmod | grep nvidia` and dmesg)"
    ),
    Return.LIB_RM_VERSION_MISMATCH: (
        "the NVML library and the loaded kernel driver differ in version: the driver was "
        "upgraded without a reboot or module reload; reboot the node or reload the nvidia modules"
    ),
    Return.NO_PERMISSION: (
        "no permission to open the NVIDIA device nodes (/dev/nvidiactl, /dev/nvidia*): run as a "
        "user with read access to them"
    ),
}


def _name(code: int) -> str:
    try:
        return Return(code).name
    except ValueError:
        return f"code {code}"


class NvmlError(Exception):
    """An NVML call failed with ``code`` (an ``nvmlReturn_t``)."""

    def __init__(self, code: int, call: str = "") -> None:
        self.code = int(code)
        self.call = call
        where = f"{call}: " if call else ""
        super().__init__(f"{where}NVML error {_name(code)} ({self.code})")

    @property
    def name(self) -> str:
        return _name(self.code)

    @property
    def capability_absent(self) -> bool:
        return self.code in CAPABILITY_ABSENT

    @property
    def device_gone(self) -> bool:
        return self.code in DEVICE_GONE

    @property
    def library_gone(self) -> bool:
        return self.code in LIBRARY_GONE

    def init_hint(self) -> str:
        """A sentence for the log saying why NVML is unavailable and what to do."""
        return _INIT_HINTS.get(self.code, f"NVML initialisation failed with {self.name}")
