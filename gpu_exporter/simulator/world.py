"""The simulated node's GPUs at a moment: the scenario's conditions at time t
(timeline.py) turned into what a real GPU would report (in NVML's units,
gpu_state.py), with counters (energy, PCIe bytes, replays) integrated over
time, and a recording's answers laid over them (replay.py).
"""

from __future__ import annotations

import math
import threading
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from gpu_exporter.nvml.constants import (
    FI_DEV_C2C_LINK_ERROR_INTR,
    FI_DEV_C2C_LINK_ERROR_REPLAY,
    FI_DEV_C2C_LINK_ERROR_REPLAY_B2B,
    REASON_BITS,
    THROTTLE_TIME_FIELDS,
)
from gpu_exporter.nvml.errors import Return
from gpu_exporter.simulator.gpu_state import (
    MIB,
    NO_MIG,
    UTILIZATION_SAMPLES,
    GpuProcess,
    GpuState,
    MigState,
    bus_id,
)
from gpu_exporter.simulator.model import DeviceProfile, Scenario
from gpu_exporter.simulator.replay import RecordedPolls, apply_replay
from gpu_exporter.simulator.timeline import ScenarioTimeline

_THERMAL = ("hw_slowdown", "hw_thermal", "sw_thermal")


@dataclass
class _Counters:
    last_t: float
    energy_mj: float
    tx: float = 0.0
    rx: float = 0.0
    replays: float = 0.0
    c2c_replays: float = 0.0
    gpm: dict[str, float] = field(default_factory=dict)
    nvlink: dict[tuple[int, str], float] = field(default_factory=dict)
    mig_active: dict[int, float] = field(default_factory=dict)
    mig_gpm: dict[tuple[int, str], float] = field(default_factory=dict)
    throttle_ns: dict[str, float] = field(default_factory=dict)  # reason -> ns held


# The inlet air the profiles' idle temperatures and load rises assume.
INLET_REFERENCE_C = 25.0
# GPM per MIG instance: the metrics a GPU instance's samples carry, and how an
# unset one follows the instance's SM activity (as the GPU's own follow its
# utilization: occupancy 0.5, tensor 0.6 and DRAM 0.45 for SM activity 0.85).
_MIG_GPM = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")
_MIG_GPM_SHARE = {"sm_occupancy": 0.5 / 0.85, "tensor_active": 0.6 / 0.85,
                  "dram_active": 0.45 / 0.85}


def _mig_gpm_rates(m: dict[str, Any]) -> dict[str, float]:
    active = float(m["sm_active"])
    rates = {"sm_active": active}
    for name, share in _MIG_GPM_SHARE.items():
        given = m.get(name)
        rates[name] = min(1.0, active * share) if given is None else float(given)
    return rates


# NVLink error counter ids (nvmlNvLinkErrorCounter_t) and the condition rate that drives each.
NVLINK_COUNTERS = {0: "nvlink_replay_errors_per_s", 1: "nvlink_recovery_errors_per_s",
                   2: "nvlink_crc_errors_per_s"}
# NVLink 5's FEC counts (Blackwell boards) and the condition rate that drives each.
NVLINK_FEC_COUNTERS = {"effective": "nvlink_effective_errors_per_s",
                       "symbol": "nvlink_symbol_errors_per_s"}
# An NVLink 5 link's bits a second in each direction, over which its BER is
# counted: 53.125 GB/s (NVIDIA's GB200 board file, as `nvidia-smi nvlink -s`).
NVLINK5_BITS_PER_S = 53.125e9 * 8
_BLACKWELL = 10
# Per direction and link, a busy NVLink 4 link moves a share of its 25 GB/s.
_NVLINK_BUSY_BYTES_PER_S = 0.3 * 25e9


