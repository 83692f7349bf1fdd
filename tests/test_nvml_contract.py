"""The simulator must be faithful to NVML: every C symbol it implements, and
every symbol the exporter asks pynvml for, is declared in ``nvml.h`` from the
pinned ``nvidia-nvml-dev`` wheel, with the same number of parameters; the
simulator's structs match pynvml's layouts; our constants match the header."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pynvml  # tests may look at the binding; the exporter only via the adapter
import pytest

import gpu_exporter.nvml.adapter as adapter_module
from gpu_exporter.nvml import constants
from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator import builtin_scenarios, load_scenario
from gpu_exporter.simulator.clib import FUNCTIONS, STRUCTS
from tests.simnode import SimRun


@cache
def header() -> str:
    import nvidia

    for base in nvidia.__path__:
        path = Path(base) / "cu13" / "include" / "nvml.h"
        if path.exists():
            return path.read_text()
    pytest.fail("nvml.h not found: install the pinned nvidia-nvml-dev wheel (test extra)")


@cache
def declarations() -> dict[str, int]:
    """C function name -> number of parameters."""
    out = {}
    for m in re.finditer(r"nvmlReturn_t\s+DECLDIR\s+(\w+)\s*\(([^;]*?)\)\s*;", header(), re.S):
        params = m.group(2).strip()
        out[m.group(1)] = 0 if params in ("", "void") else params.count(",") + 1
    return out


def test_header_parsed() -> None:
    assert len(declarations()) > 300
    assert declarations()["nvmlDeviceGetName"] == 3


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_simulated_symbol_declared_with_same_arity(name: str) -> None:
    argtypes, _impl, takes_device = FUNCTIONS[name]
    assert name in declarations(), f"{name} is not declared in nvml.h"
    assert declarations()[name] == len(argtypes) + (1 if takes_device else 0)


def _adapter_calls() -> set[str]:
    """C symbols named in the adapter's @_translate("...") decorators."""
    tree = ast.parse(Path(adapter_module.__file__).read_text())
    names = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "_translate" and node.args
                and isinstance(node.args[0], ast.Constant)):
            names.add(str(node.args[0].value))
    return names


def test_every_symbol_the_adapter_names_is_declared() -> None:
    missing = sorted(_adapter_calls() - set(declarations()))
    assert not missing


@pytest.mark.parametrize("scenario", [  # every scenario with a library to ask
    n for n in builtin_scenarios() if load_scenario(n).node.nvml != "library_missing"])
def test_every_symbol_pynvml_asks_for_is_declared(scenario: str) -> None:
    with SimRun(scenario) as run:
        run.poll(20)
        asked = set(run.node.library.calls) | run.node.library.missing
    assert asked, "the exporter made no NVML calls"
    assert not sorted(asked - set(declarations()))


def _layout(struct: type) -> list[tuple[str, int, int]]:
    return [(name, getattr(struct, name).offset, getattr(struct, name).size)
            for name, *_ in struct._fields_]


@pytest.mark.parametrize("c_name,binding_name", [
    ("nvmlPciInfo_t", "nvmlPciInfo_t"),
    ("nvmlMemory_t", "c_nvmlMemory_t"),
    ("nvmlMemory_v2_t", "c_nvmlMemory_v2_t"),
    ("nvmlUtilization_t", "c_nvmlUtilization_t"),
    ("nvmlFieldValue_t", "c_nvmlFieldValue_t"),
])
def test_struct_layouts_match_the_binding(c_name: str, binding_name: str) -> None:
    ours, theirs = STRUCTS[c_name], getattr(pynvml, binding_name)
    import ctypes

    assert ctypes.sizeof(ours) == ctypes.sizeof(theirs)
    assert _layout(ours) == _layout(theirs)
    assert f"}} {c_name};" in header()


def test_return_codes_match_the_header() -> None:
    for code in Return:
        if code.name in ("SUCCESS",):
            continue
        m = re.search(rf"NVML_ERROR_{code.name}\s*=\s*(\d+)", header())
        assert m, f"NVML_ERROR_{code.name} not in nvml.h"
        assert int(m.group(1)) == code.value


def test_clock_reason_bits_match_the_header() -> None:
    names = {"gpu_idle": "GpuIdle", "applications_clocks_setting": "ApplicationsClocksSetting",
             "sw_power_cap": "SwPowerCap", "hw_slowdown": "HwSlowdown",
             "sync_boost": "SyncBoost", "sw_thermal": "SwThermalSlowdown",
             "hw_thermal": "HwThermalSlowdown", "hw_power_brake": "HwPowerBrakeSlowdown",
             "display_clock": "DisplayClockSetting", "board_limit": "BoardLimit",
             "reliability": "Reliability"}
    for bit, label in constants.CLOCK_EVENT_REASONS.items():
        # The hardware reasons are only defined under their older "Throttle" names.
        m = re.search(rf"#define nvmlClocks(?:Event|Throttle)Reason{names[label]}\s+"
                      r"(0x[0-9a-fA-F]+)LL", header())
        assert m, label
        assert int(m.group(1), 16) == bit


@pytest.mark.parametrize("const,define", [
    ("FI_DEV_MEMORY_TEMP", "NVML_FI_DEV_MEMORY_TEMP"),
    ("FI_DEV_PCIE_COUNT_TX_BYTES", "NVML_FI_DEV_PCIE_COUNT_TX_BYTES"),
    ("FI_DEV_PCIE_COUNT_RX_BYTES", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES"),
])
def test_field_ids_match_the_header(const: str, define: str) -> None:
    m = re.search(rf"#define {define}\s+(\d+)", header())
    assert m and int(m.group(1)) == getattr(constants, const)


def test_memory_v2_version_word_matches_the_struct_size() -> None:
    # NVML_STRUCT_VERSION(Memory, 2) = sizeof(nvmlMemory_v2_t) | 2 << 24
    import ctypes

    assert ctypes.sizeof(STRUCTS["nvmlMemory_v2_t"]) | 2 << 24 == constants.MEMORY_V2_VERSION
