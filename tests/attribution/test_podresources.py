"""The kubelet PodResources client against a real gRPC server on a unix
socket speaking the v1 proto (the simulator's): which pod holds which GPU and
MIG device, and that a missing, unreadable, hung or restarted kubelet never
makes the reader wait and is reported once."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.attribution import podresources
from gpu_exporter.attribution.devices import DeviceKind, parse_device_id
from gpu_exporter.attribution.podresources import (
    Allocations,
    Owner,
    PodResourcesWatcher,
    Status,
)
from gpu_exporter.simulator.kubelet import PodResourcesServer
from gpu_exporter.simulator.tenants import (
    CgroupCondition,
    Container,
    DeviceGrant,
    Pod,
    Tenants,
)

GPU = [f"GPU-{i:08x}-1111-2222-3333-{i:012x}" for i in range(8)]
MIG = [f"MIG-{i:08x}-aaaa-bbbb-cccc-{i:012x}" for i in range(4)]
LOGGER = "gpu_exporter.attribution.podresources"


def pod(namespace: str, name: str, n: int, *containers: Container) -> Pod:
    return Pod(namespace=namespace, name=name, uid=f"{n:08x}-0000-4000-8000-{n:012x}",
               containers=list(containers))


def grant(resource: str, *ids: str) -> DeviceGrant:
    return DeviceGrant(resource=resource, ids=list(ids))


NODE = Tenants(
    pods=[
        pod("ml", "train-a", 1,
            Container(name="trainer", devices=[grant("nvidia.com/gpu", GPU[0], GPU[1])]),
            Container(name="logger")),
        pod("ml", "infer-b", 2,
            Container(name="server", devices=[
                grant("nvidia.com/mig-1g.10gb", MIG[0]),
                grant("nvidia.com/mig-3g.40gb", MIG[1]),
                # Another vendor's device in the same container: not a GPU.
                grant("example.com/fpga", "fpga0")])),
        # The index form some plugin configurations use, whole GPU and MIG.
        pod("research", "sweep-7", 3,
            Container(name="worker", devices=[grant("nvidia.com/gpu", "4"),
                                              grant("nvidia.com/mig-2g.20gb", "5:1")])),
        # Time-slicing: two pods on replicas of one GPU.
        pod("team-x", "notebook-1", 4,
            Container(name="jupyter", devices=[grant("nvidia.com/gpu.shared", GPU[6] + "::0")])),
        pod("team-y", "notebook-2", 5,
            Container(name="jupyter", devices=[grant("nvidia.com/gpu.shared", GPU[6] + "::3")])),
    ],
    free_devices=[grant("nvidia.com/gpu", GPU[7])])


@pytest.fixture
def sockdir() -> Iterator[Path]:
    # Not pytest's tmp_path: a unix socket path must fit in 108 bytes.
    path = Path(tempfile.mkdtemp(prefix="kubelet-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(sockdir: Path) -> Iterator[PodResourcesServer]:
    with PodResourcesServer(str(sockdir / "kubelet.sock"), NODE) as server:
        yield server


def owners(state: Allocations) -> dict[str, tuple[Owner, ...]]:
    return dict(state.by_device)


def failure_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno >= logging.INFO and "pod resources" in r.getMessage()
            and "allocations from" not in r.getMessage()]


# --- mapping -------------------------------------------------------------------
def test_each_gpu_and_mig_device_maps_to_its_namespace_pod_and_container(
        kubelet: PodResourcesServer) -> None:
    watcher = PodResourcesWatcher(kubelet.socket_path, timeout=5.0)
    try:
        state = watcher.refresh()
    finally:
        watcher.close()
    assert state.status is Status.OK and state.failures == 0
    trainer, server = Owner("ml", "train-a", "trainer"), Owner("ml", "infer-b", "server")
    worker = Owner("research", "sweep-7", "worker")
    assert owners(state) == {
        GPU[0]: (trainer,), GPU[1]: (trainer,),
        MIG[0]: (server,), MIG[1]: (server,),
        "4": (worker,), "5:1": (worker,),
        GPU[6]: (Owner("team-x", "notebook-1", "jupyter"),
                 Owner("team-y", "notebook-2", "jupyter")),
    }
    # One allocation per grant: the fpga and the device-less container add none.
    assert len(state.allocations) == 8
    by_id = {(a.device.device_id, a.owner.pod): a for a in state.allocations}
    assert by_id[(MIG[1], "infer-b")].resource == "nvidia.com/mig-3g.40gb"
    assert by_id[("5:1", "sweep-7")].device.kind is DeviceKind.MIG_INDEX
    assert by_id[("5:1", "sweep-7")].device.gpu == 5
    assert by_id[("5:1", "sweep-7")].device.mig == 1
    assert state.allocatable == frozenset({*GPU[:2], *MIG[:2], "4", "5:1", GPU[6], GPU[7]})
    assert state.updated_at is not None


def test_a_kubelet_without_allocatable_resources_still_gives_the_grants(
        kubelet: PodResourcesServer) -> None:
    kubelet.allocatable = False  # answers UNIMPLEMENTED, as kubelets before 1.23
    watcher = PodResourcesWatcher(kubelet.socket_path, timeout=5.0)
    try:
        state = watcher.refresh()
    finally:
        watcher.close()
    assert state.status is Status.OK
    assert state.allocatable is None
    assert owners(state)[GPU[0]] == (Owner("ml", "train-a", "trainer"),)


def test_the_refresh_thread_keeps_the_snapshot_current(kubelet: PodResourcesServer) -> None:
    watcher = PodResourcesWatcher(kubelet.socket_path, period=0.05, timeout=5.0)
    assert watcher.snapshot().status is Status.STARTING
    watcher.start()
    try:
        deadline = time.monotonic() + 10
        while watcher.snapshot().status is not Status.OK and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watcher.snapshot().status is Status.OK
        kubelet.tenants = Tenants(pods=[NODE.pods[0]])
        while GPU[6] in watcher.snapshot().by_device and time.monotonic() < deadline:
            time.sleep(0.01)
        assert set(watcher.snapshot().by_device) == {GPU[0], GPU[1]}
    finally:
        watcher.close()


def test_names_past_the_kubernetes_limit_are_cut_and_unknown_ids_skipped(
        sockdir: Path) -> None:
    # The proto accepts any string: a hostile or broken kubelet must not make
    # labels of unbounded size, nor have unknown ID forms guessed at.
    long_pod = Pod.model_construct(
        namespace="ns", name="p" * 5000, uid="00000000-0000-4000-8000-000000000000",
        qos="burstable", containers=[Container.model_construct(
            name="c" * 300, devices=[grant("nvidia.com/gpu", GPU[0], "not-a-gpu", "GPU-xyz",
                                           "0" * 200)],
            cpu_limit=None, pids=[], cgroup=CgroupCondition())])
    tenants = Tenants.model_construct(pods=[long_pod], slurm_jobs=[], free_devices=[])
    with PodResourcesServer(str(sockdir / "k.sock"), tenants) as server:
        watcher = PodResourcesWatcher(server.socket_path, timeout=5.0)
        try:
            state = watcher.refresh()
        finally:
            watcher.close()
    assert state.status is Status.OK
    assert [a.device.device_id for a in state.allocations] == [GPU[0]]
    owner = state.allocations[0].owner
    assert len(owner.pod) == podresources.MAX_NAME and len(owner.container) == 253


# --- a kubelet that is not there, not reachable, or hung ------------------------
def test_no_socket_means_off_logged_once_and_not_a_failure(
        sockdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    watcher = PodResourcesWatcher(str(sockdir / "absent.sock"), timeout=0.5)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        started = time.monotonic()
        for _ in range(3):
            state = watcher.refresh()
        elapsed = time.monotonic() - started
    watcher.close()
    assert state.status is Status.SOCKET_ABSENT
    assert state.failures == 0 and state.allocations == ()
    assert elapsed < 1.0
    assert len(failure_lines(caplog)) == 1


def _unreadable_paths(sockdir: Path) -> list[Path]:
    directory = sockdir / "dir.sock"
    directory.mkdir()
    regular = sockdir / "file.sock"
    regular.write_text("not a socket")
    return [directory, regular]


def test_a_directory_or_plain_file_in_the_sockets_place_is_unreadable(
        sockdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    for path in _unreadable_paths(sockdir):
        caplog.clear()
        watcher = PodResourcesWatcher(str(path), timeout=0.5)
        with caplog.at_level(logging.INFO, logger=LOGGER):
            started = time.monotonic()
            watcher.refresh()
            state = watcher.refresh()
            elapsed = time.monotonic() - started
        watcher.close()
        assert state.status is Status.UNREADABLE, path
        assert state.failures == 2  # each failed attempt counts
        assert "not a socket" in state.detail
        assert elapsed < 1.0
        assert len(failure_lines(caplog)) == 1  # but is logged once


@pytest.mark.skipif(os.geteuid() == 0, reason="root connects whatever the socket's mode")
def test_a_socket_without_permission_is_unreadable(
        kubelet: PodResourcesServer, caplog: pytest.LogCaptureFixture) -> None:
    os.chmod(kubelet.socket_path, 0)
    watcher = PodResourcesWatcher(kubelet.socket_path, timeout=0.5)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        started = time.monotonic()
        watcher.refresh()
        state = watcher.refresh()
        elapsed = time.monotonic() - started
    watcher.close()
    assert state.status is Status.UNREADABLE
    assert elapsed < 1.0
    assert len(failure_lines(caplog)) == 1


def test_a_socket_nobody_listens_on_is_an_error_not_a_hang(
        sockdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    # What a kubelet that died leaves behind: the socket file, no listener.
    path = sockdir / "stale.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    watcher = PodResourcesWatcher(str(path), timeout=0.5)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        started = time.monotonic()
        state = watcher.refresh()
        elapsed = time.monotonic() - started
    watcher.close()
    assert state.status in (Status.ERROR, Status.TIMED_OUT)
    assert state.failures == 1
    assert elapsed < 1.5
    assert len(failure_lines(caplog)) == 1


def test_a_kubelet_hanging_10s_never_holds_up_the_reader(
        kubelet: PodResourcesServer, caplog: pytest.LogCaptureFixture) -> None:
    watcher = PodResourcesWatcher(kubelet.socket_path, period=0.05, timeout=0.3)
    assert watcher.refresh().status is Status.OK  # a good answer first
    kubelet.delay = 10.0
    with caplog.at_level(logging.INFO, logger=LOGGER):
        watcher.start()
        try:
            # The reader (the poll) takes snapshots at its own cadence while
            # the kubelet hangs: none of them waits on it.
            slowest = 0.0
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                started = time.monotonic()
                state = watcher.snapshot()
                slowest = max(slowest, time.monotonic() - started)
                if state.failures >= 3:
                    break
                time.sleep(0.01)
        finally:
            watcher.close()
    assert slowest < 0.1
    assert state.status is Status.TIMED_OUT
    assert state.failures >= 3
    # The last good answer is kept while the kubelet does not answer.
    assert owners(state)[GPU[0]] == (Owner("ml", "train-a", "trainer"),)
    assert len(failure_lines(caplog)) == 1


def test_one_refresh_against_a_hung_kubelet_is_bounded_by_the_timeout(
        kubelet: PodResourcesServer) -> None:
    kubelet.delay = 10.0
    watcher = PodResourcesWatcher(kubelet.socket_path, timeout=0.3)
    started = time.monotonic()
    state = watcher.refresh()
    elapsed = time.monotonic() - started
    watcher.close()
    assert state.status is Status.TIMED_OUT and state.failures == 1
    assert elapsed < 1.0


def test_a_restarted_kubelet_is_picked_up_again(
        sockdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = str(sockdir / "kubelet.sock")
    watcher = PodResourcesWatcher(path, timeout=0.5)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        with PodResourcesServer(path, NODE):
            assert watcher.refresh().status is Status.OK
        assert watcher.refresh().status is Status.SOCKET_ABSENT
        with PodResourcesServer(path, Tenants(pods=[NODE.pods[1]])):
            state = watcher.refresh()
    watcher.close()
    assert state.status is Status.OK
    assert set(state.by_device) == {MIG[0], MIG[1]}
    recovered = [r.getMessage() for r in caplog.records if "allocations from" in r.getMessage()]
    assert len(recovered) == 2  # the first answer, and the first after the gap


# --- device IDs ----------------------------------------------------------------
@pytest.mark.parametrize(("raw", "kind", "device_id", "gpu", "mig"), [
    (GPU[3], DeviceKind.GPU_UUID, GPU[3], None, None),
    (MIG[2], DeviceKind.MIG_UUID, MIG[2], None, None),
    (f"MIG-{GPU[1]}/7/0", DeviceKind.MIG_UUID, f"MIG-{GPU[1]}/7/0", None, None),  # R450 form
    ("3", DeviceKind.GPU_INDEX, "3", 3, None),
    ("3:2", DeviceKind.MIG_INDEX, "3:2", 3, 2),
    (GPU[2] + "::12", DeviceKind.GPU_UUID, GPU[2], None, None),  # sharing replica
    ("1::4", DeviceKind.GPU_INDEX, "1", 1, None),
])
def test_device_id_forms(raw: str, kind: DeviceKind, device_id: str, gpu: int | None,
                         mig: int | None) -> None:
    ref = parse_device_id(raw)
    assert ref is not None
    assert (ref.kind, ref.device_id, ref.gpu, ref.mig) == (kind, device_id, gpu, mig)
    assert ref.uuid == (device_id if kind in (DeviceKind.GPU_UUID, DeviceKind.MIG_UUID)
                        else None)


@pytest.mark.parametrize("raw", ["", "GPU-", "GPU-xyz", "gpu0", "-1", "1:2:3", "1:", "MIG-1",
                                 "GPU-" + "0" * 500, "0\x00", "fpga0"])
def test_unknown_device_id_forms_are_not_guessed(raw: str) -> None:
    assert parse_device_id(raw) is None


def test_a_listener_that_never_speaks_grpc_times_out(
        sockdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Something holds the socket and accepts connections (the kernel does,
    # from the backlog) but never answers: the deadline still bounds the call.
    path = sockdir / "mute.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(16)
    try:
        watcher = PodResourcesWatcher(str(path), timeout=0.3)
        with caplog.at_level(logging.INFO, logger=LOGGER):
            started = time.monotonic()
            watcher.refresh()
            state = watcher.refresh()
            elapsed = time.monotonic() - started
        watcher.close()
    finally:
        listener.close()
    assert state.status in (Status.TIMED_OUT, Status.ERROR)
    assert state.failures == 2
    assert elapsed < 2.0  # two calls of 0.3 s each, with a wide margin
    assert len(failure_lines(caplog)) == 1


@pytest.mark.parametrize("raw", [GPU[0] + "\n", "3\n", "\uff13", "\u0663:1", "3::\u0661",
                                 MIG[0] + "\n"])
def test_device_ids_with_other_scripts_digits_or_a_trailing_newline_are_refused(
        raw: str) -> None:
    assert parse_device_id(raw) is None


def test_closing_during_a_hung_refresh_returns_promptly(kubelet: PodResourcesServer) -> None:
    kubelet.delay = 10.0
    watcher = PodResourcesWatcher(kubelet.socket_path, period=0.05, timeout=0.3)
    watcher.start()
    time.sleep(0.1)  # a refresh is now waiting on the kubelet
    started = time.monotonic()
    watcher.close()
    assert time.monotonic() - started < 1.5  # at most the deadline plus the margin
