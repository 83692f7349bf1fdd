"""Field values (nvmlDeviceGetFieldValues): many counters and states in one call,
each answer with its own return code."""

from __future__ import annotations

import ctypes
import struct
import sys
from typing import Any

import pynvml

from gpu_exporter.nvml import constants as c
from gpu_exporter.nvml.binding import TEMPLATES_MAX, struct_layout
from gpu_exporter.nvml.errors import NvmlError, Return

# --- field values without pynvml's per-member Python hooks ---------------------------
# pynvml's structs route every member read and write through Python-level
# __getattribute__/__setattr__ (_PrintableStructure): ~7 calls per field, which
# made decoding 108 NVLink fields cost more than the C call itself. The fast path
# below calls the same C function through pynvml's own symbol lookup, on an array
# of pynvml's own c_nvmlFieldValue_t, and reads the answers in one struct pass.
# Where this pynvml lacks what it leans on, FIELD_LAYOUT is None and the
# methods use pynvml.nvmlDeviceGetFieldValues as before.

def _field_value_layout() -> struct.Struct | None:
    """valueType, nvmlReturn and the value's 8 bytes (as an unsigned long long) of
    one c_nvmlFieldValue_t, at pynvml's offsets; None where this pynvml lacks what
    the fast path leans on. fieldId and scopeId are inputs NVML leaves as they
    were, so the answers are keyed by the request's own pairs (no new key tuples)."""
    fv = getattr(pynvml, "c_nvmlFieldValue_t", None)
    if fv is None or not callable(getattr(pynvml, "_nvmlGetFunctionPointer", None)):
        return None
    return struct_layout(fv, (("fieldId", 4, ""), ("scopeId", 4, ""),
                               ("valueType", 4, "I"), ("nvmlReturn", 4, "I"),
                               ("value", 8, "Q")))




FIELD_LAYOUT = _field_value_layout()
_ULL = c.VALUE_TYPE_UNSIGNED_LONG_LONG
# An unsigned int answer (link states, power in mW, temperatures) is the low
# four bytes of the value's 8 where the machine is little-endian: read there
# without the struct round trip (-1: never, on a big-endian machine).
_UINT = c.VALUE_TYPE_UNSIGNED_INT if sys.byteorder == "little" else -1
_UINT_MASK = 0xFFFFFFFF
_RAW = struct.Struct("=Q")
# The union members other than unsigned long long, read from the value's bytes
# (native sizes and order, as the C union has them).
_MEMBERS = {
    c.VALUE_TYPE_DOUBLE: struct.Struct("@d"),
    c.VALUE_TYPE_UNSIGNED_INT: struct.Struct("@I"),
    c.VALUE_TYPE_UNSIGNED_LONG: struct.Struct("@L"),
    c.VALUE_TYPE_SIGNED_LONG_LONG: struct.Struct("@q"),
    c.VALUE_TYPE_SIGNED_INT: struct.Struct("@i"),
}

# Request (field id, scope id) pairs -> an array holding them, everything else
# zero: copied for each call, so no poll sets fieldId/scopeId member by member
# and no answer of a previous call can be read back as this call's.

_templates: dict[tuple[tuple[int, int], ...], Any] = {}



def _get_field_values(handle: Any, request: tuple[tuple[int, int], ...]) -> Any:
    """nvmlDeviceGetFieldValues for ``request``: the filled array, as pynvml's
    wrapper would return it; raises pynvml.NVMLError as the wrapper does."""
    template = _templates.get(request)
    if template is None:
        template = (pynvml.c_nvmlFieldValue_t * len(request))()
        for slot, (fid, scope) in zip(template, request, strict=True):
            slot.fieldId, slot.scopeId = fid, scope
        if len(_templates) >= TEMPLATES_MAX:
            _templates.clear()
        _templates[request] = template
    values = type(template).from_buffer_copy(template)
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
    ret = fn(handle, ctypes.c_int32(len(request)), ctypes.byref(values))
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    return values


