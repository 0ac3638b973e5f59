# SPDX-License-Identifier: Apache-2.0
"""``CAMAsyncAFDConnector``: the Ascend connector without a control plane.

``control_plane is None`` (AFD-I2): the FFN side serves whatever arrives, and
everything it needs travels in the dispatch payload (hidden rows, top-k
expert ids, token count, layer index, source rank). The gate runs on the
attention side, whose router picks the experts; the top-k weights stay there
and are applied at the combine. Eager only.

World: attention ranks first (attention a is world rank a, FFN j is
``A + j``), any positive sizes; FFN j owns experts ``expert_block(j, E, F)``
and the home rank ``a % F`` also runs attention a's dense layers and shared
experts.

Every op call and communicator sits behind one ``CamAsyncOps`` object
(``cam_async_ops.py``): the vendor's library (``ops: ascend``, loaded at
``init_afd_connector()``) or the CPU kernels of the same contract
(``ops: reference``, ``cam_async_reference.py``). The module imports without
``torch_npu``.
"""

from __future__ import annotations

import torch

from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import AFDConnector, DispatchWork, ExchangeSpec
from afd_plugin.connectors.cpu.schema import P2pGlooExtraConfig
from afd_plugin.connectors.cpu.shm_transport import ShmTransport, choose_shm
from afd_plugin.connectors.gloo_world import GlooWorld
from afd_plugin.connectors.npu.cam_async_ops import (
    CamAsyncOps,
    dispatched_tokens,
    ensure_cam_async_ops_available,
    routed_order,
)
from afd_plugin.connectors.npu.cam_async_reference import ReferenceCamAsyncOps
from afd_plugin.connectors.npu.cam_p2p_ops import CamOpsUnavailable
from afd_plugin.connectors.npu.schema import CAMAsyncExtraConfig
from afd_plugin.connectors.p2p_base import DataTransport, GlooTransport
from afd_plugin.topology import WorldLayout, expert_block, home_ffn_rank
from afd_plugin.wire import AFDWireError


class _Sent:
    """What the attention side keeps of one MoE call until its combine."""

    def __init__(self, rows: int, hidden_size: int) -> None:
        self.rows = rows
        self.hidden_size = hidden_size
        self.parts: list[
            tuple[int, int, int, torch.Tensor, torch.Tensor, torch.Tensor]
        ] = []
        """(stage, ffn rank, first row, token indices, their ids, their weights)."""


