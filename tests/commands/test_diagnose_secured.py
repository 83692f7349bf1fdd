"""``gpu-exporter diagnose`` (and the node-problem-detector plugin) as a
client of a secured exporter: the real exporter, as a process, behind TLS,
TLS with basic auth, and mutual TLS, each from an exporter-toolkit web config
with throw-away certificates from trustme. Only loopback traffic.

The exporters run ``fault-driver-not-loaded``: its answer is final from the
first poll (NVML down: exit 4, the cannot-see condition True), so a command
that read the exporter is told from one that could not (exit 3) at once,
without waiting for a diagnosis window."""

from __future__ import annotations

import copy
import http.client
import json
import os
import re
import secrets
import shlex
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import helm_python as helm
import pytest
import trustme

from gpu_exporter.commands import npd
from gpu_exporter.commands.client import MAX_PASSWORD_BYTES
from tests.procs import ROOT, free_port, run_cli, start

NPD_DIR = ROOT / "deploy" / "node-problem-detector"
PLAIN_CONFIG = json.loads((NPD_DIR / "gpu-exporter-monitor.json").read_text())
SECURED_CONFIG = json.loads((NPD_DIR / "gpu-exporter-monitor-secured.json").read_text())
CHART = ROOT / "deploy" / "helm" / "gpu-exporter"

# Unlike any word the command prints, so its absence from the output means something.
PASSWORD = "pw-" + secrets.token_hex(12)
USER = "node-problem-detector"
SCENARIO = "fault-driver-not-loaded"
BLIND_LINE = "Could not see the GPUs: NVML is not available"
# Every refusal below is quick: a bound that a hang (a FIFO read, a retry
# loop) would exceed by far, and a loaded CI machine would not.
QUICK_S = 30.0


@dataclass
class Pki:
    dir: Path
    ca: Path  # signed the exporter's certificate and the client's
    foreign_ca: Path  # signed nothing the exporter has
    client_cert: Path
    client_key: Path
    foreign_cert: Path  # a client certificate of the foreign CA
    foreign_key: Path
    password_file: Path
    wrong_password_file: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca, foreign = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(str(d / "server.crt"))
    server.private_key_pem.write_to_path(str(d / "server.key"))
    ca.cert_pem.write_to_path(str(d / "ca.crt"))
    foreign.cert_pem.write_to_path(str(d / "foreign-ca.crt"))
    client = ca.issue_cert("npd@example.com")
    client.cert_chain_pems[0].write_to_path(str(d / "client.crt"))
    client.private_key_pem.write_to_path(str(d / "client.key"))
    stranger = foreign.issue_cert("npd@example.com")
    stranger.cert_chain_pems[0].write_to_path(str(d / "foreign.crt"))
    stranger.private_key_pem.write_to_path(str(d / "foreign.key"))
    (d / "password").write_text(PASSWORD + "\n")
    (d / "wrong-password").write_text(PASSWORD[::-1] + "\n")
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()  # cost 4: quick
    tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
    (d / "tls.yml").write_text(tls)
    (d / "auth.yml").write_text(tls + f"basic_auth_users:\n  {USER}: {hashed}\n")
    (d / "mtls.yml").write_text(tls + "  client_auth_type: RequireAndVerifyClientCert\n"
                                "  client_ca_file: ca.crt\n")
    return Pki(d, d / "ca.crt", d / "foreign-ca.crt", d / "client.crt", d / "client.key",
               d / "foreign.crt", d / "foreign.key", d / "password", d / "wrong-password")


@dataclass
class Served:
    url: str
    port: int
    options: list[str]  # what diagnose needs to read it


def _wait_up(port: int, context: ssl.SSLContext, proc: subprocess.Popen[str]) -> None:
    """Until the exporter answers anything over TLS (a 401 is an answer)."""
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
        try:
            conn.request("GET", "/-/ready")
            conn.getresponse().read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
        finally:
            conn.close()


