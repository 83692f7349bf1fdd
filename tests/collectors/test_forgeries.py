"""The uevent reader (collectors/udev.py) against each way a local process
can forge a PCI event, and against the kernel's own event.

The reader's socket listens to the kernel's uevent group; any process may
send a datagram to its port, a process with CAP_NET_ADMIN may send to the
group as well, and any may put a netlink header claiming port 0 in front of
its message. The kernel stamps every datagram with the port of the socket
that sent it (recvfrom's address, msg_name): 0 only for the kernel. Each
forgery below is checked to have reached the reader (a witness on the
socket records what recvfrom returned) and to have been ignored: a forged
"remove" would mark a GPU lost. The kernel's own event, made by writing
"change" to the loopback interface's uevent file (it sends the event
again and changes nothing), is accepted.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.collectors import udev
from gpu_exporter.collectors.udev import KERNEL_GROUP, NETLINK_KOBJECT_UEVENT, KernelUevents

# A PCI "remove" as lib/kobject_uevent.c sends it, for a GPU's slot.
REMOVE = (b"remove@/devices/pci0000:15/0000:15:01.0/0000:18:00.0\0ACTION=remove\0"
          b"DEVPATH=/devices/pci0000:15/0000:15:01.0/0000:18:00.0\0SUBSYSTEM=pci\0"
          b"PCI_SLOT_NAME=0000:18:00.0\0SEQNUM=4711\0")
LOOPBACK_UEVENT = Path("/sys/devices/virtual/net/lo/uevent")


class Witness:
    """The reader's socket, recording what each recvfrom returned."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.seen: list[tuple[bytes, Any]] = []

    def fileno(self) -> int:
        return self._sock.fileno()

    def recvfrom(self, size: int, flags: int = 0) -> tuple[bytes, Any]:
        got = self._sock.recvfrom(size, flags)
        self.seen.append(got)
        return got

    def close(self) -> None:
        self._sock.close()


@pytest.fixture
def reader() -> Iterator[tuple[KernelUevents, Witness]]:
    try:
        source = KernelUevents()
    except OSError as exc:
        pytest.skip(f"no netlink uevent socket here: {exc}")
    witness = Witness(source._sock)  # type: ignore[arg-type]
    source._sock = witness  # type: ignore[assignment]
    yield source, witness
    source.close()


def _answers_to(source: KernelUevents, witness: Witness, payload: bytes,
                send: Callable[[], object]) -> tuple[list[object], list[tuple[bytes, Any]]]:
    """What the reader answered for each datagram until ``payload`` reached
    it (other datagrams, the kernel's, may come in between)."""
    send()
    answers: list[object] = []
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and not any(m == payload for m, _ in witness.seen):
        answers.append(source.poll(0.5))
    mine = [(m, addr) for m, addr in witness.seen if m == payload]
    assert mine, "the forgery never reached the reader: the test would prove nothing"
    return answers, mine


def _port(source: KernelUevents) -> int:
    return int(source._sock._sock.getsockname()[0])  # type: ignore[union-attr]


def _nlmsghdr(payload: bytes, pid: int) -> bytes:
    """struct nlmsghdr (len, type, flags, seq, pid) before ``payload``."""
    return struct.pack("=IHHII", 16 + len(payload), 0, 0, 1, pid) + payload


FORGED = {
    "plain": REMOVE,
    # A header claiming the kernel's port 0: the reader must not read the
    # sender from the message, only from the socket's address.
    "header says port 0": _nlmsghdr(REMOVE, 0),
}


@pytest.mark.parametrize("kind", FORGED)
def test_a_unicast_from_a_local_process_is_ignored(
        reader: tuple[KernelUevents, Witness], kind: str) -> None:
    source, witness = reader
    payload = FORGED[kind]
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT) as forger:
        forger.bind((0, 0))
        answers, mine = _answers_to(source, witness, payload,
                                    lambda: forger.sendto(payload, (_port(source), 0)))
        assert {addr[0] for _, addr in mine} == {forger.getsockname()[0]} != {0}
    assert answers[-1] is None


@pytest.mark.parametrize("kind", FORGED)
def test_a_multicast_to_the_kernels_group_with_cap_net_admin_is_ignored(
        reader: tuple[KernelUevents, Witness], kind: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("sending to the kernel's group needs CAP_NET_ADMIN (root)")
    source, witness = reader
    payload = FORGED[kind]
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT) as forger:
        forger.bind((0, 0))
        answers, mine = _answers_to(source, witness, payload,
                                    lambda: forger.sendto(payload, (0, KERNEL_GROUP)))
        assert {addr for _, addr in mine} == {(forger.getsockname()[0], KERNEL_GROUP)}
    assert answers[-1] is None


_SEND_WITHOUT_CAPS = """
import socket, sys
s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)
s.bind((0, 0))
try:
    s.sendto(bytes.fromhex(sys.argv[1]), (0, 1))
except PermissionError:
    print("refused")
else:
    print("sent")
"""


def test_a_multicast_without_cap_net_admin_is_refused_or_ignored(
        reader: tuple[KernelUevents, Witness]) -> None:
    """Without CAP_NET_ADMIN the kernel refuses a send to its group; should
    it ever let one through, the reader still ignores it."""
    source, witness = reader
    setpriv = "/usr/bin/setpriv"
    if not Path(setpriv).exists():
        pytest.skip("setpriv is not installed")
    run = subprocess.run([setpriv, "--bounding-set=-all", "--inh-caps=-all", "--",
                          sys.executable, "-c", _SEND_WITHOUT_CAPS, REMOVE.hex()],
                         capture_output=True, text=True, timeout=30, check=False)
    assert run.returncode == 0, run.stderr
    if run.stdout.strip() == "refused":
        # Nothing of the forgery reaches the reader.
        for _ in range(3):
            assert source.poll(0.3) is None
        assert all(m != REMOVE for m, _ in witness.seen)
    else:
        assert run.stdout.strip() == "sent"
        answers: list[object] = []
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and not any(m == REMOVE for m, _ in witness.seen):
            answers.append(source.poll(0.5))
        assert answers and answers[-1] is None


def test_the_kernels_own_event_is_read(reader: tuple[KernelUevents, Witness],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: writing "change" to a device's uevent file makes the
    kernel send that device's event again (nothing about the device changes);
    the loopback interface is a virtual device every network namespace has.
    The reader hands it to the parser (which keeps only PCI events)."""
    source, witness = reader
    try:
        LOOPBACK_UEVENT.write_text("change")
    except OSError as exc:
        pytest.skip(f"cannot make the kernel send an event here: {exc}")
    parsed: list[bytes] = []

    def parse(message: bytes) -> tuple[str, str] | None:
        parsed.append(message)
        return ("change", "lo") if message.startswith(b"change@/devices/virtual/net/lo\0") \
            else None

    monkeypatch.setattr(udev, "parse_uevent", parse)
    deadline = time.monotonic() + 5.0
    answers: list[object] = []
    while time.monotonic() < deadline and ("change", "lo") not in answers:
        answers.append(source.poll(0.5))
    assert ("change", "lo") in answers
    kernel = [addr for m, addr in witness.seen if m.startswith(b"change@/devices/virtual/net/lo")]
    assert kernel and all(addr[0] == 0 for addr in kernel)
