# SPDX-License-Identifier: Apache-2.0
"""The shared-memory data path of the CPU connector, for roles on one machine:
per peer pair two ``shm_ring`` rings (one each way) and a doorbell socket.

Set up after the gloo world is joined (the world stays for rendezvous and the
control plane): each FFN rank listens on an abstract Unix socket per attention
rank it serves, publishes its name in the rendezvous store, and hands the
connecting attention rank both rings' memory as file descriptors. Failures
name the peer like the gloo path does.
"""

from __future__ import annotations

import logging
import os
import platform
import secrets
import socket
import time
from datetime import timedelta

import torch

from afd_plugin.connectors.base import AFDPeerError
from afd_plugin.connectors.cpu.schema import P2pGlooExtraConfig
from afd_plugin.connectors.cpu.shm_ring import (
    Doorbell,
    Ring,
    RingClosed,
    RingTimeout,
    create_memfd,
)
from afd_plugin.connectors.gloo_world import GlooWorld
from afd_plugin.connectors.p2p_base import DataTransport

logger = logging.getLogger("afd_plugin")

_HELLO = b"afd-shm v1"
SUPPORTED_MACHINES = ("x86_64", "AMD64")


def shm_refusal(world: GlooWorld, peers: tuple[int, ...]) -> str | None:
    """Why the shared-memory path cannot be used with ``peers`` (the ranks the
    choice must agree over, never only the ones this rank exchanges with: see
    ``P2pAFDConnectorBase.exchange_group``); None when it can."""
    if platform.machine() not in SUPPORTED_MACHINES:
        return (
            f"it relies on x86-64 store ordering and this CPU is {platform.machine()}"
        )
    if not hasattr(os, "memfd_create") or not hasattr(socket, "send_fds"):
        return "it needs Linux memfd_create and Unix-socket descriptor passing"
    me = world.peers.get(world.global_rank)
    elsewhere = [
        world.describe(p)
        for p in peers
        if me is None
        or world.peers.get(p) is None
        or world.peers[p].machine != me.machine
    ]
    if elsewhere:
        return f"these peers run on another machine: {', '.join(elsewhere)}"
    return None


def choose_shm(
    extra: P2pGlooExtraConfig, world: GlooWorld, peers: tuple[int, ...]
) -> bool:
    """``transport``: ``gloo`` never, ``shm`` always (or a clear error), ``auto``
    when every rank of ``peers`` is on this machine. Both ends decide from the
    same rendezvous records over the same set of ranks, so they agree."""
    if extra.transport == "gloo":
        return False
    why = shm_refusal(world, peers)
    if why is None:
        return True
    if extra.transport == "shm":
        raise AFDPeerError(
            f"{world.me()}: additional_config.afd.connector_extra_config.transport "
            f"is 'shm' but shared memory cannot be used: {why}; use 'auto' or "
            "'gloo'"
        )
    return False


class _Channel:
    """What this rank holds for one peer: its doorbell and both rings."""

    def __init__(self, doorbell: Doorbell, outbound: Ring, inbound: Ring) -> None:
        self.doorbell, self.outbound, self.inbound = doorbell, outbound, inbound

    def close(self) -> None:
        self.outbound.close()
        self.inbound.close()
        self.doorbell.close()


