"""The web config file (``--web.config.file``): TLS, client certificates and
basic auth, in the Prometheus exporter-toolkit format, so the ``web-config.yml``
a site already uses for node_exporter works here unchanged.

Three parts:

- ``load_web_config`` reads and validates the file (sections) and builds what
  the server needs: an ``ssl.SSLContext`` and a basic-auth checker. Any problem
  is one ``ConfigError`` line naming the file and the problem.
- ``gate.BasicAuth`` (in ``web/gate.py`` with the rest of the per-request
  check) checks ``Authorization: Basic`` against bcrypt hashes.
- ``WebConfigWatcher`` holds the active config, re-reads the file on SIGHUP or
  when it (or a certificate it names) changes, and swaps the new config in
  without touching connections in flight; a reload that fails keeps the old one.

Where Python's TLS stack cannot do what a toolkit setting asks, loading fails
with a line that says so rather than silently serving something weaker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import ssl
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from gpu_exporter.settings import safefile, safeyaml
from gpu_exporter.settings.config import ConfigError
from gpu_exporter.settings.sections import Parse, Section, ValidationError, setting
from gpu_exporter.web.app import Request, Response
from gpu_exporter.web.gate import BasicAuth, admit, normalise_san
from gpu_exporter.web.server import ExporterHTTPServer

log = logging.getLogger(__name__)

ClientAuthType = Literal["NoClientCert", "RequestClientCert", "RequireAnyClientCert",
                         "RequireClientCert", "VerifyClientCertIfGiven",
                         "RequireAndVerifyClientCert"]
TLSVersionName = Literal["TLS10", "TLS11", "TLS12", "TLS13"]

_TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# The toolkit names cipher suites as Go does (the IANA names); OpenSSL has its
# own names. These are the TLS 1.2 suites Go's tls.CipherSuites() offers.
_CIPHERS_TLS12: dict[str, str] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
# TLS 1.3 suites are not configurable in Go either: accepted and left to OpenSSL.
_CIPHERS_TLS13 = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                            "TLS_CHACHA20_POLY1305_SHA256"})

# Settings the toolkit knows that this exporter does not implement: named with
# the reason, so a copied web-config.yml fails with advice, not "unknown key".
_UNSUPPORTED: dict[tuple[str, ...], str] = {
    ("tls_server_config", "cert"): "inline certificates are not supported; put the PEM in a "
                                   "file and name it with cert_file",
    ("tls_server_config", "key"): "inline keys are not supported; put the PEM in a file "
                                  "and name it with key_file",
    ("tls_server_config", "curve_preferences"): "not supported (Python's TLS stack cannot "
                                                "set a curve preference list); remove it to "
                                                "use OpenSSL's defaults",
    ("http_server_config", "headers"): "extra response headers are not supported; set them "
                                       "in a reverse proxy",
    ("rate_limit",): "not supported; --web.max-connections and --web.max-requests already "
                     "bound open connections and queued password checks",
}

# A bcrypt hash as htpasswd -B, Python's bcrypt and Go's x/crypto write it.
_BCRYPT = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
# The dearest bcrypt cost accepted. A check at cost c runs 2^c rounds of the
# key schedule: at 14 it took 0.97 s of CPU on one core of the 2-core AMD EPYC
# development machine (10, the toolkit's example: 0.06 s), and each step up
# doubles it. The exporter hashes once at the dearest cost when it loads the
# file (unknown users are checked against that hash), so cost 31 (bcrypt's
# most) held the start, or a reload, for some 35 hours of CPU with no word.
MAX_BCRYPT_COST = 14
# How often a request may look at the files' modification times.
CHECK_INTERVAL = 1.0
# TLS versions OpenSSL 3 refuses at its default security level (RFC 8996
# deprecates them): a toolkit file naming them loads, with a warning, and the
# handshake floor is TLS 1.2.
_DEPRECATED_TLS = ("TLS10", "TLS11")


# The toolkit reads the file strictly: an unknown key is an error there too
# (as it is in every section).


def _empty_is_unset(v: Any) -> Any:
    # The toolkit's Go structs treat "" as "not set".
    return None if v == "" else v


def _default_auth(v: Any) -> Any:
    return "NoClientCert" if v in ("", None) else v


def _known_ciphers(v: list[str]) -> list[str]:
    for name in v:
        if name not in _CIPHERS_TLS12 and name not in _CIPHERS_TLS13:
            raise ValueError(f"unknown cipher {name!r}; known: "
                             + ", ".join(sorted(_CIPHERS_TLS12)))
    return v


_Unset = Parse(_empty_is_unset)


class TLSServerConfig(Section):
    cert_file: Annotated[Path | None, _Unset] = None
    key_file: Annotated[Path | None, _Unset] = None
    client_auth_type: Annotated[ClientAuthType, Parse(_default_auth)] = "NoClientCert"
    client_ca_file: Annotated[Path | None, _Unset] = None
    client_ca: Annotated[str | None, _Unset] = None
    client_allowed_sans: list[str] | None = None
    min_version: TLSVersionName = "TLS12"
    max_version: TLSVersionName = "TLS13"
    cipher_suites: list[str] = setting(default_factory=list, check=_known_ciphers)
    prefer_server_cipher_suites: bool = True

    def enabled(self) -> bool:
        """TLS is on when any of its settings is given, as in the toolkit."""
        return bool(self.cert_file or self.key_file or self.client_ca_file or self.client_ca
                    or "client_auth_type" in self.model_fields_set)


class HTTPServerConfig(Section):
    # HTTP/2 is not offered (the server speaks HTTP/1.1, which every Prometheus
    # speaks too); the key is accepted so toolkit files load unchanged.
    http2: bool = True


def _bcrypt_hashes(v: dict[str, str] | None) -> dict[str, str] | None:
    for user, hashed in (v or {}).items():
        m = _BCRYPT.match(hashed)
        if m is None or not 4 <= int(m.group(1)) <= 31:
            raise ValueError(f"the password of user {user!r} is not a bcrypt hash "
                             "(expected $2y$10$... as written by htpasswd -nBC 10)")
        if int(m.group(1)) > MAX_BCRYPT_COST:
            raise ValueError(f"the password of user {user!r} is hashed at bcrypt cost "
                             f"{int(m.group(1))}, above the {MAX_BCRYPT_COST} this exporter "
                             "accepts (each step doubles the time of every check; "
                             f"{MAX_BCRYPT_COST} takes about a second): hash it again "
                             "with htpasswd -nBC 10")
        if ":" in user:
            raise ValueError(f"user name {user!r} contains ':', which basic auth "
                             "cannot carry")
    return v


class WebConfigFile(Section):
    tls_server_config: TLSServerConfig | None = None
    http_server_config: HTTPServerConfig | None = None
    basic_auth_users: dict[str, str] | None = setting(None, check=_bcrypt_hashes)


@dataclass(frozen=True)
class LoadedWebConfig:
    """One reading of the web config file: everything a request needs, immutable."""

    path: Path
    ssl_context: ssl.SSLContext | None
    auth: BasicAuth | None
    allowed_sans: frozenset[str] | None
    # The config file and every file it names: a change to any is a reload.
    watched: tuple[Path, ...]

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None


def load_web_config(path: Path) -> LoadedWebConfig:
    """Read, validate and build; ``ConfigError`` (one line) on any problem."""
    where = f"web config file {path}"
    try:
        data = safeyaml.load_yaml(path, safefile.WEB_CONFIG_FILE)
    except safefile.FileRefused as exc:
        raise ConfigError(str(exc)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level, got "
                          f"{type(data).__name__}")
    _reject_unsupported(data, where)
    try:
        cfg = WebConfigFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_describe(exc)}") from None
    base = path.absolute().parent
    tls = cfg.tls_server_config
    ssl_context = None
    allowed_sans = None
    watched = [path]
    if tls is not None and tls.enabled():
        ssl_context, files = _ssl_context(tls, base, where)
        watched += files
        if tls.client_allowed_sans is not None:
            allowed_sans = frozenset(normalise_san(s) for s in tls.client_allowed_sans)
    auth = BasicAuth(cfg.basic_auth_users) if cfg.basic_auth_users else None
    return LoadedWebConfig(path, ssl_context, auth, allowed_sans, tuple(watched))


def _reject_unsupported(data: dict[str, Any], where: str) -> None:
    for keys, why in _UNSUPPORTED.items():
        node: Any = data
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                break
            node = node[key]
        else:
            raise ConfigError(f"{where}: {'.'.join(keys)}: {why}")


def _describe(exc: ValidationError) -> str:
    loc, problem = safefile.validation_problem(exc, unknown="unknown key")
    name = safefile.dotted(loc) or "top level"
    if problem.startswith("unknown key"):
        return f"unknown key {name}{problem.removeprefix('unknown key')}"
    return f"{name}: {problem}"


def _resolve(base: Path, p: Path) -> Path:
    # Relative paths are relative to the web config file, as in the toolkit.
    return p if p.is_absolute() else base / p


def _check_pem(setting: str, p: Path, marker: bytes, what: str, where: str) -> None:
    """Readable and PEM: OpenSSL's own word for a wrong file is "PEM lib"."""
    try:
        data = safefile.read_bytes(p, safefile.PEM_FILE)
    except safefile.FileRefused as exc:
        raise ConfigError(f"{where}: tls_server_config.{setting} {p}: {exc.problem}") from None
    if b"-----BEGIN " not in data or marker not in data:
        raise ConfigError(f"{where}: tls_server_config.{setting} {p}: no PEM {what} in it")


