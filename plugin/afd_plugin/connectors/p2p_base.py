# SPDX-License-Identifier: Apache-2.0
"""The one point-to-point connector design every backend shares: the AFD world
(FFN ranks first, attention ranks in balanced blocks), the control plane over
that world, per-stage step state, and a data path through a ``DataTransport``.

Backends differ only in the transport: gloo (CPU), NCCL or host memory (CUDA).
"""

from __future__ import annotations

import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from afd_plugin import metrics as afd_metrics
from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import AFDConnector, AFDControlPlane, AFDPeerError
from afd_plugin.connectors.gloo_world import GlooWorld
from afd_plugin.failover_resume import ResumeRecord, resume_starts
from afd_plugin.step_protocol import merge_block_payloads, stage_rows
from afd_plugin.topology import WorldLayout, attention_block, ffn_rank_for_attention
from afd_plugin.wire import (
    AFDControlPayload,
    AFDWireError,
    check_length,
    decode_payload,
    encode_payload,
)

logger = logging.getLogger("afd_plugin")

# gloo matches messages by (peer, tag); one tag per kind keeps kinds apart.
# NCCL has no tags: both roles issue their operations in the same order.
TAG_CONTROL_LENGTH = 1
TAG_CONTROL_BYTES = 2
TAG_HIDDEN = 3
TAG_ROUTER_LOGITS = 4
TAG_FFN_OUTPUT = 5


class DataTransport(ABC):
    """Moves whole tensors between two global ranks of the AFD world."""

    device: torch.device
    buffered: bool = False
    """A send returns before the peer receives (see AFDConnector.buffered_sends)."""
    carries_control: bool = False
    """The control payloads travel here too, in order with the data (CPU
    tensors; a device transport leaves them to the gloo world)."""

    @abstractmethod
    def send(self, tensor: torch.Tensor, dst: int, tag: int, what: str) -> None: ...

    @abstractmethod
    def recv(
        self, tensor: torch.Tensor, src: int, tag: int, what: str, idle: bool = False
    ) -> None:
        """Fill ``tensor`` from ``src``; ``idle``: wait without the peer
        timeout (the FFN side waiting for the next step of an idle server)."""

    def close(self) -> None:  # noqa: B027 - most transports hold nothing
        """Release what the transport holds; idempotent."""


class GlooTransport(DataTransport):
    """CPU tensors straight over the gloo world."""

    def __init__(self, world: GlooWorld) -> None:
        self.world = world
        self.device = torch.device("cpu")

    def send(self, tensor: torch.Tensor, dst: int, tag: int, what: str) -> None:
        self.world.send(tensor, dst, tag, what)

    def recv(
        self, tensor: torch.Tensor, src: int, tag: int, what: str, idle: bool = False
    ) -> None:
        self.world.recv(tensor, src, tag, what, idle)


@dataclass
class InFlight:
    """Attention side, with standbys: what the current step sent its FFN
    rank and may have to resend to a standby that takes over."""

    payloads: list[bytes] = field(default_factory=list)
    """The step's encoded control payloads, in order."""
    inputs: dict[tuple[int, int], dict[str, torch.Tensor]] = field(default_factory=dict)
    """(layer, stage) -> the tensors sent, until the output came back
    (insertion order is send order)."""
    answered: dict[int, int] = field(default_factory=dict)
    """Stage -> the last layer whose output came back in this step."""


@dataclass(frozen=True)
class StepState:
    """What one stage of the current step moves, per peer."""

    step: int
    payload: AFDControlPayload
    peers: tuple[int, ...]
    """Global ranks this rank exchanges with, in block order."""
    counts: tuple[int, ...]
    """Rows each of ``peers`` sends (FFN) or this rank sends (attention): the
    token counts, or the padded graph size in a graph step."""


