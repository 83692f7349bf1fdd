"""Fixtures that tell things apart: every pair of signals a rule or a reader
could confuse carries different values, so that reading one for the other
shows. A test where swapping two signals would still pass protects nothing.

* PSI ``some`` and ``full``, for each resource (cpu, memory, io), on the host
  (/proc/pressure) and in every workload's cgroup (``*.pressure``): six host
  values and six per workload, all different from each other. The exposition
  (gpu_host_pressure_ratio, gpu_workload_pressure_ratio) must carry each under
  its own resource and kind, and every finding's evidence that quotes one
  (``host_io_pressure_some_ratio``, ``workload_memory_pressure_full_ratio`` …)
  must quote the host's for ``host_`` and the GPU's own workload's for
  ``workload_``. The scenarios are the built-in ones whose rows read pressure;
  each keeps the value its row judges and gets the rest changed apart (the
  judged kind stays, so the finding it expects still fires).
* One GPU and its neighbour: every GPU of one node reads its own power,
  temperature, utilization and clocks; each GPU's series and the node page's
  card must carry its own, and each finding of ``mixed`` lands on the GPU the
  scenario put its fault on.

Bugs tried, each failing this file:

* the host reader taking the ``full`` line for ``some`` (``read_pressure``
  returning ``Pressure(lines.get("full") or lines["some"], lines["some"])``):
  ``test_the_exposition_keeps_each_pressure_apart[*]`` fail;
* the host signal the swapping rows read taken from memory's ``some``
  (``collectors/host.py``'s ``_signals``: ``mem_p.some.avg10``):
  ``test_each_evidence_quotes_its_own_pressure`` fails for the three
  host-swapping cases;
* a workload's I/O signal read from its ``full`` line
  (``collectors/attribution.py``: ``sig.io.full.avg10``): the evidence check
  of ``memory-held-sm-idle-data-pipeline-io+pod`` fails;
* the swapping rule reading the workload's memory ``some`` for ``full`` and
  back (``rules._swapping``): the evidence check of
  ``memory-held-sm-idle-host-swapping+pod`` fails;
* each GPU card's facts drawn from the GPU after it (``doctor.py``'s
  ``_facts``): ``test_each_gpu_card_shows_its_own_readings`` fails.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_exporter.simulator import load_scenario
from gpu_exporter.simulator.model import Scenario
from gpu_exporter.web.app import Request
from tests.simnode import DetailRun

RESOURCES = ("cpu", "memory", "io")
KINDS = ("some", "full")
# The kind each resource's rows judge (docs/diagnosis.md: CPU and I/O
# pressure by "some", swapping by memory's "full").
JUDGED = {"cpu": "some", "io": "some", "memory": "full"}
# "+pod": the same node with its processes in one pod, whose cgroup stalls as
# the host does (so the rows judge the workload's own pressure and quote both).
WITH_POD = "+pod"
PRESSURE_SCENARIOS = (
    "memory-held-sm-idle-data-pipeline-io",
    "memory-held-sm-idle-data-pipeline-io" + WITH_POD,
    "memory-held-sm-idle-cpu-contention",
    "memory-held-sm-idle-cpu-contention" + WITH_POD,
    "memory-held-sm-idle-host-swapping",
    "memory-held-sm-idle-host-swapping" + WITH_POD,
    "memory-held-sm-underfed-host-swapping",
    "memory-held-sm-idle-cpu-limit-throttled",
    "memory-held-sm-idle-memory-limit-reclaim",
    "memory-held-sm-underfed-memory-limit-reclaim",
    "slurm-node-cgroup-v2",
)
# What each scenario's findings quote: every host and workload pressure the
# rows read is quoted by some case, so a swap of any has a case that shows it.
HOST_IO, HOST_CPU, HOST_MEM_FULL = ("host_io_pressure_some_ratio", "host_cpu_pressure_some_ratio",
                                    "host_memory_pressure_full_ratio")
OWN_IO, OWN_CPU = "workload_io_pressure_some_ratio", "workload_cpu_pressure_some_ratio"
OWN_MEM_FULL, OWN_MEM_SOME = ("workload_memory_pressure_full_ratio",
                              "workload_memory_pressure_some_ratio")
QUOTES = {
    "memory-held-sm-idle-data-pipeline-io": {HOST_IO},
    "memory-held-sm-idle-data-pipeline-io" + WITH_POD: {HOST_IO, OWN_IO},
    "memory-held-sm-idle-cpu-contention": {HOST_CPU},
    "memory-held-sm-idle-cpu-contention" + WITH_POD: {HOST_CPU, OWN_CPU},
    "memory-held-sm-idle-host-swapping": {HOST_MEM_FULL},
    "memory-held-sm-idle-host-swapping" + WITH_POD: {HOST_MEM_FULL, OWN_MEM_FULL, OWN_MEM_SOME},
    "memory-held-sm-underfed-host-swapping": {HOST_MEM_FULL},
    "memory-held-sm-idle-cpu-limit-throttled": {HOST_CPU},
    "memory-held-sm-idle-memory-limit-reclaim": {OWN_MEM_SOME},
    "memory-held-sm-underfed-memory-limit-reclaim": {OWN_MEM_SOME},
    # No row of this node reads pressure: it tries the readers (the exposition).
    "slurm-node-cgroup-v2": set(),
}
EVIDENCE = re.compile(r"^(host|workload)_(cpu|memory|io)_pressure_(some|full)_ratio$")

Values = dict[tuple[str, str], float]  # (resource, kind) -> share


class Apart:
    """Hands out values no other signal of the node has (thousandths: the
    evidence rounds to three decimals, the exposition keeps four)."""

    def __init__(self) -> None:
        self.used: set[int] = set()

    def take(self, wanted: float) -> float:
        milli = max(1, min(990, round(wanted * 1000)))
        while milli in self.used:
            milli += 1
        self.used.add(milli)
        return milli / 1000

    def pair(self, resource: str, some: float, full: float, small: float) -> tuple[float, float]:
        """(some, full) apart: the judged kind kept where it was set, the other
        moved off it; a resource the scenario left at 0 gets small values."""
        if some == 0 and full == 0:
            return self.take(small + 0.004), self.take(small)
        if JUDGED[resource] == "some":
            some = self.take(some)
            return some, self.take(min(some * 0.5, some - 0.01) if some > 0.02 else 0.001)
        full = self.take(full)
        # some counts every stall full does, and more.
        return self.take(max(some, full + 0.05)), full


class Fixture(NamedTuple):
    scenario: Scenario
    host: Values
    workloads: dict[str, Values]  # pod uid or Slurm job id -> values
    gpu_owner: dict[int, str]  # GPU -> the workload whose processes use it


def _one_pod(d: dict[str, Any]) -> None:
    """Every process of the node in one pod, its cgroup stalling as the host."""
    cgroup: dict[str, float] = {}
    for r in RESOURCES:
        p = d["host"].get(f"pressure_{r}") or {"some": 0.0, "full": 0.0}
        cgroup[f"{r}_some"], cgroup[f"{r}_full"] = p["some"], p["full"]
    gpus = [str(i) for i in range(d["node"]["gpus"])]
    d["tenants"] = {"pods": [{
        "namespace": "ml", "name": "train", "uid": "0a1b2c3d-4e5f-4607-8819-2a3b4c5d6e7f",
        "containers": [{"name": "trainer",
                        "devices": [{"resource": "nvidia.com/gpu", "ids": gpus}],
                        "pids": [p["pid"] for p in d["processes"]], "cgroup": cgroup}]}]}


def _apart(name: str) -> Fixture:
    d = load_scenario(name.removesuffix(WITH_POD)).model_dump()
    d["jitter"] = 0.0  # the values as written, every poll
    if name.endswith(WITH_POD):
        _one_pod(d)
    apart = Apart()
    host: Values = {}
    for i, r in enumerate(RESOURCES):
        p = d["host"].get(f"pressure_{r}") or {"some": 0.0, "full": 0.0}
        some, full = apart.pair(r, p["some"], p["full"], 0.011 + 0.01 * i)
        d["host"][f"pressure_{r}"] = {"some": some, "full": full}
        host[(r, "some")], host[(r, "full")] = some, full
    gpus_of_pid = {p["pid"]: p["gpus"] for p in d["processes"]}
    workloads: dict[str, Values] = {}
    owner: dict[int, str] = {}
    tenants = d.get("tenants") or {}
    cgroups: list[tuple[str, dict[str, Any], list[int]]] = []
    for pod in tenants.get("pods") or ():
        for c in pod["containers"]:
            cgroups.append((pod["uid"], c["cgroup"], c["pids"]))
    for job in tenants.get("slurm_jobs") or ():
        if job.get("cgroup_version", 2) == 2:
            cgroups.append((str(job["job_id"]), job["cgroup"], job["pids"]))
    for n, (who, cg, pids) in enumerate(cgroups):
        values: Values = {}
        for i, r in enumerate(RESOURCES):
            some, full = apart.pair(r, cg[f"{r}_some"], cg[f"{r}_full"],
                                    0.041 + 0.03 * i + 0.007 * n)
            cg[f"{r}_some"], cg[f"{r}_full"] = some, full
            values[(r, "some")], values[(r, "full")] = some, full
        workloads[who] = values
        for pid in pids:
            for gpu in gpus_of_pid.get(pid, ()):
                owner[gpu] = who
    return Fixture(Scenario.model_validate(d), host, workloads, owner)


class Seen(NamedTuple):
    metrics: str
    findings: list[dict[str, Any]]


@pytest.fixture(scope="module", params=PRESSURE_SCENARIOS)
def pressure_case(request: pytest.FixtureRequest) -> Iterator[tuple[str, Fixture, Seen]]:
    fixture = _apart(request.param)
    logging.disable(logging.ERROR)
    try:
        with DetailRun(fixture.scenario) as run:
            run.poll(40)
            app = run.exporter.app
            metrics = app.handle(Request("/metrics", "", {})).body.decode()
            findings = json.loads(app.handle(Request("/diagnosis", "", {})).body)["findings"]
    finally:
        logging.disable(logging.NOTSET)
    yield request.param, fixture, Seen(metrics, findings)


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name]


def test_the_fixture_tells_every_pair_apart(pressure_case: tuple[str, Fixture, Seen]) -> None:
    _, fixture, _ = pressure_case
    every = list(fixture.host.values()) + [v for w in fixture.workloads.values()
                                           for v in w.values()]
    assert len(set(every)) == len(every), every


def test_the_exposition_keeps_each_pressure_apart(pressure_case: tuple[str, Fixture, Seen]) -> None:
    _, fixture, seen = pressure_case
    host = {(labels["resource"], labels["kind"]): value
            for labels, value in _samples(seen.metrics, "gpu_host_pressure_ratio")}
    assert host == pytest.approx(fixture.host, abs=1e-6)
    workload: dict[str, Values] = {}
    for labels, value in _samples(seen.metrics, "gpu_workload_pressure_ratio"):
        who = labels["pod_uid"] or labels["slurm_job_id"]
        workload.setdefault(who, {})[(labels["resource"], labels["kind"])] = value
    assert set(workload) == set(fixture.workloads)
    for who, values in fixture.workloads.items():
        assert workload[who] == pytest.approx(values, abs=1e-6), who


def test_each_evidence_quotes_its_own_pressure(pressure_case: tuple[str, Fixture, Seen]) -> None:
    name, fixture, seen = pressure_case
    expected = {(e["gpu"], e["symptom"], e["cause"]) for e in
                fixture.scenario.model_dump()["expect"]}
    found = {(int(f["gpu"]), f["symptom"], f["cause"]) for f in seen.findings}
    assert expected <= found, "changing the unjudged values apart lost a finding"
    quoted: set[str] = set()
    for f in seen.findings:
        for key, value in (f.get("evidence") or {}).items():
            m = EVIDENCE.match(key)
            if not m:
                continue
            where, resource, kind = m.groups()
            if where == "host":
                want = fixture.host[(resource, kind)]
            else:
                want = fixture.workloads[fixture.gpu_owner[int(f["gpu"])]][(resource, kind)]
            assert value == pytest.approx(want, abs=0.0005), (f["gpu"], f["cause"], key)
            quoted.add(key)
    assert quoted == QUOTES[name]


# --- one GPU and its neighbour ------------------------------------------------

def _own_readings(gpu: int) -> dict[str, float]:
    """GPU ``gpu``'s readings, each different from every other GPU's."""
    return {"temperature_c": 41 + 3 * gpu, "power_w": 301 + 17 * gpu,
            "utilization": 0.51 + 0.05 * gpu, "sm_clock_mhz": 1501 + 23 * gpu}


def _neighbours() -> Scenario:
    d = load_scenario("healthy").model_dump()
    d["jitter"], d["noise"] = 0.0, False  # each reading as written
    d["gpus"] = {i: {**d["gpus"].get(i, {}), **_own_readings(i)} for i in range(d["node"]["gpus"])}
    d["gpus"] = {i: {k: v for k, v in g.items() if v is not None} for i, g in d["gpus"].items()}
    return Scenario.model_validate(d)


@pytest.fixture(scope="module")
def neighbours() -> Iterator[tuple[str, str, Scenario]]:
    sc = _neighbours()
    logging.disable(logging.ERROR)
    try:
        with DetailRun(sc) as run:
            run.poll(40)
            app = run.exporter.app
            yield (app.handle(Request("/metrics", "", {})).body.decode(),
                   app.handle(Request("/", "", {})).body.decode(), sc)
    finally:
        logging.disable(logging.NOTSET)


def test_each_gpu_series_carries_its_own_reading(neighbours: tuple[str, str, Scenario]) -> None:
    metrics, _, sc = neighbours
    series = {"gpu_temperature_celsius": ("temperature_c", 1.0),
              "gpu_power_watts": ("power_w", 1.0),
              "gpu_utilization_ratio": ("utilization", 1.0),
              "gpu_clock_hertz": ("sm_clock_mhz", 1e6)}
    for name, (field, scale) in series.items():
        got = {int(labels["gpu"]): value for labels, value in _samples(metrics, name)
               if labels.get("clock", "sm") == "sm" and labels.get("sensor", "gpu") == "gpu"}
        want = {i: _own_readings(i)[field] * scale for i in range(sc.node.gpus)}
        assert got == pytest.approx(want, abs=1e-6), name
    # Each process is exported on the GPU it runs on, and each GPU's uuid is its own.
    uuids = {int(labels["gpu"]): labels["uuid"] for labels, _ in _samples(metrics, "gpu_info")}
    assert len(set(uuids.values())) == sc.node.gpus
    placed = {int(labels["pid"]): int(labels["gpu"])
              for labels, _ in _samples(metrics, "gpu_process_memory_used_bytes")}
    assert placed == {p.pid: p.gpus[0] for p in sc.processes if p.gpus}
    for labels, _ in _samples(metrics, "gpu_process_memory_used_bytes"):
        assert labels["uuid"] == uuids[int(labels["gpu"])]


def test_each_gpu_card_shows_its_own_readings(neighbours: tuple[str, str, Scenario]) -> None:
    _, page, sc = neighbours
    cards = re.findall(r"<h2>GPU (\d+)</h2>.*?<p class=\"facts\">(.*?)</p>", page, re.S)
    assert [int(i) for i, _ in cards] == list(range(sc.node.gpus))
    for index, facts in cards:
        own = _own_readings(int(index))
        assert f"utilization {round(own['utilization'] * 100)} %" in facts, facts
        assert f"power {own['power_w']:.0f} W" in facts, facts
        assert f"{own['temperature_c']:.0f} °C" in facts, facts
        assert f"SM clock {own['sm_clock_mhz']:.0f} of" in facts, facts


def test_each_finding_lands_on_its_own_gpu() -> None:
    """``mixed`` puts one fault on each of six GPUs: each finding names the GPU
    the scenario broke and that GPU's uuid, never a neighbour's."""
    logging.disable(logging.ERROR)
    try:
        with DetailRun("mixed") as run:
            run.poll(40)
            app = run.exporter.app
            metrics = app.handle(Request("/metrics", "", {})).body.decode()
            findings = json.loads(app.handle(Request("/diagnosis", "", {})).body)["findings"]
    finally:
        logging.disable(logging.NOTSET)
    uuids = {labels["gpu"]: labels["uuid"] for labels, _ in _samples(metrics, "gpu_info")}
    expected = {(e.gpu, e.symptom, e.cause) for e in load_scenario("mixed").expect or ()}
    assert {(int(f["gpu"]), f["symptom"], f["cause"]) for f in findings} == expected
    for f in findings:
        assert f["uuid"] == uuids[f["gpu"]], f
    active = {(int(labels["gpu"]), labels["symptom"], labels["cause"])
              for labels, value in _samples(metrics, "gpu_diagnosis_active") if value == 1}
    assert active == expected