def _no_password() -> str:
    # Without this, OpenSSL would prompt on the terminal for an encrypted key.
    raise ConfigError("is encrypted; the exporter needs an unencrypted key "
                      "(protect it with file permissions)")


_SSL_REASONS = {
    "KEY_VALUES_MISMATCH": "the key does not belong to the certificate",
    "NO_START_LINE": "no PEM data found",
    "PEM_LIB": "not a valid PEM certificate or key",
    "CA_MD_TOO_WEAK": "the certificate is signed with a digest OpenSSL considers too weak",
    "EE_KEY_TOO_SMALL": "the key is too small for OpenSSL's security level",
    "NO_CERTIFICATE_OR_CRL_FOUND": "no certificate found",
}


def _ssl_reason(exc: ssl.SSLError) -> str:
    # load_cert_chain reports an unparsable certificate or key with no reason.
    reason = str(exc.reason or ("PEM_LIB" if "PEM lib" in str(exc) else ""))
    if reason in _SSL_REASONS:
        return _SSL_REASONS[reason]
    text = reason.lower().replace("_", " ") if reason else str(exc)
    # OpenSSL's messages end with the C source line; the operator needs none.
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", text)


def _ssl_context(tls: TLSServerConfig, base: Path,
                 where: str) -> tuple[ssl.SSLContext, list[Path]]:
    if tls.cert_file is None:
        raise ConfigError(f"{where}: tls_server_config: missing cert_file")
    if tls.key_file is None:
        raise ConfigError(f"{where}: tls_server_config: missing key_file")
    cert, key = _resolve(base, tls.cert_file), _resolve(base, tls.key_file)
    ca = _resolve(base, tls.client_ca_file) if tls.client_ca_file else None
    has_ca = ca is not None or tls.client_ca is not None
    auth = tls.client_auth_type
    if auth in ("RequireAnyClientCert", "RequireClientCert"):
        raise ConfigError(
            f"{where}: tls_server_config.client_auth_type {auth} is not supported: Python's "
            "TLS stack cannot require a client certificate without verifying it (and an "
            "unverified certificate proves nothing); use RequireAndVerifyClientCert with "
            "client_ca_file")
    if has_ca and auth == "NoClientCert":
        raise ConfigError(f"{where}: tls_server_config: client CAs are configured but "
                          "client_auth_type is NoClientCert; set RequireAndVerifyClientCert")
    if auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert") and not has_ca:
        raise ConfigError(f"{where}: tls_server_config.client_auth_type {auth} needs "
                          "client_ca_file to verify client certificates against")
    if tls.client_allowed_sans is not None and auth != "RequireAndVerifyClientCert":
        raise ConfigError(f"{where}: tls_server_config.client_allowed_sans needs "
                          "client_auth_type RequireAndVerifyClientCert")
    if tls.min_version in _DEPRECATED_TLS:
        log.warning("%s: tls_server_config.min_version %s is accepted as in the exporter "
                    "toolkit, but this OpenSSL refuses TLS 1.0 and 1.1 (deprecated by RFC "
                    "8996): clients need TLS 1.2 or later", where, tls.min_version)
    if _TLS_VERSIONS[tls.min_version] > _TLS_VERSIONS[tls.max_version]:
        raise ConfigError(f"{where}: tls_server_config: min_version {tls.min_version} is "
                          f"above max_version {tls.max_version}")
    _check_pem("cert_file", cert, b"CERTIFICATE-----", "certificate", where)
    _check_pem("key_file", key, b"PRIVATE KEY-----", "private key", where)
    if ca is not None:
        _check_pem("client_ca_file", ca, b"CERTIFICATE-----", "certificate", where)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        with warnings.catch_warnings():  # TLS10/TLS11: warned about above, once
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = _TLS_VERSIONS[tls.min_version]
        ctx.maximum_version = _TLS_VERSIONS[tls.max_version]
    except (ValueError, ssl.SSLError) as exc:
        raise ConfigError(f"{where}: tls_server_config: TLS versions "
                          f"{tls.min_version}-{tls.max_version}: {exc}") from None
    try:
        ctx.load_cert_chain(cert, key, password=_no_password)
    except ConfigError as exc:
        raise ConfigError(f"{where}: tls_server_config.key_file {key} {exc}") from None
    except ssl.SSLError as exc:
        raise ConfigError(f"{where}: tls_server_config: cannot load cert_file {cert} with "
                          f"key_file {key}: {_ssl_reason(exc)}") from None
    if has_ca:
        try:
            if ca is not None:
                ctx.load_verify_locations(cafile=ca)
            else:
                ctx.load_verify_locations(cadata=tls.client_ca)
        except ssl.SSLError as exc:
            source = f"client_ca_file {ca}" if ca is not None else "client_ca"
            raise ConfigError(f"{where}: tls_server_config.{source}: cannot load CA "
                              f"certificates: {_ssl_reason(exc)}") from None
    # RequestClientCert asks for a certificate the server then ignores;
    # Python cannot accept one unverified, and since nothing is derived from it
    # not asking is equivalent.
    ctx.verify_mode = {
        "NoClientCert": ssl.CERT_NONE,
        "RequestClientCert": ssl.CERT_NONE,
        "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
        "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
    }[auth]
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    tls12 = [_CIPHERS_TLS12[c] for c in tls.cipher_suites if c in _CIPHERS_TLS12]
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise ConfigError(f"{where}: tls_server_config.cipher_suites: none of them is "
                              "available in this OpenSSL") from None
    return ctx, [p for p in (cert, key, ca) if p is not None]