@pytest.fixture(scope="module")
def exporters(pki: Pki) -> Iterator[dict[str, Served]]:
    """The three secured exporters, started once for the module."""
    procs: list[subprocess.Popen[str]] = []
    served: dict[str, Served] = {}
    ca = ["--tls.ca-file", str(pki.ca)]
    options = {
        "tls": ca,
        "auth": [*ca, "--auth.username", USER, "--auth.password-file", str(pki.password_file)],
        "mtls": [*ca, "--tls.cert-file", str(pki.client_cert),
                 "--tls.key-file", str(pki.client_key)],
    }
    try:
        for name, opts in options.items():
            port = free_port()
            proc = start(["--simulate", SCENARIO, "--web.listen-address", f"127.0.0.1:{port}",
                          "--web.config.file", str(pki.dir / f"{name}.yml")])
            procs.append(proc)
            context = ssl.create_default_context(cafile=str(pki.ca))
            context.load_cert_chain(pki.client_cert, pki.client_key)
            _wait_up(port, context, proc)
            served[name] = Served(f"https://127.0.0.1:{port}", port, opts)
        yield served
    finally:
        logs = []
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
            logs.append(proc.stderr.read() if proc.stderr else "")
    # Wrong passwords were sent to it: the exporter's log holds none either.
    assert all(PASSWORD not in log and PASSWORD[::-1] not in log for log in logs)


def diagnose(*args: str) -> subprocess.CompletedProcess[str]:
    """The command, with what every run of it must hold: no traceback, and
    no password anywhere in what it printed, whatever happened."""
    t0 = time.monotonic()
    result = run_cli(["diagnose", *args])
    out = result.stdout + result.stderr
    assert PASSWORD not in out and PASSWORD[::-1] not in out, out
    assert "Traceback" not in out, out
    assert time.monotonic() - t0 < QUICK_S
    return result


def refused(result: subprocess.CompletedProcess[str], status: int) -> str:
    """The one line of a refusal on stderr (nothing on stdout), checked."""
    assert result.returncode == status, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def npd_line(result: subprocess.CompletedProcess[str], status: int) -> str:
    assert result.returncode == status, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and len(lines[0]) <= npd.MAX_MESSAGE, result.stdout
    return lines[0]


NAMES = ("tls", "auth", "mtls")


# --- read with the right options ---------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_each_secured_exporter_is_read_with_its_options(exporters: dict[str, Served],
                                                        name: str) -> None:
    s = exporters[name]
    text = diagnose("--url", s.url, *s.options)
    assert text.returncode == 4, text.stdout + text.stderr  # the exporter's own answer
    assert text.stdout.startswith(BLIND_LINE)
    as_json = diagnose("--url", f"{s.url}/metrics", *s.options, "--json")
    assert json.loads(as_json.stdout)["visibility"]["gpus"] == 0
    cannot_see = diagnose("--url", s.url, *s.options, "--format", "npd",
                          "--condition", "cannot-see")
    assert npd_line(cannot_see, npd.PROBLEM).startswith("cannot see the GPUs: NVML")
    fault = diagnose("--url", s.url, *s.options, "--format", "npd",
                     "--condition", "hardware-fault")
    assert npd_line(fault, npd.UNKNOWN).startswith("cannot see the GPUs: NVML")


# --- refused by the exporter: exit 3, one line saying what to pass -------------------------


@pytest.mark.parametrize(("name", "to_pass"), [
    ("tls", "pass the CA that signed it with --tls.ca-file FILE"),
    ("auth", "pass --auth.username USER --auth.password-file FILE"),
    ("mtls", "pass --tls.cert-file FILE --tls.key-file FILE"),
])
def test_without_its_option_each_says_what_to_pass(exporters: dict[str, Served], pki: Pki,
                                                   name: str, to_pass: str) -> None:
    s = exporters[name]
    given = [] if name == "tls" else ["--tls.ca-file", str(pki.ca)]
    line = refused(diagnose("--url", s.url, *given), 3)
    assert line.startswith(f"gpu-exporter diagnose: {s.url}/diagnosis") and to_pass in line
    # As an NPD plugin: Unknown, with the reason in the condition's message.
    answer = npd_line(diagnose("--url", s.url, *given, "--format", "npd",
                               "--condition", "cannot-see"), npd.UNKNOWN)
    assert answer.startswith("exporter not read: ") and ("--tls." in answer
                                                         or "--auth." in answer), answer


