"""The simulator must be faithful to NVML: every C symbol it implements, and
every symbol the exporter asks pynvml for, is declared in ``nvml.h`` from the
pinned ``nvidia-nvml-dev`` wheel, with the same number of parameters; the
simulator's structs match pynvml's layouts; our constants match the header."""

from __future__ import annotations

import ast
import ctypes
import itertools
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pynvml  # tests may look at the binding; the exporter only via the adapter
import pytest

import gpu_exporter.nvml.adapter as adapter_module
from gpu_exporter.nvml import constants
from gpu_exporter.nvml import fields as fields_module
from gpu_exporter.nvml import gpm as gpm_module
from gpu_exporter.nvml import samples as samples_module
from gpu_exporter.nvml.errors import NvmlError, Return
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
    """C symbols named in the @translate("...") decorators of the nvml package."""
    names = set()
    for path in Path(adapter_module.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "translate" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                names.add(str(node.args[0].value))
    assert "nvmlDeviceGetUtilizationRates" in names and "nvmlGpmMetricsGet" in names
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
    ("nvmlGpuInstanceProfileInfo_t", "c_nvmlGpuInstanceProfileInfo_t"),
    ("nvmlGpuInstanceProfileInfo_v2_t", "c_nvmlGpuInstanceProfileInfo_v2_t"),
    ("nvmlGpuInstanceInfo_t", "c_nvmlGpuInstanceInfo_t"),
    ("nvmlGpuThermalSettings_t", "c_nvmlGpuThermalSettings_t"),
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
    ("FI_DEV_ECC_SBE_VOL_TOTAL", "NVML_FI_DEV_ECC_SBE_VOL_TOTAL"),
    ("FI_DEV_ECC_DBE_VOL_TOTAL", "NVML_FI_DEV_ECC_DBE_VOL_TOTAL"),
    ("FI_DEV_PCIE_COUNT_TX_BYTES", "NVML_FI_DEV_PCIE_COUNT_TX_BYTES"),
    ("FI_DEV_PCIE_COUNT_RX_BYTES", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES"),
])
def test_field_ids_match_the_header(const: str, define: str) -> None:
    m = re.search(rf"#define {define}\s+(\d+)", header())
    assert m and int(m.group(1)) == getattr(constants, const)


def _define(name: str) -> int:
    """A numeric #define of nvml.h, following aliases to another define."""
    m = re.search(rf"#define {name}\s+(\w+)", header())
    assert m, name
    value = m.group(1)
    return int(value) if value.isdigit() else _define(value)


@pytest.mark.parametrize("const", [
    "FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP", "FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST",
    "FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN", "FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN",
    "FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN", "FI_DEV_PERF_POLICY_BOARD_LIMIT",
    "FI_DEV_PERF_POLICY_RELIABILITY"])
def test_throttle_time_field_ids_match_the_header(const: str) -> None:
    assert _define("NVML_" + const) == getattr(constants, const)
    # Each counts a reason of the clock event bits, under the same label.
    assert constants.THROTTLE_TIME_FIELDS[getattr(constants, const)] in \
        constants.CLOCK_EVENT_REASONS.values()
    # The header documents them in nanoseconds (or as perf policy counters).
    line = re.search(rf"#define NVML_{const}\b[^\n]*", header())
    assert line and ("in ns" in line.group(0) or "Perf Policy Counter" in line.group(0))


def test_memory_v2_version_word_matches_the_struct_size() -> None:
    # NVML_STRUCT_VERSION(Memory, 2) = sizeof(nvmlMemory_v2_t) | 2 << 24
    import ctypes

    assert ctypes.sizeof(STRUCTS["nvmlMemory_v2_t"]) | 2 << 24 == constants.MEMORY_V2_VERSION


# --- the adapter's own struct decoding agrees with pynvml's ---------------------------
# The adapter reads field values, sub-second samples and GPM metrics from pynvml's
# structs with struct.unpack instead of pynvml's per-member accessors. Each test
# answers through a stand-in C function, then compares the fast path with pynvml's
# own wrapper (decoded the way the adapter did before) and with the fallback the
# adapter takes where pynvml lacks the internals the fast path uses.

# value type -> a value that only that union member holds unchanged
_TYPED_VALUES = {
    constants.VALUE_TYPE_DOUBLE: ("dVal", 1234.5625),
    constants.VALUE_TYPE_UNSIGNED_INT: ("uiVal", 4_000_000_001),  # above INT_MAX
    constants.VALUE_TYPE_UNSIGNED_LONG: ("ulVal", 2**40 + 3),
    constants.VALUE_TYPE_UNSIGNED_LONG_LONG: ("ullVal", 2**63 + 2**20),
    constants.VALUE_TYPE_SIGNED_LONG_LONG: ("sllVal", -(2**40) - 7),
    constants.VALUE_TYPE_SIGNED_INT: ("siVal", -123456),
    9: ("ullVal", 77),  # a type this code does not know: read as unsigned long long
}
# field id -> its own return code, for the fields that fail
_FIELD_ERRORS = {500: int(Return.NOT_SUPPORTED), 501: int(Return.GPU_IS_LOST),
                 502: int(Return.UNKNOWN)}


