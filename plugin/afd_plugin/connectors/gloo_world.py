# SPDX-License-Identifier: Apache-2.0
"""One AFD world over gloo: the authenticated rendezvous, peer identities,
bounded point-to-point operations whose failures name the peer.

Shared by every point-to-point connector: the CPU data path and the control
plane (the metadata group) of the CUDA one. Its own store and process group,
built without ``torch.distributed.init_process_group``: it never touches
torch.distributed's default group, which vLLM owns.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import torch
from torch.distributed import PrefixStore, ProcessGroupGloo

from afd_plugin.connectors.base import AFDPeerError, ExchangeSpec
from afd_plugin.connectors.rendezvous import (
    HostStore,
    PeerStore,
    RendezvousClosed,
    RendezvousServer,
    RendezvousStore,
)
from afd_plugin.rendezvous_protocol import (
    Join,
    PeerRecord,
    Promotion,
    RendezvousProtocolError,
    exposure_warning,
    is_loopback,
    load_secret,
    new_nonce,
    promotion_key,
    standby_key,
    standby_left_key,
)
from afd_plugin.topology import WorldLayout

if TYPE_CHECKING:
    from afd_plugin.config import AFDConfig

logger = logging.getLogger("afd_plugin")

IDLE_TIMEOUT = timedelta(days=365)
"""How long the FFN side waits for the next step: idle is not a failure; a
dead peer is still noticed at once because its TCP connection closes."""

_LEAVE_TIMEOUT = timedelta(seconds=2)
_PROMOTION_POLL = timedelta(seconds=1)
"""A waiting standby's poll: it frees the store for an orderly shutdown."""
_STORE_TIMEOUT = timedelta(seconds=10)


@dataclass(frozen=True)
class PeerInfo:
    """Who a global rank of the AFD world is, as published at rendezvous."""

    role: str
    rank: int
    host: str
    pid: int
    machine: str = ""
    """Which machine (boot) the process runs on: equal for two processes that
    can share memory."""

    def describe(self, rendezvous: str) -> str:
        return (
            f"{self.role} rank {self.rank} (pid {self.pid} on {self.host}, "
            f"AFD rendezvous {rendezvous})"
        )


