# SPDX-License-Identifier: Apache-2.0
"""The AFD rendezvous over real sockets: it listens on the configured address
only, lets in only peers that prove the deployment's secret, admits each rank
once, and a stranger (silent, oversized, unauthenticated) learns nothing and
changes nothing.
"""

from __future__ import annotations

import socket
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psutil
import pytest

from afd_e2e.launch.plan import free_port
from afd_plugin import metrics, metrics_file
from afd_plugin.connectors import rendezvous as rdzv
from afd_plugin.connectors.base import AFDPeerError
from afd_plugin.rendezvous_protocol import (
    MAX_FRAME_BYTES,
    Hello,
    Join,
    client_proof,
    new_nonce,
)

SECRET = b"a-deployment-secret-of-32-bytes!"
TIMEOUT = timedelta(seconds=5)


def join(rank: int, pid: int, world: int = 2, role_rank: int = 0) -> Join:
    role = "ffn" if rank == 0 else "attention"
    return Join(rank, world, pid, role, role_rank, new_nonce(), "")


class World:
    """A rendezvous server with its host (rank 0) admitted."""

    def __init__(self, secret: bytes | None, world: int = 2) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.server = rdzv.RendezvousServer(
            "127.0.0.1", self.port, world, secret, self.address
        )
        self.host = rdzv.HostStore(self.server, join(0, 1000, world), TIMEOUT)

    def peer(
        self, rank: int, pid: int, secret: bytes | None, timeout: timedelta = TIMEOUT
    ) -> rdzv.PeerStore:
        return rdzv.PeerStore(
            "127.0.0.1", self.port, join(rank, pid), secret, timeout, "127.0.0.1"
        )

    def records(self) -> dict[str, bytes]:
        return dict(self.server._data)


@pytest.fixture
def world() -> Iterator[World]:
    w = World(SECRET)
    yield w
    w.host.close()


def test_it_listens_on_the_configured_address_only(world: World) -> None:
    listening = [
        c.laddr
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == world.port
    ]
    assert [tuple(a) for a in listening] == [("127.0.0.1", world.port)]


def test_a_joined_peer_uses_the_store_both_ways(world: World) -> None:
    peer = world.peer(1, 2000, SECRET)
    peer.set("peer/1", b"me")
    assert world.host.get("peer/1") == b"me"
    world.host.set("shared", "v")
    peer.wait(["shared"], timedelta(seconds=1))
    assert peer.get("shared") == b"v" and peer.check(["shared"])
    assert peer.add("n", 2) == 2 and world.host.add("n", 3) == 5
    with pytest.raises(RuntimeError, match="Timed out"):
        peer.wait(["never"], timedelta(milliseconds=200))
    peer.close()


@pytest.mark.parametrize(
    ("secret", "needle"),
    [
        (None, "requires the deployment's secret and this server has none"),
        (b"a-wrong-secret-also-32-bytes-long", "authentication failed"),
    ],
)
def test_a_peer_without_the_secret_is_refused_and_changes_nothing(
    world: World, secret: bytes | None, needle: str
) -> None:
    world.host.set("peer/0", b"host record")
    before = world.records()
    with pytest.raises(AFDPeerError, match=needle) as info:
        world.peer(1, 2000, secret)
    assert world.address in str(info.value)
    assert world.records() == before
    # The rank stays free for the real peer.
    world.peer(1, 2001, SECRET).close()


def test_a_host_without_the_secret_is_refused_by_a_peer_that_has_one() -> None:
    w = World(None)
    try:
        with pytest.raises(AFDPeerError, match="has no secret but this server has"):
            w.peer(1, 2000, SECRET)
    finally:
        w.host.close()