class CAMAsyncAFDConnector(AFDConnector):
    """Dispatch to every FFN rank, combine what they answer; no control plane."""

    extra: CAMAsyncExtraConfig
    control_plane = None

    def __init__(self, config: AFDConfig, rank: int) -> None:
        super().__init__(config, rank)
        self.layout = WorldLayout(
            config.num_attention_ranks, config.num_ffn_ranks, attention_first=True
        )
        self.layout.global_rank(config.role, rank)  # range check, nothing else
        self.world: GlooWorld | None = None
        self.transport: DataTransport | None = None
        self.ops: CamAsyncOps | None = None
        self._sent: dict[tuple[int, int], _Sent] = {}
        self.dispatches = 0
        self.request_starts: tuple[int, ...] = ()
        """Token offsets of the current step's requests (attention side), where
        ``async_moe_ubatching`` splits a call."""

    @property
    def is_attention(self) -> bool:
        return self.config.is_attention

    @property
    def dispatches_topk(self) -> bool:
        return True

    def note_step_requests(self, request_starts: tuple[int, ...]) -> None:
        self.request_starts = request_starts

    # -- lifecycle ----------------------------------------------------------

    def bind(self, spec: ExchangeSpec) -> None:
        moe = [x.layer for x in spec.layers if x.kind == "moe" and not x.router_logits]
        if moe:
            raise AFDWireError(
                f"CAMAsyncAFDConnector routes on the attention side, but MoE "
                f"layers {moe} of this model run their gate on the FFN side: set "
                "additional_config.afd.compute_gate_on_attention true"
            )
        super().bind(spec)

    def init_afd_connector(self) -> None:
        if self.world is not None:
            if self.world.connected and self.ops is not None:
                return
            self.close()
        if self.spec is None:
            raise RuntimeError("CAMAsyncAFDConnector.bind(spec) must come before init")
        if self.extra.ops == "ascend":
            # Before the rendezvous: a rank without the library says so at once.
            ensure_cam_async_ops_available()
        self.world = GlooWorld.of(self.config, self.layout, self.rank)
        self.dispatches = 0
        self.world.join(self.spec)
        try:
            self.ops = self._open_ops(self.world)
        except BaseException:
            self.close()
            raise

    def _open_ops(self, world: GlooWorld) -> CamAsyncOps:
        if self.extra.ops == "ascend":
            raise CamOpsUnavailable(
                "CAMAsyncAFDConnector with ops 'ascend': the CAM library loaded, "
                "but the HCCL communicators its ops run on are not in this build"
            )
        assert self.spec is not None
        me = world.global_rank
        others = tuple(g for g in range(self.layout.world_size) if g != me)
        # Every rank decides over the whole world, so both ends of a pair agree.
        cpu = P2pGlooExtraConfig(
            rendezvous_timeout_s=self.extra.rendezvous_timeout_s,
            peer_timeout_s=self.extra.peer_timeout_s,
            transport=self.extra.transport,
        )
        if self.is_attention:
            peers = tuple(
                self.layout.global_rank("ffn", j) for j in range(self.layout.num_ffn)
            )
        else:
            peers = tuple(
                self.layout.global_rank("attention", a)
                for a in range(self.layout.num_attention)
            )
        if choose_shm(cpu, world, others):
            self.transport = ShmTransport(
                world, peers, cpu, is_ffn=not self.is_attention
            )
        else:
            self.transport = GlooTransport(world)
        return ReferenceCamAsyncOps(
            world,
            self.transport,
            self.layout,
            self.config.role,
            self.rank,
            self.spec,
            self.extra.max_num_tokens_per_rank,
            bool(self.extra.dynamicQuant),
        )

    def close(self) -> None:
        ops, self.ops = self.ops, None
        transport, self.transport = self.transport, None
        world, self.world = self.world, None
        self._sent.clear()
        if ops is not None:
            ops.close()
        if world is not None:
            world.announce_leave()
        if transport is not None:
            transport.close()
        if world is not None:
            world.close()

    def _ops_or_raise(self) -> CamAsyncOps:
        if self.ops is None:
            raise RuntimeError(
                f"AFD {self.config.role} rank {self.rank}: the connector is not "
                "initialised (init_afd_connector() not called, or closed)"
            )
        return self.ops

    # -- no control plane -----------------------------------------------------

    def update_state_from_dp_metadata(self, payload: object) -> None:
        raise RuntimeError(
            "CAMAsyncAFDConnector has no control plane: nothing announces a step "
            "(callers check connector.control_plane first, AFD-I2)"
        )

    # -- attention side -------------------------------------------------------

    def _split(self, rows: int) -> list[tuple[int, int]]:
        """The (first row, row count) of each dispatch of one MoE call."""
        if not self.extra.async_moe_ubatching or rows < 2:
            return [(0, rows)]
        middle = rows / 2
        inside = [s for s in self.request_starts if 0 < s < rows]
        cut = min(inside, key=lambda s: abs(s - middle)) if inside else rows // 2
        return [(0, cut), (cut, rows - cut)]

    def send_attn_output(
        self, hidden: torch.Tensor, layer: int, stage: int, **extras: torch.Tensor
    ) -> None:
        ops = self._ops_or_raise()
        assert self.spec is not None
        moe = self.spec.layer(layer).kind == "moe"
        rows = hidden.shape[0]
        if moe:
            ids, weights = extras.get("topk_ids"), extras.get("topk_weights")
            if ids is None or weights is None:
                raise AFDWireError(
                    f"layer {layer} is an MoE layer: CAMAsyncAFDConnector needs its "
                    "topk_ids and topk_weights (the router runs on attention)"
                )
        else:
            ids = torch.empty(rows, 0, dtype=torch.int32)
            weights = torch.empty(rows, 0, dtype=torch.float32)
        sent = _Sent(rows, hidden.shape[1])
        num_ffn = self.layout.num_ffn
        home = home_ffn_rank(self.rank, num_ffn)
        per_call = self.extra.async_moe_num_ubatches
        for ubatch, (first, count) in enumerate(self._split(rows)):
            # The dispatch stage: the caller's stage, then the micro-batch
            # inside this MoE call (both pair in order at the combine).
            ubatch += stage * per_call
            part = slice(first, first + count)
            for j in range(num_ffn):
                experts = self._experts(j, layer)
                tokens = dispatched_tokens(ids[part], experts, j == home)
                mine = hidden[part][tokens]
                mine_ids = ids[part][tokens]
                ops.dispatch_send(j, layer, ubatch, mine, mine_ids)
                sent.parts.append(
                    (ubatch, j, first, tokens, mine_ids, weights[part][tokens])
                )
        self.dispatches += 1
        self._sent[(layer, stage)] = sent

    def _experts(self, ffn_rank: int, layer: int) -> range:
        assert self.spec is not None
        width = self.spec.layer(layer).router_logits
        if not width:
            return range(0)
        return expert_block(ffn_rank, width, self.layout.num_ffn)

    def recv_ffn_output(self, layer: int, stage: int) -> torch.Tensor:
        ops = self._ops_or_raise()
        assert self.spec is not None
        sent = self._sent.pop((layer, stage))
        out = torch.zeros(sent.rows, sent.hidden_size, dtype=torch.float32)
        for ubatch, j, first, tokens, ids, weights in sent.parts:
            local, routed = ops.combine_recv(j, layer, ubatch)
            at = tokens + first
            if local is not None:
                out.index_add_(0, at, local.float())
            if routed.shape[0]:
                rows, slots, _ = routed_order(ids, self._experts(j, layer))
                scaled = routed.float() * weights[rows, slots].float()[:, None]
                out.index_add_(0, at[rows], scaled)
        return out.to(getattr(torch, self.spec.dtype))

    # -- FFN side -------------------------------------------------------------

    def recv_attn_output(
        self, layer: int, stage: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise RuntimeError(
            "CAMAsyncAFDConnector has no control plane: the FFN side serves "
            "recv_dispatch() in arrival order, not a layer loop"
        )

    def send_ffn_output(self, hidden: torch.Tensor, layer: int, stage: int) -> None:
        raise RuntimeError(
            "CAMAsyncAFDConnector answers each dispatch with send_combine()"
        )

    def recv_dispatch(self) -> DispatchWork:
        work = self._ops_or_raise().dispatch_recv()
        self.dispatches += 1
        return work

    def send_combine(
        self, work: DispatchWork, local: torch.Tensor | None, routed: torch.Tensor
    ) -> None:
        self._ops_or_raise().combine_send(work, local, routed)

    def peers_left(self) -> bool:
        ops = self.ops
        return ops is not None and ops.peers_left()
