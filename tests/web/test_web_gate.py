"""The gate a request passes when a web config file is in force
(``gpu_exporter/web/gate.py``): the client certificate's names, then basic
auth against bcrypt hashes, decided on ``Request`` objects without a socket
(the wire is ``tests/web/test_webconfig.py``). Fast enough for mutation testing
to run per mutant: bcrypt at cost 4, its minimum; the code path is the same.
"""

from __future__ import annotations

import asyncio
import threading
import time
from base64 import b64encode
from typing import Any

import bcrypt
import pytest

from gpu_exporter.web import gate
from gpu_exporter.web.app import Request, Response
from gpu_exporter.web.gate import BasicAuth, admit

COST = 4


def hash_pw(password: str, cost: int = COST) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def checkpw_calls(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every hash bcrypt is asked to check against, in order."""
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def spy(password: bytes, hashed: bytes) -> bool:
        calls.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", spy)
    return calls


def header(user: str, password: str) -> str:
    return basic(user, password)["Authorization"]


def test_unknown_users_cost_one_bcrypt_check_like_wrong_passwords(
        checkpw_calls: list[bytes]) -> None:
    """No timing difference by construction: an unknown user is checked
    against a dummy hash of the same cost as the real ones."""
    auth = BasicAuth({"prom": hash_pw("right", cost=5)})
    assert not auth.check(header("prom", "wrong"))
    assert not auth.check(header("nobody", "wrong"))
    assert len(checkpw_calls) == 2
    wrong_password, unknown_user = checkpw_calls
    assert wrong_password[:7] == unknown_user[:7] == b"$2b$05$"
    assert unknown_user != wrong_password
    # The dummy hash matches nothing a client could send, its own user name included.
    assert not auth.check(header("nobody", ""))


def test_checks_are_cached_and_wrong_passwords_cannot_evict_a_right_one(
        checkpw_calls: list[bytes]) -> None:
    auth = BasicAuth({"prom": hash_pw("right", cost=4)})
    assert auth.check(header("prom", "right"))
    assert auth.check(header("prom", "right"))
    assert auth.check(header("prom", "right"))
    assert len(checkpw_calls) == 1
    # A wrong password retried (a stale secret) is checked once, as in the toolkit.
    assert not auth.check(header("prom", "wrong"))
    assert not auth.check(header("prom", "wrong"))
    assert len(checkpw_calls) == 2
    # A flood of distinct wrong passwords: the right one stays cached.
    for i in range(200):
        assert not auth.check(header("prom", f"wrong-{i}"))
    calls = len(checkpw_calls)
    assert auth.check(header("prom", "right"))
    assert len(checkpw_calls) == calls
    # The cache keys are keyed hashes: no password is kept in memory.
    assert all(b"right" not in key and b"wrong" not in key
               for key in [*auth._cache, *auth._failed])
    assert len(auth._failed) <= 64


def test_basic_auth_edge_cases() -> None:
    auth = BasicAuth({"prom": hash_pw("pa:ss"), "long": hash_pw("x" * 72)})
    assert auth.check(header("prom", "pa:ss"))  # the password may contain ':'
    assert not auth.check(header("prom", "pa"))
    assert not auth.check(None)
    assert not auth.check("")
    assert not auth.check("Basic " + b64encode(b"no-colon").decode())
    # bcrypt reads 72 bytes of a password, as Go's bcrypt does.
    assert auth.check(header("long", "x" * 80))
    assert auth.check("basic " + b64encode(b"prom:pa:ss").decode())  # scheme is case-insensitive




def test_password_checks_queue_to_a_limit_off_the_event_loop(
        checkpw_calls: list[bytes]) -> None:
    """A cached success is answered without bcrypt; beyond ``limit`` queued
    checks the answer is None (the gate's 503), never a queue without end."""
    auth = BasicAuth({"prom": hash_pw("right", cost=4)})

    async def scenario() -> list[bool | None]:
        assert await auth.check_async(header("prom", "right"), limit=1) is True
        calls = len(checkpw_calls)
        assert await auth.check_async(header("prom", "right"), limit=0) is True  # cached
        assert len(checkpw_calls) == calls
        return list(await asyncio.gather(
            *(auth.check_async(header("prom", f"wrong-{i}"), limit=2) for i in range(5))))

    answers = asyncio.run(scenario())
    auth.close(cancel=True)
    assert answers.count(False) == 2 and answers.count(None) == 3



# --- the Authorization header --------------------------------------------------
@pytest.mark.parametrize(("header", "credentials"), [
    ("Basic " + b64encode(b"prom:secret").decode(), (b"prom", b"secret")),
    ("  BASIC   " + b64encode(b"prom:secret").decode() + "  ", (b"prom", b"secret")),
    ("Basic " + b64encode(b"prom:").decode(), (b"prom", b"")),
    ("Basic " + b64encode(b":pw").decode(), (b"", b"pw")),
    ("Basic " + b64encode(b"a:b:c").decode(), (b"a", b"b:c")),
    ("Basic " + b64encode(b"no-colon").decode(), None),
    ("Basic not*base64", None),
    ("Basic cHJv*bTpzZWNyZXQ=", None),  # prom:secret with a stray character: not skipped
    ("Basic " + b64encode(b"prom:secret").decode()[:-1], None),  # bad padding
    ("Bearer " + b64encode(b"prom:secret").decode(), None),
    ("Basicx " + b64encode(b"prom:secret").decode(), None),
    ("", None),
    (None, None),
])
def test_the_basic_credentials_are_read_as_rfc_7617_says(header: str | None,
                                                        credentials: tuple[bytes, bytes] | None
                                                        ) -> None:
    assert gate._parse_basic(header) == credentials


def test_the_dummy_hash_costs_what_the_dearest_configured_one_costs(
        checkpw_calls: list[bytes]) -> None:
    auth = BasicAuth({"cheap": hash_pw("a", cost=4), "dear": hash_pw("b", cost=10)})
    assert not auth.check(header("nobody", "x"))
    assert checkpw_calls[-1][:7] == b"$2b$10$"  # both digits of the cost


def test_a_user_is_found_whatever_its_place_in_the_list() -> None:
    users = {f"user{i}": hash_pw(f"pw{i}") for i in range(3)}
    auth = BasicAuth(users)
    for i in range(3):
        assert auth.check(header(f"user{i}", f"pw{i}"))
        assert not auth.check(header(f"user{i}", f"pw{(i + 1) % 3}"))


def test_a_right_password_of_another_user_is_wrong() -> None:
    auth = BasicAuth({"a": hash_pw("pa"), "b": hash_pw("pb")})
    assert not auth.check(header("a", "pb"))
    assert not auth.check(header("b", "pa"))


def test_a_malformed_hash_is_a_failed_check_not_an_error(checkpw_calls: list[bytes]) -> None:
    auth = BasicAuth({"prom": hash_pw("right")})
    auth._users = [(auth._users[0][0], b"$2b$04$not-a-real-hash")]
    assert not auth.check(header("prom", "right"))
    assert len(checkpw_calls) == 1


def test_successes_are_remembered_up_to_the_cache_size(checkpw_calls: list[bytes]) -> None:
    users = {f"u{i}": hash_pw("pw") for i in range(gate._CACHE_SIZE + 1)}
    auth = BasicAuth(users)
    for i in range(gate._CACHE_SIZE):
        assert auth.check(header(f"u{i}", "pw"))
    assert len(auth._cache) == gate._CACHE_SIZE
    calls = len(checkpw_calls)
    assert auth.check(header("u0", "pw"))  # still cached, and now the newest
    assert len(checkpw_calls) == calls
    assert auth.check(header(f"u{gate._CACHE_SIZE}", "pw"))  # evicts the oldest: u1
    assert len(auth._cache) == gate._CACHE_SIZE
    calls = len(checkpw_calls)
    assert auth.check(header("u0", "pw"))
    assert len(checkpw_calls) == calls
    assert auth.check(header("u1", "pw"))
    assert len(checkpw_calls) == calls + 1
    assert not auth._failed


def test_failures_are_remembered_up_to_the_cache_size(checkpw_calls: list[bytes]) -> None:
    auth = BasicAuth({"prom": hash_pw("right")})
    for i in range(gate._CACHE_SIZE + 5):
        assert not auth.check(header("prom", f"wrong-{i}"))
    assert len(auth._failed) == gate._CACHE_SIZE
    assert not auth._cache
    calls = len(checkpw_calls)
    assert not auth.check(header("prom", f"wrong-{gate._CACHE_SIZE + 4}"))  # newest kept
    assert len(checkpw_calls) == calls
    assert not auth.check(header("prom", "wrong-0"))  # the oldest went
    assert len(checkpw_calls) == calls + 1


def test_a_wrong_user_with_the_dummy_hash_is_never_cached_as_a_success(
        monkeypatch: pytest.MonkeyPatch) -> None:
    auth = BasicAuth({"prom": hash_pw("right")})
    monkeypatch.setattr(gate, "_checkpw", lambda password, hashed: True)
    assert not auth.check(header("nobody", "anything"))  # known is False: refused
    assert not auth._cache and len(auth._failed) == 1
    assert auth.check(header("prom", "anything"))
    assert len(auth._cache) == 1


def test_a_queued_check_frees_its_place_when_it_ends() -> None:
    auth = BasicAuth({"prom": hash_pw("right")})

    async def scenario() -> list[bool | None]:
        answers = []
        for i in range(3):  # one at a time: each finds the queue empty again
            answers.append(await auth.check_async(header("prom", f"wrong-{i}"), limit=1))
        return answers

    try:
        assert asyncio.run(scenario()) == [False, False, False]
        assert auth._waiting == 0
    finally:
        auth.close(cancel=True)


def test_closing_before_any_check_and_twice_is_harmless() -> None:
    auth = BasicAuth({"prom": hash_pw("right")})
    auth.close()
    auth.close(cancel=True)
    assert auth._pool is None


# --- the client certificate's names ----------------------------------------------
def cert(*sans: tuple[str, str]) -> dict[str, Any]:
    return {"subject": ((("commonName", "ignored"),),), "subjectAltName": sans}


def test_the_names_of_a_client_certificate() -> None:
    assert gate._peer_sans(None) == set()
    assert gate._peer_sans({}) == set()
    assert gate._peer_sans({"subject": ()}) == set()
    assert gate._peer_sans(cert(("DNS", "scraper.example"), ("email", "ops@example"),
                                ("URI", "spiffe://cluster/prom"), ("IP Address", " 10.0.0.7 "),
                                ("IP Address", "2001:DB8:0:0::1"), ("DirName", "cn=x"),
                                ("othername", "<unsupported>"))) == {
        "scraper.example", "ops@example", "spiffe://cluster/prom", "10.0.0.7", "2001:db8::1"}


@pytest.mark.parametrize(("value", "normal"), [
    ("2001:DB8::0:1", "2001:db8::1"), ("::ffff:10.0.0.1", "::ffff:a00:1"),
    ("10.0.0.1", "10.0.0.1"), ("scraper.example", "scraper.example"), ("", "")])
def test_addresses_are_compared_in_one_spelling(value: str, normal: str) -> None:
    assert gate.normalise_san(value) == normal


# --- one request through the gate -------------------------------------------------
def request(headers: dict[str, str] | None = None,
            peercert: dict[str, Any] | None = None) -> Request:
    return Request("/metrics", "", {k.lower(): v for k, v in (headers or {}).items()}, peercert)


def run(req: Request, sans: frozenset[str] | None, auth: BasicAuth | None,
        max_checks: int = 8) -> Response | None:
    return asyncio.run(admit(req, sans, auth, max_checks))


def test_without_names_or_users_every_request_passes() -> None:
    assert run(request(), None, None) is None
    assert run(request(peercert=cert(("DNS", "x"))), None, None) is None


def test_a_certificate_must_carry_an_allowed_name() -> None:
    allowed = frozenset({"scraper.example", "10.0.0.7"})
    assert run(request(peercert=cert(("DNS", "scraper.example"))), allowed, None) is None
    assert run(request(peercert=cert(("DNS", "other"), ("IP Address", "10.0.0.7"))),
               allowed, None) is None
    for refused in (request(), request(peercert=cert(("DNS", "other.example")))):
        answer = run(refused, allowed, None)
        assert answer is gate.FORBIDDEN
        assert answer.status == 403
    # the names are checked first: a right password does not open the door
    auth = BasicAuth({"prom": hash_pw("right")})
    assert run(request(basic("prom", "right")), allowed, auth) is gate.FORBIDDEN


def test_a_password_is_asked_of_every_request_with_users() -> None:
    auth = BasicAuth({"prom": hash_pw("right")})
    answer = run(request(), None, auth)
    assert answer is gate.UNAUTHORIZED
    assert answer.status == 401 and answer.headers == {"WWW-Authenticate": "Basic"}
    assert run(request(basic("prom", "wrong")), None, auth) is gate.UNAUTHORIZED
    assert run(request(basic("prom", "right")), None, auth) is None
    allowed = frozenset({"scraper.example"})
    ok_cert = cert(("DNS", "scraper.example"))
    assert run(request(basic("prom", "right"), ok_cert), allowed, auth) is None
    assert run(request(basic("prom", "wrong"), ok_cert), allowed, auth) is gate.UNAUTHORIZED


def test_too_many_queued_checks_answer_503_after_a_pause(
        monkeypatch: pytest.MonkeyPatch) -> None:
    auth = BasicAuth({"prom": hash_pw("right")})
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr(gate.asyncio, "sleep", sleep)
    answer = run(request(basic("prom", "right")), None, auth, max_checks=0)
    assert answer is gate.BUSY
    assert answer.status == 503 and answer.headers == {"Retry-After": "1"}
    assert pauses == [gate.BUSY_PAUSE_S] and gate.BUSY_PAUSE_S == 1.0
    # once the right password is cached, no check queues: served at once
    assert run(request(basic("prom", "right")), None, auth, max_checks=1) is None
    assert run(request(basic("prom", "right")), None, auth, max_checks=0) is None
    assert pauses == [1.0]
    auth.close(cancel=True)


def test_checks_off_the_event_loop_run_one_at_a_time_on_the_gates_own_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    auth = BasicAuth({"prom": hash_pw("right")})
    threads: list[str] = []

    def spy(password: bytes, hashed: bytes) -> bool:
        threads.append(threading.current_thread().name)
        time.sleep(0.01)
        return False

    monkeypatch.setattr(gate, "_checkpw", spy)

    async def scenario(first: int) -> list[bool | None]:
        return list(await asyncio.gather(*(auth.check_async(header("prom", f"w{first + i}"),
                                                            limit=8) for i in range(4))))

    try:
        assert asyncio.run(scenario(0)) == [False] * 4
        assert asyncio.run(scenario(4)) == [False] * 4  # the same thread again
    finally:
        auth.close(cancel=True)
    assert threads == ["bcrypt_0"] * 8


@pytest.mark.parametrize("cancel", [False, True])
def test_closing_does_not_wait_and_lets_queued_checks_finish_unless_cancelled(
        monkeypatch: pytest.MonkeyPatch, cancel: bool) -> None:
    release = threading.Event()

    def slow(password: bytes, hashed: bytes) -> bool:
        release.wait(10)
        return False

    monkeypatch.setattr(gate, "_checkpw", slow)
    auth = BasicAuth({"prom": hash_pw("right")})

    async def scenario() -> list[object]:
        tasks = [asyncio.ensure_future(auth.check_async(header("prom", f"w{i}"), limit=8))
                 for i in range(3)]
        await asyncio.sleep(0.2)  # all three queued, the first one in bcrypt
        closer = threading.Thread(target=auth.close if not cancel else
                                  (lambda: auth.close(cancel=True)))
        closer.start()
        closer.join(5)
        returned = not closer.is_alive()
        release.set()
        answers = await asyncio.gather(*tasks, return_exceptions=True)
        return [returned, *answers]

    returned, first, *queued = asyncio.run(scenario())
    assert returned is True  # close() did not wait for the check in bcrypt
    assert first is False
    if cancel:
        assert all(isinstance(a, asyncio.CancelledError) for a in queued), queued
    else:
        assert queued == [False, False]
