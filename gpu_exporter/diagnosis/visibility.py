"""Whether the exporter could see the GPUs at all when it drew its findings.

No findings from a node whose GPUs cannot be read says nothing about the GPUs:
``diagnose`` must say "could not see", never "healthy". Three ways to be blind:
NVML down (no driver, no library, a driver upgraded underneath), NVML up with no
GPU, and a newest poll too old to speak for now; a fourth by choice: the
device reader switched off."""

from __future__ import annotations

from typing import Any

from gpu_exporter.poll.readings import GpuReading
from gpu_exporter.poll.snapshot import Slot, Snapshot

# Why NVML is not available, in the NVML session's words: the poller publishes
# it with every snapshot taken while NVML is down, so a snapshot says by itself
# what it could not see.
NVML_PROBLEM: Slot[str] = Slot("nvml_problem")


def visibility(snap: Snapshot | None, now: float, stale_after: float) -> dict[str, Any]:
    """What /diagnosis reports next to its findings: ``blind`` is None when
    the GPUs were read, otherwise one sentence saying why they were not."""
    if snap is None:
        return {"nvml_up": False, "gpus": 0, "gpus_answering": 0,
                "poll_age_seconds": None, "blind": "no poll has completed yet"}
    nvml_up = bool(snap.get("gpu_exporter_nvml_up"))
    nvml_problem = snap.derived(NVML_PROBLEM)
    gpus: dict[int, GpuReading] = snap.readings.gpus or {}
    answering = sum(1 for g in gpus.values() if g.up)
    age = max(0.0, now - snap.timestamp)
    blind: str | None = None
    if snap.readings.gpus is None:
        # The exporter never asks NVML then, so "NVML is not available" would
        # send the reader of this sentence after a driver that is fine.
        blind = "the device reader is switched off (collectors.device): no GPU is read"
    elif not nvml_up:
        blind = "NVML is not available" + (f": {nvml_problem}" if nvml_problem else
                                           " (see gpu_exporter_nvml_up and the exporter's log)")
    elif not gpus:
        blind = "NVML is up but reports no GPU on this node"
    elif age > stale_after:
        blind = (f"the exporter's newest poll is {age:.0f}s old: its polls have stopped, so "
                 "its findings no longer describe the node")
    return {"nvml_up": nvml_up, "gpus": len(gpus), "gpus_answering": answering,
            "poll_age_seconds": round(age, 3), "blind": blind}


__all__ = ["NVML_PROBLEM", "visibility"]