Fingerprint = tuple[tuple[int, int, int] | None, ...]


class WebConfigWatcher:
    """The active web config, swapped whole on reload.

    Every request reads ``self.active`` once (one reference: atomic), and the
    server reads its ``ssl_context`` once per new connection, so a request sees
    either the old config or the new one, never a mix; connections already open
    carry on with the TLS session they have.
    """

    def __init__(self, path: Path, check_interval: float = CHECK_INTERVAL,
                 clock: Callable[[], float] = time.monotonic,
                 max_checks: int = 8) -> None:
        self.path = path
        self.check_interval = check_interval
        self._clock = clock
        self.active = load_web_config(path)
        self._seen = _fingerprint(self.active.watched)
        self._last_check = clock()
        self._server: ExporterHTTPServer | None = None
        self._reload_lock = threading.Lock()
        self.reloads = 0
        # Password checks that may wait for bcrypt at once (--web.max-requests).
        self.max_checks = max_checks
        # Told the outcome of every reload, on SIGHUP or on a change on disk
        # (the exporter's gpu_exporter_config_last_reload_success).
        self.on_reload: Callable[[bool], None] | None = None

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        return self.active.ssl_context

    def attach(self, server: ExporterHTTPServer) -> None:
        """Serve through this config: TLS on new connections, the gate on requests."""
        self._server = server
        server.ssl_context = self.active.ssl_context
        server.app.gate = self.gate

    async def gate(self, req: Request) -> Response | None:
        if self._clock() - self._last_check >= self.check_interval:
            # Off the event loop: a reload reads files and hashes a password.
            await asyncio.to_thread(self._maybe_reload)
        active = self.active
        return await admit(req, active.allowed_sans, active.auth, self.max_checks)

    def close(self) -> None:
        """The exporter stops: drop the password checks still queued."""
        if self.active.auth is not None:
            self.active.auth.close(cancel=True)

    def _maybe_reload(self) -> None:
        now = self._clock()
        if now - self._last_check < self.check_interval:
            return
        # One request looks; the others go on with the config they have.
        if not self._reload_lock.acquire(blocking=False):
            return
        try:
            self._last_check = now
            seen = _fingerprint(self.active.watched)
            if seen != self._seen:
                # Remember what was seen even if the reload fails, so a broken
                # file is reported once, not on every request.
                self._seen = seen
                self._reload_locked("changed on disk")
        finally:
            self._reload_lock.release()

    def reload(self, why: str = "reload requested") -> bool:
        """Re-read the file now (SIGHUP); False, with an error logged, if it is bad."""
        with self._reload_lock:
            self._seen = _fingerprint(self.active.watched)
            return self._reload_locked(why)

    def _reload_locked(self, why: str) -> bool:
        ok = self._swap(why)
        if self.on_reload is not None:
            self.on_reload(ok)
        return ok

    def _swap(self, why: str) -> bool:
        try:
            new = load_web_config(self.path)
        except ConfigError as exc:
            log.error("web config not reloaded (%s), keeping the previous one: %s", why, exc)
            return False
        if new.tls != self.active.tls:
            log.error("web config not reloaded (%s), keeping the previous one: web config file "
                      "%s turns TLS %s; restart the exporter to change that", why, self.path,
                      "on" if new.tls else "off")
            return False
        old, self.active = self.active, new
        if old.auth is not None:
            old.auth.close()
        if self._server is not None:
            self._server.ssl_context = new.ssl_context
        self._seen = _fingerprint(new.watched)
        self.reloads += 1
        log.info("web config reloaded (%s) from %s", why, self.path)
        return True


def _fingerprint(paths: tuple[Path, ...]) -> Fingerprint:
    out: list[tuple[int, int, int] | None] = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


__all__ = ["BasicAuth", "LoadedWebConfig", "WebConfigFile", "WebConfigWatcher",
           "load_web_config"]
