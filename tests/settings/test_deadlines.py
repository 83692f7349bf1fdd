"""Every time limit holds at its n-th wait and against input that trickles:
a deadline that starts again on every read, or only on the first wait of a
connection, would let a client that sends a byte now and then hold a
connection (and its file descriptor, and a place under
--web.max-connections) for as long as it likes.

A file read through a pipe (``--config.file <(...)``) must be whole within
PIPE_TIMEOUT_S of the read's start, however it trickles.

The request head's deadline (``--web.request-timeout``) runs from the head's
first byte, on the first request of a connection and on every later one of
a kept-alive connection (between two requests the idle deadline,
``--web.idle-timeout``, runs instead).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.settings import safefile
from tests.simnode import SimRun

REQUEST_TIMEOUT = 1.0
# A byte every this many seconds: a head of 40 bytes would take 10 s.
TRICKLE_S = 0.25
# Far above the 1 s deadline, far below the 10 s a trickle would hold out
# (and the 300 s idle deadline).
CUT_WITHIN = 4.0
REQUEST = b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with SimRun("idle", web={"listen_address": "127.0.0.1:0", "request_timeout": "1s",
                             "idle_timeout": "300s"}) as run:
        run.poll()
        yield run.serve()


def _answer(s: socket.socket) -> bytes:
    """One whole response to a /-/healthy request (its small body included)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += s.recv(4096)
    return head


def _trickle(s: socket.socket) -> float:
    """Send a never-ending head a byte every TRICKLE_S; the seconds from its
    first byte until the server closed the connection."""
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Trickle: " + b"z" * 100
    started = time.monotonic()
    s.settimeout(TRICKLE_S)
    for byte in head:
        try:
            s.sendall(bytes([byte]))
            if s.recv(4096) == b"":
                return time.monotonic() - started
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - started
        if time.monotonic() - started > 3 * CUT_WITHIN:
            break
    return time.monotonic() - started


@pytest.mark.parametrize("answered", [0, 1, 3])
def test_a_trickled_head_is_cut_at_the_request_timeout_at_any_request(
        port: int, answered: int) -> None:
    """After ``answered`` requests on a kept-alive connection, the next head
    trickled a byte at a time is cut off about REQUEST_TIMEOUT after its
    first byte, as the first one is."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        for _ in range(answered):
            s.sendall(REQUEST)
            assert _answer(s).startswith(b"HTTP/1.1 200"), "a whole request is answered"
        held = _trickle(s)
    assert REQUEST_TIMEOUT * 0.8 <= held < CUT_WITHIN, (answered, held)


def test_a_kept_alive_connection_waits_for_its_next_request_past_the_head_deadline(
        port: int) -> None:
    """The check above is not the idle deadline: between two requests the
    connection waits longer than the request timeout, and its next request
    is answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(REQUEST)
        assert _answer(s).startswith(b"HTTP/1.1 200")
        time.sleep(REQUEST_TIMEOUT * 1.5)
        s.sendall(REQUEST)
        assert _answer(s).startswith(b"HTTP/1.1 200")


def test_a_pipe_that_trickles_is_refused_at_the_pipe_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer that sends a byte every 50 ms and never ends: the read waits
    for data many times, each time briefly; the deadline is the whole read's.
    (A baseline file may come through a pipe; a config file may not.)"""
    monkeypatch.setattr(safefile, "PIPE_TIMEOUT_S", 0.5)
    read_end, write_end = os.pipe()
    stop = threading.Event()

    def trickle() -> None:
        while not stop.is_set():
            try:
                os.write(write_end, b"#")
            except OSError:
                return
            time.sleep(0.05)

    outcome: list[BaseException | bytes] = []

    def read() -> None:
        try:
            outcome.append(safefile.read_bytes(Path(f"/dev/fd/{read_end}"),
                                               safefile.BASELINE_FILE))
        except safefile.FileRefused as exc:
            outcome.append(exc)

    writer = threading.Thread(target=trickle, daemon=True)
    reader = threading.Thread(target=read, daemon=True)
    writer.start()
    started = time.monotonic()
    reader.start()
    # Far below the writer's forever, far above the deadline.
    reader.join(timeout=3.0)
    took = time.monotonic() - started
    stop.set()
    writer.join()
    os.close(write_end)  # a read still going now ends at the end of the file
    reader.join()
    os.close(read_end)
    assert took < 3.0, "the read waited for the trickle past its deadline"
    assert took >= 0.4, took
    (refused,) = outcome
    assert isinstance(refused, safefile.FileRefused) and "within 0.5 s" in str(refused)