class World(ScenarioTimeline):
    """``tick_s``: how long the GPUs' state stands once computed. 0 (the
    default) computes it again whenever the clock has moved, which a virtual
    clock (tests) needs; on a real clock every NVML call would otherwise
    compute every GPU again. A real driver also refreshes its readings on a
    period (power every 20 ms, utilization every 200 ms), so a state that
    stands for a few tens of milliseconds is what a real GPU answers too."""

    def __init__(self, scenario: Scenario, profile: DeviceProfile,
                 clock: Callable[[], float], tick_s: float = 0.0) -> None:
        super().__init__(scenario, clock)
        self.profile = profile
        self.tick_s = tick_s
        self._lock = threading.Lock()
        self._uuids = [str(uuidlib.uuid5(uuidlib.NAMESPACE_URL,
                                         f"gpu-exporter-sim/{scenario.node.id}/{i}"))
                       for i in range(self.gpu_count)]
        # MIG: slices of each profile ID the board has, and the profile an
        # instance gets where the scenario names none (the one-slice profile).
        self._mig_slices = {m.id: m.slices for m in profile.mig_profiles}
        self._one_slice_profile_id = next(
            (m.id for m in profile.mig_profiles if m.profile == 0), 0)
        self._counters = [_Counters(0.0, energy_mj=3.6e9 * (1 + 0.1 * i))
                          for i in range(self.gpu_count)]
        # The GPUs lost now: one that answers again was reset (a GPU off the
        # bus comes back only through a reset or a driver reload), and the
        # driver's counters of it start again from 0.
        self._lost: set[int] = set()
        self._cache: tuple[float, list[GpuState]] | None = None
        self._replay = RecordedPolls(scenario.replay)

    # --- state -----------------------------------------------------------
    def states(self) -> list[GpuState]:
        """Every GPU's state now; counters advance with the clock."""
        with self._lock:
            t = self.elapsed()
            if self._cache is not None and 0.0 <= t - self._cache[0] <= self.tick_s:
                return self._cache[1]
            states = [self._state(i, t) for i in range(self.gpu_count)]
            self._cache = (t, states)
            return states

    def state(self, index: int) -> GpuState:
        return self.states()[index]

    def _wobble(self, index: int, t: float, amplitude: float, speed: float = 1.3) -> float:
        if not self.scenario.noise:
            return 0.0
        return amplitude * math.sin(speed * t + 1.7 * index)


    def _state(self, i: int, t: float) -> GpuState:
        p = self.profile
        c = self.condition(i, t)
        rec = self._replay.at(i, t)
        if rec is not None:
            c = {**c, **rec.get("rates", {})}
            if rec.get("mig"):
                c["mig_instances"] = [{
                    "gpu_instance": m.get("gpu_instance", slot),
                    "profile_id": m.get("profile_id"),
                    "compute_instance": m.get("compute_instance", 0),
                    "memory_total_mib": max(1, int(m.get("memory_total", MIB)) // MIB),
                    "memory_used_ratio": (m.get("memory_used", 0) / m["memory_total"]
                                          if m.get("memory_total") else 0.0),
                    "sm_active": m.get("sm_active", 0.0)} for slot, m in sorted(rec["mig"].items())]
        util = float(c.get("utilization", 0.0))
        busy = util >= 0.05
        if busy:
            util = min(1.0, max(0.0, util * self.jitter(f"gpu{i}/util", t)
                                + self._wobble(i, t, 0.015)))
        reasons = set(c.get("throttle_reasons", []))
        if not busy:
            reasons.add("gpu_idle")
        temp = self._temperature(i, t, c, util)
        # A derived temperature at the board's max operating temperature is
        # where the driver's thermal control takes over: it lowers the clocks
        # (sw_thermal) and holds the temperature there.
        if "temperature_c" not in c and temp >= p.temperature_thresholds_c.max_operating:
            reasons.add("sw_thermal")
            temp = float(p.temperature_thresholds_c.max_operating)

        max_sm = p.clocks_max_mhz.sm
        default_app = p.clocks_application_mhz.sm
        app_sm = int(c.get("application_sm_clock_mhz", default_app))
        # GPU Boost runs above the default application clock; only an
        # administrator's lower setting holds the clocks back.
        app_capped = app_sm < default_app
        if busy and app_capped:
            reasons.add("applications_clocks_setting")
        if "sm_clock_mhz" in c:
            sm = int(c["sm_clock_mhz"])
        elif not busy:
            sm = p.clocks_idle_mhz.sm
        else:
            sm = min(max_sm, app_sm) if app_capped else max_sm
            if "hw_power_brake" in reasons:
                sm = int(sm * 0.40)
            elif reasons & set(_THERMAL):
                sm = int(sm * 0.65)
            elif "sw_power_cap" in reasons:
                sm = int(sm * 0.82)
        mem_clock = p.clocks_max_mhz.memory if busy else p.clocks_idle_mhz.memory

        limit_w = float(c.get("power_limit_w", p.power_default_limit_w))
        if "power_w" in c:
            power_w = float(c["power_w"])
        elif "sw_power_cap" in reasons and busy:
            # The cap engages because a busy GPU wants more than its limit; an
            # idle GPU with the bit set still draws idle power.
            power_w = limit_w * 0.995
        else:
            power_w = p.power_idle_w + (0.9 * limit_w - p.power_idle_w) * util
            power_w += self._wobble(i, t, 0.02 * power_w, 0.7) if busy else 0.0
            power_w *= self.jitter(f"gpu{i}/power", t) if busy else 1.0
        power_w = min(power_w, limit_w)

        temp += self._wobble(i, t, 0.5, 0.3)
        mem_temp = None if p.memory_temperature_offset_c is None else \
            temp + p.memory_temperature_offset_c

        total = p.memory_total_mib * MIB
        reserved = p.memory_reserved_mib * MIB
        usable = total - reserved
        procs = [GpuProcess(
            pid=pc.pid, used_bytes=int(min(1.0, pc.gpu_memory_ratio
                                           + pc.gpu_memory_growth_ratio_per_s * t) * usable),
            gpu_instance=pc.mig[0] if pc.mig else NO_MIG,
            compute_instance=pc.mig[1] if pc.mig else NO_MIG,
            graphics=pc.type == "graphics",
            sm_util_pct=None if pc.sm_utilization is None else round(pc.sm_utilization * 100))
            for pc in self.processes(t) if i in pc.gpus]
        used = int(float(c.get("memory_used_ratio", 0.0)) * usable)
        used = min(usable, max(used, sum(pr.used_bytes for pr in procs)))

        gen_max, width_max = p.pcie_max_generation, p.pcie_max_width
        gen = int(c.get("pcie_link_generation", gen_max))
        if not busy:
            # Real GPUs downshift an idle link to save power.
            gen = min(gen, p.pcie_idle_generation)
        width = int(c.get("pcie_link_width", width_max))

        tx_rate = float(c.get("pcie_tx_bytes_per_s", 1.1e9 * util)) * \
            self.jitter(f"gpu{i}/pcie_tx", t)
        rx_rate = float(c.get("pcie_rx_bytes_per_s", 3.4e9 * util)) * \
            self.jitter(f"gpu{i}/pcie_rx", t)
        if c.get("lost", False):
            self._lost.add(i)
        elif i in self._lost:
            self._lost.discard(i)
            self._counters[i] = _Counters(t, energy_mj=0.0)
        cnt = self._counters[i]
        dt = t - cnt.last_t
        if dt > 0:
            cnt.energy_mj += power_w * 1000.0 * dt
            cnt.tx += tx_rate * dt
            cnt.rx += rx_rate * dt
            cnt.replays += float(c.get("pcie_replays_per_s", 0.0)) * dt * \
                self.jitter(f"gpu{i}/replays", t)
            cnt.c2c_replays += float(c.get("c2c_replay_errors_per_s", 0.0)) * dt

        gpm_rates = {
            "sm_active": float(c.get("sm_active", 0.85 * util)),
            "sm_occupancy": float(c.get("sm_occupancy", 0.5 * util)),
            "tensor_active": float(c.get("tensor_active", 0.6 * util)),
            "dram_active": float(c.get("dram_active", 0.45 * util)),
        }
        links = p.nvlinks
        down = set(c.get("nvlink_down", []))
        erring = None if c.get("nvlink_error_links") is None else set(c["nvlink_error_links"])
        link_rate = float(c.get("nvlink_bytes_per_s", _NVLINK_BUSY_BYTES_PER_S * util))
        mig_conf = [m for m in c.get("mig_instances", [])] if p.mig else []
        for name in gpm_rates:
            cnt.gpm.setdefault(name, 0.0)
        if dt > 0:
            for name, rate in gpm_rates.items():
                cnt.gpm[name] += rate * dt
            for link in range(links):
                if link in down:
                    continue
                for direction in ("tx", "rx"):
                    key = (link, direction)
                    cnt.nvlink[key] = cnt.nvlink.get(key, 0.0) + link_rate * dt
                if erring is not None and link not in erring:
                    continue
                for cid, field_name in NVLINK_COUNTERS.items():
                    key = (link, f"err{cid}")
                    rate = float(c.get(field_name, 0.0))
                    cnt.nvlink[key] = cnt.nvlink.get(key, 0.0) + rate * dt
                for kind, field_name in NVLINK_FEC_COUNTERS.items():
                    key = (link, kind)
                    cnt.nvlink[key] = cnt.nvlink.get(key, 0.0) + float(
                        c.get(field_name, 0.0)) * dt
            for m in mig_conf:
                gi = int(m["gpu_instance"])
                cnt.mig_active[gi] = cnt.mig_active.get(gi, 0.0) + float(m["sm_active"]) * dt
                for name, rate in _mig_gpm_rates(m).items():
                    cnt.mig_gpm[(gi, name)] = cnt.mig_gpm.get((gi, name), 0.0) + rate * dt
        mig_states = []
        first_slice = 0
        for m in mig_conf:
            profile_id = m.get("profile_id")
            if profile_id is None:
                profile_id = self._one_slice_profile_id
            slices = self._mig_slices.get(int(profile_id), 1)
            mig_states.append(MigState(
                gpu_instance=int(m["gpu_instance"]), compute_instance=int(m["compute_instance"]),
                # A GPU instance re-created with another profile is a new MIG device.
                uuid="MIG-" + str(uuidlib.uuid5(
                    uuidlib.NAMESPACE_URL,
                    f"{self._uuids[i]}/{m['gpu_instance']}/{profile_id}")),
                memory_total=int(m["memory_total_mib"]) * MIB,
                memory_used=int(float(m["memory_used_ratio"]) * int(m["memory_total_mib"]) * MIB),
                sm_active_s=cnt.mig_active.get(int(m["gpu_instance"]), 0.0),
                profile_id=int(profile_id), placement=(first_slice, slices),
                gpm={name: cnt.mig_gpm.get((int(m["gpu_instance"]), name), 0.0)
                     for name in _MIG_GPM}))
            first_slice += slices

        supported = 0
        for r in p.supported_clock_reasons:
            supported |= REASON_BITS[r]
        counted = [r for r in THROTTLE_TIME_FIELDS.values() if supported & REASON_BITS[r]]
        for r in counted:
            cnt.throttle_ns.setdefault(r, 0.0)
        if dt > 0:
            self._add_throttle_time(i, cnt, cnt.last_t, t, counted)
            cnt.last_t = t
        ecc_on = bool(c.get("ecc_enabled", p.ecc))
        cv = int(c.get("ecc_corrected_volatile", 0))
        uv = int(c.get("ecc_uncorrected_volatile", 0))
        ecc = {(0, 0): cv, (1, 0): uv, (0, 1): cv + 3, (1, 1): uv}

        fans, fan_errors = self._fans(c, util)

        mask = 0
        for r in reasons:
            mask |= REASON_BITS[r]
        mask &= supported

        st = GpuState(
            index=i,
            lost=bool(c.get("lost", False)),
            uuid=f"GPU-{self._uuids[i]}",
            serial=str(p.serial_base + i) if p.serial_base else "",
            bus_id=bus_id(i),
            util_pct=round(util * 100),
            mem_util_pct=round(float(c.get("memory_utilization", 0.45 * util)) * 100),
            mem_total=total,
            mem_reserved=reserved,
            mem_used=used,
            temp_c=round(temp),
            mem_temp_c=None if mem_temp is None else round(mem_temp),
            power_mw=round(power_w * 1000),
            limit_mw=round(limit_w * 1000),
            default_limit_mw=round(p.power_default_limit_w * 1000),
            energy_mj=int(cnt.energy_mj),
            clocks_mhz={0: sm, 1: sm, 2: mem_clock},
            max_clocks_mhz={0: p.clocks_max_mhz.graphics, 1: max_sm, 2: p.clocks_max_mhz.memory},
            app_clocks_mhz={0: app_sm, 1: app_sm, 2: p.clocks_application_mhz.memory},
            default_app_clocks_mhz={0: default_app, 1: default_app,
                                    2: p.clocks_application_mhz.memory},
            pstate=0 if busy else p.pstate_idle,
            fans_pct=fans,
            reasons=mask,
            supported_reasons=supported,
            pcie_gen=gen,
            pcie_width=width,
            pcie_max_gen=gen_max,
            pcie_max_width=width_max,
            pcie_replays=int(cnt.replays),
            pcie_tx_bytes=int(cnt.tx),
            pcie_rx_bytes=int(cnt.rx),
            ecc_enabled=ecc_on,
            ecc=ecc,
            remapped=(int(c.get("remapped_rows_correctable", 0)),
                      int(c.get("remapped_rows_uncorrectable", 0)),
                      int(bool(c.get("remap_pending", False))),
                      int(bool(c.get("remap_failed", False)))),
            persistence=bool(c.get("persistence_mode", True)),
            errors={name: int(Return[code]) for name, code in c["errors"].items()},
            processes=procs,
            hangs=dict(c["hangs"]),
            gpm=dict(cnt.gpm),
            gpm_pcie=(int(cnt.tx), int(cnt.rx)),
            nvlink_up=[link not in down for link in range(links)],
            nvlink_errors=[{cid: int(cnt.nvlink.get((link, f"err{cid}"), 0.0))
                            for cid in NVLINK_COUNTERS} for link in range(links)],
            nvlink_fec=[{kind: int(cnt.nvlink.get((link, kind), 0.0)) for kind in
                         NVLINK_FEC_COUNTERS} for link in range(links)]
            if p.architecture >= _BLACKWELL else [],
            nvlink_ber=[{kind: float(c.get(name, 0.0)) / NVLINK5_BITS_PER_S
                         if link not in down and (erring is None or link in erring) else 0.0
                         for kind, name in NVLINK_FEC_COUNTERS.items()}
                        for link in range(links)] if p.architecture >= _BLACKWELL else [],
            nvlink_tx_kib=[int(cnt.nvlink.get((link, "tx"), 0.0) / 1024) for link in range(links)],
            nvlink_rx_kib=[int(cnt.nvlink.get((link, "rx"), 0.0) / 1024) for link in range(links)],
            c2c_errors={FI_DEV_C2C_LINK_ERROR_INTR: 0,
                        FI_DEV_C2C_LINK_ERROR_REPLAY: int(cnt.c2c_replays),
                        FI_DEV_C2C_LINK_ERROR_REPLAY_B2B: 0} if p.c2c else {},
            mig=mig_states,
            throttle_ns={r: int(ns) for r, ns in cnt.throttle_ns.items()},
            t=t,
            condition=c,
            fan_errors=fan_errors,
            board_temp_c=round(self._inlet(c) + 3.0 + 7.0 * util)
            if p.board_temperature_sensor else None,
        )
        if rec is not None:
            apply_replay(st, rec)
        return st

    @staticmethod
    def _inlet(c: dict[str, Any]) -> float:
        return float(c.get("inlet_temperature_c", INLET_REFERENCE_C))

    def _cooling(self, c: dict[str, Any]) -> float:
        """How much more the GPU heats under load than with every fan turning:
        the fans still turning carry the stopped ones' share (a board whose
        only fan stopped is left to the chassis' air: three times the rise)."""
        total = self.profile.fans
        stopped = sum(1 for f in c.get("fans", [])[:total] if f.get("stopped"))
        if not total or not stopped:
            return 1.0
        return total / max(total - stopped, total / 3.0)

    def _temperature(self, i: int, t: float, c: dict[str, Any], util: float) -> float:
        """The GPU's temperature before the driver's thermal control: its idle
        temperature plus its rise under load (more with fans stopped), moved
        one for one with the inlet air; ``temperature_c`` overrides."""
        if "temperature_c" in c:
            return float(c["temperature_c"])
        p = self.profile
        return (p.temperature_idle_c + p.temperature_load_rise_c * util * self._cooling(c)
                + self._inlet(c) - INLET_REFERENCE_C)

    def _thermal_control(self, i: int, t: float, c: dict[str, Any]) -> bool:
        """Whether the driver's thermal control holds the GPU back (a derived
        temperature at its max operating temperature)."""
        if "temperature_c" in c:
            return False
        util = float(c.get("utilization", 0.0))
        limit = self.profile.temperature_thresholds_c.max_operating
        return self._temperature(i, t, c, util) >= limit

    def _fans(self, c: dict[str, Any], util: float) -> tuple[list[int], dict[int, int]]:
        """Each fan's speed as NVML reports it (the fan curve: 30 % plus 45 % of
        the load, or what the scenario sets) and the fans whose call fails."""
        count = self.profile.fans
        if not count:
            return [], {}
        curve = float(c.get("fan_ratio", 0.3 + 0.45 * util))
        speeds = [round(curve * 100)] * count
        errors: dict[int, int] = {}
        for k, fan in enumerate(c.get("fans", [])[:count]):
            if fan.get("speed_ratio") is not None:
                speeds[k] = round(float(fan["speed_ratio"]) * 100)
            if fan.get("stopped"):
                speeds[k] = 0
            if fan.get("error"):
                errors[k] = int(Return[fan["error"]])
        return speeds, errors

    def _add_throttle_time(self, i: int, cnt: _Counters, t0: float, t1: float,
                           counted: list[str]) -> None:
        """Add the time each counted reason held in (t0, t1]. The interval is cut
        at the timeline's steps, so a reason set for part of it counts for that
        part only, as the driver's counters do, however seldom NVML is asked."""
        cuts = [t0, *(s.at for s in self._steps if t0 < s.at < t1), t1]
        for a, b in pairwise(cuts):
            cond = self.condition(i, a)
            held = set(cond.get("throttle_reasons", ()))
            if self._thermal_control(i, a, cond):
                held.add("sw_thermal")
            for r in counted:
                if r in held:
                    cnt.throttle_ns[r] += (b - a) * 1e9

    # --- sub-second samples ----------------------------------------------------
    def instant_utilization(self, index: int, t: float) -> float:
        """GPU busy (0-1) at the instant t, as the driver's sampler sees it."""
        c = self.condition(index, t)
        util = float(c.get("utilization", 0.0))
        period = c.get("burst_period_s")
        if period:
            return 1.0 if (t % float(period)) < util * float(period) else 0.0
        if util >= 0.05:
            util = min(1.0, max(0.0, util * self.jitter(f"gpu{index}/util", t)
                                + self._wobble(index, t, 0.015)))
        return util

    def samples(self, index: int, since: float, until: float,
                buffer: tuple[float, int] = UTILIZATION_SAMPLES) -> list[tuple[float, float]]:
        """(time, utilization) of every driver sample in (since, until] still in a
        ring buffer of ``buffer`` = (period, length)."""
        period, length = buffer
        # Only the newest ``length`` samples are kept: start no earlier than those.
        first = max(int(since // period) + 1, int((until + 1e-9) // period) - length + 1, 1)
        out = []
        k = first
        while k * period <= until + 1e-9:
            t = k * period
            out.append((t, self.instant_utilization(index, t)))
            k += 1
        return out