def test_a_wrong_password_is_refused_without_showing_it(exporters: dict[str, Served],
                                                        pki: Pki) -> None:
    s = exporters["auth"]
    args = ["--url", s.url, "--tls.ca-file", str(pki.ca), "--auth.username", USER,
            "--auth.password-file", str(pki.wrong_password_file)]
    line = refused(diagnose(*args), 3)
    assert "HTTP 401" in line and f"refused user '{USER}'" in line
    assert str(pki.wrong_password_file) in line
    answer = npd_line(diagnose(*args, "--format", "npd", "--condition", "throttled"),
                      npd.UNKNOWN)
    assert answer == "exporter not read: HTTP 401: wrong user or password"
    # A wrong user, right password: the same refusal.
    args[args.index(USER)] = "someone-else"
    assert "HTTP 401" in refused(diagnose(*args), 3)


@pytest.mark.parametrize("name", NAMES)
def test_an_exporter_certificate_of_another_ca_is_refused(exporters: dict[str, Served],
                                                          pki: Pki, name: str) -> None:
    s = exporters[name]
    options = list(s.options)
    options[options.index(str(pki.ca))] = str(pki.foreign_ca)
    line = refused(diagnose("--url", s.url, *options), 3)
    assert f"not signed by the CA in --tls.ca-file {pki.foreign_ca}" in line


def test_a_certificate_for_another_name_is_refused_and_server_name_fixes_it(
        exporters: dict[str, Served], pki: Pki) -> None:
    s = exporters["tls"]
    line = refused(diagnose("--url", s.url, *s.options, "--tls.server-name", "gpu-7.example"),
                   3)
    assert "not for 'gpu-7.example'" in line and "--tls.server-name" in line
    # The certificate is for localhost too: named so, 127.0.0.1 is read.
    assert diagnose("--url", s.url, *s.options, "--tls.server-name", "localhost"
                    ).returncode == 4


def test_mtls_refuses_a_client_certificate_of_another_ca(exporters: dict[str, Served],
                                                         pki: Pki) -> None:
    s = exporters["mtls"]
    line = refused(diagnose("--url", s.url, "--tls.ca-file", str(pki.ca),
                            "--tls.cert-file", str(pki.foreign_cert),
                            "--tls.key-file", str(pki.foreign_key)), 3)
    assert f"did not accept the client certificate in --tls.cert-file {pki.foreign_cert}" \
        in line


def test_plain_http_to_a_tls_exporter_says_to_use_https(exporters: dict[str, Served]) -> None:
    line = refused(diagnose("--url", f"http://127.0.0.1:{exporters['tls'].port}"), 3)
    assert "use https://" in line


# --- usage errors: exit 2, one line, nothing secret -----------------------------------------


@pytest.mark.parametrize("userinfo", [f"{USER}:{PASSWORD}@", f"{USER}:{PASSWORD}/x@",
                                      f":{PASSWORD}@", f"{USER}:{PASSWORD}#@"])
def test_credentials_in_the_url_are_refused_without_showing_them(
        exporters: dict[str, Served], pki: Pki, userinfo: str) -> None:
    url = f"https://{userinfo}127.0.0.1:{exporters['auth'].port}/metrics"
    line = refused(diagnose("--url", url, "--tls.ca-file", str(pki.ca)), 2)
    assert line.startswith("gpu-exporter: error: --url holds a user or password")
    assert "--auth.password-file" in line
    # As an NPD plugin the condition says why too (a message of its own).
    result = diagnose("--url", url, "--format", "npd", "--condition", "cannot-see")
    assert result.returncode == 2 and result.stdout.startswith("usage error: --url holds")


@pytest.mark.parametrize("flag", ["--auth.password", "--password", "--web.password"])
def test_a_password_on_the_command_line_is_refused_without_repeating_it(flag: str) -> None:
    for args in ([flag, PASSWORD], [f"{flag}={PASSWORD}"]):
        line = refused(diagnose(*args), 2)
        assert "--auth.password-file" in line