def _typed_field(fid: int, scope: int) -> tuple[int, str, float]:
    vt = sorted(_TYPED_VALUES)[(fid + scope) % len(_TYPED_VALUES)]
    member, value = _TYPED_VALUES[vt]
    return vt, member, value + scope if vt != constants.VALUE_TYPE_DOUBLE else value


def _answer(value: object) -> object:
    if isinstance(value, NvmlError):
        return ("error", value.code, str(value))
    assert isinstance(value, float)
    return value


@pytest.fixture
def stand_in() -> Iterator[tuple[SimRun, Any, Callable[[str, Any], None]]]:
    """A simulated node's first device; ``put(name, cfunc)`` answers the C call
    ``name`` with ``cfunc`` until the test ends."""
    run = SimRun("healthy")
    run.poll()
    library = run.node.library
    replaced: dict[str, Any] = {}

    def put(name: str, cfunc: Any) -> None:
        replaced.setdefault(name, getattr(library, name))
        setattr(library, name, cfunc)
        pynvml._nvmlGetFunctionPointer_cache.clear()

    session = run.exporter.poller.session
    assert session is not None
    device = session.gpus[0].device
    try:
        yield run, device, put
    finally:
        for name, cfunc in replaced.items():
            setattr(library, name, cfunc)
        pynvml._nvmlGetFunctionPointer_cache.clear()
        run.close()


_FIELD_VALUES_PROTO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                      ctypes.c_void_p)


def _typed_field_values_impl(handle: int, count: int, out: int) -> int:
    for fv in (pynvml.c_nvmlFieldValue_t * count).from_address(out):
        fid, scope = int(fv.fieldId), int(fv.scopeId)
        if fid in _FIELD_ERRORS:
            fv.nvmlReturn = _FIELD_ERRORS[fid]
            continue
        vt, member, value = _typed_field(fid, scope)
        fv.nvmlReturn, fv.valueType = 0, vt
        if vt == constants.VALUE_TYPE_UNSIGNED_INT:
            # A library that leaves the rest of the union as it was: only the
            # member the type names is the answer.
            fv.value.ullVal = 0xDEADBEEF << 32
        setattr(fv.value, member, value)
    return 0


_typed_field_values = _FIELD_VALUES_PROTO(_typed_field_values_impl)


