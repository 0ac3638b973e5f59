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
    Promotion,
    RendezvousProtocolError,
    Reply,
    Request,
    client_proof,
    decode_body,
    encode_frame,
    failover_key,
    frame_length,
    new_nonce,
    owner_of,
    promotion_key,
    proof_matches,
    refuse,
    reply_error,
    reply_ok,
    server_proof,
    standby_left_key,
    standby_slot_of,
    welcome,
)

logger = logging.getLogger("afd_plugin")

HANDSHAKE_TIMEOUT_S = 10.0
HOLDER_GONE_S = 2.0
"""How long a failover waits for a dead holder's rendezvous connection to
close (a killed process's sockets close together, within milliseconds)."""
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


@dataclass(eq=False)
class Member:
    """One admitted connection: a rank of the world, or a standby FFN server
    (``slot``), which holds no rank (``rank`` None) until it is promoted."""

    join: Join
    connected: bool = True
    rank: int | None = None
    slot: int | None = None
    conn: socket.socket | None = None

    def describe(self) -> str:
        if self.slot is not None:
            held = "" if self.rank is None else f", now global rank {self.rank}"
            return f"standby {self.slot} (pid {self.join.pid}{held})"
        return self.join.describe()


class RendezvousServer:
    """The store of one AFD world, hosted by global rank 0."""

    def __init__(
        self,
        host: str,
        port: int,
        world_size: int,
        secret: bytes | None,
        address: str,
        standby_places: int = 0,
        ffn_ranks: range = range(0),
    ) -> None:
        self.world_size = world_size
        self.address = address
        self._secret = secret
        self._data: dict[str, bytes] = {}
        self._members: dict[int, Member] = {}
        self.standby_places = standby_places
        self._ffn_ranks = ffn_ranks
        self._standbys: dict[int, Member] = {}
        self._promotions: dict[int, Promotion] = {}
        """Dead FFN global rank -> the standby promoted to it last."""
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
        if standby_places:
            afd_metrics.count_standby_lost(0.0)
        self._thread = threading.Thread(
            target=self._accept_loop, name="afd-rendezvous", daemon=True
        )
        self._thread.start()

    # membership

    def admit(self, join: Join) -> tuple[str, bool] | None:
        """``(why not, whether to retry)`` for a ``join`` that may not enter
        this world; None once it is admitted."""
        outcome = self.enter(join)
        return outcome if isinstance(outcome, tuple) else None

    def enter(self, join: Join) -> Member | tuple[str, bool]:
        """The admitted member, or ``(why not, whether to retry)``."""
        with self._cond:
            if join.world_size != self.world_size:
                return (
                    f"the AFD world at {self.address} has {self.world_size} ranks, "
                    f"{join.describe()} expects {join.world_size} (same "
                    "num_attention_ranks and num_ffn_ranks on both roles?)"
                ), False
            if join.standby:
                return self._enter_standby(join)
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
            member = Member(join, rank=join.rank)
            self._members[join.rank] = member
            if len(self._members) == self.world_size:
                self._formed = True
            self._cond.notify_all()
            return member

    def _enter_standby(self, join: Join) -> Member | tuple[str, bool]:
        """A standby FFN server takes a free standby place (caller locks)."""
        if not self.standby_places:
            return (
                f"the AFD world at {self.address} has no standby places "
                f"(num_ffn_standby is 0 on its host); {join.describe()} is not "
                "part of this deployment"
            ), False
        used = {
            slot: m
            for slot, m in self._standbys.items()
            if m.connected or m.rank is not None
        }
        if len(used) >= self.standby_places:
            holders = ", ".join(m.describe() for _, m in sorted(used.items()))
            return (
                f"all {self.standby_places} standby places of the AFD world at "
                f"{self.address} are taken ({holders}); {join.describe()} is one "
                "too many (num_ffn_standby)"
            ), False
        slot = next(i for i in range(self.standby_places) if i not in used)
        member = Member(join, slot=slot)
        self._standbys[slot] = member
        self._data.pop(standby_left_key(slot), None)
        self._data.pop(promotion_key(slot), None)
        logger.info(
            "afd-plugin: AFD rendezvous %s: %s waits as standby %d (%d of %d "
            "standby places taken)",
            self.address,
            join.describe(),
            slot,
            len(used) + 1,
            self.standby_places,
        )
        self._cond.notify_all()
        return member

    def _describe_members(self) -> str:
        return ", ".join(m.describe() for _, m in sorted(self._members.items()))

    def _left(self, member: Member) -> None:
        with self._cond:
            member.connected = False
            waiting = member.slot is not None and member.rank is None
            if waiting and member.slot is not None:
                self._standby_left(member, member.slot)
            self._cond.notify_all()

    def _standby_left(self, member: Member, slot: int) -> None:
        """A waiting standby's connection closed (caller locks): in order (it
        said so) or lost; a lost one is reported, never silently dropped."""
        left = sum(1 for m in self._standbys.values() if m.connected and m.rank is None)
        if self._closed:
            return
        if standby_left_key(slot) in self._data:
            logger.info(
                "afd-plugin: AFD rendezvous %s: standby %d (pid %d) shut down; "
                "%d standby(s) still waiting",
                self.address,
                slot,
                member.join.pid,
                left,
            )
            return
        afd_metrics.count_standby_lost()
        logger.warning(
            "afd-plugin: AFD rendezvous %s: standby %d (pid %d) was lost while "
            "waiting (its connection closed without a shutdown: killed or "
            "crashed); %d standby(s) still waiting",
            self.address,
            slot,
            member.join.pid,
            left,
        )

    # failover

    def failover(
        self, who: Member, dead: int, seen: int, silent: bool = False
    ) -> dict[str, Any]:
        """Promote a waiting standby in place of FFN global rank ``dead``,
        whose incarnation ``seen`` the asking attention rank talked to; an
        attention rank that asks after another one already did gets the same
        promotion (caller locks). A standby never takes a rank that is alive:
        when the asker saw the connection close, the holder's rendezvous
        connection must close too (a dead process's do at once); only a
        holder reported ``silent`` (no answer within ``peer_timeout_s``) is
        replaced while connected, and is fenced off: its connection closes."""
        if who.join.role != "attention" or who.rank is None:
            return reply_error(f"{who.describe()} may not ask for a failover")
        if dead not in self._ffn_ranks:
            return reply_error(f"global rank {dead} is not an FFN rank of this world")
        current = self._promotions.get(dead)
        if current is not None and current.incarnation > seen:
            return reply_ok(current.encode())
        holder = self._members.get(dead)
        if holder is not None and holder.connected and not silent:
            deadline = time.monotonic() + HOLDER_GONE_S
            while holder.connected and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            if holder.connected:
                return reply_error(
                    f"{holder.describe()} is alive at the AFD rendezvous "
                    f"{self.address}: a standby cannot take a rank that is alive "
                    f"({who.describe()} lost its data path to it, the rank did "
                    "not leave the rendezvous)"
                )
            current = self._promotions.get(dead)  # another asker, meanwhile
            if current is not None and current.incarnation > seen:
                return reply_ok(current.encode())
            holder = self._members.get(dead)
        waiting = [
            m
            for _, m in sorted(self._standbys.items())
            if m.connected and m.rank is None
        ]
        if not waiting:
            taken = sum(1 for m in self._standbys.values() if m.rank is not None)
            return reply_error(
                f"no standby FFN server is waiting ({self.standby_places} standby "
                f"place(s), {taken} promoted already, "
                f"{len(self._standbys) - taken} lost or never joined)"
            )
        standby = waiting[0]
        assert standby.slot is not None
        standby.rank = dead
        self._members[dead] = standby
        promotion = Promotion(dead, seen + 1, standby.slot, standby.join.pid)
        self._promotions[dead] = promotion
        self._data[promotion_key(standby.slot)] = promotion.encode()
        self._cond.notify_all()
        if holder is not None and holder.connected and holder.conn is not None:
            holder.connected = False
            with contextlib.suppress(OSError):
                holder.conn.shutdown(socket.SHUT_RDWR)
        logger.info(
            "afd-plugin: AFD rendezvous %s: standby %d (pid %d) takes FFN global "
            "rank %d (incarnation %d) in place of %s, asked by %s",
            self.address,
            standby.slot,
            standby.join.pid,
            dead,
            promotion.incarnation,
            holder.describe() if holder is not None else "nobody",
            who.describe(),
        )
        return reply_ok(promotion.encode())

    # the store

    def handle(self, who: Member, request: Request) -> dict[str, Any]:
        """Serve one store request of an admitted member."""
        op, keys = request.op, request.keys
        rank = who.rank
        with self._cond:
            if op == "failover":
                dead, _, silent = keys[0].removeprefix("ffn/").partition("/")
                if (
                    not dead.isdecimal()
                    or len(dead) > 6
                    or silent not in ("", "silent")
                ):
                    return reply_error(
                        f"a failover names ffn/<global rank>[/silent], got {keys[0]!r}"
                    )
                return self.failover(who, int(dead), request.amount, bool(silent))
            if op == "set":
                owner = owner_of(keys[0])
                if owner is not None and (rank is None or owner != rank):
                    return reply_error(f"{who.describe()} may not write {keys[0]!r}")
                slot = standby_slot_of(keys[0])
                if slot is not None and slot != who.slot:
                    return reply_error(f"{who.describe()} may not write {keys[0]!r}")
                if keys[0].startswith("promote/"):
                    return reply_error(f"only the host promotes ({keys[0]!r})")
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
        member: Member | None = None
        try:
            member = self._handshake(conn)
            if member is None:
                return
            conn.settimeout(None)
            while True:
                try:
                    request = Request.decode(read_message(conn))
                except RendezvousProtocolError as exc:
                    write_message(conn, reply_error(f"malformed request: {exc}"))
                    return
                write_message(conn, self.handle(member, request))
        except (OSError, RendezvousClosed, RendezvousProtocolError):
            return
        finally:
            if member is not None:
                self._left(member)
            with self._cond:
                self._connections.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def _handshake(self, conn: socket.socket) -> Member | None:
        """The member this connection joined as, or None when refused."""
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
        outcome = self.enter(join)
        if isinstance(outcome, tuple):
            reason, retry = outcome
            if not retry:
                afd_metrics.count_refusal("admission")
                logger.warning("afd-plugin: AFD rendezvous refused a join: %s", reason)
            write_message(conn, refuse(reason, retry))
            return None
        proof = (
            server_proof(self._secret, challenge, join.nonce) if self._secret else ""
        )
        outcome.conn = conn
        write_message(conn, welcome(proof, outcome.slot))
        return outcome

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

    def failover(self, dead: int, seen: int, silent: bool = False) -> Promotion:
        """Ask the host to promote a standby in place of FFN global rank
        ``dead`` (incarnation ``seen`` is the one this rank talked to;
        ``silent``: it stopped answering); ``RuntimeError`` naming why when
        none can take it."""
        key = failover_key(dead, silent)
        reply = self._checked(Request("failover", (key,), amount=seen))
        return Promotion.decode(reply.value)


class HostStore(RendezvousStore):
    """Rank 0's store: its own server, called in process."""

    def __init__(
        self, server: RendezvousServer, join: Join, timeout: timedelta
    ) -> None:
        super().__init__(timeout)
        self.server = server
        outcome = server.enter(join)
        if isinstance(outcome, tuple):  # a fresh server admits its host
            raise AFDPeerError(outcome[0])
        self._member = outcome

    def _call(self, request: Request) -> Reply:
        return Reply.decode(self.server.handle(self._member, request))

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
        self.slot: int | None = None
        """A standby's place, as the host gave it at the join."""
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
        self.slot = answer.slot
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
