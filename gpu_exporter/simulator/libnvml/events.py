"""The event API: event sets, registration, and the delivery of Xids and the
other health events (each where the board and its driver branch offer the type)."""

from __future__ import annotations

import time
from ctypes import Structure, c_uint, c_ulonglong, c_void_p

from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.drivers import event_types
from gpu_exporter.simulator.gpu_state import GpuState
from gpu_exporter.simulator.libnvml.table import (
    OK,
    STRUCTS,
    EventSetData,
    FakeNvmlLibrary,
    P,
    U,
    nvml_function,
    put,
)


# --- events (Xid) -----------------------------------------------------------------------
class EventData(Structure):  # nvmlEventData_t
    _fields_ = [("device", c_void_p), ("eventType", c_ulonglong), ("eventData", c_ulonglong),
                ("gpuInstanceId", c_uint), ("computeInstanceId", c_uint)]


STRUCTS["nvmlEventData_t"] = EventData
EVENT_XID = 0x8


@nvml_function("nvmlEventSetCreate", P, device=False)
def _event_set_create(lib: FakeNvmlLibrary, out: int) -> int:
    with lib.lock:
        lib.next_event_set += 1
        handle = lib.next_event_set
        lib.event_sets[handle] = EventSetData()
    return put(out, c_void_p, handle)


@nvml_function("nvmlEventSetFree", P, device=False)
def _event_set_free(lib: FakeNvmlLibrary, handle: int) -> int:
    with lib.lock:
        if lib.event_sets.pop(handle or 0, None) is None:
            return int(Return.INVALID_ARGUMENT)
    return OK


def _offered(lib: FakeNvmlLibrary) -> int:
    """The board's event types its driver branch knows."""
    return event_types(lib.branch, lib.world.profile.event_types)


@nvml_function("nvmlDeviceGetSupportedEventTypes", P)
def _event_types(lib: FakeNvmlLibrary, st: GpuState, out: int) -> int:
    return put(out, c_ulonglong, _offered(lib))


@nvml_function("nvmlDeviceRegisterEvents", c_ulonglong, P)
def _register(lib: FakeNvmlLibrary, st: GpuState, types: int, handle: int) -> int:
    es = lib.event_sets.get(handle or 0)
    if es is None:
        return int(Return.INVALID_ARGUMENT)
    if types & ~_offered(lib):
        return int(Return.NOT_SUPPORTED)
    # Events that happened before registration are never delivered.
    es.registered[st.index] = (st.t, types)
    return OK


@nvml_function("nvmlEventSetWait_v2", P, P, U, device=False)
def _wait(lib: FakeNvmlLibrary, handle: int, out: int, timeout_ms: int) -> int:
    es = lib.event_sets.get(handle or 0)
    if es is None or not out:
        return int(Return.INVALID_ARGUMENT)
    deadline = time.monotonic() + timeout_ms / 1000.0
    while True:
        now = lib.world.elapsed()
        for ev in lib.world.events:
            at, index, xid = ev
            if at > now:
                break
            reg = es.registered.get(index)
            if reg is None or at <= reg[0] or not reg[1] & EVENT_XID or ev in es.delivered:
                continue
            es.delivered.add(ev)
            data = EventData.from_address(out)
            data.device, data.eventType, data.eventData = lib.handle(index), EVENT_XID, xid
            data.gpuInstanceId, data.computeInstanceId = lib.world.xid_instances.get(
                ev, (0xFFFFFFFF, 0xFFFFFFFF))
            return OK
        for at, index, bit in lib.world.health_events:
            if at > now:
                break
            reg = es.registered.get(index)
            key = (at, index, -bit)  # apart from an Xid of the same number
            if reg is None or at <= reg[0] or not reg[1] & bit or key in es.delivered:
                continue
            es.delivered.add(key)
            data = EventData.from_address(out)
            data.device, data.eventType, data.eventData = lib.handle(index), bit, 0
            data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFF
            return OK
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return int(Return.TIMEOUT)
        # Blocks like the real call, waking up to look again.
        time.sleep(min(0.02, remaining))