class P2pControlPlane(AFDControlPlane):
    """Length-then-bytes JSON payloads over the connector's gloo world (the
    metadata group: CPU tensors only, so nothing of it is ever captured)."""

    def __init__(self, connector: P2pAFDConnectorBase) -> None:
        self._connector = connector

    @property
    def path(self) -> GlooWorld | DataTransport:
        """Where control payloads travel: with the data when the transport
        carries them (the shared-memory rings: one wake-up less per step, in
        order with the layers), else over the gloo world."""
        c = self._connector
        world = c.world_or_raise()
        transport = c.transport
        return (
            transport if transport is not None and transport.carries_control else world
        )

    def send_dp_metadata_list(self, payload: AFDControlPayload) -> None:
        c = self._connector
        # AFD-I10: local state first, so what is sent is what this rank runs.
        c.update_state_from_dp_metadata(payload)
        data = encode_payload(payload)
        what = f"the control payload of step {c.step}, stage {payload.stage_key}"
        if c.in_flight is not None:
            c.in_flight.payloads.append(data)
        try:
            self.send_bytes(data, what)
        except AFDPeerError as exc:
            c.fail_over(exc)  # the standby gets this payload with the rest

    def send_bytes(self, data: bytes, what: str) -> None:
        """Length, then bytes, to this attention rank's FFN rank."""
        path, peer = self.path, self._connector.ffn_peer
        length = torch.tensor([len(data)], dtype=torch.int64)
        path.send(length, peer, TAG_CONTROL_LENGTH, what)
        body = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        path.send(body, peer, TAG_CONTROL_BYTES, what)

    def recv_bytes(self, peer: int, what: str, idle: bool = False) -> bytes:
        path = self.path
        length = torch.empty(1, dtype=torch.int64)
        path.recv(length, peer, TAG_CONTROL_LENGTH, what, idle=idle)
        body = torch.empty(check_length(int(length.item())), dtype=torch.uint8)
        path.recv(body, peer, TAG_CONTROL_BYTES, what)
        return body.numpy().tobytes()

    def recv_dp_metadata_list(self) -> AFDControlPayload:
        c = self._connector
        world, path = c.world_or_raise(), self.path
        if c.resume_due:
            c.receive_resume()
        payloads: list[tuple[int, AFDControlPayload]] = []
        for peer in c.attention_peers:
            what = f"a control payload after step {c.step}"
            length = torch.empty(1, dtype=torch.int64)
            path.recv(length, peer, TAG_CONTROL_LENGTH, what, idle=True)
            body = torch.empty(check_length(int(length.item())), dtype=torch.uint8)
            path.recv(body, peer, TAG_CONTROL_BYTES, what)
            payloads.append((peer, decode_payload(body.numpy().tobytes())))
        try:
            # Each attention rank announces its own rows (with micro-batches
            # it splits its own step); the block's stage is their union.
            return merge_block_payloads([p for _, p in payloads])
        except AFDWireError as exc:
            sent = "; ".join(f"{world.describe(peer)} sent {p}" for peer, p in payloads)
            raise AFDWireError(
                f"{world.me()} after step {c.step}: {exc} ({sent})"
            ) from None