def test_field_values_decode_like_pynvml_for_every_value_type(
        stand_in: tuple[SimRun, Any, Callable[[str, Any], None]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    _run, device, put = stand_in
    put("nvmlDeviceGetFieldValues", _typed_field_values)
    assert fields_module.FIELD_LAYOUT is not None, "the fast path is off for this pynvml"
    request = tuple((fid, scope) for fid in [*range(100, 107), *_FIELD_ERRORS]
                    for scope in range(3))
    reference = {(int(fv.fieldId), int(fv.scopeId)): _answer(fields_module.field_result(fv))
                 for fv in pynvml.nvmlDeviceGetFieldValues(device._h, list(request))}
    fast = {k: _answer(v) for k, v in device.scoped_field_values(request).items()}
    assert fast == reference
    # Every type was answered, and each decodes to the value that was put.
    for (fid, scope), value in fast.items():
        if fid not in _FIELD_ERRORS:
            assert value == float(_typed_field(fid, scope)[2])
    assert fast[501, 0] == ("error", Return.GPU_IS_LOST, reference[501, 0][2])  # type: ignore[index]
    ids = [100, 103, 104, 500]
    by_id = {k: _answer(v) for k, v in device.field_values(ids).items()}
    assert by_id == {fid: reference[fid, 0] for fid in ids}

    # Read answer by answer rather than a column at a time (another pynvml's
    # layout): the same.
    assert fields_module.FIELD_WORDS is not None, "the column read is off for this pynvml"
    monkeypatch.setattr(fields_module, "FIELD_WORDS", None)
    assert {k: _answer(v) for k, v in device.scoped_field_values(request).items()} == fast
    monkeypatch.setattr(fields_module, "FIELD_LAYOUT", None)  # pynvml without internals
    assert {k: _answer(v) for k, v in device.scoped_field_values(request).items()} == fast
    assert {k: _answer(v) for k, v in device.field_values(ids).items()} == by_id


def test_field_values_call_failure_is_the_same_nvml_error(
        stand_in: tuple[SimRun, Any, Callable[[str, Any], None]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    _run, device, put = stand_in
    put("nvmlDeviceGetFieldValues",
        _FIELD_VALUES_PROTO(lambda h, n, out: int(Return.GPU_IS_LOST)))
    for layout in (fields_module.FIELD_LAYOUT, None):
        monkeypatch.setattr(fields_module, "FIELD_LAYOUT", layout)
        with pytest.raises(NvmlError) as err:
            device.scoped_field_values(((1, 0),))
        assert err.value.code == Return.GPU_IS_LOST and err.value.device_gone
        assert "nvmlDeviceGetFieldValues" in str(err.value)


def _samples_function(vt: int, first_count: int, second_count: int) -> Any:
    """nvmlDeviceGetSamples answering ``vt`` samples; the buffer is sized for
    ``first_count`` and the second call fills ``second_count`` of them."""
    member, value = _TYPED_VALUES[vt]

    def fn(handle: int, kind: int, since: int, vtype: int, count: int, out: int) -> int:
        ctypes.c_uint.from_address(vtype).value = vt
        n = ctypes.c_uint.from_address(count)
        if not out:
            n.value = first_count
            return 0
        filled = min(n.value, second_count)
        for i, slot in enumerate((pynvml.c_nvmlSample_t * filled).from_address(out)):
            slot.timeStamp = since + 1000 * (i + 1)
            setattr(slot.sampleValue, member, value if member == "dVal" else value + i)
        n.value = filled
        return 0

    return ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_ulonglong,
                            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(fn)


@pytest.mark.parametrize("vt", sorted(_TYPED_VALUES))
def test_samples_decode_like_pynvml_for_every_value_type(
        vt: int, stand_in: tuple[SimRun, Any, Callable[[str, Any], None]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    _run, device, put = stand_in
    assert samples_module.SAMPLE_LAYOUTS is not None, "the fast path is off for this pynvml"
    put("nvmlDeviceGetSamples", _samples_function(vt, 6, 4))  # fewer on the second call
    vtype, raw = pynvml.nvmlDeviceGetSamples(device._h, 1, 5_000)
    reference = [(int(s.timeStamp), fields_module.union_value(int(vtype), s.sampleValue))
                 for s in raw]
    assert len(reference) == 4
    assert device.samples(1, 5_000) == reference
    monkeypatch.setattr(samples_module, "SAMPLE_LAYOUTS", None)
    assert device.samples(1, 5_000) == reference


def test_gpm_metrics_decode_like_pynvml(
        stand_in: tuple[SimRun, Any, Callable[[str, Any], None]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    run, device, _put = stand_in
    assert gpm_module._GPM_LAYOUT is not None, "the fast path is off for this pynvml"
    first, second = adapter_module.GpmSample(), adapter_module.GpmSample()
    try:
        device.gpm_sample(first)
        run.poll(1.0)
        device.gpm_sample(second)
        ids = [constants.GPM_SM_UTIL, constants.GPM_DRAM_BW_UTIL, 999,  # 999: unknown
               constants.GPM_PCIE_TX_PER_SEC]
        fast = {k: _answer(v) for k, v in adapter_module.gpm_metrics(first, second, ids).items()}
        monkeypatch.setattr(gpm_module, "_GPM_LAYOUT", None)
        slow = {k: _answer(v) for k, v in adapter_module.gpm_metrics(first, second, ids).items()}
    finally:
        first.close()
        second.close()
    assert fast == slow
    assert list(fast) == ids
    assert fast[999][:2] == ("error", Return.NOT_SUPPORTED)  # type: ignore[index]
    assert all(isinstance(fast[m], float) for m in ids if m != 999)


def test_sample_buffers_answer_as_a_real_h100s_do() -> None:
    """Measured on an H100 80GB HBM3 (driver 580.159.04): power sampled every
    20 ms, 119 kept; utilization every 200 ms, 71 kept; lastSeen is exclusive
    (NOT_FOUND when nothing is newer); clock samples NOT_FOUND, module power
    INVALID_ARGUMENT; an unsigned-int sample leaves garbage in the union's
    upper half, so only the member the value type names may be read."""
    with SimRun("healthy") as run:
        run.poll(30)
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        for kind, period_us, kept in ((0, 20_000, 119), (1, 200_000, 71)):
            vtype, samples = pynvml.nvmlDeviceGetSamples(h, kind, 0)
            stamps = [s.timeStamp for s in samples]
            assert vtype == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
            assert len(samples) == kept
            assert {b - a for a, b in itertools.pairwise(stamps)} == {period_us}
            assert all(s.sampleValue.ullVal >> 32 for s in samples)  # upper half not zeroed
            with pytest.raises(pynvml.NVMLError) as exc:
                pynvml.nvmlDeviceGetSamples(h, kind, max(stamps))
            assert exc.value.value == Return.NOT_FOUND
        _, util = pynvml.nvmlDeviceGetSamples(h, 1, 0)
        assert all(80 <= s.sampleValue.uiVal <= 100 for s in util)
        for kind in (2, 3, 4):
            assert pynvml.nvmlDeviceGetSamples(h, kind, 0)[1]
        for kind, code in ((5, Return.NOT_FOUND), (6, Return.NOT_FOUND),
                           (7, Return.INVALID_ARGUMENT)):
            with pytest.raises(pynvml.NVMLError) as exc:
                pynvml.nvmlDeviceGetSamples(h, kind, 0)
            assert exc.value.value == code, kind


def test_the_latency_model_names_real_functions() -> None:
    """Every row of the latency table is a C function of nvml.h; a row for one
    sampling type of nvmlDeviceGetSamples names it after a colon."""
    from gpu_exporter.simulator.latency import COSTS

    for key, cost in COSTS.items():
        name, _, kind = key.partition(":")
        assert name in declarations(), key
        assert not kind or (name == "nvmlDeviceGetSamples" and 0 <= int(kind) <= 6), key
        assert cost.us > 0 and cost.source.startswith(("measured", "estimate")), key


# --- the driver branches (simulator/drivers.py) --------------------------------------------
def test_every_symbol_a_branch_lacks_is_one_the_header_declares() -> None:
    from gpu_exporter.simulator.drivers import SYMBOL_SINCE

    assert not sorted(set(SYMBOL_SINCE) - set(declarations()))
    assert set(SYMBOL_SINCE) <= set(FUNCTIONS), "a branch fact about a symbol never simulated"


@pytest.mark.parametrize("const,define", [
    ("FI_DEV_NVLINK_GET_STATE", "NVML_FI_DEV_NVLINK_GET_STATE"),
    ("FI_DEV_GET_GPU_RECOVERY_ACTION", "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"),
])
def test_branch_field_ids_match_the_header(const: str, define: str) -> None:
    m = re.search(rf"#define {define}\s+(\d+)", header())
    assert m and int(m.group(1)) == getattr(constants, const)


def test_recovery_actions_and_fabric_words_match_the_header() -> None:
    for code, name in constants.RECOVERY_ACTIONS.items():
        m = re.search(rf"NVML_GPU_RECOVERY_ACTION_{name.upper()}\s*=\s*(\d+)", header())
        assert m and int(m.group(1)) == code, name
    for version, word in ((2, constants.FABRIC_INFO_V2_VERSION),
                          (3, constants.FABRIC_INFO_V3_VERSION)):
        struct = STRUCTS[f"nvmlGpuFabricInfo_v{version}_t"]
        assert ctypes.sizeof(struct) | version << 24 == word
        theirs = getattr(pynvml, f"c_nvmlGpuFabricInfo_v{version}_t")
        assert ctypes.sizeof(struct) == ctypes.sizeof(theirs)
        # Same offsets; pynvml declares the state 4 bytes wide where the header's
        # nvmlGpuFabricState_t is an unsigned char (the padding after it makes
        # the two agree on every member's place).
        assert [(n, o) for n, o, _ in _layout(struct)] == [
            (n, o) for n, o, _ in _layout(theirs)]
        assert "typedef unsigned char nvmlGpuFabricState_t;" in header()
        assert f"}} nvmlGpuFabricInfo_v{version}_t;" in header()


def test_gpu_instance_profile_words_match_the_header() -> None:
    m = re.search(r"#define NVML_GPU_INSTANCE_PROFILE_COUNT\s+(0x[0-9A-Fa-f]+)", header())
    assert m and int(m.group(1), 16) == constants.GPU_INSTANCE_PROFILE_COUNT
    for version, word in ((2, constants.GPU_INSTANCE_PROFILE_INFO_V2_VERSION),
                          (3, constants.GPU_INSTANCE_PROFILE_INFO_V3_VERSION)):
        # nvmlGpuInstanceProfileInfo_vN = NVML_STRUCT_VERSION(GpuInstanceProfileInfo, N)
        assert f"#define nvmlGpuInstanceProfileInfo_v{version} NVML_STRUCT_VERSION(" \
               f"GpuInstanceProfileInfo, {version})" in header()
        assert f"}} nvmlGpuInstanceProfileInfo_v{version}_t;" in header()
        assert ctypes.sizeof(STRUCTS[f"nvmlGpuInstanceProfileInfo_v{version}_t"]) \
            | version << 24 == word
    assert pynvml.nvmlGpuInstanceProfileInfo_v2 == constants.GPU_INSTANCE_PROFILE_INFO_V2_VERSION
    # The name is where v2 and v3 put it, after the counts (v3 drops isP2pSupported).
    v2, v3 = (STRUCTS[f"nvmlGpuInstanceProfileInfo_v{v}_t"] for v in (2, 3))
    assert v2.name.offset == 56 and v3.name.offset == 48  # type: ignore[attr-defined]
