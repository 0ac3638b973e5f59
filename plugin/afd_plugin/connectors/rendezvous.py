# SPDX-License-Identifier: Apache-2.0
"""The AFD rendezvous: a key-value store served by global rank 0 on the one
address the config names, that lets in only its own deployment.

``RendezvousServer`` listens on ``host:port`` (never on every interface),
asks each connection for the join handshake of ``rendezvous_protocol`` (a
proof of the shared secret when the deployment has one), admits each global
rank once, and refuses a second server for a rank that is taken or a world
that is already formed, naming the holder; a refused or unauthenticated peer
reads and writes nothing. ``RendezvousStore`` is the ``torch.distributed``
store a rank hands to gloo: remote over that connection, or in process on
rank 0.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from afd_plugin import metrics as afd_metrics
from afd_plugin.connectors.base import AFDPeerError
from afd_plugin.metrics_catalog import REFUSAL_REASONS
from afd_plugin.rendezvous_protocol import (
    HEADER_BYTES,
    Answer,
    Hello,
    Join,
    RendezvousProtocolError,
    Reply,
    Request,
    client_proof,
    decode_body,
    encode_frame,
    frame_length,
    new_nonce,
    owner_of,
    proof_matches,
    refuse,
    reply_error,
    reply_ok,
    server_proof,
    welcome,
)

logger = logging.getLogger("afd_plugin")

HANDSHAKE_TIMEOUT_S = 10.0
"""How long a connection may take to join; a silent stranger is dropped."""
_CONNECT_RETRY_S = 0.2


class RendezvousClosed(RuntimeError):
    """The rendezvous connection is gone (the host stopped or crashed)."""


# -- sockets ---------------------------------------------------------------


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = sock.recv(size - got)
        if not chunk:
            raise RendezvousClosed("the connection closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_message(sock: socket.socket) -> dict[str, Any]:
    length = frame_length(_recv_exact(sock, HEADER_BYTES))
    return decode_body(_recv_exact(sock, length))


def write_message(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(encode_frame(message))


# -- the server --------------------------------------------------------------


@dataclass
class Member:
    join: Join
    connected: bool = True


class RendezvousServer:
    """The store of one AFD world, hosted by global rank 0."""

    def __init__(
        self,
        host: str,
        port: int,
        world_size: int,
        secret: bytes | None,
        address: str,
    ) -> None:
        self.world_size = world_size
        self.address = address
        self._secret = secret
        self._data: dict[str, bytes] = {}
        self._members: dict[int, Member] = {}
        self._formed = False
        self._cond = threading.Condition()
        self._closed = False
        self._connections: set[socket.socket] = set()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            # Lets a restarted host reuse the port past TIME_WAIT; another
            # listener on it still fails the bind.
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, port))
            self._listener.listen(64)
        except OSError:
            self._listener.close()
            raise
        for reason in REFUSAL_REASONS:  # every series from 0
            afd_metrics.count_refusal(reason, 0.0)
        self._thread = threading.Thread(
            target=self._accept_loop, name="afd-rendezvous", daemon=True
        )
        self._thread.start()

    # membership

    def admit(self, join: Join) -> tuple[str, bool] | None:
        """``(why not, whether to retry)`` for a ``join`` that may not enter
        this world; None once it is admitted."""
        with self._cond:
            if join.world_size != self.world_size:
                return (
                    f"the AFD world at {self.address} has {self.world_size} ranks, "
                    f"{join.describe()} expects {join.world_size} (same "
                    "num_attention_ranks and num_ffn_ranks on both roles?)"
                ), False
            if join.rank >= self.world_size:
                return (
                    f"global rank {join.rank} is outside the AFD world at "
                    f"{self.address}"
                ), False
            holder = self._members.get(join.rank)
            rejoin = holder is not None and (
                not holder.connected or holder.join.pid == join.pid
            )
            if rejoin and (self._formed or holder.join.pid == join.pid):
                # This rank's previous connection left (or, from the same
                # process re-initialising, is about to be seen closed): the
                # world is ending and its host starts a new one soon.
                return (
                    f"the AFD world at {self.address} is ending ("
                    f"{holder.join.describe()} left it)"
                ), True
            if self._formed:
                return (
                    f"the AFD world at {self.address} is already formed "
                    f"({self._describe_members()}); {join.describe()} arrived "
                    "late: is another deployment using additional_config.afd.port "
                    f"{self.address.rsplit(':', 1)[-1]}?"
                ), False
            if holder is not None and holder.connected:
                return (
                    f"{holder.join.role} rank {holder.join.role_rank} is already "
                    f"taken at the AFD rendezvous {self.address} by pid "
                    f"{holder.join.pid}; {join.describe()} is a second server for it"
                ), False
            self._members[join.rank] = Member(join)
            if len(self._members) == self.world_size:
                self._formed = True
            self._cond.notify_all()
            return None

    def _describe_members(self) -> str:
        return ", ".join(m.join.describe() for _, m in sorted(self._members.items()))

    def _left(self, rank: int) -> None:
        with self._cond:
            member = self._members.get(rank)
            if member is not None:
                member.connected = False
            self._cond.notify_all()

    # the store

    def handle(self, rank: int, request: Request) -> dict[str, Any]:
        """Serve one store request of an admitted ``rank``."""
        op, keys = request.op, request.keys
        with self._cond:
            if op == "set":
                owner = owner_of(keys[0])
                if owner is not None and owner != rank:
                    return reply_error(f"global rank {rank} may not write {keys[0]!r}")
                self._data[keys[0]] = request.value
                self._cond.notify_all()
                return reply_ok()
            if op == "check":
                return reply_ok(number=int(all(k in self._data for k in keys)))
            if op == "delete":
                return reply_ok(number=int(self._data.pop(keys[0], None) is not None))
            if op == "add":
                value = int(self._data.get(keys[0], b"0") or b"0") + request.amount
                self._data[keys[0]] = str(value).encode()
                self._cond.notify_all()
                return reply_ok(number=value)
            deadline = time.monotonic() + request.timeout_ms / 1000
            while not all(k in self._data for k in keys) and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [k for k in keys if k not in self._data]
                    return reply_error(
                        f"Timed out after {request.timeout_ms} ms waiting for "
                        f"{missing[:8]}",
                        timed_out=True,
                    )
                self._cond.wait(left)
            if self._closed:
                return reply_error("the rendezvous host is closing")
            value = self._data[keys[0]] if op == "get" else b""
            return reply_ok(value)

    # connections

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(
                target=self._serve,
                args=(conn,),
                name="afd-rendezvous-peer",
                daemon=True,
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        with self._cond:
            if self._closed:
                conn.close()
                return
            self._connections.add(conn)
        rank: int | None = None
        try:
            join = self._handshake(conn)
            if join is None:
                return
            rank = join.rank
            conn.settimeout(None)
            while True:
                try:
                    request = Request.decode(read_message(conn))
                except RendezvousProtocolError as exc:
                    write_message(conn, reply_error(f"malformed request: {exc}"))
                    return
                write_message(conn, self.handle(rank, request))
        except (OSError, RendezvousClosed, RendezvousProtocolError):
            return
        finally:
            if rank is not None:
                self._left(rank)
            with self._cond:
                self._connections.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def _handshake(self, conn: socket.socket) -> Join | None:
        """The join of this connection, or None when it was refused."""
        conn.settimeout(HANDSHAKE_TIMEOUT_S)
        challenge = new_nonce()
        write_message(conn, Hello(challenge, self._secret is not None).encode())
        try:
            join = Join.decode(read_message(conn))
        except RendezvousProtocolError as exc:
            afd_metrics.count_refusal("protocol")
            write_message(conn, refuse(f"not an AFD rendezvous join: {exc}"))
            return None
        if self._secret is not None and not proof_matches(
            client_proof(self._secret, challenge, join.nonce), join.proof
        ):
            afd_metrics.count_refusal("auth")
            logger.warning(
                "afd-plugin: the AFD rendezvous at %s refused a peer without the "
                "deployment's secret (claiming %s)",
                self.address,
                join.describe(),
            )
            write_message(
                conn,
                refuse(
                    f"authentication failed at the AFD rendezvous {self.address}: "
                    "the peer does not hold this deployment's secret "
                    "(additional_config.afd.secret_env / secret_file)"
                ),
            )
            return None
        refusal = self.admit(join)
        if refusal is not None:
            reason, retry = refusal
            if not retry:
                afd_metrics.count_refusal("admission")
                logger.warning("afd-plugin: AFD rendezvous refused a join: %s", reason)
            write_message(conn, refuse(reason, retry))
            return None
        proof = (
            server_proof(self._secret, challenge, join.nonce) if self._secret else ""
        )
        write_message(conn, welcome(proof))
        return join

    def close(self) -> None:
        with self._cond:
            self._closed = True
            connections = list(self._connections)
            self._cond.notify_all()
        # shutdown() wakes the accept() blocked in the server thread; a bare
        # close() would leave the port listening until a connection arrived.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._listener.close()
        self._thread.join(timeout=5)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()


# -- the store a rank uses --------------------------------------------------------


def _ms(timeout: timedelta) -> int:
    return max(0, int(timeout.total_seconds() * 1000))


class RendezvousStore(dist.Store):
    """A ``torch.distributed`` store over the AFD rendezvous: what gloo and
    the data paths set up through. Rank 0 calls its server in process; the
    others hold one joined connection. Failures are ``RuntimeError`` (as
    torch's own stores raise), timeouts say ``Timed out``."""

    def __init__(self, timeout: timedelta) -> None:
        super().__init__()
        self._timeout = timeout
        self._lock = threading.Lock()

    # what a subclass provides
    def _call(self, request: Request) -> Reply:
        raise NotImplementedError

    def close(self) -> None:
        """Drop the connection (rank 0: stop serving)."""

    # dist.Store

    @property
    def timeout(self) -> timedelta:
        return self._timeout

    def set_timeout(self, timeout: timedelta) -> None:
        self._timeout = timeout

    def _checked(self, request: Request) -> Reply:
        reply = self._call(request)
        if not reply.ok:
            raise RuntimeError(f"AFD rendezvous: {reply.error}")
        return reply

    def set(self, key: str, value: str | bytes) -> None:
        data = value.encode() if isinstance(value, str) else bytes(value)
        self._checked(Request("set", (key,), data))

    def get(self, key: str) -> bytes:
        return self._checked(
            Request("get", (key,), timeout_ms=_ms(self._timeout))
        ).value

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        ms = _ms(self._timeout if timeout is None else timeout)
        self._checked(Request("wait", tuple(keys), timeout_ms=ms))

    def check(self, keys: list[str]) -> bool:
        return bool(self._checked(Request("check", tuple(keys))).number)

    def add(self, key: str, amount: int) -> int:
        return self._checked(Request("add", (key,), amount=amount)).number

    def delete_key(self, key: str) -> bool:
        return bool(self._checked(Request("delete", (key,))).number)


class HostStore(RendezvousStore):
    """Rank 0's store: its own server, called in process."""

    def __init__(
        self, server: RendezvousServer, join: Join, timeout: timedelta
    ) -> None:
        super().__init__(timeout)
        self.server = server
        refusal = server.admit(join)
        if refusal is not None:  # a fresh server admits its host
            raise AFDPeerError(refusal[0])
        self._rank = join.rank

    def _call(self, request: Request) -> Reply:
        return Reply.decode(self.server.handle(self._rank, request))

    def close(self) -> None:
        self.server.close()


class PeerStore(RendezvousStore):
    """A joined connection to the rendezvous host."""

    def __init__(
        self,
        host: str,
        port: int,
        join_as: Join,
        secret: bytes | None,
        timeout: timedelta,
        source: str | None,
    ) -> None:
        super().__init__(timeout)
        self.address = f"{host}:{port}"
        deadline = time.monotonic() + timeout.total_seconds()
        while True:
            self._sock: socket.socket | None = self._connect(
                host, port, deadline, source
            )
            try:
                answer = self._join(join_as, secret, deadline)
            except (OSError, RendezvousClosed) as exc:
                # The host closed this connection unanswered (it is stopping
                # an old world and starting anew): try again until the deadline.
                answer = f"the connection closed during the join ({exc})"
            except BaseException:
                self.close()
                raise
            if answer is None:
                return
            self.close()
            if time.monotonic() >= deadline:
                raise AFDPeerError(
                    f"the AFD rendezvous refused this server until its "
                    f"rendezvous_timeout_s: {answer}"
                )
            time.sleep(_CONNECT_RETRY_S)

    def _connect(
        self, host: str, port: int, deadline: float, source: str | None
    ) -> socket.socket:
        last: OSError | None = None
        while time.monotonic() < deadline:
            left = max(0.05, deadline - time.monotonic())
            try:
                return socket.create_connection(
                    (host, port),
                    timeout=min(left, HANDSHAKE_TIMEOUT_S),
                    source_address=(source, 0) if source else None,
                )
            except OSError as exc:  # not listening yet: the host still loads
                last = exc
                time.sleep(min(_CONNECT_RETRY_S, left))
        raise RendezvousClosed(f"could not connect: {last}")

    def _join(self, join_as: Join, secret: bytes | None, deadline: float) -> str | None:
        """Join over the fresh connection; the reason to retry when the world
        this rank belonged to is still ending, else None (joined)."""
        sock = self._sock
        assert sock is not None
        sock.settimeout(
            max(0.05, min(HANDSHAKE_TIMEOUT_S, deadline - time.monotonic()))
        )
        hello = Hello.decode(read_message(sock))
        if hello.auth and secret is None:
            raise AFDPeerError(
                f"the AFD rendezvous at {self.address} requires the deployment's "
                "secret and this server has none (set additional_config.afd."
                "secret_env or secret_file, as on the host)"
            )
        if secret is not None and not hello.auth:
            raise AFDPeerError(
                f"the AFD rendezvous host at {self.address} has no secret but this "
                "server has one: refusing to exchange with a host that cannot "
                "prove it belongs to the deployment"
            )
        proof = client_proof(secret, hello.challenge, join_as.nonce) if secret else ""
        write_message(sock, {**join_as.encode(), "proof": proof})
        answer = Answer.decode(read_message(sock))
        if not answer.accepted:
            if answer.retry:
                return answer.text
            raise AFDPeerError(f"the AFD rendezvous refused this server: {answer.text}")
        if hello.auth and secret is not None:
            expected = server_proof(secret, hello.challenge, join_as.nonce)
            if not proof_matches(expected, answer.text):
                raise AFDPeerError(
                    f"the AFD rendezvous host at {self.address} does not hold the "
                    "deployment's secret: refusing to exchange with it"
                )
        sock.settimeout(None)
        return None

    def _call(self, request: Request) -> Reply:
        with self._lock:
            if self._sock is None:
                raise RuntimeError("AFD rendezvous: the store is closed")
            # A blocking wait gets its own timeout plus slack for the answer.
            slack = request.timeout_ms / 1000 + max(
                HANDSHAKE_TIMEOUT_S, self._timeout.total_seconds()
            )
            self._sock.settimeout(slack)
            try:
                write_message(self._sock, request.encode())
                return Reply.decode(read_message(self._sock))
            except (OSError, RendezvousClosed, RendezvousProtocolError) as exc:
                raise RuntimeError(
                    f"AFD rendezvous at {self.address}: the connection to the host "
                    f"is lost ({exc})"
                ) from None

    def close(self) -> None:
        sock, self._sock = getattr(self, "_sock", None), None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
