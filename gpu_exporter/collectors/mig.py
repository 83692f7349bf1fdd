"""MIG: whether each GPU is split, and each instance's identity, profile and
memory. The parent GPU keeps its device-level series; GPM and process series of
an instance carry ``gpu_instance`` and ``compute_instance``."""

from __future__ import annotations

import logging

from gpu_exporter.catalogs.deep import (
    MIG_INFO,
    MIG_MEMORY_TOTAL_BYTES,
    MIG_MEMORY_USED_BYTES,
    MIG_MODE_ENABLED,
)
from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.facts.cadence import FACT_READ_EVERY_POLLS
from gpu_exporter.nvml.adapter import Device, MigDevice
from gpu_exporter.nvml.errors import NvmlError, Return
from gpu_exporter.nvml.mig import profile_name
from gpu_exporter.nvml.session import Gpu, GpuGone
from gpu_exporter.nvml.values import GpuReads
from gpu_exporter.poll.readings import MigReading
from gpu_exporter.poll.snapshot import SnapshotBuilder

log = logging.getLogger(__name__)


def instance_profile(gpu: Gpu, d: Device, mig: MigDevice, gpu_instance: int) -> str:
    """The GPU instance's profile name ("1g.10gb"); "" where NVML cannot say.

    From the profile ID of the GPU instance (a privileged read) in the GPU's
    profile table (R510 and newer, read once); else from the MIG device's own
    name ("NVIDIA H100 80GB HBM3 MIG 1g.10gb"), which every branch answers
    without privileges. Each way that is missing is logged once.
    """
    table = gpu.static_read("mig_profiles", d.gpu_instance_profiles, refusal_has_fallback=True)
    if table:
        profile_id = gpu.read("mig_gpu_instance", d.gpu_instance_profile_id, gpu_instance,
                              refusal_has_fallback=True)
        if profile_id is not None:
            listed = next((p for p in table if p.id == profile_id), None)
            if listed is not None and listed.short_name:
                return listed.short_name
            if listed is None and f"mig_profile_{profile_id}" not in gpu.warned:
                gpu.warned.add(f"mig_profile_{profile_id}")
                log.info("GPU %d: GPU instance %d has profile ID %d, which NVML's profile "
                         "table of the GPU does not list; its name is read from the MIG "
                         "device's name instead", gpu.index, gpu_instance, profile_id)
    name = gpu.read("mig_name", mig.name)
    return profile_name(name) if name else ""


def instance_memory(gpu: Gpu, mig: MigDevice) -> tuple[int, int]:
    """(total, used) bytes of the instance; through the v1 call on drivers
    without nvmlDeviceGetMemoryInfo_v2 (before R510), said once."""
    if "mig_memory_v2" not in gpu.unsupported:
        try:
            return mig.memory()
        except NvmlError as exc:
            if not exc.capability_absent:
                raise
            gpu.unsupported.add("mig_memory_v2")
            gpu.missing.note(gpu.index, "mig_memory_v2", exc)
    return mig.memory_v1()


def read_instances(gpu: Gpu, d: Device, reads: GpuReads) -> list[MigReading] | None:
    """The GPU's MIG instances; None when MIG is unsupported or off."""
    # MIG mode changes only across a GPU reset, and the call is among the
    # costlier ones on a real H100 (BENCHMARKS.md): read with the facts (and at
    # once after an event or a reload).
    if not reads.slow_read("mig_mode", d.mig_mode, every=FACT_READ_EVERY_POLLS):
        return None
    slots = gpu.static_read("mig_max", d.max_mig_devices) or 0
    # A profile does not change while its instance lives, and a new instance
    # has a new UUID: each instance's profile is read once, by UUID.
    held = gpu.static.get("mig_profile_by_uuid")
    known: dict[str, str] = held if isinstance(held, dict) else {}
    profiles: dict[str, str] = {}
    out = []
    for slot in range(slots):
        try:
            mig = d.mig_device(slot)
            total, used = instance_memory(gpu, mig)
            gi, ci, uuid = mig.gpu_instance(), mig.compute_instance(), mig.uuid()
        except NvmlError as exc:
            if exc.code in (Return.NOT_FOUND, Return.INVALID_ARGUMENT):
                break  # past the last configured instance
            if exc.device_gone:
                raise GpuGone(str(exc)) from None
            gpu.errors += 1
            continue
        profile = known.get(uuid)
        if profile is None:
            errors = gpu.errors
            profile = instance_profile(gpu, d, mig, gi)
            if gpu.errors == errors:  # after a failed read it is asked again next poll
                profiles[uuid] = profile
        else:
            profiles[uuid] = profile
        out.append(MigReading(gi, ci, uuid, total, used, slot, profile))
    gpu.static["mig_profile_by_uuid"] = profiles  # only the instances there now
    return out


class MigCollector(NvmlCollector):
    name = "mig"
    description = "MIG mode and per-instance identity, profile and memory"

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        found: dict[int, list[MigReading]] = {}
        out.readings.mig = found
        if not self.session.begin(self.name, out):
            return

        def one(gpu: Gpu, device: Device) -> None:
            instances = read_instances(gpu, device, self.session.reads.of(gpu))
            if "mig_mode" in gpu.unsupported:
                return
            labels = {"gpu": str(gpu.index), "uuid": gpu.identity.uuid}
            out.add(MIG_MODE_ENABLED, instances is not None, **labels)
            for m in instances or []:
                found.setdefault(gpu.index, []).append(m)
                mig = {**labels, "gpu_instance": str(m.gpu_instance),
                       "compute_instance": str(m.compute_instance)}
                out.add(MIG_INFO, 1, **mig, mig_uuid=m.uuid, mig_profile=m.profile)
                out.add(MIG_MEMORY_TOTAL_BYTES, m.memory_total_bytes, **mig)
                out.add(MIG_MEMORY_USED_BYTES, m.memory_used_bytes, **mig)

        each = self.session.each_gpu()
        for gpu, device in each:
            with each:
                one(gpu, device)
        self._errors = each.errors
