"""Hostile and odd inputs, tried through the real command line as a user (or
an attacker who can write one file) would: a FIFO where a config file should
be, a bcrypt hash of the dearest cost, a character device as the kernel log,
output to a full device, a host name that does not resolve, a key written
twice, a misspelt environment variable. Each is refused at start in one line
on stderr with exit status 2, within seconds; and the exporter never serves
without the TLS and basic auth its web config file asks for, at start or
after a reload."""

from __future__ import annotations

import errno
import http.client
import logging
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import tracemalloc
from base64 import b64encode
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
import trustme

from gpu_exporter.cli import settings_loader
from gpu_exporter.collectors import kmsg as kmsg_collector
from gpu_exporter.daemon import logs
from gpu_exporter.daemon.exporter import Exporter
from gpu_exporter.host import kmsg
from gpu_exporter.host.kmsg import KmsgReader, KmsgState, KmsgUnavailable
from gpu_exporter.settings import config_types, safefile, safeyaml
from gpu_exporter.settings.config import NOT_SETTINGS, ConfigError, environment_values
from gpu_exporter.simulator import SimulatedNode
from gpu_exporter.web.webconfig import MAX_BCRYPT_COST, WebConfigFile, WebConfigWatcher
from tests import simnode
from tests.onegpu import OneGpu
from tests.procs import ROOT, free_port

# How long a refusal may take: an interpreter start and the settings read
# (about a second here), with room for a loaded machine. A hang (a FIFO read
# that blocks, bcrypt at cost 31) is hours.
REFUSAL_S = 30.0
ERROR = "gpu-exporter: error: "


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


