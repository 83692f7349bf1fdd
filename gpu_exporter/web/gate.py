"""The gate every request passes when a web config file is in force: a client
certificate whose subject alternative names are allowed, then HTTP basic auth
against bcrypt hashes (the Prometheus exporter-toolkit's rules, so a
``web-config.yml`` written for node_exporter means the same here). Loading and
reloading the file is ``web/webconfig.py``; this module decides one request.

``BasicAuth`` checks ``Authorization: Basic`` without telling unknown users
from wrong passwords by timing, and caches successes so a scrape every few
seconds does not pay for bcrypt every time.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import ipaddress
import secrets
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import bcrypt

from gpu_exporter.web.app import Request, Response

# bcrypt reads at most 72 bytes of a password; Go's bcrypt (the toolkit's)
# ignores the rest, so a password longer than that matches as it does there.
_BCRYPT_MAX_PASSWORD = 72
# Successful checks remembered per gate; a few scrapers use a few credentials.
_CACHE_SIZE = 64
# How long a request waits before its 503 when too many password checks queue.
BUSY_PAUSE_S = 1.0


class BasicAuth:
    """Checks ``Authorization: Basic`` headers against bcrypt hashes."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = [(hashlib.sha256(u.encode()).digest(), h.encode())
                       for u, h in users.items()]
        # An unknown user is checked against this hash so that it costs what a
        # wrong password costs: timing must not tell which user names exist.
        # Its cost matches the dearest configured hash; its password is random,
        # so nothing ever matches it.
        cost = max(int(h[4:6]) for h in users.values())
        self._dummy = bcrypt.hashpw(secrets.token_bytes(32), bcrypt.gensalt(cost))
        # Cache keys are keyed hashes of the credentials: the cache never holds
        # a password, and its keys are useless outside this process.
        self._cache_key = secrets.token_bytes(32)
        self._cache: OrderedDict[bytes, None] = OrderedDict()
        self._failed: OrderedDict[bytes, None] = OrderedDict()
        self._cache_lock = threading.Lock()
        # One bcrypt at a time (as in the toolkit): a flood of wrong passwords
        # keeps one core busy, never the event loop.
        self._bcrypt_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._waiting = 0  # checks queued for bcrypt from the event loop

    def check(self, authorization: str | None) -> bool:
        """The blocking check: cached, or bcrypt on this thread."""
        found = self._lookup(authorization)
        if isinstance(found, bool):
            return found
        return self._verify(*found)

    async def check_async(self, authorization: str | None, limit: int) -> bool | None:
        """The check for a request on the event loop: a cached success at
        once, otherwise bcrypt on its own thread. None when ``limit`` checks
        are queued already (the caller answers 503)."""
        found = self._lookup(authorization)
        if isinstance(found, bool):
            return found
        if self._waiting >= limit:
            return None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bcrypt")
        self._waiting += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._pool, self._verify, *found)
        finally:
            self._waiting -= 1

    def close(self, cancel: bool = False) -> None:
        """No more checks. Those queued still finish, unless ``cancel`` (the
        exporter is stopping: it must not wait for a queue of bcrypt checks)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=cancel)

    def _lookup(self, authorization: str | None) -> bool | tuple[bytes, bytes, bool, bytes]:
        """True for a cached success, False for a malformed header, else what
        ``_verify`` needs."""
        credentials = _parse_basic(authorization)
        if credentials is None:
            return False
        user, password = credentials
        given = hashlib.sha256(user).digest()
        stored = self._dummy
        known = False
        # Every configured user is compared, in constant time, whether or not
        # an earlier one matched.
        for name_digest, hashed in self._users:
            if hmac.compare_digest(name_digest, given):
                stored, known = hashed, True
        key = hmac.new(self._cache_key, b"\0".join((user, password, stored)),
                       hashlib.sha256).digest()
        with self._cache_lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return True
            if key in self._failed:
                # A client retrying a wrong password (a Prometheus with a stale
                # secret) costs a lookup, not a bcrypt, as in the toolkit.
                self._failed.move_to_end(key)
                return False
        return password, stored, known, key

    def _verify(self, password: bytes, stored: bytes, known: bool, key: bytes) -> bool:
        with self._bcrypt_lock:
            matched = _checkpw(password, stored)
        if not (matched and known):
            with self._cache_lock:
                # Failures have their own table: a flood of wrong passwords
                # cannot push a right one out and make it pay bcrypt again.
                self._failed[key] = None
                while len(self._failed) > _CACHE_SIZE:
                    self._failed.popitem(last=False)
            return False
        with self._cache_lock:
            self._cache[key] = None
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return True


def _checkpw(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password[:_BCRYPT_MAX_PASSWORD], hashed)
    except ValueError:
        return False


def _parse_basic(authorization: str | None) -> tuple[bytes, bytes] | None:
    if not authorization:
        return None
    scheme, _, encoded = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None
    return user, password


UNAUTHORIZED = Response(401, b"Unauthorized\n", headers={"WWW-Authenticate": "Basic"})
FORBIDDEN = Response(403, b"Forbidden: client certificate not allowed\n")
BUSY = Response(503, b"Too many password checks in progress; try again\n",
                headers={"Retry-After": "1"})


def normalise_san(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return value


def _peer_sans(cert: dict[str, Any] | None) -> set[str]:
    if not cert:
        return set()
    sans: set[str] = set()
    for entry in cert.get("subjectAltName", ()):
        kind, value = entry[0], entry[1]
        if kind in ("DNS", "email", "URI"):
            sans.add(str(value))
        elif kind == "IP Address":
            sans.add(normalise_san(str(value).strip()))
    return sans


async def admit(req: Request, allowed_sans: frozenset[str] | None, auth: BasicAuth | None,
                max_checks: int) -> Response | None:
    """None to serve ``req``; else the refusal: 403 for a client certificate
    without an allowed name, 401 without the right password, 503 (after a
    pause) when ``max_checks`` password checks are already queued."""
    if allowed_sans is not None and not (_peer_sans(req.peercert) & allowed_sans):
        return FORBIDDEN
    if auth is not None:
        ok = await auth.check_async(req.headers.get("authorization"), max_checks)
        if ok is None:
            # Answered after a pause: a flood of wrong passwords then
            # costs the event loop a request a second per client, not a
            # tight loop of refusals.
            await asyncio.sleep(BUSY_PAUSE_S)
            return BUSY
        if not ok:
            return UNAUTHORIZED
    return None