def _word_layout() -> tuple[int, int, int] | None:
    """pynvml's c_nvmlFieldValue_t read as 8-byte words: (words per answer,
    the word holding valueType and nvmlReturn, the value's word). None where
    they do not fall so (another pynvml's layout, a big-endian machine):
    field_answers() then reads each answer through FIELD_LAYOUT."""
    fv = getattr(pynvml, "c_nvmlFieldValue_t", None)
    if FIELD_LAYOUT is None or fv is None or sys.byteorder != "little":
        return None
    size, kind, ret, value = (ctypes.sizeof(fv), fv.valueType.offset, fv.nvmlReturn.offset,
                              fv.value.offset)
    if size % 8 or kind % 8 or ret != kind + 4 or value % 8 or fv.value.size != 8:
        return None
    return size // 8, kind // 8, value // 8


# Where set, the answers are read a column at a time: every answer's
# valueType-and-nvmlReturn word, then every value word, each in one C step; a
# Python step only for an answer that is not a good unsigned long long. On an
# 8-GPU NVLink node that is ~900 answers a poll, nearly all counters.
FIELD_WORDS = _word_layout()
# valueType unsigned long long with nvmlReturn SUCCESS, as one word.
_ULL_GOOD = _ULL


def field_answers(handle: Any, request: tuple[tuple[int, int], ...],
                   ) -> dict[tuple[int, int], float | NvmlError]:
    assert FIELD_LAYOUT is not None
    filled = _get_field_values(handle, request)
    words = FIELD_WORDS
    if words is not None:
        per, kind_at, value_at = words
        column = memoryview(bytes(filled)).cast("Q")
        kinds = column[kind_at::per].tolist()
        raw = column[value_at::per].tolist()
        by_pair: dict[tuple[int, int], float | NvmlError] = dict(
            zip(request, map(float, raw), strict=True))
        if kinds.count(_ULL_GOOD) != len(kinds):
            for at, kind in enumerate(kinds):
                if kind != _ULL_GOOD:
                    key, vt, ret = request[at], kind & _UINT_MASK, kind >> 32
                    by_pair[key] = float(raw[at] & _UINT_MASK) if ret == 0 and vt == _UINT \
                        else _decoded(key[0], vt, ret, raw[at])
        return by_pair
    out: dict[tuple[int, int], float | NvmlError] = {}
    answers = FIELD_LAYOUT.iter_unpack(filled)
    for key, (vt, ret, value) in zip(request, answers, strict=True):
        # The common case inline: a poll of an 8-GPU NVLink node decodes ~900
        # fields, nearly all of them unsigned long long counters.
        if ret == 0 and vt == _ULL:
            out[key] = float(value)
        elif ret == 0 and vt == _UINT:
            out[key] = float(value & _UINT_MASK)
        else:
            out[key] = _decoded(key[0], vt, ret, value)
    return out


def _decoded(fid: int, vt: int, ret: int, value: int) -> float | NvmlError:
    """One field's answer from the raw words; the same as field_result."""
    if ret != Return.SUCCESS:
        return NvmlError(ret, f"field {fid}")
    member = _MEMBERS.get(vt)
    if member is None:  # unsigned long long, or a type this code does not know
        return float(value)
    return float(member.unpack_from(_RAW.pack(value))[0])



def field_result(fv: Any) -> float | NvmlError:
    if fv.nvmlReturn != Return.SUCCESS:
        return NvmlError(fv.nvmlReturn, f"field {fv.fieldId}")
    return union_value(int(fv.valueType), fv.value)


def union_value(vt: int, v: Any) -> float:
    """The member of an nvmlValue_t union that ``vt`` (nvmlValueType_t) names."""
    if vt == c.VALUE_TYPE_DOUBLE:
        return float(v.dVal)
    if vt == c.VALUE_TYPE_UNSIGNED_INT:
        return float(v.uiVal)
    if vt == c.VALUE_TYPE_UNSIGNED_LONG:
        return float(v.ulVal)
    if vt == c.VALUE_TYPE_UNSIGNED_LONG_LONG:
        return float(v.ullVal)
    if vt == c.VALUE_TYPE_SIGNED_LONG_LONG:
        return float(v.sllVal)
    if vt == c.VALUE_TYPE_SIGNED_INT:
        return float(v.siVal)
    return float(v.ullVal)
