"""How a reason for a row not judged names what was absent: the words for a
reading NVML did not give, a host figure, a process figure (coverage.py)."""

from __future__ import annotations

from gpu_exporter.facts.drivers import FIRST_BRANCH, branch
from gpu_exporter.poll.readings import GpuReading

# How a person names what NVML did not give (GpuReading's fields); a field not
# named here is said by its name.
NVML_WORDS: dict[str, str] = {
    "utilization": "GPU utilization",
    "memory_used_bytes": "memory usage", "memory_total_bytes": "memory usage",
    "memory_used_ratio": "memory usage",
    "temperature_celsius": "temperature", "slowdown_celsius": "slowdown temperature",
    "power_watts": "power draw", "power_limit_watts": "power limit",
    "power_default_limit_watts": "default power limit",
    "clocks_hz": "SM clock", "clocks_max_hz": "maximum SM clock",
    "clocks_application_hz": "application clocks",
    "clocks_application_default_hz": "default application clocks",
    "throttle_reasons": "throttle reasons",
    "pcie_generation": "PCIe link state", "pcie_generation_max": "PCIe link state",
    "pcie_width": "PCIe link state", "pcie_width_max": "PCIe link state",
    "pcie_replays": "PCIe replay counter",
    "ecc_uncorrected_volatile": "ECC error counts (ECC off, or not on this board)",
    "remap_pending": "row remapping state", "remap_failed": "row remapping state",
    "persistence_mode": "persistence mode",
    "fan_speeds": "fan speed",
    "gpm": "GPM metrics (Hopper and newer)",
    "recovery_action": "recovery action",
    "c2c_errors": "C2C link error counts",
    "fabric_state": "NVSwitch fabric state (Hopper and newer in an NVSwitch system)",
}
HOST_WORDS: dict[str, str] = {
    "iowait_ratio": "no CPU iowait reading (/proc/stat)",
    "io_pressure_some": "no pressure stall information from the kernel (PSI, /proc/pressure)",
    "cpu_pressure_some": "no pressure stall information from the kernel (PSI, /proc/pressure)",
    "memory_pressure_full": "no pressure stall information from the kernel (PSI, "
                            "/proc/pressure)",
    "swap_bytes_per_s": "no swap activity reading (/proc/vmstat)",
}
PROCESS_WORDS: dict[str, str] = {
    "cpu_ratio": "no CPU time read yet for its processes (/proc/PID/stat)",
    "affinity_local": "no CPU affinity read for its processes (/proc/PID/status)",
    "run_queue_wait_ratio": "no run queue wait read for its processes (/proc/PID/schedstat)",
}


def nvml(field: str) -> str:
    """How a person names ``field`` of GpuReading."""
    return NVML_WORDS.get(field, field.replace("_", " "))


def host(field: str) -> str:
    """Why a host figure the rule reads is absent."""
    return HOST_WORDS.get(field, f"no host {field.replace('_', ' ')} reading")


def process(field: str) -> str:
    """Why a figure of the GPU's processes the rule reads is absent."""
    return PROCESS_WORDS.get(field, f"no {field} read for its processes")


def not_offered(field: str, driver_version: str) -> str:
    """What NVML did not give for ``field`` on a GPU under ``driver_version``,
    saying which of two different facts it is where a driver branch brought
    the call: a driver older than that branch, or a GPU that answers it not
    supported under a driver that has it (the fix is not a driver update).
    Where the words already name the boards that have it ("Hopper and
    newer"), a driver that has the call adds nothing to them."""
    words = nvml(field)
    since = FIRST_BRANCH.get(field)
    if since is None:
        return words
    head, paren, rest = words.partition(" (")
    have = branch(driver_version)
    if have == 0:
        note = f"drivers R{since} and newer"
    elif have < since:
        note = f"driver R{have} is older than R{since}, the first to have it"
    elif paren:
        return words
    else:
        note = f"driver R{have} has it; this GPU answers it not supported"
    return f"{head} ({rest.removesuffix(')')}; {note})" if paren else f"{words} ({note})"


def driver_branch(version: str) -> str:
    """``R550`` for driver 550.163.01; the version as it is where it has no
    major number."""
    major = version.split(".", 1)[0]
    return f"R{major}" if major.isdigit() else version or "an unknown driver"


def board_and_driver(gpu: GpuReading) -> str:
    """``NVIDIA H100 80GB HBM3 / driver R550``: where a check is not offered."""
    return f"{gpu.name or 'this board'} / driver {driver_branch(gpu.driver_version)}"