def test_a_raw_stranger_reads_and_writes_nothing(world: World) -> None:
    """A client that skips the proof and sends store requests at once is
    refused after its first message; none of its writes land."""
    world.host.set("peer/0", b"host record")
    before = world.records()
    with socket.create_connection(("127.0.0.1", world.port), timeout=5) as sock:
        hello = Hello.decode(rdzv.read_message(sock))
        assert hello.auth
        rdzv.write_message(sock, {"op": "get", "keys": ["peer/0"]})
        answer = rdzv.read_message(sock)
        assert (
            answer["type"] == "refuse"
            and "not an AFD rendezvous join" in (answer["reason"])
        )
        with pytest.raises((rdzv.RendezvousClosed, OSError)):
            rdzv.write_message(sock, {"op": "set", "keys": ["peer/0"], "value": ""})
            rdzv.read_message(sock)
    assert world.records() == before


def test_an_oversized_frame_is_dropped_unread(world: World) -> None:
    with socket.create_connection(("127.0.0.1", world.port), timeout=5) as sock:
        rdzv.read_message(sock)  # hello
        sock.sendall(struct.pack(">I", MAX_FRAME_BYTES + 1))
        answer = rdzv.read_message(sock)  # refused by its header alone
        assert answer["type"] == "refuse" and "exceeds" in answer["reason"]
        with pytest.raises((rdzv.RendezvousClosed, OSError)):
            rdzv.read_message(sock)
    world.peer(1, 2000, SECRET).close()  # the server still serves


def test_a_silent_stranger_is_dropped_and_blocks_nobody(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rdzv, "HANDSHAKE_TIMEOUT_S", 0.5)
    with socket.create_connection(("127.0.0.1", world.port), timeout=5) as sock:
        rdzv.read_message(sock)  # hello, then silence
        started = time.monotonic()
        peer = world.peer(1, 2000, SECRET)  # served meanwhile
        peer.close()
        with pytest.raises((rdzv.RendezvousClosed, OSError)):
            rdzv.read_message(sock)
        assert time.monotonic() - started < 5


def test_a_rank_that_is_taken_is_refused_naming_its_holder(world: World) -> None:
    three = World(SECRET, world=3)
    try:
        first = rdzv.PeerStore(
            "127.0.0.1", three.port, join(1, 2000, 3), SECRET, TIMEOUT, None
        )
        started = time.monotonic()
        with pytest.raises(AFDPeerError) as info:
            rdzv.PeerStore(
                "127.0.0.1", three.port, join(1, 2999, 3), SECRET, TIMEOUT, None
            )
        assert time.monotonic() - started < 2
        text = str(info.value)
        assert f"is already taken at the AFD rendezvous {three.address}" in text
        assert "by pid 2000" in text and "(pid 2999) is a second server" in text
        first.close()
    finally:
        three.host.close()


def test_a_formed_world_refuses_a_late_server_and_keeps_its_records(
    world: World,
) -> None:
    peer = world.peer(1, 2000, SECRET)
    peer.set("peer/1", b"the running attention rank")
    started = time.monotonic()
    with pytest.raises(AFDPeerError, match="already formed") as info:
        world.peer(1, 2999, SECRET)
    assert time.monotonic() - started < 2
    text = str(info.value)
    assert "attention rank 0 (pid 2000)" in text and "(pid 2999) arrived late" in text
    assert f"additional_config.afd.port {world.port}" in text
    assert world.host.get("peer/1") == b"the running attention rank"
    peer.close()


def test_a_rank_writes_only_its_own_records(world: World) -> None:
    peer = world.peer(1, 2000, SECRET)
    with pytest.raises(RuntimeError, match="may not write 'peer/0'"):
        peer.set("peer/0", b"forged")
    with pytest.raises(RuntimeError, match="may not write 'left/0'"):
        peer.set("left/0", b"1")
    peer.set("left/1", b"1")
    peer.close()


