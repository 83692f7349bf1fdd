"""Cases: one or two causes, confounders and noise on a drawn node.

Every cause and confounder comes up in turn as a case's first injection, so
each class gets its share of any run; the board, the tenant shape, the host
shape and the load band are drawn among those the injection can exist on. A
second cause (on the same GPU or another) and a confounder join where they do
not touch what the first one set. The truth is the union of what the causes
said the diagnosis must report.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from functools import cache

from gpu_exporter.simulator import builtin_profiles, load_profile
from gpu_exporter.simulator.model import DeviceProfile
from scenario_generator.causes import CAUSES, CONFOUNDERS, EVERY_GPU, Cause
from scenario_generator.job_causes import PEER_TOUCHES
from scenario_generator.node import TENANTS, HostShape, NodeBuilder, Tenant
from scenario_generator.truth import Case, Expected

_HOST_KEYS = frozenset({"host_io", "host_cpu", "host_mem", "swap", "steal", "host_heat",
                        EVERY_GPU})
# Every class comes up in turn; causes twice as often as confounders.
ROTATION: tuple[Cause, ...] = (*CAUSES, *CAUSES, *CONFOUNDERS)


@cache
def boards() -> dict[str, DeviceProfile]:
    return {key: load_profile(key) for key in builtin_profiles()}


def _fits_board(c: Cause, board: DeviceProfile, tenant: Tenant) -> bool:
    return c.boards(board) and (tenant != "mig" or board.mig)


def draw_host(rng: random.Random, needs: frozenset[str]) -> HostShape:
    cpus = rng.choice([32, 64, 128, 256])
    numa = rng.choice([2, 4] if "numa" in needs else [1, 2, 2, 4])
    return HostShape(cpus=cpus, numa_nodes=numa,
                     psi="psi" in needs or rng.random() < 0.85,
                     schedstat=rng.random() < 0.9,
                     vm="vm" in needs or rng.random() < 0.2,
                     swap="swap" in needs or rng.random() < 0.4,
                     delay_accounting=rng.random() < 0.3)


def _bands(loads: tuple[int, int]) -> list[int]:
    return list(range(loads[0] - loads[0] % 5, loads[1], 5))


def _util(rng: random.Random, band: int, loads: tuple[int, int]) -> float:
    lo, hi = max(band, loads[0]), min(band + 5, loads[1])
    return rng.uniform(lo, hi - 0.01) / 100


def _fits(c: Cause, b: NodeBuilder, gpu: int, taken: dict[int, frozenset[str]],
          host_taken: frozenset[str]) -> bool:
    """Whether ``c`` can join the node on GPU ``gpu`` beside what is there."""
    if b.tenant not in c.tenants or not _fits_board(c, b.board, b.tenant):
        return False
    if not c.host(b.shape) or any(not _has_need(b.shape, n) for n in c.needs):
        return False
    if c.touches & host_taken & _HOST_KEYS or c.job:
        return False
    # A cause of every GPU holding a job, and one that empties or loses a GPU.
    if c.exclusive and EVERY_GPU in host_taken:
        return False
    if EVERY_GPU in c.touches and any("exclusive" in t for t in taken.values()):
        return False
    here = taken.get(gpu, frozenset())
    if c.touches & here or (here and (c.exclusive or "exclusive" in here)):
        return False
    g = b.gpus[gpu]
    if "instance" in c.touches and not g.instances:
        return False
    if b.tenant == "mig" and gpu == b.target:
        util = g.instances[0].sm_active
    elif g.instances:
        return False
    else:
        util = float(g.condition.get("utilization", 0.0))
    return c.loads[0] / 100 <= util < c.loads[1] / 100 or (
        c.loads[1] == 100 and util >= 0.99)


def _has_need(h: HostShape, need: str) -> bool:
    return {"vm": h.vm, "swap": h.swap, "numa": h.numa_nodes > 1, "psi": h.psi}[need]


def _tagged(found: list[Expected], source: Cause, band: int) -> list[Expected]:
    return [replace(e, source=source.name, band=min(95, band)) for e in found]


def compose(seed: int, index: int) -> Case:
    """Case ``index`` of the run with ``seed``: the same case every time."""
    rng = random.Random(f"{seed}/{index}")
    first = ROTATION[index % len(ROTATION)]
    tenants = [t for t in TENANTS if t in first.tenants
               and any(_fits_board(first, p, t) for p in boards().values())]
    tenant = rng.choice(tenants)
    keys = [k for k, p in boards().items() if _fits_board(first, p, tenant)]
    board_key = rng.choice(keys)
    host = draw_host(rng, first.needs)
    while not first.host(host):
        host = draw_host(rng, first.needs)
    band = rng.choice(_bands(first.loads))
    util = _util(rng, band, first.loads)
    count = rng.choice([1, 2] if tenant == "mig" else [2, 2, 3, 4] if first.job
                       else [1, 2, 2, 3, 4])
    target = rng.randrange(count)
    b = NodeBuilder(rng, board_key, boards()[board_key], tenant, host, count, target, util)
    expected: list[Expected] = _tagged(first.inject(b), first, band)
    causes = [first.name] if first.finding else []
    confounders = [] if first.finding else [first.name]
    taken = {target: first.touches | ({"exclusive"} if first.exclusive else set())}
    for peer in b.job_gpus:  # a straggler's waiting peers
        if peer != target:
            taken[peer] = PEER_TOUCHES
    host_taken = first.touches & _HOST_KEYS

    def join(pool: tuple[Cause, ...], gpu: int) -> Cause | None:
        options = [c for c in pool if c is not first and _fits(c, b, gpu, taken, host_taken)]
        if not options:
            return None
        c = rng.choice(options)
        before_target, before_util = b.target, b.util
        b.target = gpu
        if not (tenant == "mig" and gpu == before_target):
            b.util = float(b.gpus[gpu].condition.get("utilization", 0.0))
        expected.extend(_tagged(c.inject(b), c, int(b.util * 100) // 5 * 5))
        b.target, b.util = before_target, before_util
        taken[gpu] = taken.get(gpu, frozenset()) | c.touches
        return c

    # A confounder's case stays about it: no second cause joins.
    if first.finding is not None and rng.random() < 0.35:
        gpu = target if count == 1 or rng.random() < 0.6 else rng.choice(
            [i for i in range(count) if i != target])
        second = join(CAUSES, gpu)
        if second is not None:
            causes.append(second.name)
            host_taken = host_taken | (second.touches & _HOST_KEYS)
    if rng.random() < 0.4:
        extra = join(CONFOUNDERS, target)
        if extra is not None:
            confounders.append(extra.name)
    if rng.random() < 0.7:
        # At most 8 %: a starved GPU at 65 % stays under 72 %, a fed one at 86 %
        # over 79 %, so the bands left out stay between them.
        b.jitter = rng.uniform(0.02, 0.08)
    name = f"s{seed}-{index:05d}"
    return Case(name=name, scenario=b.scenario(name), expected=tuple(expected),
                causes=tuple(causes), confounders=tuple(confounders), board=board_key,
                band=band, tenant=tenant, host=host.describe())


def cases(seed: int, count: int) -> Iterator[Case]:
    for index in range(count):
        yield compose(seed, index)
