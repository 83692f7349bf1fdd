"""The HTTP(S) client the one-shot commands ask a running exporter with: its
TLS (the CA that signed the exporter's certificate, a client certificate for
mutual TLS) and basic auth (a user, and a password read from a file), the
counterpart of the exporter's own web config file (--web.config.file).

Standard library only (http.client and ssl): the exporter already speaks TLS
through ``ssl``, one GET needs no client library, and one (requests, httpx)
would add a dependency, with a CA bundle of its own, to every node that runs
``gpu-exporter diagnose`` from node-problem-detector. http.client rather than
urllib.request: urllib follows redirects, carrying the Authorization header
to wherever one points, and sends through any proxy named in the environment;
this client does neither.

Secrets stay out of sight: a password never comes from the command line
(other users read it in ps, NPD logs its plugins' arguments) nor from the URL,
and no message, log line or traceback holds one. Every message that shows the
exporter's URL shows it without a user or password."""

from __future__ import annotations

import argparse
import base64
import errno
import http.client
import socket
import ssl
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from gpu_exporter.facts.safetext import terminal_safe
from gpu_exporter.settings import safefile
from gpu_exporter.settings.config import ConfigError

# A password file holds one line; 4 KiB is far above any password and keeps a
# file given by mistake (a log, a device) from being read whole.
MAX_PASSWORD_BYTES = 4096
# /diagnosis of an eight-GPU node is some tens of KiB: a larger answer is no
# exporter's.
MAX_ANSWER_BYTES = 16 * safefile.MIB


class BadUrl(ValueError):
    """An --url that names no exporter this command can read."""


class Unreadable(ConnectionError):
    """The exporter could not be read: not reached, or no usable answer. A
    later try may succeed (it is starting)."""


class Refused(Unreadable):
    """The exporter was reached and refused this client: TLS (its certificate
    not trusted, or ours not accepted) or basic auth. Asking again gives the
    same answer, so --wait does not. ``brief``: the reason in a few words,
    for a message as short as a node condition's."""

    def __init__(self, message: str, brief: str) -> None:
        super().__init__(message)
        self.brief = brief


@dataclass(frozen=True)
class Option:
    """One option of the client, as --help and the README list it."""

    flag: str
    dest: str
    metavar: str
    help: str


OPTIONS = (
    Option("--tls.ca-file", "tls_ca_file", "FILE",
           "with an https:// --url: verify the exporter's certificate against the CA "
           "certificates (PEM) in FILE instead of the system's"),
    Option("--tls.server-name", "tls_server_name", "NAME",
           "with an https:// --url: the name the exporter's certificate must be for, "
           "when --url reaches it by another (127.0.0.1, and a certificate for the node's "
           "host name)"),
    Option("--tls.cert-file", "tls_cert_file", "FILE",
           "with an https:// --url: the client certificate (PEM) for an exporter that "
           "requires one (client_auth_type RequireAndVerifyClientCert); with --tls.key-file"),
    Option("--tls.key-file", "tls_key_file", "FILE",
           "the unencrypted private key (PEM) of --tls.cert-file"),
    Option("--auth.username", "auth_username", "USER",
           "basic auth: the user, for an exporter with basic_auth_users; with "
           "--auth.password-file"),
    Option("--auth.password-file", "auth_password_file", "FILE",
           "basic auth: a file holding the password on one line (a password is never "
           "taken on the command line or in --url)"),
)


def options_markdown() -> str:
    """The client's options as the README lists them (a generated block)."""
    lines = ["| option | meaning |", "|---|---|"]
    lines += [f"| `{o.flag} {o.metavar}` | {o.help} |" for o in OPTIONS]
    return "\n".join(lines) + "\n"


