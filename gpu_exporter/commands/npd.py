"""``gpu-exporter diagnose --format npd --condition CLASS``: the findings as
one node condition, in node-problem-detector's custom plugin protocol.

NPD runs a plugin every ``invoke_interval`` and reads its exit status (0: OK,
the condition is False; 1: NonOK, the condition is True; anything else:
Unknown) and the first ``max_output_length`` bytes of its stdout (80 by
default) as the condition's message (pkg/custompluginmonitor/plugin in
kubernetes/node-problem-detector). One plugin run answers one condition, so
the config in deploy/node-problem-detector/ runs this once per class below.

A node whose GPUs the exporter cannot see is never OK: its conditions are
Unknown, and the cannot-see condition is True. A node checked only in part
(/diagnosis's ``coverage``: a check that could not run now, such as a reader
switched off, a GPU lost or still settling) is Unknown for each condition
whose rows some GPU could not check (a reader of throttling switched off
leaves hardware-fault judged), and cannot-see is Unknown while any check
could not run. A check the board or driver does not offer (the recovery
action before R565, GPM before Hopper, fans on a passive board) is a fact of
the node, never a reason for Unknown: a healthy node without it is OK. Only a
problem actually found outranks an Unknown (a GPU the exporter does see with
an ECC error has a hardware fault, whatever else it could not read)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.coverage import (
    EVERY_CHECK,
    checks_text,
    gpu_list,
    incomplete,
    not_checked,
)

# NPD's custom plugin exit statuses (cpmtypes.OK, NonOK; every other status is
# Unknown). 3 rather than 2 for Unknown: 2 is also what a usage error exits
# with, which NPD reads as Unknown too.
OK, PROBLEM, UNKNOWN = 0, 1, 3
# NPD cuts stdout at max_output_length (default 80): the message fits whole.
MAX_MESSAGE = 80

HARDWARE_FAULT = "hardware-fault"
THROTTLED = "throttled"
LINK_DEGRADED = "link-degraded"
CANNOT_SEE = "cannot-see"
CONDITIONS = (HARDWARE_FAULT, THROTTLED, LINK_DEGRADED, CANNOT_SEE)

# Which node condition each row of the diagnosis table raises. A row about
# the workload (starved input, a stalled job, a full memory) or the node's
# configuration says nothing about whether the node should take GPU jobs:
# None. Every row is named here (checked at import), so a new row decides.
ROW_CONDITION: dict[t.Row, str | None] = {
    t.ECC_UNCORRECTABLE: HARDWARE_FAULT,
    t.ROW_REMAP_PENDING: HARDWARE_FAULT,
    t.XID: HARDWARE_FAULT,
    t.GPU_LOST: HARDWARE_FAULT,
    t.FAULT_CAME_BACK: HARDWARE_FAULT,
    t.RECOVERY_GPU_RESET: HARDWARE_FAULT,
    t.RECOVERY_NODE_REBOOT: HARDWARE_FAULT,
    t.RECOVERY_DRAIN_P2P: HARDWARE_FAULT,
    t.RECOVERY_DRAIN_AND_RESET: HARDWARE_FAULT,
    t.POWER_CAP: THROTTLED,
    t.THERMAL: THROTTLED,
    t.POWER_BRAKE: THROTTLED,
    t.HW_SLOWDOWN: THROTTLED,
    t.APPLICATION_CLOCKS: THROTTLED,
    t.PCIE_DOWNTRAINED: LINK_DEGRADED,
    t.PCIE_ERRORS: LINK_DEGRADED,
    t.NVLINK_ERRORS: LINK_DEGRADED,
    t.C2C_ERRORS: LINK_DEGRADED,
    t.FABRIC_DEGRADED: LINK_DEGRADED,
    t.IDLE_DATA_PIPELINE_IO: None,
    t.IDLE_CPU_CONTENTION: None,
    t.IDLE_HOST_SWAPPING: None,
    t.IDLE_PROCESS_STALLED: None,
    t.UNDERFED_DATA_PIPELINE_IO: None,
    t.UNDERFED_CPU_CONTENTION: None,
    t.UNDERFED_HOST_SWAPPING: None,
    t.BURSTY_INPUT: None,
    t.XID_APPLICATION: None,
    t.XID_INFORMATIONAL: None,
    t.MEMORY_NEAR_FULL: None,
    t.UTILIZATION_INFLATED: None,
    t.PERSISTENCE_OFF: None,
    t.NUMA_MISPLACED: None,
    t.IDLE_CPU_LIMIT_THROTTLED: None,
    t.ALLOCATED_UNUSED: None,
    t.ALLOCATED_RUNS_ON_CPU: None,
    t.UNDERFED_CPU_LIMIT_THROTTLED: None,
    t.IDLE_MEMORY_LIMIT_RECLAIM: None,
    t.UNDERFED_MEMORY_LIMIT_RECLAIM: None,
    t.IDLE_CPU_STEAL: None,
    t.UNDERFED_CPU_STEAL: None,
    t.IDLE_IO_LIMIT_THROTTLED: None,
    t.UNDERFED_IO_LIMIT_THROTTLED: None,
    # A fan that stopped is a board to repair: its GPU throttles under load.
    t.FAN_STOPPED: HARDWARE_FAULT,
    # A job's own memory, and what its kernels wait on, are the job's.
    t.MEMORY_FILLING: None,
    t.MEMORY_BOUND: None,
    # The host CPUs' heat is the node's cooling, not its GPUs': the conditions
    # here speak of the GPUs, and the row's alert goes to whoever runs the
    # datacenter.
    t.HOST_CPU_THERMAL: None,
    # A job's growing host memory is the job's (it is stopped by its own limit
    # or the OOM killer, not by a node condition).
    t.HOST_MEMORY_GROWTH: None,
    # The RDMA link the GPU's collectives go out through is down, slow or
    # losing traffic: a degraded link of the GPU's, as a degraded NVLink is.
    t.RDMA_PORT_DEGRADED: LINK_DEGRADED,
    t.RDMA_ERRORS: LINK_DEGRADED,
    # Where the slots are is the board's layout: no reason to stop jobs.
    t.NIC_ACROSS_SOCKETS: None,
}
_BY_KEY = {row.key: condition for row, condition in ROW_CONDITION.items()}
if set(ROW_CONDITION) != set(t.ROWS):
    raise ImportError("npd: every diagnosis row needs its node condition (or None): "
                      + ", ".join(sorted(r.key for r in set(t.ROWS) ^ set(ROW_CONDITION))))

_WORDS = {HARDWARE_FAULT: "GPU hardware fault", THROTTLED: "GPU throttling",
          LINK_DEGRADED: "degraded GPU link"}
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]+")


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """Printable ASCII on one line, at most ``limit`` characters: what the
    exporter answered reaches the Node object (kubectl describe node)."""
    flat = " ".join(_UNPRINTABLE.sub(" ", text).split())
    return flat if len(flat) <= limit else flat[:limit - 3].rstrip() + "..."


def _problems(findings: Iterable[Mapping[str, Any]], condition: str) -> list[str]:
    """``GPU 1 memory_errors/ecc_uncorrectable`` (the row's key, as in
    gpu_diagnosis_active) for each finding that raises ``condition``, in GPU
    order."""
    hits = []
    for f in findings:
        key = f"{f.get('symptom')}/{f.get('cause')}"
        if _BY_KEY.get(key) == condition:
            hits.append((str(f.get("gpu", "?")), key))
    hits.sort(key=lambda h: (len(h[0]), h))
    return [f"GPU {gpu} {key}" for gpu, key in hits]


def _in_part(data: Mapping[str, Any], condition: str) -> str | None:
    """Why ``condition`` was checked only in part, or None: the groups of
    checks raising it that could not run (any check, for cannot-see), the
    GPUs still settling, or an answer that does not say what ran."""
    cov = data.get("coverage")
    if not isinstance(cov, Mapping):
        return "the exporter does not say which checks ran (an older version)"
    if not incomplete(data):
        return None
    gaps = not_checked(data)
    settling = cov.get("settling")
    if not gaps and not isinstance(settling, Mapping):
        # In part, yet naming no check and no GPU: nothing says this
        # condition was checked, so it is not OK.
        return "checked only in part; the exporter does not say which checks"
    parts = []
    for entry in gaps:
        keys = [str(k) for k in entry.get("checks") or ()]
        if condition != CANNOT_SEE and EVERY_CHECK not in keys:
            keys = [k for k in keys if _BY_KEY.get(k) == condition]
        if keys:
            # The reason first: 80 characters hold one reason, not a list of rows.
            checks = checks_text(keys) if len(keys) == 1 else f"{len(keys)} checks"
            parts.append(f"{gpu_list(entry.get('gpus') or ())}: {checks} not run: "
                         f"{entry.get('reason')}")
    if isinstance(settling, Mapping):
        parts.insert(0, f"{gpu_list(settling.get('gpus') or ())}: still settling")
    return "; ".join(parts) if parts else None


def verdict(condition: str, data: Mapping[str, Any] | None,
            unreachable: str | None = None) -> tuple[int, str]:
    """The exit status and message for ``condition`` from the exporter's
    /diagnosis answer ``data`` (or why it could not be read)."""
    if unreachable is not None or data is None:
        return UNKNOWN, one_line(f"exporter not read: {unreachable or 'no answer'}")
    seen = data.get("visibility")
    blind = seen.get("blind") if isinstance(seen, Mapping) else None
    if condition == CANNOT_SEE:
        if blind is not None:
            return PROBLEM, one_line(f"cannot see the GPUs: {blind}")
        in_part = _in_part(data, condition)
        if in_part is not None:
            return UNKNOWN, one_line(in_part)
        gpus = seen.get("gpus") if isinstance(seen, Mapping) else None
        return OK, one_line(f"the exporter sees {gpus if gpus is not None else 'the'} GPUs")
    problems = _problems(data.get("findings") or (), condition)
    if problems:
        return PROBLEM, one_line("; ".join(problems))
    if blind is not None:
        return UNKNOWN, one_line(f"cannot see the GPUs: {blind}")
    in_part = _in_part(data, condition)
    if in_part is not None:
        return UNKNOWN, one_line(in_part)
    return OK, f"no {_WORDS[condition]}"