class P2pAFDConnectorBase(AFDConnector):
    """One attention rank <-> its FFN rank; an FFN rank serves a block.

    Subclasses choose the data transport (``_open_transport``); everything
    else (rendezvous, control plane, step state, shapes, checks) lives here.
    """

    def __init__(self, config: AFDConfig, rank: int) -> None:
        super().__init__(config, rank)
        self.layout = WorldLayout(config.num_attention_ranks, config.num_ffn_ranks)
        self.layout.global_rank(config.role, rank)  # range check, nothing else
        self.world: GlooWorld | None = None
        self.transport: DataTransport | None = None
        self.states: dict[int, StepState] = {}
        self.state: StepState | None = None
        """The state set last (stage 0 without micro-batching)."""
        self.step = 0
        self._sent: dict[tuple[int, int], torch.Size] = {}
        self.incarnation = 0
        """Attention: the incarnation of its FFN rank (0: the one the world
        formed with, +1 per failover); FFN: its own."""
        self.in_flight: InFlight | None = None
        """Attention side with standbys only: what a standby would be resent."""
        self._failed_over_at: float | None = None
        self.resume_due = False
        """FFN, a standby just promoted: the resume records come first."""
        self._resume_next: dict[int, tuple[int, ...]] = {}
        self.starts: dict[int, tuple[int, ...]] = {}
        """FFN, the step after a promotion: per attention peer, per stage, the
        first layer it sends (``failover_resume``); empty otherwise."""
        # AFD-I2: installed at construction, owned by the connector.
        self.control_plane = P2pControlPlane(self)

    # -- topology -----------------------------------------------------------

    @property
    def is_attention(self) -> bool:
        return self.config.is_attention

    # The mapping: contiguous balanced blocks; a connector whose operators
    # need another layout overrides these two.

    def ffn_rank_of(self, attention_rank: int) -> int:
        """The FFN rank that serves ``attention_rank``."""
        return ffn_rank_for_attention(
            attention_rank, self.layout.num_attention, self.layout.num_ffn
        )

    def group_of(self, ffn_rank: int) -> range:
        """Attention ranks ``ffn_rank`` serves, in the order it serves them."""
        return attention_block(ffn_rank, self.layout.num_attention, self.layout.num_ffn)

    @property
    def ffn_peer(self) -> int:
        """Global rank of this attention rank's FFN rank."""
        return self.layout.global_rank("ffn", self.ffn_rank_of(self.rank))

    @property
    def block(self) -> range:
        """Attention ranks of this rank's control-plane block (its FFN rank's
        group): the token counts of a control payload, in this order."""
        return self.group_of(self.block_ffn_rank)

    @property
    def attention_peers(self) -> tuple[int, ...]:
        return tuple(self.layout.global_rank("attention", a) for a in self.block)

    @property
    def exchange_group(self) -> tuple[int, ...]:
        """Global ranks of this rank's block other than itself: the block's
        FFN rank and the attention ranks it serves. Every rank of a block
        sees the same block, so a choice made over it (the data path: shared
        memory only when the whole block is on one machine) agrees at both
        ends of every pair, also when only some of the block is local."""
        ffn = self.layout.global_rank("ffn", self.block_ffn_rank)
        me = self.layout.global_rank(self.config.role, self.rank)
        return tuple(g for g in (ffn, *self.attention_peers) if g != me)

    @property
    def block_ffn_rank(self) -> int:
        """The FFN rank of this rank's block (itself on the FFN side)."""
        return self.ffn_rank_of(self.rank) if self.is_attention else self.rank

    # -- lifecycle ----------------------------------------------------------

    @abstractmethod
    def _open_transport(self, world: GlooWorld) -> DataTransport:
        """Build the data path once the world is joined (collective)."""

    def init_afd_connector(self) -> None:
        if self.world is not None:
            if self.world.connected and self.transport is not None:
                return
            self.close()  # what a failed attempt left behind
        if self.spec is None:
            raise RuntimeError(
                f"{type(self).__name__}.bind(spec) must come before init"
            )
        self.world = GlooWorld.of(self.config, self.layout, self.rank)
        self.step = 0
        self.states.clear()
        self.state = None
        if self.is_attention and self.config.num_ffn_standby:
            self.in_flight = InFlight()
        if self.config.standby:
            self.world.join_as_standby(self.spec)  # a rank and a path come later
            return
        self.world.join(self.spec)
        try:
            self.transport = self._open_transport(self.world)
        except BaseException:
            self.close()  # the next attempt starts from nothing
            raise

    @property
    def buffered_sends(self) -> bool:
        return self.transport is not None and self.transport.buffered

    # -- standbys (FFN side) ------------------------------------------------

    def wait_until_active(self, stopping: Callable[[], bool]) -> bool:
        """A standby waits here until it is promoted, then takes the dead
        rank's place: its rank, its records, a data path to its attention
        ranks. False when it stops first (shutdown, or the deployment ended).
        An active rank returns at once."""
        world = self.world
        if not self.config.standby or world is None or world.connected:
            return True
        waited = time.monotonic()
        promotion = world.await_promotion(stopping)
        if promotion is None:
            return False
        started = time.monotonic()
        assert self.spec is not None
        world.adopt(promotion, self.spec)
        self.rank = world.rank
        self.incarnation = promotion.incarnation
        self.transport = self._open_transport(world)
        self.resume_due = True
        afd_metrics.count_promotion(self.rank)
        logger.warning(
            "afd-plugin: standby %d (pid %d) promoted to FFN rank %d (global rank "
            "%d, incarnation %d) after waiting %.1f s; data path to attention "
            "rank(s) %s ready in %.2f s",
            promotion.slot,
            os.getpid(),
            self.rank,
            promotion.rank,
            promotion.incarnation,
            started - waited,
            list(self.block),
            time.monotonic() - started,
        )
        return True

    @property
    def waiting_standby(self) -> bool:
        return self.config.standby and (self.world is None or not self.world.connected)

    def receive_resume(self) -> None:
        """A promoted standby's first receive: each attention rank's resume
        record (where each of its stages picks up the step)."""
        self.resume_due = False
        world = self.world_or_raise()
        stages = self.spec.stages if self.spec is not None else 1
        for peer in self.attention_peers:
            raw = self.control_plane.recv_bytes(peer, "a resume record", idle=True)
            try:
                record = ResumeRecord.decode(raw)
            except AFDWireError as exc:
                who = f"{world.me()}: {world.describe(peer)}"
                raise AFDWireError(f"{who}: {exc}") from None
            if len(record.starts) != stages:
                raise AFDWireError(
                    f"{world.me()}: {world.describe(peer)} resumes "
                    f"{len(record.starts)} stage(s), the exchange has {stages}"
                )
            self._resume_next[peer] = record.starts
            self.step = max(self.step, record.step - 1)

    def takes_part(self, layer: int, stage: int) -> bool:
        """Whether any served attention rank sends ``layer`` of ``stage`` in
        this step (only a resumed step leaves some out)."""
        if not self.starts:
            return True
        return any(starts[stage] <= layer for starts in self.starts.values())

    def _live_counts(self, state: StepState, layer: int, stage: int) -> tuple[int, ...]:
        """Rows each peer sends for ``layer``: its count, or 0 for a peer that
        resumed past it."""
        if not self.starts:
            return state.counts
        return tuple(
            count if self.starts.get(peer, (0,) * (stage + 1))[stage] <= layer else 0
            for peer, count in zip(state.peers, state.counts, strict=True)
        )

    # -- failover (attention side) ------------------------------------------

    def fail_over(self, error: AFDPeerError) -> None:
        """The exchange with this rank's FFN rank failed with ``error``: with
        standbys configured (and the FFN rank not shutting down in order),
        have one promoted in its place, connect to it and resend what is in
        flight; else, or when none is left, raise ``error`` as before."""
        world = self.world_or_raise()
        if not self.config.num_ffn_standby or not self.is_attention:
            raise error
        dead = self.ffn_peer
        if world.peer_left(dead):
            raise error  # an orderly shutdown is no failure to recover from
        started = time.monotonic()
        for _ in range(self.config.num_ffn_standby + 1):
            holder = world.peers.get(dead)
            before = f"pid {holder.pid}" if holder is not None else "pid ?"
            try:
                promotion = world.fail_over(
                    dead, self.incarnation, self.spec, silent=error.timed_out
                )
            except AFDPeerError as why:
                raise AFDPeerError(
                    f"{error} No standby took its place: {why}"
                ) from error
            promoted = time.monotonic()
            old, self.transport = self.transport, None
            if old is not None:
                old.close()
            self.incarnation = promotion.incarnation
            try:
                self.transport = self._open_transport(world)
                connected = time.monotonic()
                resent = self._resend()
            except AFDPeerError as again:
                logger.warning(
                    "afd-plugin: failover: standby %d (pid %d) failed while "
                    "taking over (%s); trying the next one",
                    promotion.slot,
                    promotion.pid,
                    again,
                )
                error = again
                continue
            done = time.monotonic()
            afd_metrics.count_failover(self.rank)
            logger.warning(
                "afd-plugin: failover: FFN rank %d (%s) -> standby %d (pid %d) in "
                "%.3f s (attention rank %d, step %d, resent %s)",
                self.ffn_rank_of(self.rank),
                before,
                promotion.slot,
                promotion.pid,
                done - started,
                self.rank,
                self.step,
                resent,
            )
            # Where it went, on the system-wide monotonic clock (comparable
            # with a client's on this machine): benchmarks/failover.py.
            logger.info(
                "afd-plugin: failover timing: noticed at monotonic %.4f s; "
                "promotion %.1f ms, new data path %.1f ms, resend %.1f ms",
                started,
                (promoted - started) * 1e3,
                (connected - promoted) * 1e3,
                (done - connected) * 1e3,
            )
            self._failed_over_at = done
            return
        raise error

    def _resend(self) -> str:
        """To a promoted standby: the resume record, then the step's control
        payloads and unanswered layer inputs in their first order."""
        assert self.spec is not None
        transport = self._transport_or_raise()
        flight = self.in_flight
        assert flight is not None
        layers = [x.layer for x in self.spec.layers]
        starts = resume_starts(
            layers, self.spec.stages, flight.inputs.keys(), flight.answered
        )
        record = ResumeRecord(self.step, starts).encode()
        control = self.control_plane
        control.send_bytes(record, f"the resume record of step {self.step}")
        for data in flight.payloads:
            control.send_bytes(data, f"a control payload of step {self.step}")
        for (layer, stage), tensors in flight.inputs.items():
            self._send_input(transport, layer, stage, tensors)
        return (
            f"{len(flight.payloads)} control payload(s), {len(flight.inputs)} layer "
            f"input(s); stages resume at layers {list(starts)}"
        )

    def _send_input(
        self,
        transport: DataTransport,
        layer: int,
        stage: int,
        tensors: dict[str, torch.Tensor],
    ) -> None:
        where = self._where(layer, stage)
        hidden = tensors["hidden"]
        transport.send(hidden, self.ffn_peer, TAG_HIDDEN, f"hidden ({where})")
        logits = tensors.get("router_logits")
        if logits is not None:
            transport.send(
                logits, self.ffn_peer, TAG_ROUTER_LOGITS, f"router logits ({where})"
            )

    def world_or_raise(self) -> GlooWorld:
        if self.world is None or not self.world.connected:
            raise RuntimeError(
                f"AFD {self.config.role} rank {self.rank}: the connector is not "
                "initialised (init_afd_connector() not called, or closed)"
            )
        return self.world

    def _transport_or_raise(self) -> DataTransport:
        self.world_or_raise()
        if self.transport is None:
            raise RuntimeError(
                f"AFD {self.config.role} rank {self.rank}: no data path yet"
            )
        return self.transport

    def close(self) -> None:
        transport, self.transport = self.transport, None
        world, self.world = self.world, None
        self.states.clear()
        self.state = None
        self._sent.clear()
        if world is not None:
            world.announce_leave()  # before the data path closes under the peer
        if transport is not None:
            transport.close()
        if world is not None:
            world.close()

    # -- step state ---------------------------------------------------------

    def update_state_from_dp_metadata(self, payload: AFDControlPayload) -> None:
        block = self.block
        if len(payload.token_counts) != len(block):
            raise AFDWireError(
                f"control payload lists {len(payload.token_counts)} token counts "
                f"but this block has {len(block)} attention ranks ({list(block)})"
            )
        stages = self.spec.stages if self.spec is not None else 1
        if not 0 <= payload.stage_key < stages:
            raise AFDWireError(
                f"control payload stage {payload.stage_key} outside the "
                f"{stages} micro-batch stage(s) agreed at rendezvous"
            )
        if payload.stage_key == 0:
            self.step += 1
            self.states.clear()
            if self.in_flight is not None:
                self.in_flight = InFlight()
            if not self.is_attention:
                # A promoted standby's first step resumes; every later one is whole.
                self.starts, self._resume_next = self._resume_next, {}
        rows = stage_rows(payload)
        if self.is_attention:
            own = rows[block.index(self.rank)]
            state = StepState(self.step, payload, (self.ffn_peer,), (own,))
        else:
            state = StepState(self.step, payload, self.attention_peers, rows)
        self.states[payload.stage_key] = state
        self.state = state

    def _where(self, layer: int, stage: int) -> str:
        return f"step {self.step}, layer {layer}, stage {stage}"

    def _state_or_raise(self, stage: int) -> StepState:
        state = self.states.get(stage)
        if state is None:
            raise RuntimeError(
                f"no step state for stage {stage}: update_state_from_dp_metadata() "
                "must run first"
            )
        return state

    def _dtype(self, name: str) -> torch.dtype:
        return getattr(torch, name)

    def _me(self) -> str:
        return f"AFD {self.config.role} rank {self.rank}"

    # -- attention side -----------------------------------------------------

    def send_attn_output(
        self, hidden: torch.Tensor, layer: int, stage: int, **extras: torch.Tensor
    ) -> None:
        state, transport = self._state_or_raise(stage), self._transport_or_raise()
        assert self.spec is not None
        if hidden.shape[0] != state.counts[0]:
            raise AFDWireError(
                f"{self._me()}: layer {layer} stage {stage} sends {hidden.shape[0]} "
                f"tokens but the control payload of step {state.step} announced "
                f"{state.counts[0]}"
            )
        self._sent[(layer, stage)] = hidden.shape
        if hidden.shape[0] == 0:
            return
        tensors = {"hidden": hidden.contiguous()}
        if self.spec.layer(layer).router_logits:
            logits = extras.get("router_logits")
            if logits is None:
                raise AFDWireError(f"layer {layer} must send router logits")
            tensors["router_logits"] = logits.contiguous()
        if self.in_flight is not None:
            # Kept (not copied: nothing writes it before its output is back)
            # for a standby that may have to take over mid-layer.
            self.in_flight.inputs[(layer, stage)] = tensors
        try:
            self._send_input(transport, layer, stage, tensors)
        except AFDPeerError as exc:
            self.fail_over(exc)  # the standby gets this input with the rest

    def recv_ffn_output(self, layer: int, stage: int) -> torch.Tensor:
        transport = self._transport_or_raise()
        assert self.spec is not None
        shape = self._sent.pop((layer, stage))
        out = torch.empty(
            shape, dtype=self._dtype(self.spec.dtype), device=transport.device
        )
        if shape[0]:
            what = f"the FFN output ({self._where(layer, stage)})"
            while True:
                try:
                    transport.recv(out, self.ffn_peer, TAG_FFN_OUTPUT, what)
                    break
                except AFDPeerError as exc:
                    self.fail_over(exc)
                    transport = self._transport_or_raise()
        if self.in_flight is not None:
            self._answered(self.in_flight, layer, stage, bool(shape[0]))
        return out

    def _answered(
        self, flight: InFlight, layer: int, stage: int, received: bool
    ) -> None:
        """``layer`` of ``stage`` came back (``received``: with rows): nothing
        of it is resent again."""
        flight.inputs.pop((layer, stage), None)
        flight.answered[stage] = layer
        if received and self._failed_over_at is not None:
            logger.info(
                "afd-plugin: failover timing: the standby's first answer "
                "(layer %d, stage %d) %.1f ms after the resend",
                layer,
                stage,
                (time.monotonic() - self._failed_over_at) * 1e3,
            )
            self._failed_over_at = None

    # -- FFN side -----------------------------------------------------------

    def recv_attn_output(
        self, layer: int, stage: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        state, transport = self._state_or_raise(stage), self._transport_or_raise()
        assert self.spec is not None
        width = self.spec.layer(layer).router_logits
        where = self._where(layer, stage)
        device = transport.device
        hiddens, logits = [], []
        counts = self._live_counts(state, layer, stage)
        for peer, count in zip(state.peers, counts, strict=True):
            h = torch.empty(
                count,
                self.spec.hidden_size,
                dtype=self._dtype(self.spec.dtype),
                device=device,
            )
            if count:
                transport.recv(h, peer, TAG_HIDDEN, f"hidden ({where})")
            hiddens.append(h)
            if width:
                g = torch.empty(
                    count,
                    width,
                    dtype=self._dtype(self.spec.router_dtype),
                    device=device,
                )
                if count:
                    transport.recv(
                        g, peer, TAG_ROUTER_LOGITS, f"router logits ({where})"
                    )
                logits.append(g)
        extras = {"router_logits": torch.cat(logits)} if width else {}
        hidden = hiddens[0] if len(hiddens) == 1 else torch.cat(hiddens)
        return hidden, extras

    def send_ffn_output(self, hidden: torch.Tensor, layer: int, stage: int) -> None:
        state, transport = self._state_or_raise(stage), self._transport_or_raise()
        counts = self._live_counts(state, layer, stage)
        if hidden.shape[0] != sum(counts):
            raise AFDWireError(
                f"{self._me()}: layer {layer} stage {stage} output has "
                f"{hidden.shape[0]} tokens, expected {sum(counts)}"
            )
        where = self._where(layer, stage)
        parts = torch.split(hidden, list(counts))
        for peer, part in zip(state.peers, parts, strict=True):
            if part.shape[0]:
                transport.send(
                    part.contiguous(), peer, TAG_FFN_OUTPUT, f"output ({where})"
                )

    def peers_left(self) -> bool:
        """FFN side: whether every served attention rank closed in order."""
        world = self.world
        return world is not None and all(
            world.peer_left(p) for p in self.attention_peers
        )