class _PasswordOnTheCommandLine(argparse.Action):
    """``--auth.password``: refused without repeating what followed it."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        raise ConfigError(f"{option_string}: a password is not taken on the command line "
                          "(other users can read it there); write it to a file readable "
                          "only by you and pass --auth.password-file FILE")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for o in OPTIONS:
        parser.add_argument(o.flag, dest=o.dest, metavar=o.metavar, help=o.help,
                            type=Path if o.metavar == "FILE" else str)
    parser.add_argument("--auth.password", "--password", "--web.password",
                        action=_PasswordOnTheCommandLine, help=argparse.SUPPRESS)


# --- the URL --------------------------------------------------------------------------------

# The exporter's own paths a person may paste (its metrics path by default):
# the exporter is what is left before them.
_EXPORTER_PATHS = ("/diagnosis", "/metrics", "/runbook", "/-/ready", "/-/healthy")


def exporter_url(url: str) -> str:
    """The exporter's base URL from what a person gives: ``host:port``, a
    base URL, or one of its pages (``http://host:9835/metrics``, its
    ``/diagnosis``), a path prefix in front kept. Only http and https, and
    no user or password in it (``ConfigError``: a usage error)."""
    text = url.strip()
    if "@" in text:
        # Any "@" may end a user and password (one holding "/" or "#" moves
        # the "@" out of what a URL parser calls the host), so none is shown.
        raise ConfigError("--url holds a user or password (user:password@), which the "
                          "command line shows to every user of this machine; give the user "
                          "with --auth.username and the password in a file with "
                          "--auth.password-file")
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        raise BadUrl(f"--url {url!r}: not a URL ({exc})") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise BadUrl(f"--url {url!r}: only http:// and https:// URLs name an exporter")
    if not parts.hostname:
        raise BadUrl(f"--url {url!r}: names no host")
    path = parts.path.rstrip("/")
    for page in _EXPORTER_PATHS:
        if path.endswith(page):
            path = path[: -len(page)]
            break
    return urllib.parse.urlunsplit((parts.scheme.lower(), parts.netloc, path, "", ""))


# --- files ----------------------------------------------------------------------------------

PASSWORD_FILE = safefile.FileKind("password file", MAX_PASSWORD_BYTES, 0, 0, regular_only=True)
_PEM_MAX = safefile.PEM_FILE.max_bytes
CA_FILE = safefile.FileKind("--tls.ca-file", _PEM_MAX, 0, 0, regular_only=True)
CERT_FILE = safefile.FileKind("--tls.cert-file", _PEM_MAX, 0, 0, regular_only=True)
KEY_FILE = safefile.FileKind("--tls.key-file", _PEM_MAX, 0, 0, regular_only=True)



def _refuse(kind: safefile.FileKind, path: Path, problem: str) -> NoReturn:
    raise ConfigError(str(safefile.FileRefused(kind, path, problem)))


def read_regular_file(path: Path, kind: safefile.FileKind) -> bytes:
    """The bytes of a regular file, at most the kind's limit (the safe
    loader's read: opened without blocking and checked before a byte is
    read, so a FIFO nobody writes to, a directory or a device is refused at
    once instead of hanging the command, which NPD would kill at its
    timeout). Errors name the file, never what is in it."""
    try:
        return safefile.read_bytes(path, kind)
    except safefile.FileRefused as exc:
        raise ConfigError(str(exc)) from None


def read_password(path: Path) -> str:
    """The password in ``path``: one line, its line break not part of it."""
    data = read_regular_file(path, PASSWORD_FILE)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # Unlike other files, the place of the bad byte is not said: it is a
        # fact about the password.
        _refuse(PASSWORD_FILE, path, "not UTF-8 text")
    for ending in ("\r\n", "\n"):
        if text.endswith(ending):
            text = text[: -len(ending)]
            break
    if "\n" in text or "\r" in text:
        _refuse(PASSWORD_FILE, path, "holds more than one line; it must hold the password "
                "alone")
    if not text:
        _refuse(PASSWORD_FILE, path, "is empty")
    return text


def _pem(path: Path, kind: safefile.FileKind, marker: str, what: str) -> str:
    data = read_regular_file(path, kind)
    if b"-----BEGIN " not in data or marker.encode() not in data:
        _refuse(kind, path, f"no PEM {what} in it")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        _refuse(kind, path, f"not a PEM {what} (PEM is ASCII)")


def _encrypted_key() -> str:
    # Without this, OpenSSL would prompt on the terminal (NPD has none).
    raise ConfigError("is encrypted; give an unencrypted key (protect it with file "
                      "permissions)")


def _ssl_text(exc: ssl.SSLError) -> str:
    reason = str(exc.reason or "").lower().replace("_", " ")
    return reason or str(exc).split(" (_ssl.c")[0]


# --- the client -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientSettings:
    """The client's options as given (paths, not yet read)."""

    tls_ca_file: Path | None = None
    tls_server_name: str | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    auth_username: str | None = None
    auth_password_file: Path | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ClientSettings:
        return cls(**{o.dest: getattr(args, o.dest, None) for o in OPTIONS})