def machine_id() -> str:
    """This machine's identity for this boot, as far as shared memory goes:
    host name, kernel boot id and network namespace. The shared-memory path
    meets its peer on an abstract Unix socket, which exists only inside one
    network namespace (two containers, or two ``ip netns`` nodes, on one
    kernel cannot reach each other's)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            boot = fh.read().strip()
    except OSError:
        boot = "unknown-boot"
    try:
        netns = os.readlink("/proc/self/ns/net")
    except OSError:
        netns = "unknown-netns"
    return f"{socket.gethostname()}/{boot}/{netns}"


def local_address(host: str, port: int) -> str:
    """The address of the interface this process reaches the rendezvous host
    through (loopback for a loopback host)."""
    if is_loopback(host):
        return "127.0.0.1" if ":" not in host else "::1"
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostname()


class GlooWorld:
    """The global ranks ``[ffn 0..F-1, attention 0..A-1]`` joined over gloo."""

    def __init__(
        self,
        layout: WorldLayout,
        role: str,
        rank: int,
        host: str,
        port: int,
        rendezvous_timeout_s: float,
        peer_timeout_s: float,
        *,
        secret: bytes | None = None,
        bind_host: str | None = None,
        standby_places: int = 0,
        standby: bool = False,
    ) -> None:
        self.layout = layout
        self.role = role
        self.rank = rank
        self.global_rank = layout.global_rank(role, rank)
        self.standby_places = standby_places
        self.standby = standby
        """A standby FFN server: it holds no rank until it is promoted."""
        self.slot: int | None = None
        """A standby's place at the rendezvous."""
        self.host_global_rank = (
            layout.global_rank("attention", 0) if standby_places else 0
        )
        """Who hosts the rendezvous: global rank 0 (the first FFN rank), or,
        with standby FFN servers, the first attention rank, so that the
        rendezvous outlives any FFN rank."""
        self.address = f"{host}:{port}"
        self._host = host
        self._port = port
        self._rendezvous_timeout = timedelta(seconds=rendezvous_timeout_s)
        self.peer_timeout = timedelta(seconds=peer_timeout_s)
        self._secret = secret
        self.bind_host = bind_host or (
            host if self.hosts_rendezvous else local_address(host, port)
        )
        """Where this rank's sockets bind: its gloo pairs, and the rendezvous
        itself on its host (``host``)."""
        self.peers: dict[int, PeerInfo] = {}
        self._store: RendezvousStore | None = None
        self._pg: ProcessGroupGloo | None = None
        self._routes: dict[int, tuple[ProcessGroupGloo, int]] = {}
        """Peers reached through a group of their own (a promoted standby
        and its attention ranks): global rank -> (group, rank in it)."""
        self._joined = False
        self._left = False
        self._failed = False
        """An exchange failed: closing is then not an orderly leave."""

    @classmethod
    def of(cls, config: AFDConfig, layout: WorldLayout, rank: int) -> GlooWorld:
        """This rank's world as the AFD config describes it (rendezvous address,
        timeouts from the connector's extra config, secret, bind address)."""
        return cls(
            layout,
            config.role,
            rank,
            config.host,
            config.port,
            config.extra.rendezvous_timeout_s,
            config.extra.peer_timeout_s,
            secret=load_secret(config.secret_env, config.secret_file),
            bind_host=config.bind_host,
            standby_places=config.num_ffn_standby,
            standby=config.standby,
        )

    @property
    def hosts_rendezvous(self) -> bool:
        return not self.standby and self.global_rank == self.host_global_rank

    # -- rendezvous ---------------------------------------------------------

    def me(self) -> str:
        if self.standby and self.slot is not None:
            return f"AFD FFN standby {self.slot}" + (
                f" (FFN rank {self.rank})" if self._joined else ""
            )
        if self.standby:
            return "AFD FFN standby"
        return f"AFD {self.role} rank {self.rank}"

    @property
    def host_rank(self) -> str:
        """Who hosts the rendezvous store."""
        role, rank = self.layout.role_of(self.host_global_rank)
        return f"{role} rank {rank}"

    def describe(self, global_rank: int) -> str:
        info = self.peers.get(global_rank)
        if info is None:
            role, rank = self.layout.role_of(global_rank)
            return f"{role} rank {rank} (AFD rendezvous {self.address})"
        return info.describe(self.address)

    def join(self, spec: ExchangeSpec) -> None:
        """Meet every rank of the world, check they agree on ``spec``, connect."""
        started = time.monotonic()
        self._store = self._open_store()
        try:
            problems = self._exchange_identities(spec, started)
        except AFDPeerError:
            raise
        except RuntimeError as exc:
            raise AFDPeerError(
                f"{self.me()}: the AFD rendezvous at {self.address} (hosted by "
                f"{self.host_rank}) went away: {exc}"
            ) from exc
        if problems:
            raise AFDPeerError(
                f"{self.me()}: the attention and FFN servers do not run the same "
                "model split (same --model, dtype, --enable-dbo and "
                "additional_config.afd.compute_gate_on_attention on both roles): "
                + "; ".join(problems)
            )
        try:
            options = ProcessGroupGloo._Options()
            options._timeout = self._rendezvous_timeout
            # The pairs listen on this rank's own address, not every interface.
            options._devices = [ProcessGroupGloo.create_device(hostname=self.bind_host)]
            self._pg = ProcessGroupGloo(
                PrefixStore("gloo", self._store),
                self.global_rank,
                self.layout.world_size,
                options,
            )
        except RuntimeError as exc:
            raise AFDPeerError(
                f"{self.me()}: could not connect the gloo group of the AFD world at "
                f"{self.address}: {exc}"
            ) from exc
        self._joined = True
        # After rendezvous the store only answers "did this peer leave?".
        self._store.set_timeout(min(self.peer_timeout, _STORE_TIMEOUT))
        logger.info(
            "afd-plugin: %s joined the AFD world at %s in %.1fs (%d ranks)",
            self.me(),
            self.address,
            time.monotonic() - started,
            self.layout.world_size,
        )

    def _exchange_identities(self, spec: ExchangeSpec, started: float) -> list[str]:
        """Publish who this rank is and what it exchanges, read every peer's
        record, and report any disagreement on the spec."""
        assert self._store is not None
        mine = PeerRecord(
            self.role,
            self.rank,
            self.bind_host,
            os.getpid(),
            machine_id(),
            spec.to_dict(),
        )
        self._store.set(f"peer/{self.global_rank}", mine.encode())
        ranks = range(self.layout.world_size)
        self._wait_for([f"peer/{g}" for g in ranks], started)
        problems = [p for g in ranks for p in self._read_peer(g, spec)]
        # The store lives in its host: it stays up until everyone has read.
        self._store.set(f"read/{self.global_rank}", "1")
        if self.hosts_rendezvous:
            with contextlib.suppress(RuntimeError):
                self._store.wait([f"read/{g}" for g in ranks], _STORE_TIMEOUT)
        return problems

    def _read_peer(self, g: int, spec: ExchangeSpec) -> list[str]:
        """Read global rank ``g``'s record into :attr:`peers`; how it
        disagrees with ``spec`` (empty when it agrees)."""
        assert self._store is not None
        try:
            record = PeerRecord.decode(self._store.get(f"peer/{g}"))
        except RendezvousProtocolError as exc:
            raise AFDPeerError(
                f"{self.me()}: the AFD rendezvous record of global rank {g} at "
                f"{self.address} is malformed: {exc}"
            ) from None
        self.peers[g] = PeerInfo(
            record.role, record.rank, record.host, record.pid, record.machine
        )
        theirs = ExchangeSpec.from_dict(record.spec)
        return [
            f"{self.describe(g)} disagrees on {diff}"
            for diff in spec.differences(theirs)
        ]

    def _join_message(self) -> Join:
        return Join(
            rank=0 if self.standby else self.global_rank,
            world_size=self.layout.world_size,
            pid=os.getpid(),
            role=self.role,
            role_rank=0 if self.standby else self.rank,
            nonce=new_nonce(),
            proof="",
            standby=self.standby,
        )

    def _open_store(self) -> RendezvousStore:
        if self.hosts_rendezvous:
            warning = exposure_warning(self._host, self._port, self._secret is not None)
            if warning is not None:
                logger.warning("afd-plugin: %s", warning)
            try:
                server = RendezvousServer(
                    self._host,
                    self._port,
                    self.layout.world_size,
                    self._secret,
                    self.address,
                    standby_places=self.standby_places,
                    ffn_ranks=range(
                        self.layout.global_rank("ffn", 0),
                        self.layout.global_rank("ffn", 0) + self.layout.num_ffn,
                    ),
                )
            except OSError as exc:
                raise AFDPeerError(
                    f"{self.me()} could not listen for the AFD rendezvous on "
                    f"{self.address} (additional_config.afd.host/port): {exc}"
                ) from exc
            return HostStore(server, self._join_message(), self._rendezvous_timeout)
        try:
            return PeerStore(
                self._host,
                self._port,
                self._join_message(),
                self._secret,
                self._rendezvous_timeout,
                source=self.bind_host,
            )
        except AFDPeerError as exc:
            raise AFDPeerError(f"{self.me()}: {exc}") from None
        except (RendezvousClosed, RendezvousProtocolError, OSError) as exc:
            raise AFDPeerError(
                f"{self.me()} could not reach the AFD rendezvous at {self.address} "
                f"within {self._rendezvous_timeout.total_seconds():.0f}s "
                f"(rendezvous_timeout_s): is {self.host_rank} running and listening "
                f"there? {exc}"
            ) from exc

    def _wait_for(self, keys: list[str], started: float) -> None:
        assert self._store is not None
        left = self._rendezvous_timeout - timedelta(seconds=time.monotonic() - started)
        try:
            self._store.wait(keys, max(left, timedelta(seconds=1)))
        except RuntimeError as exc:
            missing = [
                self.describe(g) for g, key in enumerate(keys) if not self._check(key)
            ]
            raise AFDPeerError(
                f"{self.me()}: these peers never arrived at the AFD rendezvous "
                f"{self.address} within "
                f"{self._rendezvous_timeout.total_seconds():.0f}s "
                f"(rendezvous_timeout_s): {', '.join(missing) or '?'}"
            ) from exc

    def _check(self, key: str) -> bool:
        try:
            return bool(self._store is not None and self._store.check([key]))
        except RuntimeError:
            return False

    # -- standbys and failover -----------------------------------------------

    def join_as_standby(self, spec: ExchangeSpec) -> None:
        """A standby FFN server: take a standby place at the rendezvous and
        publish who it is; it holds no rank and no group until promoted."""
        started = time.monotonic()
        store = self._open_store()
        self._store = store
        self.slot = getattr(store, "slot", None)
        if self.slot is None:
            raise AFDPeerError(
                f"{self.me()}: the AFD rendezvous at {self.address} gave this "
                "standby no standby place"
            )
        record = PeerRecord(
            "ffn", self.slot, self.bind_host, os.getpid(), machine_id(), spec.to_dict()
        )
        try:
            store.set(standby_key(self.slot), record.encode())
        except RuntimeError as exc:
            raise AFDPeerError(
                f"{self.me()}: could not publish its record at the AFD rendezvous "
                f"{self.address}: {exc}"
            ) from exc
        logger.info(
            "afd-plugin: %s waits at the AFD rendezvous %s (standby place %d of %d; "
            "joined in %.1fs)",
            self.me(),
            self.address,
            self.slot,
            self.standby_places,
            time.monotonic() - started,
        )

    def await_promotion(self, stopping: Callable[[], bool]) -> Promotion | None:
        """Wait until the host promotes this standby; None when ``stopping``
        or when the host is gone (the deployment ended: nothing to stand by
        for). Polls, so an orderly shutdown can still use the store."""
        assert self.slot is not None
        key = promotion_key(self.slot)
        while not stopping():
            store = self._store
            if store is None:
                return None
            try:
                store.wait([key], _PROMOTION_POLL)
                return Promotion.decode(store.get(key))
            except RuntimeError as exc:
                if "Timed out" in str(exc):
                    continue
                if stopping():
                    return None
                logger.info(
                    "afd-plugin: %s: the AFD rendezvous host (%s) is gone, so "
                    "there is nothing to stand by for: %s",
                    self.me(),
                    self.host_rank,
                    exc,
                )
                return None
        return None

    def adopt(self, promotion: Promotion, spec: ExchangeSpec) -> None:
        """Take the rank the host promoted this standby to: read every other
        rank's record and check that they run this model split."""
        role, rank = self.layout.role_of(promotion.rank)
        self.rank, self.global_rank = rank, promotion.rank
        problems: list[str] = []
        for g in range(self.layout.world_size):
            if g == self.global_rank:
                continue  # the dead holder's record: this standby replaces it
            try:
                problems += self._read_peer(g, spec)
            except AFDPeerError:
                raise
            except RuntimeError as exc:
                raise AFDPeerError(
                    f"{self.me()}: cannot read the record of global rank {g} at the "
                    f"AFD rendezvous {self.address}: {exc}"
                ) from exc
        self.peers[self.global_rank] = PeerInfo(
            role, rank, self.bind_host, os.getpid(), machine_id()
        )
        if problems:
            raise AFDPeerError(
                f"{self.me()}: this standby does not run the attention servers' "
                "model split: " + "; ".join(problems)
            )
        self._joined = True

    def fail_over(
        self, dead: int, seen: int, spec: ExchangeSpec, silent: bool = False
    ) -> Promotion:
        """Attention side: have the host promote a standby in place of FFN
        global rank ``dead`` (incarnation ``seen``; ``silent``: it stopped
        answering, rather than its connection closing); record who it is."""
        store = self.store
        try:
            promotion = store.failover(dead, seen, silent)
            record = PeerRecord.decode(store.get(standby_key(promotion.slot)))
        except (RuntimeError, RendezvousProtocolError) as exc:
            raise AFDPeerError(str(exc).removeprefix("AFD rendezvous: ")) from exc
        diffs = spec.differences(ExchangeSpec.from_dict(record.spec))
        if diffs:
            raise AFDPeerError(
                f"standby {promotion.slot} (pid {promotion.pid}) does not run this "
                "model split: " + "; ".join(diffs)
            )
        _, rank = self.layout.role_of(dead)
        self.peers[dead] = PeerInfo(
            "ffn", rank, record.host, record.pid, record.machine
        )
        self._routes.pop(dead, None)
        self._failed = False  # handled: a later close is an orderly leave again
        return promotion

    def open_group(self, members: tuple[int, ...], generation: int) -> None:
        """Connect ``members`` (global ranks, this one among them) in a gloo
        group of their own, and reach each of them through it: a promoted
        standby and its attention ranks (the world's group is fixed)."""
        options = ProcessGroupGloo._Options()
        options._timeout = self._rendezvous_timeout
        options._devices = [ProcessGroupGloo.create_device(hostname=self.bind_host)]
        store = self.store
        store.set_timeout(self._rendezvous_timeout)
        try:
            pg = ProcessGroupGloo(
                PrefixStore(f"failover/{members[0]}/{generation}", store),
                members.index(self.global_rank),
                len(members),
                options,
            )
        except RuntimeError as exc:
            others = [self.describe(g) for g in members if g != self.global_rank]
            raise AFDPeerError(
                f"{self.me()}: could not connect the gloo group of "
                f"{', '.join(others)} after a failover: {exc}"
            ) from exc
        finally:
            store.set_timeout(min(self.peer_timeout, _STORE_TIMEOUT))
        for index, g in enumerate(members):
            if g != self.global_rank:
                self._routes[g] = (pg, index)

    # -- point to point -----------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._joined

    def send(self, tensor: torch.Tensor, dst: int, tag: int, what: str) -> None:
        pg, peer = self._route(dst, what)
        try:
            pg.send([tensor], peer, tag).wait(self.peer_timeout)
        except RuntimeError as exc:
            raise self._peer_error(dst, f"sending {what}", exc) from exc

    def recv(
        self,
        tensor: torch.Tensor,
        src: int,
        tag: int,
        what: str,
        idle: bool = False,
    ) -> None:
        """Fill ``tensor`` from ``src``; ``idle``: wait without the peer timeout
        (the FFN side waiting for the next step of an idle server)."""
        pg, peer = self._route(src, what)
        timeout = IDLE_TIMEOUT if idle else self.peer_timeout
        try:
            pg.recv([tensor], peer, tag).wait(timeout)
        except RuntimeError as exc:
            raise self._peer_error(src, f"receiving {what}", exc) from exc

    def _route(self, peer: int, what: str) -> tuple[ProcessGroupGloo, int]:
        """The group ``peer`` is reached through, and its rank there."""
        route = self._routes.get(peer)
        if route is not None:
            return route
        if self._pg is None:
            raise RuntimeError(
                f"{self.me()}: {what} with global rank {peer}: no group reaches it "
                "(before init_afd_connector(), or after close())"
            )
        return self._pg, peer

    def _peer_error(self, peer: int, doing: str, exc: Exception) -> AFDPeerError:
        text = str(exc)
        timed_out = "Timed out" in text or "timeout" in text.lower()
        detail = text.splitlines()[0] if text else type(exc).__name__
        return self.peer_error(peer, doing, timed_out=timed_out, via=f"gloo: {detail}")

    def peer_error(
        self, peer: int, doing: str, *, timed_out: bool, via: str
    ) -> AFDPeerError:
        """The error of a failed exchange with ``peer``, for every data path:
        who, doing what, and why (silent, closing, or gone)."""
        self._failed = True
        if timed_out:
            why = (
                f"no answer within {self.peer_timeout.total_seconds():.0f}s "
                "(peer_timeout_s)"
            )
        elif self.peer_left(peer):
            why = "the peer closed its AFD connector (it is shutting down)"
        else:
            why = "the connection to the peer is lost (it crashed or was killed)"
        return AFDPeerError(
            f"{self.me()} failed {doing} with {self.describe(peer)}: {why}. {via}",
            timed_out=timed_out,
        )

    # -- leaving ------------------------------------------------------------

    def peer_left(self, global_rank: int) -> bool:
        """Whether ``global_rank`` announced an orderly close."""
        return self._check(f"left/{global_rank}")

    @property
    def store(self) -> RendezvousStore:
        """The rendezvous store (hosted by global rank 0), for data-path set-up."""
        if self._store is None:
            raise RuntimeError(f"{self.me()}: the AFD world is not joined")
        return self._store

    def announce_leave(self) -> None:
        """Tell the peers this rank leaves in order (best effort, once), so a
        peer that loses the connection next reads it as a shutdown."""
        store = self._store
        if store is None or self._left or self._failed:
            return  # a rank that failed an exchange does not leave in order
        if not self._joined and not (self.standby and self.slot is not None):
            return
        self._left = True
        try:
            store.set_timeout(_LEAVE_TIMEOUT)
            if self._joined:
                store.set(f"left/{self.global_rank}", "1")
            else:  # a standby that was never promoted
                assert self.slot is not None
                store.set(standby_left_key(self.slot), "1")
        except RuntimeError:
            logger.debug("afd-plugin: %s could not announce its leave", self.me())

    def close(self) -> None:
        """Announce an orderly leave, then drop groups and store."""
        self.announce_leave()
        store, self._store = self._store, None
        pg, self._pg = self._pg, None
        del pg
        self._routes.clear()
        self._joined = False
        if store is not None:
            store.close()