def _hostile(d: Path, kind: str) -> tuple[Path, str]:
    """A password file of one hostile kind and the problem it is refused for."""
    path = d / f"hostile-{kind}"
    if kind == "fifo":
        os.mkfifo(path)  # nobody ever writes: a blocking open or read hangs forever
        return path, "is a pipe (FIFO), not a regular file"
    if kind == "directory":
        path.mkdir()
        return path, "is a directory, not a file"
    if kind == "10 MB":
        path.write_bytes((PASSWORD + "\n").encode() * (10_000_000 // (len(PASSWORD) + 1)))
        return path, f"larger than the {MAX_PASSWORD_BYTES} bytes"
    if kind == "two lines":
        path.write_text(f"{PASSWORD}\n{PASSWORD[::-1]}\n")
        return path, "holds more than one line"
    if kind == "empty":
        path.write_text("\n")
        return path, "is empty"
    if kind == "not UTF-8":
        path.write_bytes(PASSWORD.encode() + b"\xff\n")
        return path, "not UTF-8 text"
    if kind == "device":
        return Path("/dev/zero"), "is a character device, not a regular file"
    return path, "no such file"  # "missing"


@pytest.mark.parametrize("kind", ["fifo", "directory", "10 MB", "two lines", "empty",
                                  "not UTF-8", "device", "missing"])
def test_a_hostile_password_file_is_refused_at_once(exporters: dict[str, Served],
                                                    tmp_path: Path, kind: str) -> None:
    path, problem = _hostile(tmp_path, kind)
    s = exporters["auth"]
    options = list(s.options)
    options[options.index("--auth.password-file") + 1] = str(path)
    t0 = time.monotonic()
    line = refused(diagnose("--url", s.url, *options), 2)
    assert time.monotonic() - t0 < QUICK_S
    assert line == f"gpu-exporter: error: password file {path}: {line.split(': ', 3)[-1]}"
    assert problem in line, line


def test_a_password_file_ends_at_its_line_break(exporters: dict[str, Served], pki: Pki,
                                               tmp_path: Path) -> None:
    """No line break (echo -n), a Unix one or a Windows one: the same password."""
    s = exporters["auth"]
    for i, ending in enumerate(("", "\n", "\r\n")):
        path = tmp_path / f"pw{i}"
        path.write_bytes((PASSWORD + ending).encode())
        options = list(s.options)
        options[options.index("--auth.password-file") + 1] = str(path)
        assert diagnose("--url", s.url, *options).returncode == 4, repr(ending)


def _encrypted_key(pki: Pki) -> Path:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.client_key.read_bytes(), password=None)
    path = pki.dir / "encrypted.key"
    path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(PASSWORD.encode())))
    return path


def test_bad_tls_files_and_options_are_one_line_exit_2(exporters: dict[str, Served],
                                                       pki: Pki) -> None:
    https = exporters["mtls"].url
    cert = ["--tls.cert-file", str(pki.client_cert)]
    cases = {
        f"--tls.ca-file {pki.password_file}: no PEM certificate in it":
            ["--url", https, "--tls.ca-file", str(pki.password_file)],
        f"--tls.ca-file {pki.dir}: is a directory":
            ["--url", https, "--tls.ca-file", str(pki.dir)],
        "--tls.ca-file /nonexistent/ca.crt: no such file":
            ["--url", https, "--tls.ca-file", "/nonexistent/ca.crt"],
        "the key does not belong to the certificate":
            ["--url", https, *cert, "--tls.key-file", str(pki.foreign_key)],
        f"--tls.key-file {pki.client_cert}: no PEM private key in it":
            ["--url", https, *cert, "--tls.key-file", str(pki.client_cert)],
        "is encrypted; give an unencrypted key":
            ["--url", https, *cert, "--tls.key-file", str(_encrypted_key(pki))],
        "--tls.cert-file and --tls.key-file go together": ["--url", https, *cert],
        "--auth.username and --auth.password-file go together":
            ["--url", https, "--auth.username", USER],
        # A CA given for plain HTTP would verify nothing: said, not ignored.
        "--tls.ca-file: for an exporter served over TLS, but --url http://":
            ["--url", f"http://127.0.0.1:{exporters['tls'].port}", "--tls.ca-file", str(pki.ca)],
    }
    for expected, args in cases.items():
        line = refused(diagnose(*args), 2)
        assert line.startswith("gpu-exporter: error: ") and expected in line, (expected, line)