class ExporterClient:
    """Asks one exporter (its base URL, from ``exporter_url``) for its pages.
    Every file is read and checked when it is made (``ConfigError``, one
    line, exit 2); asking raises ``Unreadable`` or ``Refused``."""

    def __init__(self, base_url: str, settings: ClientSettings = ClientSettings(),
                 timeout: float = 5.0) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self.base_url = base_url
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path
        self.timeout = timeout
        self.settings = settings
        s = settings
        tls_given = [o.flag for o in OPTIONS if o.flag.startswith("--tls.")
                     and getattr(s, o.dest) is not None]
        if tls_given and not self.https:
            raise ConfigError(f"{', '.join(tls_given)}: for an exporter served over TLS, "
                              f"but --url {base_url} is http://; give its https:// URL")
        if (s.tls_cert_file is None) != (s.tls_key_file is None):
            raise ConfigError("--tls.cert-file and --tls.key-file go together")
        if (s.auth_username is None) != (s.auth_password_file is None):
            raise ConfigError("--auth.username and --auth.password-file go together")
        if s.auth_username is not None and (":" in s.auth_username or not s.auth_username):
            raise ConfigError("--auth.username: a basic-auth user name is not empty and "
                              "holds no ':'")
        self._authorization: str | None = None
        if s.auth_username is not None and s.auth_password_file is not None:
            password = read_password(s.auth_password_file)
            token = base64.b64encode(f"{s.auth_username}:{password}".encode()).decode()
            self._authorization = f"Basic {token}"
        self._context = self._ssl_context() if self.https else None

    def _ssl_context(self) -> ssl.SSLContext:
        s = self.settings
        ctx = ssl.create_default_context()
        if s.tls_ca_file is not None:
            ca = _pem(s.tls_ca_file, CA_FILE, "CERTIFICATE-----", "certificate")
            # Only this CA: a certificate from any public CA is no exporter's here.
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            try:
                ctx.load_verify_locations(cadata=ca)
            except ssl.SSLError as exc:
                _refuse(CA_FILE, s.tls_ca_file, f"cannot load its certificates: "
                        f"{_ssl_text(exc)}")
        if s.tls_cert_file is not None and s.tls_key_file is not None:
            _pem(s.tls_cert_file, CERT_FILE, "CERTIFICATE-----", "certificate")
            _pem(s.tls_key_file, KEY_FILE, "PRIVATE KEY-----", "private key")
            try:
                ctx.load_cert_chain(s.tls_cert_file, s.tls_key_file, password=_encrypted_key)
            except ConfigError as exc:
                _refuse(KEY_FILE, s.tls_key_file, str(exc))
            except ssl.SSLError as exc:
                reason = ("the key does not belong to the certificate"
                          if exc.reason == "KEY_VALUES_MISMATCH" else _ssl_text(exc))
                raise ConfigError(f"--tls.cert-file {s.tls_cert_file} with --tls.key-file "
                                  f"{s.tls_key_file}: cannot load them: {reason}") from None
        return ctx

    def get(self, path: str) -> bytes:
        """The body of a 200 answer to GET ``path`` (below the base URL)."""
        target = self.base_url + path
        conn: http.client.HTTPConnection
        if self._context is not None:
            conn = _HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                    context=self._context,
                                    server_name=self.settings.tls_server_name)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        headers = {"Accept": "application/json", "User-Agent": "gpu-exporter-diagnose"}
        if self._authorization is not None:
            headers["Authorization"] = self._authorization
        try:
            conn.request("GET", self.prefix + path, headers=headers)
            resp = conn.getresponse()
            body = resp.read(MAX_ANSWER_BYTES + 1)
        except ssl.SSLCertVerificationError as exc:
            raise Refused(f"{target}: {self._untrusted(exc)}", "TLS: " + _untrusted_brief(exc)) \
                from None
        except ssl.SSLError as exc:
            raise self._tls_refusal(target, exc) from None
        except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected,
                http.client.BadStatusLine) as exc:
            raise self._hung_up(target, exc) from None
        except http.client.HTTPException as exc:
            raise Unreadable(f"{target} did not answer HTTP ({type(exc).__name__})") from None
        except TimeoutError:
            raise Unreadable(f"cannot reach the exporter at {target}: no answer within "
                             f"{self.timeout:g} s") from None
        except OSError as exc:
            raise Unreadable(f"cannot reach the exporter at {target}: "
                             f"{_os_reason(exc)}") from None
        finally:
            conn.close()
        if resp.status == 401:
            wrong = self._authorization is not None
            raise Refused(f"{target} answered HTTP 401: {self._unauthorized()}",
                          "HTTP 401: " + ("wrong user or password" if wrong else
                                          "needs --auth.username, --auth.password-file"))
        if resp.status == 403:
            raise Refused(f"{target} answered HTTP 403: its client_allowed_sans does not "
                          "list the name in the client certificate "
                          f"({self.settings.tls_cert_file})",
                          "HTTP 403: client certificate's name not allowed")
        if resp.status != 200:
            hint = (" (is that the exporter's address? give host:port or its base URL)"
                    if resp.status == 404 else "")
            raise Unreadable(f"{target} answered HTTP {resp.status}{hint}")
        if len(body) > MAX_ANSWER_BYTES:
            raise Unreadable(f"{target} answered more than {MAX_ANSWER_BYTES // safefile.MIB} "
                             "MiB; is it a gpu-exporter?")
        return body

    # --- what went wrong, and what to pass -----------------------------------------------

    def _unauthorized(self) -> str:
        s = self.settings
        if self._authorization is None:
            return ("the exporter asks for a user and password (basic_auth_users): pass "
                    "--auth.username USER --auth.password-file FILE")
        return (f"the exporter refused user {terminal_safe(s.auth_username)!r} with the "
                f"password in {s.auth_password_file}; check both against its "
                "basic_auth_users")

    def _untrusted(self, exc: ssl.SSLCertVerificationError) -> str:
        s = self.settings
        name = s.tls_server_name or self.host
        code = exc.verify_code
        if code in _NAME_MISMATCH:
            return (f"the exporter's certificate is not for {name!r}: put a name it is for "
                    "in --url, or pass it with --tls.server-name NAME")
        if code in _UNKNOWN_ISSUER:
            where = (f"the CA in --tls.ca-file {s.tls_ca_file}" if s.tls_ca_file is not None
                     else "a CA this system trusts")
            hint = ("the right one" if s.tls_ca_file is not None
                    else "the CA that signed it with --tls.ca-file FILE")
            return (f"the exporter's certificate is not signed by {where} "
                    f"({exc.verify_message}): pass {hint}")
        return (f"the exporter's certificate cannot be trusted: {exc.verify_message}")

    def _tls_refusal(self, target: str, exc: ssl.SSLError) -> Unreadable:
        reason = str(exc.reason or "")
        if reason in ("TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_HANDSHAKE_FAILURE") \
                and self.settings.tls_cert_file is None:
            return Refused(f"{target}: {_NEEDS_CERT}", "TLS: " + _NEEDS_CERT_BRIEF)
        if reason in ("TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_BAD_CERTIFICATE",
                      "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "TLSV1_ALERT_ACCESS_DENIED",
                      "SSLV3_ALERT_CERTIFICATE_EXPIRED", "SSLV3_ALERT_HANDSHAKE_FAILURE"):
            return Refused(f"{target}: {self._cert_refused(_ssl_text(exc))}",
                           "TLS: " + _CERT_REFUSED_BRIEF)
        if reason == "WRONG_VERSION_NUMBER":
            return Refused(f"{target}: the exporter does not serve TLS; use http:// in --url",
                           "no TLS there; use http://")
        return Refused(f"{target}: TLS failed: {_ssl_text(exc)}", f"TLS: {_ssl_text(exc)}")

    def _cert_refused(self, why: str) -> str:
        return (f"the exporter did not accept the client certificate in --tls.cert-file "
                f"{self.settings.tls_cert_file} ({why}): pass one signed by a CA in its "
                "client_ca_file")

    def _hung_up(self, target: str, exc: Exception) -> Unreadable:
        if not self.https:
            return Unreadable(f"{target}: the exporter closed the connection without an "
                              "answer; if it serves TLS, use https:// in --url")
        # TLS 1.3 finishes the client's side of the handshake before the server
        # checks the client's certificate: a refusal arrives as a hang-up.
        if self.settings.tls_cert_file is None:
            return Refused(f"{target}: the exporter hung up after TLS began; {_NEEDS_CERT}",
                           "TLS: " + _NEEDS_CERT_BRIEF)
        return Refused(f"{target}: the exporter hung up after TLS began; "
                       f"{self._cert_refused(type(exc).__name__)}",
                       "TLS: " + _CERT_REFUSED_BRIEF)


