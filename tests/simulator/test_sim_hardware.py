"""The simulator's boards and GPU-side conditions answer as NVML does: the
built-in board profiles report what real boards of that model report (pinned
to public nvidia-smi readings), each fan answers nvmlDeviceGetFanSpeed_v2 on
its own (a stopped fan 0 %, a failing one its error), heat follows the inlet
air and the fans, the driver's thermal control engages at the board's max
operating temperature, nvmlDeviceGetThermalSettings lists the sensors a board
has, each MIG instance carries its own GPM activity, and an Xid can name its
process the way the kernel log does."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pynvml  # tests may look at the binding; the exporter only via the adapter
import pytest

from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.simulator import SimulatedNode, builtin_profiles, load_profile
from gpu_exporter.simulator.model import Scenario
from tests.onegpu import OneGpu
from tests.simnode import SimRun, VirtualClock

MIB = 1024 * 1024

# What nvidia-smi printed on real boards (public logs; the profiles cite them):
# name, memory total (MiB), power cap (W), maximum PCIe generation, fans.
PUBLISHED = {
    "l40s": ("NVIDIA L40S", 46068, 350, 4, 0),
    "t4": ("Tesla T4", 15360, 70, 3, 0),
    "a100-pcie-80gb": ("NVIDIA A100 80GB PCIe", 81920, 300, 4, 0),
    "rtx-6000-ada": ("NVIDIA RTX 6000 Ada Generation", 49140, 300, 4, 1),
    "h100-sxm5-80gb": ("NVIDIA H100 80GB HBM3", 81559, 700, 5, 0),
}


def _nvml(gpu: OneGpu) -> Any:
    gpu.clock.advance(1.0)
    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetHandleByIndex(0)


@pytest.mark.parametrize("key", sorted(PUBLISHED))
def test_board_profiles_report_what_real_boards_report(key: str) -> None:
    name, memory_mib, cap_w, gen, fans = PUBLISHED[key]
    with OneGpu(profile=key, utilization=0.0) as gpu:
        h = _nvml(gpu)
        assert pynvml.nvmlDeviceGetName(h) == name
        assert pynvml.nvmlDeviceGetMemoryInfo(h).total == memory_mib * MIB
        assert pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) == cap_w * 1000
        assert pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h) == gen
        if fans:
            assert pynvml.nvmlDeviceGetNumFans(h) == fans
        else:  # passively cooled: NVML has no fan to read
            with pytest.raises(pynvml.NVMLError_NotSupported):
                pynvml.nvmlDeviceGetFanSpeed_v2(h, 0)


def test_an_idle_rtx_6000_ada_reads_as_the_published_one() -> None:
    # "30%   32C    P8             23W /  300W" (nvidia-smi on a real board)
    with OneGpu(profile="rtx-6000-ada", utilization=0.0) as gpu:
        h = _nvml(gpu)
        assert pynvml.nvmlDeviceGetFanSpeed_v2(h, 0) == 30
        assert pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) == 32
        assert pynvml.nvmlDeviceGetPerformanceState(h) == 8
        assert pynvml.nvmlDeviceGetPowerUsage(h) == 23000


@pytest.mark.parametrize("key", builtin_profiles())
@pytest.mark.parametrize("load", [0.0, 0.92])
def test_every_board_at_rest_and_under_load_is_diagnosed_healthy(key: str, load: float) -> None:
    """A board's own figures (clocks, limits, temperatures) never look like a
    fault: a healthy job on it, idle or busy, yields no finding."""
    procs = [] if not load else [{"pid": 4100, "comm": "python", "gpus": [0], "state": "R",
                                  "gpu_memory_ratio": 0.6, "cpu_ratio": 1.0,
                                  "sm_utilization": load}]
    sc = Scenario(name="board", node={"gpus": 1, "profile": key}, processes=procs,
                  state={"utilization": load, "memory_used_ratio": 0.6 if load else 0.0},
                  host={"cpus": 32, "numa_nodes": 1})
    with SimRun(sc) as run:
        snap = run.poll(64.0, interval=2.0)
    assert [f.row.key for f in snap.derived(FINDINGS) or ()] == []


def test_each_fan_answers_on_its_own() -> None:
    fans = [{"speed_ratio": 0.85}, {"stopped": True}]
    with OneGpu(profile="rtx-4090", utilization=0.9, fans=fans) as gpu:
        h = _nvml(gpu)
        assert pynvml.nvmlDeviceGetNumFans(h) == 2
        assert [pynvml.nvmlDeviceGetFanSpeed_v2(h, k) for k in (0, 1)] == [85, 0]
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceGetFanSpeed_v2(h, 2)


def test_a_failing_fan_answers_its_error() -> None:
    with OneGpu(profile="rtx-4090", utilization=0.5, fans=[{}, {"error": "UNKNOWN"}]) as gpu:
        h = _nvml(gpu)
        assert pynvml.nvmlDeviceGetFanSpeed_v2(h, 0) == round((0.3 + 0.45 * 0.5) * 100)
        with pytest.raises(pynvml.NVMLError_Unknown):
            pynvml.nvmlDeviceGetFanSpeed_v2(h, 1)


def _reading(profile: str, **condition: Any) -> tuple[int, int, int]:
    """(temperature C, clock event reasons, SM clock MHz) of a GPU in ``condition``."""
    with OneGpu(profile=profile, **condition) as gpu:
        h = _nvml(gpu)
        return (pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
                pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))


def test_a_stopped_fan_heats_a_busy_gpu_until_the_driver_slows_it() -> None:
    profile = load_profile("rtx-6000-ada")
    cool_temp, cool_reasons, cool_clock = _reading("rtx-6000-ada", utilization=0.9)
    hot_temp, hot_reasons, hot_clock = _reading("rtx-6000-ada", utilization=0.9,
                                                fans=[{"stopped": True}])
    assert cool_temp < profile.temperature_thresholds_c.max_operating
    assert not cool_reasons & pynvml.nvmlClocksEventReasonSwThermalSlowdown
    assert cool_clock == profile.clocks_max_mhz.sm
    # The blower stopped: the GPU reaches its max operating temperature, where
    # the driver's thermal control (sw_thermal) holds it by lowering the clocks.
    assert hot_temp == profile.temperature_thresholds_c.max_operating
    assert hot_reasons & pynvml.nvmlClocksEventReasonSwThermalSlowdown
    assert hot_clock < cool_clock


def test_the_gpu_temperature_follows_the_inlet_air() -> None:
    base, _, _ = _reading("t4", utilization=0.3)
    warm, reasons, _ = _reading("t4", utilization=0.3, inlet_temperature_c=35)
    assert warm - base == 10
    assert not reasons & pynvml.nvmlClocksEventReasonSwThermalSlowdown
    # A stated temperature wins over the derivation, and the driver is not
    # made to react to it: the scenario lists the reasons it wants.
    stated, reasons, _ = _reading("t4", utilization=0.3, inlet_temperature_c=45,
                                  temperature_c=80)
    assert stated == 80 and not reasons & pynvml.nvmlClocksEventReasonSwThermalSlowdown


def _thermal_sensors(profile: dict[str, Any] | str, index: int) -> list[tuple[int, int]]:
    with OneGpu(profile=profile, utilization=0.5, inlet_temperature_c=30) as gpu:
        h = _nvml(gpu)
        settings = pynvml.c_nvmlGpuThermalSettings_t()
        pynvml.nvmlDeviceGetThermalSettings(h, index, ctypes.byref(settings))
        return [(settings.sensor[k].target, settings.sensor[k].currentTemp)
                for k in range(settings.count)]


def test_thermal_settings_list_the_gpu_sensor_and_a_board_sensor_where_there_is_one() -> None:
    gpu_only = _thermal_sensors("h100-sxm5-80gb", pynvml.NVML_THERMAL_TARGET_ALL)
    assert [target for target, _ in gpu_only] == [pynvml.NVML_THERMAL_TARGET_GPU]
    data = {**load_profile("l40s").model_dump(exclude={"key"}), "board_temperature_sensor": True}
    both = _thermal_sensors(data, pynvml.NVML_THERMAL_TARGET_ALL)
    assert [target for target, _ in both] == [pynvml.NVML_THERMAL_TARGET_GPU,
                                              pynvml.NVML_THERMAL_TARGET_BOARD]
    board_temp = both[1][1]
    assert 30 < board_temp < both[0][1]  # above the inlet, below the die
    assert _thermal_sensors(data, 1) == [both[1]]


def test_each_mig_instance_has_its_own_gpm_activity() -> None:
    instances = [{"gpu_instance": 1, "profile_id": 9, "memory_total_mib": 40448,
                  "memory_used_ratio": 0.97, "sm_active": 0.8, "tensor_active": 0.1},
                 {"gpu_instance": 2, "profile_id": 9, "memory_total_mib": 40448,
                  "memory_used_ratio": 0.2, "sm_active": 0.0}]
    sc = Scenario(name="mig", node={"gpus": 1}, noise=False,
                  state={"utilization": 0.5, "mig_instances": instances})
    with SimRun(sc) as run:
        snap = run.poll(6.0, interval=2.0)
    ratios: dict[tuple[str, str], float] = {}
    for name in ("gpu_mig_sm_active_ratio", "gpu_mig_sm_occupancy_ratio",
                 "gpu_mig_tensor_active_ratio", "gpu_mig_dram_active_ratio"):
        for labels, value in snap.series(name):
            ratios[(name, labels["gpu_instance"])] = value
    assert ratios[("gpu_mig_sm_active_ratio", "1")] == pytest.approx(0.8, abs=0.01)
    assert ratios[("gpu_mig_tensor_active_ratio", "1")] == pytest.approx(0.1, abs=0.01)
    # Unset ratios follow the instance's SM activity as a well-fed GPU's do.
    assert ratios[("gpu_mig_sm_occupancy_ratio", "1")] == pytest.approx(0.8 * 0.5 / 0.85,
                                                                         abs=0.01)
    assert ratios[("gpu_mig_dram_active_ratio", "2")] == pytest.approx(0.0, abs=0.01)


def test_an_xid_names_its_process_in_the_kernel_log() -> None:
    sc = Scenario(name="xid", node={"gpus": 2}, noise=False,
                  processes=[{"pid": 4242, "comm": "python", "gpus": [1]}],
                  timeline=[{"at": 5, "gpus": [1], "set": {"xid": [{"code": 13, "pid": 4242}]}},
                            {"at": 7, "gpus": [0], "set": {"xid": [79]}}])
    clock = VirtualClock()
    node = SimulatedNode(sc, clock=clock)
    try:
        clock.advance(10.0)
        node.refresh()
        log = [line.split(";", 1)[1] for line in Path(node.kmsg).read_text().splitlines()
               if "Xid" in line]
        # NVML's event carries the code only; the kernel log names the process.
        assert [(e[1], e[2]) for e in node.world.events] == [(1, 13), (0, 79)]
        assert log == [
            "NVRM: Xid (PCI:0000:2a:00): 13, pid=4242, name=python, Ch 00000008",
            "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, Ch 00000008"]
    finally:
        node.close()


def test_an_xid_of_a_process_on_a_mig_instance_names_the_instance_in_nvmls_event() -> None:
    instances = [{"gpu_instance": gi, "profile_id": 9, "memory_total_mib": 40448,
                  "memory_used_ratio": 0.5, "sm_active": 0.5} for gi in (1, 2)]
    sc = Scenario(name="mig-xid", node={"gpus": 1}, noise=False,
                  state={"utilization": 0.5, "mig_instances": instances},
                  processes=[{"pid": 4242, "comm": "python", "gpus": [0], "mig": [2, 0]}],
                  timeline=[{"at": 3, "set": {"xid": [{"code": 31, "pid": 4242}, 79]}}])
    clock = VirtualClock()
    node = SimulatedNode(sc, clock=clock)
    node.install()
    try:
        clock.advance(1.0)
        pynvml.nvmlInit()
        events = pynvml.nvmlEventSetCreate()
        pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0),
                                        pynvml.nvmlEventTypeXidCriticalError, events)
        clock.advance(4.0)
        got = [pynvml.nvmlEventSetWait_v2(events, 10) for _ in range(2)]
        assert [(e.eventData, e.gpuInstanceId, e.computeInstanceId) for e in got] == [
            (31, 2, 0), (79, 0xFFFFFFFF, 0xFFFFFFFF)]
        pynvml.nvmlEventSetFree(events)
    finally:
        node.uninstall()
        node.close()
