"""MIG: whether each GPU is split, and each instance's identity and memory.
The parent GPU keeps its device-level series; GPM and process series of an
instance carry ``gpu_instance`` and ``compute_instance``."""

from __future__ import annotations

from gpu_exporter.cadence import SLOW_READ_EVERY_POLLS
from gpu_exporter.collectors.base import NvmlCollector
from gpu_exporter.nvml.adapter import Device
from gpu_exporter.nvml.errors import NvmlError, Return
from gpu_exporter.nvml.session import Gpu, GpuGone
from gpu_exporter.readings import MigReading
from gpu_exporter.snapshot import SnapshotBuilder


def read_instances(gpu: Gpu, d: Device) -> list[MigReading] | None:
    """The GPU's MIG instances; None when MIG is unsupported or off."""
    # MIG mode changes only across a GPU reset, and the call costs 0.13-0.3 ms
    # on an H100: read it with the device collector's slow reads.
    if not gpu.slow_read("mig_mode", d.mig_mode, every=SLOW_READ_EVERY_POLLS):
        return None
    slots = gpu.static_read("mig_max", d.max_mig_devices) or 0
    out = []
    for slot in range(slots):
        try:
            mig = d.mig_device(slot)
            total, used = mig.memory()
            out.append(MigReading(mig.gpu_instance(), mig.compute_instance(), mig.uuid(),
                                  total, used, slot))
        except NvmlError as exc:
            if exc.code in (Return.NOT_FOUND, Return.INVALID_ARGUMENT):
                break  # past the last configured instance
            if exc.device_gone:
                raise GpuGone(str(exc)) from None
            gpu.errors += 1
    return out


class MigCollector(NvmlCollector):
    name = "mig"
    description = "MIG mode and per-instance identity and memory"

    def collect(self, out: SnapshotBuilder) -> None:
        self._errors = 0
        found: dict[int, list[MigReading]] = {}
        out.readings.mig = found
        if not self.session.up:
            return

        def one(gpu: Gpu, device: Device) -> None:
            instances = read_instances(gpu, device)
            if "mig_mode" in gpu.unsupported:
                return
            labels = {"gpu": str(gpu.index), "uuid": gpu.identity.uuid}
            out.add("gpu_mig_mode_enabled", instances is not None, **labels)
            for m in instances or []:
                found.setdefault(gpu.index, []).append(m)
                mig = {**labels, "gpu_instance": str(m.gpu_instance),
                       "compute_instance": str(m.compute_instance)}
                out.add("gpu_mig_info", 1, **mig, mig_uuid=m.uuid)
                out.add("gpu_mig_memory_total_bytes", m.memory_total_bytes, **mig)
                out.add("gpu_mig_memory_used_bytes", m.memory_used_bytes, **mig)

        self._errors = self.session.each_gpu(one)
