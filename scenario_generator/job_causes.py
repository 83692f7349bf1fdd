"""A multi-GPU job's straggler: one rank slowed by a cause of its own (its
container's CPU limit, its GPU's heat, a narrow link, CPUs on the wrong
socket) while every other rank of the job waits for it.

A data-parallel job moves at the pace of its slowest rank. While the
straggler computes, its peers have finished their step and wait for it in
their collectives: NCCL keeps a kernel spinning on each peer GPU, so NVML
reads those GPUs fully busy (a kernel is always running) while GPM reads
their SMs all but idle (the spin kernel occupies a few SMs). The peers'
waiting is the straggler's doing: the diagnosis must report the straggler's
own cause on its GPU, naming its rank's owner, and nothing of its own for
the waiting peers.
"""

from __future__ import annotations

from collections.abc import Callable

from scenario_generator.node import NodeBuilder
from scenario_generator.truth import Expected

# What a peer rank that waits sets on its GPU and process: no cause may
# change them after (its load, its SM activity, its process).
PEER_TOUCHES = frozenset({"util", "memory", "main", "starve", "burst", "gpm", "job"})


def _job_gpus(b: NodeBuilder) -> list[int]:
    """The target and at least one other GPU of the node; the rest keep jobs
    of their own."""
    others = [i for i in range(b.count) if i != b.target]
    peers = b.rng.sample(others, b.rng.randint(1, len(others)))
    return sorted([b.target, *peers])


def _wait(b: NodeBuilder, gpu: int) -> None:
    """GPU ``gpu``'s rank waits in its collectives: a spinning kernel keeps
    NVML's utilization at 97-100 % while a few SMs of the GPU are active
    (1-10 %)."""
    util = b.u(0.97, 1.0)
    cond = b.gpus[gpu].condition
    cond["utilization"] = round(util, 4)
    cond["sm_active"] = round(b.u(0.01, 0.1), 3)
    main = b.main(gpu)
    assert main is not None
    main["sm_utilization"] = round(util, 3)


def straggler(own: Callable[[NodeBuilder], list[Expected]]
              ) -> Callable[[NodeBuilder], list[Expected]]:
    """The injection of a straggler slowed by ``own`` (a cause's injection,
    made on the straggler's GPU): the target becomes a rank of a job over
    several GPUs of the node and its peers wait for it. The truth is
    ``own``'s, on the straggler's GPU, naming its rank's owner."""

    def inject(b: NodeBuilder) -> list[Expected]:
        gpus = _job_gpus(b)
        b.form_job(gpus)
        for gpu in gpus:
            if gpu != b.target:
                _wait(b, gpu)
        return own(b)

    inject.__name__ = f"straggler_{own.__name__}"
    return inject