class ShmTransport(DataTransport):
    """CPU tensors through shared-memory rings, one pair per peer; matched by
    order (each direction carries one sequence). Buffered: a send returns once
    its bytes are in the ring, so the FFN side may serve micro-batches as they
    arrive."""

    buffered = True
    carries_control = True

    def __init__(
        self,
        world: GlooWorld,
        peers: tuple[int, ...],
        extra: P2pGlooExtraConfig,
        is_ffn: bool,
        generation: int = 0,
    ) -> None:
        self.world = world
        self.generation = generation
        """The FFN rank's incarnation: a promoted standby's rings are new."""
        self.device = torch.device("cpu")
        self.channels: dict[int, _Channel] = {}
        self._spin_s = extra.shm_spin_us * 1e-6
        self._timeout_s = extra.peer_timeout_s
        deadline = time.monotonic() + extra.rendezvous_timeout_s
        try:
            for peer in peers:
                if is_ffn:
                    self.channels[peer] = self._serve(peer, extra, deadline)
                else:
                    self.channels[peer] = self._connect(peer, deadline)
        except BaseException:
            self.close()
            raise
        logger.info(
            "afd-plugin: %s: shared-memory data path with %d peer(s), %d-byte rings",
            world.me(),
            len(peers),
            extra.shm_ring_bytes,
        )

    # -- set-up -------------------------------------------------------------

    def _key(self, ffn: int, attention: int) -> str:
        """Where an FFN rank publishes its socket for one attention rank (both
        global ranks: an attention rank may reach several FFN ranks), per
        incarnation of the FFN rank."""
        tail = f"/{self.generation}" if self.generation else ""
        return f"shm/{ffn}/{attention}{tail}"

    def _ring(self, fd: int, capacity: int, doorbell: Doorbell) -> Ring:
        try:
            return Ring(
                fd, capacity, doorbell, spin_s=self._spin_s, timeout_s=self._timeout_s
            )
        finally:
            os.close(fd)

    def _serve(self, peer: int, extra: P2pGlooExtraConfig, deadline: float) -> _Channel:
        """FFN side: listen, publish, hand over both rings' memory."""
        name = f"\0afd-shm-{os.getpid()}-{peer}-{secrets.token_hex(4)}"
        capacity = extra.shm_ring_bytes
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(name)
            listener.listen(1)
            listener.settimeout(max(1.0, deadline - time.monotonic()))
            self.world.store.set(
                self._key(self.world.global_rank, peer), name.encode("latin-1")
            )
            try:
                conn, _ = listener.accept()
            except TimeoutError as exc:
                raise AFDPeerError(
                    f"{self.world.me()}: {self.world.describe(peer)} never connected "
                    "to the shared-memory data path (rendezvous_timeout_s)"
                ) from exc
        inbound_fd = create_memfd(f"afd-shm-from-{peer}", capacity)
        outbound_fd = create_memfd(f"afd-shm-to-{peer}", capacity)
        try:
            conn.settimeout(None)
            hello = _HELLO + b" " + str(capacity).encode()
            socket.send_fds(conn, [hello], [inbound_fd, outbound_fd])
        except BaseException:
            conn.close()
            os.close(inbound_fd)
            os.close(outbound_fd)
            raise
        doorbell = Doorbell(conn)
        return _Channel(
            doorbell,
            self._ring(outbound_fd, capacity, doorbell),
            self._ring(inbound_fd, capacity, doorbell),
        )

    def _connect(self, peer: int, deadline: float) -> _Channel:
        """Attention side: find the FFN rank's socket, take both rings."""
        store = self.world.store
        left = timedelta(seconds=max(1.0, deadline - time.monotonic()))
        key = self._key(peer, self.world.global_rank)
        store.wait([key], left)
        name = store.get(key).decode("latin-1")
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(name)
            message, fds, _, _ = socket.recv_fds(conn, 256, 2)
        except BaseException:
            conn.close()
            raise
        if not message.startswith(_HELLO) or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            conn.close()
            raise AFDPeerError(
                f"{self.world.me()}: {self.world.describe(peer)} answered the "
                f"shared-memory set-up with {message!r}"
            )
        capacity = int(message.split()[-1])
        to_ffn_fd, from_ffn_fd = fds  # the FFN's inbound is our outbound
        doorbell = Doorbell(conn)
        return _Channel(
            doorbell,
            self._ring(to_ffn_fd, capacity, doorbell),
            self._ring(from_ffn_fd, capacity, doorbell),
        )

    # -- data ---------------------------------------------------------------

    def _failure(self, peer: int, doing: str, exc: Exception) -> AFDPeerError:
        return self.world.peer_error(
            peer, doing, timed_out=isinstance(exc, RingTimeout), via=f"shm: {exc}"
        )

    def _channel(self, peer: int) -> _Channel:
        channel = self.channels.get(peer)
        if channel is None:
            raise RuntimeError(
                f"{self.world.me()}: no shared-memory channel to global rank {peer}"
            )
        return channel

    def send(self, tensor: torch.Tensor, dst: int, tag: int, what: str) -> None:
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        size = tensor.numel() * tensor.element_size()
        try:
            self._channel(dst).outbound.write(tensor.data_ptr(), size)
        except (RingClosed, RingTimeout) as exc:
            raise self._failure(dst, f"sending {what}", exc) from exc

    def recv(
        self, tensor: torch.Tensor, src: int, tag: int, what: str, idle: bool = False
    ) -> None:
        assert tensor.is_contiguous(), "receive buffers are fresh and contiguous"
        size = tensor.numel() * tensor.element_size()
        try:
            self._channel(src).inbound.read(tensor.data_ptr(), size, idle)
        except (RingClosed, RingTimeout) as exc:
            raise self._failure(src, f"receiving {what}", exc) from exc

    def close(self) -> None:
        channels, self.channels = self.channels, {}
        for channel in channels.values():
            channel.close()
