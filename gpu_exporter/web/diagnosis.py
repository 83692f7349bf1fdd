"""``/diagnosis``: what the newest snapshot holds about the GPUs, as JSON. The
findings and the rows they explain, the node's jobs (each owner's GPUs
judged together), the drifts from the node baseline and the
readers the rules went without (the derivations' slots), which checks could
not run on which GPU and why (``coverage``), and whether the GPUs could be
seen at all: a node whose GPUs cannot be read has no findings, and one whose
checks did not all run found nothing in them: neither may pass for healthy.
``gpu-exporter diagnose`` prints the same answer."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gpu_exporter.baseline import DRIFTS
from gpu_exporter.diagnosis import coverage
from gpu_exporter.diagnosis.engine import FINDINGS, INPUTS_MISSING, JOBS
from gpu_exporter.diagnosis.visibility import visibility
from gpu_exporter.facts.cadence import stale_after
from gpu_exporter.poll.snapshot import Snapshot
from gpu_exporter.web.app import Request, Response

JSON = "application/json"


def report(snap: Snapshot | None, now: float, interval: float) -> dict[str, Any]:
    """The answer for ``snap``, seen at ``now`` by an exporter polling every
    ``interval`` seconds (a poll too old no longer speaks for the node)."""
    seen = visibility(snap, now, stale_after(interval))
    if snap is None:
        return {"timestamp": None, "findings": [], "visibility": seen}
    missing = snap.derived(INPUTS_MISSING) or ()
    return {"timestamp": snap.timestamp,
            "findings": [f.as_dict() for f in snap.derived(FINDINGS) or ()],
            # The GPUs of each owner judged together: its ranks' states and
            # the one cause that explains the rest, where one does.
            "jobs": [j.as_dict() for j in snap.derived(JOBS) or ()],
            "baseline_drifts": [d.as_dict() for d in snap.derived(DRIFTS) or ()],
            # Readers the rules went without: their rows were not judged.
            "inputs_missing": list(missing),
            # Which checks could not run on which GPU, and why.
            "coverage": coverage.answer(snap),
            "visibility": seen}


class DiagnosisRoute:
    """The ``/diagnosis`` handler, on the poller's newest snapshot."""

    def __init__(self, latest: Callable[[], Snapshot | None], interval: Callable[[], float],
                 wall_clock: Callable[[], float]) -> None:
        self._latest = latest
        self._interval = interval
        self._wall = wall_clock

    def __call__(self, req: Request) -> Response:
        snap = self._latest()
        if snap is None:
            return Response(503, b'{"error": "no poll has completed yet"}\n', JSON)
        body = json.dumps(report(snap, self._wall(), self._interval()), indent=2) + "\n"
        return Response(200, body.encode(), JSON)