def _refused(args: list[str], env: dict[str, str] | None = None) -> str:
    """Run the exporter with ``args`` on a port it must never open; its one
    line of refusal. Checked while it runs: nothing ever listens there."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpu_exporter",
                             "--web.listen-address", f"127.0.0.1:{port}", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=env or _env())
    deadline = time.monotonic() + REFUSAL_S
    try:
        while proc.poll() is None:
            assert time.monotonic() < deadline, f"still running after {REFUSAL_S} s"
            with socket.socket() as s:
                s.settimeout(0.2)
                assert s.connect_ex(("127.0.0.1", port)) != 0, "the exporter listened"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
        _, stderr = proc.communicate()
    return _one_line(proc.returncode, stderr, 2)


def _one_line(code: int, stderr: str, want: int) -> str:
    assert code == want, stderr
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith(ERROR), stderr
    return lines[0].removeprefix(ERROR)


def _hash(password: str, cost: int = 4) -> str:
    """A bcrypt hash as written at ``cost``: made at 4 and relabelled above it
    (a check of the relabelled hash would run at the label's cost, which is
    what is refused before any check runs)."""
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()
    return hashed.replace("$04$", f"${cost:02d}$", 1)


# --- the web config file and the config file must be regular files ------------------------

def test_a_fifo_as_the_web_config_file_is_refused_before_listening(tmp_path: Path) -> None:
    fifo = tmp_path / "web.yml"
    os.mkfifo(fifo)
    # Nobody writes: read without blocking it would be an empty file, which is
    # plain HTTP without auth.
    assert _refused(["--web.config.file", str(fifo)]) == \
        f"web config file {fifo}: is a pipe (FIFO), not a regular file"
    # Someone writes (an empty config): refused all the same, not read.
    writer = os.open(fifo, os.O_RDWR)
    try:
        os.write(writer, b"{}\n")
        assert _refused(["--web.config.file", str(fifo)]) == \
            f"web config file {fifo}: is a pipe (FIFO), not a regular file"
    finally:
        os.close(writer)


@pytest.mark.parametrize("flag", ["--config.file", "--web.config.file"])
def test_a_device_or_a_fifo_as_a_config_file_is_refused(tmp_path: Path, flag: str) -> None:
    name = "config file" if flag == "--config.file" else "web config file"
    fifo = tmp_path / "c.yaml"
    os.mkfifo(fifo)
    assert _refused([flag, str(fifo)]) == f"{name} {fifo}: is a pipe (FIFO), not a regular file"
    assert _refused([flag, "/dev/zero"]) == \
        f"{name} /dev/zero: is a character device, not a regular file"


def test_a_symbolic_link_to_a_regular_file_is_read_as_kubernetes_mounts_them(
        tmp_path: Path) -> None:
    """A ConfigMap's files are links through ``..data``: followed, and what
    they lead to is what is checked."""
    data = tmp_path / "..2026_01_01" / "config.yaml"
    data.parent.mkdir()
    data.write_text("poll: {interval: 3s}\n")
    (tmp_path / "..data").symlink_to(data.parent.name)
    link = tmp_path / "config.yaml"
    link.symlink_to("..data/config.yaml")
    assert settings_loader(["--config.file", str(link)])().poll.interval == 3.0
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link.unlink()
    link.symlink_to(fifo)
    with pytest.raises(ConfigError, match=r"is a pipe \(FIFO\), not a regular file"):
        settings_loader(["--config.file", str(link)])()


# --- bcrypt costs ---------------------------------------------------------------------------

def test_a_bcrypt_cost_above_the_bound_is_refused_before_any_hashing(tmp_path: Path) -> None:
    for cost in (31, MAX_BCRYPT_COST + 1):
        config = tmp_path / f"web-{cost}.yml"
        config.write_text(f"basic_auth_users:\n  prom: '{_hash('secret', cost)}'\n")
        line = _refused(["--web.config.file", str(config)])
        assert line.startswith(f"web config file {config}: basic_auth_users: the password of "
                               f"user 'prom' is hashed at bcrypt cost {cost}, above the "
                               f"{MAX_BCRYPT_COST} this exporter accepts"), line
        assert "$2b$" not in line  # the hash is not repeated


def test_the_bound_itself_is_accepted() -> None:
    users = {"prom": _hash("secret", MAX_BCRYPT_COST)}
    assert WebConfigFile.model_validate({"basic_auth_users": users}).basic_auth_users == users


# --- reloads keep the TLS and auth in force ------------------------------------------------

@pytest.fixture
def pki(tmp_path: Path) -> trustme.CA:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    server.cert_chain_pems[0].write_to_path(str(tmp_path / "server.crt"))
    server.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    return ca


TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


def _basic(password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + b64encode(f"prom:{password}".encode()).decode()}


def _get(port: int, ca: trustme.CA | None, password: str | None,
         path: str = "/metrics") -> tuple[int, str]:
    conn: http.client.HTTPConnection
    if ca is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ctx)
    try:
        conn.request("GET", path, headers=_basic(password) if password else {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def _reload_success(port: int, ca: trustme.CA, password: str) -> float:
    status, body = _get(port, ca, password)
    assert status == 200
    found = re.search(r"^gpu_exporter_config_last_reload_success (\S+)$", body, re.M)
    assert found, "no gpu_exporter_config_last_reload_success"
    return float(found.group(1))


def _plain_http_refused(port: int) -> bool:
    try:
        status, _ = _get(port, None, None, "/-/healthy")
    except (OSError, http.client.HTTPException):
        return True
    return status != 200


@pytest.fixture
def tls_exporter(tmp_path: Path, pki: trustme.CA) -> Iterator[tuple[subprocess.Popen[str], int,
                                                                    Path]]:
    config = tmp_path / "web.yml"
    config.write_text(TLS + f"basic_auth_users:\n  prom: '{_hash('old')}'\n")
    port = free_port()
    # Polled every second: the reload metric is published with each poll.
    proc = subprocess.Popen([sys.executable, "-m", "gpu_exporter", "--simulate", "healthy",
                             "--web.listen-address", f"127.0.0.1:{port}", "--poll.interval",
                             "1s", "--web.config.file", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                # Ready, not only live: the reload metric is published by
                # the first poll, and /-/healthy answers 200 before it.
                if _get(port, pki, "old", "/-/ready")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the exporter did not start"
            time.sleep(0.1)
        yield proc, port, config
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)


def _sighup_fails(proc: subprocess.Popen[str], port: int, pki: trustme.CA) -> None:
    """A SIGHUP whose web config cannot load: the reload metric reads 0 within
    seconds, and the old TLS and password still serve, plain HTTP never."""
    proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 15
    while _reload_success(port, pki, "old") != 0:
        assert time.monotonic() < deadline, "the failed reload was not reported"
        time.sleep(0.1)
    assert _get(port, pki, "old")[0] == 200
    assert _get(port, pki, None)[0] == 401
    assert _plain_http_refused(port)


def test_sighup_with_a_fifo_or_cost_31_keeps_tls_and_auth_and_reports_the_failure(
        tls_exporter: tuple[subprocess.Popen[str], int, Path], pki: trustme.CA) -> None:
    proc, port, config = tls_exporter
    assert _reload_success(port, pki, "old") == 1
    good = config.read_text()
    # Cost 31: refused at once (a check would take some 35 hours of CPU).
    config.write_text(TLS + f"basic_auth_users:\n  prom: '{_hash('new', 31)}'\n")
    _sighup_fails(proc, port, pki)
    # Replaced by a FIFO nobody writes to: not read as "no TLS, no auth".
    config.unlink()
    os.mkfifo(config)
    _sighup_fails(proc, port, pki)
    # The reloads are not wedged: a good file is taken at the next SIGHUP.
    config.unlink()
    config.write_text(good.replace("prom: '" + good.split("prom: '")[1].split("'")[0],
                                   f"prom: '{_hash('new')}"))
    proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 15
    while _get(port, pki, "new")[0] != 200 or _reload_success(port, pki, "new") != 1:
        assert time.monotonic() < deadline, "the good reload was not taken"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=20)
    failed = [line for line in stderr.splitlines() if "web config not reloaded" in line]
    assert len(failed) == 2, stderr
    assert "bcrypt cost 31" in failed[0] and "is a pipe (FIFO)" in failed[1]
    assert "Traceback" not in stderr


def test_a_change_on_disk_that_fails_to_load_reaches_the_reload_metric(
        tmp_path: Path, pki: trustme.CA) -> None:
    """Not only SIGHUP: the web config file is re-read when it changes, and a
    failure then is reported in the metric too."""
    config = tmp_path / "web.yml"
    config.write_text(TLS + f"basic_auth_users:\n  prom: '{_hash('old')}'\n")
    settings = simnode.settings(web={"listen_address": "127.0.0.1:0",
                                     "config_file": str(config)})
    exporter = Exporter(settings, SimulatedNode.from_name("healthy"))
    try:
        exporter.bind(WebConfigWatcher(config, check_interval=0))
        exporter.start(background_poll=False)
        config.write_text(TLS + f"basic_auth_users:\n  prom: '{_hash('new', 31)}'\n")
        os.utime(config, ns=(time.time_ns() + 10**9,) * 2)
        # The request that notices the change is served with the old config.
        assert _get(exporter.port, pki, "old")[0] == 200
        exporter.poller.poll_once()
        assert _reload_success(exporter.port, pki, "old") == 0
        config.write_text(TLS + f"basic_auth_users:\n  prom: '{_hash('new')}'\n")
        os.utime(config, ns=(time.time_ns() + 2 * 10**9,) * 2)
        assert _get(exporter.port, pki, "new")[0] == 200
        exporter.poller.poll_once()
        assert _reload_success(exporter.port, pki, "new") == 1
    finally:
        exporter.stop()


def test_a_good_web_config_reload_does_not_hide_a_failed_settings_reload(
        tmp_path: Path, pki: trustme.CA) -> None:
    config = tmp_path / "web.yml"
    config.write_text(TLS)
    exporter = Exporter(simnode.settings(), SimulatedNode.from_name("healthy"))
    try:
        exporter.bind(WebConfigWatcher(config, check_interval=0))

        def bad() -> object:
            raise ConfigError("bad")

        assert not exporter.reload(bad)  # type: ignore[arg-type]
        assert exporter.web_config is not None and exporter.web_config.reload()
        assert exporter.poller.reload_success is False
        assert exporter.reload(lambda: exporter.settings)
        assert exporter.poller.reload_success is True
    finally:
        exporter.stop()


# --- the kernel log -------------------------------------------------------------------------

@pytest.mark.parametrize(("path", "problem"), [
    ("/dev/zero", "character device 1:5 is not the kernel log (/dev/kmsg is 1:11)"),
    ("/dev/null", "character device 1:3 is not the kernel log (/dev/kmsg is 1:11)"),
    ("/tmp", "neither the kmsg device nor a regular file"),
])
def test_a_kmsg_path_that_is_no_kernel_log_is_refused(path: str, problem: str) -> None:
    if not os.path.exists(path):
        pytest.skip(f"no {path} here")
    assert _refused(["--path.kmsg", path]) == \
        f"path.kmsg from flag --path.kmsg: {problem} (got '{path}')"
    line = _refused([], _env(GPU_EXPORTER_PATH__KMSG=path))
    assert line.startswith("path.kmsg from environment variable GPU_EXPORTER_PATH__KMSG: ")


def test_a_kmsg_path_refused_on_reload_keeps_the_running_settings(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_bytes(b"")
    config = tmp_path / "c.yaml"
    config.write_text(f"path: {{kmsg: {log}}}\n")
    load = settings_loader(["--config.file", str(config)])
    exporter = Exporter(load(), SimulatedNode.from_name("healthy"))
    try:
        running = exporter.settings
        config.write_text("path: {kmsg: /dev/zero}\n")
        assert not exporter.reload(load)
        assert exporter.poller.reload_success is False
        assert exporter.settings is running
    finally:
        exporter.stop()


def test_the_reader_refuses_a_character_device_that_is_not_kmsg() -> None:
    """The default path is not checked at start (a container may hold
    something else there): the reader checks what it opened."""
    with pytest.raises(KmsgUnavailable) as raised:
        KmsgReader("/dev/zero").open()
    assert raised.value.state == KmsgState.ERROR
    assert "character device 1:5 is not the kernel log" in raised.value.detail


def _poll_peak(path: str) -> tuple[kmsg_collector.KmsgCollector, float, int]:
    """One poll of the kernel log reader on ``path``: the reader, the CPU
    seconds and the peak of memory the poll allocated."""
    with OneGpu() as one:
        collector = kmsg_collector.KmsgCollector(one.session, path, one.node.procfs,
                                                 one.clock, one.clock, synchronous=True)
        one.built.append(collector)
        tracemalloc.start()
        started = time.process_time()
        try:
            one.poll(collector)
            took = time.process_time() - started
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    return collector, took, peak


def test_a_device_that_never_stops_giving_is_read_in_bounded_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """/dev/zero taken for the kmsg device (as a device under its number
    would be): 8 KiB "records" without end. A poll reads at most
    MAX_BYTES_PER_POLL of it, a batch at a time; before, one read held 65,536
    of them (512 MiB) and the exporter grew to 566 MB in 10 s."""
    monkeypatch.setattr(config_types, "KMSG_DEVICE", (1, 5))
    collector, took, peak = _poll_peak("/dev/zero")
    reader = collector._reader
    assert reader is not None and reader.is_device
    assert 0 < reader.bytes_read <= kmsg_collector.MAX_BYTES_PER_POLL + kmsg.MAX_BATCH_BYTES
    assert collector.state == KmsgState.OK and not collector.store.xids
    assert peak < 4 * kmsg.MAX_BATCH_BYTES, f"{peak / 2**20:.1f} MiB"
    assert took < 10, f"{took:.1f} s"


def test_a_device_that_answers_every_read_with_an_error_is_not_read_for_ever(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """EPIPE (records overwritten) and EINVAL (a record too long) are answers
    the kernel gives once in a while; a device giving nothing else must not
    hold the reader in its loop."""
    monkeypatch.setattr(config_types, "KMSG_DEVICE", (1, 5))
    reader = KmsgReader("/dev/zero")
    reader.open()
    calls = 0

    def read(fd: int, size: int) -> bytes:
        nonlocal calls
        calls += 1
        raise OSError(errno.EPIPE if calls % 2 else errno.EINVAL, "refused")

    monkeypatch.setattr(kmsg.os, "read", read)
    try:
        assert reader.read(1000) == []
    finally:
        monkeypatch.undo()
        reader.close()
    assert calls == 1000 and reader.overruns == 500 and reader.malformed == 500


def test_a_large_regular_file_is_read_in_bounded_memory(tmp_path: Path) -> None:
    # 1 GiB of zeros (sparse: no disk), no line in it; then lines far longer
    # than any record the kernel writes.
    zeros = tmp_path / "zeros"
    with open(zeros, "wb") as f:
        f.truncate(1024**3)
    collector, took, peak = _poll_peak(str(zeros))
    reader = collector._reader
    assert reader is not None
    assert reader.bytes_read <= kmsg_collector.MAX_BYTES_PER_POLL + kmsg.MAX_BATCH_BYTES
    assert peak < 4 * kmsg.MAX_BATCH_BYTES, f"{peak / 2**20:.1f} MiB"
    assert took < 10, f"{took:.1f} s"

    long_lines = tmp_path / "long"
    line = b"6,%d,1,-;NVRM: Xid (PCI:0000:18:00): 13, " + b"x" * 200_000 + b"\n"
    long_lines.write_bytes(b"".join(line % i for i in range(100)))
    collector, _, peak = _poll_peak(str(long_lines))
    reader = collector._reader
    # Each refused (a line cut by a read may count twice), none taken.
    assert reader is not None and reader.malformed >= 100
    assert not collector.store.xids
    assert peak < 4 * kmsg.MAX_BATCH_BYTES, f"{peak / 2**20:.1f} MiB"


# --- the listen address and output to a full device ----------------------------------------

@pytest.mark.parametrize(("address", "problem"), [
    ("nonexistent.invalid:9999", "cannot resolve the host 'nonexistent.invalid'"),
    ("a..b:9999", "'a..b' is not a valid host name"),
])
def test_a_listen_address_that_does_not_resolve_is_one_line(address: str, problem: str) -> None:
    result = subprocess.run([sys.executable, "-m", "gpu_exporter", "--web.listen-address",
                             address], capture_output=True, text=True, cwd=ROOT,
                            timeout=REFUSAL_S, check=False)
    line = _one_line(result.returncode, result.stderr, 2)
    assert line.startswith(f"web.listen_address {address}: {problem}"), line


FULL = Path("/dev/full")


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full here")
@pytest.mark.parametrize("args", [
    ["--help"], ["--version"], ["scenarios"], ["catalog"], ["scenarios", "--help"],
    ["catalog", "--help"], ["diagnose", "--help"], ["baseline", "--help"],
    ["record", "--help"], ["fleet", "--help"],
], ids=" ".join)
def test_output_to_a_full_device_is_one_line_and_a_failure(args: list[str]) -> None:
    with FULL.open("w") as full:
        result = subprocess.run([sys.executable, "-m", "gpu_exporter", *args], stdout=full,
                                stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                timeout=REFUSAL_S, check=False)
    assert _one_line(result.returncode, result.stderr, 2) == \
        "cannot write the output: no space left on device"


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full here")
def test_an_error_with_stderr_full_still_exits_2() -> None:
    with FULL.open("w") as full:
        code = subprocess.run([sys.executable, "-m", "gpu_exporter", "--web.listen-address",
                               "nope"], stdout=full, stderr=full, cwd=ROOT,
                              timeout=REFUSAL_S, check=False).returncode
    assert code == 2


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full here")
def test_a_daemon_whose_log_is_full_goes_on_serving() -> None:
    """The log is best effort: a node with a full disk is one to watch."""
    port = free_port()
    with FULL.open("w") as full:
        proc = subprocess.Popen([sys.executable, "-m", "gpu_exporter", "--simulate", "healthy",
                                 "--web.listen-address", f"127.0.0.1:{port}"],
                                stdout=full, stderr=full, cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "the exporter ended"
            try:
                if _get(port, None, None, "/-/healthy")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the exporter did not serve"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def test_log_lines_that_cannot_be_written_are_counted_not_tracebacks(
        capsys: pytest.CaptureFixture[str]) -> None:
    class Flaky:
        failing = True
        written: list[str] = []

        def write(self, text: str) -> int:
            if self.failing:
                raise OSError(28, "No space left on device")
            self.written.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    stream = Flaky()
    saved = logging.getLogger().handlers[:]
    try:
        logs.setup()
        logging.getLogger().handlers[0].setStream(stream)  # type: ignore[attr-defined]
        log = logging.getLogger("hostile")
        log.warning("lost one")
        log.warning("lost two")
        stream.failing = False
        log.warning("written")
    finally:
        logging.getLogger().handlers[:] = saved
    text = "".join(stream.written)
    assert "2 log line(s) before this one could not be written" in text
    assert "msg=written" in text and "lost" not in text.replace("log line(s)", "")
    assert "Traceback" not in capsys.readouterr().err


# --- YAML keys written twice ----------------------------------------------------------------

def test_a_key_written_twice_in_the_config_file_is_refused_with_its_line(
        tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("web:\n  telemetry_path: /metrics\nweb:\n  telemetry_path: /gpu\n")
    assert _refused(["--config.file", str(config)]) == \
        f"config file {config}: line 3, column 1: duplicate key 'web' (first on line 1)"


def test_a_web_config_that_names_its_users_twice_is_refused(tmp_path: Path) -> None:
    """The second mapping would silently drop the first's users: no auth."""
    config = tmp_path / "web.yml"
    config.write_text(f"basic_auth_users:\n  prom: '{_hash('secret')}'\nbasic_auth_users: {{}}\n")
    assert _refused(["--web.config.file", str(config)]) == \
        (f"web config file {config}: line 3, column 1: duplicate key 'basic_auth_users' "
         "(first on line 1)")