def test_a_peer_waits_for_a_host_that_starts_late() -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    box: dict[str, object] = {}

    def connect() -> None:
        try:
            box["store"] = rdzv.PeerStore(
                "127.0.0.1", port, join(1, 2000), SECRET, TIMEOUT, None
            )
        except BaseException as exc:  # reported below
            box["error"] = exc

    thread = threading.Thread(target=connect)
    thread.start()
    time.sleep(1.0)  # nothing listens yet
    server = rdzv.RendezvousServer("127.0.0.1", port, 2, SECRET, address)
    host = rdzv.HostStore(server, join(0, 1000), TIMEOUT)
    thread.join(10)
    assert "error" not in box, box
    box["store"].close()  # type: ignore[union-attr]
    host.close()


def test_nobody_arriving_is_bounded_by_the_timeout() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(rdzv.RendezvousClosed, match="could not connect"):
        rdzv.PeerStore(
            "127.0.0.1", port, join(1, 2000), None, timedelta(seconds=1), None
        )
    assert time.monotonic() - started < 3


def test_a_proof_replayed_on_a_new_connection_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proof binds the server's fresh challenge: one recorded on another
    connection does not open this one; the host counts the refusal."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    monkeypatch.delenv(metrics_file.ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(metrics, "_backend", None)
    world = World(SECRET)
    with socket.create_connection(("127.0.0.1", world.port), timeout=5) as first:
        old = Hello.decode(rdzv.read_message(first))
    message = join(1, 2000)
    stolen = client_proof(SECRET, old.challenge, message.nonce)
    with socket.create_connection(("127.0.0.1", world.port), timeout=5) as sock:
        rdzv.read_message(sock)
        rdzv.write_message(sock, {**message.encode(), "proof": stolen})
        answer = rdzv.read_message(sock)
    assert answer["type"] == "refuse" and "authentication failed" in answer["reason"]
    counters = metrics.backend()
    assert isinstance(counters, metrics_file.CounterFile)
    counters.flush()
    refusals = {
        metrics_file.key("afd:rendezvous_refusals", {"reason": reason}): 0.0
        for reason in ("auth", "protocol", "admission")
    }
    refusals[metrics_file.key("afd:rendezvous_refusals", {"reason": "auth"})] = 1.0
    assert metrics_file.read_directory(metrics_file.claim_directory()) == refusals
    counters.close()
    world.host.close()


WAITER = """
import signal, sys
from afd_plugin.connectors.base import ExchangeSpec, LayerExchange
from afd_plugin.connectors.gloo_world import GlooWorld
from afd_plugin.topology import WorldLayout

def stop(signum, frame):  # as vLLM's servers do: SIGTERM raises in the main thread
    raise SystemExit(143)

signal.signal(signal.SIGTERM, stop)
role, port = sys.argv[1], int(sys.argv[2])
world = GlooWorld(WorldLayout(1, 1), role, 0, "127.0.0.1", port, 300.0, 5.0)
spec = ExchangeSpec(8, "float32", "float32", (LayerExchange(0),))
print("waiting", flush=True)
world.join(spec)
"""


@pytest.mark.parametrize("role", ["ffn", "attention"])
def test_a_rank_waiting_at_the_rendezvous_ends_on_sigterm(role: str) -> None:
    """The rendezvous waits in Python (a condition on the host, a socket on a
    peer), so SIGTERM ends a rank whose peer never comes: no SIGKILL needed."""
    import signal
    import subprocess
    import sys

    port = free_port()
    host = None
    if role == "attention":  # a host that admits it but never publishes itself
        server = rdzv.RendezvousServer("127.0.0.1", port, 2, None, f"x:{port}")
        host = rdzv.HostStore(server, join(0, 1000), TIMEOUT)
    waiter = subprocess.Popen(
        [sys.executable, "-c", WAITER, role, str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert waiter.stdout is not None and waiter.stdout.readline() == "waiting\n"
        time.sleep(1.0)  # inside the rendezvous wait now
        waiter.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert waiter.wait(timeout=10) == 143
        assert time.monotonic() - started < 5
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
        if host is not None:
            host.close()
