# SPDX-License-Identifier: Apache-2.0
"""CPU kernels of the CAM async contract (``cam_async_ops.py``), over the
AFD world's data path (shared-memory rings or gloo): ``ops: reference``.

Every message starts with a header (magic, sequence number, layer, stage,
counts), so what the hardware would silently mis-pair is a clear error here:
a dispatch past the capacity, a combine asked for out of order, a sequence gap
or a layer this model does not exchange.

The FFN side reads each attention rank on a thread of its own and queues what
arrives: dispatches are served from any source, in arrival order, and a lost
peer is noticed at once (a receive bound to one peer fails when it dies).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from dataclasses import dataclass

import torch

from afd_plugin.connectors.base import AFDPeerError, DispatchWork, ExchangeSpec
from afd_plugin.connectors.gloo_world import GlooWorld
from afd_plugin.connectors.npu.cam_async_ops import (
    CamAsyncOps,
    dequantize_per_token,
    quantize_per_token,
    routed_order,
)
from afd_plugin.connectors.p2p_base import DataTransport
from afd_plugin.topology import WorldLayout, expert_block, home_ffn_rank
from afd_plugin.wire import AFDWireError

logger = logging.getLogger("afd_plugin")

MAGIC_DISPATCH = 0x43414D44  # "CAMD"
MAGIC_COMBINE = 0x43414D43  # "CAMC"
DISPATCH_HEADER = 7  # magic, seq, layer, stage, tokens, topk, quant
COMBINE_HEADER = 6  # magic, seq, layer, stage, local rows, routed rows
TAG_DISPATCH = 8
TAG_DISPATCH_ROWS = 9
TAG_DISPATCH_SCALES = 10
TAG_DISPATCH_IDS = 11
TAG_COMBINE = 12
TAG_COMBINE_ROWS = 13


@dataclass(frozen=True)
class _Pending:
    seq: int
    layer: int
    stage: int


class _Closed(Exception):
    """Queued by ``close()``: wakes a dispatch_recv with nothing to serve."""


class ReferenceCamAsyncOps(CamAsyncOps):
    """The CAM async ops of one rank, as CPU code over ``transport``."""

    def __init__(
        self,
        world: GlooWorld,
        transport: DataTransport,
        layout: WorldLayout,
        role: str,
        rank: int,
        spec: ExchangeSpec,
        capacity: int,
        quant: bool,
    ) -> None:
        self.world = world
        self.transport = transport
        self.layout = layout
        self.role = role
        self.rank = rank
        self.spec = spec
        self.capacity = capacity
        self.quant = quant
        self.dtype = getattr(torch, spec.dtype)
        self._seq: dict[int, int] = {}
        """Per peer (global rank): messages sent (attention) or received (FFN)."""
        self._pending: dict[int, deque[_Pending]] = {}
        self._answered: dict[int, int] = {}
        self._inbox: queue.Queue[DispatchWork | BaseException] = queue.Queue()
        self._closing = threading.Event()
        self._readers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._gone = 0
        """Attention ranks whose reader ended with their orderly leave."""
        if role == "ffn":
            self.experts_of: dict[int, range] = {}
            for a in range(layout.num_attention):
                thread = threading.Thread(
                    target=self._read,
                    args=(a,),
                    name=f"afd-cam-async-read-{a}",
                    daemon=True,
                )
                self._readers.append(thread)
            for thread in self._readers:
                thread.start()

    def _me(self) -> str:
        return f"AFD {self.role} rank {self.rank}"

    def _experts(self, ffn_rank: int, layer: int) -> range:
        width = self.spec.layer(layer).router_logits
        if not width:
            return range(0)
        return expert_block(ffn_rank, width, self.layout.num_ffn)

    def _check_capacity(self, tokens: int, layer: int, who: str) -> None:
        if tokens > self.capacity:
            raise AFDWireError(
                f"{self._me()}: {who} {tokens} tokens in one dispatch of layer "
                f"{layer}, past the capacity of {self.capacity} "
                "(connector_extra_config.max_num_tokens_per_rank, which must be at "
                "least vLLM's max_num_batched_tokens on every role)"
            )

    # -- attention ----------------------------------------------------------

    def dispatch_send(
        self,
        ffn_rank: int,
        layer: int,
        stage: int,
        hidden: torch.Tensor,
        topk_ids: torch.Tensor,
    ) -> None:
        tokens = hidden.shape[0]
        self._check_capacity(tokens, layer, "sends")
        peer = self.layout.global_rank("ffn", ffn_rank)
        seq = self._seq.get(peer, 0)
        topk = topk_ids.shape[1] if topk_ids.dim() == 2 else 0
        header = torch.tensor(
            [MAGIC_DISPATCH, seq, layer, stage, tokens, topk, int(self.quant)],
            dtype=torch.int64,
        )
        what = f"dispatch {seq} (layer {layer}, stage {stage})"
        self.transport.send(header, peer, TAG_DISPATCH, what)
        if tokens:
            if self.quant:
                rows, scales = quantize_per_token(hidden)
                self.transport.send(rows, peer, TAG_DISPATCH_ROWS, what)
                self.transport.send(scales, peer, TAG_DISPATCH_SCALES, what)
            else:
                self.transport.send(hidden.contiguous(), peer, TAG_DISPATCH_ROWS, what)
            if topk:
                ids = topk_ids.to(torch.int32).contiguous()
                self.transport.send(ids, peer, TAG_DISPATCH_IDS, what)
        self._seq[peer] = seq + 1
        self._pending.setdefault(peer, deque()).append(_Pending(seq, layer, stage))

    def combine_recv(
        self, ffn_rank: int, layer: int, stage: int
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        peer = self.layout.global_rank("ffn", ffn_rank)
        pending = self._pending.get(peer)
        if not pending:
            raise AFDWireError(
                f"{self._me()}: combine of layer {layer}, stage {stage} from ffn "
                f"rank {ffn_rank} without a dispatch to answer"
            )
        expected = pending[0]
        if (expected.layer, expected.stage) != (layer, stage):
            raise AFDWireError(
                f"{self._me()}: combine of layer {layer}, stage {stage} asked "
                f"before that of layer {expected.layer}, stage {expected.stage} "
                f"(dispatched earlier to ffn rank {ffn_rank}): the stages of one "
                "CAM async pair are answered in the order they were dispatched"
            )
        what = f"the combine of dispatch {expected.seq} (layer {layer}, stage {stage})"
        header = torch.empty(COMBINE_HEADER, dtype=torch.int64)
        self.transport.recv(header, peer, TAG_COMBINE, what)
        magic, seq, h_layer, h_stage, local, routed = header.tolist()
        if magic != MAGIC_COMBINE or (seq, h_layer, h_stage) != (
            expected.seq,
            layer,
            stage,
        ):
            raise AFDWireError(
                f"{self._me()}: {self.world.describe(peer)} answered with "
                f"{header.tolist()} where {what} was due"
            )
        pending.popleft()
        rows = torch.empty(
            max(1, local + routed), self.spec.hidden_size, dtype=self.dtype
        )
        self.transport.recv(rows, peer, TAG_COMBINE_ROWS, what)
        return (rows[:local] if local else None), rows[local : local + routed]

    # -- FFN ----------------------------------------------------------------

    def _read(self, attention_rank: int) -> None:
        """One attention rank's dispatches, in its order, into the inbox."""
        peer = self.layout.global_rank("attention", attention_rank)
        try:
            while not self._closing.is_set():
                self._inbox.put(self._read_one(attention_rank, peer))
        except BaseException as exc:  # the daemon reports it
            if self._closing.is_set():
                return
            if isinstance(exc, AFDPeerError) and self.world.peer_left(peer):
                # An orderly leave ends this source only; the last one to
                # leave ends serving (the others may still send).
                with self._lock:
                    self._gone += 1
                    last = self._gone == self.layout.num_attention
                if last:
                    self._inbox.put(exc)
                return
            self._inbox.put(exc)

    def _read_one(self, attention_rank: int, peer: int) -> DispatchWork:
        seq = self._seq.get(peer, 0)
        what = f"dispatch {seq}"
        header = torch.empty(DISPATCH_HEADER, dtype=torch.int64)
        self.transport.recv(header, peer, TAG_DISPATCH, what, idle=True)
        magic, h_seq, layer, stage, tokens, topk, quant = header.tolist()
        source = self.world.describe(peer)
        if magic != MAGIC_DISPATCH or h_seq != seq:
            raise AFDWireError(
                f"{self._me()}: {source} sent {header.tolist()} where dispatch "
                f"{seq} was due"
            )
        if layer not in self.spec.by_layer:
            raise AFDWireError(
                f"{self._me()}: {source} dispatched layer {layer}, which this "
                "model does not exchange"
            )
        self._check_capacity(tokens, layer, f"{source} sent")
        what = f"dispatch {seq} (layer {layer}, stage {stage})"
        hidden = torch.empty(tokens, self.spec.hidden_size, dtype=self.dtype)
        ids = torch.empty(tokens, topk, dtype=torch.int32)
        if tokens:
            if quant:
                q = torch.empty(tokens, self.spec.hidden_size, dtype=torch.int8)
                scales = torch.empty(tokens, dtype=torch.float32)
                self.transport.recv(q, peer, TAG_DISPATCH_ROWS, what)
                self.transport.recv(scales, peer, TAG_DISPATCH_SCALES, what)
                hidden = dequantize_per_token(q, scales, self.dtype)
            else:
                self.transport.recv(hidden, peer, TAG_DISPATCH_ROWS, what)
            if topk:
                self.transport.recv(ids, peer, TAG_DISPATCH_IDS, what)
        self._seq[peer] = seq + 1
        experts = self._experts(self.rank, layer)
        token_rows, _, expert_ids = routed_order(ids, experts)
        counts = (
            torch.bincount(expert_ids - experts.start, minlength=len(experts))
            if len(experts)
            else torch.empty(0, dtype=torch.int64)
        )
        return DispatchWork(
            layer=layer,
            stage=stage,
            source=attention_rank,
            hidden=hidden,
            home=home_ffn_rank(attention_rank, self.layout.num_ffn) == self.rank,
            routed=hidden[token_rows],
            routed_experts=expert_ids,
            expert_counts=counts,
        )

    def dispatch_recv(self) -> DispatchWork:
        item = self._inbox.get()
        if isinstance(item, _Closed):
            raise AFDPeerError(f"{self._me()}: the CAM async ops were closed")
        if isinstance(item, BaseException):
            raise item
        return item

    def combine_send(
        self, work: DispatchWork, local: torch.Tensor | None, routed: torch.Tensor
    ) -> None:
        peer = self.layout.global_rank("attention", work.source)
        seq = self._answered.get(peer, 0)
        local_rows = 0 if local is None else local.shape[0]
        if routed.shape[0] != work.routed.shape[0]:
            raise AFDWireError(
                f"{self._me()}: {routed.shape[0]} routed output rows for the "
                f"{work.routed.shape[0]} routed rows of layer {work.layer}"
            )
        header = torch.tensor(
            [MAGIC_COMBINE, seq, work.layer, work.stage, local_rows, routed.shape[0]],
            dtype=torch.int64,
        )
        parts = [p for p in (local, routed) if p is not None and p.shape[0]]
        if parts:
            rows = parts[0] if len(parts) == 1 else torch.cat(parts)
        else:
            # An FFN rank with nothing routed to it still answers: one row.
            rows = torch.zeros(1, self.spec.hidden_size, dtype=self.dtype)
        what = f"the combine of dispatch {seq} (layer {work.layer}, stage {work.stage})"
        self.transport.send(header, peer, TAG_COMBINE, what)
        self.transport.send(
            rows.to(self.dtype).contiguous(), peer, TAG_COMBINE_ROWS, what
        )
        self._answered[peer] = seq + 1

    def peers_left(self) -> bool:
        return all(
            self.world.peer_left(self.layout.global_rank("attention", a))
            for a in range(self.layout.num_attention)
        )

    def close(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        self._inbox.put(_Closed())
        self._pending.clear()
