"""How the exporter calls NVML: through ``pynvml``, imported only by the modules
of this package (adapter, fields, samples, gpm, events, processes, mig), each
one of NVML's areas.

Every call is wrapped by :func:`translate`, which turns pynvml's exceptions into
:class:`NvmlError` naming the C call (and shows each call to the recorder of
``gpu-exporter record``). The library behind pynvml is normally
``libnvidia-ml.so.1``; ``install_library`` lets the simulator put its own
C-callable functions in that place; the real path never calls it.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import pynvml

from gpu_exporter.nvml.errors import NvmlError, Return


def binding_version() -> str:
    """nvidia-ml-py's version (pynvml has none of its own), from the name of
    its installed record beside pynvml (``nvidia_ml_py-13.615.71.dist-info``);
    "unknown" where it was installed another way. Not importlib.metadata, which
    reads the same folder but brings email, zipfile and csv (about 1.2 MiB)
    into every node."""
    site = Path(pynvml.__file__).parent
    for record in site.glob("nvidia_ml_py-*.dist-info"):
        return record.name.removeprefix("nvidia_ml_py-").removesuffix(".dist-info")
    return "unknown"


P = ParamSpec("P")
T = TypeVar("T")



# Sees every call and its result (or NvmlError) when set: `gpu-exporter record`.
# Arguments: C call name, the positional arguments (the Device first for device
# calls), the result or the NvmlError.
Recorder = Callable[[str, tuple[Any, ...], object], None]
_recorder: Recorder | None = None


def set_recorder(recorder: Recorder | None) -> None:
    global _recorder
    _recorder = recorder


def translate(call: str) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Turn pynvml's exceptions into NvmlError naming the C call."""

    def wrap(fn: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(fn)
        def inner(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                result = fn(*args, **kwargs)
            except pynvml.NVMLError as exc:
                error = NvmlError(exc.value, call)
            except pynvml.NVMLLibraryMismatchError:
                # Not an NVMLError subclass: raised when an old driver lacks a
                # versioned symbol. For us that is "function not found".
                error = NvmlError(Return.FUNCTION_NOT_FOUND, call)
            else:
                if _recorder is not None:
                    _recorder(call, args, result)
                return result
            if _recorder is not None:
                _recorder(call, args, error)
            raise error

        return inner

    return wrap


def text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


_REAL_CDLL = pynvml.CDLL


def install_library(lib: object | None, loader: Callable[[str], object] | None = None) -> None:
    """Put ``lib`` where pynvml expects the loaded NVML library.

    pynvml resolves each symbol with ``getattr(lib, name)`` on first use and
    caches it, so the cache is cleared too. With ``lib=None`` pynvml loads a
    library again on the next init, through ``loader`` when given (the
    simulator's "library missing" case) or the real ``ctypes.CDLL``.
    """
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml.CDLL = loader or _REAL_CDLL
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0



def struct_layout(ctype: Any, members: tuple[tuple[str, int, str], ...]) -> struct.Struct | None:
    """A struct.Struct reading ``members`` (name, size, struct code; "" to skip)
    of the ctypes type ``ctype`` at ctypes' own offsets; None where a member is
    missing, of another size or out of order (another pynvml's layout)."""
    fmt, pos = "=", 0  # native byte order, no implicit padding: offsets come from ctypes
    for name, size, code in members:
        member = getattr(ctype, name, None)
        if member is None or member.size != size or member.offset < pos:
            return None
        if code:
            if member.offset > pos:
                fmt += f"{member.offset - pos}x"
            fmt += code
            pos = member.offset + size
    total = ctypes.sizeof(ctype)
    if total > pos:
        fmt += f"{total - pos}x"
    layout = struct.Struct(fmt)
    return layout if layout.size == total else None



# Request templates kept per kind (fields, GPM): distinct requests are few
# (field lists, link counts).
TEMPLATES_MAX = 64


class _CountedFunction:
    """A C function of the loaded library that counts its calls."""

    def __init__(self, fn: Any, name: str, counts: Counter[str]) -> None:
        object.__setattr__(self, "_fn", fn)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_counts", counts)

    def __call__(self, *args: Any) -> Any:
        self._counts[self._name] += 1
        return self._fn(*args)

    # pynvml sets restype on a few functions (nvmlErrorString): the real one's.
    def __getattr__(self, name: str) -> Any:
        return getattr(self._fn, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._fn, name, value)


class _CountingLibrary:
    def __init__(self, lib: Any, counts: Counter[str]) -> None:
        self._lib = lib
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        return _CountedFunction(getattr(self._lib, name), name, self._counts)


def count_calls() -> Counter[str]:
    """From now on, count every call into the loaded NVML library by its C
    function name, in the Counter returned: the NVML call budget of a poll,
    measured on whatever library is loaded (NVIDIA's, its mock, the
    simulator's). A call the exporter makes through pynvml and one it makes
    through a fast path (fields, samples) are counted alike, each C call once.
    NVML must have been initialised (the library loaded)."""
    counts: Counter[str] = Counter()
    with pynvml.libLoadLock:
        lib = pynvml.nvmlLib
        if lib is None:
            raise RuntimeError("NVML is not loaded: initialise it first")
        if isinstance(lib, _CountingLibrary):
            lib = lib._lib
        pynvml.nvmlLib = _CountingLibrary(lib, counts)
        pynvml._nvmlGetFunctionPointer_cache.clear()
    return counts