def test_a_scenario_or_recording_with_a_key_twice_is_refused(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: twice\nnode: {gpus: 1}\nnode: {gpus: 8}\n")
    assert _refused(["--simulate", str(scenario)]) == \
        f"scenario {scenario}: line 3, column 1: duplicate key 'node' (first on line 2)"
    with pytest.raises(safefile.FileRefused, match=r"line 2, column 11: duplicate key 'a' "
                                                   r"\(first on line 2\)"):
        safeyaml.parse_yaml("x: 1\ny: {a: 1, a: 2}\n", "r.yaml", safefile.RECORDING_FILE)


def test_a_merge_may_still_override_what_it_brings() -> None:
    data = safeyaml.parse_yaml("base: &b {a: 1, b: 2}\nmine: {<<: *b, a: 3}\n", "c.yaml",
                               safefile.CONFIG_FILE)
    assert data["mine"] == {"a": 3, "b": 2}


# --- environment variables ------------------------------------------------------------------

def test_a_misspelt_variable_is_refused_with_the_nearest_name() -> None:
    env = _env(GPU_EXPORTER_WEB_LISTEN_ADDRESS="127.0.0.1:9")
    assert _refused([], env) == (
        "web_listen_address from environment variable GPU_EXPORTER_WEB_LISTEN_ADDRESS: "
        "unknown setting; did you mean GPU_EXPORTER_WEB__LISTEN_ADDRESS?")
    line = _refused([], _env(GPU_EXPORTER_COLLECTOR='{"device": false}'))
    assert line.endswith("unknown setting; did you mean GPU_EXPORTER_COLLECTORS?")


def test_the_projects_own_variables_are_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in NOT_SETTINGS:
        monkeypatch.setenv(name, "--poll.interval 1s")
    monkeypatch.setenv("GPU_EXPORTER_POLL__INTERVAL", "7s")
    # Loaded, and none of them read as a setting.
    assert settings_loader([])().poll.interval == 7.0


def test_every_variable_the_project_names_is_a_setting_or_declared() -> None:
    """The list of variables that are not settings is the one in config.py:
    every ``GPU_EXPORTER_*`` name in the project's files is a setting's or in
    it (a test, a script or a unit that reads another would be refused by
    every exporter it starts)."""
    files = subprocess.run(["git", "ls-files", "-z"], capture_output=True, cwd=ROOT,
                           check=True).stdout.decode().split("\0")
    # Named as examples of what is refused (in these tests, test_config.py,
    # the README and docs/reliability.md).
    wrong_on_purpose = {"GPU_EXPORTER_WEB_LISTEN_ADDRESS", "GPU_EXPORTER_COLLECTOR",
                        "GPU_EXPORTER_WEB__BOGUS"}
    found: dict[str, str] = {}
    for name in files:
        path = ROOT / name
        if not name or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for variable in re.findall(r"GPU_EXPORTER_[A-Za-z0-9_]*[A-Za-z0-9]", text):
            found.setdefault(variable, name)
    assert "GPU_EXPORTER_LONG_TESTS" in found and "GPU_EXPORTER_ARGS" in found
    refused = {}
    for variable, where in sorted(found.items()):
        if variable in wrong_on_purpose:
            continue
        try:
            environment_values({variable: "1"})
        except ConfigError as exc:
            if "unknown setting" in str(exc):
                refused[variable] = where
    assert not refused, refused