_NEEDS_CERT = ("it requires a client certificate (client_auth_type "
               "RequireAndVerifyClientCert): pass --tls.cert-file FILE --tls.key-file FILE")
# What a node condition's 80 characters hold after "exporter not read: ".
_NEEDS_CERT_BRIEF = "needs --tls.cert-file, --tls.key-file"
_CERT_REFUSED_BRIEF = "client certificate refused"
# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH;
# UNABLE_TO_GET_ISSUER_CERT, DEPTH_ZERO_SELF_SIGNED_CERT, SELF_SIGNED_CERT_IN_CHAIN,
# UNABLE_TO_GET_ISSUER_CERT_LOCALLY, UNABLE_TO_VERIFY_LEAF_SIGNATURE.
_NAME_MISMATCH = (62, 64)
_UNKNOWN_ISSUER = (2, 18, 19, 20, 21)


def _untrusted_brief(exc: ssl.SSLCertVerificationError) -> str:
    if exc.verify_code in _NAME_MISMATCH:
        return "certificate not for that name; see --tls.server-name"
    if exc.verify_code in _UNKNOWN_ISSUER:
        return "certificate of an unknown CA; see --tls.ca-file"
    return f"certificate not trusted: {exc.verify_message}"


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host ({exc.strerror})"
    if exc.errno == errno.ECONNREFUSED:
        return "connection refused (is it running, on that port?)"
    return (exc.strerror or str(exc)).lower() if exc.strerror else str(exc)


class _HTTPSConnection(http.client.HTTPSConnection):
    """HTTPS whose certificate is checked for ``server_name`` (and SNI sent
    for it) when the URL names the exporter otherwise."""

    def __init__(self, host: str, port: int, *, timeout: float, context: ssl.SSLContext,
                 server_name: str | None) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._ssl_context = context
        self._server_name = server_name or host

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._ssl_context.wrap_socket(self.sock, server_hostname=self._server_name)
