"""A recording played back: what the recorded GPUs answered at each poll,
laid over the state the world derives (a recording holds only what changed
from one poll to the next).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.gpu_state import NO_MIG, GpuProcess, GpuState
from gpu_exporter.simulator.model import Replay

_REPLAY_SCALARS = ("util_pct", "mem_util_pct", "mem_total", "mem_reserved", "mem_used",
                   "temp_c", "mem_temp_c", "power_mw", "limit_mw", "default_limit_mw",
                   "energy_mj", "pstate", "reasons", "supported_reasons", "pcie_gen",
                   "pcie_width", "pcie_max_gen", "pcie_max_width", "pcie_replays",
                   "pcie_tx_bytes", "pcie_rx_bytes", "uuid", "serial", "bus_id")
_REPLAY_CLOCKS = ("clocks_mhz", "max_clocks_mhz", "app_clocks_mhz", "default_app_clocks_mhz")


def apply_replay(st: GpuState, rec: dict[str, Any]) -> None:
    """Overwrite the derived state with what the recorded GPU answered."""
    for key in _REPLAY_SCALARS:
        if key in rec:
            setattr(st, key, rec[key])
    for key in _REPLAY_CLOCKS:
        getattr(st, key).update({int(k): int(v) for k, v in rec.get(key, {}).items()})
    if "fans_pct" in rec:
        st.fans_pct = [int(v) for _, v in sorted(rec["fans_pct"].items())]
    if "ecc" in rec:
        st.ecc = {tuple(int(x) for x in k.split("/")): int(v)  # type: ignore[misc]
                  for k, v in rec["ecc"].items()}
    if "ecc_enabled" in rec:
        st.ecc_enabled = bool(rec["ecc_enabled"])
    if "persistence" in rec:
        st.persistence = bool(rec["persistence"])
    if "remapped" in rec:
        st.remapped = tuple(int(x) for x in rec["remapped"])  # type: ignore[assignment]
    # The driver's verdicts are read from the condition, as a scenario sets them.
    verdicts: dict[str, Any] = {
        key: rec[key] for key in ("recovery_action", "fabric_state", "fabric_status",
                                  "fabric_health") if key in rec}
    if verdicts:
        st.condition = {**st.condition, **verdicts}
    # A recording holds the throttle time counters only where it read them;
    # without them NVML's answer is unknown, so the fields answer NOT_SUPPORTED.
    st.throttle_ns = {str(k): int(v) for k, v in rec.get("throttle_ns", {}).items()}
    st.lost = bool(rec.get("lost", False))
    st.errors.update({name: int(Return[code]) for name, code in rec.get("errors", {}).items()})
    st.field_errors = {int(k): int(Return[v]) for k, v in rec.get("field_errors", {}).items()}
    if "nvlink_up" in rec:
        links = sorted(int(k) for k in rec["nvlink_up"])
        st.nvlink_up = [bool(rec["nvlink_up"][k]) for k in links]
        st.nvlink_errors = [{int(cid): int(n) for cid, n in
                             rec.get("nvlink_errors", {}).get(k, {}).items()} for k in links]
        st.nvlink_tx_kib = [int(rec.get("nvlink_tx_kib", {}).get(k, 0)) for k in links]
        st.nvlink_rx_kib = [int(rec.get("nvlink_rx_kib", {}).get(k, 0)) for k in links]
    if "processes" in rec:
        sm = rec.get("process_sm_pct", {})
        st.processes = [GpuProcess(
            pid=int(pr["pid"]), used_bytes=int(pr["used_bytes"]),
            gpu_instance=NO_MIG if pr["gpu_instance"] is None else int(pr["gpu_instance"]),
            compute_instance=NO_MIG if pr["compute_instance"] is None
            else int(pr["compute_instance"]),
            graphics=bool(pr["graphics"]),
            sm_util_pct=None if pr["pid"] not in sm else int(sm[pr["pid"]]))
            for pr in rec["processes"]]
    for m, r in zip(st.mig, sorted(rec.get("mig", {}).items()), strict=False):
        slot = r[1]
        if "uuid" in slot or "memory_total" in slot:
            st.mig[st.mig.index(m)] = replace(
                m, uuid=slot.get("uuid", m.uuid),
                memory_total=int(slot.get("memory_total", m.memory_total)),
                memory_used=int(slot.get("memory_used", m.memory_used)))


class RecordedPolls:
    """The recorded answers of every GPU, poll by poll."""

    def __init__(self, replay: Replay | None) -> None:
        # Each recorded poll holds only what changed: accumulate full answers.
        self._polls: list[tuple[float, dict[int, dict[str, Any]]]] = []
        full: dict[int, dict[str, Any]] = {}
        for poll in sorted(replay.polls, key=lambda p: p.t) if replay else []:
            for index, changed in poll.gpus.items():
                full[index] = {**full.get(index, {}), **changed}
            self._polls.append((poll.t, {i: dict(g) for i, g in full.items()}))

    def at(self, i: int, t: float) -> dict[str, Any] | None:
        """The recorded answers of GPU i at the last poll at or before t."""
        if not self._polls:
            return None
        current = self._polls[0][1]
        for at, gpus in self._polls:
            if at > t + 1e-9:
                break
            current = gpus
        return current.get(i)
