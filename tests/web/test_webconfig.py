"""The web config file as a user meets it: the exporter on a simulated node
behind TLS, client certificates and basic auth, with throw-away certificates
from trustme. Only loopback traffic; every server is stopped by its test."""

from __future__ import annotations

import http.client
import logging
import os
import signal
import socket
import ssl
import subprocess
import time
import warnings
from base64 import b64encode
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import trustme

from gpu_exporter.daemon.exporter import Exporter
from gpu_exporter.settings.config import ConfigError
from gpu_exporter.simulator import SimulatedNode
from gpu_exporter.web.webconfig import WebConfigWatcher, load_web_config
from tests import simnode
from tests.procs import assert_stops_in_time, free_port, run_cli, start

# Cost 4, bcrypt's minimum, keeps the tests quick; the code path is the same.
COST = 4


def hash_pw(password: str, cost: int = COST) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + b64encode(f"{user}:{password}".encode()).decode()}


@dataclass
class PKI:
    ca: trustme.CA
    dir: Path
    client: trustme.LeafCert

    def client_context(self, cert: trustme.LeafCert | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        self.ca.configure_trust(ctx)
        if cert is not None:
            cert.configure_cert(ctx)
        return ctx


@pytest.fixture
def pki(tmp_path: Path) -> PKI:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(str(tmp_path / "server.crt"))
    server.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    return PKI(ca, tmp_path, ca.issue_cert("prometheus@example.com"))


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


TLS = """tls_server_config:
  cert_file: server.crt
  key_file: server.key
"""


@contextmanager
def serving(config: Path, check_interval: float | None = None) -> Iterator[Exporter]:
    """The exporter on a simulated healthy node with ``config`` as its web config."""
    settings = simnode.settings(web={"listen_address": "127.0.0.1:0",
                                     "config_file": str(config)})
    exporter = Exporter(settings, SimulatedNode.from_name("healthy"))
    try:
        exporter.bind(None if check_interval is None
                      else WebConfigWatcher(config, check_interval=check_interval))
        # One poll before serving, so /metrics has GPUs from the first request.
        exporter.poller.poll_once()
        exporter.start()
        yield exporter
    finally:
        exporter.stop()


def request(port: int, path: str = "/metrics", context: ssl.SSLContext | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn: http.client.HTTPConnection
    if context is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def refused(call: Callable[[], Any]) -> bool:
    """True when the exchange fails at the connection level (no HTTP answer).
    Every use is followed by a request that succeeds: the server was up."""
    try:
        call()
    except (OSError, http.client.HTTPException):
        return True
    return False


# --- TLS -----------------------------------------------------------------------


def test_https_serves_metrics_and_plain_http_to_the_tls_port_fails(pki: PKI) -> None:
    with serving(write(pki.dir / "web.yml", TLS)) as exp:
        status, _, body = request(exp.port, context=pki.client_context())
        assert status == 200
        assert b"gpu_info{" in body
        assert refused(lambda: request(exp.port))
        # The failed plain-text attempt leaves the server serving.
        assert request(exp.port, "/-/healthy", context=pki.client_context())[0] == 200


def test_a_client_that_does_not_trust_the_ca_refuses_the_server(pki: PKI) -> None:
    other = trustme.CA()
    ctx = ssl.create_default_context()
    other.configure_trust(ctx)
    with serving(write(pki.dir / "web.yml", TLS)) as exp:
        assert refused(lambda: request(exp.port, context=ctx))
        assert request(exp.port, context=pki.client_context())[0] == 200


def test_min_version_tls13_refuses_a_tls12_client(pki: PKI) -> None:
    config = write(pki.dir / "web.yml", TLS + "  min_version: TLS13\n")
    with serving(config) as exp:
        old = pki.client_context()
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        assert refused(lambda: request(exp.port, context=old))
        assert request(exp.port, context=pki.client_context())[0] == 200


MTLS = TLS + """  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.crt
"""


def test_mtls_refuses_clients_without_a_certificate_or_with_a_foreign_one(pki: PKI) -> None:
    foreign = trustme.CA().issue_cert("intruder@example.com")
    with serving(write(pki.dir / "web.yml", MTLS)) as exp:
        assert refused(lambda: request(exp.port, context=pki.client_context()))
        assert refused(lambda: request(exp.port, context=pki.client_context(foreign)))
        assert request(exp.port, context=pki.client_context(pki.client))[0] == 200


def test_verify_client_cert_if_given_accepts_none_but_not_a_foreign_one(pki: PKI) -> None:
    config = write(pki.dir / "web.yml", TLS + "  client_auth_type: VerifyClientCertIfGiven\n"
                   "  client_ca_file: ca.crt\n")
    foreign = trustme.CA().issue_cert("intruder@example.com")
    with serving(config) as exp:
        assert request(exp.port, context=pki.client_context())[0] == 200
        assert refused(lambda: request(exp.port, context=pki.client_context(foreign)))
        assert request(exp.port, context=pki.client_context(pki.client))[0] == 200


def test_client_allowed_sans_lets_only_listed_certificates_in(pki: PKI) -> None:
    config = write(pki.dir / "web.yml", MTLS + "  client_allowed_sans: [prometheus@example.com]\n")
    stranger = pki.ca.issue_cert("someone-else@example.com")
    with serving(config) as exp:
        assert request(exp.port, context=pki.client_context(pki.client))[0] == 200
        assert request(exp.port, context=pki.client_context(stranger))[0] == 403


# --- basic auth ----------------------------------------------------------------


def test_basic_auth_401_without_or_with_wrong_credentials_and_200_with_right_ones(
        pki: PKI) -> None:
    config = write(pki.dir / "web.yml", TLS + f"basic_auth_users:\n  prom: {hash_pw('s3cret')}\n"
                   f"  grafana: {hash_pw('other')}\n")
    with serving(config) as exp:
        ctx = pki.client_context()
        for headers in ({}, basic("prom", "wrong"), basic("nobody", "s3cret"),
                        basic("grafana", "s3cret"), {"Authorization": "Basic !!notbase64"},
                        {"Authorization": "Bearer s3cret"}):
            status, resp_headers, body = request(exp.port, context=ctx, headers=headers)
            assert status == 401, headers
            assert resp_headers["www-authenticate"] == "Basic"
            assert b"gpu_info" not in body
        status, _, body = request(exp.port, context=ctx, headers=basic("prom", "s3cret"))
        assert status == 200
        assert b"gpu_info{" in body
        assert request(exp.port, context=ctx, headers=basic("grafana", "other"))[0] == 200
        # Every endpoint is behind the gate, the probes included (as in the toolkit).
        assert request(exp.port, "/-/healthy", context=ctx)[0] == 401


def test_basic_auth_without_tls(tmp_path: Path) -> None:
    config = write(tmp_path / "web.yml", f"basic_auth_users:\n  prom: {hash_pw('pw')}\n")
    with serving(config) as exp:
        assert request(exp.port)[0] == 401
        assert request(exp.port, headers=basic("prom", "pw"))[0] == 200


def test_the_node_page_and_runbook_behind_tls_and_basic_auth(pki: PKI) -> None:
    """The node page, its runbook and the page's own refresh (a fetch of /)
    take the same gate as /metrics, and the page needs nothing from elsewhere."""
    config = write(pki.dir / "web.yml", TLS + f"basic_auth_users:\n  prom: {hash_pw('pw')}\n")
    with serving(config) as exp:
        ctx = pki.client_context()
        for path in ("/", "/runbook"):
            assert request(exp.port, path, context=ctx)[0] == 401
            status, headers, body = request(exp.port, path, context=ctx,
                                            headers=basic("prom", "pw"))
            assert status == 200 and headers["content-type"].startswith("text/html")
            # Nothing loaded from anywhere: no script, style, image or font source.
            for loads in (b" src=", b"<link", b"url(", b"@import"):
                assert loads not in body, (path, loads)
            if path == "/":  # and no address elsewhere (the runbook cites NVIDIA's docs)
                assert b"http://" not in body and b"https://" not in body


# --- loading -------------------------------------------------------------------


def test_relative_paths_are_relative_to_the_config_file(pki: PKI, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(pki.dir / "web.yml", MTLS)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = load_web_config(Path(os.path.relpath(config, elsewhere)))
    assert loaded.tls
    assert {p.name for p in loaded.watched} == {"web.yml", "server.crt", "server.key", "ca.crt"}
    assert all(p.is_absolute() for p in loaded.watched[1:])


def test_an_empty_file_or_tls_section_means_plain_http_without_auth(tmp_path: Path) -> None:
    for text in ("", "tls_server_config: {}\n", "tls_server_config:\nbasic_auth_users: {}\n",
                 "http_server_config:\n  http2: false\n"):
        loaded = load_web_config(write(tmp_path / "web.yml", text))
        assert loaded.ssl_context is None and loaded.auth is None, text


@pytest.mark.parametrize("text,expected", [
    ("tls_server_config: [\n", "line 2, column 1"),
    ("- a\n- b\n", "expected a mapping"),
    ("tls_server_confg: {}\n", "unknown key tls_server_confg"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  ciphers: []\n",
     "unknown key tls_server_config.ciphers"),
    ("tls_server_config:\n  cert_file: server.crt\n", "missing key_file"),
    ("tls_server_config:\n  key_file: server.key\n", "missing cert_file"),
    ("tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n",
     "cert_file " + "{dir}/nope.crt: no such file"),
    ("tls_server_config:\n  cert_file: garbage.crt\n  key_file: server.key\n",
     "cert_file {dir}/garbage.crt: no PEM certificate in it"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.crt\n",
     "key_file {dir}/server.crt: no PEM private key in it"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: broken.key\n",
     "key_file {dir}/broken.key: not a valid PEM certificate or key"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: other.key\n",
     "the key does not belong to the certificate"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_auth_type: Sometimes\n", "client_auth_type: Input should be"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_auth_type: RequireAnyClientCert\n", "RequireAnyClientCert is not supported"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_ca_file: ca.crt\n", "client_auth_type is NoClientCert"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: garbage.crt\n",
     "client_ca_file {dir}/garbage.crt: no PEM certificate in it"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_allowed_sans: [a]\n", "client_allowed_sans needs"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  min_version: TLS13\n  max_version: TLS12\n", "above max_version"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  min_version: SSL3\n", "min_version: Input should be"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "unknown cipher"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  curve_preferences: [X25519]\n", "curve_preferences: not supported"),
    ("tls_server_config:\n  cert: '-----BEGIN CERTIFICATE-----'\n", "cert_file"),
    ("rate_limit:\n  interval: 1s\n", "rate_limit: not supported"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_auth_type: RequireAndVerifyClientCert\n  client_ca: not a certificate\n",
     "client_ca: cannot load CA certificates: no start line"),
    ("basic_auth_users:\n  prom: hunter2\n", "not a bcrypt hash"),
    ("basic_auth_users:\n  prom: $2y$10$tooshort\n", "not a bcrypt hash"),
    ("basic_auth_users: [prom]\n", "basic_auth_users"),
])
def test_bad_web_configs_are_one_clear_error(pki: PKI, text: str, expected: str) -> None:
    (pki.dir / "garbage.crt").write_text("not a certificate\n")
    (pki.dir / "broken.key").write_text("-----BEGIN PRIVATE KEY-----\nnot base64!\n"
                                        "-----END PRIVATE KEY-----\n")
    other = pki.ca.issue_cert("127.0.0.1")
    other.private_key_pem.write_to_path(str(pki.dir / "other.key"))
    config = write(pki.dir / "web.yml", text)
    with pytest.raises(ConfigError) as err:
        load_web_config(config)
    message = str(err.value)
    assert message.startswith(f"web config file {config}: ")
    assert expected.format(dir=pki.dir) in message
    assert "\n" not in message


def test_an_inline_client_ca_verifies_client_certificates(pki: PKI) -> None:
    ca_pem = (pki.dir / "ca.crt").read_text()
    inline = "\n".join("    " + line for line in ca_pem.splitlines())
    config = write(pki.dir / "web.yml", TLS + "  client_auth_type: RequireAndVerifyClientCert\n"
                   f"  client_ca: |\n{inline}\n")
    with serving(config) as exp:
        assert refused(lambda: request(exp.port, context=pki.client_context()))
        assert request(exp.port, context=pki.client_context(pki.client))[0] == 200


def test_an_encrypted_key_is_an_error_not_a_password_prompt(pki: PKI) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key((pki.dir / "server.key").read_bytes(), None)
    (pki.dir / "server.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase")))
    with pytest.raises(ConfigError, match="is encrypted"):
        load_web_config(write(pki.dir / "web.yml", TLS))


# --- the command line ----------------------------------------------------------


def _bad_configs(d: Path) -> dict[str, tuple[Path, str]]:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    leaf.private_key_pem.write_to_path(str(d / "server.key"))
    (d / "garbage.crt").write_text("not a certificate\n")
    return {
        "missing file": (d / "absent.yml", "no such file"),
        "bad YAML": (write(d / "yaml.yml", "basic_auth_users: {prom: [\n"), "line 2, column 1"),
        "unknown key": (write(d / "key.yml", "basic_auth_user: {}\n"),
                        "unknown key basic_auth_user"),
        "unreadable cert": (write(d / "cert.yml", "tls_server_config:\n  cert_file: garbage.crt\n"
                                  "  key_file: server.key\n"), "no PEM certificate in it"),
        "bad hash": (write(d / "hash.yml", "basic_auth_users:\n  prom: secret\n"),
                     "not a bcrypt hash"),
    }


@pytest.mark.parametrize("case", ["missing file", "bad YAML", "unknown key", "unreadable cert",
                                  "bad hash"])
def test_a_bad_web_config_exits_2_with_one_line_naming_file_and_problem(
        tmp_path: Path, case: str) -> None:
    config, expected = _bad_configs(tmp_path)[case]
    port = free_port()
    result = run_cli(["--web.config.file", str(config), "--simulate", "healthy",
                      "--web.listen-address", f"127.0.0.1:{port}"])
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    # The command line logs which scenario it simulates before the daemon
    # starts; the error is the one line after it, and nothing else is said.
    errors = [line for line in lines if line.startswith("gpu-exporter: error: ")]
    assert errors == [lines[-1]], result.stderr
    assert all(line.startswith("ts=") for line in lines[:-1]), result.stderr
    assert f"web config file {config}" in errors[0]
    assert expected in errors[0]

    # On a real node (no --simulate) the error is all there is on stderr.
    result = run_cli(["--web.config.file", str(config),
                      "--web.listen-address", f"127.0.0.1:{port}"])
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("gpu-exporter: error: web config file ")


# --- reloading -----------------------------------------------------------------


def _rewrite_keeping_mtime(path: Path, text: str) -> None:
    """Change the content so that only an explicit reload can notice."""
    before = path.stat()
    path.write_text(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _bump_mtime(path: Path) -> None:
    # Filesystems with coarse timestamps could leave a fast rewrite unnoticed.
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


def test_a_changed_file_is_picked_up_on_the_next_request(pki: PKI) -> None:
    config = write(pki.dir / "web.yml", TLS + f"basic_auth_users:\n  prom: {hash_pw('old')}\n")
    with serving(config, check_interval=0) as exp:
        ctx = pki.client_context()
        assert request(exp.port, context=ctx, headers=basic("prom", "old"))[0] == 200
        config.write_text(TLS + f"basic_auth_users:\n  prom: {hash_pw('new')}\n")
        _bump_mtime(config)
        assert request(exp.port, context=ctx, headers=basic("prom", "old"))[0] == 401
        assert request(exp.port, context=ctx, headers=basic("prom", "new"))[0] == 200


def test_a_reload_keeps_open_connections_serving(pki: PKI) -> None:
    config = write(pki.dir / "web.yml", TLS + f"basic_auth_users:\n  prom: {hash_pw('old')}\n")
    with serving(config) as exp:
        conn = http.client.HTTPSConnection("127.0.0.1", exp.port, timeout=10,
                                           context=pki.client_context())
        try:
            conn.request("GET", "/metrics", headers=basic("prom", "old"))
            first = conn.getresponse()
            first.read()
            assert first.status == 200
            _rewrite_keeping_mtime(config, TLS + f"basic_auth_users:\n  prom: {hash_pw('new')}\n")
            assert exp.web_config is not None and exp.web_config.reload()
            # Same keep-alive connection, new credentials.
            conn.request("GET", "/metrics", headers=basic("prom", "new"))
            second = conn.getresponse()
            assert second.status == 200
            assert b"gpu_info{" in second.read()
        finally:
            conn.close()


def test_a_bad_reload_keeps_the_old_config_and_logs_why(pki: PKI,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    config = write(pki.dir / "web.yml", TLS + f"basic_auth_users:\n  prom: {hash_pw('old')}\n")
    with serving(config, check_interval=0) as exp:
        ctx = pki.client_context()
        config.write_text(TLS + "basic_auth_users:\n  prom: [\n")
        _bump_mtime(config)
        with caplog.at_level(logging.ERROR, logger="gpu_exporter.web.webconfig"):
            assert request(exp.port, context=ctx, headers=basic("prom", "old"))[0] == 200
            assert request(exp.port, context=ctx, headers=basic("prom", "old"))[0] == 200
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        # Reported once, not on every request.
        assert len(errors) == 1
        assert "keeping the previous one" in errors[0] and str(config) in errors[0]
        # Turning TLS off is not a reload either: that needs a restart.
        config.write_text("basic_auth_users: {}\n")
        _bump_mtime(config)
        assert exp.web_config is not None and not exp.web_config.reload()
        assert request(exp.port, context=ctx, headers=basic("prom", "old"))[0] == 200


def test_a_renewed_certificate_is_served_after_it_changes_on_disk(pki: PKI) -> None:
    config = write(pki.dir / "web.yml", TLS)

    def served_cert(port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
            assert der is not None
            return der

    with serving(config, check_interval=0) as exp:
        before = served_cert(exp.port)
        renewed = pki.ca.issue_cert("127.0.0.1", "localhost")
        renewed.cert_chain_pems[0].write_to_path(str(pki.dir / "server.crt"))
        renewed.private_key_pem.write_to_path(str(pki.dir / "server.key"))
        _bump_mtime(pki.dir / "server.crt")
        # A request notices the change; connections after it get the new certificate.
        assert request(exp.port, "/-/healthy", context=pki.client_context())[0] == 200
        after = served_cert(exp.port)
        assert after != before
        assert ssl.DER_cert_to_PEM_cert(after).strip() == \
            renewed.cert_chain_pems[0].bytes().decode().strip()


def test_sighup_reloads_the_web_config_of_a_running_exporter(tmp_path: Path) -> None:
    config = write(tmp_path / "web.yml", f"basic_auth_users:\n  prom: {hash_pw('old')}\n")
    port = free_port()
    proc = start(["--simulate", "healthy", "--web.listen-address", f"127.0.0.1:{port}",
                  "--web.config.file", str(config)])
    try:
        assert _wait_status(port, basic("prom", "old"), 200, proc)
        # Same size, same mtime: only the signal can make the exporter look.
        _rewrite_keeping_mtime(config, f"basic_auth_users:\n  prom: {hash_pw('new')}\n")
        proc.send_signal(signal.SIGHUP)
        assert _wait_status(port, basic("prom", "new"), 200, proc)
        assert request(port, headers=basic("prom", "old"))[0] == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
    log = proc.stderr.read() if proc.stderr else ""
    assert code == 0, log
    assert "web config reloaded (SIGHUP)" in log


def test_sighup_without_a_web_config_does_not_stop_the_exporter() -> None:
    port = free_port()
    proc = start(["--simulate", "healthy", "--web.listen-address", f"127.0.0.1:{port}"])
    try:
        assert _wait_status(port, {}, 200, proc)
        proc.send_signal(signal.SIGHUP)
        # Still answering afterwards: the signal did not end the process.
        assert _wait_status(port, {}, 200, proc) and proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
    log = proc.stderr.read() if proc.stderr else ""
    # Ended by SIGTERM, cleanly, not by the SIGHUP before it.
    assert code == 0, log
    assert "received SIGHUP; no --web.config.file to reload" in log
    assert "received SIGTERM" in log


def _wait_status(port: int, headers: dict[str, str], want: int,
                 proc: subprocess.Popen[str], timeout: float = 30) -> bool:
    """Poll until the exporter answers ``want`` (it starts, or a reload lands)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if request(port, "/-/healthy", headers=headers)[0] == want:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def _reload_success(port: int, headers: dict[str, str]) -> float:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the first poll may still be under way
        status, _, body = request(port, headers=headers)
        assert status == 200
        for line in body.decode().splitlines():
            if line.startswith("gpu_exporter_config_last_reload_success "):
                return float(line.split()[1])
        time.sleep(0.1)
    raise AssertionError("no gpu_exporter_config_last_reload_success")


def test_a_broken_web_config_on_sighup_is_reported_as_a_failed_reload(tmp_path: Path) -> None:
    config = write(tmp_path / "web.yml", f"basic_auth_users:\n  prom: {hash_pw('old')}\n")
    port = free_port()
    proc = start(["--simulate", "healthy", "--web.listen-address", f"127.0.0.1:{port}",
                  "--web.config.file", str(config)])
    auth = basic("prom", "old")
    try:
        assert _wait_status(port, auth, 200, proc)
        assert _reload_success(port, auth) == 1
        config.write_text("basic_auth_users:\n  prom: [\n")
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while _reload_success(port, auth) != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        # Failed, said so in the metric, and the old credentials still work.
        assert _reload_success(port, auth) == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
    log = proc.stderr.read() if proc.stderr else ""
    assert code == 0, log
    assert "web config not reloaded (SIGHUP), keeping the previous one" in log


def test_min_version_tls10_loads_as_in_the_toolkit_with_a_warning(
        pki: PKI, caplog: pytest.LogCaptureFixture) -> None:
    """Exporter-toolkit accepts TLS10; OpenSSL 3 refuses TLS 1.0 and 1.1 at
    its default security level. The file loads (a site's file keeps working)
    and the warning says what clients actually need."""
    config = write(pki.dir / "web.yml", TLS + "  min_version: TLS10\n")
    with caplog.at_level(logging.WARNING, logger="gpu_exporter.web.webconfig"):
        loaded = load_web_config(config)
    assert loaded.tls
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(logged) == 1
    assert "min_version TLS10" in logged[0] and "TLS 1.2 or later" in logged[0]
    with serving(config) as exp:
        old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        old.load_verify_locations(pki.dir / "ca.crt")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1
        assert refused(lambda: request(exp.port, context=old))
        assert request(exp.port, context=pki.client_context())[0] == 200


def test_sigterm_does_not_wait_for_queued_password_checks(tmp_path: Path) -> None:
    """Eight clients with wrong passwords queue eight bcrypt checks (about half
    a second each at cost 13, 4 s in all): a stop drops the queue instead of
    running it. The bound is the one for every stop with clients connected
    (procs.stop_bound_s(): 1 s promised, wide for a loaded machine)."""
    config = write(tmp_path / "web.yml", f"basic_auth_users:\n  prom: {hash_pw('pw', 13)}\n")
    port = free_port()
    proc = start(["--simulate", "healthy", "--web.listen-address", f"127.0.0.1:{port}",
                  "--web.config.file", str(config)])
    socks: list[socket.socket] = []
    try:
        assert _wait_status(port, basic("prom", "pw"), 200, proc)
        for i in range(8):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            token = b64encode(f"prom:wrong-{i}".encode()).decode()
            s.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {token}"
                      "\r\n\r\n".encode())
            socks.append(s)
        time.sleep(0.3)  # the checks are queued
        assert_stops_in_time(proc, signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
        for s in socks:
            s.close()