# --- the node-problem-detector config --------------------------------------------------------


def test_the_secured_npd_config_is_the_plain_one_with_the_client_options() -> None:
    """One config to keep: the secured one differs only in the rules' --url
    and the options after it."""
    def without_client(config: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(config)
        for rule in out["rules"]:
            args = rule["args"]
            rule["args"] = args[:args.index("--url")] + args[args.index("--format"):]
        return out

    assert without_client(SECURED_CONFIG) == without_client(PLAIN_CONFIG)
    for rule in SECURED_CONFIG["rules"]:
        args = rule["args"]
        client = args[args.index("--url"):args.index("--format")]
        assert client[:2] == ["--url", "https://127.0.0.1:9835"]
        assert dict(zip(client[2::2], client[3::2], strict=True)).keys() == {
            "--tls.ca-file", "--auth.username", "--auth.password-file"}


def test_the_secured_npd_configs_rules_read_the_tls_and_basic_auth_exporter(
        exporters: dict[str, Served], pki: Pki) -> None:
    """Each rule as NPD runs it, its URL and files replaced by the test's."""
    s = exporters["auth"]
    files = {"/etc/node-problem-detector/gpu-exporter/ca.crt": str(pki.ca),
             "/etc/node-problem-detector/gpu-exporter/password": str(pki.password_file)}
    got = {}
    for rule in SECURED_CONFIG["rules"]:
        args = [files.get(a, a) for a in rule["args"]]
        args[args.index("--url") + 1] = s.url
        args[args.index("--auth.username") + 1] = USER
        assert set(files.values()) <= set(args)
        result = diagnose(*args[1:])
        status = {0: "False", 1: "True"}.get(result.returncode, "Unknown")
        got[rule["condition"]] = (status, result.stdout.strip()[:21])
    assert got == {"GPUHardwareFault": ("Unknown", "cannot see the GPUs: "),
                   "GPUThrottled": ("Unknown", "cannot see the GPUs: "),
                   "GPULinkDegraded": ("Unknown", "cannot see the GPUs: "),
                   "GPUExporterCannotSee": ("True", "cannot see the GPUs: ")}


# --- the Helm chart's notes ------------------------------------------------------------------


def _notes(values: dict[str, Any]) -> str:
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name="gpu-exporter", namespace="monitoring",
                                is_install=True)
    (text,) = [t for p, t in rendered.items() if p.endswith("NOTES.txt")]
    return str(text)


def _diagnose_hint(notes: str) -> list[str]:
    (line,) = [ln for ln in notes.splitlines() if "exec POD -- gpu-exporter diagnose" in ln]
    return shlex.split(line.split(" -- gpu-exporter ", 1)[1])


def test_the_helm_notes_give_a_diagnose_line_that_reads_the_secured_exporter(
        exporters: dict[str, Served], pki: Pki) -> None:
    plain = _notes({})
    assert _diagnose_hint(plain) == ["diagnose"] and "--tls." not in plain
    web = {"secretName": "gpu-exporter-web", "tls": True, "authRequired": True}
    notes = _notes({"webConfig": web})
    hint = _diagnose_hint(notes)
    # Every option the notes name is one diagnose takes.
    help_text = run_cli(["diagnose", "--help"]).stdout
    for flag in set(re.findall(r"--[\w.-]+", notes)):
        assert re.search(rf"{re.escape(flag)}\b", help_text), flag
    # The hint, its placeholders filled in, reads the TLS + basic auth exporter.
    s = exporters["auth"]
    filled = {"CA_FILE": str(pki.ca), "USER": USER, "PASSWORD_FILE": str(pki.password_file),
              "https://127.0.0.1:9835": s.url}
    assert diagnose(*[filled.get(a, a) for a in hint[1:]]).returncode == 4
    tls_only = _diagnose_hint(_notes({"webConfig": {**web, "authRequired": False}}))
    assert "--auth.username" not in tls_only and "https://127.0.0.1:9835" in tls_only
    auth_only = _diagnose_hint(_notes({"webConfig": {**web, "tls": False}}))
    assert "http://127.0.0.1:9835" in auth_only and "--tls.ca-file" not in auth_only

