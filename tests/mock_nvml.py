"""The exporter as shipped (default settings) on NVIDIA's mock libnvidia-ml, in a
process of its own: NVML is loaded by the real code path, no simulator is in
the process. The mock is NVIDIA's (k8s-test-infra, ``pkg/gpu/mocknvml``),
built unmodified into ``shared/nvidia-mocknvml`` beside the repository; its
README says what it does not do.

``python -m tests.mock_nvml BOARD [POLLS [SEED]]`` polls the board file's node
on a virtual clock (every poll ``--poll.interval`` apart, as the daemon would)
and prints one JSON object: the C calls into the library per function over
the polls after the first (NVML's own count, through
``nvml.binding.count_calls``), the GPUs, what the last poll exported of the
families the tests check, every series it exported, and every field id asked.
With SEED, the per-GPU readers run in an order drawn from it
(``simnode.shuffle_readers``).

The library is found as ``$GPU_EXPORTER_MOCKNVML`` or
``<repository>/../shared/nvidia-mocknvml``; it must be on the loader's path
when the process starts, so the tests start this module with
``LD_LIBRARY_PATH`` set (``run()``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BOARDS = ("h100", "a100", "l40s", "t4", "b200", "gb200", "gb300")
# Families whose every series the tests read from the last poll.
FAMILIES = ("gpu_up", "gpu_busy_seconds_total", "gpu_busy_source_info",
            "gpu_utilization_ratio", "gpu_power_watts", "gpu_temperature_celsius")


def library_dir() -> Path | None:
    """The mock's folder, or None where it is not there."""
    configured = os.environ.get("GPU_EXPORTER_MOCKNVML")
    path = Path(configured) if configured else REPO.parent / "shared" / "nvidia-mocknvml"
    return path if (path / "libnvidia-ml.so.1").is_file() else None


def board_file(lib: Path, board: str) -> Path:
    return lib / "configs" / f"mock-nvml-config-{board}.yaml"


def run(board: str, polls: int = 31, timeout: float = 120.0,
        order_seed: int | None = None) -> dict[str, Any]:
    """This module's answer for ``board``, run in its own process on the mock."""
    lib = library_dir()
    if lib is None:
        raise FileNotFoundError("NVIDIA's mock NVML is not there")
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib),
           "MOCK_NVML_CONFIG": str(board_file(lib, board))}
    env.pop("MOCK_NVML_DEBUG", None)
    seed = [] if order_seed is None else [str(order_seed)]
    done = subprocess.run([sys.executable, "-m", "tests.mock_nvml", board, str(polls), *seed],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the exporter on the mock failed:\n{done.stderr[-4000:]}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def measure(polls: int, order_seed: int | None = None) -> dict[str, Any]:
    from gpu_exporter.daemon.exporter import Exporter
    from gpu_exporter.nvml.adapter import Device
    from gpu_exporter.nvml.binding import count_calls
    from gpu_exporter.poll.catalog import BY_NAME, metric
    from gpu_exporter.settings.config import Settings
    from tests.simnode import PER_GPU_READERS, VirtualClock, shuffle_readers

    # Every field id the exporter asks in a field-values call, whatever for.
    fields_asked: set[int] = set()
    scoped = Device.scoped_field_values

    def recording(device: Device, fields: Any) -> Any:
        fields_asked.update(fid for fid, _scope in fields)
        return scoped(device, fields)

    Device.scoped_field_values = recording  # type: ignore[method-assign]
    clock = VirtualClock()
    settings = Settings(web={"listen_address": "127.0.0.1:0"})
    exporter = Exporter(settings, None, monotonic=clock, wall_clock=clock, synchronous=True)
    try:
        order = [s.name for s in exporter.poller.stages if s.name in PER_GPU_READERS]
        if order_seed is not None:
            order = shuffle_readers(exporter, order_seed)
        interval = settings.poll.interval
        snap = exporter.poller.poll_once()  # NVML starts: discovery, static facts
        counts = count_calls()
        for _ in range(polls - 1):
            clock.advance(interval)
            snap = exporter.poller.poll_once()
        series = {name: [[labels, s.value] for s in snap.samples.get(name, ())
                         for labels in [dict(zip(metric(name).labels, s.labels, strict=True))]]
                  for name in FAMILIES if name in BY_NAME}
        return {"gpus": len(exporter.session.gpus), "polls": polls - 1,
                "calls": dict(counts), "series": series, "order": order,
                "fields_asked": sorted(fields_asked),
                # Every series of the GPUs (not the host's, read from this
                # machine's /proc, nor the exporter's own timings).
                "exported": sorted([name, list(s.labels), s.value]
                                   for name, samples in snap.samples.items()
                                   if not name.startswith(("gpu_host_", "gpu_exporter_"))
                                   for s in samples),
                "read_errors": sum(value for _, value in
                                   snap.series("gpu_exporter_collector_errors_total"))}
    finally:
        exporter.stop()


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[2]) if len(sys.argv) > 2 else 31,
                             int(sys.argv[3]) if len(sys.argv) > 3 else None)))
