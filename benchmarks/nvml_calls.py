"""Count every NVML call a process makes through pynvml, per C function, on
real NVML as on the mock or the simulator.

pynvml finds every C function through one look-up, ``_nvmlGetFunctionPointer``
(its own wrappers and the exporter's direct reads of field values, samples and
GPM metrics alike). ``install()`` wraps that look-up so that each pointer it
hands out counts its calls. Nothing of it is in the exporter: a process is
counted only when started through this module, so the daemon pays nothing for
it otherwise. Counting costs well under a microsecond a call (about 0.1 ms a
poll of 8 GPUs).

    python -m benchmarks.nvml_calls OUT.jsonl -- gpu-exporter [FLAGS...]
    python -m benchmarks.nvml_calls OUT.jsonl -- nvitop-exporter [FLAGS...]

runs the named console script in this process with the counter installed and
appends the counts so far to OUT.jsonl every ``--every`` seconds, one JSON
object a line: ``{"t": <time.monotonic()>, "calls": {"nvmlDeviceGetPowerUsage":
123, ...}}``. Calls between two lines are the difference of their counts.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pynvml

_COUNTS: Counter[str] = Counter()
_LOCK = threading.Lock()


class _Counted:
    """A C function pointer that counts its calls; attributes (restype,
    argtypes) go to the pointer itself."""

    __slots__ = ("_fn", "_name")

    def __init__(self, fn: Any, name: str) -> None:
        object.__setattr__(self, "_fn", fn)
        object.__setattr__(self, "_name", name)

    def __call__(self, *args: Any) -> Any:
        _COUNTS[self._name] += 1  # one dict update under the GIL
        return self._fn(*args)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._fn, attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(self._fn, attr, value)


# nvmlDeviceGetFieldValues(device, valuesCount, values): the fields asked,
# summed over its calls, kept apart from the call counts (the floor of
# benchmarks.floor asks as many per call).
FIELD_VALUES = "nvmlDeviceGetFieldValues"
_FIELDS_ASKED: Counter[str] = Counter()


class _CountedFieldValues(_Counted):
    __slots__ = ()

    def __call__(self, *args: Any) -> Any:
        count = args[1] if len(args) > 1 else 0
        _FIELDS_ASKED[FIELD_VALUES] += int(getattr(count, "value", count))
        return super().__call__(*args)


def install() -> Counter[str]:
    """Count from now on (idempotent); the live counter, by C function name."""
    with _LOCK:
        lookup = pynvml._nvmlGetFunctionPointer
        if getattr(lookup, "counts_calls", False):
            return _COUNTS
        wrapped: dict[str, _Counted] = {}

        def counting_lookup(name: str) -> Any:
            fn = lookup(name)  # pynvml's own cache; emptied when the library changes
            counted = wrapped.get(name)
            if counted is None or counted._fn is not fn:
                kind = _CountedFieldValues if name == FIELD_VALUES else _Counted
                counted = wrapped[name] = kind(fn, name)
            return counted

        counting_lookup.counts_calls = True  # type: ignore[attr-defined]
        pynvml._nvmlGetFunctionPointer = counting_lookup
        return _COUNTS


def snapshot() -> dict[str, int]:
    return dict(_COUNTS)


def fields_asked() -> int:
    """Fields asked in every nvmlDeviceGetFieldValues call so far."""
    return _FIELDS_ASKED[FIELD_VALUES]


def difference(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Calls made between two snapshots, per function (only those called)."""
    return {name: n - before.get(name, 0) for name, n in after.items()
            if n - before.get(name, 0) > 0}


def read_log(path: Path) -> list[tuple[float, dict[str, int]]]:
    """The (time, counts) lines ``main`` wrote; a torn last line is skipped."""
    out = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
            out.append((float(entry["t"]), {str(k): int(v) for k, v in entry["calls"].items()}))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def fields_per_call(path: Path) -> float:
    """Fields asked per nvmlDeviceGetFieldValues call, from the last whole
    line ``main`` wrote (NaN where it made none)."""
    for line in reversed(path.read_text().splitlines()):
        try:
            entry = json.loads(line)
            calls, fields = int(entry["calls"].get(FIELD_VALUES, 0)), int(entry["fields"])
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # a torn line, or one from before fields were counted
        return fields / calls if calls else float("nan")
    return float("nan")


def calls_in(log: list[tuple[float, dict[str, int]]], start: float, end: float,
             quiet_after: float = float("inf")) -> dict[str, int] | None:
    """The calls made from ``start`` to ``end``, from the last line written
    before ``start`` and the first written after ``end`` (and before
    ``quiet_after``, when the next calls began). None when no line fell in
    either gap: lines must be written more often than the gaps last."""
    before = [counts for at, counts in log if at < start]
    after = [counts for at, counts in log if end < at < quiet_after]
    if not before or not after:
        return None
    return difference(before[-1], after[0])


def _dump_every(path: Path, every_s: float) -> None:
    with path.open("a") as out:
        while True:
            out.write(json.dumps({"t": time.monotonic(), "calls": snapshot(),
                                  "fields": fields_asked()}) + "\n")
            out.flush()
            time.sleep(every_s)


def _console_script(name: str) -> Callable[[], Any]:
    found = entry_points(group="console_scripts", name=name)
    for ep in found:
        fn: Callable[[], Any] = ep.load()
        return fn
    raise SystemExit(f"nvml_calls: no console script named {name!r} is installed")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="python -m benchmarks.nvml_calls")
    parser.add_argument("out", type=Path, help="JSON lines file the counts are appended to")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between two lines")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        parser.error("name the console script to run after --")
    install()
    threading.Thread(target=_dump_every, args=(args.out, args.every), name="nvml-call-count",
                     daemon=True).start()
    script = _console_script(command[0])
    sys.argv = command
    result = script()
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
